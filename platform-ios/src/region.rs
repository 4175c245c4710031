//! The region a run's state is carved from (core's arena), allocated with `vm_allocate`:
//! page-aligned, zero-filled on first touch, and counted in the task's `phys_footprint` as its
//! pages are written, which is the number jetsam kills by ([`crate::IosMemory`] reads it), so
//! the memory guard sees the state the moment it is used. Given back with `vm_deallocate`.

#[cfg(target_os = "ios")]
pub use sys::vm_region;

/// `VM_FLAGS_ANYWHERE` (<mach/vm_statistics.h>): the kernel picks the address.
pub const VM_FLAGS_ANYWHERE: i32 = 0x0001;

/// `VM_MAKE_TAG(VM_MEMORY_APPLICATION_SPECIFIC_1)`: `vmmap` and Instruments show the region
/// as the application's own memory, not malloc's.
pub const REGION_TAG: i32 = 240 << 24;

#[cfg(target_os = "ios")]
mod sys {
    use smolrun_core::arena::Region;
    use std::io;
    use std::ptr::NonNull;

    // Declared here rather than taken from libc, which deprecates its mach bindings.
    extern "C" {
        /// This task's port: what the SDK's `mach_task_self()` macro reads.
        static mach_task_self_: libc::mach_port_t;
        fn vm_allocate(
            target: libc::mach_port_t,
            address: *mut libc::uintptr_t,
            size: libc::uintptr_t,
            flags: libc::c_int,
        ) -> libc::c_int;
        fn vm_deallocate(
            target: libc::mach_port_t,
            address: libc::uintptr_t,
            size: libc::uintptr_t,
        ) -> libc::c_int;
    }

    /// `KERN_SUCCESS`.
    const KERN_SUCCESS: libc::c_int = 0;

    /// A `vm_allocate`d region of `bytes` (whole pages) as a core [`Region`].
    pub fn vm_region(bytes: usize) -> io::Result<Region> {
        if bytes == 0 {
            return Ok(Region::empty());
        }
        let mut address: libc::uintptr_t = 0;
        // SAFETY: asks the kernel for new zero-filled pages anywhere in this task; `address`
        // receives where.
        let status = unsafe {
            vm_allocate(
                mach_task_self_,
                &mut address,
                bytes,
                super::VM_FLAGS_ANYWHERE | super::REGION_TAG,
            )
        };
        if status != KERN_SUCCESS {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "vm_allocate of {bytes} bytes for the run's state failed (kern_return \
                     {status}); lower the context (-c)"
                ),
            ));
        }
        /// # Safety
        /// `base..base + len` came from `vm_region`'s `vm_allocate` and is not used afterwards.
        unsafe fn deallocate(base: NonNull<u8>, len: usize) {
            // SAFETY: the caller's promise.
            unsafe { vm_deallocate(mach_task_self_, base.as_ptr() as libc::uintptr_t, len) };
        }
        let base = NonNull::new(address as *mut u8)
            .ok_or_else(|| io::Error::other("vm_allocate returned address 0"))?;
        // SAFETY: the pages are this region's alone, `bytes` long, zero-filled, and given
        // back by `deallocate` when it is dropped.
        Ok(unsafe { Region::from_raw_parts(base, bytes, true, Some(deallocate), "vm_allocate") })
    }
}
