//! A waiter's place in a lock's queue, and the wake-ups scripts push onto its wake list: the
//! lock handed over, first in line, near the head, or look again.

use std::time::Duration;

use super::record::decode;
use super::{Holder, Lock, Token};
use crate::conn::Session;

/// How long a wake-up waits in a waiter's list; a live waiter takes it within milliseconds,
/// so this only bounds what a dead waiter leaves behind.
pub const WAKE_TTL: Duration = Duration::from_secs(5);

/// What a script pushed onto a waiter's wake list (see `hand_off` in `lua/prelude/70-hand-off.lua`).
#[derive(Debug)]
pub enum Wake {
    /// The lock was handed to this waiter: a grant of [`GRANT`](super::GRANT) with this fence, ending at
    /// `expires` (server time, Unix ms). The waiter's next acquire call, or an extend, turns
    /// it into a full lease.
    Granted { fence: u64, expires: u64 },
    /// The waiter is now first in line, behind `holder`, in a queue of `length`; nobody tells
    /// it when the holders' grants at `expires` (server time, Unix ms) run out unclaimed.
    /// Sent only when that is before the waiter's next call is due (its last reply's hint or
    /// an `h:`); else that call tells it.
    Watch {
        expires: u64,
        length: usize,
        /// Boxed: a record is most of the enum's size, and only this variant carries one.
        holder: Option<Box<Holder>>,
    },
    /// The waiter moved into the first places of the queue, where its entry lives only a head
    /// lease past its last call: it must call by `by` (server time, Unix ms) unless handed the
    /// lock or told to watch first.
    Head { by: u64 },
    /// Anything else: look at the lock again.
    Look,
}

impl Wake {
    fn parse(message: &str) -> Self {
        let mut parts = message.splitn(4, ':');
        let kind = parts.next();
        let mut number = || parts.next().and_then(|part| part.parse::<u64>().ok());
        match (kind, number(), number()) {
            (Some("g"), Some(fence), Some(expires)) => Self::Granted { fence, expires },
            (Some("h"), Some(by), None) => Self::Head { by },
            (Some("w"), Some(expires), Some(length)) => Self::Watch {
                expires,
                length: usize::try_from(length).unwrap_or(usize::MAX),
                holder: parts
                    .next()
                    .and_then(|json| decode(json).ok())
                    .map(Box::new),
            },
            _ => Self::Look,
        }
    }
}

/// A place in a lock's queue: the id that names its wake list, and the token it will hold.
#[derive(Debug, Clone)]
pub struct Waiter {
    pub id: String,
    pub token: Token,
    /// Claims a lock handed over with a call of its own (`acquire`), rather than starting on
    /// the grant (`run`): it is handed a [`CLAIM_GRANT`](super::CLAIM_GRANT), so dying as its
    /// turn comes costs the queue that much, not a [`GRANT`](super::GRANT). (A `run` waiter's
    /// grant is taken back as soon if the waiter never took its wake-up: see `GRANT`.)
    pub claims: bool,
}

impl Waiter {
    pub fn new() -> Self {
        Self {
            id: uuid::Uuid::new_v4().simple().to_string()[..16].to_owned(),
            token: Token::generate(),
            claims: false,
        }
    }
}

impl Default for Waiter {
    fn default() -> Self {
        Self::new()
    }
}

impl Lock {
    /// Blocks until a script wakes `waiter` or `timeout` passes; `None` if nothing came.
    pub fn wait_for_wake(
        &self,
        session: &mut Session,
        waiter: &Waiter,
        timeout: Duration,
    ) -> anyhow::Result<Option<Wake>> {
        // The read timeout must outlast the block, or the server pops a wake-up for a client
        // that has stopped listening and the wake-up is lost.
        let command_timeout = session.command_timeout();
        session.set_command_timeout(timeout + command_timeout.max(Duration::from_secs(1)))?;
        let key = self.keys.wake(&waiter.id);
        let popped: Option<(String, String)> = session.run(|con| {
            redis::cmd("BLPOP")
                .arg(&key)
                .arg(format!("{:.3}", timeout.as_secs_f64().max(0.001)))
                .query(con)
        })?;
        session.set_command_timeout(command_timeout)?;
        Ok(popped.map(|(_, message)| Wake::parse(&message)))
    }
}

#[cfg(test)]
mod tests {
    use super::Wake;

    #[test]
    fn wake_messages_parse_and_anything_else_means_look_again() {
        assert!(matches!(
            Wake::parse("g:7:1795329318937"),
            Wake::Granted {
                fence: 7,
                expires: 1_795_329_318_937
            }
        ));
        let record = r#"{"mode":"exclusive","limit":0,"fence":7,"host":"h:1","pid":9,"user":"u","cmd":"a:b","since":1,"ttl":2000,"exp":2001,"count":1}"#;
        let Wake::Watch {
            expires,
            length,
            holder,
        } = Wake::parse(&format!("w:2001:3:{record}"))
        else {
            panic!("not a watch");
        };
        assert_eq!((expires, length), (2001, 3));
        assert_eq!(holder.unwrap().who.command, "a:b");
        assert!(matches!(
            Wake::parse("h:1795329318937"),
            Wake::Head {
                by: 1_795_329_318_937
            }
        ));
        for other in ["1", "", "g:7", "g:x:1", "w:1", "x:1:2", "h", "h:x", "h:1:2"] {
            assert!(matches!(Wake::parse(other), Wake::Look), "{other:?}");
        }
    }
}
