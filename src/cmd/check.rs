//! `redlock check`: did the job run? Each lock's history says whether a hold ended with exit
//! status 0 within a window, whether one is in progress (and since when), and how the latest
//! ended. One line per lock, a JSON array (docs/reference.md, "JSON output"), or the one line of a
//! monitoring plugin (`--nagios`: Nagios, Icinga and the plugins that follow them).

use std::cmp::Reverse;
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;

use super::views::{RunView, how_it_ended};
use super::{Context, elapsed, hint_text, print_json, print_line, rfc3339, shown};
use crate::cli::CheckArgs;
use crate::duration;
use crate::exit::{Done, Failure, PluginState, hint_of};
use crate::keys::LockName;
use crate::lock::{AHEAD_OF_CLOCK_MS, HistoryEntry};
use crate::log::quoted;
use crate::store::History;

/// The finished holds a line names besides the last success, newest first.
const LATEST: usize = 3;

/// What was asked of every lock.
#[derive(Clone, Copy)]
struct Limits {
    succeeded_within: Option<Duration>,
    max_held: Option<Duration>,
}

/// One lock, judged: its history at server time `now`, and what it comes to.
struct Judged {
    name: LockName,
    now: u64,
    /// `None`: OK.
    outcome: Option<Failure>,
    /// The latest hold that succeeded.
    last_success: Option<HistoryEntry>,
    /// The holds in progress, oldest first.
    holding: Vec<HistoryEntry>,
    /// The latest holds that are over, newest end first (at most [`LATEST`]).
    latest: Vec<HistoryEntry>,
    /// Holds in the history, and the start of the oldest.
    kept: usize,
    oldest: Option<u64>,
}

/// Prints the plugin line of an error that came before `check` could run (a command line that
/// does not parse): UNKNOWN, by the plugin convention.
pub(super) fn print_unknown(why: &str) -> anyhow::Result<()> {
    print_line(format!("REDLOCK UNKNOWN - {}", plugin_text(why)))
}

/// Runs `check`. The context is built by the caller: with `--nagios` an error building it (a
/// bad URL, an unreadable password file) is the plugin's UNKNOWN line too.
pub(super) fn run(context: anyhow::Result<Context>, args: &CheckArgs) -> anyhow::Result<Done> {
    let limits = Limits {
        succeeded_within: args.succeeded_within,
        max_held: args.max_held,
    };
    let judged = context.and_then(|context| {
        let names = names(args)?;
        let mut judged = Vec::with_capacity(names.len());
        for name in names {
            let lock = context.lock(name);
            let mut history = context.store.history(&lock, context.log)?;
            super::warn_unreadable(&context, &history.unreadable);
            let now = history.now;
            history
                .entries
                .retain(|entry| believed(&context, &lock.name, entry, now));
            judged.push(judge(lock.name, history, limits));
        }
        Ok((context, judged))
    });
    if args.nagios {
        let (line, state) = match &judged {
            Ok((_, judged)) => plugin_line(judged, limits),
            Err(err) => {
                let hint = hint_of(err)
                    .map(|hint| format!("; {}", hint_text(hint)))
                    .unwrap_or_default();
                let text = plugin_text(&format!("{err:#}{hint}"));
                (format!("REDLOCK UNKNOWN - {text}"), PluginState::Unknown)
            }
        };
        print_line(line)?;
        return Ok(Done::Plugin(state));
    }
    let (context, judged) = judged?;
    if args.json {
        let views: Vec<CheckView<'_>> = judged.iter().map(|j| CheckView::new(j, limits)).collect();
        print_json(&serde_json::to_string_pretty(&views)?)?;
    } else {
        for one in judged
            .iter()
            .filter(|one| !(one.outcome.is_none() && context.log.quiet))
        {
            print_line(format!(
                "{}: {}",
                shown(one.name.as_str()),
                sentence(one, limits)
            ))?;
        }
    }
    Ok(match worst(&judged) {
        None => Done::Success,
        Some(failure) => Done::Reported(failure),
    })
}

