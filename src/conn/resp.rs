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
/// Redis's own limit on a bulk string (`proto-max-bulk-len`).
const MAX_BULK: usize = 512 * 1024 * 1024;
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
            b'$' => match length(line, MAX_BULK)? {
                None => (Step::Value(Value::Nil), after_line),
                Some(size) => {
                    let end = after_line + size;
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
                    self.open.push((count, Vec::with_capacity(count.min(1024))));
                    (Step::Opened, after_line)
                }
            },
            _ => return Err(garbage("a byte that starts no RESP2 value")),
        };
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

/// A reply that is not RESP2: the crate's kind for it (`ErrorKind::Parse`), which redlock
/// reports as "not a Redis server".
fn garbage(what: &str) -> RedisError {
    ParsingError::from(format!("not RESP2: {what}")).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads every reply in `bytes`, delivered `chunk` bytes per read.
    fn replies(bytes: &[u8], chunk: usize) -> Vec<RedisResult<Value>> {
        struct Trickle<'a>(&'a [u8], usize);
        impl Read for Trickle<'_> {
            fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(self.1).min(buffer.len());
                buffer[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
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

    #[test]
    fn a_stream_that_ends_inside_a_reply_is_an_io_error() {
        let mut reader = Reader::new();
        let err = reader.read(&mut &b"*2\r\n:1\r\n"[..]).unwrap_err();
        assert!(err.is_io_error(), "{err}");
    }
}
