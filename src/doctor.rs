//! `redlock doctor`: what the Redis server redlock talks to does to the safety of its locks,
//! read from what the user may see (INFO, CONFIG GET, ROLE, and a script asking the ACL), one
//! finding per subject. Nothing is changed.

use crate::conn::{Session, Target, Unlisted};
use crate::exit::{Refusal, refusal_of};
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

/// Everything the doctor looks at, in order, and the server's `run_id` (`INFO server`; `None`
/// when it cannot be read), which tells two names of one server from two servers.
/// `quorum`: the server is one of a quorum's masters, whose waiters listen for releases.
/// A server that cannot be asked at all (a password missing, not a Redis server) is an error,
/// as for any command, not a list of unknowns.
pub(crate) fn examine(
    session: &mut Session,
    target: &Target,
    lock: &Lock,
    quorum: bool,
) -> anyhow::Result<(Vec<Finding>, Option<String>)> {
    let mut exam = Examination {
        session,
        findings: Vec::new(),
    };
    let server = exam.info("server")?;
    exam.server(server.as_deref());
    exam.replication()?;
    exam.memory()?;
    exam.persistence()?;
    exam.permissions(lock, quorum);
    if server
        .as_deref()
        .and_then(|text| field(text, "redis_mode"))
        .is_some_and(|mode| mode == "cluster")
    {
        exam.cluster();
    }
    exam.password_route(target);
    let run_id = server.as_deref().and_then(|text| field(text, "run_id"));
    Ok((exam.findings, run_id))
}

/// A field of an `INFO` section.
fn field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .map(|value| value.trim().to_owned())
}

/// The line for a subject the user may not read.
fn not_readable(what: &str) -> String {
    format!(
        "cannot read {what}: the user may not run INFO or CONFIG GET (grant +info +config|get, docs/servers.md, \"A Redis user for redlock\"), or check it by hand"
    )
}

/// One server examined: its session, and what was found so far.
struct Examination<'a> {
    session: &'a mut Session,
    findings: Vec<Finding>,
}

