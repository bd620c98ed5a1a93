//! `redlock metrics`: the locks under the prefix in the Prometheus text format (version 0.0.4),
//! for node_exporter's textfile collector or a scrape wrapper: every held lock, and every free
//! one that has a history, with HELP and TYPE lines and label values escaped. A lock whose read
//! its server refused for now (a Cluster slot stuck migrating) has only
//! `redlock_lock_unreadable` 1, and a warning; every other lock's series are there, with
//! `redlock_lock_unreadable` 0.

use std::fmt::Write as _;

use super::{Context, printable, write_stdout};
use crate::cli::MetricsArgs;
use crate::exit::Done;
use crate::keys::LockName;
use crate::lock::{HistoryEntry, Holder, LockState, Scope};
use crate::store::Listed;

/// The modes a lock can be held in: `redlock_lock_held` has one series for each, 0 or 1, so
/// that a lock's series stay the same whether it is held or not.
const MODES: [&str; 3] = ["exclusive", "shared", "semaphore"];

/// One metric: its name, its HELP text, and how to read its value from a lock (`None`: no
/// sample for that lock).
struct Metric {
    name: &'static str,
    help: &'static str,
    value: fn(&LockState) -> Option<String>,
}

/// Every metric but `redlock_lock_held` (one series per mode), in the order printed.
const METRICS: &[Metric] = &[
    Metric {
        name: "redlock_lock_holders",
        help: "Live holders of the lock whose job runs (a minimum hold is counted apart).",
        value: |state| Some(running_count(state).to_string()),
    },
    Metric {
        name: "redlock_lock_waiters",
        help: "Entries in the lock's queue (a waiter that died counts until its entry reaches the head).",
        value: |state| Some(state.queue_length.to_string()),
    },
    Metric {
        name: "redlock_lock_held_seconds",
        help: "How long the lock's oldest holder whose job runs has held it; 0 when none runs (free, or kept only for a minimum hold).",
        value: |state| {
            let since = running(state).map(|holder| holder.since).min();
            Some(seconds(
                since.map_or(0, |since| state.now.saturating_sub(since)),
            ))
        },
    },
    Metric {
        name: "redlock_lock_lease_remaining_seconds",
        help: "Lease left of the holder whose job runs and whose lease ends first; 0 when none runs.",
        value: |state| {
            let exp = running(state).map(|holder| holder.exp).min();
            Some(seconds(exp.map_or(0, |exp| exp.saturating_sub(state.now))))
        },
    },
    Metric {
        name: "redlock_lock_min_hold",
        help: "Holds whose job has ended, kept only for their minimum hold (run --min-hold): the lock stays taken, no job runs.",
        value: |state| Some(min_holds(state).count().to_string()),
    },
    Metric {
        name: "redlock_lock_min_hold_remaining_seconds",
        help: "How much longer a minimum hold keeps the lock taken (the one that ends last); 0 when none does.",
        value: |state| {
            let exp = min_holds(state).map(|holder| holder.exp).max();
            Some(seconds(exp.map_or(0, |exp| exp.saturating_sub(state.now))))
        },
    },
    Metric {
        name: "redlock_lock_fence",
        help: "The last fencing token issued for the lock.",
        value: |state| state.last_fence.map(|fence| fence.to_string()),
    },
    Metric {
        name: "redlock_lock_last_exit_status",
        help: "How the latest hold that is over ended: the command's exit status, 128+N for signal N, -1 when its holder reported none (expired, forced, released without one).",
        value: |state| state.last_run.as_ref().map(exit_status),
    },
    Metric {
        name: "redlock_lock_last_end_timestamp_seconds",
        help: "When the latest hold that is over ended (Unix time, the Redis server's clock; an expired hold ends when its lease did).",
        value: |state| {
            let last = state.last_run.as_ref()?;
            last.end(state.now).map(seconds)
        },
    },
    Metric {
        name: "redlock_lock_last_success_timestamp_seconds",
        help: "When the latest hold that ended with exit status 0 ended (Unix time, the Redis server's clock).",
        value: |state| {
            let last = state.last_success.as_ref()?;
            last.end(state.now).map(seconds)
        },
    },
    Metric {
        name: "redlock_lock_last_success_duration_seconds",
        help: "How long the latest hold that ended with exit status 0 lasted.",
        value: |state| {
            let last = state.last_success.as_ref()?;
            let end = last.end(state.now)?;
            Some(seconds(end.saturating_sub(last.since)))
        },
    },
];

