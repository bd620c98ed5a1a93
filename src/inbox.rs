//! The main thread is never held up by Redis. It decides; requests talk to Redis, on worker
//! threads or on the main thread with their waits cut short by a signal ([`Requests`],
//! `interrupt`). This module is how the two meet: an [`Inbox`] that the main thread waits on,
//! which delivers both the handled signals (read from the signalfd, see `signals`) and the
//! replies of requests, in one `poll`, so a signal is acted on at once whatever state Redis is
//! in, and a reply as soon as it comes.
//!
//! Time is kept on `CLOCK_BOOTTIME` (see `clock`): each wait arms a timer on that clock for its
//! deadline, which `poll` watches beside the rest, so a deadline that passes while the machine
//! is suspended ends the wait on resume, without waking the process at intervals to look.
//!
//! A worker runs one job at a time: a closure that makes a request and returns the reply, which
//! the worker posts to the inbox it was given. The main thread keeps whatever the request
//! needs (the connection, say) between requests and moves it into the closure; the reply
//! carries it back. A request the main thread stops waiting for (a signal came, Redis hangs)
//! is abandoned with its connection: the worker finishes or times out on its own, and its late
//! reply is dropped.

use std::any::Any;
use std::io::{Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

use crate::clock::BootInstant;
use crate::exit::system;
use crate::interrupt;
use crate::signals::{Signals, Watch};

/// What the main thread hears.
#[derive(Debug)]
pub(crate) enum Incoming<R> {
    /// A handled signal arrived.
    Signal(i32),
    /// A worker's reply.
    Reply(R),
    /// A worker's job panicked: a bug in redlock.
    Panicked(String),
}

/// Signals and replies of type `R`, waited for together.
pub(crate) struct Inbox<'s, R> {
    signals: &'s Signals,
    sender: Sender<Result<R, String>>,
    receiver: Receiver<Result<R, String>>,
    /// Readable when a reply has been posted.
    woken: UnixStream,
    wake: Arc<UnixStream>,
    /// Readable when the deadline of the current wait has passed on `CLOCK_BOOTTIME`.
    timer: TimerFd,
}

/// Where a worker posts a reply: into the channel, then a byte to wake the inbox's `poll`.
pub(crate) struct Reporter<R> {
    sender: Sender<Result<R, String>>,
    wake: Arc<UnixStream>,
}

impl<R> Clone for Reporter<R> {
    fn clone(&self) -> Self {
        Self {
            sender: self.sender.clone(),
            wake: Arc::clone(&self.wake),
        }
    }
}

impl<R> Reporter<R> {
    /// Posts `reply` from a thread that is not a [`Worker`] (a listener).
    pub(crate) fn post_reply(&self, reply: R) {
        self.post(Ok(reply));
    }

    fn post(&self, reply: Result<R, String>) {
        // The inbox may be gone (an abandoned request): nobody waits for the reply.
        let _ = self.sender.send(reply);
        // A full pipe already wakes the inbox.
        let _ = (&*self.wake).write(&[1]);
    }
}

impl<'s, R> Inbox<'s, R> {
    pub(crate) fn new(signals: &'s Signals) -> anyhow::Result<Self> {
        let (sender, receiver) = mpsc::channel();
        let (woken, wake) = UnixStream::pair()
            .and_then(|(woken, wake)| {
                woken.set_nonblocking(true)?;
                wake.set_nonblocking(true)?;
                Ok((woken, wake))
            })
            .map_err(|err| system("a socket pair", err))?;
        let timer = TimerFd::new(
            ClockId::CLOCK_BOOTTIME,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(|err| system("a timer", err.into()))?;
        Ok(Self {
            signals,
            sender,
            receiver,
            woken,
            wake: Arc::new(wake),
            timer,
        })
    }

    pub(crate) fn reporter(&self) -> Reporter<R> {
        Reporter {
            sender: self.sender.clone(),
            wake: Arc::clone(&self.wake),
        }
    }

    /// The next signal or reply, waiting until `until` at the latest (`None` then): a caller
    /// that gets `None` reads the clock and decides.
    pub(crate) fn next(&self, until: BootInstant) -> Option<Incoming<R>> {
        if let Some(incoming) = self.ready() {
            return Some(incoming);
        }
        // The timer keeps the deadline across a suspend; poll's own timeout, on a clock that
        // stops in suspend, is the same deadline as long as the machine runs, and the bound
        // if the timer cannot be armed. Rounded up, so a wait for less than a millisecond
        // does not return at once.
        let _ = self.timer.set(
            Expiration::OneShot(TimeSpec::from(until.since_boot())),
            TimerSetTimeFlags::TFD_TIMER_ABSTIME,
        );
        let millis = until.remaining().as_micros().div_ceil(1000);
        let timeout = PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX);
        let mut fds = [
            PollFd::new(self.signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.woken.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.timer.as_fd(), PollFlags::POLLIN),
        ];
        // EINTR (a stop and continue) counts as a timeout: callers look at the clock anyway.
        let _ = poll(&mut fds, timeout);
        let mut drained = [0u8; 64];
        while matches!((&self.woken).read(&mut drained), Ok(n) if n > 0) {}
        self.ready()
    }

