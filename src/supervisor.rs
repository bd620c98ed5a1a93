//! `run`'s supervisor: holds the lock while the command runs, and guarantees the order
//! "command's whole process group dead, then lock released".
//!
//! [`Supervisor`] is a state machine on the main thread with one method per kind of event: a
//! signal, a renewal's reply, a child's change of state, and the clock. It decides everything:
//! when to renew (the request itself runs on a worker, see `inbox`), when to stop the command
//! and how. Deadlines live on `CLOCK_BOOTTIME` (see `schedule`):
//!
//! - renewals unconfirmed: SIGTERM the group at the window's `term_at` (`valid_until − margin −
//!   grace`), SIGKILL at its `kill_at` (`valid_until − margin`), so that it is dead before the
//!   lease can lapse in Redis; exit 125;
//! - lock gone or taken: the same, starting at once;
//! - a signal received: forwarded to the group; after INT or TERM, SIGKILL after the grace, or
//!   at once on a second one;
//! - the runtime limit: SIGTERM, SIGKILL after the grace; exit 124;
//! - command exited but others of its group live on: SIGTERM them, SIGKILL after the grace.

use std::ffi::OsString;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::child::{self, Change, Child};
use crate::clock::{BootInstant, MAX_NAP};
use crate::conn::Session;
use crate::duration;
use crate::exit::{ChildStatus, Done, Failure, fail, failure_of};
use crate::inbox::{Inbox, Incoming, Worker};
use crate::lock::{Ending, Lock, Release, ReleaseRequest, Replicas, Token};
use crate::log::{Log, printable};
use crate::schedule::{Confirmed, Plan, Window};
use crate::signals::{self, Signals};
use crate::store::Store;
use crate::waiting::Held;

/// What to run under the lock.
pub(crate) struct Job {
    pub(crate) argv: Vec<OsString>,
    pub(crate) set_env: Vec<(String, String)>,
    pub(crate) remove_env: Vec<String>,
    pub(crate) plan: Plan,
    pub(crate) max_runtime: Option<Duration>,
    pub(crate) min_hold: Duration,
    pub(crate) foreground: bool,
    /// Replicas that must acknowledge each renewal, or it confirms nothing.
    pub(crate) replicas: Option<u32>,
}

/// Processes that outlive SIGKILL this long (uninterruptible I/O) are given up on.
const SURVIVAL_LIMIT: Duration = Duration::from_secs(5);

/// The longest the final release may take once the lock is lost or a signal asked redlock to
/// end: Redis was probably unreachable a moment ago, and redlock must end promptly.
const HASTY_RELEASE: Duration = Duration::from_millis(500);

/// The longest the final release may take after the command ended (README: redlock ends
/// within a second of the command whatever state Redis is in). Waiting longer buys nothing: a
/// release sent to a slow server still runs when the server gets to it, after redlock has
/// gone; one that never runs leaves the lock to expire with its lease.
const FINAL_RELEASE: Duration = Duration::from_secs(1);

