//! `redlock list`: every held lock under the prefix, one line each (or a JSON array); a lock
//! whose read its server refused for now (a Cluster slot stuck migrating) is listed as
//! unreadable, with a warning, and the others are shown.

use super::views::{
    HOLDER_HEADER, LockView, NARROW_HOLDER_HEADER, holder_cells, mode_summary, narrow_holder_cells,
};
use super::{
    Context, print_json, print_line, printable, table, warn_unread_locks, warn_unreadable,
};
use crate::cli::ListArgs;
use crate::exit::Done;
use crate::keys::LockName;
use crate::lock::{LockState, Scope};
use crate::store::Listed;
use serde::Serialize;
use std::io::IsTerminal as _;

pub(super) fn run(context: &Context, args: &ListArgs) -> anyhow::Result<Done> {
    super::fit_tables_to_terminal(args.table.wide);
    let Listed {
        locks,
        masters: of,
        skipped,
        unreadable,
    } = context
        .store
        .list(&context.prefix, Scope::Held, context.log)?;
    for (key, why) in &skipped {
        context.log.warn(format_args!(
            "skipping {}: it holds data redlock did not write ({why:#})",
            printable(key)
        ));
    }
    for (state, _) in &locks {
        warn_unreadable(context, &state.unreadable);
    }
    warn_unread_locks(context, &unreadable, |name| {
        locks.iter().any(|(state, _)| state.name == *name)
    });
    // Each unreadable lock once, unless (quorum mode) other masters' reads list it anyway.
    let mut unread: Vec<(&LockName, String)> = Vec::new();
    for (name, why) in &unreadable {
        let listed = locks.iter().any(|(state, _)| state.name == *name);
        if !listed && unread.iter().all(|(seen, _)| *seen != name) {
            unread.push((name, format!("{why:#}")));
        }
    }
    if args.table.json {
        #[derive(Serialize)]
        #[serde(untagged)]
        enum Listed<'a> {
            Read {
                // Boxed: far larger than an unreadable lock's entry.
                #[serde(flatten)]
                view: Box<LockView<'a>>,
                /// Quorum mode: masters where it is held, of how many.
                #[serde(skip_serializing_if = "Option::is_none")]
                held_on: Option<usize>,
                #[serde(skip_serializing_if = "Option::is_none")]
                masters: Option<usize>,
            },
            /// Found, but its read was refused (`state` is `unreadable`).
            Unreadable {
                key: &'a str,
                state: &'static str,
                error: &'a str,
            },
        }
        let mut views: Vec<(&str, Listed<'_>)> = locks
            .iter()
            .map(|(state, held_on)| {
                let view = Listed::Read {
                    view: Box::new(LockView::new(state)),
                    held_on: of.map(|_| *held_on),
                    masters: of,
                };
                (state.name.as_str(), view)
            })
            .collect();
        views.extend(unread.iter().map(|(name, why)| {
            let view = Listed::Unreadable {
                key: name.as_str(),
                state: "unreadable",
                error: why,
            };
            (name.as_str(), view)
        }));
        views.sort_by_key(|(name, _)| *name);
        let views: Vec<Listed<'_>> = views.into_iter().map(|(_, view)| view).collect();
        print_json(&serde_json::to_string_pretty(&views)?)?;
        return Ok(Done::Success);
    }
    if locks.is_empty() && unread.is_empty() {
        // stdout stays empty for scripts; a person at a terminal is told why, and where it
        // looked: a wrong --redis or database is the usual reason.
        let place = context.store.place();
        let message = format!(
            "no locks are held under prefix '{}' {place}",
            printable(context.prefix.as_str())
        );
        if std::io::stderr().is_terminal() {
            context.log.notice(message);
        } else {
            context.log.step(message);
        }
        return Ok(Done::Success);
    }
    let names: Vec<&LockName> = unread.iter().map(|(name, _)| *name).collect();
    // MODE follows the lock's name, and MASTERS in quorum mode.
    let mode = 1 + usize::from(of.is_some());
    if super::narrow() {
        print_line(super::narrow_table(with_unreadable(
            narrow_rows(&locks, of),
            &names,
            mode,
        )))?;
    } else {
        print_line(table(&with_unreadable(rows(&locks, of), &names, mode)))?;
    }
    Ok(Done::Success)
}

