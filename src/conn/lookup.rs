//! A host name looked up within a connect's deadline. The C library's lookup blocks for the
//! resolver's own timeouts and cannot be polled: it runs on a thread of its own, whose answer
//! is waited for as a socket is (inside `interrupt::within`, cut short by a signal too).

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs as _};
use std::os::fd::AsFd as _;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Instant;

use nix::poll::PollFlags;

use crate::interrupt;

/// The addresses of `host`: an IP address as it is, a name as the C library's resolver answers
/// (`/etc/hosts`, DNS) before `deadline`. The lookup blocks for the resolver's own timeouts
/// (seconds with DNS silent: 5 s for musl's, more with several name servers) and cannot be
/// polled, so it runs on a thread of its own, and its answer is waited for until `deadline`;
/// inside `interrupt::within` as a socket is, so that a signal that ends redlock ends the wait
/// too. A lookup left behind ends by itself, its answer unread.
pub(super) fn look_up(host: &str, port: u16, deadline: Instant) -> io::Result<Vec<SocketAddr>> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    // No lookup once the request is over.
    interrupt::ended()?;
    if Instant::now() >= deadline {
        return Err(LookupFailed::Silent.into());
    }
    let (send, receive) = mpsc::sync_channel(1);
    // The other end closing says the answer is there, for a poll.
    let (answered, answer) =
        UnixStream::pair().map_err(|err| LookupFailed::System("a socket pair", err))?;
    let name = host.to_owned();
    std::thread::Builder::new()
        .name("lookup".to_owned())
        .spawn(move || {
            let found = (name.as_str(), port)
                .to_socket_addrs()
                .map(Iterator::collect::<Vec<_>>);
            // (An error: the wait for it was given up.)
            let _ = send.send(found);
            drop(answered);
        })
        .map_err(|err| LookupFailed::System("a thread", err))?;
    let left = || deadline.saturating_duration_since(Instant::now());
    interrupt::ready(answer.as_fd(), PollFlags::POLLIN, Some(left())).map_err(|err| {
        match err.kind() {
            io::ErrorKind::WouldBlock => LookupFailed::Silent.into(),
            // A signal cut the wait short.
            _ => err,
        }
    })?;
    match receive.recv_timeout(left()) {
        Ok(found) => found,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(LookupFailed::Silent.into()),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(io::Error::other(
            "the host name lookup ended without an answer",
        )),
    }
}

/// A lookup that failed on redlock's side, carried in an `io::Error` for the connect's error
/// to word (`transport::unreachable`): no answer before the deadline, or no thread (or socket
/// pair) to run it on.
#[derive(Debug)]
pub(super) enum LookupFailed {
    Silent,
    System(&'static str, io::Error),
}

impl std::fmt::Display for LookupFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Silent => f.write_str("the host name lookup got no answer"),
            Self::System(what, err) => write!(f, "could not create {what}: {err}"),
        }
    }
}

impl std::error::Error for LookupFailed {}

impl From<LookupFailed> for io::Error {
    fn from(failed: LookupFailed) -> Self {
        let kind = match failed {
            LookupFailed::Silent => io::ErrorKind::TimedOut,
            LookupFailed::System(..) => io::ErrorKind::Other,
        };
        Self::new(kind, failed)
    }
}