    /// A signal, else a reply, already there.
    fn ready(&self) -> Option<Incoming<R>> {
        if let Some(signal) = self.signals.read() {
            return Some(Incoming::Signal(signal));
        }
        match self.receiver.try_recv() {
            Ok(Ok(reply)) => Some(Incoming::Reply(reply)),
            Ok(Err(panic)) => Some(Incoming::Panicked(panic)),
            Err(_) => None,
        }
    }

    /// A handle on the signals, for requests that wait on this thread (see `interrupt`).
    pub(crate) fn watch(&self) -> Watch {
        self.signals.watch()
    }

    /// A signal that has arrived and not been read yet, if any.
    pub(crate) fn pending_signal(&self) -> Option<i32> {
        self.signals.read()
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A thread that runs jobs one after another and posts their replies (see the module's text).
/// Dropping it lets the thread end after the job it is running, without waiting for it.
pub(crate) struct Worker {
    jobs: Sender<Job>,
}

impl Worker {
    pub(crate) fn start(name: &str) -> anyhow::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                while let Ok(job) = queue.recv() {
                    job();
                }
            })
            .map_err(|err| system("a thread", err))?;
        Ok(Self { jobs })
    }

    /// Runs `job` after the jobs before it and posts its reply to `reporter`; a panic in it is
    /// posted as [`Incoming::Panicked`].
    pub(crate) fn run<R: Send + 'static>(
        &self,
        reporter: &Reporter<R>,
        job: impl FnOnce() -> R + Send + 'static,
    ) {
        let reporter = reporter.clone();
        let job: Job = Box::new(move || reporter.post(caught(job)));
        // The thread only ends when this sender is dropped.
        let _ = self.jobs.send(job);
    }
}

/// Where one lock's requests run. For an acquisition that does not wait, where every wait of
/// a request can be a `poll` (one server over TCP, `Target::pollable`): on the main thread, its
/// waits cut short by a signal that ends redlock (`interrupt`); a thread's start and two
/// hand-offs per request were a tenth of a `run` (docs/performance.md). Elsewhere on a worker
/// thread: a Sentinel or Cluster target may send a request to any server it learns of, and
/// an acquisition that waits keeps its deadline and its status line on the main thread
/// between requests. A wait on the wake list always runs on a thread.
pub(crate) enum Requests {
    /// On the calling thread, cut short by these signals.
    Inline(Watch),
    /// On a worker thread.
    Thread(Worker),
}

impl Requests {
    /// Requests on the calling thread, cut short by `signals`, if `inline`; else on a thread
    /// started now.
    pub(crate) fn new(inline: bool, signals: Watch) -> anyhow::Result<Self> {
        Ok(match inline {
            true => Self::Inline(signals),
            false => Self::Thread(Worker::start("redis")?),
        })
    }

    /// The same kind, with none of this one's work: a request abandoned on this one's thread
    /// finishes or times out on its own.
    pub(crate) fn fresh(&self) -> anyhow::Result<Self> {
        match self {
            Self::Inline(signals) => Self::new(true, signals.clone()),
            Self::Thread(_) => Ok(Self::Thread(Worker::start("redis")?)),
        }
    }

    /// A request: on the calling thread, its waits cut short by a signal that ends redlock or
    /// by `until`, and its reply posted before this returns; or on the thread.
    pub(crate) fn request<R: Send + 'static>(
        &self,
        reporter: &Reporter<R>,
        until: BootInstant,
        job: impl FnOnce() -> R + Send + 'static,
    ) {
        match self {
            Self::Inline(signals) => {
                let reply = interrupt::within(signals, until, || caught(job));
                // No wake-up: the inbox is this thread's, and looks for replies before it
                // waits.
                let _ = reporter.sender.send(reply);
            }
            Self::Thread(worker) => worker.run(reporter, job),
        }
    }

    /// `job` on a thread; requests made on the calling thread until now go to that thread
    /// from now on (if it cannot be started, `job` is dropped with what it holds).
    pub(crate) fn on_thread<R: Send + 'static>(
        &mut self,
        reporter: &Reporter<R>,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> anyhow::Result<()> {
        if let Self::Inline(_) = self {
            *self = Self::Thread(Worker::start("redis")?);
        }
        if let Self::Thread(worker) = self {
            worker.run(reporter, job);
        }
        Ok(())
    }
}

/// What `job` returns, or its panic's message.
fn caught<R>(job: impl FnOnce() -> R) -> Result<R, String> {
    std::panic::catch_unwind(AssertUnwindSafe(job)).map_err(panic_message)
}

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a worker thread panicked".to_owned())
}
