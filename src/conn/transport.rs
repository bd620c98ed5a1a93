//! One connection to one Redis server, over TCP, a Unix socket or TLS (rustls), speaking RESP
//! through the redis crate's encoder and redlock's reader (`resp`): everything that takes a
//! `ConnectionLike` (commands, pipelines, scripts) works on it.
//!
//! redlock has its own connection instead of the crate's because of what the crate cannot do
//! (docs/design.md): verify a TLS certificate against a name other than the host connected to,
//! keep one trust store for the process instead of reloading the system's on every connect,
//! and bound every step of a connection (connect, TLS handshake, AUTH, SELECT) by one timeout.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd as _};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{ConnectionLike, RedisResult, Value};

use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::socket::{
    self, AddressFamily, MsgFlags, SockFlag, SockType, SockaddrStorage, sockopt,
};

use super::lookup::{LookupFailed, look_up};
use super::resp::Reader;
use super::tls::Tls;
use super::url::Address;
use crate::exit::{Failure, NotRun, fail, fail_not_run, system};
use crate::interrupt;

/// The byte stream under a connection.
enum Stream {
    Tcp(Timed<TcpStream>),
    Unix(Timed<UnixStream>),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, Timed<TcpStream>>>),
}

impl Stream {
    /// Bounds each later write, and each later read while no deadline is armed.
    fn set_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(tcp) => tcp.set_timeout(timeout),
            Stream::Unix(unix) => unix.set_timeout(timeout),
            Stream::Tls(tls) => tls.sock.set_timeout(timeout),
        }
    }

    /// The socket's reads, however many, end by `deadline` until [`Self::disarm`].
    fn arm(&mut self, deadline: Instant) {
        match self {
            Stream::Tcp(tcp) => tcp.arm(deadline),
            Stream::Unix(unix) => unix.arm(deadline),
            Stream::Tls(tls) => tls.sock.arm(deadline),
        }
    }

    fn disarm(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(tcp) => tcp.disarm(),
            Stream::Unix(unix) => unix.disarm(),
            Stream::Tls(tls) => tls.sock.disarm(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(tcp) => tcp.read(buffer),
            Stream::Unix(unix) => unix.read(buffer),
            Stream::Tls(tls) => tls.read(buffer),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(tcp) => tcp.write(bytes),
            Stream::Unix(unix) => unix.write(bytes),
            Stream::Tls(tls) => tls.write(bytes),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(tcp) => tcp.socket.flush(),
            Stream::Unix(unix) => unix.socket.flush(),
            Stream::Tls(tls) => tls.flush(),
        }
    }
}

/// A socket's timeouts (TCP and Unix sockets have the same methods, but no common trait).
trait Socket: Read + Write + AsFd {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl Socket for TcpStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_write_timeout(self, timeout)
    }
}

impl Socket for UnixStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, timeout)
    }
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_write_timeout(self, timeout)
    }
}

/// A socket whose reads can be held to one deadline. The socket's own timeout bounds each
/// read, and a server that sends a reply a byte at a time, each within it, would hold a
/// request for as long as it likes; while a deadline is armed, each read after the first waits
/// only for what is left of it. (The first needs nothing: the standing timeout, which the
/// deadline is armed with, bounds it. A reply that comes in one read, nearly all of them,
/// costs no system call more.) Under TLS it sits below rustls, whose one read may be many.
///
/// The standing timeout reaches the socket just before the next read or write, and only when
/// it differs from the socket's: a connection's timeout is set several times before its first
/// request (connecting, logging in, the request's own bound), and a quorum round sets it again
/// on every master; each setting cost two system calls.
struct Timed<S> {
    socket: S,
    /// The read and write timeout the socket has while no deadline is armed.
    standing: Option<Duration>,
    /// The timeout the socket has for both reads and writes, when known to be one.
    applied: Option<Option<Duration>>,
    deadline: Option<Instant>,
    /// Reads since the deadline was armed.
    reads: u32,
}

impl<S: Socket> Timed<S> {
    fn new(socket: S) -> Self {
        Self {
            socket,
            standing: None,
            applied: None,
            deadline: None,
            reads: 0,
        }
    }

    fn set_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.standing = timeout;
        Ok(())
    }

    /// Gives the socket the standing timeout, if it has another.
    fn apply(&mut self) -> io::Result<()> {
        if self.applied != Some(self.standing) {
            // Unknown until both are set.
            self.applied = None;
            self.socket.set_read_timeout(self.standing)?;
            self.socket.set_write_timeout(self.standing)?;
            self.applied = Some(self.standing);
        }
        Ok(())
    }

    fn arm(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
        self.reads = 0;
    }

    fn disarm(&mut self) -> io::Result<()> {
        // A read timeout a deadline shortened is set back before the next read or write.
        self.deadline = None;
        Ok(())
    }
}

