//! A host name looked up within a connect's deadline. The C library's lookup blocks for the
//! resolver's own timeouts and cannot be polled: it runs on a thread of its own, whose answer
//! is waited for as a socket is (inside `interrupt::within`, cut short by a signal too). A
//! connect that finds a lookup of its name under way waits for that one's answer.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs as _};
use std::os::fd::AsFd as _;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Instant;

use nix::poll::PollFlags;

use crate::interrupt;

/// The addresses of `host`: an IP address as it is, a name as the C library's resolver answers
/// (`/etc/hosts`, DNS) before `deadline`. The lookup blocks for the resolver's own timeouts
/// (seconds with DNS silent: 5 s for musl's, more with several name servers) and cannot be
/// polled, so it runs on a thread of its own, and its answer is waited for until `deadline`;
/// inside `interrupt::within` as a socket is, so that a signal that ends redlock ends the wait
/// too. A lookup left behind ends by itself; a connect made meanwhile waits for its answer
/// rather than starting another, so a name the resolver leaves unanswered holds one thread
/// however often redlock tries it (a waiting acquisition connects again and again).
pub(super) fn look_up(host: &str, port: u16, deadline: Instant) -> io::Result<Vec<SocketAddr>> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    // No lookup once the request is over.
    interrupt::ended()?;
    if Instant::now() >= deadline {
        return Err(LookupFailed::Silent.into());
    }
    let (answer, answered) = under_way(host, port)?;
    let left = || deadline.saturating_duration_since(Instant::now());
    interrupt::ready(answered.as_fd(), PollFlags::POLLIN, Some(left())).map_err(|err| {
        match err.kind() {
            io::ErrorKind::WouldBlock => LookupFailed::Silent.into(),
            // A signal cut the wait short.
            _ => err,
        }
    })?;
    // Outside `interrupt::within` (a worker's request) `ready` returns at once: the wait is
    // here; inside, the answer is there already.
    let found = answer.found.lock().unwrap_or_else(PoisonError::into_inner);
    let (found, _) = answer
        .told
        .wait_timeout_while(found, left(), |found| found.is_none())
        .unwrap_or_else(PoisonError::into_inner);
    match found.as_ref() {
        Some(Ok(addresses)) => Ok(addresses.clone()),
        Some(Err((kind, why))) => Err(io::Error::new(*kind, why.clone())),
        None => Err(LookupFailed::Silent.into()),
    }
}

/// A lookup's answer: the addresses, or the error's kind and words (an `io::Error` cannot be
/// shared between the connects that wait for it).
type Found = Result<Vec<SocketAddr>, (io::ErrorKind, String)>;

/// A lookup's answer once there, and the condition its waiters are told by.
#[derive(Default)]
struct Answer {
    found: Mutex<Option<Found>>,
    told: Condvar,
}

/// A lookup under way: its answer, set by its thread before the thread closes the other end
/// of `answered`'s socket pair, which makes it readable (the end of the stream) for a poll.
struct UnderWay {
    host: String,
    port: u16,
    answer: Arc<Answer>,
    answered: UnixStream,
}

/// The lookups under way, a few at most (one per name redlock connects to).
static UNDER_WAY: Mutex<Vec<UnderWay>> = Mutex::new(Vec::new());

/// The lookup of `host` under way, started if there is none: where its answer will be, and an
/// end of its socket pair of the caller's own to poll.
fn under_way(host: &str, port: u16) -> io::Result<(Arc<Answer>, UnixStream)> {
    let mut lookups = UNDER_WAY.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(lookup) = lookups
        .iter()
        .find(|lookup| lookup.host == host && lookup.port == port)
    {
        let answered = lookup
            .answered
            .try_clone()
            .map_err(|err| LookupFailed::System("a socket", err))?;
        return Ok((Arc::clone(&lookup.answer), answered));
    }
    let (done, answered) =
        UnixStream::pair().map_err(|err| LookupFailed::System("a socket pair", err))?;
    let callers = answered
        .try_clone()
        .map_err(|err| LookupFailed::System("a socket", err))?;
    let answer = Arc::new(Answer::default());
    lookups.push(UnderWay {
        host: host.to_owned(),
        port,
        answer: Arc::clone(&answer),
        answered,
    });
    // Unlocked before the thread starts: its answer takes the lookup out, even the answer
    // given when the thread could not start.
    drop(lookups);
    let answering = Answering {
        answer: Arc::clone(&answer),
        found: None,
        done: Some(done),
    };
    let name = host.to_owned();
    std::thread::Builder::new()
        .name("lookup".to_owned())
        .spawn(move || {
            // The whole of it, not only the field set below: its drop gives the answer.
            let mut answering = answering;
            let addresses = (name.as_str(), port)
                .to_socket_addrs()
                .map(Iterator::collect::<Vec<_>>)
                .map_err(|err| (err.kind(), err.to_string()));
            answering.found = Some(addresses);
        })
        .map_err(|err| LookupFailed::System("a thread", err))?;
    Ok((answer, callers))
}

/// The lookup thread's answer, given when the thread ends however it ends: set, told to the
/// waiters, the lookup no longer under way (the next connect looks the name up afresh: DNS
/// answers change in a failover), and a poll of the socket pair's other end told last.
struct Answering {
    answer: Arc<Answer>,
    found: Option<Found>,
    done: Option<UnixStream>,
}

impl Drop for Answering {
    fn drop(&mut self) {
        let found = self.found.take().unwrap_or_else(|| {
            Err((
                io::ErrorKind::Other,
                "the host name lookup ended without an answer".to_owned(),
            ))
        });
        *self
            .answer
            .found
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(found);
        self.answer.told.notify_all();
        UNDER_WAY
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|lookup| !Arc::ptr_eq(&lookup.answer, &self.answer));
        drop(self.done.take());
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