pub(super) fn run(context: &Context, _args: &MetricsArgs) -> anyhow::Result<Done> {
    let Listed {
        mut locks,
        skipped,
        unreadable,
        ..
    } = context
        .store
        .list(&context.prefix, Scope::WithHistory, context.log)?;
    for (key, why) in &skipped {
        context.log.warn(format_args!(
            "skipping {}: it holds data redlock did not write ({why:#})",
            printable(key)
        ));
    }
    for (state, _) in &mut locks {
        super::warn_unreadable(context, &state.unreadable);
        // The latest hold that is over is often the latest success too: warned of once.
        let (name, now, mut left_out) = (&state.name, state.now, None);
        for last in [&mut state.last_run, &mut state.last_success] {
            let Some(fence) = last.as_ref().map(|entry| entry.fence) else {
                continue;
            };
            if left_out == Some(fence)
                || last
                    .as_ref()
                    .is_some_and(|entry| !super::check::believed(context, name, entry, now))
            {
                left_out = Some(fence);
                *last = None;
            }
        }
    }
    let states: Vec<&LockState> = locks.iter().map(|(state, _)| state).collect();
    super::warn_unread_locks(context, &unreadable, |name| {
        states.iter().any(|state| state.name == *name)
    });
    // Each unreadable lock once, unless (quorum mode) other masters' reads list it anyway.
    let mut unread: Vec<&LockName> = Vec::new();
    for (name, _) in &unreadable {
        if states.iter().all(|state| state.name != *name) && !unread.contains(&name) {
            unread.push(name);
        }
    }
    write_stdout(exposition(&states, &unread).trim_end())?;
    Ok(Done::Success)
}

/// The metrics of `states` in the text format: each metric's HELP and TYPE, then its samples;
/// first whether each lock, those of `states` and those in `unreadable`, could be read.
fn exposition(states: &[&LockState], unreadable: &[&LockName]) -> String {
    let mut text = String::new();
    header(
        &mut text,
        "redlock_lock_unreadable",
        "Whether the lock was found but its read refused for now (1: its other series are left out; a Cluster slot stuck migrating) or not (0).",
    );
    let mut read: Vec<(&str, u8)> = states
        .iter()
        .map(|state| (state.name.as_str(), 0))
        .chain(unreadable.iter().map(|name| (name.as_str(), 1)))
        .collect();
    read.sort_unstable();
    for (name, value) in read {
        let _ = writeln!(
            text,
            "redlock_lock_unreadable{{key=\"{}\"}} {value}",
            label_value(name)
        );
    }
    header(
        &mut text,
        "redlock_lock_held",
        "Whether a job holds the lock in this mode (1) or not (0); a minimum hold alone is 0 (see redlock_lock_min_hold).",
    );
    for state in states {
        let held_mode = running(state)
            .next()
            .filter(|_| running_count(state) > 0)
            .map(|holder| holder.mode.as_str());
        for mode in MODES {
            let _ = writeln!(
                text,
                "redlock_lock_held{{key=\"{}\",mode=\"{mode}\"}} {}",
                label_value(state.name.as_str()),
                u8::from(held_mode == Some(mode))
            );
        }
    }
    for metric in METRICS {
        header(&mut text, metric.name, metric.help);
        for state in states {
            if let Some(value) = (metric.value)(state) {
                let _ = writeln!(
                    text,
                    "{}{{key=\"{}\"}} {value}",
                    metric.name,
                    label_value(state.name.as_str())
                );
            }
        }
    }
    text
}

/// The listed holders whose job runs: not kept only for a minimum hold (`Holder::over`). A
/// min-hold is no running job: counted as one, a 5 s cron job with `--min-hold 3h` would trip
/// every "held too long" alert.
fn running(state: &LockState) -> impl Iterator<Item = &Holder> {
    state.holders.iter().filter(|holder| !holder.over)
}

/// The listed holders kept only for their minimum hold.
fn min_holds(state: &LockState) -> impl Iterator<Item = &Holder> {
    state.holders.iter().filter(|holder| holder.over)
}

/// Live holders whose job runs: all of them (listed or only counted, as a large semaphore's
/// are) but the minimum holds listed.
fn running_count(state: &LockState) -> usize {
    state.holder_count.saturating_sub(min_holds(state).count())
}

fn header(text: &mut String, name: &str, help: &str) {
    let _ = writeln!(text, "# HELP {name} {help}");
    let _ = writeln!(text, "# TYPE {name} gauge");
}

/// A label value as the text format writes it: backslash, double quote and line feed escaped.
/// The format has no escape for other characters, so one that text output escapes (a control
/// or bidirectional character: `crate::log::printable`) becomes the text that shows it there
/// (`\u{202e}`, its backslash escaped in turn), which promtool accepts.
fn label_value(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c if crate::log::is_escaped(c) => {
                escaped.push_str(&printable(&c.to_string()).replace('\\', "\\\\"));
            }
            c => escaped.push(c),
        }
    }
    escaped
}

/// Milliseconds (a duration, or a Unix time) as seconds, to the millisecond.
fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// The exit status a shell would report for a hold's command: its code, 128+N for signal N,
/// -1 when none was reported.
fn exit_status(entry: &HistoryEntry) -> String {
    match (entry.exit, entry.signal) {
        (Some(code), _) => code.to_string(),
        (None, Some(signal)) => (128 + signal).to_string(),
        (None, None) => "-1".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_escape_what_the_format_needs() {
        assert_eq!(label_value(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(label_value("one\ntwo"), "one\\ntwo");
        assert_eq!(label_value("日本 {x}"), "日本 {x}");
        assert_eq!(
            label_value("a\u{202e}b\u{200e}\u{9b}"),
            r"a\\u{202e}b\\u{200e}\\u{9b}"
        );
    }

    #[test]
    fn seconds_keep_milliseconds() {
        assert_eq!(seconds(0), "0.000");
        assert_eq!(seconds(1_795_316_531_042), "1795316531.042");
    }
}
