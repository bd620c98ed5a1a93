//! Signals that `run` forwards, exactly as received, to the command's process group.
//!
//! signal-hook's iterator runs the handlers' work on an ordinary thread, so forwarding can use
//! any call. `ctrlc` was not an option: one handler for INT/TERM/HUP cannot tell them apart and
//! never sees QUIT, USR1 or USR2.
//!
//! Only that thread takes these signals: the thread that starts the watch blocks them first,
//! and every thread started after it inherits the mask. A handler running on a thread in the
//! middle of a Redis read would end the read with EINTR, which looks like a network error.

use std::io;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::{Handle, Signals};

/// Signals passed on to the command.
pub(crate) const FORWARDED: [i32; 6] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2];

/// Receives [`FORWARDED`] signals until dropped.
pub(crate) struct SignalWatch {
    handle: Handle,
}

impl SignalWatch {
    /// Installs the handlers, blocks the signals in the calling thread (call it before any
    /// other thread starts) and calls `deliver` on the watch's own thread for each signal.
    pub(crate) fn start(deliver: impl Fn(i32) + Send + 'static) -> io::Result<Self> {
        let mut signals = Signals::new(FORWARDED)?;
        let handle = signals.handle();
        let mut mask = SigSet::empty();
        for number in FORWARDED {
            mask.add(Signal::try_from(number).map_err(io::Error::from)?);
        }
        pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&mask), None).map_err(io::Error::from)?;
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                // Inherited blocked from the caller; this thread is the one to take them.
                let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&mask), None);
                for signal in signals.forever() {
                    deliver(signal);
                }
            })?;
        Ok(Self { handle })
    }
}

/// Ends the thread (it unregisters the handlers on its way out) without waiting for it: at
/// the end of `run`, joining would add two context switches to every exit for nothing.
impl Drop for SignalWatch {
    fn drop(&mut self) {
        self.handle.close();
    }
}

/// `SIGTERM` for 15, `signal 99` for numbers without a name.
pub(crate) fn name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal)
        .map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_owned())
}
