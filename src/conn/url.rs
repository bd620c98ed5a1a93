//! Redis URLs: which servers, how to reach them, and as whom.
//!
//! - `redis://[user[:password]@]host[:port][/db]`, `rediss://` for TLS;
//! - `unix:///path/to/socket[?db=N]` (also `redis+unix://`);
//! - `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/service[/db]` (and
//!   `rediss+sentinel://`): the sentinels to ask for the master of `service`;
//! - `redis+cluster://[user[:password]@]host[:port][,host[:port]...]` (and
//!   `rediss+cluster://`): seed nodes of a Redis Cluster.
//!
//! Userinfo and path are percent-decoded; a password may also come as `?password=` (`pass`)
//! and a user as `?user=`, as other clients accept. The userinfo is the master's (or every
//! node's); sentinels log in as `?sentinel_user=` with their own password (see `sentinel`).
//! The default port is 6379 (26379 for sentinels).

use std::path::PathBuf;

/// One server address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Address {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Address::Tcp { host, port } => write!(f, "{host}:{port}"),
            Address::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

impl Address {
    /// The server this address reaches, as far as it can be told without asking the network:
    /// an IP address in its canonical form (`localhost`, `0.0.0.0` and an IPv4 address written
    /// as IPv6 are the IPv4 address they reach), a host name in lower case, a socket's path
    /// resolved. Two addresses with the same place are one server; two names of one server
    /// (DNS, two addresses of one host) are not told apart here (`doctor` asks each server's
    /// run_id).
    pub(crate) fn place(&self) -> String {
        match self {
            Address::Tcp { host, port } => {
                let host = host.to_ascii_lowercase();
                let host = match host.parse::<std::net::IpAddr>() {
                    Ok(ip) if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_owned(),
                    Ok(ip) if ip.is_unspecified() => "::1".to_owned(),
                    Ok(ip) => ip.to_canonical().to_string(),
                    Err(_) if host == "localhost" => "127.0.0.1".to_owned(),
                    Err(_) => host.trim_end_matches('.').to_owned(),
                };
                format!("{host}:{port}")
            }
            Address::Unix(path) => std::fs::canonicalize(path)
                .or_else(|_| std::path::absolute(path))
                .unwrap_or_else(|_| path.clone())
                .display()
                .to_string(),
        }
    }
}

/// Which servers a URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Servers {
    /// One server: the master.
    Single(Address),
    /// Sentinels to ask for the master of `service`.
    Sentinel {
        sentinels: Vec<Address>,
        service: String,
    },
    /// Seed nodes of a Redis Cluster.
    Cluster { seeds: Vec<Address> },
}

/// A parsed Redis URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RedisUrl {
    pub(crate) servers: Servers,
    pub(crate) tls: bool,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
    /// The user to log in to sentinels as (`?sentinel_user=`).
    pub(crate) sentinel_user: Option<String>,
}

/// The schemes redlock reads.
const SCHEMES: [&str; 8] = [
    "redis",
    "rediss",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
    "unix",
    "redis+unix",
];

const FORMS: &str = "redis://[user[:password]@]host[:port][/db], rediss://..., unix:///path, redis+sentinel://host[:port][,...]/service or redis+cluster://host[:port][,...]";

