//! Crash points for the fault suite (T14 in docs/reliability.md): in a debug build, with
//! `REDLOCK_FAILPOINT=<point>` set, redlock aborts at that point as a crash would (SIGABRT,
//! no destructor, no release), so the suite can check that every key it leaves behind
//! expires by itself. Release builds compile every point to nothing and ignore the variable.
//!
//! Points: `acquired` (lock taken, nothing started or printed yet), `spawned` (the command
//! runs), `ending` (the command's group is gone, the release not yet sent), `queued` (a
//! waiter has just joined the queue). One point makes a call fail instead of aborting:
//! `no-renewal-thread` (the system refuses `run` its renewal thread).

/// Aborts here if `REDLOCK_FAILPOINT` names `point` (debug builds only).
#[cfg(debug_assertions)]
pub(crate) fn hit(point: &str) {
    if std::env::var_os("REDLOCK_FAILPOINT").is_some_and(|wanted| wanted == point) {
        std::process::abort();
    }
}

/// Release builds: no crash points.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(crate) fn hit(_point: &str) {}

/// Whether `REDLOCK_FAILPOINT` names `point`, whose call should then fail (debug builds only).
#[cfg(debug_assertions)]
pub(crate) fn fails(point: &str) -> bool {
    std::env::var_os("REDLOCK_FAILPOINT").is_some_and(|wanted| wanted == point)
}

/// Release builds: nothing fails on purpose.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(crate) fn fails(_point: &str) -> bool {
    false
}
