//! Listing the locks under a prefix: SCAN for their holders keys (and, for metrics, their
//! history keys) on every master, then inspect each. A lock whose slot refuses the read for
//! now (a Cluster slot stuck half-migrated) is set apart as unreadable; the rest are listed.

use std::collections::BTreeMap;

use super::{Lock, LockState};
use crate::conn::Session;
use crate::exit::{Failure, Fate, fail, failure_of, fate};
use crate::keys::{LockName, Prefix};

/// Which locks a listing shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The held ones (`list`).
    Held,
    /// The held ones, and the free ones that have a history (`metrics`: a job that last ran
    /// hours ago is what a dashboard wants to see).
    WithHistory,
}

/// The locks under a prefix, and keys that looked like locks but hold foreign data.
#[derive(Debug, Default)]
pub struct Listing {
    pub locks: Vec<LockState>,
    /// Key and reason, for keys matching the layout whose content redlock did not write.
    pub skipped: Vec<(String, anyhow::Error)>,
    /// Locks found whose read was refused before it ran (TRYAGAIN, CLUSTERDOWN, redirections
    /// that led nowhere: their slot cannot be served now), and why.
    pub unreadable: Vec<(LockName, anyhow::Error)>,
}

/// Every lock under `prefix` in `scope`, by name, on every master of a Cluster. Uses SCAN,
/// never KEYS.
pub fn list(session: Session, prefix: &Prefix, scope: Scope) -> anyhow::Result<Listing> {
    let mut masters = session.masters()?;
    let mut names = BTreeMap::new();
    for master in &mut masters {
        scan(
            master,
            &prefix.holders_pattern(),
            "hash",
            &mut names,
            |key| prefix.name_of_holders_key(key),
        )?;
        if scope == Scope::WithHistory {
            scan(
                master,
                &prefix.history_pattern(),
                "zset",
                &mut names,
                |key| prefix.name_of_history_key(key),
            )?;
        }
    }
    // Each lock is read by a script, on whichever master serves it (redirected there).
    let session = &mut masters[0];
    let mut listing = Listing::default();
    for (key, name) in names.into_values() {
        let lock = Lock::new(prefix, name);
        let read = match scope {
            Scope::Held => lock.inspect(session),
            Scope::WithHistory => lock.inspect_with_success(session),
        };
        match read {
            Ok(state) if state.holder_count > 0 => listing.locks.push(state),
            Ok(state) if scope == Scope::WithHistory && state.last_run.is_some() => {
                listing.locks.push(state);
            }
            Ok(_) => {}
            Err(err) if failure_of(&err) == Some(Failure::Usage) => {
                listing.skipped.push((key, err));
            }
            // Its slot refused it without running it: the other locks' slots may be served
            // (a reshard stuck on one slot stops only that slot). A read that went unanswered
            // still ends the listing: its node would make each later read wait as long.
            Err(err) if matches!(fate(&err), Some(Fate::NotRun(_))) => {
                listing.unreadable.push((lock.name, err));
            }
            Err(err) => return Err(err),
        }
    }
    listing
        .locks
        .sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
    Ok(listing)
}

/// Adds the lock behind each key of one server that matches `pattern` and is of `kind` to
/// `names` (by name: a lock found by two of its keys is listed once, under the first key).
fn scan(
    session: &mut Session,
    pattern: &str,
    kind: &str,
    names: &mut BTreeMap<String, (String, LockName)>,
    name_of: impl Fn(&str) -> Option<LockName>,
) -> anyhow::Result<()> {
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = session.run(|con| {
            redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .arg("TYPE")
                .arg(kind)
                .query(con)
        })
        .map_err(|err| {
            // SCAN's TYPE option came with Redis 6.0; older servers call it a syntax error.
            if format!("{err:#}").contains("syntax error") {
                fail(
                    Failure::Unsupported,
                    "the server does not know SCAN ... TYPE: it is older than Redis 6.0, and redlock needs Redis 6.0 or later",
                )
            } else {
                err
            }
        })?;
        for key in keys {
            let Ok(key) = String::from_utf8(key) else {
                continue;
            };
            if let Some(name) = name_of(&key) {
                names.entry(name.as_str().to_owned()).or_insert((key, name));
            }
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}