impl RedisUrl {
    /// Parses `text`; the error says why it is not a Redis URL and never contains the text
    /// itself (it may hold a password).
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let Some((scheme, rest)) = text.split_once("://") else {
            // `redis:/host`, `redis:host`: a scheme, without its `//`.
            let known = text
                .split_once(':')
                .map(|(scheme, _)| scheme)
                .filter(|scheme| SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()));
            return Err(match known {
                Some(scheme) => format!(
                    "'{scheme}:' must be followed by '//' ({scheme}://host:port); expected {FORMS}"
                ),
                None => format!("no scheme; expected {FORMS}"),
            });
        };
        let socket = matches!(scheme, "unix" | "redis+unix");
        let (userinfo, rest) = if socket {
            socket_userinfo(rest)?
        } else {
            check_authority(rest)?;
            (None, rest)
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let rest = rest.split_once('#').map_or(rest, |(rest, _)| rest);
        let mut url = Self {
            servers: Servers::Single(Address::Unix(PathBuf::new())),
            tls: false,
            user: None,
            password: None,
            db: 0,
            sentinel_user: None,
        };
        url.apply_query(query)?;
        if socket {
            if let Some(info) = userinfo {
                url.set_userinfo(info)?;
            }
            let path = decode(rest)?;
            if path.is_empty() {
                return Err("no socket path; expected unix:///path/to/socket".into());
            }
            url.servers = Servers::Single(Address::Unix(PathBuf::from(path)));
            return Ok(url);
        }
        match scheme {
            "redis" | "rediss" | "redis+sentinel" | "rediss+sentinel" | "redis+cluster"
            | "rediss+cluster" => url.parse_network(scheme, rest)?,
            other => {
                return Err(format!(
                    "unknown scheme '{}'; expected {FORMS}",
                    other.escape_debug()
                ));
            }
        }
        Ok(url)
    }

    /// `db`, `user`, `password` and `sentinel_user` from the query.
    fn apply_query(&mut self, query: &str) -> Result<(), String> {
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = decode(value)?;
            match name {
                "db" => self.db = parse_db(&value)?,
                "user" | "username" => self.user = Some(value),
                "password" | "pass" => self.password = Some(value),
                "sentinel_user" => self.sentinel_user = Some(value),
                // Not named: after a password with an unencoded '&', the "name" is the rest of it.
                _ => {
                    return Err(
                        "an unknown query parameter; known are db, user, password and sentinel_user"
                            .into(),
                    );
                }
            }
        }
        Ok(())
    }

    /// `user[:password]`, percent-decoded; an empty user is none.
    fn set_userinfo(&mut self, info: &str) -> Result<(), String> {
        match info.split_once(':') {
            Some((user, password)) => {
                self.user = Some(decode(user)?).filter(|user| !user.is_empty());
                self.password = Some(decode(password)?);
            }
            None => self.user = Some(decode(info)?).filter(|user| !user.is_empty()),
        }
        Ok(())
    }

    /// The servers, userinfo and database of a `redis://`, `+sentinel` or `+cluster` URL
    /// (`rest`: what follows `://`, query and fragment removed).
    fn parse_network(&mut self, scheme: &str, rest: &str) -> Result<(), String> {
        self.tls = scheme.starts_with("rediss");
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let hosts = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => {
                self.set_userinfo(userinfo)?;
                hosts
            }
            None => authority,
        };
        let sentinel = scheme.ends_with("+sentinel");
        let default_port = if sentinel { 26379 } else { 6379 };
        let addresses = hosts
            .split(',')
            .map(|host| parse_host(host, default_port))
            .collect::<Result<Vec<_>, _>>()?;
        let mut segments = path.split('/').filter(|segment| !segment.is_empty());
        self.servers = if sentinel {
            let service =
                segments.next().map(decode).transpose()?.ok_or(
                    "no service name; expected redis+sentinel://host[:port][,...]/service",
                )?;
            Servers::Sentinel {
                sentinels: addresses,
                service,
            }
        } else if scheme.ends_with("+cluster") {
            Servers::Cluster { seeds: addresses }
        } else if let [address] = &addresses[..] {
            Servers::Single(address.clone())
        } else {
            return Err(
                "several hosts in a redis:// URL; use redis+sentinel:// or redis+cluster://".into(),
            );
        };
        if let Some(db) = segments.next() {
            self.db = parse_db(&decode(db)?)?;
        }
        if segments.next().is_some() {
            return Err("too many path segments".into());
        }
        if self.db != 0 && matches!(self.servers, Servers::Cluster { .. }) {
            return Err("a Redis Cluster has only database 0".into());
        }
        if self.sentinel_user.is_some() && !sentinel {
            return Err("sentinel_user is for redis+sentinel:// URLs".into());
        }
        Ok(())
    }
}

/// A socket URL's userinfo, as redis-py writes it (`unix://[user]:password@/path`), and the
/// rest. Anything else with an '@' is refused without a word about it: it may be a password
/// with an unencoded '/', '?' or '#'.
fn socket_userinfo(rest: &str) -> Result<(Option<&str>, &str), String> {
    if !rest.contains('@') {
        return Ok((None, rest));
    }
    match rest.rsplit_once("@/") {
        Some((info, _)) if !info.contains(['/', '?', '#']) => {
            Ok((Some(info), &rest[info.len() + 1..]))
        }
        _ => Err(
            "an '@' in a socket URL that is not a userinfo before the path; write unix://user:password@/path, with '/', '?', '#' and '@' in them percent-encoded"
                .into(),
        ),
    }
}

