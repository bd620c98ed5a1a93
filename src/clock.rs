//! Local deadlines on `CLOCK_BOOTTIME`: monotonic (immune to wall-clock jumps) and, unlike
//! `std::time::Instant`, still counting while the machine is suspended. A lease that ran out
//! during a suspend must look expired on wake-up, not resume where it stopped.

use std::ops::Add;
use std::time::Duration;

use nix::time::{ClockId, clock_gettime};

/// Longest wait without a look at the state, whatever the deadlines: a bound on every loop's
/// sleep. Deadlines themselves are kept to the millisecond, suspend included (the inbox's
/// timer), so this only bounds a wait that has none.
pub(crate) const MAX_NAP: Duration = Duration::from_secs(5);

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

    /// The time since boot: the value of `CLOCK_BOOTTIME` at `self`.
    pub(crate) fn since_boot(self) -> Duration {
        self.0
    }
}

impl Add<Duration> for BootInstant {
    type Output = Self;

    fn add(self, duration: Duration) -> Self {
        Self(self.0 + duration)
    }
}

/// The clock drift allowed for over a lease of `ttl`: 1 % of it plus 2 ms (the server's clock
/// may run at a slightly different rate than ours; in quorum mode, each master's).
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
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
        assert_eq!(
            (b + Duration::from_secs(10)).since_boot(),
            b.0 + Duration::from_secs(10)
        );
    }
}
