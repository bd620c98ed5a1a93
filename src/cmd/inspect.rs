//! `redlock inspect`: one lock's state as a table or as JSON, whatever the store read it from
//! (a [`View`]: the lock, how it stands, and over a quorum each master's view, shown when there
//! are masters). The JSON shape is a documented contract (docs/reference.md "JSON output");
//! `list --json` prints an array of the same objects.

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
use crate::lock::LockState;
use crate::store::{Masters, Verdict, View};

pub(super) fn run(context: &Context, args: &InspectArgs) -> anyhow::Result<Done> {
    super::fit_tables_to_terminal(args.table.wide);
    let name = named_lock(&args.lock)?;
    let view = context.store.inspect(&context.lock(name), context.log)?;
    warn_unreadable(context, &view.state.unreadable);
    if args.table.json {
        print_json(&serde_json::to_string_pretty(&InspectView::new(&view))?)?;
    } else {
        show(&view)?;
    }
    Ok(match view.verdict {
        Verdict::Free => Done::Reported(Failure::Free),
        Verdict::Held | Verdict::Contested => Done::Success,
    })
}

/// The lock in JSON: the object `list --json` prints, its `state` the verdict, and over a
/// quorum the majority and each master's view.
#[derive(Serialize)]
struct InspectView<'a> {
    #[serde(flatten)]
    lock: LockView<'a>,
    /// Quorum mode: the same as `state` (`held`, `free` or `contested`), as earlier versions
    /// printed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    majority: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    masters: Option<Vec<MasterView<'a>>>,
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

impl<'a> InspectView<'a> {
    fn new(view: &'a View) -> Self {
        let masters = view.masters.as_ref();
        Self {
            lock: LockView::new(&view.state).standing(view.verdict.as_str()),
            verdict: masters.map(|_| view.verdict.as_str()),
            majority: masters.map(|masters| masters.majority),
            masters: masters.map(|masters| {
                masters
                    .each
                    .iter()
                    .map(|(url, state)| MasterView {
                        url,
                        lock: state.as_ref().ok().map(LockView::new),
                        error: state.as_ref().err().map(|err| format!("{err:#}")),
                    })
                    .collect()
            }),
        }
    }
}

/// The line that says how the lock stands: on one Redis held (how) or free, with its last
/// fence; over a quorum on how many masters, against the majority.
fn headline(view: &View) -> String {
    let state = &view.state;
    let key = printable(state.name.as_str());
    let Some(Masters { majority, each }) = &view.masters else {
        let last_fence = state
            .last_fence
            .map_or_else(|| "none issued yet".to_owned(), |f| f.to_string());
        return match view.verdict {
            Verdict::Free => format!("{key}: free (last fence: {last_fence})"),
            _ => format!(
                "{key}: held ({}), last fence: {last_fence}",
                mode_summary(state)
            ),
        };
    };
    let count = each.len();
    let answered = || each.iter().filter_map(|(_, state)| state.as_ref().ok());
    match (view.verdict, state.holders.first()) {
        (Verdict::Held, Some(holder)) => format!(
            "{key}: held on {} of {count} masters (a majority is {majority}), fence {}",
            answered()
                .filter(|master| master.holders.iter().any(|h| h.fence == holder.fence))
                .count(),
            holder.fence,
        ),
        (Verdict::Free, _) => format!(
            "{key}: free on {} of {count} masters (a majority is {majority})",
            answered().filter(|master| master.holder_count == 0).count(),
        ),
        _ => format!(
            "{key}: contested: no holder on a majority and not free on a majority; it is taken again when leases run out"
        ),
    }
}

/// Each master's line (quorum mode): free, held (how, by which fences), or why it did not
/// answer.
fn master_lines(masters: &Masters) -> anyhow::Result<()> {
    for (url, state) in &masters.each {
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

/// The lock as text: how it stands, its holders, those kept for a minimum hold, its queue,
/// each master's view over a quorum, and its last run.
fn show(view: &View) -> anyhow::Result<()> {
    let state = &view.state;
    print_line(headline(view))?;
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
    // (Holders whose records cannot be read are counted, not listed.)
    if state.holder_count > state.holders.len() && !state.holders.is_empty() {
        print_line(format_args!(
            "... and {} more holders",
            state.holder_count - state.holders.len()
        ))?;
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
    if let Some(masters) = &view.masters {
        master_lines(masters)?;
    }
    if let Some(entry) = &state.last_run {
        print_line(last_run_line(entry, state.now))?;
    }
    Ok(())
}
