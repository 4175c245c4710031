//! From reset to Rust: one core, at EL1 (qemu -M virt starts the guest there), with FP/SIMD
//! enabled (CPACR_EL1.FPEN: without it the first NEON or floating-point instruction traps),
//! .bss zeroed, a stack, the exception vectors (any exception prints its syndrome and stops
//! the machine: an ARMv8.0 core reaching an sdot would be one) and the MMU on with an identity
//! map: the first GB (UART, GIC, flash) as device memory, the rest (RAM from 0x4000_0000) as
//! normal write-back memory, so that unaligned loads and exclusive accesses (atomics) behave
//! as in an OS's user space.

use core::arch::{asm, global_asm};
use core::ptr::addr_of_mut;

global_asm!(
    r#"
    .section .text.boot, "ax"
    .global _start
_start:
    mrs     x0, mpidr_el1
    and     x0, x0, #0xff
    cbnz    x0, 9f                  // secondary cores (none with -smp 1) sleep
    mrs     x0, CurrentEL
    lsr     x0, x0, #2
    cmp     x0, #1
    b.ne    9f                      // not EL1: nothing here knows how to drop there
    adrp    x0, __stack_top
    add     x0, x0, :lo12:__stack_top
    mov     sp, x0
    mov     x0, #(3 << 20)          // CPACR_EL1.FPEN = 0b11: FP/SIMD at EL1 and EL0
    msr     cpacr_el1, x0
    isb
    adrp    x0, __bss_start
    add     x0, x0, :lo12:__bss_start
    adrp    x1, __bss_end
    add     x1, x1, :lo12:__bss_end
1:  cmp     x0, x1
    b.hs    2f
    str     xzr, [x0], #8
    b       1b
2:  adrp    x0, exception_vectors
    add     x0, x0, :lo12:exception_vectors
    msr     vbar_el1, x0
    isb
    bl      boot_rust
9:  wfe
    b       9b

    // 16 entries of 0x80 bytes: (current EL with SP0, with SPx, lower EL64, lower EL32) x
    // (synchronous, IRQ, FIQ, SError). Each passes its number to `exception`.
    .balign 2048
exception_vectors:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    .balign 128
    mov     x0, #\n
    b       exception
    .endr
"#
);

/// Level-1 translation table: 512 entries of 1 GB (4 KB granule, 39-bit addresses).
#[repr(C, align(4096))]
struct Table([u64; 512]);

static mut LEVEL1: Table = Table([0; 512]);

/// Block descriptor bits: valid block, access flag; AttrIndx selects MAIR_EL1's byte.
const BLOCK: u64 = 0b01 | (1 << 10);
const ATTR_DEVICE: u64 = 0 << 2;
const ATTR_NORMAL: u64 = 1 << 2;
const INNER_SHAREABLE: u64 = 3 << 8;
const EXECUTE_NEVER: u64 = (1 << 53) | (1 << 54);
/// MAIR_EL1: attribute 0 Device-nGnRnE, attribute 1 Normal write-back (read/write allocate).
const MAIR: u64 = 0xff << 8;
/// TCR_EL1: T0SZ = 25 (39-bit addresses), table walks cacheable inner/outer write-back and
/// inner shareable, 4 KB granule, no TTBR1 walks (EPD1), 40-bit physical addresses.
const TCR: u64 = 25 | (1 << 8) | (1 << 10) | (3 << 12) | (1 << 23) | (2 << 32);

#[no_mangle]
extern "C" fn boot_rust() -> ! {
    // SAFETY: runs once, on the only core, before anything reads the table or relies on
    // the memory attributes.
    unsafe { enable_mmu() };
    crate::main()
}

/// # Safety
/// Once, at boot, before any other code runs.
unsafe fn enable_mmu() {
    // SAFETY: nothing else refers to the table.
    let table = unsafe { &mut *addr_of_mut!(LEVEL1) };
    table.0[0] = BLOCK | ATTR_DEVICE | EXECUTE_NEVER;
    for (i, entry) in table.0.iter_mut().enumerate().skip(1) {
        *entry = ((i as u64) << 30) | BLOCK | ATTR_NORMAL | INNER_SHAREABLE;
    }
    let ttbr = table.0.as_ptr() as u64;
    // SAFETY: an identity map of everything this program touches, installed before the MMU
    // is switched on (SCTLR_EL1: M, C and I set; A, strict alignment checking, cleared).
    unsafe {
        asm!(
            "dsb ish",
            "msr mair_el1, {mair}",
            "msr tcr_el1, {tcr}",
            "msr ttbr0_el1, {ttbr}",
            "isb",
            "tlbi vmalle1",
            "dsb ish",
            "isb",
            "mrs {s}, sctlr_el1",
            "orr {s}, {s}, #1",
            "orr {s}, {s}, #(1 << 2)",
            "orr {s}, {s}, #(1 << 12)",
            "bic {s}, {s}, #(1 << 1)",
            "msr sctlr_el1, {s}",
            "isb",
            mair = in(reg) MAIR,
            tcr = in(reg) TCR,
            ttbr = in(reg) ttbr,
            s = out(reg) _,
        );
    }
}

/// Any exception: print what and where, and stop the machine with a failure.
#[no_mangle]
extern "C" fn exception(kind: u64) -> ! {
    let (esr, elr, far): (u64, u64, u64);
    // SAFETY: reading EL1 system registers at EL1.
    unsafe {
        asm!("mrs {}, esr_el1", out(reg) esr);
        asm!("mrs {}, elr_el1", out(reg) elr);
        asm!("mrs {}, far_el1", out(reg) far);
    }
    // ESR_EL1.EC 0x00: an unknown (undefined) instruction, e.g. an sdot on an ARMv8.0 core.
    let what = match esr >> 26 {
        0x00 => "undefined instruction",
        0x07 => "FP/SIMD trapped",
        0x15 => "SVC",
        0x18 => "system register access",
        0x20 | 0x21 => "instruction abort",
        0x24 | 0x25 => "data abort",
        0x26 => "SP alignment",
        0x22 => "PC alignment",
        _ => "other",
    };
    crate::println!(
        "\nEXCEPTION: vector {kind}, {what} (ESR_EL1 {esr:#x}) at {elr:#x}, address {far:#x}"
    );
    crate::semihosting::exit(3)
}
