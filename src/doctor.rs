//! `redlock doctor`: what the Redis server redlock talks to does to the safety of its locks,
//! read from what the user may see (INFO, CONFIG GET, ROLE, and a script asking the ACL), one
//! finding per subject. Nothing is changed.

use crate::conn::Session;
use crate::lock::Lock;

/// How a finding bears on safety.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Verdict {
    /// Fine for locks.
    Ok,
    /// Safe, with a weakness worth knowing.
    #[serde(rename = "warning")]
    Warn,
    /// Locks can be lost or given twice.
    Unsafe,
    /// Could not be read (the user may not ask); the detail says what to check by hand.
    Unknown,
}

impl Verdict {
    /// The word shown for it, in text and in JSON alike.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warning",
            Verdict::Unsafe => "UNSAFE",
            Verdict::Unknown => "unknown",
        }
    }
}

/// The subjects on which a lock's safety depends: one that could not be read is no all-clear.
pub(crate) const SAFETY_SUBJECTS: [&str; 4] = ["role", "replication", "memory", "persistence"];

/// One subject checked.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Finding {
    pub(crate) check: &'static str,
    pub(crate) verdict: Verdict,
    pub(crate) detail: String,
}

/// Everything the doctor looks at, in order.
/// `quorum`: the server is one of a quorum's masters, whose waiters listen for releases.
/// A server that cannot be asked at all (a password missing, not a Redis server) is an error,
/// as for any command, not a list of unknowns.
pub(crate) fn examine(
    session: &mut Session,
    lock: &Lock,
    quorum: bool,
) -> anyhow::Result<Vec<Finding>> {
    // A request the ACL denies (or a command renamed away) is a subject doctor cannot see;
    // any other failure (no password, not a Redis server, gone) ends doctor as it ends any
    // command, instead of a list of unknowns.
    let seen = |result: anyhow::Result<String>| -> anyhow::Result<Option<String>> {
        match result {
            Ok(text) => Ok(Some(text)),
            Err(err) => {
                let text = format!("{err:#}");
                if text.contains("permission denied") || text.contains("unknown command") {
                    Ok(None)
                } else {
                    Err(err)
                }
            }
        }
    };
    let info = |session: &mut Session, section: &str| -> anyhow::Result<Option<String>> {
        seen(session.run(|con| redis::cmd("INFO").arg(section).query::<String>(con)))
    };
    let field = |text: &str, name: &str| -> Option<String> {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}:")))
            .map(|value| value.trim().to_owned())
    };
    let config = |session: &mut Session, name: &str| -> anyhow::Result<Option<String>> {
        let pair = session.run(|con| {
            redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query::<Vec<String>>(con)
        });
        // An unknown parameter comes back as an empty list.
        Ok(
            seen(pair.map(|pair| pair.get(1).cloned().unwrap_or_default()))?
                .filter(|value| !value.is_empty()),
        )
    };
    let mut findings = Vec::new();
    let mut say = |check: &'static str, verdict: Verdict, detail: String| {
        findings.push(Finding {
            check,
            verdict,
            detail,
        });
    };
    let not_readable = |what: &str| {
        format!(
            "cannot read {what}: the user may not run INFO or CONFIG GET (grant +info +config|get, README \"A Redis user for redlock\"), or check it by hand"
        )
    };

    let server = info(session, "server")?;
    match server
        .as_deref()
        .and_then(|text| field(text, "redis_version"))
    {
        Some(version) => {
            let major: u32 = version
                .split('.')
                .next()
                .and_then(|major| major.parse().ok())
                .unwrap_or(0);
            // Valkey names itself, keeps redis_version at the Redis it forked from, and
            // renamed redis_mode.
            let mode = server
                .as_deref()
                .and_then(|text| field(text, "redis_mode").or_else(|| field(text, "server_mode")))
                .unwrap_or_else(|| "mode unknown".to_owned());
            let valkey = server
                .as_deref()
                .filter(|text| field(text, "server_name").as_deref() == Some("valkey"))
                .and_then(|text| field(text, "valkey_version"));
            if let Some(valkey) = valkey {
                say(
                    "server",
                    Verdict::Ok,
                    format!("Valkey {valkey} (compatible with Redis {version}; {mode})"),
                );
            } else if major >= 7 {
                say("server", Verdict::Ok, format!("Redis {version} ({mode})"));
            } else if major < 6 {
                say(
                    "server",
                    Verdict::Unsafe,
                    format!(
                        "Redis {version}: redlock needs Redis 6.0 or later and refuses to lock here"
                    ),
                );
            } else {
                say(
                    "server",
                    Verdict::Warn,
                    format!(
                        "Redis {version}: redlock is tested on 7.0 and later; before 7.0 a script cannot check the ACL before it writes, so an ACL that denies one of its commands can leave a change half made"
                    ),
                );
            }
        }
        None => say(
            "server",
            Verdict::Unknown,
            not_readable("the server's version"),
        ),
    }

    match info(session, "replication")? {
        Some(replication) => {
            let role = field(&replication, "role").unwrap_or_default();
            let replicas: u32 = field(&replication, "connected_slaves")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            if role != "master" {
                say(
                    "role",
                    Verdict::Unsafe,
                    format!(
                        "the server is a {role}: it refuses writes; point redlock at the master"
                    ),
                );
            } else if replicas == 0 {
                say(
                    "replication",
                    Verdict::Ok,
                    "a master without replicas: no failover can lose a lock (a restart can, see persistence)".into(),
                );
            } else {
                let min = config(session, "min-replicas-to-write")?;
                match min.as_deref() {
                    Some("0") => say(
                        "replication",
                        Verdict::Warn,
                        format!(
                            "{replicas} replica(s), asynchronous, min-replicas-to-write 0: a failover to a replica that had not received a lock loses it, and a master cut off from its replicas goes on granting and renewing locks (split brain); run with --replicas N and set min-replicas-to-write (README, \"Safety\")"
                        ),
                    ),
                    Some(min) => {
                        let lag = config(session, "min-replicas-max-lag")?
                            .unwrap_or_else(|| "?".to_owned());
                        say(
                            "replication",
                            Verdict::Ok,
                            format!(
                                "{replicas} replica(s); writes need {min} of them, at most {lag} s behind (min-replicas-to-write, min-replicas-max-lag): a master cut off from them refuses writes after that; a holder there stops in time only with --replicas N"
                            ),
                        )
                    }
                    None => say(
                        "replication",
                        Verdict::Warn,
                        format!(
                            "{replicas} replica(s), asynchronous unless min-replicas-to-write is set ({})",
                            not_readable("it")
                        ),
                    ),
                }
            }
        }
        None => say(
            "replication",
            Verdict::Unknown,
            not_readable("the replication"),
        ),
    }

    match info(session, "memory")? {
        Some(memory) => {
            let limit = field(&memory, "maxmemory").unwrap_or_default();
            // In the server's own human units (maxmemory_human: 100.00M).
            let shown_limit = field(&memory, "maxmemory_human").unwrap_or_else(|| limit.clone());
            let policy = field(&memory, "maxmemory_policy").unwrap_or_default();
            if limit == "0" {
                say(
                    "memory",
                    Verdict::Ok,
                    "no memory limit: nothing is evicted".into(),
                );
            } else if policy == "noeviction" {
                say(
                    "memory",
                    Verdict::Ok,
                    format!(
                        "maxmemory {shown_limit}, noeviction: when full, writes fail (redlock exits 69); nothing is evicted"
                    ),
                );
            } else if policy.starts_with("volatile") {
                say(
                    "memory",
                    Verdict::Unsafe,
                    format!(
                        "maxmemory {shown_limit} with {policy}: under memory pressure a held lock (a key with an expiry) can be evicted, and a second holder takes it before the first notices; use noeviction"
                    ),
                );
            } else {
                say(
                    "memory",
                    Verdict::Unsafe,
                    format!(
                        "maxmemory {shown_limit} with {policy}: held locks can be evicted (a second holder takes them), and fence counters too (fences then start again from the server's clock); use noeviction"
                    ),
                );
            }
        }
        None => say(
            "memory",
            Verdict::Unknown,
            not_readable("maxmemory and its policy"),
        ),
    }

    match info(session, "persistence")? {
        Some(persistence) => {
            let aof = field(&persistence, "aof_enabled").as_deref() == Some("1");
            let fsync = config(session, "appendfsync")?;
            match (aof, fsync.as_deref()) {
                (true, Some("always")) => say(
                    "persistence",
                    Verdict::Ok,
                    "append-only file with appendfsync always: a restart keeps every lock".into(),
                ),
                (true, fsync) => say(
                    "persistence",
                    Verdict::Warn,
                    format!(
                        "append-only file with appendfsync {}: a crash can lose the last second of lock changes, and a lock with it",
                        fsync.unwrap_or("(unreadable)")
                    ),
                ),
                (false, _) => say(
                    "persistence",
                    Verdict::Warn,
                    "no append-only file: a restart loses every lock held (fences go on rising, from the server's clock); restart no sooner than the longest lease, or set appendonly yes and appendfsync always".into(),
                ),
            }
        }
        None => say(
            "persistence",
            Verdict::Unknown,
            not_readable("the persistence"),
        ),
    }

    match lock.denied_commands(session) {
        Ok(Some(denied)) => {
            let (verdict, detail) = if denied.commands.is_empty() {
                (
                    Verdict::Ok,
                    "the user may run every command redlock needs on its keys".into(),
                )
            } else {
                (
                    Verdict::Unsafe,
                    format!(
                        "the user may not run {} on redlock's keys: those requests fail (exit 77); see the README's ACL line",
                        denied.commands.join(", ")
                    ),
                )
            };
            say("permissions", verdict, detail);
            // Only a quorum's waiters listen for releases.
            if quorum {
                let (verdict, detail) = if denied.notices.is_empty() {
                    (
                        Verdict::Ok,
                        "the user may publish and subscribe to releases: waiters are told at once"
                            .into(),
                    )
                } else {
                    (
                        Verdict::Warn,
                        format!(
                            "the user may not run {} on redlock's release channels: waiters are not told of releases and look every second instead; grant +publish +subscribe &{} (README, \"Several masters\")",
                            denied.notices.join(", "),
                            lock.released_channels_pattern()
                        ),
                    )
                };
                say("notices", verdict, detail);
            }
        }
        Ok(None) => say(
            "permissions",
            Verdict::Unknown,
            "the server cannot check permissions from a script (before Redis 7)".into(),
        ),
        Err(err) => say(
            "permissions",
            Verdict::Unsafe,
            format!("redlock's scripts cannot run: {err:#}"),
        ),
    }

    if let Some(cluster) = server
        .as_deref()
        .and_then(|text| field(text, "redis_mode"))
        .filter(|mode| mode == "cluster")
    {
        let _ = cluster;
        let state = session
            .run(|con| redis::cmd("CLUSTER").arg("INFO").query::<String>(con))
            .ok()
            .and_then(|text| field(&text, "cluster_state"));
        match state.as_deref() {
            Some("ok") => say("cluster", Verdict::Ok, "cluster_state ok".into()),
            Some(state) => say(
                "cluster",
                Verdict::Unsafe,
                format!("cluster_state {state}: some slots are not served"),
            ),
            None => say(
                "cluster",
                Verdict::Unknown,
                not_readable("the cluster's state"),
            ),
        }
    }
    Ok(findings)
}