/// The host part ends at the first '/', '?' or '#'. An '@' after it means a user name or
/// password that holds one of those unencoded: whatever is said about the rest would quote
/// part of the password, so say only that.
fn check_authority(rest: &str) -> Result<(), String> {
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if rest[authority_end..].contains('@') {
        return Err(
            "an '@' after the host; in a user name or password write '/', '?', '#' and '@' percent-encoded (%2F, %3F, %23, %40)"
                .into(),
        );
    }
    Ok(())
}

impl RedisUrl {
    /// The URL as people see it, rebuilt from what was parsed: the password is `***` and
    /// nothing else of it survives. A user name alone is hidden too unless
    /// `password_elsewhere` (REDLOCK_PASSWORD, --password-file): without one, some clients
    /// read a lone userinfo as the password, and so may the person who wrote it.
    pub(crate) fn shown(&self, password_elsewhere: bool) -> String {
        let scheme = match (&self.servers, self.tls) {
            (Servers::Single(Address::Unix(path)), _) => {
                let mut query = Vec::new();
                if self.db != 0 {
                    query.push(format!("db={}", self.db));
                }
                match (&self.user, &self.password) {
                    (Some(user), Some(_)) => {
                        query.push(format!("user={}", encode(user)));
                        query.push("password=***".to_owned());
                    }
                    (None, Some(_)) => query.push("password=***".to_owned()),
                    (Some(user), None) if password_elsewhere => {
                        query.push(format!("user={}", encode(user)));
                    }
                    (Some(_), None) => query.push("user=***".to_owned()),
                    (None, None) => {}
                }
                let query = if query.is_empty() {
                    String::new()
                } else {
                    format!("?{}", query.join("&"))
                };
                return format!("unix://{}{query}", path.display());
            }
            (Servers::Single(_), false) => "redis",
            (Servers::Single(_), true) => "rediss",
            (Servers::Sentinel { .. }, false) => "redis+sentinel",
            (Servers::Sentinel { .. }, true) => "rediss+sentinel",
            (Servers::Cluster { .. }, false) => "redis+cluster",
            (Servers::Cluster { .. }, true) => "rediss+cluster",
        };
        let userinfo = match (&self.user, &self.password) {
            (Some(user), Some(_)) => format!("{}:***@", encode(user)),
            (None, Some(_)) => ":***@".to_owned(),
            (Some(user), None) if password_elsewhere => format!("{}@", encode(user)),
            (Some(_), None) => "***@".to_owned(),
            (None, None) => String::new(),
        };
        let join = |addresses: &[Address]| {
            addresses
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        let (hosts, service) = match &self.servers {
            Servers::Single(address) => (address.to_string(), String::new()),
            Servers::Sentinel { sentinels, service } => {
                (join(sentinels), format!("/{}", encode(service)))
            }
            Servers::Cluster { seeds } => (join(seeds), String::new()),
        };
        let db = if self.db == 0 {
            String::new()
        } else {
            format!("/{}", self.db)
        };
        let query = self
            .sentinel_user
            .as_ref()
            .map(|user| format!("?sentinel_user={}", encode(user)))
            .unwrap_or_default();
        format!("{scheme}://{userinfo}{hosts}{service}{db}{query}")
    }
}

/// Percent-encodes every byte of `text` but letters, digits and `-._~`, so that a shown name
/// cannot pass for another part of the URL or carry a control character.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                char::from(byte).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

fn parse_db(text: &str) -> Result<i64, String> {
    text.parse::<i64>()
        .ok()
        .filter(|db| *db >= 0)
        .ok_or_else(|| "the database must be a number".to_owned())
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn parse_host(text: &str, default_port: u16) -> Result<Address, String> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or("an IPv6 address without its closing ']'")?;
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or("junk after an IPv6 address")?,
                ),
            ),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    // A name or an address: anything else is a mistake, and may be part of a password.
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-._".contains(c);
    let ipv6 = |c: char| c.is_ascii_alphanumeric() || ":.%".contains(c);
    let host_ok = if text.starts_with('[') {
        host.chars().all(ipv6)
    } else {
        decode(host).is_ok_and(|name| name.chars().all(allowed))
    };
    if !host_ok {
        return Err("a host name may hold only letters, digits, '-', '.' and '_'".into());
    }
    let port = match port {
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|port| *port > 0)
            .ok_or("the port must be a number from 1 to 65535")?,
        None => default_port,
    };
    Ok(Address::Tcp {
        host: decode(host)?,
        port,
    })
}