/// Runs `job` under the lock just `held`; releases the lock after the command's group is gone
/// and returns how the run ended.
pub(crate) fn supervise(
    signals: &Signals,
    store: &Store,
    lock: &Lock,
    held: Held,
    job: &Job,
    log: Log,
) -> anyhow::Result<Done> {
    let Held {
        lease,
        confirmed,
        session,
        worker,
    } = held;
    let inbox = Inbox::new(signals)?;
    let key = printable(lock.name.as_str());
    let window = job.plan.window(confirmed);
    let ending = FinalRelease {
        inbox: &inbox,
        lock,
        store,
        token: &lease.token,
        fence: lease.fence,
        key: &key,
        log,
        worker,
    };

    if let Some(signal) = inbox.pending_signal().filter(|s| signals::terminates(*s)) {
        ending.release(session, Duration::ZERO, HASTY_RELEASE, None, None)?;
        log.notice(format_args!(
            "{} received before the command started; lock '{key}' released",
            signals::name(signal)
        ));
        return Ok(Done::Interrupted(signal));
    }
    // No spawn on a lease that is about to lapse (a slow or stalled acquisition).
    if BootInstant::now() >= window.term_at {
        ending.release(session, Duration::ZERO, HASTY_RELEASE, None, None)?;
        return Err(fail(
            Failure::Unavailable,
            format!("lock '{key}' was granted too late to start the command safely; released"),
        ));
    }

    if let Err(err) = child::become_subreaper() {
        // The setting's error is the one to report; a release that fails expires anyway.
        let _ = ending.release(session, Duration::ZERO, HASTY_RELEASE, None, None);
        return Err(err.into());
    }
    let spec = child::Spec {
        argv: &job.argv,
        set_env: &job.set_env,
        remove_env: &job.remove_env,
        foreground: job.foreground,
        signals: signals.for_command(),
    };
    let child = match child::spawn(&spec) {
        Ok(child) => child,
        Err(err) => {
            // The history records the status a shell would give (127, 126).
            let failure = spawn_failure(&job.argv[0], &err);
            let code = i32::from(crate::exit::exit_code(&failure, crate::exit::BUSY));
            let status = Some(ChildStatus::Exited(code));
            ending.release(session, Duration::ZERO, HASTY_RELEASE, status, None)?;
            return Err(failure);
        }
    };
    let started = BootInstant::now();
    crate::failpoint::hit("spawned");
    log.step(format_args!("started pid {}", child.pid));

    let mut supervisor = Supervisor {
        inbox: &inbox,
        child,
        job,
        store,
        lock,
        token: &lease.token,
        key: &key,
        log,
        lease: LeaseState::Held {
            window,
            confirmed_at: started,
            trouble: None,
        },
        // Renewals go over the acquisition's connection, and the release over the renewals':
        // one connection per run, kept in use.
        renewal: Renewal::Due(session),
        renewer: None,
        stopping: Stopping::No,
        max_runtime_at: job.max_runtime.map(|limit| started + limit),
        timed_out: false,
        signalled: false,
        stopped: false,
        exited: None,
    };
    let ended = loop {
        match inbox.next(supervisor.wake_at()) {
            Some(Incoming::Signal(signal)) if signals::terminates(signal) => {
                supervisor.on_signal(signal);
            }
            Some(Incoming::Reply(Reply::Renewed { sent, result })) => {
                supervisor.on_renewed(sent, result);
            }
            Some(Incoming::Panicked(panic)) => {
                supervisor.on_lost(
                    format!("the renewal failed inside redlock ({panic})"),
                    Failure::Lost,
                );
            }
            // SIGCHLD, a late reply, or the clock: reaped and checked below, every turn.
            Some(Incoming::Signal(_) | Incoming::Reply(Reply::Released(_))) | None => {}
        }
        supervisor.reap();
        if let Some(ended) = supervisor.on_time()? {
            break ended;
        }
    };
    supervisor.finish(ended, ending)
}

/// The thread that sends the renewals, started at the first one (a `run` shorter than a
/// renewal period never pays for it). The `no-renewal-thread` failpoint refuses it.
fn start_renewer() -> anyhow::Result<Worker> {
    if crate::failpoint::fails("no-renewal-thread") {
        return Err(crate::exit::system(
            "a thread",
            std::io::ErrorKind::WouldBlock.into(),
        ));
    }
    Worker::start("renewal")
}

/// The error for a command that could not be started, with its exit code.
fn spawn_failure(program: &OsString, err: &std::io::Error) -> anyhow::Error {
    let program = printable(&program.to_string_lossy());
    let (failure, why) = match err.kind() {
        std::io::ErrorKind::NotFound => (Failure::NotFound, "command not found".to_owned()),
        std::io::ErrorKind::PermissionDenied => {
            (Failure::NotExecutable, "permission denied".to_owned())
        }
        // fork itself failed: the system is out of processes or memory.
        _ if matches!(
            err.raw_os_error(),
            Some(nix::libc::EAGAIN | nix::libc::ENOMEM)
        ) =>
        {
            (Failure::System, err.to_string())
        }
        _ => (Failure::NotExecutable, err.to_string()),
    };
    fail(failure, format!("cannot run '{program}': {why}"))
}

