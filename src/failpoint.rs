//! Crash points for the fault suite (T14 in docs/reliability.md): in a debug build, with
//! `REDLOCK_FAILPOINT=<point>` set, redlock aborts at that point as a crash would (SIGABRT,
//! no destructor, no release), so the suite can check that every key it leaves behind
//! expires by itself. Release builds compile every point to nothing and ignore the variable.
//!
//! Points: `acquired` (lock taken, nothing started or printed yet), `spawned` (the command
//! runs), `ending` (the command's group is gone, the release not yet sent), `queued` (a
//! waiter has just joined the queue). `stop:<point>` stops redlock there instead (SIGSTOP,
//! the first time the point is reached), as a stall of the machine would (a paused VM, a
//! swapped-out process): the test continues it. One point makes a call fail instead of
//! aborting: `no-renewal-thread` (the system refuses `run` its renewal thread).

/// Aborts here if `REDLOCK_FAILPOINT` names `point`, or stops if it names `stop:<point>`
/// (debug builds only).
#[cfg(debug_assertions)]
pub(crate) fn hit(point: &str) {
    static STOPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let Some(wanted) = std::env::var_os("REDLOCK_FAILPOINT") else {
        return;
    };
    if wanted == point {
        std::process::abort();
    }
    if wanted.to_str().and_then(|text| text.strip_prefix("stop:")) == Some(point)
        && !STOPPED.swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
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
