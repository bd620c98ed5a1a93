//! What a failed request means for the user: every error of the redis crate (and of redlock's
//! own transport and reply reader) mapped to an outcome with its exit code and one line that
//! says why, in the terms of what the user can do.

use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::resp;
use crate::duration;
use crate::exit::{
    Failure, Hint, NoReply, NotRun, Refusal, fail, fail_no_reply, fail_not_run, fail_refused,
    fail_with, mark_not_run,
};

/// Maps a Redis error to an outcome: unreachable or refusing → 69, auth/ACL → 77, bad
/// configuration or foreign data → 64. Only what can be a bug in redlock stays without an
/// outcome (exit 70): a Lua runtime error in its scripts, a reply it cannot decode. `timeout`
/// is the bound that was in force, named when it ran out. The kinds are tried in order: the
/// error's kind, a refused login, what the server said of the request, the connection, the rest.
pub(super) fn classify(err: &RedisError, timeout: Duration) -> anyhow::Error {
    let code = err.code().unwrap_or_default();
    // An error raised by a command inside a script ends with where in the script it came
    // from, which says nothing to the user.
    let detail = err.detail().unwrap_or_default();
    let detail = detail
        .split_once(" script: ")
        .map_or(detail, |(detail, _)| detail)
        .trim_end_matches('.');
    by_kind(err, code, detail)
        .or_else(|| refused_login(code, detail))
        .or_else(|| refused_request(code, detail))
        .or_else(|| by_connection(err, timeout))
        .unwrap_or_else(|| unexpected(err, code, detail))
}

/// A login (AUTH) the server answered with an error, in redlock's words alone: a server may
/// repeat the request in its reply (one whose AUTH is renamed answers `ERR unknown command
/// 'AUTH', with args beginning with: 'PASSWORD'`), so no text of the reply is shown, whatever
/// the code. Only what the reply's kind or fixed wording tells is said.
pub(super) fn failed_auth(err: &RedisError) -> anyhow::Error {
    const NOT_SHOWN: &str = "its reply is not shown, as it may repeat the password";
    let code = err.code().unwrap_or_default();
    let detail = err.detail().unwrap_or_default();
    match err.kind() {
        // The code of a kind the redis crate knows is its own fixed word.
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::TryAgain,
        ) => {
            return fail_not_run(
                NotRun::Refused,
                format!("the server cannot serve requests now ({code})"),
            );
        }
        _ if code == "WRONGPASS" => {
            return fail(
                Failure::Auth,
                "authentication failed (wrong password or user)",
            );
        }
        _ => {}
    }
    if detail.starts_with("max number of clients reached") {
        fail(
            Failure::Unavailable,
            "the server takes no more connections (max number of clients reached)",
        )
    } else if detail.contains("called without any password configured") {
        fail(
            Failure::Auth,
            "a password was given, but the server has none set for the default user (give none, or a user that has one)",
        )
    } else if detail.starts_with("unknown command") {
        fail(
            Failure::Auth,
            format!(
                "authentication failed: the server does not know the AUTH command (renamed or disabled); {NOT_SHOWN}"
            ),
        )
    } else {
        fail(
            Failure::Auth,
            format!("authentication failed: the server refused the login; {NOT_SHOWN}"),
        )
    }
}

/// The server refused the request for a reason of its own, which it names.
fn refused(what: &str, code: &str, detail: &str) -> anyhow::Error {
    fail(
        Failure::Unavailable,
        format!("the server refused the request ({what}): {code} {detail}"),
    )
}

/// Errors the redis crate already sorted by kind.
fn by_kind(err: &RedisError, code: &str, detail: &str) -> Option<anyhow::Error> {
    Some(match err.kind() {
        ErrorKind::AuthenticationFailed => fail(
            Failure::Auth,
            "authentication failed (wrong password or user)",
        ),
        ErrorKind::Server(ServerErrorKind::NoPerm) => fail_refused(
            Failure::Auth,
            format!("permission denied: {detail}"),
            Refusal::NotPermitted,
        ),
        // A replica runs none of a script's writes (a master demoted by a failover answers so):
        // the request may be sent again, to the master.
        ErrorKind::Server(ServerErrorKind::ReadOnly) => mark_not_run(
            fail_with(
                Failure::Unavailable,
                "the server is a read-only replica",
                Hint::UseMaster,
            ),
            NotRun::Refused,
        ),
        // Refused before running: the request may be sent again.
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::TryAgain,
        ) => fail_not_run(
            NotRun::Refused,
            format!("the server cannot serve requests now: {code} {detail}"),
        ),
        _ => return None,
    })
}