impl Examination<'_> {
    fn say(&mut self, check: &'static str, verdict: Verdict, detail: String) {
        self.findings.push(Finding {
            check,
            verdict,
            detail,
        });
    }

    /// `INFO section`; `None` when the ACL denies it (or the command was renamed away): a
    /// subject doctor cannot see. Any other failure (no password, not a Redis server, gone)
    /// ends doctor as it ends any command, instead of a list of unknowns.
    fn info(&mut self, section: &str) -> anyhow::Result<Option<String>> {
        seen(
            self.session
                .run(|con| redis::cmd("INFO").arg(section).query::<String>(con)),
        )
    }

    /// `CONFIG GET name`, as [`Examination::info`]; an unknown parameter is `None`.
    fn config(&mut self, name: &str) -> anyhow::Result<Option<String>> {
        let pair = self.session.run(|con| {
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
    }

    /// The server's name and version (`INFO server`, read by the caller).
    fn server(&mut self, server: Option<&str>) {
        match server.and_then(|text| field(text, "redis_version")) {
            Some(version) => {
                let major: u32 = version
                    .split('.')
                    .next()
                    .and_then(|major| major.parse().ok())
                    .unwrap_or(0);
                // Valkey names itself, keeps redis_version at the Redis it forked from, and
                // renamed redis_mode.
                let mode = server
                    .and_then(|text| {
                        field(text, "redis_mode").or_else(|| field(text, "server_mode"))
                    })
                    .unwrap_or_else(|| "mode unknown".to_owned());
                let valkey = server
                    .filter(|text| field(text, "server_name").as_deref() == Some("valkey"))
                    .and_then(|text| field(text, "valkey_version"));
                if let Some(valkey) = valkey {
                    self.say(
                        "server",
                        Verdict::Ok,
                        format!("Valkey {valkey} (compatible with Redis {version}; {mode})"),
                    );
                } else if major >= 7 {
                    self.say("server", Verdict::Ok, format!("Redis {version} ({mode})"));
                } else if major < 6 {
                    self.say(
                    "server",
                    Verdict::Unsafe,
                    format!(
                        "Redis {version}: redlock needs Redis 6.0 or later and refuses to lock here"
                    ),
                );
                } else {
                    self.say(
                    "server",
                    Verdict::Warn,
                    format!(
                        "Redis {version}: redlock is tested on 7.0 and later; before 7.0 a script cannot check the ACL before it writes, so an ACL that denies one of its commands can leave a change half made"
                    ),
                );
                }
            }
            None => self.say(
                "server",
                Verdict::Unknown,
                not_readable("the server's version"),
            ),
        }
    }

    /// The server's role, its replicas, and whether writes wait for them.
    fn replication(&mut self) -> anyhow::Result<()> {
        match self.info("replication")? {
            Some(replication) => {
                let role = field(&replication, "role").unwrap_or_default();
                let replicas: u32 = field(&replication, "connected_slaves")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                if role != "master" {
                    self.say(
                        "role",
                        Verdict::Unsafe,
                        format!(
                            "the server is a {role}: it refuses writes; point redlock at the master"
                        ),
                    );
                } else if replicas == 0 {
                    self.say(
                    "replication",
                    Verdict::Ok,
                    "a master without replicas: no failover can lose a lock (a restart can, see persistence)".into(),
                );
                } else {
                    let min = self.config("min-replicas-to-write")?;
                    match min.as_deref() {
                    Some("0") => self.say(
                        "replication",
                        Verdict::Warn,
                        format!(
                            "{replicas} replica(s), asynchronous, min-replicas-to-write 0: a failover to a replica that had not received a lock loses it, and a master cut off from its replicas goes on granting and renewing locks (split brain); run with --replicas N and set min-replicas-to-write (docs/safety.md)"
                        ),
                    ),
                    Some(min) => {
                        let lag = self.config("min-replicas-max-lag")?
                            .unwrap_or_else(|| "?".to_owned());
                        self.say(
                            "replication",
                            Verdict::Ok,
                            format!(
                                "{replicas} replica(s); writes need {min} of them, at most {lag} s behind (min-replicas-to-write, min-replicas-max-lag): a master cut off from them refuses writes after that; a holder there stops in time only with --replicas N"
                            ),
                        )
                    }
                    None => self.say(
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
            None => self.say(
                "replication",
                Verdict::Unknown,
                not_readable("the replication"),
            ),
        }

        Ok(())
    }

    /// The memory limit and what Redis evicts when it is reached.
    fn memory(&mut self) -> anyhow::Result<()> {
        match self.info("memory")? {
            Some(memory) => {
                let limit = field(&memory, "maxmemory").unwrap_or_default();
                // In the server's own human units (maxmemory_human: 100.00M).
                let shown_limit =
                    field(&memory, "maxmemory_human").unwrap_or_else(|| limit.clone());
                let policy = field(&memory, "maxmemory_policy").unwrap_or_default();
                if limit == "0" {
                    self.say(
                        "memory",
                        Verdict::Ok,
                        "no memory limit: nothing is evicted".into(),
                    );
                } else if policy == "noeviction" {
                    self.say(
                    "memory",
                    Verdict::Ok,
                    format!(
                        "maxmemory {shown_limit}, noeviction: when full, writes fail (redlock exits 69); nothing is evicted"
                    ),
                );
                } else if policy.starts_with("volatile") {
                    self.say(
                    "memory",
                    Verdict::Unsafe,
                    format!(
                        "maxmemory {shown_limit} with {policy}: under memory pressure a held lock (a key with an expiry) can be evicted, and a second holder takes it before the first notices; use noeviction"
                    ),
                );
                } else {
                    self.say(
                    "memory",
                    Verdict::Unsafe,
                    format!(
                        "maxmemory {shown_limit} with {policy}: held locks can be evicted (a second holder takes them), and fence counters too (fences then start again from the server's clock); use noeviction"
                    ),
                );
                }
            }
            None => self.say(
                "memory",
                Verdict::Unknown,
                not_readable("maxmemory and its policy"),
            ),
        }

        Ok(())
    }

    /// What a restart keeps.
    fn persistence(&mut self) -> anyhow::Result<()> {
        match self.info("persistence")? {
            Some(persistence) => {
                let aof = field(&persistence, "aof_enabled").as_deref() == Some("1");
                let fsync = self.config("appendfsync")?;
                match (aof, fsync.as_deref()) {
                (true, Some("always")) => self.say(
                    "persistence",
                    Verdict::Ok,
                    "append-only file with appendfsync always: a restart keeps every lock".into(),
                ),
                (true, fsync) => self.say(
                    "persistence",
                    Verdict::Warn,
                    format!(
                        "append-only file with appendfsync {}: a crash can lose the last second of lock changes, and a lock with it",
                        fsync.unwrap_or("(unreadable)")
                    ),
                ),
                (false, _) => self.say(
                    "persistence",
                    Verdict::Warn,
                    "no append-only file: a restart loses every lock held (fences go on rising, from the server's clock); restart no sooner than the longest lease, or set appendonly yes and appendfsync always".into(),
                ),
            }
            }
            None => self.say(
                "persistence",
                Verdict::Unknown,
                not_readable("the persistence"),
            ),
        }

        Ok(())
    }

    /// Whether the user may run every command redlock needs (and, for a quorum's master,
    /// announce releases to waiters).
    fn permissions(&mut self, lock: &Lock, quorum: bool) {
        match lock.denied_commands(self.session) {
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
                            "the user may not run {} on redlock's keys: those requests fail (exit 77); see the ACL line in docs/servers.md",
                            denied.commands.join(", ")
                        ),
                    )
                };
                self.say("permissions", verdict, detail);
                if !denied.optional.is_empty() {
                    self.say(
                        "permissions",
                        Verdict::Warn,
                        format!(
                            "the user may not run {} on redlock's keys: requests work, but each acquisition reads the lock's keys one by one, which costs the server more time; see the ACL line in docs/servers.md",
                            denied.optional.join(", ")
                        ),
                    );
                }
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
                                "the user may not run {} on redlock's release channels: waiters are not told of releases and look every second instead; grant +publish +subscribe &{} (docs/servers.md, \"Several masters\")",
                                denied.notices.join(", "),
                                lock.released_channels_pattern()
                            ),
                        )
                    };
                    self.say("notices", verdict, detail);
                }
            }
            Ok(None) => self.say(
                "permissions",
                Verdict::Unknown,
                "the server cannot check permissions from a script (before Redis 7)".into(),
            ),
            Err(err) => self.say(
                "permissions",
                Verdict::Unsafe,
                format!("redlock's scripts cannot run: {err:#}"),
            ),
        }
    }

    /// A Cluster node: whether every slot is served.
    fn cluster(&mut self) {
        let state = self
            .session
            .run(|con| redis::cmd("CLUSTER").arg("INFO").query::<String>(con))
            .ok()
            .and_then(|text| field(&text, "cluster_state"));
        match state.as_deref() {
            Some("ok") => self.say("cluster", Verdict::Ok, "cluster_state ok".into()),
            Some(state) => self.say(
                "cluster",
                Verdict::Unsafe,
                format!("cluster_state {state}: some slots are not served"),
            ),
            None => self.say(
                "cluster",
                Verdict::Unknown,
                not_readable("the cluster's state"),
            ),
        }
    }
}

