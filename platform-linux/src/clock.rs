//! CLOCK_MONOTONIC: never jumps with wall-clock changes (NTP, a TV box setting its time at
//! boot), so tokens-per-second figures stay honest.

use smolrun_core::platform::Clock;

/// [`Clock`] on CLOCK_MONOTONIC.
#[derive(Debug, Clone, Copy, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid, writable timespec. CLOCK_MONOTONIC exists on every Linux
        // kernel, so the call cannot fail and its status is not checked.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_in_nanoseconds() {
        let clock = MonotonicClock;
        let start = clock.now_ns();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let elapsed = clock.now_ns() - start;
        assert!(
            (20_000_000..2_000_000_000).contains(&elapsed),
            "slept 20 ms, clock says {elapsed} ns"
        );
    }
}
