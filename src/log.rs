//! redlock's own messages on stderr: `redlock: ` lines, or with `--log-format json` one JSON
//! object per line (docs/reference.md, "Machine-readable output": `time`, `level`, `message`, `key`,
//! `pid`, and `exit` on the last line of a failed run). Notices (busy, lost, signal notes,
//! warnings) are silenced by `-q`; step-by-step logs appear only with `-v`.
//!
//! Each line goes out in one `write`, so that lines from parallel jobs sharing one CI log do
//! not interleave; a closed stderr is no reason to stop, least of all to panic while holding a
//! lock (`eprintln!` would), so a line that cannot be written is dropped. Text that came from
//! Redis or from another user (lock names, holders' commands) passes through [`printable`]
//! first, so that it cannot drive the reader's terminal.

use std::fmt::Display;
use std::io::Write as _;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::sync::OnceLock;

/// How lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// The format for the whole process, set once by the command line.
static FORMAT: OnceLock<Format> = OnceLock::new();
/// The lock this process works on, once known: a field of every JSON line.
static KEY: OnceLock<String> = OnceLock::new();

/// Sets the format of every line from now on.
pub(crate) fn set_format(format: Format) {
    let _ = FORMAT.set(format);
}

/// Names the lock in every JSON line from now on.
pub(crate) fn set_key(key: &str) {
    let _ = KEY.set(key.to_owned());
}

/// Whether lines are JSON (then nothing is redrawn in place).
pub(crate) fn json() -> bool {
    FORMAT.get() == Some(&Format::Json)
}

/// The level of a line.
#[derive(Debug, Clone, Copy)]
enum Level {
    Info,
    Notice,
    Warning,
    Error,
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Log {
    pub(crate) quiet: bool,
    pub(crate) verbose: bool,
}

impl Log {
    /// Something the user should know about; silenced by `-q`.
    pub(crate) fn notice(&self, message: impl Display) {
        if !self.quiet {
            line(message);
        }
    }

    /// A warning; silenced by `-q`.
    pub(crate) fn warn(&self, message: impl Display) {
        if !self.quiet {
            warning(message);
        }
    }

