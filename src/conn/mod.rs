//! Reaching Redis: the server URL and credentials, TLS, bounded connect and command timeouts,
//! and the translation of Redis errors into outcomes with exit codes (`classify`).
//!
//! Secrets never leave this module in clear: [`Target::redacted`] is the only form of the URL
//! used in messages, and no Redis error text carries the password.

mod asking;
mod classify;
mod dial;
mod lookup;
mod resp;
mod sentinel;
mod session;
mod target;
mod tls;
mod transport;
mod url;

use classify::classify;
use dial::Dial;
pub use session::Session;
pub(crate) use target::Unlisted;

pub(crate) use transport::Closer;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use redis::{ConnectionLike, ErrorKind, RedisError, ServerErrorKind};

use sentinel::Sentinels;
use tls::Tls;
pub use tls::TlsOptions;
use transport::Connection;
use url::{Address, RedisUrl, Servers};
pub(crate) use url::{redact_url, url_has_password};

use crate::exit::{Failure, Hint, NotRun, fail, fail_not_run, fail_with, failure_of};

/// Who to log in as. The password never shows in `Debug`.
#[derive(Clone, Default)]
pub(crate) struct Credentials {
    user: Option<String>,
    password: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Everything about reaching Redis besides the URL.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Overrides a password in the URL.
    pub password: Option<String>,
    /// The sentinels' own password (Sentinel URLs).
    pub sentinel_password: Option<String>,
    /// For `rediss://` (the system's trust store when not given).
    pub tls: Option<TlsOptions>,
    pub connect_timeout: Duration,
    pub command_timeout: Duration,
    /// How long a release known not to have run is sent again (see `store::single::release`).
    pub release_timeout: Duration,
}

/// Where and how to connect.
#[derive(Clone)]
pub struct Target {
    servers: Servers,
    sentinels: Option<Sentinels>,
    dial: Arc<Dial>,
}

/// What is left of the time until `deadline` (at least a millisecond: a socket takes no zero
/// timeout, and a request with none left fails at once anyway).
fn left_until(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::{RedisUrl, redact_url};

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        assert_eq!(redact_url("redis://:s3cret@h:1/0"), "redis://:***@h:1");
        assert_eq!(redact_url("redis://u:s3cret@h:1/2"), "redis://u:***@h:1/2");
        assert_eq!(redact_url("redis://s3cret@h"), "redis://***@h:6379");
        assert_eq!(redact_url("redis://u:p@ss@h"), "redis://u:***@h:6379");
        assert_eq!(
            redact_url("redis+unix:///tmp/r.sock?db=1&pass=s3cret"),
            "unix:///tmp/r.sock?db=1&password=***"
        );
        // Not URLs: shown but for what could be a password (with an '@' past the host, all
        // but the scheme; a port that is no number, or of a host that does
        // not look like one, and all after it; query values that could be one).
        assert_eq!(redact_url(":s3cret@h"), "***@h");
        assert_eq!(
            redact_url("redis://default:abc/def+s3cret==@127.0.0.1:6500/0"),
            "redis://***"
        );
        assert_eq!(redact_url("redis://u:Pa?ss-s3cret@h"), "redis://***");
        assert_eq!(redact_url("redis://h:99999"), "redis://h:***");
        assert_eq!(
            redact_url("redis://127.0.0.1:6401/abc"),
            "redis://127.0.0.1:6401/abc"
        );
        assert_eq!(
            redact_url("redis://u:s3cret@10.0.0.1:6401/x?db=1&user=u&s3cret#s3cret"),
            "redis://u:***@10.0.0.1:6401/x?db=1&user=***&***#***"
        );
        assert_eq!(
            redact_url("redis://[::1]:6401/abc"),
            "redis://[::1]:6401/abc"
        );
        assert_eq!(redact_url("redis://user:5/s3cret"), "redis://user:***");
        assert_eq!(redact_url("redis:/h:6379"), "redis:/h:6379");
        assert_eq!(redact_url("redis://:s3cret"), "redis://:***");
        assert_eq!(redact_url("redis://default:s3cret"), "redis://default:***");
        assert_eq!(
            redact_url("unix://:s3cret@/tmp/redis.sock"),
            "unix:///tmp/redis.sock?password=***"
        );
        assert_eq!(redact_url("redis://h:x?password=s3cret"), "redis://h:***");
    }

    /// Every ASCII character, anywhere in a password, in every place a password can go: neither
    /// the shown form nor a parse error quotes any of it.
    #[test]
    fn no_password_survives_redaction_or_a_parse_error() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut passwords = Vec::new();
        for byte in 0..128_u8 {
            let c = char::from(byte);
            passwords.push(format!("{c}SECRETxyz"));
            passwords.push(format!("SECRET{c}xyz"));
            passwords.push(format!("SECRETxyz{c}"));
            passwords.push(format!("SEC{c}RET"));
        }
        for _ in 0..2_000 {
            let len = 1 + next() % 24;
            let mut password: String = (0..len)
                .map(|_| char::from(u8::try_from(next() % 128).unwrap()))
                .collect();
            password.insert_str(usize::try_from(next() % (len + 1)).unwrap(), "SECRET");
            passwords.push(password);
        }
        for password in &passwords {
            // A lone userinfo is a user name up to its first ':' (the URL's own rule).
            let lone = password.replace(':', "");
            for url in [
                format!("redis://user:{password}@127.0.0.1:6500/0"),
                format!("redis://:{password}@h"),
                format!("rediss://{lone}@h:1"),
                format!("redis+sentinel://:{password}@s1,s2/mymaster"),
                format!("redis://h?password={password}"),
                format!("unix:///tmp/s?pass={password}"),
                format!("unix://:{password}@/tmp/s"),
                // Without a host (a mistake): the rest after an '@' in the password would be
                // the host, by the URL's own rule; any other password is never shown.
                format!("redis://:{}", password.replace('@', "")),
                format!("redis://user:{}", password.replace('@', "")),
            ] {
                // Neither half of the marker, which a separator in the password may split.
                let quotes_it = |text: &str| text.contains("SEC") || text.contains("RET");
                let shown = redact_url(&url);
                assert!(!quotes_it(&shown), "{url:?} shown as {shown:?}");
                if let Err(why) = RedisUrl::parse(&url) {
                    assert!(!quotes_it(&why), "{url:?}: {why}");
                }
            }
        }
    }
}
