//! Listing the held locks under a prefix: SCAN for their holders keys on every master, then
//! inspect each.

use std::collections::BTreeMap;

use super::{Lock, LockState};
use crate::conn::Session;
use crate::exit::{Failure, fail, failure_of};
use crate::keys::{LockName, Prefix};

/// The held locks under a prefix, and keys that looked like locks but hold foreign data.
#[derive(Debug, Default)]
pub struct Listing {
    pub locks: Vec<LockState>,
    /// Key and reason, for keys matching the layout whose content redlock did not write.
    pub skipped: Vec<(String, anyhow::Error)>,
}

/// Every held lock under `prefix`, by name, on every master of a Cluster. Uses SCAN, never
/// KEYS.
pub fn list(session: Session, prefix: &Prefix) -> anyhow::Result<Listing> {
    let mut masters = session.masters()?;
    let mut names = BTreeMap::new();
    for master in &mut masters {
        scan_holders(master, prefix, &mut names)?;
    }
    // Each lock is read by a script, on whichever master serves it (redirected there).
    let session = &mut masters[0];
    let mut listing = Listing::default();
    for (key, name) in names {
        match Lock::new(prefix, name).inspect(session) {
            Ok(state) if state.holder_count == 0 => {}
            Ok(state) => listing.locks.push(state),
            Err(err) if failure_of(&err) == Some(Failure::Usage) => {
                listing.skipped.push((key, err));
            }
            Err(err) => return Err(err),
        }
    }
    listing
        .locks
        .sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
    Ok(listing)
}

/// Adds the holders keys under `prefix` of one server to `names`.
fn scan_holders(
    session: &mut Session,
    prefix: &Prefix,
    names: &mut BTreeMap<String, LockName>,
) -> anyhow::Result<()> {
    let pattern = prefix.holders_pattern();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = session.run(|con| {
            redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .arg("TYPE")
                .arg("hash")
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
            if let Some(name) = prefix.name_of_holders_key(&key) {
                names.insert(key, name);
            }
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}
