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
mod release;
mod start;
mod stopper;
mod supervisor;

use child::Child;
pub(crate) use child::owns_terminal;
pub(crate) use namespace::run as pid_namespace_init;

use crate::acquire::Held;
use crate::acquire::Kept;
use crate::clock::{BootInstant, MAX_NAP};
use crate::duration;
use crate::exit::{ChildStatus, Done, Failure, fail, failure_of};
use crate::inbox::{Inbox, Incoming, Requests};
use crate::lease::{HASTY_RELEASE, Lease, Plan, Renewed, Renewer, Verdict};
use crate::lock::{Ending, Lock, Release, ReleaseRequest, Token};
use crate::log::{Log, printable};
use crate::signals::{self, Signals};
use crate::store::{ReleaseBound, Store};
use release::{FINAL_RELEASE, FinalRelease};
use start::{Started, spawn_failure, start};
use stopper::{Ended, SURVIVAL_LIMIT, Stopper};
use supervisor::Supervisor;

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
        kept: session,
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

/// A worker's reply.
enum Reply {
    Renewed(Renewed),
    Released(anyhow::Result<Release>),
}