/// Percent-decodes `text` as UTF-8.
fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or("a '%' not followed by two hex digits")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "percent-encoded bytes that are not UTF-8".to_owned())
}

/// The URL as people may see it: rebuilt from its parsed form with any password (and a lone
/// user name, which some read as the password) replaced by `***`. A URL that does not parse
/// is shown as given, its host, port and path (what is wrong more often than not) included,
/// but for what could be a password: see [`redact_unparsed`].
pub(crate) fn redact_url(url: &str) -> String {
    if let Ok(parsed) = RedisUrl::parse(url) {
        return parsed.shown(false);
    }
    crate::log::printable(&redact_unparsed(url))
}

/// A URL that does not parse, with `***` for whatever could be a password: the userinfo's
/// password (all of the userinfo when it has no `:`; all but the scheme when an `@` stands
/// past the host, where a password holding a `/`, `?` or `#` puts it); a query's `password` and `user` values and
/// any pair it does not know (the rest of a password with an `&`); a fragment. Without an
/// `@`, a password may have been typed where the port goes (`redis://:s3cret`,
/// `redis://user:s3cret`): what follows a host's `:` is shown only when it is a number and
/// the host is one by its looks (an IP address, a name with a dot, `localhost`); otherwise it
/// and everything after it is masked.
fn redact_unparsed(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // No authority to speak of: whatever stands before an '@' may be a password.
        return match url.rsplit_once('@') {
            Some((_, after)) => format!("***@{after}"),
            None => url.to_owned(),
        };
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(authority_end);
    // An '@' past the host: a password with a '/', '?' or '#' in it, or a query value with
    // an '@'; where it ends is anyone's guess.
    if after.contains('@') {
        return format!("{scheme}://***");
    }
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let mut shown = format!("{scheme}://");
    match userinfo.map(|info| info.split_once(':')) {
        None => {}
        Some(Some((user, _))) => shown.push_str(&format!("{user}:***@")),
        Some(None) => shown.push_str("***@"),
    }
    for (index, host) in hosts.split(',').enumerate() {
        if index > 0 {
            shown.push(',');
        }
        let (name, port) = match host.strip_prefix('[') {
            Some(_) => match host.split_once("]:") {
                Some((name, port)) => (format!("{name}]"), Some(port)),
                None => (host.to_owned(), None),
            },
            None => match host.split_once(':') {
                Some((name, port)) => (name.to_owned(), Some(port)),
                None => (host.to_owned(), None),
            },
        };
        let looks_like_a_host = userinfo.is_some()
            || name.starts_with('[')
            || name.contains('.')
            || name == "localhost";
        shown.push_str(&name);
        match port {
            None => {}
            Some(port) if looks_like_a_host && port.bytes().all(|byte| byte.is_ascii_digit()) => {
                shown.push_str(&format!(":{port}"));
            }
            // A password where the port goes, perhaps: nothing after it is shown.
            Some(_) => {
                shown.push_str(":***");
                return shown;
            }
        }
    }
    shown.push_str(&redact_unparsed_tail(after));
    shown
}

/// The path, query and fragment of a URL that does not parse (see [`redact_unparsed`]).
fn redact_unparsed_tail(after: &str) -> String {
    let (after, fragment) = match after.split_once('#') {
        Some((after, _)) => (after, "#***"),
        None => (after, ""),
    };
    let (path, query) = after.split_once('?').unwrap_or((after, ""));
    let query: Vec<String> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((name @ ("db" | "sentinel_user"), value)) => format!("{name}={value}"),
            Some((name @ ("password" | "pass" | "user" | "username"), _)) => {
                format!("{name}=***")
            }
            // After a password with an unencoded '&', the "name" is the rest of it.
            _ => "***".to_owned(),
        })
        .collect();
    let query = match query.is_empty() {
        true => String::new(),
        false => format!("?{}", query.join("&")),
    };
    format!("{path}{query}{fragment}")
}

