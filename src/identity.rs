//! Who holds or waits for a lock: this process's host, pid, user and command, as the records in
//! Redis keep them and every reader of the lock shows them. The user's name comes from the
//! environment, else from the uid (NSS, or /etc/passwd under musl).

use serde::{Deserialize, Serialize};

/// Who holds or waits for a lock, recorded for `inspect`. Stored as `cmd` in Redis, shown as
/// `command` in JSON output.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Identity {
    pub host: String,
    pub pid: u32,
    pub user: String,
    /// The supervised command line, or `acquire` for a bare acquisition.
    #[serde(rename(deserialize = "cmd"))]
    pub command: String,
    /// Why it holds the lock, in the holder's words (`--note`, or the CI job's URL).
    #[serde(default)]
    pub note: Option<String>,
}

impl Identity {
    /// Longest host, user and command recorded, in bytes (lua/README.md, "Holders"); longer
    /// ones are cut at a character boundary. They come from the environment, which anyone
    /// sharing the lock can fill, and every reader of the lock shows them.
    pub const MAX_FIELD: usize = 256;

    /// This process, described by `command`.
    pub fn current(command: &str) -> Self {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|name| name.into_string().ok())
            .unwrap_or_else(|| "unknown".into());
        Self {
            host: cut(&host, Self::MAX_FIELD),
            pid: std::process::id(),
            user: cut(&user_name(), Self::MAX_FIELD),
            command: cut(command, Self::MAX_FIELD),
            note: None,
        }
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The user's name as login, su, sudo and cron set it ($USER, else $LOGNAME), else looked up
/// from the uid. The lookup (NSS) costs ~0.1 ms even from /etc/passwd, and far more, or hangs,
/// with a directory service behind it; the name is only shown to people.
fn user_name() -> String {
    ["USER", "LOGNAME"]
        .into_iter()
        .find_map(|name| std::env::var(name).ok().filter(|value| !value.is_empty()))
        .unwrap_or_else(|| {
            let uid = nix::unistd::getuid();
            name_of(uid).unwrap_or_else(|| uid.to_string())
        })
}

/// The name of `uid` through NSS.
#[cfg(not(target_env = "musl"))]
fn name_of(uid: nix::unistd::Uid) -> Option<String> {
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|user| user.name)
}

/// The name of `uid` in /etc/passwd, where musl (no NSS) looks too, but through its stdio and
/// allocator: 13 system calls where reading the file takes 4.
#[cfg(target_env = "musl")]
fn name_of(uid: nix::unistd::Uid) -> Option<String> {
    name_in_passwd(&std::fs::read_to_string("/etc/passwd").ok()?, uid.as_raw())
}

/// The first name with `uid` in the text of a passwd(5) file.
#[cfg(any(test, target_env = "musl"))]
fn name_in_passwd(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id = fields.nth(1)?;
        (id.parse() == Ok(uid) && !name.is_empty()).then(|| name.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::name_in_passwd;

    #[test]
    fn passwd_lookup_finds_the_first_name_of_a_uid() {
        let passwd = "# a comment\nroot:x:0:0:root:/root:/bin/sh\nbroken\n:x:7:7::/:/bin/sh\n\
                      alice:x:1000:1000:Alice:/home/alice:/bin/sh\nalias:x:1000:1000::/:/bin/sh\n";
        assert_eq!(name_in_passwd(passwd, 0).as_deref(), Some("root"));
        assert_eq!(name_in_passwd(passwd, 1000).as_deref(), Some("alice"));
        assert_eq!(name_in_passwd(passwd, 7), None, "an empty name is no name");
        assert_eq!(name_in_passwd(passwd, 4242), None);
    }
}
