//! The views the commands share: a lock as `inspect --json` and `list --json` print it
//! ([`LockView`]), its holders as table cells and headers, how it is held in a word or two,
//! and one hold as `history` and `inspect` show it ([`RunView`], the last run's line). The
//! JSON shapes are a documented contract (docs/reference.md "JSON output").

use serde::Serialize;

use super::{MIN_CUT_WIDTH, cut_to, elapsed, fit_width, rfc3339, shown};
use crate::duration;
use crate::lock::{HistoryEntry, Holder, Identity, LockState};
use crate::signals;

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

impl LockView<'_> {
    /// The view with `state` for how the lock stands (`inspect`: a quorum's verdict may be
    /// `contested`).
    pub(super) fn standing(self, state: &'static str) -> Self {
        Self { state, ..self }
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
pub(super) fn who_cells(who: &Identity) -> [String; 4] {
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
