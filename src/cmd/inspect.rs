//! `redlock inspect`: one lock's state as a table or as JSON. The JSON shape is a documented
//! contract (docs/reference.md "JSON output"); `list --json` prints an array of the same objects.

use serde::Serialize;

use super::history::{RunView, last_run_line};
use super::{
    Context, elapsed, print_json, print_line, printable, rfc3339, shown, table, warn_unreadable,
};
use crate::cli::InspectArgs;
use crate::duration;
use crate::exit::{Done, Failure};
use crate::lock::{Holder, Identity, Lock, LockState};
use crate::store::{QuorumView, Verdict, View};

#[derive(Serialize)]
pub(super) struct LockView<'a> {
    key: &'a str,
    state: &'static str,
    /// `exclusive`, `shared` or `semaphore`; null when free.
    mode: Option<&'a str>,
    /// The semaphore's number of permits; null for other modes.
    limit: Option<u32>,
    /// Last fencing token issued for this name (held or not).
    fence: Option<u64>,
    holders: Vec<HolderView<'a>>,
    /// Live holders in all, present only when `holders` does not list them all (a semaphore
    /// with more than `INSPECT_HOLDERS`).
    #[serde(skip_serializing_if = "Option::is_none")]
    holder_count: Option<usize>,
    /// Queued waiters, in the order they will get the lock.
    waiters: Vec<WaiterView<'a>>,
    /// Entries in the queue, present only when `waiters` does not list them all (a long queue
    /// shows its head; a dead waiter's entry counts until it reaches the head).
    #[serde(skip_serializing_if = "Option::is_none")]
    queue_length: Option<usize>,
    /// The latest hold that is over (see `history`); null when the history has none.
    last_run: Option<RunView<'a>>,
}

#[derive(Serialize)]
struct WaiterView<'a> {
    position: usize,
    mode: &'a str,
    #[serde(flatten)]
    who: &'a Identity,
    since: String,
    since_ms: u64,
    waited_ms: u64,
}

#[derive(Serialize)]
struct HolderView<'a> {
    mode: &'a str,
    /// Holds by this token (more than 1 when nested invocations re-entered it).
    holds: u32,
    #[serde(flatten)]
    who: &'a Identity,
    fence: u64,
    since: String,
    since_ms: u64,
    held_ms: u64,
    ttl_ms: u64,
    ttl_left_ms: u64,
    /// When the lease was last set (acquired, renewed, extended): a holder that stopped
    /// renewing shows here first.
    renewed: String,
    renewed_ms: u64,
    /// The run has ended, and the lock is kept only for its minimum hold (`--min-hold`),
    /// until the lease's end.
    min_hold: bool,
    /// The keeper renewing it (`acquire --keep-alive`), on the holder's host; null otherwise.
    keeper_pid: Option<u32>,
}

impl<'a> LockView<'a> {
    pub(super) fn new(state: &'a LockState) -> Self {
        Self {
            key: state.name.as_str(),
            state: if state.holder_count == 0 {
                "free"
            } else {
                "held"
            },
            mode: lock_mode(state),
            limit: state
                .holders
                .first()
                .filter(|holder| holder.mode == "semaphore")
                .map(|holder| holder.limit),
            fence: state.last_fence,
            holders: state
                .holders
                .iter()
                .map(|holder| HolderView {
                    mode: &holder.mode,
                    holds: holder.count,
                    who: &holder.who,
                    fence: holder.fence,
                    since: rfc3339(holder.since),
                    since_ms: holder.since,
                    held_ms: state.now.saturating_sub(holder.since),
                    ttl_ms: holder.ttl,
                    ttl_left_ms: holder.exp.saturating_sub(state.now),
                    renewed: rfc3339(holder.renewed()),
                    renewed_ms: holder.renewed(),
                    min_hold: holder.over,
                    keeper_pid: holder.keeper,
                })
                .collect(),
            holder_count: (state.holder_count != state.holders.len()).then_some(state.holder_count),
            queue_length: (state.queue_length != state.waiters.len()).then_some(state.queue_length),
            last_run: state
                .last_run
                .as_ref()
                .map(|entry| RunView::new(entry, state.now)),
            waiters: state
                .waiters
                .iter()
                .enumerate()
                .map(|(index, waiter)| WaiterView {
                    position: index + 1,
                    mode: &waiter.mode,
                    who: &waiter.who,
                    since: rfc3339(waiter.since),
                    since_ms: waiter.since,
                    waited_ms: state.now.saturating_sub(waiter.since),
                })
                .collect(),
        }
    }
}

