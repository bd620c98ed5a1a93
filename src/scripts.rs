//! The Lua scripts in `lua/`, compiled in. Every state change of a lock is one of these, run with
//! EVALSHA; when the server has lost its script cache (`SCRIPT FLUSH`, restart) the call is
//! repeated once as EVAL, which also caches the script again. The SHA-1 of each script is
//! computed when redlock is built (`build.rs`): hashing the scripts at every start was a large
//! part of the CPU time of an uncontended `redlock run -- true`.
//! Each script is the prelude (the helpers every script shares: `lua/prelude/`'s files joined
//! in file-name order by `build.rs`) followed by the script's own file.
//!
//! A script's KEYS and ARGV are named, not numbered: each script opens with
//! `inputs(<key count>, <argument count>, {holders = KEYS[1], ...}, {token = ARGV[1], ...})`,
//! and here one struct per script has a field per name, in the same order (`inputs!`). A call
//! fills the struct by name, so a value cannot land in another's place or be left out without a
//! compile error, and a test checks the struct's names against the script's (and the script's
//! indexes and counts against its names).

use std::cell::RefCell;
use std::marker::PhantomData;

use redis::{
    ConnectionLike, ErrorKind, FromRedisValue, RedisError, RedisResult, ServerErrorKind,
    ToRedisArgs, Value,
};

/// One Lua script: its file, its text, the SHA-1 Redis knows it by, and the struct of its
/// inputs.
pub(crate) struct Script<I> {
    file: &'static str,
    body: &'static str,
    sha: &'static str,
    inputs: PhantomData<fn(I)>,
}

/// The prelude: `lua/prelude/`'s files joined in file-name order (by `build.rs`), the text
/// every script begins with.
#[doc(hidden)]
pub const PRELUDE: &str = include_str!(concat!(env!("OUT_DIR"), "/prelude.lua"));

// The SHA-1 of each script, computed by build.rs (`script_sha!("acquire.lua")`): hashing
// 400 KB of script text in constant evaluation took the compiler most of a minute per build.
include!(concat!(env!("OUT_DIR"), "/script_shas.rs"));

macro_rules! script {
    ($file:tt) => {{
        Script {
            file: $file,
            body: concat!(
                include_str!(concat!(env!("OUT_DIR"), "/prelude.lua")),
                include_str!(concat!("../lua/", $file))
            ),
            sha: script_sha!($file),
            inputs: PhantomData,
        }
    }};
}

/// The named inputs of one script: KEYS, then ARGV, each in the script's order.
pub(crate) trait Inputs {
    const KEYS: &'static [&'static str];
    const ARGS: &'static [&'static str];
    /// KEYS and ARGV, in order.
    fn into_parts(self) -> (Vec<Arg>, Vec<Arg>);
}

/// Declares the inputs struct of a script: a field per key and per argument, in the script's
/// order.
macro_rules! inputs {
    ($(#[$doc:meta])* $name:ident { keys: [$($key:ident),* $(,)?], args: [$($arg:ident),* $(,)?] $(,)? }) => {
        $(#[$doc])*
        pub(crate) struct $name {
            $(pub(crate) $key: Arg,)*
            $(pub(crate) $arg: Arg,)*
        }

        impl Inputs for $name {
            const KEYS: &'static [&'static str] = &[$(stringify!($key)),*];
            const ARGS: &'static [&'static str] = &[$(stringify!($arg)),*];
            fn into_parts(self) -> (Vec<Arg>, Vec<Arg>) {
                (vec![$(self.$key),*], vec![$(self.$arg),*])
            }
        }
    };
}

inputs! {
    /// `lua/acquire.lua`.
    AcquireInputs {
        keys: [holders, leases, fence, queue, waiters, wake, cancel, history],
        args: [
            token, ttl_ms, mode, limit, host, pid, user, command, note, waiter, stay,
            entry_ttl_ms, grant_ms, wake_ttl_ms, reenter, claim_ms, history_keep, history_keep_ms,
        ],
    }
}

