//! The threads that ask the masters in quorum mode: one per master, started the first time that
//! master is asked and kept for the life of the process, so that each later round costs a
//! hand-off per master instead of a thread started and joined. On a small virtual machine a
//! thread started and joined costs about 80 µs of CPU (its stack mapped, and unmapped with the
//! other CPU interrupted to flush its TLB), a hand-off to a parked thread about 10 µs; an
//! uncontended `run` with 5 masters made 9 of them before.
//!
//! A helper still busy with an earlier request (a master that did not answer within a round's
//! straggler grace, see `fan_out_until`, or whose release is being sent again) is not waited
//! for: the request gets a thread of its own, as every request did before, so that one slow
//! master never holds up a round on the others.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, PoisonError};

type Job = Box<dyn FnOnce() + Send>;

/// One master's helper thread, not started until needed.
pub(super) struct Helper {
    /// Where the helper takes its jobs; `None` until it is started (or after it ended).
    jobs: Mutex<Option<Sender<Job>>>,
    /// A job is on its way to the helper or running there.
    busy: Arc<AtomicBool>,
}

impl Helper {
    pub(super) fn new() -> Self {
        Self {
            jobs: Mutex::new(None),
            busy: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Runs `work` on the helper (or, when it is busy, on a thread of its own) and passes what
    /// it returns to `deliver`, there; a panic in `work` is delivered as an error. Fails only
    /// when no thread can be started.
    pub(super) fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
        deliver: impl FnOnce(anyhow::Result<T>) + Send + 'static,
    ) -> std::io::Result<()> {
        let work = move || {
            std::panic::catch_unwind(AssertUnwindSafe(work))
                .unwrap_or_else(|_| Err(anyhow::anyhow!("a request panicked")))
        };
        if self
            .busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let busy = Arc::clone(&self.busy);
            let job: Job = Box::new(move || {
                let result = work();
                // Free before the caller hears: its next round finds the helper idle.
                busy.store(false, Ordering::Release);
                deliver(result);
            });
            let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
            if jobs.is_none() {
                match start() {
                    Ok(sender) => *jobs = Some(sender),
                    Err(err) => {
                        self.busy.store(false, Ordering::Release);
                        return Err(err);
                    }
                }
            }
            let Some(sender) = jobs.as_ref() else {
                unreachable!("started above")
            };
            return match sender.send(job) {
                Ok(()) => Ok(()),
                // The helper is gone (it cannot panic: jobs catch their panics); the job runs
                // on a thread of its own.
                Err(mpsc::SendError(job)) => {
                    *jobs = None;
                    spawn(job)
                }
            };
        }
        spawn(Box::new(move || deliver(work())))
    }
}

/// Starts a helper thread: it runs the jobs it is sent, one after another, until the process
/// ends.
fn start() -> std::io::Result<Sender<Job>> {
    let (sender, jobs) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("redis".into())
        .spawn(move || {
            while let Ok(job) = jobs.recv() {
                job();
            }
        })?;
    Ok(sender)
}

/// Runs `job` on a thread of its own, not joined.
fn spawn(job: Job) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("redis".into())
        .spawn(job)
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_busy_helper_does_not_hold_up_the_next_request() {
        let helper = Helper::new();
        let (release, blocked) = mpsc::channel::<()>();
        let (sender, replies) = mpsc::channel();
        let first = sender.clone();
        helper
            .run(
                move || {
                    let _ = blocked.recv();
                    Ok(1)
                },
                move |result| first.send(result.unwrap()).unwrap(),
            )
            .unwrap();
        let second = sender.clone();
        helper
            .run(
                || Ok(2),
                move |result| second.send(result.unwrap()).unwrap(),
            )
            .unwrap();
        assert_eq!(replies.recv_timeout(Duration::from_secs(5)).unwrap(), 2);
        release.send(()).unwrap();
        assert_eq!(replies.recv_timeout(Duration::from_secs(5)).unwrap(), 1);
    }

    #[test]
    fn a_panic_is_delivered_as_an_error_and_the_helper_goes_on() {
        let helper = Helper::new();
        let (sender, replies) = mpsc::channel();
        let first = sender.clone();
        helper
            .run(
                || -> anyhow::Result<u8> { panic!("on purpose") },
                move |result| first.send(result.is_err()).unwrap(),
            )
            .unwrap();
        assert!(replies.recv_timeout(Duration::from_secs(5)).unwrap());
        let second = sender.clone();
        helper
            .run(
                || Ok(3_u8),
                move |result| second.send(result.is_ok()).unwrap(),
            )
            .unwrap();
        assert!(replies.recv_timeout(Duration::from_secs(5)).unwrap());
    }
}
