//! The status codes that open the scripts' replies, named on both sides of the Lua/Rust
//! boundary: the scripts write `REPLY.<script>.<name>` (each script's own table), Rust reads one
//! enum per reply, and only the number crosses (a test checks that both name the same codes
//! with the same numbers). Each reply is decoded with an exhaustive match on its code: a
//! reply that opens with no code of its script, or whose fields are not what that code sends,
//! is an error, never taken for one of the answers.

use redis::{FromRedisValue, Value};

use crate::exit::{Failure, fail};

/// The status code of one script's reply.
pub(super) trait Code: Copy + 'static {
    /// The script's table in its `REPLY` (only the test that compares the two sides
    /// reads it: the wire carries numbers).
    #[cfg(test)]
    const TABLE: &'static str;
    /// Each code: its name in that table, and its number on the wire.
    const CODES: &'static [(Self, &'static str, i64)];
}

/// Declares the code enum of one script's reply: each variant with its name in the script's
/// `REPLY.<table>` and its number.
macro_rules! codes {
    ($(#[$doc:meta])* $name:ident in $table:literal {
        $($(#[$variant_doc:meta])* $variant:ident: $lua:ident = $number:literal,)*
    }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(super) enum $name {
            $($(#[$variant_doc])* $variant,)*
        }

        impl Code for $name {
            #[cfg(test)]
            const TABLE: &'static str = $table;
            const CODES: &'static [(Self, &'static str, i64)] =
                &[$((Self::$variant, stringify!($lua), $number)),*];
        }
    };
}

codes! {
    /// `lua/acquire.lua`.
    AcquireCode in "acquire" {
        /// `{acquired, fence, now_ms}`: taken, or re-entered.
        Acquired: acquired = 1,
        /// `{busy, now_ms, holder_json or nil, position, length, hint_ms}`.
        Busy: busy = 0,
        /// `{gone, now_ms}`: `stay`, and the waiter is neither queued nor handed the lock.
        Gone: gone = -1,
        /// `{not_held, now_ms}`: re-entering with a token that holds nothing.
        NotHeld: not_held = -2,
        /// `{cancelled, now_ms}`: the token was given up.
        Cancelled: cancelled = -3,
    }
}

codes! {
    /// `lua/release.lua` with op `token`.
    ReleaseCode in "release" {
        /// `released`.
        Released: released = 1,
        /// `not_held`: nothing changed.
        NotHeld: not_held = 0,
        /// `{kept, kept_ms}`: kept for the rest of the minimum hold.
        Kept: kept = 2,
        /// `{still_held, holds_left}`: one hold of a re-entered lock ended.
        StillHeld: still_held = 3,
    }
}

codes! {
    /// `lua/release.lua` with op `leave`.
    LeaveCode in "leave" {
        /// `left`.
        Left: left = 1,
    }
}

codes! {
    /// `lua/extend.lua`.
    ExtendCode in "extend" {
        /// `{extended, now_ms}`.
        Extended: extended = 1,
        /// `{not_held, now_ms}`: nothing changed.
        NotHeld: not_held = 0,
    }
}

codes! {
    /// `lua/raise.lua`.
    RaiseCode in "raise" {
        /// `{raised, now_ms}`.
        Raised: raised = 1,
        /// `{not_held, now_ms}`: nothing changed.
        NotHeld: not_held = 0,
    }
}

codes! {
    /// `lua/refresh.lua`.
    RefreshCode in "refresh" {
        /// `{queued, now_ms, position, length}`.
        Queued: queued = 1,
        /// `{not_queued, now_ms}`.
        NotQueued: not_queued = 0,
    }
}

codes! {
    /// `lua/doctor.lua`.
    DoctorCode in "doctor" {
        /// `{checked, {denied command...}, {denied Pub/Sub command...}}`.
        Checked: checked = 1,
        /// `{unchecked}`: the server cannot tell (before Redis 7).
        Unchecked: unchecked = 0,
    }
}

/// A script's reply being read: the fields after its code, in order.
pub(super) struct Reply {
    /// The script's file in `lua/`, for the error.
    script: &'static str,
    /// The whole reply, code first, for the error that quotes it.
    values: Vec<Value>,
    next: usize,
}

impl Reply {
    /// The code that opens `reply` from `script` (its file in `lua/`): alone, or first in an
    /// array; and the reply, to read the fields after it.
    pub(super) fn open<C: Code>(script: &'static str, reply: Value) -> anyhow::Result<(C, Self)> {
        let values = match reply {
            Value::Array(values) => values,
            other => vec![other],
        };
        let code = match values.first() {
            Some(Value::Int(number)) => C::CODES
                .iter()
                .find(|(_, _, wire)| wire == number)
                .map(|(code, _, _)| *code),
            _ => None,
        };
        match code {
            Some(code) => Ok((
                code,
                Self {
                    script,
                    values,
                    next: 1,
                },
            )),
            None => Err(unexpected(script, &values)),
        }
    }

    /// The next field, as `T`.
    pub(super) fn field<T: FromRedisValue>(&mut self) -> anyhow::Result<T> {
        let value = self.values.get(self.next);
        self.next += 1;
        value
            .and_then(|value| redis::from_redis_value_ref(value).ok())
            .ok_or_else(|| unexpected(self.script, &self.values))
    }

    /// The error for this reply: it is not what its code says.
    pub(super) fn unexpected(&self) -> anyhow::Error {
        unexpected(self.script, &self.values)
    }
}

/// The error for a reply to `script` that is none of the replies it sends: what answered is
/// not a Redis server redlock can use (as for a reply that is not the Redis protocol), or
/// redlock has a bug; either way, the reply means nothing.
pub(super) fn unexpected(script: &str, reply: &[Value]) -> anyhow::Error {
    /// Characters of the reply quoted at most.
    const QUOTED: usize = 200;
    let mut quoted = crate::log::printable(&format!("{reply:?}"));
    if let Some((cut, _)) = quoted.char_indices().nth(QUOTED) {
        quoted.truncate(cut);
        quoted.push_str("...");
    }
    fail(
        Failure::Unavailable,
        format!(
            "unexpected reply to redlock's {script} ({quoted}): not a Redis server redlock can use"
        ),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The scripts that reply with a code, each naming its codes in its own `REPLY` table.
    const SCRIPTS: [&str; 6] = [
        include_str!("../../lua/acquire.lua"),
        include_str!("../../lua/release.lua"),
        include_str!("../../lua/extend.lua"),
        include_str!("../../lua/raise.lua"),
        include_str!("../../lua/refresh.lua"),
        include_str!("../../lua/doctor.lua"),
    ];

    /// The codes one script names in its own `REPLY` table: table (the script, or for
    /// release.lua each op), then each code's name and number.
    fn codes_of(script: &str) -> BTreeMap<String, BTreeMap<String, i64>> {
        script
            .split_once("local REPLY = {\n")
            .expect("the script names its reply codes")
            .1
            .split_once("\n}\n")
            .expect("a closed table")
            .0
            .lines()
            .map(|line| {
                let (table, codes) = line.trim().split_once(" = {").expect("table = {...}");
                let codes = codes
                    .trim_end_matches(',')
                    .trim_end_matches('}')
                    .split(',')
                    .map(|code| {
                        let (name, number) = code.split_once('=').expect("name = number");
                        (name.trim().to_owned(), number.trim().parse().unwrap())
                    })
                    .collect();
                (table.to_owned(), codes)
            })
            .collect()
    }

    /// Every script's codes together (no prelude table: each script builds only its own at
    /// each call).
    fn lua_codes() -> BTreeMap<String, BTreeMap<String, i64>> {
        assert!(
            !crate::scripts::PRELUDE.contains("local REPLY"),
            "each script names its own codes"
        );
        SCRIPTS.iter().flat_map(|script| codes_of(script)).collect()
    }

    fn rust_codes<C: Code>() -> (String, BTreeMap<String, i64>) {
        let codes = C::CODES
            .iter()
            .map(|(_, name, number)| ((*name).to_owned(), *number))
            .collect();
        (C::TABLE.to_owned(), codes)
    }

    /// Both sides name the same codes with the same numbers, script by script.
    #[test]
    fn each_reply_code_has_the_same_name_and_number_in_lua_and_rust() {
        let rust: BTreeMap<String, BTreeMap<String, i64>> = [
            rust_codes::<AcquireCode>(),
            rust_codes::<ReleaseCode>(),
            rust_codes::<LeaveCode>(),
            rust_codes::<ExtendCode>(),
            rust_codes::<RaiseCode>(),
            rust_codes::<RefreshCode>(),
            rust_codes::<DoctorCode>(),
        ]
        .into_iter()
        .collect();
        assert_eq!(lua_codes(), rust);
        for (script, codes) in &rust {
            let mut numbers: Vec<_> = codes.values().collect();
            numbers.sort();
            numbers.dedup();
            assert_eq!(
                numbers.len(),
                codes.len(),
                "{script}: two codes, one number"
            );
        }
    }

    /// A script that names a code its table lacks would send nil, which ends the reply's
    /// array there; a status written as a bare number is not named at all; a code no script
    /// sends is dead.
    #[test]
    fn each_script_sends_every_code_of_its_table_and_no_other() {
        let mut sent = BTreeMap::<String, BTreeMap<String, i64>>::new();
        for script in SCRIPTS {
            // A script's own table: another's is not there when it runs.
            let codes = codes_of(script);
            for (at, _) in script.match_indices("REPLY.") {
                let name: String = script[at + "REPLY.".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.'))
                    .collect();
                let name = name.trim_end_matches('.');
                match name.split_once('.') {
                    Some((table, code)) => {
                        let number = codes.get(table).and_then(|codes| codes.get(code));
                        let number = *number.unwrap_or_else(|| panic!("REPLY.{name}"));
                        sent.entry(table.to_owned())
                            .or_default()
                            .insert(code.to_owned(), number);
                    }
                    // A table named in a comment (`REPLY.acquire, below`).
                    None => assert!(codes.contains_key(name), "REPLY.{name}"),
                }
            }
            for opening in ["return ", "reply = "] {
                for (at, _) in script.match_indices(opening) {
                    let rest = script[at + opening.len()..].trim_start_matches('{');
                    // (Lua in a string, as doctor.lua's `'return 1'`, is not a reply.)
                    let quoted = script[..at].ends_with('\'');
                    assert!(
                        quoted || !rest.starts_with(|c: char| c.is_ascii_digit() || c == '-'),
                        "a bare status: {}",
                        &script[at..at + 20]
                    );
                }
            }
        }
        assert_eq!(sent, lua_codes());
    }

    #[test]
    fn a_reply_with_no_code_of_its_script_is_an_error_naming_it() {
        for reply in [
            Value::Int(7),
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(-4), Value::Int(1)]),
            Value::Array(vec![Value::SimpleString("1".into())]),
        ] {
            let err = Reply::open::<AcquireCode>("acquire.lua", reply)
                .err()
                .unwrap();
            assert_eq!(crate::exit::failure_of(&err), Some(Failure::Unavailable));
            assert!(err.to_string().contains("acquire.lua"), "{err}");
        }
        let (code, mut reply) = Reply::open::<ReleaseCode>(
            "release.lua",
            Value::Array(vec![Value::Int(2), Value::Int(1500)]),
        )
        .unwrap();
        assert_eq!(code, ReleaseCode::Kept);
        assert_eq!(reply.field::<u64>().unwrap(), 1500);
        assert!(reply.field::<u64>().is_err(), "past the last field");
        let (code, _) = Reply::open::<ReleaseCode>("release.lua", Value::Int(0)).unwrap();
        assert_eq!(code, ReleaseCode::NotHeld);
        let long = Value::Array(vec![Value::Int(9); 1000]);
        let err = Reply::open::<LeaveCode>("release.lua", long).err().unwrap();
        assert!(err.to_string().len() < 400, "{err}");
    }
}
