//! `redlock list`: every held lock under the prefix, one line each (or a JSON array).

use super::inspect::{HOLDER_HEADER, LockView, holder_cells, mode_summary};
use super::{Context, print_line, printable, table};
use crate::cli::ListArgs;
use crate::exit::Done;
use std::io::IsTerminal as _;

use crate::lock;

pub(super) fn run(context: &Context, args: &ListArgs) -> anyhow::Result<Done> {
    let listing = lock::list(context.connect()?, &context.prefix)?;
    for (key, why) in &listing.skipped {
        context.log.warn(format_args!(
            "skipping {}: it holds data redlock did not write ({why:#})",
            printable(key)
        ));
    }
    let locks = listing.locks;
    if args.json {
        let views: Vec<LockView<'_>> = locks.iter().map(LockView::new).collect();
        print_line(serde_json::to_string_pretty(&views)?)?;
        return Ok(Done::Success);
    }
    if locks.is_empty() {
        // stdout stays empty for scripts; a person at a terminal is told why.
        let message = format!(
            "no locks are held under prefix '{}'",
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
    header.extend(HOLDER_HEADER[1..].iter().map(|&name| name.to_owned()));
    let mut rows = vec![header];
    for state in &locks {
        let Some(first) = state.holders.first() else {
            continue;
        };
        let mut row = vec![
            printable(state.name.as_str()),
            mode_summary(state),
            state.holder_count.to_string(),
            state.queue_length.to_string(),
        ];
        row.extend(holder_cells(first, state.now).into_iter().skip(1));
        rows.push(row);
    }
    print_line(table(&rows))?;
    Ok(Done::Success)
}
