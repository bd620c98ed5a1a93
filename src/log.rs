//! redlock's own messages on stderr, always prefixed `redlock: `. Notices (busy, lost, signal
//! notes, warnings) are silenced by `-q`; step-by-step logs appear only with `-v`.

use std::fmt::Display;

#[derive(Debug, Clone, Copy, Default)]
pub struct Log {
    pub quiet: bool,
    pub verbose: bool,
}

impl Log {
    /// Something the user should know about; silenced by `-q`.
    pub fn notice(&self, message: impl Display) {
        if !self.quiet {
            eprintln!("redlock: {message}");
        }
    }

    /// A warning; silenced by `-q`.
    pub fn warn(&self, message: impl Display) {
        if !self.quiet {
            eprintln!("redlock: warning: {message}");
        }
    }

    /// One step, shown with `-v`.
    pub fn step(&self, message: impl Display) {
        if self.verbose {
            eprintln!("redlock: {message}");
        }
    }
}
