//! Lock names, the key prefix, and the Redis keys of one lock.
//!
//! Every key of a lock carries the hash tag `{<name>}` so that a multi-key script lands on one
//! Cluster slot. A raw `{` or `}` in a name would move or empty that tag (`}x` gives `{}x}`,
//! whose tag is empty, splitting the lock from its fence), so the tag holds the name with `%`,
//! `{` and `}` percent-encoded. Names are otherwise stored literally.

use crate::exit::{Failure, fail};

/// Longest accepted lock name, in bytes.
pub const MAX_NAME_LEN: usize = 512;
/// Longest accepted prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 128;
/// The prefix of every key unless the caller chooses another.
pub const DEFAULT_PREFIX: &str = "redlock:";

/// A validated lock name: non-empty, at most 512 bytes, no control characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockName(String);

impl LockName {
    pub fn new(name: &str) -> anyhow::Result<Self> {
        let shown = name.escape_debug();
        if name.is_empty() {
            return Err(fail(Failure::Usage, "the lock name is empty"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(fail(
                Failure::Usage,
                format!(
                    "the lock name is {} bytes long; the limit is {MAX_NAME_LEN}",
                    name.len()
                ),
            ));
        }
        if name.chars().any(char::is_control) {
            return Err(fail(
                Failure::Usage,
                format!("\"{shown}\": control characters are not allowed in lock names"),
            ));
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A validated key prefix: printable, no braces (they would steal the hash tag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefix(String);

impl Prefix {
    pub fn new(prefix: &str) -> anyhow::Result<Self> {
        let why = if prefix.len() > MAX_PREFIX_LEN {
            Some(format!("longer than {MAX_PREFIX_LEN} bytes"))
        } else if prefix.contains(['{', '}']) {
            Some("braces are reserved for the lock's hash tag".to_owned())
        } else if prefix.chars().any(char::is_control) {
            Some("control characters are not allowed".to_owned())
        } else {
            None
        };
        match why {
            Some(why) => Err(fail(
                Failure::Usage,
                format!("\"{}\": {why}", prefix.escape_debug()),
            )),
            None => Ok(Self(prefix.to_owned())),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The keys of lock `name` under this prefix.
    pub fn keys(&self, name: &LockName) -> LockKeys {
        let base = format!("{}{{{}}}", self.0, encode_tag(name.as_str()));
        LockKeys {
            holders: format!("{base}:holders"),
            leases: format!("{base}:leases"),
            fence: format!("{base}:fence"),
            queue: format!("{base}:queue"),
            waiters: format!("{base}:waiters"),
            history: format!("{base}:history"),
            base,
        }
    }

    /// A `SCAN MATCH` pattern for the holders hash of every lock under this prefix.
    pub fn holders_pattern(&self) -> String {
        glob_escaped(&self.0) + "{*}:holders"
    }

    /// The lock name behind a holders key found by [`Self::holders_pattern`].
    pub fn name_of_holders_key(&self, key: &str) -> Option<LockName> {
        self.name_of(key, "}:holders")
    }

    /// A `SCAN MATCH` pattern for the history of every lock under this prefix.
    pub fn history_pattern(&self) -> String {
        glob_escaped(&self.0) + "{*}:history"
    }

    /// The lock name behind a history key found by [`Self::history_pattern`].
    pub fn name_of_history_key(&self, key: &str) -> Option<LockName> {
        self.name_of(key, "}:history")
    }

    fn name_of(&self, key: &str, suffix: &str) -> Option<LockName> {
        let tag = key
            .strip_prefix(self.0.as_str())?
            .strip_prefix('{')?
            .strip_suffix(suffix)?;
        LockName::new(&decode_tag(tag)?).ok()
    }
}

/// The Redis keys of one lock; all share the hash tag (layout: `lua/README.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockKeys {
    /// Hash: one field per holder token, value = holder record (JSON).
    pub holders: String,
    /// Sorted set: holder token by lease expiry (server ms); expires with `holders`, at the
    /// latest lease.
    pub leases: String,
    /// Counter bumped by every acquisition; the one key that never expires.
    pub fence: String,
    /// Sorted set: waiter id by arrival (a sequence number).
    pub queue: String,
    /// Hash: one field per waiter id, value = queue entry (JSON); expires with `queue`.
    pub waiters: String,
    /// Sorted set: one entry (JSON) per hold, scored by its fence; the last 100, kept for 30
    /// days after the last change.
    pub history: String,
    base: String,
}

impl LockKeys {
    /// The list a waiter blocks on until a script wakes it.
    pub fn wake(&self, waiter_id: &str) -> String {
        format!("{}:wake:{waiter_id}", self.base)
    }

    /// The Pub/Sub channel on which, in quorum mode, a release tells the waiters (a channel,
    /// not a key: it holds nothing).
    pub fn released_channel(&self) -> String {
        format!("{}:released", self.base)
    }

    /// An ACL channel pattern (`&...`) that covers the release channel of every lock under
    /// this lock's prefix.
    pub fn released_channels_pattern(&self) -> String {
        // A prefix holds no brace: the lock's own part starts at the first.
        let prefix = self.base.split('{').next().unwrap_or_default();
        glob_escaped(prefix) + "*"
    }

    /// The mark that cancels the requests of `token` still on their way (`lua/README.md`).
    pub fn cancel(&self, token: &str) -> String {
        format!("{}:cancel:{token}", self.base)
    }
}

fn encode_tag(name: &str) -> String {
    let mut tag = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => tag.push_str("%25"),
            '{' => tag.push_str("%7B"),
            '}' => tag.push_str("%7D"),
            c => tag.push(c),
        }
    }
    tag
}

fn decode_tag(tag: &str) -> Option<String> {
    let mut name = String::with_capacity(tag.len());
    let mut rest = tag;
    while let Some(at) = rest.find('%') {
        name.push_str(&rest[..at]);
        let escaped = rest.get(at..at + 3)?;
        name.push(match escaped {
            "%25" => '%',
            "%7B" => '{',
            "%7D" => '}',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    name.push_str(rest);
    Some(name)
}

/// `text` with the characters special in Redis glob patterns escaped.
fn glob_escaped(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 12);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix() -> Prefix {
        Prefix::new(DEFAULT_PREFIX).unwrap()
    }

    #[test]
    fn keys_share_one_nonempty_tag() {
        for raw in [
            "deploy", "}x", "{}", "a}{b", "100%", "%7B", "sp ace", "日本",
        ] {
            let name = LockName::new(raw).unwrap();
            let keys = prefix().keys(&name);
            let tag = |key: &str| {
                let open = key.find('{').unwrap();
                let close = open + key[open..].find('}').unwrap();
                key[open + 1..close].to_owned()
            };
            assert!(!tag(&keys.holders).is_empty(), "{raw}");
            for other in [&keys.leases, &keys.fence, &keys.queue, &keys.waiters] {
                assert_eq!(tag(&keys.holders), tag(other), "{raw}");
            }
            assert_eq!(tag(&keys.holders), tag(&keys.wake("0123")), "{raw}");
            assert_eq!(
                prefix().name_of_holders_key(&keys.holders),
                Some(name.clone())
            );
            assert_eq!(prefix().name_of_history_key(&keys.history), Some(name));
        }
    }

    #[test]
    fn rejects_bad_names_and_prefixes() {
        assert!(LockName::new("").is_err());
        assert!(LockName::new(&"x".repeat(513)).is_err());
        assert!(LockName::new(&"x".repeat(512)).is_ok());
        assert!(LockName::new("a\nb").is_err());
        assert!(LockName::new("a\u{1b}b").is_err());
        assert!(Prefix::new("a{b").is_err());
        assert!(Prefix::new("").is_ok());
    }

    #[test]
    fn scan_pattern_escapes_globs() {
        assert_eq!(
            Prefix::new("a*b:").unwrap().holders_pattern(),
            "a\\*b:{*}:holders"
        );
        assert_eq!(prefix().name_of_holders_key("redlock:{x}:fence"), None);
        assert_eq!(prefix().name_of_holders_key("other:{x}:holders"), None);
    }

    #[test]
    fn the_channels_pattern_covers_the_prefix_only() {
        let name = LockName::new("{job}").unwrap();
        assert_eq!(
            prefix().keys(&name).released_channels_pattern(),
            "redlock:*"
        );
        let odd = Prefix::new("team[1]*:").unwrap();
        assert_eq!(
            odd.keys(&name).released_channels_pattern(),
            "team\\[1\\]\\*:*"
        );
        assert_eq!(
            Prefix::new("")
                .unwrap()
                .keys(&name)
                .released_channels_pattern(),
            "*"
        );
    }
}
