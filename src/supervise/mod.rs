//! `run`'s supervisor: holds the lock while the command runs, and guarantees the order
//! "command's whole process group dead, then lock released".
//!
//! [`Supervisor`] is a state machine on the main thread with one method per kind of event: a
//! signal, a renewal's reply, a child's change of state, and the clock. It joins two parts
//! that know nothing of each other: the lease, kept by a [`Renewer`] (`lease`), and the
//! command's process group, stopped by a [`Stopper`] (`stopper`, `child`). It decides when the
//! command must be stopped and by when it must be dead, and releases the lock after. Deadlines
//! live on `CLOCK_BOOTTIME` (see `lease`):
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

mod child;
mod namespace;
mod stopper;

use child::Child;
pub(crate) use child::owns_terminal;
pub(crate) use namespace::run as pid_namespace_init;

use crate::acquire::Held;
use crate::clock::{BootInstant, MAX_NAP};
use crate::conn::Session;
use crate::duration;
use crate::exit::{ChildStatus, Done, Failure, fail, failure_of};
use crate::inbox::{Inbox, Incoming, Worker};
use crate::lease::{HASTY_RELEASE, Lease, Plan, Renewed, Renewer, Verdict};
use crate::lock::{Ending, Lock, Release, ReleaseRequest, Token};
use crate::log::{Log, printable};
use crate::signals::{self, Signals};
use crate::store::{ReleaseBound, Store};
use stopper::{Ended, SURVIVAL_LIMIT, Stopper};

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
    /// The standard descriptors redlock's caller closed, closed for the command too
    /// ([`crate::Inherited::closed`]).
    pub(crate) closed: u8,
    /// Run the command in a PID namespace of its own (`namespace`).
    pub(crate) pid_namespace: bool,
}

/// The longest the final release waits for an answer after the command ended (docs/reference.md:
/// redlock ends within a second of the command if Redis hangs). Waiting longer buys nothing: a
/// release sent to a slow server still runs when the server gets to it, after redlock has
/// gone; one that never runs leaves the lock to expire with its lease. (One the server refused
/// without running it is sent again for up to the release timeout: see `Store::release`.)
const FINAL_RELEASE: Duration = Duration::from_secs(1);

/// How a supervised run ended.
pub(crate) enum Supervised {
    /// The command ran (or a signal came before it started): how redlock ends.
    Done(Done),
    /// The lease was too near its end to start the command on it: the lock was released and
    /// nothing started. The caller may take the lock again.
    TooLate(TooLate),
}

/// A lease too near its end to start the command on: who was late.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TooLate {
    /// Redis answered the acquisition too late (it stalled); otherwise the answer came in time
    /// and redlock itself was kept from starting the command (stopped, or starved of CPU).
    pub(crate) answered_late: bool,
    /// From the answer to the moment redlock found the lease too near its end.
    pub(crate) since_answer: Duration,
}

/// Runs `job` under the lock just `held`; releases the lock after the command's group is gone
/// and returns how the run ended.
pub(crate) fn supervise(
    signals: &Signals,
    store: &Store,
    lock: &Lock,
    held: Held,
    job: &Job,
    log: Log,
) -> anyhow::Result<Supervised> {
    let Held {
        lease,
        confirmed,
        answered,
        session,
        worker,
    } = held;
    let inbox = Inbox::new(signals)?;
    let key = printable(lock.name.as_str());
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
    let window = job.plan.window(confirmed);
    let moments = (answered, window.term_at, window.valid_until);
    let (child, session) = match start(job, signals, &ending, session, moments)? {
        Started::Running(child, session) => (child, session),
        Started::Interrupted(done) => return Ok(Supervised::Done(done)),
        Started::TooLate(late) => return Ok(Supervised::TooLate(late)),
    };
    let started = BootInstant::now();
    let lease = Lease {
        store,
        lock,
        token: &lease.token,
        plan: job.plan,
        replicas: job.replicas,
    };
    let mut supervisor = Supervisor {
        inbox: &inbox,
        job,
        key: &key,
        log,
        // Renewals go over the acquisition's connection, and the release over the renewals':
        // one connection per run, kept in use.
        renewer: Renewer::new(lease, confirmed, session),
        lost: None,
        command: Stopper::new(child, job.foreground, job.plan.kill_after),
        max_runtime_at: job.max_runtime.map(|limit| started + limit),
        timed_out: false,
        signalled: None,
    };
    let ended = supervisor.run_until_gone();
    supervisor.finish(ended, ending).map(Supervised::Done)
}

