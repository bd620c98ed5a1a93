//! What the commands print: lines and JSON on stdout, tables fitted to the terminal, times,
//! and one line naming a holder.

use std::fmt::Display;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use super::Context;
use crate::duration;
use crate::exit::{Failure, fail};
use crate::keys::LockName;
use crate::lock::{Holder, Unreadable};
use crate::log::{cut_shown, printable, quoted, shown};

/// Writes `text` and a newline to stdout, each of its lines printable (whatever field data from
/// Redis came in, it cannot drive the terminal), reporting a closed pipe as an error (exit 74)
/// instead of panicking.
pub(super) fn print_line(text: impl Display) -> anyhow::Result<()> {
    let text = text.to_string();
    let lines: Vec<String> = text.split('\n').map(printable).collect();
    write_stdout(&lines.join("\n"))
}

/// Writes JSON text and a newline to stdout, with bidirectional overrides escaped (serde_json
/// escapes control characters, not those).
pub(super) fn print_json(json: &str) -> anyhow::Result<()> {
    write_stdout(&crate::log::json_text(json))
}

/// Whether redlock's caller closed stdout (`>&-`). std then opens /dev/null in its place,
/// where every write succeeds: without this, what a command prints would be lost with exit 0.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Records, once at start, whether stdout was closed (`Inherited::stdout_closed`).
pub(crate) fn note_stdout_closed(closed: bool) {
    STDOUT_CLOSED.store(closed, Ordering::Relaxed);
}

/// The error of writing to a stdout the caller closed.
pub(crate) const STDOUT_CLOSED_ERROR: &str =
    "writing to stdout: it is closed (the output was lost)";

/// Writes `text` and a newline to stdout as it is.
pub(super) fn write_stdout(text: &str) -> anyhow::Result<()> {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Err(fail(Failure::Output, STDOUT_CLOSED_ERROR));
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .map_err(|err| fail(Failure::Output, format!("writing to stdout: {err}")))
}

pub(super) fn elapsed(from_ms: u64, to_ms: u64) -> Duration {
    Duration::from_millis(to_ms.saturating_sub(from_ms))
}

/// A time as RFC 3339 (`2026-03-01T09:30:00Z`), or [`PAST_YEAR_9999`] for one that RFC 3339
/// cannot write: only a record someone else wrote holds one, and it is no reason to fail.
pub(super) fn rfc3339(unix_ms: u64) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    UNIX_EPOCH
        .checked_add(Duration::from_millis(unix_ms))
        .and_then(|at| write!(text, "{}", humantime::format_rfc3339_seconds(at)).ok())
        .map_or_else(|| PAST_YEAR_9999.to_owned(), |()| text)
}

/// How a time past what RFC 3339 can write is shown (the `_ms` fields of JSON keep it).
pub(super) const PAST_YEAR_9999: &str = "after year 9999";

/// The width tables are fitted to (0: not fitted), set by [`fit_tables_to_terminal`].
pub(super) static FIT_WIDTH: AtomicUsize = AtomicUsize::new(0);

/// Columns cut to fit a terminal, widest first; the others are short by nature.
pub(super) const CUTTABLE: [&str; 2] = ["COMMAND", "NOTE"];

/// The narrowest a cut column gets: enough to recognise a command.
pub(super) const MIN_CUT_WIDTH: usize = 12;

/// Tables printed from now on fit the terminal on stdout, unless `wide` (--wide) or stdout is
/// not a terminal: a pipe or a file always gets every character.
pub(super) fn fit_tables_to_terminal(wide: bool) {
    if !wide && let Some(width) = crate::log::stdout_terminal_width() {
        FIT_WIDTH.store(width, Ordering::Relaxed);
    }
}

/// Narrows the COMMAND and NOTE columns (the widest first, none below [`MIN_CUT_WIDTH`]) until
/// the rows fit `width`, cutting their cells with an ellipsis. `rows[0]` is the header.
pub(super) fn fit_columns(rows: &mut [Vec<String>], widths: &mut [usize], width: usize) {
    let cuttable: Vec<usize> = rows.first().map_or_else(Vec::new, |header| {
        header
            .iter()
            .enumerate()
            .filter(|(_, name)| CUTTABLE.contains(&name.as_str()))
            .map(|(column, _)| column)
            .collect()
    });
    let total =
        |widths: &[usize]| widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
    // One column at a time, one character at a time: bounded by the columns' total width.
    let mut steps = widths.iter().sum::<usize>();
    while steps > 0 && total(widths) > width {
        steps -= 1;
        let Some(&widest) = cuttable
            .iter()
            .filter(|&&column| widths[column] > MIN_CUT_WIDTH)
            .max_by_key(|&&column| widths[column])
        else {
            break;
        };
        widths[widest] -= 1;
    }
    for &column in &cuttable {
        for row in rows.iter_mut().skip(1) {
            if let Some(cell) = row.get_mut(column) {
                *cell = cut_to(cell, widths[column]);
            }
        }
    }
}

/// The width output is fitted to, when it is (see [`fit_tables_to_terminal`]).
pub(super) fn fit_width() -> Option<usize> {
    Some(FIT_WIDTH.load(Ordering::Relaxed)).filter(|width| *width > 0)
}

/// `text` in at most `width` characters (at least 1), its end replaced by an ellipsis if cut.
pub(super) fn cut_to(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width.max(1) - 1).collect();
    cut.push('…');
    cut
}

