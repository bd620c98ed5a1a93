//! Reaching Redis: the server URL and password, bounded connect and command timeouts, and the
//! translation of Redis errors into outcomes with exit codes.
//!
//! Secrets never leave this module in clear: [`Target::redacted`] is the only form of the URL
//! used in messages, and no Redis error text carries the password.

use std::time::Duration;

use anyhow::Context as _;
use redis::{ConnectionLike, ErrorKind, IntoConnectionInfo, RedisError, ServerErrorKind};

use crate::duration;
use crate::exit::{Failure, fail, failure_of};

/// Where and how to connect.
#[derive(Clone)]
pub struct Target {
    url: String,
    password: Option<String>,
    connect_timeout: Duration,
    command_timeout: Duration,
}

impl Target {
    /// `password`, when given, overrides one in the URL.
    pub fn new(
        url: String,
        password: Option<String>,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> Self {
        Self {
            url,
            password,
            connect_timeout,
            command_timeout,
        }
    }

    /// The URL with any password replaced by `***`.
    pub fn redacted(&self) -> String {
        redact_url(&self.url)
    }

    /// Opens a connection whose every command fails after the command timeout.
    pub fn connect(&self) -> anyhow::Result<Session> {
        self.connect_within(self.connect_timeout)
    }

    /// Like [`Self::connect`], with a connect timeout of at most `limit`.
    pub fn connect_within(&self, limit: Duration) -> anyhow::Result<Session> {
        let connect_timeout = self.connect_timeout.min(limit);
        let server = self.redacted();
        let mut info = self.url.as_str().into_connection_info().map_err(|err| {
            let why = if err.kind() == ErrorKind::InvalidClientConfig
                && self.url.starts_with("rediss")
            {
                "TLS (rediss://) is not supported by this build".to_owned()
            } else {
                format!(
                    "not a Redis URL ({}); expected redis://[user[:password]@]host[:port][/db] or unix:///path",
                    err.detail().unwrap_or("did not parse")
                )
            };
            fail(Failure::Usage, format!("--redis {server}: {why}"))
        })?;
        let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
        if let Some(password) = &self.password {
            settings = settings.set_password(password);
        }
        // Requests are small and latency is the point: no Nagle delay on the client side.
        info = info
            .set_redis_settings(settings)
            .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        let con = redis::Client::open(info)
            .and_then(|client| client.get_connection_with_timeout(connect_timeout))
            .map_err(|err| classify(&err, connect_timeout))
            .with_context(|| format!("connecting to {server}"))?;
        let mut session = Session {
            con,
            server,
            command_timeout: self.command_timeout,
        };
        session.set_command_timeout(self.command_timeout)?;
        Ok(session)
    }
}

/// An open connection and what is needed to explain its failures.
pub struct Session {
    con: redis::Connection,
    server: String,
    command_timeout: Duration,
}

impl Session {
    /// Runs one request; a failure becomes an error with the right outcome and the server named.
    pub(crate) fn run<T>(
        &mut self,
        request: impl FnOnce(&mut dyn ConnectionLike) -> redis::RedisResult<T>,
    ) -> anyhow::Result<T> {
        request(&mut self.con).map_err(|err| {
            let err = classify(&err, self.command_timeout);
            // A refusal about the data speaks for itself; a failure to talk names the server.
            if failure_of(&err) == Some(Failure::Usage) {
                err
            } else {
                err.context(self.server.clone())
            }
        })
    }

    /// Changes the bound on each later command.
    pub fn set_command_timeout(&mut self, timeout: Duration) -> anyhow::Result<()> {
        self.command_timeout = timeout;
        self.con
            .set_read_timeout(Some(timeout))
            .and_then(|()| self.con.set_write_timeout(Some(timeout)))
            .map_err(|err| classify(&err, timeout))
            .with_context(|| self.server.clone())
    }

    /// The bound on each command now in force.
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// The server's URL with the password hidden.
    pub fn server(&self) -> &str {
        &self.server
    }
}

/// Maps a Redis error to an outcome: unreachable → 69, auth/ACL → 77, foreign data → 64.
/// `timeout` is the bound that was in force, named when it ran out.
fn classify(err: &RedisError, timeout: Duration) -> anyhow::Error {
    let detail = err.detail().unwrap_or_default();
    let code = err.code().unwrap_or_default();
    match err.kind() {
        ErrorKind::AuthenticationFailed => fail(
            Failure::Auth,
            "authentication failed (wrong password or user)",
        ),
        ErrorKind::Server(ServerErrorKind::NoPerm) => {
            fail(Failure::Auth, format!("permission denied: {detail}"))
        }
        ErrorKind::Server(ServerErrorKind::ReadOnly) => fail(
            Failure::Unavailable,
            "the server is a read-only replica; point --redis at the master",
        ),
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::TryAgain,
        ) => fail(
            Failure::Unavailable,
            format!("the server cannot serve requests now: {code} {detail}"),
        ),
        _ if matches!(code, "WRONGPASS" | "NOAUTH") => {
            let hint = if code == "NOAUTH" {
                " (the server needs a password: set REDLOCK_PASSWORD or use --password-file)"
            } else {
                ""
            };
            fail(
                Failure::Auth,
                format!("authentication failed: {code} {detail}{hint}"),
            )
        }
        _ if code == "MODE" => fail(Failure::Usage, detail.to_owned()),
        _ if code == "WRONGTYPE" => fail(
            Failure::Usage,
            format!("{detail}; choose another --key or --prefix (nothing was changed)"),
        ),
        _ if detail.starts_with("max number of clients reached") => fail(
            Failure::Unavailable,
            "the server takes no more connections (max number of clients reached)",
        ),
        _ if err.is_timeout() => fail(
            Failure::Unavailable,
            format!("no answer within {}", duration::display(timeout)),
        ),
        _ if err.is_connection_refusal() => fail(Failure::Unavailable, "connection refused"),
        _ if err.is_io_error() || err.is_connection_dropped() => {
            fail(Failure::Unavailable, err.to_string())
        }
        _ => anyhow::anyhow!("unexpected error: {err}"),
    }
}

/// Hides the password of a Redis URL: the userinfo's password part and `pass`/`password` query
/// values become `***`. A userinfo without `:` is hidden whole, since some clients read it as
/// the password.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => format!("***@{host}"),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) if matches!(name, "pass" | "password") => {
                        format!("{name}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        assert_eq!(redact_url("redis://:s3cret@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact_url("redis://u:s3cret@h:1"), "redis://u:***@h:1");
        assert_eq!(redact_url("redis://s3cret@h"), "redis://***@h");
        assert_eq!(redact_url("redis://u:p@ss@h"), "redis://u:***@h");
        assert_eq!(
            redact_url("redis+unix:///tmp/r.sock?db=1&pass=s3cret"),
            "redis+unix:///tmp/r.sock?db=1&pass=***"
        );
        assert_eq!(redact_url(":s3cret@h"), ":***@h");
    }
}