impl<S: Socket> Read for Timed<S> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        self.apply()?;
        let mut timeout = self.standing;
        if let Some(deadline) = self.deadline {
            if self.reads > 0 {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                // The read timeout is not the standing one any more.
                self.applied = None;
                self.socket.set_read_timeout(Some(left))?;
                timeout = Some(left);
            }
            self.reads = self.reads.saturating_add(1);
        }
        interrupt::ready(self.socket.as_fd(), PollFlags::POLLIN, timeout)?;
        self.socket.read(buffer)
    }
}

impl<S: Socket> Write for Timed<S> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.apply()?;
        if !interrupt::inside() {
            return self.socket.write(bytes);
        }
        // Inside `interrupt::within` no write blocks: a socket with room for part of `bytes`
        // (a script sent in full to a server that stopped reading) would hold it up past a
        // signal until the write timeout. What the socket takes is sent; the rest waits in
        // the poll.
        loop {
            interrupt::ready(self.socket.as_fd(), PollFlags::POLLOUT, self.standing)?;
            match socket::send(
                self.socket.as_fd().as_raw_fd(),
                bytes,
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            ) {
                Ok(sent) => return Ok(sent),
                Err(Errno::EAGAIN | Errno::EINTR) => {}
                Err(err) => return Err(err.into()),
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.socket.flush()
    }
}

/// An open connection.
pub(crate) struct Connection {
    stream: Stream,
    reader: Reader,
    /// A reply may be in flight (a timeout) or the stream failed: not to be reused.
    broken: bool,
    /// What TLS said when the stream failed: a server that refuses the client certificate
    /// says so only after the client's side of the handshake, on the first read.
    tls_error: Option<rustls::Error>,
    /// The bound on one request (see [`Self::set_timeout`]).
    timeout: Duration,
}

impl Connection {
    /// Connects to `address` (through TLS when `tls` is given) within `timeout`: resolving,
    /// connecting and the TLS handshake. Failures carry their outcome.
    pub(crate) fn open(
        address: &Address,
        tls: Option<&Arc<Tls>>,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let deadline = Instant::now() + timeout;
        let left = || {
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1))
        };
        let stream = match address {
            Address::Unix(path) => {
                let unix = UnixStream::connect(path).map_err(|err| unreachable(&err, timeout))?;
                Stream::Unix(Timed::new(unix))
            }
            Address::Tcp { host, port } => {
                let tcp =
                    connect_tcp(host, *port, deadline).map_err(|err| unreachable(&err, timeout))?;
                tcp.set_nodelay(true)
                    .map_err(|err| unreachable(&err, timeout))?;
                match tls {
                    None => Stream::Tcp(Timed::new(tcp)),
                    Some(tls) => {
                        let mut tcp = Timed::new(tcp);
                        tcp.set_timeout(Some(left()))
                            .map_err(|err| unreachable(&err, timeout))?;
                        // However many reads the handshake takes.
                        tcp.arm(deadline);
                        let session = tls.session(host)?;
                        let mut stream = rustls::StreamOwned::new(session, tcp);
                        // The handshake now, inside the connect timeout; its errors say what
                        // was wrong with the certificates.
                        while stream.conn.is_handshaking() {
                            if let Err(err) = stream.conn.complete_io(&mut stream.sock) {
                                return Err(super::tls::classify(&err, timeout));
                            }
                            if Instant::now() >= deadline {
                                return Err(fail(
                                    Failure::Unavailable,
                                    "no TLS handshake within the connect timeout",
                                ));
                            }
                        }
                        stream
                            .sock
                            .disarm()
                            .map_err(|err| unreachable(&err, timeout))?;
                        Stream::Tls(Box::new(stream))
                    }
                }
            }
        };
        let mut connection = Self {
            stream,
            reader: Reader::new(),
            broken: false,
            tls_error: None,
            timeout,
        };
        connection
            .set_timeout(left())
            .map_err(|err| unreachable(&err, timeout))?;
        Ok(connection)
    }

    /// Bounds each later request: each write, and all the reads of its reply together.
    pub(crate) fn set_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        self.timeout = timeout.max(Duration::from_millis(1));
        self.stream.set_timeout(Some(self.timeout))
    }

    /// Reads the next message the server pushes (Pub/Sub), within the timeout in force.
    pub(crate) fn next_push(&mut self) -> RedisResult<Value> {
        self.within_timeout(Self::receive)
    }

    /// A handle that can end this connection from another thread: a read blocked on it
    /// returns at once.
    pub(crate) fn closer(&self) -> io::Result<Closer> {
        Ok(match &self.stream {
            Stream::Tcp(tcp) => Closer::Tcp(tcp.socket.try_clone()?),
            Stream::Unix(unix) => Closer::Unix(unix.socket.try_clone()?),
            Stream::Tls(tls) => Closer::Tcp(tls.sock.socket.try_clone()?),
        })
    }

    /// The TLS error that broke the connection, if that is what broke it.
    pub(crate) fn tls_error(&self) -> Option<&rustls::Error> {
        self.tls_error.as_ref()
    }

    fn send(&mut self, bytes: &[u8]) -> RedisResult<()> {
        let sent = self
            .stream
            .write_all(bytes)
            .and_then(|()| self.stream.flush());
        if let Err(err) = &sent {
            self.broken = true;
            self.tls_error = super::tls::rustls_error(err).cloned();
        }
        Ok(sent?)
    }

    /// Runs `exchange` (a request and its reply, or replies) with every read ending by one
    /// deadline, the timeout from now.
    fn within_timeout<T>(
        &mut self,
        exchange: impl FnOnce(&mut Self) -> RedisResult<T>,
    ) -> RedisResult<T> {
        self.stream.arm(Instant::now() + self.timeout);
        let result = exchange(self);
        if self.stream.disarm().is_err() {
            // The socket keeps a shorter timeout than the next request is owed.
            self.broken = true;
        }
        result
    }

    fn receive(&mut self) -> RedisResult<Value> {
        let mut reader = Recording {
            stream: &mut self.stream,
            tls_error: &mut self.tls_error,
        };
        let received = self.reader.read(&mut reader);
        if received.is_err() {
            self.broken = true;
        }
        received
    }
}

