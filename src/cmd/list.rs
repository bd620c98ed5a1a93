//! `redlock list`: every held lock under the prefix, one line each (or a JSON array).

use super::inspect::{HOLDER_HEADER, LockView, holder_cells, mode_summary};
use super::{Context, print_json, print_line, printable, table, warn_unreadable};
use crate::cli::ListArgs;
use crate::exit::Done;
use crate::lock::LockState;
use crate::store::Store;
use serde::Serialize;
use std::io::IsTerminal as _;

use crate::lock;

pub(super) fn run(context: &Context, args: &ListArgs) -> anyhow::Result<Done> {
    super::fit_tables_to_terminal(args.wide);
    let (listings, of) = match &context.store {
        Store::One(target) => (
            vec![lock::list(context.connect_to(target)?, &context.prefix)?],
            None,
        ),
        Store::Quorum(quorum) => {
            let replies = quorum.each_session(|session| lock::list(session, &context.prefix));
            let answered = replies.iter().filter(|reply| reply.is_ok()).count();
            if answered < quorum.majority() {
                return Err(quorum.too_few(answered, &replies));
            }
            let mut listings = Vec::new();
            for (reply, url) in replies.into_iter().zip(quorum.shown()) {
                match reply {
                    Ok(listing) => listings.push(listing),
                    Err(err) => context
                        .log
                        .warn(format_args!("master {url} did not answer ({err:#})")),
                }
            }
            (listings, Some(quorum.len()))
        }
    };
    // In quorum mode a lock is listed once, as the first master that has it shows it, with
    // the number of masters where it is held.
    let mut locks: Vec<(LockState, usize)> = Vec::new();
    for listing in listings {
        for (key, why) in &listing.skipped {
            context.log.warn(format_args!(
                "skipping {}: it holds data redlock did not write ({why:#})",
                printable(key)
            ));
        }
        for state in listing.locks {
            warn_unreadable(context, &state.unreadable);
            let held = usize::from(state.holder_count > 0);
            match locks.iter_mut().find(|(seen, _)| seen.name == state.name) {
                Some((_, count)) => *count += held,
                None => locks.push((state, held)),
            }
        }
    }
    if args.json {
        #[derive(Serialize)]
        struct Listed<'a> {
            #[serde(flatten)]
            view: LockView<'a>,
            /// Quorum mode: masters where it is held, of how many.
            #[serde(skip_serializing_if = "Option::is_none")]
            held_on: Option<usize>,
            #[serde(skip_serializing_if = "Option::is_none")]
            masters: Option<usize>,
        }
        let views: Vec<Listed<'_>> = locks
            .iter()
            .map(|(state, held_on)| Listed {
                view: LockView::new(state),
                held_on: of.map(|_| *held_on),
                masters: of,
            })
            .collect();
        print_json(&serde_json::to_string_pretty(&views)?)?;
        return Ok(Done::Success);
    }
    let locks: Vec<(LockState, usize)> = locks;
    if locks.is_empty() {
        // stdout stays empty for scripts; a person at a terminal is told why, and where it
        // looked: a wrong --redis or database is the usual reason.
        let place = match &context.store {
            Store::One(target) => format!("on {}, database {}", target.redacted(), target.db()),
            Store::Quorum(quorum) => format!("on {} masters", quorum.len()),
        };
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
    // The lock as a whole, then its first holder (the holder's own mode column left out).
    let mut header = ["KEY", "MODE", "HOLDERS", "WAITERS"]
        .map(str::to_owned)
        .to_vec();
    if of.is_some() {
        header.insert(1, "MASTERS".to_owned());
    }
    header.extend(HOLDER_HEADER[1..].iter().map(|&name| name.to_owned()));
    let mut rows = vec![header];
    for (state, held_on) in &locks {
        if state.holder_count == 0 {
            continue;
        }
        let mut row = vec![
            printable(state.name.as_str()),
            mode_summary(state),
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
    print_line(table(&rows))?;
    Ok(Done::Success)
}