inputs! {
    /// `lua/release.lua`.
    ReleaseInputs {
        keys: [holders, leases, fence, queue, waiters, wake, cancel, history],
        args: [
            op, token, min_hold_ms, waiter, grant_ms, wake_ttl_ms, mark_ttl_ms, held_fence, exit,
            signal, why, notify,
        ],
    }
}

inputs! {
    /// `lua/extend.lua`.
    ExtendInputs {
        keys: [holders, leases, history],
        args: [token, ttl_ms, keeper],
    }
}

inputs! {
    /// `lua/raise.lua`.
    RaiseInputs {
        keys: [holders, leases, fence, history],
        args: [token, issued],
    }
}

inputs! {
    /// `lua/refresh.lua`.
    RefreshInputs {
        keys: [queue, waiters],
        args: [waiter, entry_ttl_ms],
    }
}

inputs! {
    /// `lua/inspect.lua`.
    InspectInputs {
        keys: [holders, leases, fence, queue, waiters, history],
        args: [max_holders, max_waiters, last_success],
    }
}

inputs! {
    /// `lua/history.lua`.
    HistoryInputs {
        keys: [history],
        args: [],
    }
}

inputs! {
    /// `lua/doctor.lua`.
    DoctorInputs {
        keys: [sample],
        args: [script_sha, channel],
    }
}

pub(crate) static ACQUIRE: Script<AcquireInputs> = script!("acquire.lua");
pub(crate) static DOCTOR: Script<DoctorInputs> = script!("doctor.lua");
pub(crate) static EXTEND: Script<ExtendInputs> = script!("extend.lua");
pub(crate) static RAISE: Script<RaiseInputs> = script!("raise.lua");
pub(crate) static RELEASE: Script<ReleaseInputs> = script!("release.lua");
pub(crate) static REFRESH: Script<RefreshInputs> = script!("refresh.lua");
pub(crate) static INSPECT: Script<InspectInputs> = script!("inspect.lua");
pub(crate) static HISTORY: Script<HistoryInputs> = script!("history.lua");

thread_local! {
    /// Scripts that calls on this thread run in place of the ones compiled in (see
    /// [`with_scripts`]).
    static REPLACED: RefCell<Vec<(String, String)>> = const { RefCell::new(Vec::new()) };
}

/// The text that replaces script `file` on this thread, if any.
fn replaced(file: &str) -> Option<String> {
    REPLACED.with(|replaced| {
        replaced
            .borrow()
            .iter()
            .find(|(name, _)| name == file)
            .map(|(_, body)| body.clone())
    })
}

/// Runs `run` with the scripts of `lua` (file name and text; the prelude, joined, as
/// "prelude.lua") in
/// place of the ones compiled in, for the calls this thread makes meanwhile (sent whole, with
/// EVAL). A test seam, and the only one: the protocol's mutation tests
/// (tests/protocol/mutants.rs) run copies of `lua/` with deliberate bugs through redlock's own
/// calls, to show that the model's conformance test catches each. The binary never calls it.
#[doc(hidden)]
pub fn with_scripts<R>(lua: &[(&str, String)], run: impl FnOnce() -> R) -> R {
    let prelude = lua
        .iter()
        .find(|(file, _)| *file == "prelude.lua")
        .map_or(PRELUDE, |(_, text)| text.as_str());
    let own = |file: &str, compiled: &str| {
        let text = lua
            .iter()
            .find(|(name, _)| *name == file)
            .map_or(&compiled[PRELUDE.len()..], |(_, text)| text.as_str());
        (file.to_owned(), format!("{prelude}{text}"))
    };
    let scripts = vec![
        own("acquire.lua", ACQUIRE.body),
        own("release.lua", RELEASE.body),
        own("extend.lua", EXTEND.body),
        own("raise.lua", RAISE.body),
        own("refresh.lua", REFRESH.body),
        own("inspect.lua", INSPECT.body),
        own("history.lua", HISTORY.body),
        own("doctor.lua", DOCTOR.body),
    ];
    let before = REPLACED.with(|replaced| replaced.replace(scripts));
    // (Put back even when `run` panics: a failing test must not leave the next one on this
    // thread running the copies.)
    struct Restore(Option<Vec<(String, String)>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(before) = self.0.take() {
                REPLACED.with(|replaced| *replaced.borrow_mut() = before);
            }
        }
    }
    let _restore = Restore(Some(before));
    run()
}