/// The locks named, as words and with --key, each once, in that order; checked before any
/// connection is made.
fn names(args: &CheckArgs) -> anyhow::Result<Vec<LockName>> {
    super::request::nothing_after_dashes(&args.after_dashes)?;
    let mut names: Vec<LockName> = Vec::new();
    for given in args.names.iter().chain(&args.key) {
        let name = LockName::new(given).context("--key")?;
        if !names.contains(&name) {
            names.push(name);
        }
    }
    match names.as_slice() {
        [] => Err(crate::exit::fail(
            Failure::Usage,
            "no lock name: give one or more (redlock check NAME... --succeeded-within 26h) or --key NAME",
        )),
        [one] => {
            crate::log::set_key(one.as_str());
            Ok(names)
        }
        _ => Ok(names),
    }
}

/// Whether a hold's times can be believed at server time `now`: one that starts or ends more
/// than [`AHEAD_OF_CLOCK_MS`] after it is warned of (naming the lock and its fence) and not
/// counted, by `check` and `metrics`.
pub(super) fn believed(context: &Context, name: &LockName, entry: &HistoryEntry, now: u64) -> bool {
    let Some(ahead) = entry.ahead_of(now) else {
        return true;
    };
    context.log.warn(format_args!(
        "skipping the hold of fence {} in the history of '{}': its {} ({}) is more than {} ahead of the server's clock ({}); a time still to come proves nothing",
        entry.fence,
        shown(name.as_str()),
        if entry.ended == Some(ahead) { "end" } else { "start" },
        rfc3339(ahead),
        duration::display(Duration::from_millis(AHEAD_OF_CLOCK_MS)),
        rfc3339(now),
    ));
    false
}

/// What the history of `name` comes to under `limits`.
fn judge(name: LockName, history: History, limits: Limits) -> Judged {
    let History { now, entries, .. } = history;
    let mut holding: Vec<HistoryEntry> = entries
        .iter()
        .filter(|entry| entry.status(now) == "holding")
        .cloned()
        .collect();
    holding.sort_by_key(|entry| entry.since);
    let mut finished: Vec<&HistoryEntry> = entries
        .iter()
        .filter(|entry| entry.end(now).is_some())
        .collect();
    finished.sort_by_key(|entry| Reverse(entry.end(now)));
    let last_success = finished
        .iter()
        .find(|entry| entry.succeeded())
        .map(|entry| (*entry).clone());
    let longest = holding.first().map(|oldest| elapsed(oldest.since, now));
    let recent = |entry: &HistoryEntry, window: Duration| {
        entry
            .end(now)
            .is_some_and(|end| elapsed(end, now) <= window)
    };
    let outcome = if entries.is_empty() {
        limits.succeeded_within.map(|_| Failure::NoHistory)
    } else if limits
        .max_held
        .is_some_and(|limit| longest.is_some_and(|held| held > limit))
    {
        Some(Failure::HeldTooLong)
    } else {
        match limits.succeeded_within {
            None => None,
            Some(window) if last_success.as_ref().is_some_and(|e| recent(e, window)) => None,
            Some(_) if !holding.is_empty() => Some(Failure::Running),
            Some(_) => Some(Failure::Stale),
        }
    };
    Judged {
        name,
        now,
        outcome,
        last_success,
        latest: finished.into_iter().take(LATEST).cloned().collect(),
        kept: entries.len(),
        oldest: entries.iter().map(|entry| entry.since).min(),
        holding,
    }
}

/// How bad an outcome is, for the exit status of several locks: a hold past its limit, then
/// no success, no history at all, a hold in progress, OK.
fn severity(outcome: Option<Failure>) -> u8 {
    match outcome {
        Some(Failure::HeldTooLong) => 4,
        Some(Failure::Stale) => 3,
        Some(Failure::NoHistory) => 2,
        Some(Failure::Running) => 1,
        _ => 0,
    }
}

fn worst(judged: &[Judged]) -> Option<Failure> {
    judged
        .iter()
        .map(|one| one.outcome)
        .max_by_key(|outcome| severity(*outcome))
        .flatten()
}

/// The status word of a line: `OK`, `STALE`, `RUNNING`, `HELD TOO LONG`, `NO HISTORY`.
fn status_word(outcome: Option<Failure>) -> &'static str {
    match outcome {
        None => "OK",
        Some(Failure::Stale) => "STALE",
        Some(Failure::Running) => "RUNNING",
        Some(Failure::HeldTooLong) => "HELD TOO LONG",
        _ => "NO HISTORY",
    }
}

/// The status as `--json` names it.
fn status_name(outcome: Option<Failure>) -> &'static str {
    match outcome {
        None => "ok",
        Some(Failure::Stale) => "stale",
        Some(Failure::Running) => "running",
        Some(Failure::HeldTooLong) => "held_too_long",
        _ => "no_history",
    }
}