/// Whether `url` carries a password (or could: one that does not parse and has a userinfo).
pub(crate) fn url_has_password(url: &str) -> bool {
    match RedisUrl::parse(url) {
        Ok(parsed) => parsed.password.is_some(),
        Err(_) => url.contains('@') || url.contains("pass"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> Address {
        Address::Tcp {
            host: host.into(),
            port,
        }
    }

    /// One server's addresses share a place; other servers' do not.
    #[test]
    fn places_tell_one_server_from_another() {
        let place = |host: &str| tcp(host, 7000).place();
        for same in [
            "127.0.0.1",
            "localhost",
            "LOCALHOST",
            "0.0.0.0",
            "::ffff:127.0.0.1",
        ] {
            assert_eq!(place(same), "127.0.0.1:7000", "{same}");
        }
        assert_eq!(place("Redis.Example."), "redis.example:7000");
        for other in ["127.0.0.2", "::1", "10.0.0.1"] {
            assert_ne!(place(other), place("127.0.0.1"), "{other}");
        }
        assert_ne!(tcp("h", 7000).place(), tcp("h", 7001).place());
    }

    #[test]
    fn single_servers() {
        let url = RedisUrl::parse("redis://u%40x:p%3Aw@h:7000/3").unwrap();
        assert_eq!(url.servers, Servers::Single(tcp("h", 7000)));
        assert_eq!(url.user.as_deref(), Some("u@x"));
        assert_eq!(url.password.as_deref(), Some("p:w"));
        assert_eq!((url.db, url.tls), (3, false));
        let url = RedisUrl::parse("rediss://:secret@[::1]").unwrap();
        assert_eq!(url.servers, Servers::Single(tcp("::1", 6379)));
        assert_eq!(
            (url.user, url.password, url.tls),
            (None, Some("secret".into()), true)
        );
        let url = RedisUrl::parse("redis://h?db=2&password=pw").unwrap();
        assert_eq!((url.db, url.password.as_deref()), (2, Some("pw")));
        let url = RedisUrl::parse("unix:///run/redis.sock?db=1").unwrap();
        assert_eq!(
            url.servers,
            Servers::Single(Address::Unix("/run/redis.sock".into()))
        );
        assert_eq!(url.db, 1);
        assert_eq!(
            RedisUrl::parse("redis://only-user@h")
                .unwrap()
                .user
                .as_deref(),
            Some("only-user")
        );
    }

    #[test]
    fn sentinels_and_clusters() {
        let url = RedisUrl::parse("redis+sentinel://:pw@s1,s2:26380,[::1]:5/mymaster/2").unwrap();
        assert_eq!(
            url.servers,
            Servers::Sentinel {
                sentinels: vec![tcp("s1", 26379), tcp("s2", 26380), tcp("::1", 5)],
                service: "mymaster".into()
            }
        );
        assert_eq!(url.db, 2);
        let url = RedisUrl::parse("rediss+cluster://a:7000,b:7001").unwrap();
        assert_eq!(
            url.servers,
            Servers::Cluster {
                seeds: vec![tcp("a", 7000), tcp("b", 7001)]
            }
        );
        assert!(url.tls);
    }

    #[test]
    fn bad_urls_say_why_without_repeating_the_url() {
        for (bad, why) in [
            ("h:6379", "no scheme"),
            ("redis:/h:6379", "'redis:' must be followed by '//'"),
            ("rediss:h", "'rediss:' must be followed by '//'"),
            ("http://h", "unknown scheme"),
            ("redis://", "no host"),
            ("redis://h:0", "port"),
            ("redis://h:99999", "port"),
            ("redis://h/x", "database"),
            ("redis://a,b", "several hosts"),
            ("redis+sentinel://s1", "no service"),
            ("redis+cluster://a/1", "only database 0"),
            ("redis://h?tls=1", "unknown query"),
            ("redis://u:p%zz@h", "'%'"),
            ("unix://", "no socket path"),
            ("redis://[::1", "closing"),
        ] {
            let err = RedisUrl::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert!(
            !RedisUrl::parse("redis://u:s3cret@h/x")
                .unwrap_err()
                .contains("s3cret")
        );
    }
}