/// One key or argument of a script call.
pub(crate) struct Arg(Vec<u8>);

/// `value` as one key or argument of a script call.
pub(crate) fn arg<T: ToRedisArgs>(value: T) -> Arg {
    let mut parts = value.to_redis_args();
    debug_assert_eq!(parts.len(), 1, "a script input is one value");
    Arg(parts.pop().unwrap_or_default())
}

impl<I: Inputs> Script<I> {
    /// The SHA-1 Redis knows the script by.
    pub(crate) fn sha(&self) -> &'static str {
        self.sha
    }

    /// The script's file in `lua/`, as messages name it.
    pub(crate) fn file(&self) -> &'static str {
        self.file
    }

    /// EVALSHA with `inputs`, or EVAL once when the server does not have the script.
    pub(crate) fn call<T: FromRedisValue>(
        &'static self,
        con: &mut dyn ConnectionLike,
        inputs: I,
    ) -> RedisResult<T> {
        self.send(con, inputs, false)
    }

    /// EVAL with `inputs`: the whole script, which runs even on a server that lost its script
    /// cache. For a request that must take effect even if its reply is never waited for (a
    /// stalled server would answer a NOSCRIPT that nobody reads, and run nothing).
    pub(crate) fn call_whole<T: FromRedisValue>(
        &'static self,
        con: &mut dyn ConnectionLike,
        inputs: I,
    ) -> RedisResult<T> {
        self.send(con, inputs, true)
    }

    /// Like [`Self::call`], followed on the same connection, in the same round trip, by `WAIT
    /// replicas timeout_ms`: the reply, and how many replicas acknowledged the script's writes
    /// (or why WAIT failed: the script's writes stand even so).
    pub(crate) fn call_and_wait<T: FromRedisValue>(
        &'static self,
        con: &mut dyn ConnectionLike,
        inputs: I,
        replicas: u32,
        timeout_ms: u64,
    ) -> RedisResult<(T, RedisResult<u32>)> {
        let (keys, args) = inputs.into_parts();
        let pipeline = |verb: &str, script: &str| {
            let mut pipeline = redis::pipe();
            let command = pipeline.cmd(verb).arg(script).arg(keys.len());
            for part in keys.iter().chain(&args) {
                command.arg(part.0.as_slice());
            }
            pipeline.cmd("WAIT").arg(replicas).arg(timeout_ms);
            pipeline
        };
        // Each reply keeps its own error (a MOVED or NOSCRIPT must be seen as itself). After a
        // NOSCRIPT the WAIT ran for nothing: both again, with the whole script.
        let mut replies = |verb: &str, script: &str| -> RedisResult<(Value, Value)> {
            let replies: Vec<Value> = pipeline(verb, script).ignore_errors().query(con)?;
            let mut replies = replies.into_iter();
            match (replies.next(), replies.next()) {
                (Some(script), Some(wait)) => Ok((script, wait)),
                _ => Err(RedisError::from((
                    ErrorKind::Parse,
                    "a pipeline of two commands got fewer replies",
                ))),
            }
        };
        if let Some(body) = replaced(self.file) {
            let (script, wait) = replies("EVAL", &body)?;
            let reply = redis::from_redis_value(script.extract_error()?)?;
            let acknowledged = wait
                .extract_error()
                .and_then(|wait| Ok(redis::from_redis_value(wait)?));
            return Ok((reply, acknowledged));
        }
        let (script, wait) = match replies("EVALSHA", self.sha)? {
            (Value::ServerError(err), _) if err.kind() == Some(ServerErrorKind::NoScript) => {
                replies("EVAL", self.body)?
            }
            replies => replies,
        };
        let reply = redis::from_redis_value(script.extract_error()?)?;
        let acknowledged = wait
            .extract_error()
            .and_then(|wait| Ok(redis::from_redis_value(wait)?));
        Ok((reply, acknowledged))
    }

    fn send<T: FromRedisValue>(
        &'static self,
        con: &mut dyn ConnectionLike,
        inputs: I,
        whole: bool,
    ) -> RedisResult<T> {
        let (keys, args) = inputs.into_parts();
        if let Some(body) = replaced(self.file) {
            let mut command = redis::cmd("EVAL");
            command.arg(body).arg(keys.len());
            for part in keys.iter().chain(&args) {
                command.arg(part.0.as_slice());
            }
            return command.query(con);
        }
        debug_assert_eq!((keys.len(), args.len()), (I::KEYS.len(), I::ARGS.len()));
        let command = |verb: &str, script: &str| {
            let mut command = redis::cmd(verb);
            command.arg(script).arg(keys.len());
            for part in keys.iter().chain(&args) {
                command.arg(part.0.as_slice());
            }
            command
        };
        if whole {
            return command("EVAL", self.body).query(con);
        }
        match command("EVALSHA", self.sha).query(con) {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                command("EVAL", self.body).query(con)
            }
            result => result,
        }
    }

    /// The key and argument names the script declares in its `inputs(...)` call, checked
    /// against the call's own numbers: the counts it gives are the tables' sizes, and the
    /// `n`th name of a table is `KEYS[n]` (`ARGV[n]`).
    #[cfg(test)]
    fn declared(&self) -> (Vec<String>, Vec<String>) {
        let own = &self.body[PRELUDE.len()..];
        let call = own
            .split_once("inputs(")
            .expect("the script names its inputs")
            .1;
        let (counts, tables) = call.split_once('{').expect("the call's tables");
        let counts: Vec<usize> = counts
            .split(',')
            .map(str::trim)
            .filter(|count| !count.is_empty())
            .map(|count| count.parse().expect("a count"))
            .collect();
        let mut lists = tables
            .split('{')
            .zip(["KEYS", "ARGV"])
            .map(|(list, array)| {
                let list = list.split_once('}').expect("a closed table").0;
                let names: Vec<String> = list
                    .split(',')
                    .map(str::trim)
                    .filter(|entry| !entry.is_empty())
                    .enumerate()
                    .map(|(at, entry)| {
                        let (name, value) = entry.split_once('=').expect("name = value");
                        assert_eq!(
                            value.trim(),
                            format!("{array}[{}]", at + 1),
                            "{}: the input named {name}",
                            self.file
                        );
                        name.trim().to_owned()
                    })
                    .collect();
                names
            });
        let (keys, args) = (lists.next().unwrap(), lists.next().unwrap());
        assert_eq!(
            counts,
            [keys.len(), args.len()],
            "{}: the counts",
            self.file
        );
        (keys, args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(data: &str) -> String {
        String::from_utf8(crate::sha1::sha1_hex(data.as_bytes()).to_vec()).unwrap()
    }

    fn assert_names_match<I: Inputs>(script: &Script<I>, file: &str) {
        let (keys, args) = script.declared();
        assert_eq!(keys, I::KEYS, "{file}: KEYS");
        assert_eq!(args, I::ARGS, "{file}: ARGV");
    }

    /// A script whose own text is `own` (after the prelude), as the tests read one.
    fn script_with(own: &str) -> Script<HistoryInputs> {
        Script {
            file: "test.lua",
            body: Box::leak(format!("{PRELUDE}{own}").into_boxed_str()),
            sha: "",
            inputs: PhantomData,
        }
    }

    /// The reading of a script's inputs catches a name given the wrong index, and a count
    /// that is not its table's size.
    #[test]
    fn a_misnumbered_input_or_a_wrong_count_is_caught() {
        let named = |own: &str| std::panic::catch_unwind(|| script_with(own).declared());
        assert_eq!(
            named("local refused, key = inputs(1, 0, {history = KEYS[1]}, {})\n").unwrap(),
            (vec!["history".to_owned()], vec![])
        );
        assert!(named("local refused, key = inputs(1, 0, {history = KEYS[2]}, {})\n").is_err());
        assert!(named("local refused, key = inputs(2, 0, {history = KEYS[1]}, {})\n").is_err());
        assert!(named("local r, k, a = inputs(1, 1, {h = KEYS[1]}, {t = KEYS[1]})\n").is_err());
        assert!(named("local r, k, a = inputs(1, 2, {h = KEYS[1]}, {t = ARGV[1]})\n").is_err());
    }

    /// Rust fills each script's inputs by name; the names and their order are the script's.
    #[test]
    fn each_script_takes_the_inputs_rust_names() {
        assert_names_match(&ACQUIRE, "acquire.lua");
        assert_names_match(&RELEASE, "release.lua");
        assert_names_match(&EXTEND, "extend.lua");
        assert_names_match(&RAISE, "raise.lua");
        assert_names_match(&REFRESH, "refresh.lua");
        assert_names_match(&INSPECT, "inspect.lua");
        assert_names_match(&HISTORY, "history.lua");
        assert_names_match(&DOCTOR, "doctor.lua");
    }

    /// The prelude's copies of constants the Rust side owns: the two must agree.
    #[test]
    fn the_prelude_copies_the_constants_rust_owns() {
        let prelude = PRELUDE;
        let value = |name: &str| -> u128 {
            let line = prelude
                .lines()
                .find(|line| line.starts_with(&format!("local {name} = ")))
                .unwrap_or_else(|| panic!("no {name} in lua/prelude/"));
            line.rsplit(' ')
                .next()
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("{name} is not a plain number: {line}"))
        };
        assert_eq!(
            value("QUEUE_ENTRY_TTL_MS"),
            crate::lock::QUEUE_ENTRY_TTL.as_millis()
        );
        let inspect = include_str!("../lua/inspect.lua");
        assert!(
            inspect.contains(&format!(
                "local AHEAD_OF_CLOCK_MS = {}\n",
                crate::lock::AHEAD_OF_CLOCK_MS
            )),
            "inspect.lua believes a hold's times as far ahead of the clock as check does"
        );
        assert_eq!(
            value("LONGEST_LEASE_MS"),
            crate::duration::MAX.as_millis(),
            "the longest lease a call asks for is the longest duration a flag takes"
        );
    }

    /// The build script named each script by the SHA-1 of the text compiled in.
    #[test]
    fn each_script_is_named_by_the_sha1_of_its_text() {
        for (sha, body) in [
            (ACQUIRE.sha, ACQUIRE.body),
            (RELEASE.sha, RELEASE.body),
            (EXTEND.sha, EXTEND.body),
            (RAISE.sha, RAISE.body),
            (REFRESH.sha, REFRESH.body),
            (INSPECT.sha, INSPECT.body),
            (HISTORY.sha, HISTORY.body),
            (DOCTOR.sha, DOCTOR.body),
        ] {
            assert_eq!(sha, hex(body));
        }
    }

    /// FIPS 180 test vectors, across the one- and two-block padding cases.
    #[test]
    fn sha1_matches_the_standard_vectors() {
        assert_eq!(hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(
            hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
        assert_eq!(
            hex(&"a".repeat(1000)),
            "291e9a6c66994949b57ba5e650361e98fc36b1ba"
        );
    }
}