/// A worker's reply.
enum Reply {
    /// A renewal sent at `sent`: whether the token still held the lock.
    Renewed {
        sent: BootInstant,
        result: anyhow::Result<(bool, Option<Session>)>,
    },
    Released(anyhow::Result<Release>),
}

/// The lease as the supervisor knows it.
enum LeaseState {
    /// Confirmed until `window`; renewals go on.
    Held {
        window: Window,
        /// When the window was last confirmed, for the message if renewals stop working.
        confirmed_at: BootInstant,
        /// The last renewal's failure, while renewals fail.
        trouble: Option<String>,
    },
    /// Lost (or no longer ours to keep, `failure` says which): the command is being
    /// stopped, and must be dead by `kill_by`.
    Lost {
        kill_by: BootInstant,
        failure: Failure,
    },
}

/// The next renewal.
enum Renewal {
    /// Due at the window's `renew_at`, over this connection (or a fresh one).
    Due(Option<Session>),
    /// Due again at this instant after a failure, over a fresh connection.
    Retry(BootInstant),
    InFlight,
}

/// Where stopping the command stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopping {
    No,
    /// SIGTERM (or the signal received) sent; SIGKILL due at `kill_at`.
    Term {
        kill_at: BootInstant,
    },
    /// SIGKILL sent at `at`.
    Killed {
        at: BootInstant,
    },
}

/// How the supervision loop ended.
enum Ended {
    /// The command's whole group is gone.
    Gone,
    /// Processes of the group outlived SIGKILL by [`SURVIVAL_LIMIT`].
    Survivors,
}

struct Supervisor<'a> {
    inbox: &'a Inbox<'a, Reply>,
    child: Child,
    job: &'a Job,
    store: &'a Store,
    lock: &'a Lock,
    token: &'a Token,
    key: &'a str,
    log: Log,
    lease: LeaseState,
    renewal: Renewal,
    /// Started when the first renewal is due: a short command never pays for the thread.
    renewer: Option<Worker>,
    stopping: Stopping,
    max_runtime_at: Option<BootInstant>,
    timed_out: bool,
    /// A terminating signal was received and passed on.
    signalled: bool,
    /// The command is stopped (SIGSTOP, SIGTSTP, ...): a signal sent to end it stays pending
    /// until it is continued.
    stopped: bool,
    exited: Option<ChildStatus>,
}

