//! `redlock inspect`: one lock's state as a table or as JSON. The JSON shape is a documented
//! contract (docs/reference.md "JSON output"); `list --json` prints an array of the same objects.

use serde::Serialize;

use super::views::{
    HOLDER_HEADER, LockView, NARROW_HOLDER_HEADER, holder_cells, last_run_line, mode_summary,
    narrow_holder_cells, who_cells,
};
use super::{
    Context, elapsed, named_lock, print_json, print_line, printable, rfc3339, shown, table,
    warn_unreadable,
};
use crate::cli::InspectArgs;
use crate::duration;
use crate::exit::{Done, Failure};
use crate::lock::{Lock, LockState};
use crate::store::{QuorumView, Verdict, View};

pub(super) fn run(context: &Context, args: &InspectArgs) -> anyhow::Result<Done> {
    super::fit_tables_to_terminal(args.table.wide);
    let name = named_lock(&args.lock)?;
    let lock = context.lock(name);
    let state = match context.store.inspect(&lock, context.log)? {
        View::One(state) => *state,
        View::Quorum(view) => return show_quorum(context, &lock, &view, args),
    };
    warn_unreadable(context, &state.unreadable);
    if args.table.json {
        print_json(&serde_json::to_string_pretty(&LockView::new(&state))?)?;
    } else {
        show(&state)?;
    }
    Ok(if state.holder_count == 0 {
        Done::Reported(Failure::Free)
    } else {
        Done::Success
    })
}

/// One master's view, in JSON (quorum mode).
#[derive(Serialize)]
struct MasterView<'a> {
    url: &'a str,
    /// Null when the master did not answer.
    lock: Option<LockView<'a>>,
    /// Why the master did not answer.
    error: Option<String>,
}

/// The lock over a quorum, in JSON.
#[derive(Serialize)]
struct QuorumJson<'a> {
    key: &'a str,
    /// `held` (one holder's fence on a majority), `free` (no live holder on a majority) or
    /// `contested` (neither: nobody can take it until leases run out).
    verdict: &'static str,
    /// The fence held on a majority, when held.
    fence: Option<u64>,
    majority: usize,
    masters: Vec<MasterView<'a>>,
}

/// `inspect` in quorum mode: each master's view and the majority's verdict.
fn show_quorum(
    context: &Context,
    lock: &Lock,
    view: &QuorumView,
    args: &InspectArgs,
) -> anyhow::Result<Done> {
    let states: Vec<&LockState> = view
        .masters
        .iter()
        .filter_map(|(_, state)| state.as_ref().ok())
        .collect();
    for state in &states {
        warn_unreadable(context, &state.unreadable);
    }
    if args.table.json {
        let masters = view
            .masters
            .iter()
            .map(|(url, state)| MasterView {
                url,
                lock: state.as_ref().ok().map(LockView::new),
                error: state.as_ref().err().map(|err| format!("{err:#}")),
            })
            .collect();
        print_json(&serde_json::to_string_pretty(&QuorumJson {
            key: lock.name.as_str(),
            verdict: view.verdict.as_str(),
            fence: view.fence,
            majority: view.majority,
            masters,
        })?)?;
    } else {
        show_quorum_text(lock, view, &states)?;
    }
    Ok(if view.verdict == Verdict::Free {
        Done::Reported(Failure::Free)
    } else {
        Done::Success
    })
}

/// The verdict, the holders of the fence held on a majority, and a line per master.
fn show_quorum_text(lock: &Lock, view: &QuorumView, states: &[&LockState]) -> anyhow::Result<()> {
    let key = printable(lock.name.as_str());
    let (count, majority) = (view.masters.len(), view.majority);
    let holding = |fence: u64| {
        states
            .iter()
            .filter(move |state| state.holders.iter().any(|holder| holder.fence == fence))
    };
    match (view.verdict, view.fence) {
        (_, Some(fence)) => print_line(format_args!(
            "{key}: held on {} of {count} masters (a majority is {majority}), fence {fence}",
            holding(fence).count(),
        ))?,
        (Verdict::Free, None) => print_line(format_args!(
            "{key}: free on {} of {count} masters (a majority is {majority})",
            states
                .iter()
                .filter(|state| state.holder_count == 0)
                .count(),
        ))?,
        _ => print_line(format_args!(
            "{key}: contested: no holder on a majority and not free on a majority; it is taken again when leases run out"
        ))?,
    }
    if let Some(state) = view.fence.and_then(|fence| holding(fence).next()) {
        print_line(holders_table(state))?;
    }
    for (url, state) in &view.masters {
        let line = match state {
            Ok(state) if state.holder_count == 0 => "free".to_owned(),
            Ok(state) => {
                let fences: Vec<String> =
                    state.holders.iter().map(|h| h.fence.to_string()).collect();
                format!(
                    "held ({}), fence {}",
                    mode_summary(state),
                    fences.join(", ")
                )
            }
            Err(err) => format!("no answer: {err:#}"),
        };
        print_line(format_args!("  {url}: {line}"))?;
    }
    Ok(())
}