#[cfg(test)]
mod tests {
    /// The commands the doctor asks about (the first word of each check in lua/doctor.lua).
    fn checked() -> Vec<String> {
        let doctor = include_str!("../lua/doctor.lua");
        doctor[doctor.find("local checks").unwrap()..doctor.find("local notices").unwrap()]
            .split("{'")
            .skip(1)
            .map(|check| check.split('\'').next().unwrap().to_owned())
            .collect()
    }

    /// The doctor asks about every command the scripts call, and the README's ACL line grants
    /// every command the doctor asks about.
    #[test]
    fn the_checked_commands_are_the_ones_redlock_uses() {
        let checked = checked();
        assert!(checked.len() > 20, "{checked:?}");
        let scripts = [
            include_str!("../lua/prelude.lua"),
            include_str!("../lua/acquire.lua"),
            include_str!("../lua/release.lua"),
            include_str!("../lua/extend.lua"),
            include_str!("../lua/raise.lua"),
            include_str!("../lua/refresh.lua"),
            include_str!("../lua/inspect.lua"),
        ];
        for script in scripts {
            for piece in script
                .split("redis.call(")
                .skip(1)
                .chain(script.split("redis.call, ").skip(1))
            {
                if let Some(name) = piece
                    .strip_prefix('\'')
                    .and_then(|rest| rest.split('\'').next())
                    // Quorum mode's release notice, best effort (docs/servers.md, "Several masters");
                    // INFO only names the version of a server too old for redlock, which has
                    // no ACL.
                    .filter(|name| *name != "PUBLISH" && *name != "INFO")
                {
                    assert!(
                        checked.contains(&name.to_ascii_lowercase()),
                        "a script calls {name}, which the doctor does not ask about"
                    );
                }
            }
        }
        let readme = include_str!("../README.md");
        let acl = readme
            .lines()
            .find(|line| line.starts_with("ACL SETUSER redlock"))
            .unwrap();
        for command in &checked {
            assert!(
                acl.split_whitespace()
                    .any(|rule| rule == format!("+{command}")),
                "{command}"
            );
        }
    }
}