impl Supervisor<'_> {
    /// The next instant something is due; the loop wakes then at the latest.
    fn wake_at(&self) -> BootInstant {
        let now = BootInstant::now();
        let mut at = now + MAX_NAP;
        let mut consider = |due: BootInstant| at = at.min(due);
        match self.lease {
            LeaseState::Held { window, .. } => {
                consider(window.term_at);
                match self.renewal {
                    Renewal::Due(_) => consider(window.renew_at),
                    Renewal::Retry(due) => consider(due),
                    Renewal::InFlight => {}
                }
            }
            LeaseState::Lost { kill_by, .. } => {
                if !matches!(self.stopping, Stopping::Killed { .. }) {
                    consider(kill_by);
                }
            }
        }
        match self.stopping {
            Stopping::No => {}
            Stopping::Term { kill_at } => consider(kill_at),
            Stopping::Killed { at } => consider(at + SURVIVAL_LIMIT),
        }
        if let Some(limit) = self.max_runtime_at
            && !self.timed_out
            && self.exited.is_none()
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
        self.signal(signal);
        self.signalled = true;
        if signal == Signal::SIGINT as i32 || signal == Signal::SIGTERM as i32 {
            let now = BootInstant::now();
            self.stopping = match self.stopping {
                Stopping::No => Stopping::Term {
                    kill_at: now + self.job.plan.kill_after,
                },
                // A second INT or TERM: no more grace.
                Stopping::Term { .. } => Stopping::Term { kill_at: now },
                killed @ Stopping::Killed { .. } => killed,
            };
        }
    }

    fn on_renewed(&mut self, sent: BootInstant, result: anyhow::Result<(bool, Option<Session>)>) {
        let LeaseState::Held {
            window, trouble, ..
        } = &self.lease
        else {
            // Lost already: nothing a renewal says changes that.
            return;
        };
        let (window, troubled) = (*window, trouble.is_some());
        match result {
            Ok((true, session)) => {
                let window = self.job.plan.window(Confirmed::Sent(sent));
                if troubled {
                    self.log
                        .notice(format_args!("renewing lock '{}' works again", self.key));
                }
                self.lease = LeaseState::Held {
                    window,
                    confirmed_at: BootInstant::now(),
                    trouble: None,
                };
                self.renewal = Renewal::Due(session);
                self.log.step(format_args!(
                    "renewed lock '{}' ({} of lease left)",
                    self.key,
                    duration::display(window.valid_until.remaining())
                ));
            }
            Ok((false, _)) => {
                self.on_lost(
                    "the key was deleted, expired, or taken by another holder".into(),
                    Failure::Lost,
                );
            }
            Err(err) if failure_of(&err) == Some(Failure::Usage) => {
                self.on_lost(format!("{err:#}"), Failure::Lost);
            }
            // A refused password or a permission taken away is not going to come back by
            // itself: stop now, with the code that says what to fix, not at the lease's end.
            Err(err) if failure_of(&err) == Some(Failure::Auth) => {
                self.on_lost(format!("{err:#}"), Failure::Auth);
            }
            Err(err) => {
                let why = format!("{err:#}");
                if !troubled {
                    self.log.warn(format_args!(
                        "renewing lock '{}' failed: {why}; retrying (the command is stopped in {} if this goes on)",
                        self.key,
                        duration::display(window.term_at.remaining())
                    ));
                }
                if let LeaseState::Held { trouble, .. } = &mut self.lease {
                    *trouble = Some(why);
                }
                // After a failure a late reply may still come on that connection: a fresh one.
                self.renewal = Renewal::Retry(BootInstant::now() + window.retry_every);
            }
        }
    }

    /// The lock is gone or taken (or cannot be kept): stop the command at once, SIGKILL after
    /// the loss grace, and in any case before the lease can lapse.
    fn on_lost(&mut self, why: String, failure: Failure) {
        let LeaseState::Held { window, .. } = self.lease else {
            return;
        };
        self.log.notice(format_args!(
            "lost lock '{}': {why}; stopping the command",
            self.key
        ));
        let kill_by = (BootInstant::now() + window.loss_grace).min(window.kill_at);
        self.lease = LeaseState::Lost {
            kill_by: window.kill_at,
            failure,
        };
        self.stop(kill_by);
    }

    /// Sends SIGTERM (unless already stopping) and makes SIGKILL due by `kill_by`.
    fn stop(&mut self, kill_by: BootInstant) {
        self.stopping = match self.stopping {
            Stopping::No => {
                self.signal(Signal::SIGTERM as i32);
                Stopping::Term { kill_at: kill_by }
            }
            Stopping::Term { kill_at } => Stopping::Term {
                kill_at: kill_at.min(kill_by),
            },
            killed @ Stopping::Killed { .. } => killed,
        };
    }

    /// Sends `signal` to the command's group, and SIGCONT after it if the command is stopped,
    /// as a shell's `kill` does: a stopped process would not act on it until continued.
    fn signal(&self, signal: i32) {
        self.child.signal_group(signal);
        if self.stopped {
            self.child.signal_group(Signal::SIGCONT as i32);
        }
    }

    /// Collects the children that changed state: the command, and orphans handed to redlock as
    /// subreaper (only collected).
    fn reap(&mut self) {
        while let Some((pid, change)) = child::reap() {
            if pid != self.child.pid {
                continue;
            }
            match change {
                Change::Exited(code) => self.exited = Some(ChildStatus::Exited(code)),
                Change::Killed(signal) => self.exited = Some(ChildStatus::Signaled(signal)),
                Change::Continued => self.stopped = false,
                Change::Stopped(signal) => {
                    self.stopped = true;
                    // Not on redlock's terminal: the job control is someone else's.
                    if self.job.foreground {
                        self.on_stopped_in_foreground(signal);
                    }
                }
            }
        }
    }

    /// The command, owning the terminal, stopped. Having read or written the terminal before
    /// redlock handed it over (SIGTTIN, SIGTTOU), it gets the terminal and is continued. On
    /// Ctrl-Z, redlock takes the terminal back and stops too, as the shell expects; on `fg` it
    /// continues the command in the foreground again. While stopped nothing renews the lease;
    /// the deadlines catch a lapse on wake-up.
    fn on_stopped_in_foreground(&self, signal: i32) {
        if signal != Signal::SIGTTIN as i32 && signal != Signal::SIGTTOU as i32 {
            child::reclaim_terminal();
            let _ = nix::sys::signal::raise(Signal::SIGSTOP);
        }
        child::hand_terminal_to(self.child.pid);
        self.child.signal_group(Signal::SIGCONT as i32);
    }

    /// Acts on the deadlines that have come; says when the loop is over.
    fn on_time(&mut self) -> anyhow::Result<Option<Ended>> {
        let now = BootInstant::now();
        if let LeaseState::Held {
            window,
            confirmed_at,
            ref trouble,
        } = self.lease
        {
            if now >= window.term_at {
                let why = format!(
                    "renewals not confirmed for {} ({})",
                    duration::display(now.since(confirmed_at)),
                    trouble.as_deref().unwrap_or("no reply")
                );
                self.log.notice(format_args!(
                    "lost lock '{}': {why}; stopping the command before the lease can lapse",
                    self.key
                ));
                self.lease = LeaseState::Lost {
                    kill_by: window.kill_at,
                    failure: Failure::Lost,
                };
                self.stop(window.kill_at);
            } else {
                self.renew_if_due(now, window)?;
            }
        }
        if let Some(limit) = self.max_runtime_at
            && now >= limit
            && !self.timed_out
            && self.exited.is_none()
        {
            self.timed_out = true;
            self.log.notice(format_args!(
                "--max-runtime {} elapsed; stopping the command",
                duration::display(self.job.max_runtime.unwrap_or_default())
            ));
            self.stop(now + self.job.plan.kill_after);
        }
        if let LeaseState::Lost { kill_by, .. } = self.lease
            && now >= kill_by
        {
            self.stop(now);
        }
        match self.stopping {
            Stopping::Term { kill_at } if now >= kill_at => {
                self.child.signal_group(Signal::SIGKILL as i32);
                self.stopping = Stopping::Killed { at: now };
                self.log.step("sent SIGKILL to the command's process group");
            }
            Stopping::Killed { at }
                if now.since(at) >= SURVIVAL_LIMIT && self.child.group_alive() =>
            {
                return Ok(Some(Ended::Survivors));
            }
            _ => {}
        }
        if self.exited.is_some() {
            if !self.child.group_alive() {
                return Ok(Some(Ended::Gone));
            }
            if self.stopping == Stopping::No {
                self.log
                    .notice("the command exited but left processes in its group; stopping them");
                self.stop(now + self.job.plan.kill_after);
            }
        }
        Ok(None)
    }

    /// Sends the renewal when it is due. Each request is bounded inside the lease: a reply
    /// after the lease could have lapsed proves nothing.
    fn renew_if_due(&mut self, now: BootInstant, window: Window) -> anyhow::Result<()> {
        let session = match std::mem::replace(&mut self.renewal, Renewal::InFlight) {
            Renewal::Due(session) if now >= window.renew_at => session,
            Renewal::Retry(at) if now >= at => None,
            not_due => {
                self.renewal = not_due;
                return Ok(());
            }
        };
        let renewer = match self.renewer.take() {
            Some(renewer) => renewer,
            None => match start_renewer() {
                Ok(renewer) => renewer,
                // No thread now (a process or memory limit): a renewal that failed, retried
                // while the lease lasts; the command is stopped before it lapses, never left
                // running unsupervised.
                Err(err) => {
                    self.on_renewed(now, Err(err));
                    return Ok(());
                }
            },
        };
        let timeout = window
            .request_timeout
            .min(window.valid_until.since(now))
            .max(Duration::from_millis(10));
        let (store, lock, token, ttl) = (
            self.store.clone(),
            self.lock.clone(),
            self.token.clone(),
            self.job.plan.ttl,
        );
        let replicas = (self.job.replicas).map(|count| Replicas::within(count, timeout));
        renewer.run(&self.inbox.reporter(), move || {
            let sent = BootInstant::now();
            let result = store.extend(&lock, session, &token, ttl, replicas, timeout);
            Reply::Renewed { sent, result }
        });
        self.renewer = Some(renewer);
        Ok(())
    }

    /// After the loop: the terminal back, renewals stopped, the lock released (or left to
    /// expire, or found lost), and the exit status.
    fn finish(self, ended: Ended, ending: FinalRelease<'_>) -> anyhow::Result<Done> {
        if self.job.foreground {
            child::reclaim_terminal();
        }
        crate::failpoint::hit("ending");
        // Stops renewing; a renewal still in flight that lands after the release finds the
        // token gone, or its hold over (kept for the minimum hold), and changes nothing. The
        // release takes the renewals' connection when none is in flight on it, else a new one.
        drop(self.renewer);
        let session = match self.renewal {
            Renewal::Due(session) => session,
            Renewal::Retry(_) | Renewal::InFlight => None,
        };
        let key = self.key;
        let lost = match self.lease {
            LeaseState::Lost { failure, .. } => Some(failure),
            LeaseState::Held { .. } => None,
        };
        let status = self
            .exited
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
        if lost.is_some() {
            // Token-checked, so harmless if the lock is someone else's by now.
            let _ = ending.release(session, Duration::ZERO, HASTY_RELEASE, Some(status), None);
            return Ok(by_us());
        }
        let bound = if self.signalled {
            HASTY_RELEASE
        } else {
            FINAL_RELEASE
        };
        let why = self
            .timed_out
            .then_some(self.job.max_runtime)
            .flatten()
            .map(|limit| format!("stopped at --max-runtime {}", duration::display(limit)));
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

/// What the final release needs: it runs on the worker that acquired the lock, over the
/// connection the renewals used (the acquisition's), while the main thread waits for the reply,
/// a signal, or the bound.
struct FinalRelease<'a> {
    inbox: &'a Inbox<'a, Reply>,
    lock: &'a Lock,
    store: &'a Store,
    token: &'a Token,
    fence: u64,
    key: &'a str,
    log: Log,
    worker: Worker,
}

impl FinalRelease<'_> {
    /// Token-checked release (or keep for the minimum hold), within `bound`. The connection
    /// may have sat idle for the whole run: if it fails, one fresh connection is tried.
    fn release(
        &self,
        session: Option<Session>,
        min_hold: Duration,
        bound: Duration,
        status: Option<ChildStatus>,
        why: Option<String>,
    ) -> anyhow::Result<Release> {
        let deadline = BootInstant::now() + bound;
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
        self.worker.run(&self.inbox.reporter(), move || {
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
                        format!("no answer within {}", duration::display(bound)),
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
