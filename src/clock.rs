//! Local deadlines on `CLOCK_BOOTTIME`: monotonic (immune to wall-clock jumps) and, unlike
//! `std::time::Instant`, still counting while the machine is suspended. A lease that ran out
//! during a suspend must look expired on wake-up, not resume where it stopped.

use std::ops::Add;
use std::time::Duration;

use nix::time::{ClockId, clock_gettime};

/// Longest single sleep: after a suspend, every wait wakes within this long and re-reads the
/// clock, since the sleeps themselves (`recv_timeout`) run on a clock that stops in suspend.
pub(crate) const MAX_NAP: Duration = Duration::from_millis(250);

/// A point in time on `CLOCK_BOOTTIME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct BootInstant(Duration);

impl BootInstant {
    pub(crate) fn now() -> Self {
        let now = clock_gettime(ClockId::CLOCK_BOOTTIME)
            .expect("CLOCK_BOOTTIME is available on every supported Linux");
        Self(Duration::from(now))
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub(crate) fn since(self, earlier: Self) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// Time from now until `self`, zero if it has passed.
    pub(crate) fn remaining(self) -> Duration {
        self.since(Self::now())
    }

    /// `self - duration`, not before the clock's zero.
    pub(crate) fn minus(self, duration: Duration) -> Self {
        Self(self.0.saturating_sub(duration))
    }

    /// How long to sleep towards `self`: the time left, capped at [`MAX_NAP`].
    pub(crate) fn nap(self) -> Duration {
        self.remaining().min(MAX_NAP)
    }
}

impl Add<Duration> for BootInstant {
    type Output = Self;

    fn add(self, duration: Duration) -> Self {
        Self(self.0 + duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_forward_and_saturates() {
        let a = BootInstant::now();
        std::thread::sleep(Duration::from_millis(5));
        let b = BootInstant::now();
        assert!(b.since(a) >= Duration::from_millis(5));
        assert_eq!(a.since(b), Duration::ZERO);
        assert!((a + Duration::from_secs(1)).remaining() <= Duration::from_secs(1));
        assert_eq!(a.minus(Duration::from_secs(1)).remaining(), Duration::ZERO);
        assert!((b + Duration::from_secs(10)).nap() <= MAX_NAP);
    }
}
