//! The final release: token-checked (or kept for the minimum hold), sent where the
//! acquisition's requests ran (`inbox::Requests`) over the renewals' connection, once the
//! command's whole group is gone, within a bound so that redlock ends within a second of its
//! command when Redis hangs.

use super::*;

/// The longest the final release waits for an answer after the command ended (docs/reference.md:
/// redlock ends within a second of the command if Redis hangs). Waiting longer buys nothing: a
/// release sent to a slow server still runs when the server gets to it, after redlock has
/// gone; one that never runs leaves the lock to expire with its lease. (One the server refused
/// without running it is sent again for up to the release timeout: see `Store::release`.)
pub(super) const FINAL_RELEASE: Duration = Duration::from_secs(1);

/// What the final release needs: it runs where the acquisition's requests ran, over the
/// connection the renewals used (the acquisition's), and ends at the reply, a signal, or the
/// bound.
pub(super) struct FinalRelease<'a> {
    pub(super) inbox: &'a Inbox<'a, Reply>,
    pub(super) lock: &'a Lock,
    pub(super) store: &'a Store,
    pub(super) token: &'a Token,
    pub(super) fence: u64,
    pub(super) key: &'a str,
    pub(super) log: Log,
    pub(super) worker: Requests,
}

impl FinalRelease<'_> {
    /// Token-checked release (or keep for the minimum hold) within `bound`: waiting
    /// `bound.answer` at most for a server that does not answer; one known not to have run is
    /// sent again, up to the release timeout (see `Store::release`). The connection may have
    /// sat idle for the whole run: if it was closed, a fresh one is tried.
    pub(super) fn release(
        &self,
        session: Kept,
        min_hold: Duration,
        bound: ReleaseBound,
        status: Option<ChildStatus>,
        why: Option<String>,
    ) -> anyhow::Result<Release> {
        let within = self.store.release_within(bound);
        let deadline = BootInstant::now() + within;
        // For the history: the fence held (a lost lock is marked as such), how the command ended.
        let report = Ending {
            held_fence: Some(self.fence),
            exit: match status {
                Some(ChildStatus::Exited(code)) => Some(code),
                _ => None,
            },
            signal: match status {
                Some(ChildStatus::Signaled(signal)) => Some(signal),
                _ => None,
            },
            why,
        };
        let (lock, store, token) = (self.lock.clone(), self.store.clone(), self.token.clone());
        let log = self.log;
        self.worker
            .request(&self.inbox.reporter(), deadline, move || {
                let request = ReleaseRequest {
                    token: &token,
                    min_hold,
                    ending: &report,
                };
                let released = store.release(&lock, session, &request, bound, log);
                Reply::Released(released)
            });
        let released = loop {
            match self.inbox.next(deadline) {
                Some(Incoming::Reply(Reply::Released(released))) => break released?,
                Some(Incoming::Panicked(panic)) => anyhow::bail!("the release panicked: {panic}"),
                Some(Incoming::Signal(signal)) if signals::terminates(signal) => {
                    return Err(fail(
                        Failure::Unavailable,
                        format!("{} received while releasing", signals::name(signal)),
                    ));
                }
                _ if BootInstant::now() >= deadline => {
                    return Err(fail(
                        Failure::Unavailable,
                        format!("no answer within {}", duration::display(within)),
                    ));
                }
                _ => {}
            }
        };
        let key = self.key;
        match released {
            Release::Released => self.log.step(format_args!("released lock '{key}'")),
            Release::Kept(left) => self.log.step(format_args!(
                "keeping lock '{key}' for {} more (the minimum hold)",
                duration::display(left)
            )),
            Release::StillHeld(holds) => self.log.step(format_args!(
                "released one hold of lock '{key}'; the enclosing invocation keeps it ({holds} left)"
            )),
            Release::NotHeld => {}
        }
        Ok(released)
    }
}