/// The holders `state` lists, as a table.
fn holders_table(state: &LockState) -> String {
    if super::narrow() {
        let mut rows = vec![NARROW_HOLDER_HEADER.map(str::to_owned).to_vec()];
        rows.extend(
            state
                .holders
                .iter()
                .map(|holder| narrow_holder_cells(holder, state.now)),
        );
        return super::narrow_table(rows);
    }
    let mut rows = vec![HOLDER_HEADER.map(str::to_owned).to_vec()];
    rows.extend(
        state
            .holders
            .iter()
            .map(|holder| holder_cells(holder, state.now)),
    );
    table(&rows)
}

/// The queue, as a table: position, mode, who waits (host:pid on a terminal), since when (how
/// long), command, note.
fn waiters_table(state: &LockState) -> String {
    if super::narrow() {
        let mut rows = vec![
            ["QUEUE", "MODE", "WAITER", "WAITED", "COMMAND"]
                .map(str::to_owned)
                .to_vec(),
        ];
        rows.extend(state.waiters.iter().enumerate().map(|(index, waiter)| {
            vec![
                (index + 1).to_string(),
                shown(&waiter.mode),
                super::host_and_pid(&waiter.who.host, waiter.who.pid),
                duration::display(elapsed(waiter.since, state.now)),
                shown(&waiter.who.command),
            ]
        }));
        return super::narrow_table(rows);
    }
    let mut rows = vec![
        [
            "QUEUE",
            "MODE",
            "HOST",
            "PID",
            "USER",
            "COMMAND",
            "WAITING SINCE",
            "WAITED",
            "NOTE",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    rows.extend(state.waiters.iter().enumerate().map(|(index, waiter)| {
        let mut cells = vec![(index + 1).to_string(), shown(&waiter.mode)];
        cells.extend(who_cells(&waiter.who));
        cells.extend([
            rfc3339(waiter.since),
            duration::display(elapsed(waiter.since, state.now)),
            waiter.who.note.as_deref().map(shown).unwrap_or_default(),
        ]);
        cells
    }));
    table(&rows)
}

/// One lock's state as text.
fn show(state: &LockState) -> anyhow::Result<()> {
    {
        let key = printable(state.name.as_str());
        let last_fence = state
            .last_fence
            .map_or_else(|| "none issued yet".to_owned(), |f| f.to_string());
        // (Holders whose records cannot be read are counted, not listed.)
        match state.holder_count {
            0 => print_line(format_args!("{key}: free (last fence: {last_fence})"))?,
            _ => {
                print_line(format_args!(
                    "{key}: held ({}), last fence: {last_fence}",
                    mode_summary(state)
                ))?;
                if !state.holders.is_empty() {
                    print_line(holders_table(state))?;
                }
                for holder in state.holders.iter().filter(|holder| holder.over) {
                    let left = duration::display(elapsed(state.now, holder.exp));
                    // (A terminal's narrow view gives times relative, as its tables do.)
                    let line = match super::narrow() {
                        true => format!(
                            "the run of pid {} has ended; its minimum hold keeps the lock {left} more",
                            holder.who.pid
                        ),
                        false => format!(
                            "the run of pid {} has ended; the lock is kept for its minimum hold until {} ({left} from now)",
                            holder.who.pid,
                            rfc3339(holder.exp)
                        ),
                    };
                    print_line(super::wrapped("", &line, 2))?;
                }
                if state.holder_count > state.holders.len() && !state.holders.is_empty() {
                    print_line(format_args!(
                        "... and {} more holders",
                        state.holder_count - state.holders.len()
                    ))?;
                }
            }
        }
        if !state.waiters.is_empty() {
            print_line(waiters_table(state))?;
        }
        if state.queue_length > state.waiters.len() {
            print_line(format_args!(
                "{} entries in the queue; the first {} live waiters are shown",
                state.queue_length,
                state.waiters.len()
            ))?;
        }
        if let Some(entry) = &state.last_run {
            print_line(last_run_line(entry, state.now))?;
        }
    }
    Ok(())
}
