//! The region a run's state is carved from (core's arena), as an anonymous private mapping:
//! page-aligned (direct reads can land in any part), zero-filled on first touch (a KV cache
//! sized for a long context costs RAM only for the positions written), given back whole with
//! munmap when the state is dropped. Android takes the same call.

use smolrun_core::arena::{ArenaPlan, Region};
use std::io;
use std::ptr::NonNull;

/// An anonymous mapping of `bytes` (rounded up to pages by the kernel) as a core [`Region`].
pub fn anonymous_region(bytes: usize) -> io::Result<Region> {
    if bytes == 0 {
        return Ok(Region::empty());
    }
    // SAFETY: a new private anonymous mapping; no file, no fixed address.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANON,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!(
                "mmap of {bytes} anonymous bytes for the run's state failed: {err}; lower the \
                 context (-c)"
            ),
        ));
    }
    /// # Safety
    /// `base..base + len` is a mapping made by `anonymous_region`, not used afterwards.
    unsafe fn unmap(base: NonNull<u8>, len: usize) {
        // SAFETY: the caller's promise. A failure (EINVAL) cannot happen for a range mmap
        // returned; there is nothing to do about it in a drop either way.
        unsafe { libc::munmap(base.as_ptr().cast(), len) };
    }
    // mmap never returns null for a mapping without MAP_FIXED.
    let base =
        NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
    // SAFETY: the mapping is ours alone, `bytes` long, zero-filled, and unmapped by `unmap`
    // when the region is dropped.
    Ok(unsafe { Region::from_raw_parts(base, bytes, true, Some(unmap), "anonymous mmap") })
}

/// An anonymous region of exactly `plan`'s size (refused with the plan's parts if this
/// target cannot address it).
pub fn anonymous_region_for(plan: &ArenaPlan) -> io::Result<Region> {
    let bytes = plan
        .total_usize()
        .map_err(|e| io::Error::new(io::ErrorKind::OutOfMemory, e.to_string()))?;
    anonymous_region(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smolrun_core::arena::Part;

    #[test]
    fn an_anonymous_region_is_page_aligned_zeroed_and_carves_a_plan() {
        let mut plan = ArenaPlan::new();
        plan.add::<f32>(Part::KvCache, 1000, 64);
        plan.add_bytes(Part::ExpertSlots, 10_000);
        let mut region = anonymous_region_for(&plan).unwrap();
        assert_eq!(region.len() as u64, plan.total());
        assert_eq!(region.address() % 4096, 0);
        assert_eq!(region.kind(), "anonymous mmap");
        let mut arena = region.arena(&plan).unwrap();
        let slot = arena.take::<u8>(Part::ExpertSlots, 1, 10_000).unwrap();
        assert_eq!(slot.as_ptr() as usize % 4096, 0);
        let kv = arena.take::<f32>(Part::KvCache, 1000, 64).unwrap();
        assert!(kv.iter().all(|&v| v == 0.0));
        kv.fill(1.5);
        assert_eq!(arena.high_water() as u64, plan.total());
        assert!(anonymous_region(0).unwrap().is_empty());
    }
}