/// A login the server refused, or a permission it does not give.
fn refused_login(code: &str, detail: &str) -> Option<anyhow::Error> {
    Some(match () {
        // A command sent before authenticating: small ones get NOAUTH, and the server drops
        // a client whose first request has many arguments.
        () if code == "NOAUTH" || detail.contains("unauthenticated") => fail_with(
            Failure::Auth,
            "authentication required: the server needs a password",
            Hint::GivePassword,
        ),
        () if code == "WRONGPASS" => fail(
            Failure::Auth,
            format!("authentication failed: {code} {detail}"),
        ),
        // A password given to a server that has none (Redis 6+ refuses the AUTH): the
        // configuration on one side is wrong, and retrying will not mend it.
        () if detail.contains("called without any password configured") => fail(
            Failure::Auth,
            "a password was given, but the server has none set for the default user (give none, or a user that has one)",
        ),
        // ACL checks of the commands a script calls (Redis 7 words it so).
        () if detail.contains("can't run this command") => fail(
            Failure::Auth,
            format!(
                "permission denied inside a script ({detail}); the Redis user lacks a command redlock's scripts call"
            ),
        ),
        () => return None,
    })
}

/// What the server (or one of redlock's scripts) said of the request itself: the server too
/// old, the lock's data not redlock's, the server unable to take it.
fn refused_request(code: &str, detail: &str) -> Option<anyhow::Error> {
    Some(match () {
        // Every script refuses a server too old before it reads or writes anything.
        () if code == "OLDSERVER" => fail(
            Failure::Unsupported,
            format!(
                "the server is Redis {}; redlock needs Redis 6.0 or later",
                crate::log::printable(detail)
            ),
        ),
        () if code == "MODE" => fail_refused(Failure::Usage, detail.to_owned(), Refusal::OtherMode),
        () if code == "FENCE" => fail(Failure::Usage, format!("the lock's fence counter {detail}")),
        () if code == "WRONGTYPE" => fail_with(Failure::Usage, detail.to_owned(), Hint::OtherName),
        () if detail.contains("DB index is out of range") => {
            fail(Failure::Usage, "the server has no database of that number")
        }
        () if detail.contains("increment or decrement would overflow") => fail(
            Failure::Usage,
            "the lock's fence counter is at its maximum; delete it if no resource checks this lock's fences",
        ),
        () if code == "OOM" => refused("out of memory: maxmemory is reached", code, detail),
        () if code == "MISCONF" => {
            refused("it cannot save to disk and refuses writes", code, detail)
        }
        () if code == "NOREPLICAS" => {
            refused("too few replicas for min-replicas-to-write", code, detail)
        }
        // Said in place of any reply, and the connection closed: nothing ran.
        () if detail.starts_with("max number of clients reached") => fail_not_run(
            NotRun::Refused,
            "the server takes no more connections (max number of clients reached)",
        ),
        () => return None,
    })
}

/// The connection: no answer in time, refused, dropped, or not speaking the Redis protocol.
fn by_connection(err: &RedisError, timeout: Duration) -> Option<anyhow::Error> {
    Some(match err.kind() {
        // The request went out and no reply came: it may still run.
        _ if err.is_timeout() => fail_no_reply(
            NoReply::TimedOut,
            format!("no answer within {}", duration::display(timeout)),
        ),
        _ if err.is_connection_refusal() => fail_not_run(NotRun::Unreached, "connection refused"),
        _ if err.is_io_error() || err.is_connection_dropped() => {
            fail_no_reply(NoReply::Dropped, err.to_string())
        }
        ErrorKind::Parse if err.to_string().contains(resp::TOO_LARGE) => {
            let text = err.to_string();
            let what = text
                .split_once(resp::TOO_LARGE)
                .map_or("", |(_, what)| what.trim());
            fail(
                Failure::Unavailable,
                format!(
                    "not a Redis server, or not one to trust: it sent {} {what}",
                    resp::TOO_LARGE
                ),
            )
        }
        ErrorKind::Parse => fail(
            Failure::Unavailable,
            "not a Redis server: it answered with something that is not the Redis protocol",
        ),
        _ => return None,
    })
}