/// Whether the command was started.
enum Started {
    /// Running; the lease's connection passed on to the renewals.
    Running(Child, Option<Session>),
    /// Not started (a signal came first); the lock was released.
    Interrupted(Done),
    /// Not started: the lease was about to lapse; the lock was released.
    TooLate(TooLate),
}

/// Starts the command on the lease just taken, unless a terminating signal came first or the
/// lease is about to lapse (`too_late`: an acquisition answered late, or redlock stalled
/// since the answer came at `answered`); when it is not started, the lock is released first,
/// within the hasty bound (and, sent again, not past the lease's end, `lease_ends`).
fn start(
    job: &Job,
    signals: &Signals,
    ending: &FinalRelease<'_>,
    session: Option<Session>,
    (answered, too_late, lease_ends): (BootInstant, BootInstant, BootInstant),
) -> anyhow::Result<Started> {
    let key = ending.key;
    let hasty = ReleaseBound {
        answer: HASTY_RELEASE,
        lease_ends: Some(lease_ends),
    };
    if let Some(signal) = ending
        .inbox
        .pending_signal()
        .filter(|s| signals::terminates(*s))
    {
        let why = format!(
            "{} received before the command started",
            signals::name(signal)
        );
        ending.release(session, Duration::ZERO, hasty, None, Some(why))?;
        ending.log.notice(format_args!(
            "{} received before the command started; lock '{key}' released",
            signals::name(signal)
        ));
        return Ok(Started::Interrupted(Done::Interrupted(signal)));
    }
    let now = BootInstant::now();
    if now >= too_late {
        let why = "granted too late to start the command".to_owned();
        ending.release(session, Duration::ZERO, hasty, None, Some(why))?;
        return Ok(Started::TooLate(TooLate {
            answered_late: answered >= too_late,
            since_answer: now.since(answered),
        }));
    }
    if let Err(err) = child::become_subreaper() {
        // The setting's error is the one to report; a release that fails expires anyway.
        let _ = ending.release(session, Duration::ZERO, hasty, None, None);
        return Err(err.into());
    }
    let wrapped;
    let argv = match job.pid_namespace {
        true => {
            wrapped = namespace::holder_argv(&job.argv);
            &wrapped
        }
        false => &job.argv,
    };
    let spec = child::Spec {
        argv,
        set_env: &job.set_env,
        remove_env: &job.remove_env,
        foreground: job.foreground,
        signals: signals.for_command(),
        closed: job.closed,
        parent_outside: false,
        new_group: true,
    };
    match child::spawn(&spec) {
        Ok(child) => {
            crate::failpoint::hit("spawned");
            ending.log.step(format_args!("started pid {}", child.pid));
            Ok(Started::Running(child, session))
        }
        Err(err) => {
            // The history records the status a shell would give (127, 126). In a PID
            // namespace what failed to start is redlock's own holder, not the command.
            let failure = if job.pid_namespace {
                fail(
                    Failure::System,
                    format!("--pid-namespace: cannot start redlock's init (/proc/self/exe): {err}"),
                )
            } else {
                spawn_failure(&job.argv[0], &err)
            };
            let code = i32::from(crate::exit::exit_code(&failure, crate::exit::BUSY));
            let status = Some(ChildStatus::Exited(code));
            ending.release(session, Duration::ZERO, hasty, status, None)?;
            Err(failure)
        }
    }
}