/// `3h 12m ago`.
fn ago(at: u64, now: u64) -> String {
    format!("{} ago", duration::display(elapsed(at, now)))
}

/// A hold that ended, in a few words: `exit 1 on web3 2h ago`, `expired on web1 1d ago`,
/// `lost (SIGTERM) on web2 5m ago`.
fn ended_briefly(entry: &HistoryEntry, now: u64) -> String {
    let status = entry.status(now);
    let how = match (status, how_it_ended(entry)) {
        (_, how) if how == "-" => shown(status),
        ("released", how) => how,
        (status, how) => format!("{} ({how})", shown(status)),
    };
    let end = entry.end(now).unwrap_or(now);
    format!("{how} on {} {}", shown(&entry.who.host), ago(end, now))
}

/// The last success in a few words: `last success 3h 12m ago on web2 (took 4m 10s)`, with
/// `, none within 26h` when `window` is given; or that the history has none.
fn last_success_briefly(one: &Judged, window: Option<Duration>) -> String {
    match &one.last_success {
        Some(entry) => {
            let end = entry.end(one.now).unwrap_or(one.now);
            let none_within = window
                .map(|window| format!(", none within {}", limit_text(window)))
                .unwrap_or_default();
            format!(
                "last success {} on {} (took {}){none_within}",
                ago(end, one.now),
                shown(&entry.who.host),
                duration::display(elapsed(entry.since, end))
            )
        }
        None => match one.oldest {
            Some(oldest) => format!(
                "no success in its history ({} since {})",
                holds(one.kept),
                rfc3339(oldest)
            ),
            None => "no success in its history".to_owned(),
        },
    }
}

/// A limit as it was likely written: `26h`, `7d`, else as durations are shown (`90m`,
/// `1.5s`), never `1day 2h` for 26 hours.
fn limit_text(limit: Duration) -> String {
    let secs = limit.as_secs();
    if limit.subsec_nanos() == 0 && secs > 0 && secs.is_multiple_of(86_400) {
        format!("{}d", secs / 86_400)
    } else if limit.subsec_nanos() == 0 && secs > 0 && secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else {
        duration::display(limit)
    }
}

/// `1 hold`, `3 holds`.
fn holds(count: usize) -> String {
    if count == 1 {
        "1 hold".to_owned()
    } else {
        format!("{count} holds")
    }
}

/// A hold in progress: `held by web3 pid 4242 ('./report.sh') since 2026-...Z (12m)`.
fn holding_briefly(entry: &HistoryEntry, now: u64) -> String {
    format!(
        "held by {} pid {} ({}) since {} ({})",
        shown(&entry.who.host),
        entry.who.pid,
        quoted(&entry.who.command),
        rfc3339(entry.since),
        duration::display(elapsed(entry.since, now))
    )
}

/// What a line says after the lock's name: its status and why.
fn sentence(one: &Judged, limits: Limits) -> String {
    let now = one.now;
    let latest = || {
        let runs: Vec<String> = one
            .latest
            .iter()
            .map(|entry| ended_briefly(entry, now))
            .collect();
        if runs.is_empty() {
            String::new()
        } else {
            format!("; latest: {}", runs.join(", "))
        }
    };
    let detail = match one.outcome {
        None => {
            let mut parts = Vec::new();
            if limits.succeeded_within.is_some() || one.last_success.is_some() {
                parts.push(last_success_briefly(one, None));
            }
            if let Some(limit) = limits.max_held {
                parts.push(format!("nothing held longer than {}", limit_text(limit)));
            }
            for entry in &one.holding {
                parts.push(holding_briefly(entry, now));
            }
            if parts.is_empty() {
                parts.push("no history".to_owned());
            }
            parts.join("; ")
        }
        Some(Failure::Stale) => format!(
            "{}{}",
            last_success_briefly(one, limits.succeeded_within),
            latest()
        ),
        Some(Failure::Running) => format!(
            "{}; {}{}",
            holding_briefly(&one.holding[0], now),
            last_success_briefly(one, limits.succeeded_within),
            latest()
        ),
        Some(Failure::HeldTooLong) => {
            let oldest = &one.holding[0];
            format!(
                "{}, longer than --max-held {}",
                holding_briefly(oldest, now),
                limit_text(limits.max_held.unwrap_or_default())
            )
        }
        Some(_) => {
            "no holds recorded: never taken, or not while its history lives (30 days unless --history-ttl said otherwise)".to_owned()
        }
    };
    format!("{}: {detail}", status_word(one.outcome))
}