/// The lock's mode as a whole: exclusive if anyone holds it exclusively.
fn lock_mode(state: &LockState) -> Option<&str> {
    state
        .holders
        .iter()
        .find(|holder| holder.mode == "exclusive")
        .or(state.holders.first())
        .map(|holder| holder.mode.as_str())
}

/// "exclusive", "shared by 3", "semaphore, 2 of 3 permits taken".
pub(super) fn mode_summary(state: &LockState) -> String {
    match (lock_mode(state), state.holders.first()) {
        (Some("semaphore"), Some(first)) => format!(
            "semaphore, {} of {} permits taken",
            state.holder_count, first.limit
        ),
        (Some("shared"), _) => format!("shared by {}", state.holder_count),
        (Some(mode), _) => shown(mode),
        (None, _) if state.holder_count > 0 => "unreadable".to_owned(),
        (None, _) => "free".to_owned(),
    }
}

/// Table cells describing one holder: mode, host, pid, user, command, since, held, ttl left,
/// renewed, fence, note.
pub(super) fn holder_cells(holder: &Holder, now: u64) -> Vec<String> {
    let mode = if holder.count > 1 {
        format!("{} ×{}", shown(&holder.mode), holder.count)
    } else {
        shown(&holder.mode)
    };
    let mut cells = vec![mode];
    cells.extend(who_cells(&holder.who));
    // The caller of `acquire --keep-alive` may be gone; the keeper is what keeps it.
    if let Some(keeper) = holder.keeper {
        cells[2] = format!("{} (keeper {keeper})", holder.who.pid);
    }
    // A lock kept after its run ended says so where its lease is shown.
    let ttl_left = duration::display(elapsed(now, holder.exp));
    cells.extend([
        rfc3339(holder.since),
        duration::display(elapsed(holder.since, now)),
        if holder.over {
            format!("{ttl_left} (min hold)")
        } else {
            ttl_left
        },
        format!("{} ago", duration::display(elapsed(holder.renewed(), now))),
        holder.fence.to_string(),
        holder.who.note.as_deref().map(shown).unwrap_or_default(),
    ]);
    cells
}

/// The cells of one holder in a narrow table (see [`NARROW_HOLDER_HEADER`]): mode, host:pid,
/// held for, lease left (and whether only a minimum hold keeps it), command.
pub(super) fn narrow_holder_cells(holder: &Holder, now: u64) -> Vec<String> {
    let cells = holder_cells(holder, now);
    vec![
        cells[0].clone(),
        super::host_and_pid(&holder.who.host, holder.who.pid),
        cells[6].clone(),
        cells[7].clone(),
        cells[4].clone(),
    ]
}

/// The columns of a holder an operator reads first, for a terminal (`--wide`: all of them).
pub(super) const NARROW_HOLDER_HEADER: [&str; 5] =
    ["MODE", "HOLDER", "HELD", "LEASE LEFT", "COMMAND"];

/// Table cells for host, pid, user and command.
fn who_cells(who: &Identity) -> [String; 4] {
    [
        shown(&who.host),
        who.pid.to_string(),
        shown(&who.user),
        shown(&who.command),
    ]
}

pub(super) const HOLDER_HEADER: [&str; 11] = [
    "MODE", "HOST", "PID", "USER", "COMMAND", "SINCE", "HELD", "TTL LEFT", "RENEWED", "FENCE",
    "NOTE",
];

pub(super) fn run(context: &Context, args: &InspectArgs) -> anyhow::Result<Done> {
    super::fit_tables_to_terminal(args.wide);
    let name = super::lock_name(super::named(
        args.key.as_deref(),
        args.name.as_deref(),
        &args.after_dashes,
    )?)?;
    let lock = context.lock(name);
    let state = match context.store.inspect(&lock, context.log)? {
        View::One(state) => *state,
        View::Quorum(view) => return show_quorum(context, &lock, &view, args),
    };
    warn_unreadable(context, &state.unreadable);
    if args.json {
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
    if args.json {
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