/// Ends a connection from another thread (see [`Connection::closer`]).
pub(crate) enum Closer {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Closer {
    pub(crate) fn close(&self) {
        let _ = match self {
            Closer::Tcp(tcp) => tcp.shutdown(std::net::Shutdown::Both),
            Closer::Unix(unix) => unix.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command(&mut self, command: &[u8]) -> RedisResult<Value> {
        self.within_timeout(|con| {
            con.send(command)?;
            con.receive()
        })
    }

    fn req_packed_commands(
        &mut self,
        commands: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.within_timeout(|con| {
            con.send(commands)?;
            let mut replies = Vec::with_capacity(count);
            for index in 0..offset + count {
                let reply = con.receive()?;
                if index >= offset {
                    replies.push(reply);
                }
            }
            Ok(replies)
        })
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        !self.broken
    }
}

/// Reads from the stream, keeping the TLS error of a failed read (the reply keeps only its
/// text).
struct Recording<'a> {
    stream: &'a mut Stream,
    tls_error: &'a mut Option<rustls::Error>,
}

impl Read for Recording<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buffer).inspect_err(|err| {
            *self.tls_error = super::tls::rustls_error(err).cloned();
        })
    }
}

/// How long the first connect attempt waits for an answer; the second waits twice as long,
/// and the third whatever is left of the connect timeout. The kernel sends a SYN that got no
/// answer again only after a second (the initial retransmission timeout of RFC 6298), and a
/// connection whose first SYN was lost would cost that second; a new socket after 250 ms
/// sends a new SYN instead. Only two attempts are short: each closes a socket whose SYN may
/// still be answered, so a link whose round trip is longer than an attempt pays for it (with
/// the default 2 s, a round trip up to 1.25 s still connects, in the last attempt).
const FIRST_ATTEMPT: Duration = Duration::from_millis(250);

/// The rounds of short attempts before the last, which waits for what is left.
const SHORT_ROUNDS: u32 = 2;

