//! The supervisor proper: a state machine on the main thread with one method per kind of
//! event (a signal, a renewal's reply, a child's change of state, the clock), deciding when
//! the command must be stopped and by when it must be dead, until its whole process group is
//! gone.

use super::*;

/// The lease lost (or no longer ours to keep, `failure` says which, and `why`): the command
/// is being stopped, and must be dead by `kill_by`.
pub(super) struct Lost {
    pub(super) kill_by: BootInstant,
    pub(super) failure: Failure,
    pub(super) why: String,
    /// How the command had ended when the loss was found, if it had: redlock, stalled (a
    /// SIGSTOP, a paused VM), found both on waking, and cannot tell which came first.
    ended_before: Option<ChildStatus>,
}

pub(super) struct Supervisor<'a> {
    pub(super) inbox: &'a Inbox<'a, Reply>,
    pub(super) job: &'a Job,
    pub(super) key: &'a str,
    pub(super) log: Log,
    pub(super) renewer: Renewer<'a>,
    pub(super) lost: Option<Lost>,
    pub(super) command: Stopper,
    pub(super) max_runtime_at: Option<BootInstant>,
    pub(super) timed_out: bool,
    /// The first terminating signal received and passed on.
    pub(super) signalled: Option<i32>,
}

impl Supervisor<'_> {
    /// One event at a time until the command's whole group is gone (or given up on).
    pub(super) fn run_until_gone(&mut self) -> Ended {
        loop {
            match self.inbox.next(self.wake_at()) {
                Some(Incoming::Signal(signal)) if signals::terminates(signal) => {
                    self.on_signal(signal);
                }
                Some(Incoming::Reply(Reply::Renewed(renewed))) => self.on_renewed(renewed),
                Some(Incoming::Panicked(panic)) => {
                    self.on_lost(
                        format!("the renewal failed inside redlock ({panic})"),
                        Failure::Lost,
                    );
                }
                // SIGCHLD, a late reply, or the clock: reaped and checked below, every turn.
                Some(Incoming::Signal(_) | Incoming::Reply(Reply::Released(_))) | None => {}
            }
            self.command.reap();
            if let Some(ended) = self.on_time() {
                return ended;
            }
        }
    }

    /// The next instant something is due; the loop wakes then at the latest.
    fn wake_at(&self) -> BootInstant {
        let now = BootInstant::now();
        let mut at = now + MAX_NAP;
        let mut consider = |due: BootInstant| at = at.min(due);
        match self.lost {
            None => {
                consider(self.renewer.window().term_at);
                self.renewer.due_at().map(&mut consider);
            }
            Some(Lost { kill_by, .. }) if !self.command.killed() => consider(kill_by),
            Some(_) => {}
        }
        self.command.due_at().map(&mut consider);
        if let Some(limit) = self.max_runtime_at
            && !self.timed_out
            && self.command.exited().is_none()
        {
            consider(limit);
        }
        // A deadline already acted on must not make this a busy loop: never earlier than now.
        at.max(now)
    }

    /// A terminating signal: passed on to the command's group, exactly as received.
    fn on_signal(&mut self, signal: i32) {
        self.log.step(format_args!(
            "forwarding {} to the command",
            signals::name(signal)
        ));
        self.command.forward(signal);
        self.signalled.get_or_insert(signal);
    }

    fn on_renewed(&mut self, renewed: Renewed) {
        // Lost already: nothing a renewal says changes that.
        if self.lost.is_none() {
            let verdict = self.renewer.on_reply(renewed);
            self.on_verdict(verdict);
        }
    }

    fn on_verdict(&mut self, verdict: Verdict) {
        match verdict {
            Verdict::Confirmed { mended } => {
                if mended {
                    self.log
                        .notice(format_args!("renewing lock '{}' works again", self.key));
                }
                self.log.step(format_args!(
                    "renewed lock '{}' ({} of lease left)",
                    self.key,
                    duration::display(self.renewer.window().valid_until.remaining())
                ));
            }
            Verdict::Lost => self.on_lost(
                "the key was deleted, expired, or taken by another holder".into(),
                Failure::Lost,
            ),
            // A refused password or a permission taken away is not going to come back by
            // itself: stop now, with the code that says what to fix, not at the lease's end.
            Verdict::Refused(err) => {
                let failure = match failure_of(&err) {
                    Some(Failure::Auth) => Failure::Auth,
                    _ => Failure::Lost,
                };
                self.on_lost(format!("{err:#}"), failure);
            }
            Verdict::Troubled { why, first } => {
                if first {
                    self.log.warn(format_args!(
                        "renewing lock '{}' failed: {why}; retrying (the command is stopped in {} if this goes on)",
                        self.key,
                        duration::display(self.renewer.window().term_at.remaining())
                    ));
                }
            }
        }
    }

    /// The lock is gone or taken (or cannot be kept): stop the command at once, SIGKILL after
    /// the loss grace, and in any case before the lease can lapse.
    fn on_lost(&mut self, why: String, failure: Failure) {
        if self.lost.is_some() {
            return;
        }
        let window = self.renewer.window();
        self.lose(why, failure, "", window.kill_at);
        self.command
            .stop_unless_gone((BootInstant::now() + window.loss_grace).min(window.kill_at));
    }

    /// Records the loss and says what becomes of the command: stopped (`stopping` says how
    /// soon), or already ended, with its status (then only what it left in its group, if
    /// anything, is stopped).
    pub(super) fn lose(
        &mut self,
        why: String,
        failure: Failure,
        stopping: &str,
        kill_by: BootInstant,
    ) {
        let ended_before = self.command.exited();
        let fate = match ended_before {
            None => format!("stopping the command{stopping}"),
            Some(status) if self.command.gone() => {
                format!("the command had already ended ({})", how_it_ended(status))
            }
            Some(status) => format!(
                "the command had already ended ({}); stopping what it left in its group",
                how_it_ended(status)
            ),
        };
        self.log
            .notice(format_args!("lost lock '{}': {why}; {fate}", self.key));
        self.lost = Some(Lost {
            kill_by,
            failure,
            why,
            ended_before,
        });
    }

    /// Acts on the deadlines that have come; says when the loop is over.
    pub(super) fn on_time(&mut self) -> Option<Ended> {
        let now = BootInstant::now();
        if self.lost.is_none() {
            self.keep_lease(now);
        }
        if let Some(limit) = self.max_runtime_at
            && now >= limit
            && !self.timed_out
            && self.command.exited().is_none()
        {
            self.timed_out = true;
            self.log.notice(format_args!(
                "--max-runtime {} elapsed; stopping the command",
                duration::display(self.job.max_runtime.unwrap_or_default())
            ));
            self.command.stop_with_grace();
        }
        if let Some(Lost { kill_by, .. }) = self.lost
            && now >= kill_by
        {
            self.command.stop_unless_gone(now);
        }
        self.command.on_time(now, self.log)
    }

    /// Renews when due; stops the command when renewals went unconfirmed so long that it must
    /// be dead before the lease can lapse.
    fn keep_lease(&mut self, now: BootInstant) {
        let window = self.renewer.window();
        if now < window.term_at {
            if let Some(verdict) = self
                .renewer
                .renew_if_due(&self.inbox.reporter(), Reply::Renewed)
            {
                self.on_verdict(verdict);
            }
            return;
        }
        let (confirmed_at, trouble) = self.renewer.confirmed();
        let why = format!(
            "renewals not confirmed for {} ({})",
            duration::display(now.since(confirmed_at)),
            trouble.unwrap_or("no reply")
        );
        self.lose(
            why,
            Failure::Lost,
            " before the lease can lapse",
            window.kill_at,
        );
        self.command.stop_unless_gone(window.kill_at);
    }

    /// After the loop: the terminal back, renewals stopped, the lock released (or left to
    /// expire, or found lost), and the exit status.
    pub(super) fn finish(self, ended: Ended, ending: FinalRelease<'_>) -> anyhow::Result<Done> {
        self.command.reclaim_terminal();
        crate::failpoint::hit("ending");
        // A release known not to have run is sent again, but not past the lease's end.
        let lease_ends = Some(self.renewer.window().valid_until);
        let hasty = ReleaseBound {
            answer: HASTY_RELEASE,
            lease_ends,
        };
        // Stops renewing; a renewal still in flight that lands after the release finds the
        // token gone, or its hold over (kept for the minimum hold), and changes nothing. The
        // release takes the renewals' connection when none is in flight on it, else a new one.
        let session = self.renewer.stop();
        let key = self.key;
        let lost = self.lost.as_ref().map(|lost| lost.failure);
        let status = self
            .command
            .exited()
            .unwrap_or(ChildStatus::Signaled(Signal::SIGKILL as i32));
        let by_us = || {
            if let Some(failure) = lost {
                Done::Reported(failure)
            } else if self.timed_out {
                Done::Reported(Failure::MaxRuntime)
            } else {
                Done::Child(status)
            }
        };
        if let Ended::Survivors = ended {
            // Releasing now would let the next holder run beside them: let the lease run out.
            self.log.warn(format_args!(
                "processes of the command's group outlived SIGKILL by {}; lock '{key}' is left to expire instead of being released",
                duration::display(SURVIVAL_LIMIT)
            ));
            return Ok(by_us());
        }
        if let Some(lost) = &self.lost {
            // Token-checked, so harmless if the lock is someone else's by now. The history says
            // why the command was stopped, or that it had ended (with its status beside),
            // whether the lock is still held there or not.
            let why = Some(match lost.ended_before {
                None => format!("stopped: {}", lost.why),
                Some(_) => format!("lost after the command ended: {}", lost.why),
            });
            let _ = ending.release(session, Duration::ZERO, hasty, Some(status), why);
            if let Some(status) = lost.ended_before {
                // 125 all the same: the lease may have lapsed while the command still ran.
                self.log.notice(format_args!(
                    "the command had ended ({}), but lock '{key}' may have lapsed before it did: exiting {}",
                    how_it_ended(status),
                    crate::exit::LOST
                ));
            }
            return Ok(by_us());
        }
        let bound = ReleaseBound {
            answer: if self.signalled.is_some() {
                HASTY_RELEASE
            } else {
                FINAL_RELEASE
            },
            lease_ends,
        };
        // Why the command ended, for the history: the limit that stopped it, or the signal
        // redlock passed on to it.
        let why = match (self.timed_out, self.job.max_runtime, self.signalled) {
            (true, Some(limit), _) => Some(format!(
                "stopped at --max-runtime {}",
                duration::display(limit)
            )),
            (_, _, Some(signal)) => Some(format!(
                "{} passed on to the command",
                signals::name(signal)
            )),
            _ => None,
        };
        match ending.release(session, self.job.min_hold, bound, Some(status), why) {
            Ok(Release::NotHeld) => {
                self.log.notice(format_args!(
                    "lock '{key}' was no longer held when the command ended (expired or taken)"
                ));
                return Ok(Done::Reported(Failure::Lost));
            }
            Ok(_) => {}
            Err(err) => self.log.warn(format_args!(
                "could not release lock '{key}' ({err:#}); a release that reached the server runs when the server gets to it, else the lock expires with its lease"
            )),
        }
        if self.timed_out {
            return Ok(Done::Reported(Failure::MaxRuntime));
        }
        if let ChildStatus::Signaled(signal) = status {
            self.log.notice(format_args!(
                "the command was killed by {}",
                signals::name(signal)
            ));
        }
        Ok(Done::Child(status))
    }
}

/// How the command ended, for a message: `exit 3`, `killed by SIGTERM`.
fn how_it_ended(status: ChildStatus) -> String {
    match status {
        ChildStatus::Exited(code) => format!("exit {code}"),
        ChildStatus::Signaled(signal) => format!("killed by {}", signals::name(signal)),
    }
}
