//! [`MemoryProbe`] for iOS: how much the process uses is its *footprint* (what jetsam counts:
//! `task_info(TASK_VM_INFO).phys_footprint`, dirty and compressed pages, not clean mapped file
//! pages), and how much it may use is its jetsam limit.
//!
//! The limit is read with `memorystatus_control(MEMORYSTATUS_CMD_GET_MEMLIMIT_PROPERTIES)`
//! on the process's own pid (a system call every iOS since 9 has; `os_proc_available_memory`
//! would be simpler but needs iOS 13). When that fails, the default is 65% of `hw.memsize`,
//! which is ~700 MB on the 1 GB A7 iPad Air, the ceiling measured there before iOS kills the
//! process; with `hw.memsize` unreadable too, 700 MB.

use smolrun_core::platform::MemoryProbe;

/// The limit assumed when neither the jetsam limit nor the RAM size can be read (1 GB device).
pub const DEFAULT_JETSAM_LIMIT_BYTES: u64 = 700_000_000;

/// Share of RAM assumed as the jetsam limit when only `hw.memsize` is known, in percent.
pub const DEFAULT_LIMIT_PERCENT_OF_RAM: u64 = 65;

/// `task_vm_info` from <mach/task_info.h> up to `phys_footprint` (revision 1). Darwin packs
/// it to 4 bytes; the kernel fills as much as the count we pass allows.
#[repr(C, packed(4))]
#[derive(Debug, Clone, Copy, Default)]
pub struct TaskVmInfo {
    pub virtual_size: u64,
    pub region_count: i32,
    pub page_size: i32,
    pub resident_size: u64,
    pub resident_size_peak: u64,
    pub device: u64,
    pub device_peak: u64,
    pub internal: u64,
    pub internal_peak: u64,
    pub external: u64,
    pub external_peak: u64,
    pub reusable: u64,
    pub reusable_peak: u64,
    pub purgeable_volatile_pmap: u64,
    pub purgeable_volatile_resident: u64,
    pub purgeable_volatile_virtual: u64,
    pub compressed: u64,
    pub compressed_peak: u64,
    pub compressed_lifetime: u64,
    pub phys_footprint: u64,
}

/// `TASK_VM_INFO` flavor and `TASK_VM_INFO_REV1_COUNT` (in 32-bit words).
pub const TASK_VM_INFO: u32 = 22;
pub const TASK_VM_INFO_REV1_COUNT: u32 = (std::mem::size_of::<TaskVmInfo>() / 4) as u32;

/// `memorystatus_memlimit_properties_t` from <sys/kern_memorystatus.h>: limits in MB, -1 or 0
/// for none.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemlimitProperties {
    pub memlimit_active: i32,
    pub memlimit_active_attr: u32,
    pub memlimit_inactive: i32,
    pub memlimit_inactive_attr: u32,
}

/// `MEMORYSTATUS_CMD_GET_MEMLIMIT_PROPERTIES`.
pub const MEMORYSTATUS_CMD_GET_MEMLIMIT_PROPERTIES: u32 = 8;

/// The limit that applies while the app runs in the foreground (the active limit), in bytes;
/// None when jetsam reports no limit (-1 or 0).
pub fn active_limit_bytes(props: &MemlimitProperties) -> Option<u64> {
    let mb = u64::try_from(props.memlimit_active)
        .ok()
        .filter(|&mb| mb > 0)?;
    Some(mb << 20)
}

/// The jetsam limit to plan with: the one read, else [`DEFAULT_LIMIT_PERCENT_OF_RAM`] of the
/// RAM size, else [`DEFAULT_JETSAM_LIMIT_BYTES`].
pub fn jetsam_limit(read: Option<u64>, ram_bytes: Option<u64>) -> u64 {
    read.or_else(|| ram_bytes.map(|ram| ram / 100 * DEFAULT_LIMIT_PERCENT_OF_RAM))
        .unwrap_or(DEFAULT_JETSAM_LIMIT_BYTES)
}

/// Memory the process may still take: the limit less its footprint.
pub fn available_under_limit(limit: u64, footprint: u64) -> u64 {
    limit.saturating_sub(footprint)
}

/// The iOS memory probe: the limit is found once, the footprint read on every call.
#[derive(Debug, Clone, Copy)]
pub struct IosMemory {
    limit: u64,
    limit_was_read: bool,
}

impl IosMemory {
    /// Probes this process (on other systems: the documented default, for host tests).
    pub fn new() -> IosMemory {
        let read = sys::read_jetsam_limit();
        IosMemory {
            limit: jetsam_limit(read, sys::ram_bytes()),
            limit_was_read: read.is_some(),
        }
    }

    /// The jetsam limit in bytes, and whether it was read (false: a default).
    pub fn limit(&self) -> (u64, bool) {
        (self.limit, self.limit_was_read)
    }
}

