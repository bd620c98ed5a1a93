//! `redlock history`: a lock's last holds, newest first, as a table or as JSON (a documented
//! contract: docs/reference.md "JSON output"). `inspect` shows the latest finished one the same way.

use serde::Serialize;

use super::{
    Context, MIN_CUT_WIDTH, cut_to, elapsed, fit_width, lock_name, named, print_json, print_line,
    printable, rfc3339, shown, table, warn_unreadable,
};
use crate::cli::HistoryArgs;
use crate::duration;
use crate::exit::{Done, Failure};
use crate::lock::{HistoryEntry, Identity};
use crate::signals;
use crate::store::History;

/// One hold, as `history --json` and `inspect --json` (`last_run`) print it.
#[derive(Serialize)]
pub(super) struct RunView<'a> {
    fence: u64,
    mode: &'a str,
    #[serde(flatten)]
    who: &'a Identity,
    since: String,
    since_ms: u64,
    /// When the hold ended (its lease's end, when it expired); null while it is held.
    ended: Option<String>,
    ended_ms: Option<u64>,
    /// From start to end, or to now while held.
    duration_ms: u64,
    /// `holding`, `released`, `expired`, `forced`, `lost` or `given back`.
    outcome: &'a str,
    /// The command's exit code, when it exited and the holder reported it.
    exit: Option<i32>,
    /// The signal that killed the command, when one did and the holder reported it.
    signal: Option<i32>,
    /// Why it ended, when someone said: who forced it (and their reason), a limit that
    /// stopped the command.
    why: Option<&'a str>,
}

impl<'a> RunView<'a> {
    pub(super) fn new(entry: &'a HistoryEntry, now: u64) -> Self {
        let end = entry.end(now);
        Self {
            fence: entry.fence,
            mode: &entry.mode,
            who: &entry.who,
            since: rfc3339(entry.since),
            since_ms: entry.since,
            ended: end.map(rfc3339),
            ended_ms: end,
            duration_ms: end.unwrap_or(now).saturating_sub(entry.since),
            outcome: entry.status(now),
            exit: entry.exit,
            signal: entry.signal,
            why: entry.why.as_deref(),
        }
    }
}

/// How the command ended, as far as the holder said: `exit 0`, `SIGTERM`, or `-`.
pub(super) fn how_it_ended(entry: &HistoryEntry) -> String {
    match (entry.exit, entry.signal) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => signals::name(signal),
        (None, None) => "-".to_owned(),
    }
}

/// The outcome with why, if anyone said: `forced (by ops@host: stuck)`.
pub(super) fn outcome(entry: &HistoryEntry, now: u64) -> String {
    match &entry.why {
        Some(why) => format!("{} ({})", shown(entry.status(now)), shown(why)),
        None => shown(entry.status(now)),
    }
}

/// One line for `inspect`: the latest hold that is over. Fitted to a terminal, its note and
/// then its command are cut, as in the tables.
pub(super) fn last_run_line(entry: &HistoryEntry, now: u64) -> String {
    let command = shown(&entry.who.command);
    let note = entry.who.note.as_deref().map(shown);
    let full = compose_last_run(entry, now, &command, note.as_deref());
    let Some(width) = fit_width() else {
        return full;
    };
    let over = full.chars().count().saturating_sub(width);
    let count = |text: &str| text.chars().count();
    let note_len = note.as_deref().map_or(0, count);
    let note_cut = over.min(note_len.saturating_sub(MIN_CUT_WIDTH));
    let command_cut = (over - note_cut).min(count(&command).saturating_sub(MIN_CUT_WIDTH));
    let line = compose_last_run(
        entry,
        now,
        &cut_to(&command, count(&command) - command_cut),
        note.map(|note| cut_to(&note, note_len - note_cut))
            .as_deref(),
    );
    cut_to(&line, width)
}

fn compose_last_run(entry: &HistoryEntry, now: u64, command: &str, note: Option<&str>) -> String {
    let end = entry.end(now).unwrap_or(now);
    // (A terminal's narrow view leaves the 16-digit fence to --wide, as its tables do.)
    let fence = match super::narrow() {
        true => String::new(),
        false => format!("fence {}, ", entry.fence),
    };
    let mut line = format!(
        "last run: {fence}{} pid {} ({command}), {} {} ago after {}",
        shown(&entry.who.host),
        entry.who.pid,
        outcome(entry, now),
        duration::display(elapsed(end, now)),
        duration::display(elapsed(entry.since, end)),
    );
    if entry.exit.is_some() || entry.signal.is_some() {
        line.push_str(&format!(", {}", how_it_ended(entry)));
    }
    if let Some(note) = note {
        line.push_str(&format!("; note: {note}"));
    }
    line
}

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
    super::fit_tables_to_terminal(args.wide);
    let name = lock_name(named(
        args.key.as_deref(),
        args.name.as_deref(),
        &args.after_dashes,
    )?)?;
    let lock = context.lock(name);
    let History {
        now,
        mut entries,
        unreadable,
    } = context.store.history(&lock, context.log)?;
    warn_unreadable(context, &unreadable);
    entries.reverse();
    if args.json {
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
