//! redlock's own messages on stderr, always prefixed `redlock: `. Notices (busy, lost, signal
//! notes, warnings) are silenced by `-q`; step-by-step logs appear only with `-v`.

use std::fmt::Display;
use std::io::Write as _;

#[derive(Debug, Clone, Copy, Default)]
pub struct Log {
    pub quiet: bool,
    pub verbose: bool,
}

impl Log {
    /// Something the user should know about; silenced by `-q`.
    pub fn notice(&self, message: impl Display) {
        if !self.quiet {
            line(message);
        }
    }

    /// A warning; silenced by `-q`.
    pub fn warn(&self, message: impl Display) {
        if !self.quiet {
            line(format_args!("warning: {message}"));
        }
    }

    /// One step, shown with `-v`.
    pub fn step(&self, message: impl Display) {
        if self.verbose {
            line(message);
        }
    }
}

/// Writes one `redlock: ` line to stderr. A closed stderr is no reason to stop, least of all
/// to panic while holding a lock (`eprintln!` would): the line is dropped.
pub fn line(message: impl Display) {
    let _ = writeln!(std::io::stderr(), "redlock: {message}");
}