/// One line naming a holder, for busy notices and force-release audits.
pub(super) fn describe(holder: &Holder, now: u64) -> String {
    let note = match &holder.who.note {
        Some(note) => format!(" note {}", quoted(&shown(note))),
        None => String::new(),
    };
    format!(
        "{} pid {} user {} command {}{note} fence {}, held for {}, expires in {}",
        shown(&holder.who.host),
        holder.who.pid,
        shown(&holder.who.user),
        quoted(&shown(&holder.who.command)),
        holder.fence,
        duration::display(elapsed(holder.since, now)),
        duration::display(elapsed(now, holder.exp)),
    )
}

/// Warns, once per record, of records left out because they cannot be read: the data is
/// someone else's doing, never a reason to fail.
pub(super) fn warn_unreadable(context: &Context, unreadable: &[Unreadable]) {
    for record in unreadable {
        context.log.warn(format_args!(
            "skipping {} in {} that redlock cannot read ({})",
            record.what,
            shown(&record.key),
            shown(&record.why)
        ));
    }
}

/// Warns of each lock a listing found but could not read (`Listed::unreadable`): its slot
/// refused the read for now, and the other locks are shown; in quorum mode, a lock `listed`
/// from other masters' reads is shown as they have it, and the warning says so.
pub(super) fn warn_unread_locks(
    context: &Context,
    unreadable: &[(LockName, anyhow::Error)],
    listed: impl Fn(&LockName) -> bool,
) {
    for (name, why) in unreadable {
        if listed(name) {
            // Quorum mode: other masters read it, and it is shown as they have it.
            context.log.warn(format_args!(
                "lock {} could not be read on one master, and is shown as the others have it ({why:#})",
                printable(name.as_str())
            ));
        } else {
            context.log.warn(format_args!(
                "lock {} could not be read, and is shown as unreadable ({why:#})",
                printable(name.as_str())
            ));
        }
    }
}

/// Whether tables are narrowed to the columns an operator reads first: on a terminal, unless
/// `--wide` (see [`fit_tables_to_terminal`]). kubectl and `docker ps` do the same.
pub(super) fn narrow() -> bool {
    fit_width().is_some()
}

/// The fewest characters of a narrow table's last column worth showing; with less room it is
/// left out.
const MIN_LAST_WIDTH: usize = 8;

/// A narrow table (`rows[0]` the header): its last column, the command, takes what the others
/// leave of the terminal's width, cut with an ellipsis, or is left out when that is less than
/// [`MIN_LAST_WIDTH`].
pub(super) fn narrow_table(mut rows: Vec<Vec<String>>) -> String {
    if let Some(width) = fit_width() {
        let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
        let widest = |column: usize| {
            rows.iter()
                .filter_map(|row| row.get(column))
                .map(|cell| cut_shown(cell).chars().count())
                .max()
                .unwrap_or(0)
        };
        let others: usize = (0..columns.saturating_sub(1)).map(|c| widest(c) + 2).sum();
        let room = width.saturating_sub(others);
        if columns > 1 && room < MIN_LAST_WIDTH.min(widest(columns - 1)) {
            for row in &mut rows {
                row.truncate(columns - 1);
            }
        } else if columns > 0 {
            for row in &mut rows {
                if let Some(cell) = row.get_mut(columns - 1) {
                    *cell = cut_to(&cut_shown(cell), room);
                }
            }
        }
    }
    table(&rows)
}

/// A holder or waiter as a narrow table names it: `host:pid`, with the host's first label
/// (`web1` of `web1.example.com`) unless it is an IP address.
pub(super) fn host_and_pid(host: &str, pid: u32) -> String {
    let host = shown(host);
    let short = if host.parse::<std::net::IpAddr>().is_ok() {
        host.as_str()
    } else {
        host.split('.').next().unwrap_or_default()
    };
    format!("{short}:{pid}")
}

/// `head` then `body`, for a terminal tables are fitted to: the body's words wrapped at its
/// width, the lines after the first indented by `indent` spaces. On one line anywhere else.
/// A word longer than a line stays whole.
pub(super) fn wrapped(head: &str, body: &str, indent: usize) -> String {
    let Some(width) = fit_width() else {
        return format!("{head}{body}");
    };
    let mut out = head.to_owned();
    let mut taken = head.chars().count();
    let mut first = true;
    for word in body.split_whitespace() {
        let length = word.chars().count();
        if !first && taken + 1 + length > width {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', indent));
            taken = indent;
        } else if !first {
            out.push(' ');
            taken += 1;
        }
        out.push_str(word);
        taken += length;
        first = false;
    }
    out
}

/// Formats rows as left-aligned columns two spaces apart; a cell longer than
/// [`crate::log::MAX_SHOWN`] characters is cut.
pub(super) fn table(rows: &[Vec<String>]) -> String {
    let mut rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| cut_shown(cell)).collect())
        .collect();
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|row| row.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let fit = FIT_WIDTH.load(Ordering::Relaxed);
    if fit > 0 {
        fit_columns(&mut rows, &mut widths, fit);
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if c + 1 < row.len() {
                // Padded by hand: a formatting width past 65,535 panics.
                let pad = widths[c] - cell.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::{PAST_YEAR_9999, rfc3339};

    #[test]
    fn a_time_rfc3339_cannot_write_is_said_to_be_past_it() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(253_402_300_799_999), "9999-12-31T23:59:59Z");
        for unshown in [253_402_300_800_000, i64::MAX as u64, u64::MAX] {
            assert_eq!(rfc3339(unshown), PAST_YEAR_9999, "{unshown}");
        }
    }
}