impl Examination<'_> {
    /// Whether the password goes without TLS to servers the user did not list (the master
    /// the sentinels name, a Cluster's other nodes): said only when it does.
    fn password_route(&mut self, target: &Target) {
        let Some(unlisted) = target.unlisted_in_clear(self.session) else {
            return;
        };
        let detail = match unlisted {
            Unlisted::Master(master) => format!(
                "the password goes without TLS to the master the sentinels name ({master}), which the URL does not list: whoever can answer for a sentinel can name a host of theirs and be sent it; use rediss+sentinel:// (each host's certificate is then checked) or a network you trust (docs/safety.md)"
            ),
            Unlisted::Nodes(nodes) => format!(
                "the password goes without TLS to Cluster nodes the URL does not list ({}) and to any host a MOVED or ASK names: whoever can answer for a node can name a host of theirs and be sent it; use rediss+cluster:// (each host's certificate is then checked) or a network you trust (docs/safety.md)",
                nodes.map_or_else(
                    || "CLUSTER SLOTS could not be read".to_owned(),
                    |nodes| nodes.join(", ")
                )
            ),
        };
        self.say("password", Verdict::Warn, detail);
    }
}

/// A request's text; `None` when the ACL denies it or the command was renamed away.
fn seen(result: anyhow::Result<String>) -> anyhow::Result<Option<String>> {
    match result {
        Ok(text) => Ok(Some(text)),
        Err(err)
            if matches!(
                refusal_of(&err),
                Some(Refusal::NotPermitted | Refusal::UnknownCommand)
            ) =>
        {
            Ok(None)
        }
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    /// The commands the doctor asks about (the first word of each check in lua/doctor.lua),
    /// required (`local checks`) and optional.
    fn checked() -> Vec<String> {
        let doctor = include_str!("../lua/doctor.lua");
        let names = |from: &str, to: &str| {
            doctor[doctor.find(from).unwrap()..doctor.find(to).unwrap()]
                .split("{'")
                .skip(1)
                .map(|check| check.split('\'').next().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        let mut checked = names("local checks", "local notices");
        checked.extend(names("local optional", "local function denied_of"));
        checked
    }

    /// The doctor asks about every command the scripts call, and the ACL line of docs/servers.md grants
    /// every command the doctor asks about.
    #[test]
    fn the_checked_commands_are_the_ones_redlock_uses() {
        let checked = checked();
        assert!(checked.len() > 20, "{checked:?}");
        let scripts = [
            crate::scripts::PRELUDE,
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
        let readme = include_str!("../docs/servers.md");
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
