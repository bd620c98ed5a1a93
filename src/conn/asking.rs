//! A Cluster node that a request was sent to with `ASK` (its slot is moving there) serves that
//! slot only for a command that follows `ASKING`, and only for that one command. A request is
//! often more than one command: a script that the node has not cached is sent again as EVAL
//! after the NOSCRIPT, and a renewal with `--replicas` is a pipeline. [`Asking`] sends
//! `ASKING` before every command that goes out on it, so each of them is served there.

use redis::{ConnectionLike, ErrorKind, RedisError, RedisResult, Value};

use super::transport::Connection;

/// `ASKING`, packed.
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// A connection to the node an `ASK` named: `ASKING` goes before each command.
pub(super) struct Asking<'a>(pub(super) &'a mut Connection);

impl ConnectionLike for Asking<'_> {
    fn req_packed_command(&mut self, command: &[u8]) -> RedisResult<Value> {
        self.req_packed_commands(command, 0, 1)?
            .pop()
            .ok_or_else(|| RedisError::from((ErrorKind::Parse, "a command got no reply")))
    }

    fn req_packed_commands(
        &mut self,
        commands: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let split = split(commands)?;
        let mut packed = Vec::with_capacity(commands.len() + split.len() * ASKING.len());
        for command in &split {
            packed.extend_from_slice(ASKING);
            packed.extend_from_slice(command);
        }
        let replies = self.0.req_packed_commands(&packed, 0, 2 * split.len())?;
        let mut kept = Vec::with_capacity(count);
        for (index, pair) in replies.chunks(2).enumerate() {
            // ASKING refused (an ACL without +asking): the command after it was not served
            // there, and this says why.
            if let Value::ServerError(err) = &pair[0] {
                return Err(err.clone().into());
            }
            if index >= offset && kept.len() < count {
                kept.push(pair.get(1).cloned().unwrap_or(Value::Nil));
            }
        }
        Ok(kept)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.0.check_connection()
    }

    fn is_open(&self) -> bool {
        self.0.is_open()
    }
}

/// The commands packed one after another in `packed` (RESP arrays of bulk strings, as the redis
/// crate packs them), each as its bytes.
fn split(packed: &[u8]) -> RedisResult<Vec<&[u8]>> {
    let malformed = || RedisError::from((ErrorKind::Client, "a packed command is malformed"));
    // The number after `marker` at `at`, up to its CRLF, and where the next part starts.
    let number = |at: usize, marker: u8| -> RedisResult<(usize, usize)> {
        if packed.get(at) != Some(&marker) {
            return Err(malformed());
        }
        let end = packed[at..]
            .windows(2)
            .position(|pair| pair == b"\r\n")
            .ok_or_else(malformed)?
            + at;
        let value = std::str::from_utf8(&packed[at + 1..end])
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(malformed)?;
        Ok((value, end + 2))
    };
    let mut commands = Vec::new();
    let mut at = 0;
    while at < packed.len() {
        let start = at;
        let (parts, mut next) = number(at, b'*')?;
        for _ in 0..parts {
            let (length, data) = number(next, b'$')?;
            next = data + length + 2;
            if packed.get(data + length..next) != Some(b"\r\n".as_slice()) {
                return Err(malformed());
            }
        }
        commands.push(&packed[start..next]);
        at = next;
    }
    Ok(commands)
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn packed_commands_split_where_each_ends() {
        let mut pipeline = redis::pipe();
        pipeline
            .cmd("EVALSHA")
            .arg("abc")
            .arg(1)
            .arg("key\r\nwith *2\r\n$3 inside")
            .cmd("WAIT")
            .arg(1)
            .arg(500);
        let packed = pipeline.get_packed_pipeline();
        let commands = split(&packed).unwrap();
        assert_eq!(commands.len(), 2);
        assert_eq!(commands.concat(), packed);
        assert_eq!(
            commands[1],
            redis::cmd("WAIT").arg(1).arg(500).get_packed_command()
        );
        assert_eq!(split(b"").unwrap().len(), 0);
        for broken in [
            &b"*1\r\n$6\r\nASK"[..],
            b"*1\r\n$x\r\n",
            b"PING\r\n",
            b"*2\r\n$1\r\na\r\n",
        ] {
            assert!(split(broken).is_err(), "{broken:?}");
        }
    }
}
