//! What the CPU can do, read from its ID registers (readable at EL1), and its counter.
//!
//! ID_AA64PFR0_EL1.AdvSIMD [23:20]: 0 NEON, 1 NEON with fp16, 0xF none.
//! ID_AA64ISAR0_EL1.DP [47:44]: 1 = SDOT/UDOT (ARMv8.2 dotprod; an A53 or the A7 says 0, and
//! core's kernel table then never installs an sdot kernel).
//! ID_AA64ISAR1_EL1.I8MM [55:52]: 1 = SMMLA.

use core::arch::asm;
use smolrun_core::platform::CpuFeatures;

pub struct IdRegisters {
    pub pfr0: u64,
    pub isar0: u64,
    pub isar1: u64,
    pub midr: u64,
}

pub fn id_registers() -> IdRegisters {
    let (pfr0, isar0, isar1, midr): (u64, u64, u64, u64);
    // SAFETY: reading ID registers at EL1.
    unsafe {
        asm!("mrs {}, id_aa64pfr0_el1", out(reg) pfr0);
        asm!("mrs {}, id_aa64isar0_el1", out(reg) isar0);
        asm!("mrs {}, id_aa64isar1_el1", out(reg) isar1);
        asm!("mrs {}, midr_el1", out(reg) midr);
    }
    IdRegisters {
        pfr0,
        isar0,
        isar1,
        midr,
    }
}

impl IdRegisters {
    pub fn features(&self) -> CpuFeatures {
        let field = |reg: u64, lsb: u32| (reg >> lsb) & 0xf;
        let advsimd = field(self.pfr0, 20);
        CpuFeatures {
            neon: advsimd != 0xf,
            fp16: advsimd == 1,
            dotprod: field(self.isar0, 44) >= 1,
            i8mm: field(self.isar1, 52) >= 1,
            ..CpuFeatures::default()
        }
    }
}

/// Seconds since boot, from the generic timer.
pub fn seconds() -> f64 {
    let (count, freq): (u64, u64);
    // SAFETY: the virtual counter and its frequency are readable at EL1.
    unsafe {
        asm!("mrs {}, cntvct_el0", out(reg) count);
        asm!("mrs {}, cntfrq_el0", out(reg) freq);
    }
    count as f64 / freq.max(1) as f64
}