/// The error for a command that could not be started, with its exit code.
pub(super) fn spawn_failure(program: &OsString, err: &std::io::Error) -> anyhow::Error {
    let shown = printable(&program.to_string_lossy());
    let (failure, why) = match err.kind() {
        std::io::ErrorKind::NotFound => (Failure::NotFound, not_found(program_path(program))),
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
    fail(failure, format!("cannot run '{shown}': {why}"))
}

/// Why exec found nothing to run (ENOENT). When the file is there, what is missing is what runs
/// it: the interpreter its `#!` line names, or (a binary) its dynamic loader; "command not
/// found" would send its user looking for the wrong file.
fn not_found(file: Option<std::path::PathBuf>) -> String {
    use std::io::Read as _;
    let Some(file) = file else {
        return "command not found".to_owned();
    };
    let mut head = [0u8; 256];
    let read = std::fs::File::open(&file)
        .and_then(|mut opened| opened.read(&mut head))
        .unwrap_or(0);
    let first_line = head[..read]
        .split(|&byte| byte == b'\n')
        .next()
        .unwrap_or_default();
    match first_line.strip_prefix(b"#!") {
        // (A line that ends in CR names an interpreter whose name ends in CR, which is not there.)
        Some(line) if line.ends_with(b"\r") => {
            "its #! line ends in a carriage return (Windows line endings): convert the file, e.g. with dos2unix".to_owned()
        }
        Some(line) => {
            let interpreter = String::from_utf8_lossy(line);
            let interpreter = interpreter
                .split([' ', '\t'])
                .find(|word| !word.is_empty())
                .unwrap_or_default();
            format!(
                "its interpreter '{}' (the file's #! line) was not found",
                printable(interpreter)
            )
        }
        None => "the file is there, but what runs it was not found (a binary built for another system, whose dynamic loader is missing?)".to_owned(),
    }
}

/// The file exec would run for `program`: the path itself when it names one (a '/' in it), else
/// the first in PATH that exists; `None` when there is none.
fn program_path(program: &OsString) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::path::Path::new(program);
    if program.as_bytes().contains(&b'/') {
        return path.is_file().then(|| path.to_owned());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(path))
        .find(|candidate| candidate.is_file())
}

/// A worker's reply.
enum Reply {
    Renewed(Renewed),
    Released(anyhow::Result<Release>),
}

/// The lease lost (or no longer ours to keep, `failure` says which, and `why`): the command
/// is being stopped, and must be dead by `kill_by`.
struct Lost {
    kill_by: BootInstant,
    failure: Failure,
    why: String,
    /// How the command had ended when the loss was found, if it had: redlock, stalled (a
    /// SIGSTOP, a paused VM), found both on waking, and cannot tell which came first.
    ended_before: Option<ChildStatus>,
}

struct Supervisor<'a> {
    inbox: &'a Inbox<'a, Reply>,
    job: &'a Job,
    key: &'a str,
    log: Log,
    renewer: Renewer<'a>,
    lost: Option<Lost>,
    command: Stopper,
    max_runtime_at: Option<BootInstant>,
    timed_out: bool,
    /// The first terminating signal received and passed on.
    signalled: Option<i32>,
}

impl Supervisor<'_> {
    /// One event at a time until the command's whole group is gone (or given up on).
    fn run_until_gone(&mut self) -> Ended {
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
    fn lose(&mut self, why: String, failure: Failure, stopping: &str, kill_by: BootInstant) {
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
    fn on_time(&mut self) -> Option<Ended> {
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
    fn finish(self, ended: Ended, ending: FinalRelease<'_>) -> anyhow::Result<Done> {
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
    /// Token-checked release (or keep for the minimum hold) within `bound`: waiting
    /// `bound.answer` at most for a server that does not answer; one known not to have run is
    /// sent again, up to the release timeout (see `Store::release`). The connection may have
    /// sat idle for the whole run: if it was closed, a fresh one is tried.
    fn release(
        &self,
        session: Option<Session>,
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