/// `rows` (a header, then one row per lock, by name) with a row for each lock in `unreadable`
/// in its place by name: its name, `unreadable` in the column at `mode` (the MODE column),
/// the other cells empty (the warning says why).
fn with_unreadable(
    mut rows: Vec<Vec<String>>,
    unreadable: &[&LockName],
    mode: usize,
) -> Vec<Vec<String>> {
    let width = rows[0].len();
    for name in unreadable {
        let mut row = vec![String::new(); width];
        row[0] = printable(name.as_str());
        row[mode] = "unreadable".to_owned();
        let at = rows[1..].partition_point(|row| row[0] < printable(name.as_str())) + 1;
        rows.insert(at, row);
    }
    rows
}

/// The table of held locks: the lock as a whole, then its first holder (the holder's own
/// mode column left out); in quorum mode the masters that hold it, of `of` (`Listed::locks`),
/// and the locks that some masters but no majority hold (leftovers of a failed acquisition,
/// or a contested lock: `inspect` shows each master's holders).
fn rows(locks: &[(LockState, usize)], of: Option<usize>) -> Vec<Vec<String>> {
    let mut header = ["KEY", "MODE", "HOLDERS", "WAITERS"]
        .map(str::to_owned)
        .to_vec();
    if of.is_some() {
        header.insert(1, "MASTERS".to_owned());
    }
    header.extend(HOLDER_HEADER[1..].iter().map(|&name| name.to_owned()));
    let mut rows = vec![header];
    for (state, held_on) in locks {
        let minority_only = state.holder_count == 0 && of.is_some() && *held_on > 0;
        if state.holder_count == 0 && !minority_only {
            continue;
        }
        let mut row = vec![
            printable(state.name.as_str()),
            if minority_only {
                "not held by a majority".to_owned()
            } else {
                mode_summary(state)
            },
            state.holder_count.to_string(),
            state.queue_length.to_string(),
        ];
        if let Some(of) = of {
            row.insert(1, format!("{held_on}/{of}"));
        }
        // Holders whose records cannot be read are counted, their cells left empty.
        match state.holders.first() {
            Some(first) => row.extend(holder_cells(first, state.now).into_iter().skip(1)),
            None => row.extend(HOLDER_HEADER[1..].iter().map(|_| String::new())),
        }
        rows.push(row);
    }
    rows
}

/// The table of held locks on a terminal: the columns an operator reads first (the lock, its
/// mode, the first holder as host:pid, how long it has held it, the lease left, the waiters),
/// the command last, cut to the width left; `--wide` gives [`rows`].
fn narrow_rows(locks: &[(LockState, usize)], of: Option<usize>) -> Vec<Vec<String>> {
    let mut header = vec!["LOCK".to_owned()];
    if of.is_some() {
        header.push("MASTERS".to_owned());
    }
    header
        .extend(["MODE", "HOLDER", "HELD", "LEASE LEFT", "WAITERS", "COMMAND"].map(str::to_owned));
    let mut rows = vec![header];
    for (state, held_on) in locks {
        let minority_only = state.holder_count == 0 && of.is_some() && *held_on > 0;
        if state.holder_count == 0 && !minority_only {
            continue;
        }
        let mut row = vec![printable(state.name.as_str())];
        if let Some(of) = of {
            row.push(format!("{held_on}/{of}"));
        }
        let first = state.holders.first();
        row.push(match (lock_mode(state), first) {
            _ if minority_only => "no majority".to_owned(),
            (Some("semaphore"), Some(first)) => {
                format!("semaphore {}/{}", state.holder_count, first.limit)
            }
            _ => mode_summary(state),
        });
        // (NARROW_HOLDER_HEADER: MODE, HOLDER, HELD, LEASE LEFT, COMMAND)
        let cells = first.map_or_else(
            || vec![String::new(); NARROW_HOLDER_HEADER.len()],
            |first| narrow_holder_cells(first, state.now),
        );
        row.extend(cells[1..4].iter().cloned());
        row.push(state.queue_length.to_string());
        row.push(cells[4].clone());
        rows.push(row);
    }
    rows
}

/// The mode of the lock's first holder, as the scripts record it.
fn lock_mode(state: &LockState) -> Option<&str> {
    state.holders.first().map(|holder| holder.mode.as_str())
}