/// Everything else: a Lua runtime error in one of redlock's own scripts (a bug), another error
/// reply of the server's own, or an error nobody expected.
fn unexpected(err: &RedisError, code: &str, detail: &str) -> anyhow::Error {
    match err.kind() {
        ErrorKind::Server(_) if detail.contains("user_script:") => {
            anyhow::anyhow!("a script of redlock failed: {code} {detail}")
        }
        ErrorKind::Server(_) | ErrorKind::Extension if detail.starts_with("unknown command") => {
            fail_refused(
                Failure::Unavailable,
                format!("the server refused the request (an error of its own): {code} {detail}"),
                Refusal::UnknownCommand,
            )
        }
        ErrorKind::Server(_) | ErrorKind::Extension => refused("an error of its own", code, detail),
        _ => anyhow::anyhow!("unexpected error: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::{Fate, fate};

    const BOUND: Duration = Duration::from_secs(1);

    /// The error of an error reply `text`, as the redis crate makes it.
    fn reply(text: &str) -> RedisError {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes())
            .and_then(redis::Value::extract_error)
            .expect_err("an error reply")
    }

    /// What callers act on is typed: a command the server does not know, a lock in another
    /// mode than its holders'.
    #[test]
    fn what_callers_act_on_is_typed() {
        let unknown = classify(
            &reply("ERR unknown command 'BLPOP', with args beginning with: 'k' '1'"),
            BOUND,
        );
        assert_eq!(
            crate::exit::refusal_of(&unknown),
            Some(Refusal::UnknownCommand)
        );
        assert_eq!(
            crate::exit::failure_of(&unknown),
            Some(Failure::Unavailable)
        );
        let mode = classify(
            &reply("MODE the lock is a semaphore of 2, not a semaphore of 3; nothing was changed"),
            BOUND,
        );
        assert_eq!(crate::exit::refusal_of(&mode), Some(Refusal::OtherMode));
        assert_eq!(crate::exit::failure_of(&mode), Some(Failure::Usage));
        let denied = classify(
            &reply("NOPERM User locker has no permissions to run the 'info' command"),
            BOUND,
        );
        assert_eq!(
            crate::exit::refusal_of(&denied),
            Some(Refusal::NotPermitted)
        );
        let other = classify(&reply("NOAUTH Authentication required."), BOUND);
        assert_eq!(crate::exit::refusal_of(&other), None);
        let other = classify(&reply("ERR something else"), BOUND);
        assert_eq!(crate::exit::refusal_of(&other), None);
    }

    /// Whether a release may be sent again is typed by what the server said or what the
    /// connection did, never read from a message later: a refusal before running and a server
    /// refusing the connection mean it did not run; silence means it may still run, and a
    /// closed connection is told apart from it; every other error says nothing of it.
    #[test]
    fn what_did_not_run_is_typed_so() {
        for text in [
            "CLUSTERDOWN The cluster is down",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "LOADING Redis is loading the dataset in memory",
            "READONLY You can't write against a read only replica. script: abc, on @user_script:1.",
            "ERR max number of clients reached",
        ] {
            assert_eq!(
                fate(&classify(&reply(text), BOUND)),
                Some(Fate::NotRun(NotRun::Refused)),
                "{text}"
            );
        }
        for text in [
            "ERR Script attempted to access a non local key in a cluster node script",
            "ERR user_script:1: something went wrong",
            "OOM command not allowed when used memory > 'maxmemory'.",
            "NOREPLICAS Not enough good replicas to write.",
            "BUSY Redis is busy running a script.",
            "NOSCRIPT No matching script.",
        ] {
            assert_eq!(fate(&classify(&reply(text), BOUND)), None, "{text}");
        }
        let io = |kind| RedisError::from(std::io::Error::from(kind));
        assert_eq!(
            fate(&classify(&io(std::io::ErrorKind::ConnectionRefused), BOUND)),
            Some(Fate::NotRun(NotRun::Unreached))
        );
        assert_eq!(
            fate(&classify(&io(std::io::ErrorKind::TimedOut), BOUND)),
            Some(Fate::NoReply(NoReply::TimedOut))
        );
        assert_eq!(
            fate(&classify(&io(std::io::ErrorKind::ConnectionReset), BOUND)),
            Some(Fate::NoReply(NoReply::Dropped))
        );
    }
}