/// Resolves `host` and connects to its addresses until one answers or `deadline`: in rounds,
/// each address in turn per round, each attempt a new socket (a new SYN) waiting
/// [`FIRST_ATTEMPT`] in the first round, twice as long in the second, and in the last what is
/// left of the deadline, shared among the addresses still silent. An address that answered
/// with a refusal or an error is not tried again (a refusal still fails at once); only silence
/// is. Every address gets its first attempt early, so a silent address no longer uses up the
/// deadline of the ones after it.
fn connect_tcp(host: &str, port: u16, deadline: Instant) -> io::Result<TcpStream> {
    let mut addresses = look_up(host, port, deadline)?;
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the host name resolves to nothing");
    let mut round = 0;
    while !addresses.is_empty() {
        let mut silent = Vec::with_capacity(addresses.len());
        let count = addresses.len();
        for (n, address) in addresses.into_iter().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            let wait = if round < SHORT_ROUNDS {
                (FIRST_ATTEMPT * 2_u32.pow(round)).min(left)
            } else {
                // The last round: the rest, shared by the addresses not tried in it yet.
                left / u32::try_from(count - n).unwrap_or(u32::MAX)
            };
            match connect_one(&address, wait.max(Duration::from_millis(1))) {
                Ok(tcp) => return Ok(tcp),
                Err(err) => {
                    if matches!(
                        err.kind(),
                        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                    ) {
                        silent.push(address);
                    }
                    last = err;
                }
            }
        }
        if round >= SHORT_ROUNDS {
            break;
        }
        addresses = silent;
        round += 1;
    }
    Err(last)
}

/// One attempt to connect to `address`, waiting `wait` at most: std's, or inside
/// `interrupt::within` one whose wait a signal cuts short.
fn connect_one(address: &SocketAddr, wait: Duration) -> io::Result<TcpStream> {
    if !interrupt::inside() {
        return TcpStream::connect_timeout(address, wait);
    }
    // No new connection (a SYN) once the request is over.
    interrupt::ended()?;
    let family = match address {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let socket = socket::socket(
        family,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    match socket::connect(socket.as_raw_fd(), &SockaddrStorage::from(*address)) {
        Ok(()) | Err(Errno::EINPROGRESS) => {}
        Err(err) => return Err(err.into()),
    }
    interrupt::ready(socket.as_fd(), PollFlags::POLLOUT, Some(wait)).map_err(|err| {
        match err.kind() {
            // As std says it.
            io::ErrorKind::WouldBlock => io::ErrorKind::TimedOut.into(),
            _ => err,
        }
    })?;
    match socket::getsockopt(&socket, sockopt::SocketError)? {
        0 => {}
        errno => return Err(io::Error::from_raw_os_error(errno)),
    }
    let tcp = TcpStream::from(socket);
    tcp.set_nonblocking(false)?;
    Ok(tcp)
}

/// A failure to reach the server at all. Refused, or no route to the host: an answer that
/// nothing was sent ([`NotRun::Unreached`]); silence is not one (a host that is down, or
/// a lost packet: only the connect timeout ends it), nor a name lookup without an answer.
/// No thread for a lookup is the system's refusal, as for any thread.
fn unreachable(err: &io::Error, timeout: Duration) -> anyhow::Error {
    match err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<LookupFailed>())
    {
        Some(LookupFailed::Silent) => {
            return fail(
                Failure::Unavailable,
                format!(
                    "the host name lookup got no answer within {}",
                    crate::duration::display(timeout)
                ),
            );
        }
        Some(LookupFailed::System(what, err)) => {
            return system(what, io::Error::new(err.kind(), err.to_string()));
        }
        None => {}
    }
    match err.kind() {
        io::ErrorKind::ConnectionRefused => fail_not_run(NotRun::Unreached, "connection refused"),
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
            fail_not_run(NotRun::Unreached, err.to_string())
        }
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => fail(
            Failure::Unavailable,
            format!("no answer within {}", crate::duration::display(timeout)),
        ),
        _ => fail(Failure::Unavailable, err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::{failure_of, reason};

    /// A lookup that got no answer says so (not as a silent server); one that had no thread
    /// to run on is the system's refusal, as a worker thread's is.
    #[test]
    fn lookups_that_fail_on_redlocks_side_are_worded_by_what_failed() {
        let timeout = Duration::from_millis(500);
        let silent = unreachable(&LookupFailed::Silent.into(), timeout);
        assert_eq!(failure_of(&silent), Some(Failure::Unavailable));
        assert_eq!(
            reason(&silent),
            "the host name lookup got no answer within 500ms"
        );

        let refused = io::Error::from_raw_os_error(nix::libc::EAGAIN);
        let shown = refused.to_string();
        let no_thread = unreachable(&LookupFailed::System("a thread", refused).into(), timeout);
        assert_eq!(failure_of(&no_thread), Some(Failure::System));
        assert_eq!(
            reason(&no_thread),
            format!("could not create a thread: {shown}")
        );

        // A connect's silence and refusal keep their words.
        let connect = unreachable(&io::ErrorKind::TimedOut.into(), timeout);
        assert_eq!(reason(&connect), "no answer within 500ms");
    }
}