/// Text for the plugin line: `|` starts the performance data there, so it stands as `/` in
/// the text; printable, as every line.
fn plugin_text(text: &str) -> String {
    shown(text).replace('|', "/")
}

/// A label of the performance data: quoted, without the quote and `=` that would end it.
fn perf_label(name: &LockName, what: &str) -> String {
    let name: String = shown(name.as_str())
        .chars()
        .map(|c| if matches!(c, '\'' | '=') { '_' } else { c })
        .collect();
    format!("'{name} {what}'")
}

/// Whole seconds, for the performance data.
fn seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs())
}

/// The plugin line (`REDLOCK STATE - text | perfdata`) and its state: every lock's status and
/// why, and per lock the age of its last success (`U` when none; critical past the window)
/// and how long the oldest hold in progress has lasted (0 when none; critical past --max-held).
fn plugin_line(judged: &[Judged], limits: Limits) -> (String, PluginState) {
    let state = PluginState::of_check(worst(judged));
    let text: Vec<String> = judged
        .iter()
        .map(|one| plugin_text(&format!("{}: {}", one.name.as_str(), sentence(one, limits))))
        .collect();
    // Thresholds are plain numbers in the value's unit.
    let threshold = |limit: Option<Duration>| {
        limit
            .map(|limit| limit.as_secs().to_string())
            .unwrap_or_default()
    };
    let mut perf = Vec::new();
    for one in judged {
        let age = one
            .last_success
            .as_ref()
            .and_then(|entry| entry.end(one.now))
            .map_or_else(|| "U".to_owned(), |end| seconds(elapsed(end, one.now)));
        perf.push(format!(
            "{}={age};;{};0;",
            perf_label(&one.name, "success_age"),
            threshold(limits.succeeded_within)
        ));
        let held = one
            .holding
            .first()
            .map(|oldest| elapsed(oldest.since, one.now))
            .unwrap_or_default();
        perf.push(format!(
            "{}={};;{};0;",
            perf_label(&one.name, "held"),
            seconds(held),
            threshold(limits.max_held)
        ));
    }
    let line = format!(
        "REDLOCK {} - {} | {}",
        state.as_str(),
        text.join("; "),
        perf.join(" ")
    );
    (line, state)
}

/// One lock, as `check --json` prints it.
#[derive(Serialize)]
struct CheckView<'a> {
    key: &'a str,
    /// `ok`, `stale`, `running`, `held_too_long` or `no_history`.
    status: &'static str,
    /// What the text line says after the key.
    message: String,
    succeeded_within_ms: Option<u64>,
    max_held_ms: Option<u64>,
    /// The latest hold that succeeded, and how long ago it ended; null when none.
    last_success: Option<RunView<'a>>,
    last_success_age_ms: Option<u64>,
    /// The holds in progress, oldest first.
    holding: Vec<RunView<'a>>,
    /// The latest holds that are over, newest first (at most 3).
    latest: Vec<RunView<'a>>,
}

impl<'a> CheckView<'a> {
    fn new(one: &'a Judged, limits: Limits) -> Self {
        let ms = |duration: Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let now = one.now;
        Self {
            key: one.name.as_str(),
            status: status_name(one.outcome),
            message: sentence(one, limits),
            succeeded_within_ms: limits.succeeded_within.map(ms),
            max_held_ms: limits.max_held.map(ms),
            last_success: one.last_success.as_ref().map(|e| RunView::new(e, now)),
            last_success_age_ms: one
                .last_success
                .as_ref()
                .and_then(|entry| entry.end(now))
                .map(|end| now.saturating_sub(end)),
            holding: one.holding.iter().map(|e| RunView::new(e, now)).collect(),
            latest: one.latest.iter().map(|e| RunView::new(e, now)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_as_written() {
        let hours = |h: u64| Duration::from_secs(h * 3600);
        assert_eq!(limit_text(hours(26)), "26h");
        assert_eq!(limit_text(hours(48)), "2d");
        assert_eq!(limit_text(Duration::from_secs(90 * 60)), "1h 30m");
        assert_eq!(limit_text(Duration::from_millis(500)), "500ms");
    }
}
