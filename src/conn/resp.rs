//! Reads Redis replies (RESP2, the protocol a connection speaks until it sends `HELLO 3`, which
//! redlock never does) off a byte stream into the redis crate's `Value`.
//!
//! redlock has its own reader rather than the crate's parser for one measured reason: the
//! crate's parser finds line ends with the memchr crate, whose first call asks the CPU which
//! vector instructions it has (std's feature detection, eight `cpuid` instructions). Inside a
//! virtual machine each `cpuid` is a trap to the hypervisor: 55 µs per process on this
//! project's machines, more than a whole round trip to Redis on loopback, paid by every
//! `redlock` that reads a reply (docs/performance.md). A reply of a few dozen bytes needs no
//! vector instructions.
//!
//! Error replies (`-ERR ...`) are rare and their meaning (`NOSCRIPT`, `MOVED`, `NOPERM` ...)
//! is the crate's: their line is handed to the crate's parser, so they classify exactly as the
//! crate's own connections would.

use std::io::{self, Read};

use redis::{ParsingError, RedisError, RedisResult, Value};

/// Nesting deeper than this is not a reply redlock asked for (the crate's parser stops at the
/// same depth).
const MAX_DEPTH: usize = 100;
/// A line (a header, a simple string, an error) longer than this is not from Redis.
const MAX_LINE: usize = 64 * 1024;
/// The longest bulk string redlock accepts. The longest it asks for is a record a script
/// returns (a holder, a waiter, a history entry: a few hundred bytes, a `--note` of at most
/// 500 bytes among them) or `INFO` (tens of KB): 4 MiB leaves two orders of magnitude of margin,
/// where Redis's own limit (512 MiB) would let one reply take gigabytes.
const MAX_BULK: usize = 4 * 1024 * 1024;
/// The most bytes one reply may take on the wire. The largest reply redlock asks for is an
/// `inspect` of 1,000 holders and 100 waiters, or a SCAN page of `list` (about 1,000 keys):
/// a few MB at most.
const MAX_REPLY: usize = 64 * 1024 * 1024;
/// The most values one reply may hold, counting every element of every array in it (each
/// costs memory beyond its bytes on the wire). The largest reply redlock asks for has a few
/// thousand (see `MAX_REPLY`).
const MAX_VALUES: usize = 1_000_000;
/// What an error about a reply over those limits says (`classify` tells it apart).
pub(super) const TOO_LARGE: &str = "a reply larger than any redlock asks for";
/// Bytes asked of the stream per read.
const READ_SIZE: usize = 8 * 1024;

/// Replies read so far and not yet returned, and the arrays under construction.
#[derive(Default)]
pub(crate) struct Reader {
    buffer: Vec<u8>,
    /// Where the next unread byte of `buffer` is.
    start: usize,
    /// Arrays being filled: elements still expected, elements so far.
    open: Vec<(usize, Vec<Value>)>,
    /// Bytes of the reply being read taken from `buffer` so far (see `MAX_REPLY`).
    reply_bytes: usize,
    /// Values the reply being read has announced so far (see `MAX_VALUES`).
    reply_values: usize,
}

/// What one step over the buffer found.
enum Step {
    /// A whole value (a scalar, or an array that is complete).
    Value(Value),
    /// An array header: its elements follow.
    Opened,
    /// The buffer ends before the next item does.
    NeedMore,
}