    /// One step, shown with `-v`.
    pub(crate) fn step(&self, message: impl Display) {
        if self.verbose {
            emit(Level::Info, &message.to_string(), None);
        }
    }
}

/// Writes one notice to stderr, in one write.
pub(crate) fn line(message: impl Display) {
    emit(Level::Notice, &message.to_string(), None);
}

/// Writes one warning to stderr (`warning: ` in text).
pub(crate) fn warning(message: impl Display) {
    emit(Level::Warning, &message.to_string(), None);
}

/// Writes the error that ends the run, with the exit status it ends with.
pub(crate) fn error(message: impl Display, exit: u8) {
    emit(Level::Error, &message.to_string(), Some(exit));
}

/// Writes the notice of an expected outcome that ends the run (busy, not held, free), with
/// the exit status it ends with: a line like an error's in text, a `notice` in JSON, so that
/// log shippers do not raise an error for a cron host that skipped as it should.
pub(crate) fn outcome(message: impl Display, exit: u8) {
    emit(Level::Notice, &message.to_string(), Some(exit));
}

fn emit(level: Level, message: &str, exit: Option<u8>) {
    let line = if json() {
        let mut record = serde_json::json!({
            "time": humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            "level": match level {
                Level::Info => "info",
                Level::Notice => "notice",
                Level::Warning => "warning",
                Level::Error => "error",
            },
            "message": message,
            "pid": std::process::id(),
        });
        if let Some(key) = KEY.get() {
            record["key"] = serde_json::Value::from(key.as_str());
        }
        if let Some(exit) = exit {
            record["exit"] = serde_json::Value::from(exit);
        }
        format!("{}\n", json_text(&record.to_string()))
    } else if let Level::Warning = level {
        format!("redlock: warning: {}\n", printable(message))
    } else {
        format!("redlock: {}\n", printable(message))
    };
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Replaces the line the cursor is on (a terminal's status line) with `text`, in one write;
/// an empty `text` clears it.
pub(crate) fn redraw(text: &str) {
    let line = if text.is_empty() {
        "\r\x1b[K".to_owned()
    } else {
        format!("\r\x1b[Kredlock: {}", printable(text))
    };
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// The width of the terminal on stderr, if stderr is one.
pub(crate) fn terminal_width() -> Option<usize> {
    columns_of(std::io::stderr().as_fd())
}

/// The width of the terminal on stdout, if stdout is one (tables fit it).
pub(crate) fn stdout_terminal_width() -> Option<usize> {
    columns_of(std::io::stdout().as_fd())
}

/// The width of the terminal on stdout, stderr or stdin, the first that is one: what help is
/// wrapped to. (clap asks too, but takes nothing from a terminal that reports no rows, as
/// `script` and some consoles do, and then wraps at 100 whatever the width.)
pub(crate) fn any_terminal_width() -> Option<usize> {
    [
        std::io::stdout().as_fd(),
        std::io::stderr().as_fd(),
        std::io::stdin().as_fd(),
    ]
    .into_iter()
    .find_map(columns_of)
}

/// The columns of the terminal on `fd`, if it is one that knows its width (the one place
/// redlock asks a terminal its size; anything else, a pipe or a file, fails TIOCGWINSZ). Asked
/// through rustix, already linked for clap's terminal_size: its own `terminal_size` would
/// refuse a terminal that reports no rows, which redlock still wants the width of.
fn columns_of(fd: BorrowedFd<'_>) -> Option<usize> {
    let size = rustix::termios::tcgetwinsize(fd).ok()?;
    (size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// Whether `c` sets, overrides or isolates the direction of the text around it (Unicode's
/// Bidi_Control: U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069): shown raw, it makes a
/// terminal display text in another order than it is (a command that reads as harmless, say).
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// Whether redlock writes `c` escaped wherever it writes text from elsewhere: a control
/// character (C0, DEL, and C1, whose U+009B is CSI, ESC [ in one character) or a
/// bidirectional control.
pub(crate) fn is_escaped(c: char) -> bool {
    c.is_control() || is_bidi_control(c)
}

/// `text` with control characters (ESC, CR, BEL, CSI, ...) and bidirectional controls replaced
/// by escapes (`\u{1b}`, `\r`, `\u{9b}`, `\u{202e}`), so that data read from Redis or a
/// server cannot drive the terminal nor disguise itself. Every line redlock writes as text
/// passes through it (print_line, the lines on stderr); the fields read from Redis pass
/// through it first too, so that their quoting and cutting count what is shown. Escaping
/// twice changes nothing. JSON ([`json_text`]) and metrics escape the same characters.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else if is_bidi_control(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// JSON text with the characters [`printable`] escapes written as JSON escapes (`\u009b`,
/// `\u202e`): still the same JSON, but inert on a terminal. serde_json escapes C0 controls
/// itself; the others (DEL, C1, the bidirectional controls) can only stand in strings, where
/// an escape means the same character, and never as the JSON's own line breaks.
pub(crate) fn json_text(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if is_escaped(c) && !c.is_ascii_whitespace() {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Longest text shown for one field, in characters. What redlock writes fits (hosts, users and
/// commands are cut at 256 bytes when written, notes refused past 500); anything longer was
/// written by someone else, and is cut rather than drown the output (or overflow a column).
pub(crate) const MAX_SHOWN: usize = 512;

/// `text` cut to [`MAX_SHOWN`] characters, with an ellipsis where it was cut.
pub(crate) fn cut_shown(text: &str) -> String {
    match text.char_indices().nth(MAX_SHOWN) {
        None => text.to_owned(),
        Some(_) => {
            let mut cut: String = text.chars().take(MAX_SHOWN - 1).collect();
            cut.push('…');
            cut
        }
    }
}

/// A field read from Redis (host, user, command, note), as text output shows it: printable,
/// and cut to [`MAX_SHOWN`] characters.
pub(crate) fn shown(text: &str) -> String {
    cut_shown(&printable(text))
}

/// `text`, printable, in quotes that do not nest: single quotes, or double quotes (with `"`
/// escaped) when it contains a single quote, as a command like `sh -c 'make'` does.
pub(crate) fn quoted(text: &str) -> String {
    let text = printable(text);
    if text.contains('\'') {
        format!("\"{}\"", text.replace('"', "\\\""))
    } else {
        format!("'{text}'")
    }
}

#[cfg(test)]
mod tests {
    use super::{json_text, printable, quoted};

    #[test]
    fn quotes_do_not_nest() {
        assert_eq!(quoted("make deploy"), "'make deploy'");
        assert_eq!(quoted("sh -c 'make'"), r#""sh -c 'make'""#);
        assert_eq!(quoted(r#"it's "x""#), r#""it's \"x\"""#);
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("a\u{1b}[2Jb\r\n"), "a\\u{1b}[2Jb\\r\\n");
        assert_eq!(printable("deploy ünïcode"), "deploy ünïcode");
    }

    #[test]
    fn bidirectional_overrides_are_escaped_once() {
        let text = "ls \u{202e}txt.exe\u{2066}x\u{2069}\u{7}";
        let shown = printable(text);
        assert_eq!(shown, "ls \\u{202e}txt.exe\\u{2066}x\\u{2069}\\u{7}");
        assert_eq!(printable(&shown), shown);
        let json = serde_json::to_string(text).unwrap();
        let escaped = json_text(&json);
        assert_eq!(escaped, r#""ls \u202etxt.exe\u2066x\u2069\u0007""#);
        assert_eq!(serde_json::from_str::<String>(&escaped).unwrap(), text);
    }

    #[test]
    fn c1_controls_and_direction_marks_are_escaped_in_text_and_json() {
        let text = "a\u{9b}2J\u{85}\u{7f}\u{61c}\u{200e}\u{200f}b";
        assert_eq!(
            printable(text),
            "a\\u{9b}2J\\u{85}\\u{7f}\\u{61c}\\u{200e}\\u{200f}b"
        );
        let pretty = serde_json::to_string_pretty(&serde_json::json!({ "k": text })).unwrap();
        let escaped = json_text(&pretty);
        assert_eq!(
            escaped,
            "{\n  \"k\": \"a\\u009b2J\\u0085\\u007f\\u061c\\u200e\\u200fb\"\n}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&escaped).unwrap()["k"],
            text
        );
    }
}
