//! The one channel a waiting or supervising redlock listens on. Threads (signal watch, queue
//! waiter, keeper) only report into it; the thread that owns the channel decides.
//! It is opened, with signal handlers installed, before the lock is requested, so that no
//! signal between a grant and the start of the command is lost.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::keeper::Report;
use crate::signals;
use crate::waiting::WaiterReport;

/// Everything a waiting or supervising redlock hears about.
pub enum Event {
    /// A signal to forward, or SIGCHLD: a child changed state.
    Signal(i32),
    Keeper(Report),
    Waiter(WaiterReport),
}

pub struct Events {
    sender: Sender<Event>,
    receiver: Receiver<Event>,
}

impl Events {
    /// Starts watching signals (see [`signals::watch`]): call it before any other thread.
    pub fn listen() -> anyhow::Result<Self> {
        let (sender, receiver) = mpsc::channel();
        let forward = sender.clone();
        signals::watch(move |signal| {
            let _ = forward.send(Event::Signal(signal));
        })?;
        Ok(Self { sender, receiver })
    }

    pub fn sender(&self) -> Sender<Event> {
        self.sender.clone()
    }

    pub fn recv_timeout(&self, timeout: Duration) -> Result<Event, RecvTimeoutError> {
        self.receiver.recv_timeout(timeout)
    }

    /// A signal to forward that arrived so far, if any; other events are dropped (none matter
    /// yet).
    pub fn pending_signal(&self) -> Option<i32> {
        self.receiver.try_iter().find_map(|event| match event {
            Event::Signal(signal) if signal != Signal::SIGCHLD as i32 => Some(signal),
            _ => None,
        })
    }
}