impl Reader {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The next reply, reading from `stream` as needed. An I/O error (a timeout, a closed
    /// connection: `UnexpectedEof`) is returned as the crate returns it; bytes that are not
    /// RESP are a parsing error. After an error the reader's state is undefined: the
    /// connection is not reused (see `transport`).
    pub(crate) fn read(&mut self, stream: &mut impl Read) -> RedisResult<Value> {
        loop {
            match self.step()? {
                Step::Value(value) => {
                    if let Some(reply) = self.complete(value) {
                        self.reply_bytes = 0;
                        self.reply_values = 0;
                        if self.start == self.buffer.len() {
                            self.buffer.clear();
                            self.start = 0;
                        }
                        return Ok(reply);
                    }
                }
                Step::Opened => {}
                Step::NeedMore => self.fill(stream)?,
            }
        }
    }

    /// Adds `value` to the innermost open array, closing arrays that are then full; returns
    /// the reply when the outermost value is complete.
    fn complete(&mut self, mut value: Value) -> Option<Value> {
        loop {
            let Some((left, elements)) = self.open.last_mut() else {
                return Some(value);
            };
            elements.push(value);
            *left -= 1;
            if *left > 0 {
                return None;
            }
            let (_, elements) = self.open.pop()?;
            value = Value::Array(elements);
        }
    }

    /// Appends what the stream has (at least one byte). Through a buffer on the stack, so the
    /// reply buffer only grows by what arrived (fresh memory costs a page fault per page).
    fn fill(&mut self, stream: &mut impl Read) -> RedisResult<()> {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        let mut chunk = [0u8; READ_SIZE];
        let read = loop {
            match stream.read(&mut chunk) {
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        if read == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        self.buffer.extend_from_slice(&chunk[..read]);
        Ok(())
    }

    /// Reads one item at `start`, moving past it only when it is whole.
    fn step(&mut self) -> RedisResult<Step> {
        let unread = &self.buffer[self.start..];
        // The first byte says whether this is RESP at all: a server that answers in another
        // protocol (an HTTP server's HTML, with bare line feeds) is told apart at once, not
        // after waiting for a line end that never comes.
        match unread.first() {
            None => return Ok(Step::NeedMore),
            Some(first) if !b"+-:$*".contains(first) => {
                return Err(garbage("a byte that starts no RESP2 value"));
            }
            Some(_) => {}
        }
        let Some(line_end) = find_crlf(unread) else {
            if unread.len() > MAX_LINE {
                return Err(garbage("a line without an end"));
            }
            return Ok(Step::NeedMore);
        };
        let line = &unread[1..line_end];
        let after_line = line_end + 2;
        let (step, used) = match unread[0] {
            b'+' => {
                let text =
                    std::str::from_utf8(line).map_err(|_| garbage("a status that is not UTF-8"))?;
                let value = if text == "OK" {
                    Value::Okay
                } else {
                    Value::SimpleString(text.to_owned())
                };
                (Step::Value(value), after_line)
            }
            b'-' => (
                Step::Value(redis::parse_redis_value(&unread[..after_line])?),
                after_line,
            ),
            b':' => (Step::Value(Value::Int(integer(line)?)), after_line),
            b'$' => match length(line, usize::MAX)? {
                None => (Step::Value(Value::Nil), after_line),
                Some(size) if size > MAX_BULK => {
                    return Err(too_large(&format!(
                        "a string of {size} bytes; the limit is {MAX_BULK}"
                    )));
                }
                Some(size) => {
                    let end = after_line + size;
                    // Refused before it is read into memory.
                    if self.reply_bytes + end + 2 > MAX_REPLY {
                        return Err(too_large(&format!("more than {MAX_REPLY} bytes")));
                    }
                    if unread.len() < end + 2 {
                        return Ok(Step::NeedMore);
                    }
                    if &unread[end..end + 2] != b"\r\n" {
                        return Err(garbage("a bulk string longer than its length"));
                    }
                    let bytes = unread[after_line..end].to_vec();
                    (Step::Value(Value::BulkString(bytes)), end + 2)
                }
            },
            b'*' => match length(line, usize::MAX)? {
                None => (Step::Value(Value::Nil), after_line),
                Some(0) => (Step::Value(Value::Array(Vec::new())), after_line),
                Some(count) => {
                    if self.open.len() >= MAX_DEPTH {
                        return Err(garbage("arrays nested too deep"));
                    }
                    // Refused on the promise, before the elements are read.
                    if count > MAX_VALUES - self.reply_values {
                        return Err(too_large(&format!("more than {MAX_VALUES} values")));
                    }
                    self.reply_values += count;
                    self.open.push((count, Vec::with_capacity(count.min(1024))));
                    (Step::Opened, after_line)
                }
            },
            _ => return Err(garbage("a byte that starts no RESP2 value")),
        };
        self.reply_bytes += used;
        if self.reply_bytes > MAX_REPLY {
            return Err(too_large(&format!("more than {MAX_REPLY} bytes")));
        }
        self.start += used;
        Ok(step)
    }
}

/// The offset of the first `\r\n` in `bytes`. A plain loop: see the module's text.
fn find_crlf(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    while at + 1 < bytes.len() {
        if bytes[at] == b'\r' && bytes[at + 1] == b'\n' {
            return Some(at);
        }
        at += 1;
    }
    None
}

fn integer(line: &[u8]) -> RedisResult<i64> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| garbage("an integer that is not one"))
}

/// A length header: `None` for -1 (nil), else a length up to `max`.
fn length(line: &[u8], max: usize) -> RedisResult<Option<usize>> {
    match integer(line)? {
        -1 => Ok(None),
        n => usize::try_from(n)
            .ok()
            .filter(|n| *n <= max)
            .map(Some)
            .ok_or_else(|| garbage("a length out of range")),
    }
}

/// A reply over one of the limits above: the same kind as [`garbage`], told apart by its text.
fn too_large(what: &str) -> RedisError {
    ParsingError::from(format!("{TOO_LARGE} ({what})")).into()
}

/// A reply that is not RESP2: the crate's kind for it (`ErrorKind::Parse`), which redlock
/// reports as "not a Redis server".
fn garbage(what: &str) -> RedisError {
    ParsingError::from(format!("not RESP2: {what}")).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of `.0` delivered `.1` bytes per read.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(self.1).min(buffer.len());
            buffer[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    /// Reads every reply in `bytes`, delivered `chunk` bytes per read.
    fn replies(bytes: &[u8], chunk: usize) -> Vec<RedisResult<Value>> {
        let mut stream = Trickle(bytes, chunk);
        let mut reader = Reader::new();
        let mut out = Vec::new();
        loop {
            let reply = reader.read(&mut stream);
            let eof = matches!(&reply, Err(err) if err.is_io_error());
            if eof {
                return out;
            }
            let stop = reply.is_err();
            out.push(reply);
            if stop {
                return out;
            }
        }
    }

    #[test]
    fn reads_what_the_crates_parser_reads_whatever_the_chunks() {
        let wire: &[u8] =
            b"+OK\r\n+QUEUED\r\n:-42\r\n$5\r\nhe\r\no\r\n$-1\r\n$0\r\n\r\n*-1\r\n*0\r\n\
            *3\r\n:1\r\n*2\r\n$1\r\na\r\n*1\r\n*0\r\n$3\r\nend\r\n\
            -NOSCRIPT No matching script\r\n-MOVED 3999 127.0.0.1:6381\r\n-WEIRD thing\r\n";
        let mut expected = Vec::new();
        let mut parser = redis::Parser::new();
        let mut rest = wire;
        // The crate's parser buffers what it reads: it ends at the stream's end, not ours.
        while let Ok(value) = parser.parse_value(&mut rest) {
            expected.push(value);
        }
        assert_eq!(expected.len(), 12);
        for chunk in [1, 2, 3, 7, 1000] {
            let got: Vec<Value> = replies(wire, chunk)
                .into_iter()
                .map(Result::unwrap)
                .collect();
            assert_eq!(got, expected, "chunks of {chunk}");
        }
    }

    #[test]
    fn what_is_not_resp2_is_a_parse_error() {
        for wire in [
            &b"HTTP/1.1 400 Bad Request\r\n"[..],
            b"<!DOCTYPE HTML>\n<html>\n",
            b":12x\r\n",
            b"$3\r\nabcd\r\n",
            b"$-2\r\n",
            b"%1\r\n",
        ] {
            let got = replies(wire, 1000);
            let err = got[0].as_ref().unwrap_err();
            assert_eq!(err.kind(), redis::ErrorKind::Parse, "{wire:?}: {err}");
        }
        let nested = "*1\r\n".repeat(MAX_DEPTH + 1);
        let err = replies(nested.as_bytes(), 1000).remove(0).unwrap_err();
        assert_eq!(err.kind(), redis::ErrorKind::Parse);
        let endless = vec![b'+'; MAX_LINE + READ_SIZE + 1];
        let err = replies(&endless, READ_SIZE).remove(0).unwrap_err();
        assert_eq!(err.kind(), redis::ErrorKind::Parse);
    }

    /// An endless stream: `head`, then `body` over and over, `chunk` bytes at most per read.
    /// Past the most bytes one reply may take (and a read's worth more) it fails the read
    /// with `io::ErrorKind::Other`: a reader that gets there has not kept to its limits.
    struct Endless {
        head: Vec<u8>,
        body: Vec<u8>,
        chunk: usize,
        at: usize,
        /// Bytes handed out so far.
        given: usize,
    }

    const BEYOND_THE_LIMITS: usize = MAX_REPLY + MAX_LINE + 2 * READ_SIZE;

    impl Read for Endless {
        fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
            if self.given > BEYOND_THE_LIMITS {
                return Err(io::ErrorKind::Other.into());
            }
            let most = self.chunk.min(buffer.len());
            let buffer = &mut buffer[..most];
            let mut n = 0;
            while n < buffer.len() {
                let source = if self.at < self.head.len() {
                    &self.head[self.at..]
                } else if self.body.is_empty() {
                    break;
                } else {
                    let offset = (self.at - self.head.len()) % self.body.len();
                    &self.body[offset..]
                };
                let take = source.len().min(buffer.len() - n);
                buffer[n..n + take].copy_from_slice(&source[..take]);
                n += take;
                self.at += take;
            }
            self.given += n;
            Ok(n)
        }
    }

    fn endless(head: &[u8], body: &[u8]) -> Endless {
        Endless {
            head: head.to_vec(),
            body: body.to_vec(),
            chunk: usize::MAX,
            at: 0,
            given: 0,
        }
    }

    /// Replies larger than any redlock asks for are refused as they come,
    /// having read no more than the limits allow.
    #[test]
    fn a_reply_over_the_limits_is_refused_before_it_is_read() {
        let bulk = format!("${MAX_BULK}\r\n{}\r\n", "x".repeat(MAX_BULK));
        let cases = [
            // A string over the limit: refused at its header.
            endless(format!("*1\r\n${}\r\n", MAX_BULK + 1).as_bytes(), b"x"),
            endless(b"$536870912\r\n", b"x"),
            // An array promising too much, or arrays promising too much together.
            endless(format!("*{}\r\n", MAX_VALUES + 1).as_bytes(), b":1\r\n"),
            endless(b"*4294967296\r\n", b":1\r\n"),
            endless(b"*1000\r\n*1000000\r\n", b":1\r\n"),
            endless(b"*2\r\n*999999\r\n", b"*2\r\n:1\r\n:1\r\n"),
            // Strings each within the limit, too many bytes together.
            endless(b"*1000\r\n", bulk.as_bytes()),
        ];
        for mut stream in cases {
            let Err(err) = Reader::new().read(&mut stream) else {
                panic!("a reply from {:?}", String::from_utf8_lossy(&stream.head));
            };
            assert_eq!(err.kind(), redis::ErrorKind::Parse, "{err}");
            assert!(err.to_string().contains(TOO_LARGE), "{err}");
            assert!(stream.given <= BEYOND_THE_LIMITS, "read {}", stream.given);
        }
        // Just within the limits is a reply.
        let mut wire = format!("*2\r\n{bulk}*{}\r\n", MAX_VALUES - 2).into_bytes();
        wire.extend(b":1\r\n".repeat(MAX_VALUES - 2));
        let reply = Reader::new().read(&mut &wire[..]).unwrap();
        assert!(matches!(reply, Value::Array(elements) if elements.len() == 2));
    }

    /// A small deterministic PRNG (xorshift64*): the same inputs on every run.
    struct Random(u64);

    impl Random {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % n as u64).unwrap_or(0)
        }
    }

    /// Whatever bytes arrive, in whatever pieces, even without end, the
    /// reader returns (a reply or an error, never a panic) within the limits: it never holds
    /// more than one item and a read in its buffer, nor reads past the most one reply may take.
    #[test]
    fn arbitrary_bytes_in_arbitrary_pieces_end_in_bounded_memory() {
        // Pieces of RESP, to get past the first byte more often than noise would.
        let pieces: [&[u8]; 18] = [
            b"*",
            b"$",
            b":",
            b"+",
            b"-",
            b"\r\n",
            b"-1",
            b"0",
            b"1",
            b"3",
            b"12",
            b"999999",
            b"4194305",
            b"OK",
            b"ERR x",
            b"*1\r\n",
            b"*1000\r\n",
            b":1\r\n",
        ];
        // What repeats without end in some rounds: values and array headers.
        let thousand = [&b"*1000\r\n"[..], &b":1\r\n".repeat(1000)].concat();
        let tails: [&[u8]; 4] = [
            b":1\r\n",
            b"+OK\r\n",
            &thousand,
            b"*2\r\n$3\r\nabc\r\n*0\r\n",
        ];
        let mut random = Random(0x9E37_79B9_7F4A_7C15);
        for round in 0..20_000 {
            let mut head = Vec::new();
            for _ in 0..random.below(40) {
                if random.below(4) == 0 {
                    head.push(u8::try_from(random.below(256)).unwrap_or(0));
                } else {
                    head.extend_from_slice(pieces[random.below(pieces.len())]);
                }
            }
            let mut stream = endless(&head, b"");
            stream.chunk = 1 + random.below(16);
            if round % 400 == 0 {
                // Arrays, then values (or more arrays) without end.
                stream.head.clear();
                for _ in 0..=random.below(2) {
                    let length = [2, 1000, 999_999][random.below(3)];
                    stream
                        .head
                        .extend_from_slice(format!("*{length}\r\n").as_bytes());
                }
                for _ in 0..=random.below(2) {
                    stream
                        .body
                        .extend_from_slice(tails[random.below(tails.len())]);
                }
                stream.chunk = READ_SIZE;
            }
            let mut reader = Reader::new();
            // Enough replies to end every input without end that keeps to the limits.
            for _ in 0..1000 {
                let reply = reader.read(&mut stream);
                assert!(reader.buffer.len() <= MAX_BULK + MAX_LINE + READ_SIZE);
                if reply.is_err() {
                    break;
                }
            }
            assert!(
                stream.given <= BEYOND_THE_LIMITS,
                "{:?} then {:?}... without end: read past the limits",
                String::from_utf8_lossy(&stream.head),
                String::from_utf8_lossy(&stream.body[..stream.body.len().min(40)])
            );
        }
    }

    #[test]
    fn a_stream_that_ends_inside_a_reply_is_an_io_error() {
        let mut reader = Reader::new();
        let err = reader.read(&mut &b"*2\r\n:1\r\n"[..]).unwrap_err();
        assert!(err.is_io_error(), "{err}");
    }
}
