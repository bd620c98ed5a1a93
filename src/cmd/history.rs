//! `redlock history`: a lock's last holds, newest first, as a table or as JSON (a documented
//! contract: docs/reference.md "JSON output"). `inspect` shows the latest finished one the same way.

use super::views::{RunView, how_it_ended, outcome};
use super::{
    Context, elapsed, named_lock, print_json, print_line, printable, rfc3339, shown, table,
    warn_unreadable,
};
use crate::cli::HistoryArgs;
use crate::duration;
use crate::exit::{Done, Failure};
use crate::lock::HistoryEntry;
use crate::store::History;

/// The holds as a terminal shows them: when each started (how long ago), how long it lasted,
/// how it ended, the holder as host:pid, and the command cut to the width left; `--wide`
/// gives every column.
fn narrow_rows(entries: &[HistoryEntry], now: u64) -> Vec<Vec<String>> {
    let mut rows = vec![
        [
            "STARTED", "DURATION", "OUTCOME", "EXIT", "HOLDER", "COMMAND",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for entry in entries {
        let end = entry.end(now).unwrap_or(now);
        rows.push(vec![
            format!("{} ago", duration::display(elapsed(entry.since, now))),
            duration::display(elapsed(entry.since, end)),
            shown(entry.status(now)),
            how_it_ended(entry),
            super::host_and_pid(&entry.who.host, entry.who.pid),
            shown(&entry.who.command),
        ]);
    }
    rows
}

pub(super) fn run(context: &Context, args: &HistoryArgs) -> anyhow::Result<Done> {
    super::fit_tables_to_terminal(args.table.wide);
    let name = named_lock(&args.lock)?;
    let lock = context.lock(name);
    let History {
        now,
        mut entries,
        unreadable,
    } = context.store.history(&lock, context.log)?;
    warn_unreadable(context, &unreadable);
    entries.reverse();
    if args.table.json {
        let views: Vec<RunView<'_>> = entries.iter().map(|e| RunView::new(e, now)).collect();
        print_json(&serde_json::to_string_pretty(&views)?)?;
    } else if !entries.is_empty() && super::narrow() {
        print_line(super::narrow_table(narrow_rows(&entries, now)))?;
    } else if !entries.is_empty() {
        let mut rows = vec![
            [
                "FENCE", "SINCE", "DURATION", "OUTCOME", "EXIT", "HOST", "PID", "USER", "COMMAND",
                "NOTE",
            ]
            .map(str::to_owned)
            .to_vec(),
        ];
        for entry in &entries {
            let end = entry.end(now).unwrap_or(now);
            rows.push(vec![
                entry.fence.to_string(),
                rfc3339(entry.since),
                duration::display(elapsed(entry.since, end)),
                outcome(entry, now),
                how_it_ended(entry),
                printable(&entry.who.host),
                entry.who.pid.to_string(),
                printable(&entry.who.user),
                printable(&entry.who.command),
                entry.who.note.as_deref().map(printable).unwrap_or_default(),
            ]);
        }
        print_line(table(&rows))?;
    }
    if entries.is_empty() {
        context.log.notice(format_args!(
            "lock '{}' has no history (never taken, or not while its history lives: 30 days unless --history-ttl said otherwise)",
            printable(lock.name.as_str())
        ));
        return Ok(Done::Reported(Failure::Free));
    }
    Ok(Done::Success)
}