impl Default for IosMemory {
    fn default() -> Self {
        IosMemory::new()
    }
}

impl MemoryProbe for IosMemory {
    fn available_bytes(&self) -> u64 {
        available_under_limit(self.limit, self.used_bytes())
    }

    fn used_bytes(&self) -> u64 {
        sys::footprint().unwrap_or(0)
    }
}

#[cfg(target_os = "ios")]
mod sys {
    use super::*;

    extern "C" {
        /// Darwin's memorystatus system call (libsystem_kernel), declared in the SDK's private
        /// <sys/kern_memorystatus.h>; a process may query its own pid.
        fn memorystatus_control(
            command: u32,
            pid: i32,
            flags: u32,
            buffer: *mut libc::c_void,
            buffersize: libc::size_t,
        ) -> libc::c_int;
        /// This task's port: what the SDK's `mach_task_self()` macro reads.
        static mach_task_self_: libc::mach_port_t;
    }

    pub fn footprint() -> Option<u64> {
        let mut info = TaskVmInfo::default();
        let mut count: libc::mach_msg_type_number_t = TASK_VM_INFO_REV1_COUNT;
        // SAFETY: `info` has room for `count` 32-bit words; the kernel writes at most that
        // many and sets `count` to how many it wrote.
        let status = unsafe {
            libc::task_info(
                mach_task_self_,
                TASK_VM_INFO,
                (&mut info as *mut TaskVmInfo).cast(),
                &mut count,
            )
        };
        (status == libc::KERN_SUCCESS && count >= TASK_VM_INFO_REV1_COUNT)
            .then_some(info.phys_footprint)
    }

    pub fn read_jetsam_limit() -> Option<u64> {
        let mut props = MemlimitProperties::default();
        // SAFETY: the kernel writes one MemlimitProperties into `props`, whose size we pass.
        let status = unsafe {
            memorystatus_control(
                MEMORYSTATUS_CMD_GET_MEMLIMIT_PROPERTIES,
                libc::getpid(),
                0,
                (&mut props as *mut MemlimitProperties).cast(),
                std::mem::size_of::<MemlimitProperties>(),
            )
        };
        if status != 0 {
            return None;
        }
        active_limit_bytes(&props)
    }

    pub fn ram_bytes() -> Option<u64> {
        crate::features::sysctl_int("hw.memsize").and_then(|v| u64::try_from(v).ok())
    }
}

/// Off iOS there is no jetsam: the probe answers with the documented defaults, so its
/// arithmetic can be exercised on the host.
#[cfg(not(target_os = "ios"))]
mod sys {
    pub fn footprint() -> Option<u64> {
        None
    }
    pub fn read_jetsam_limit() -> Option<u64> {
        None
    }
    pub fn ram_bytes() -> Option<u64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_vm_info_layout_matches_the_sdk() {
        // phys_footprint sits at byte 144; REV0 is 36 words, REV1 (with phys_footprint) 38.
        assert_eq!(std::mem::offset_of!(TaskVmInfo, phys_footprint), 144);
        assert_eq!(TASK_VM_INFO_REV1_COUNT, 38);
        assert_eq!(std::mem::size_of::<MemlimitProperties>(), 16);
    }

    #[test]
    fn limits_from_jetsam_ram_or_the_default() {
        // An iPad Air (A7, iOS 12) app: active limit 650 MB, inactive 650 MB.
        let ipad = MemlimitProperties {
            memlimit_active: 650,
            memlimit_active_attr: 1,
            memlimit_inactive: 650,
            memlimit_inactive_attr: 1,
        };
        assert_eq!(active_limit_bytes(&ipad), Some(650 << 20));
        let none = MemlimitProperties {
            memlimit_active: -1,
            ..ipad
        };
        assert_eq!(active_limit_bytes(&none), None);
        assert_eq!(
            active_limit_bytes(&MemlimitProperties::default()),
            None,
            "0 means no limit"
        );
        assert_eq!(jetsam_limit(Some(650 << 20), Some(1 << 30)), 650 << 20);
        // 1 GiB of RAM: 65% is 697 MB, the ~700 MB measured on the A7 iPad.
        assert_eq!(jetsam_limit(None, Some(1 << 30)), 697_932_170);
        assert_eq!(jetsam_limit(None, None), DEFAULT_JETSAM_LIMIT_BYTES);
        assert_eq!(available_under_limit(700, 250), 450);
        assert_eq!(available_under_limit(700, 900), 0);
    }

    #[test]
    fn host_probe_uses_the_defaults() {
        let probe = IosMemory::new();
        assert_eq!(probe.limit(), (DEFAULT_JETSAM_LIMIT_BYTES, false));
        assert_eq!(probe.available_bytes(), DEFAULT_JETSAM_LIMIT_BYTES);
    }
}
