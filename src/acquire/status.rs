//! Where a wait stands, on stderr: one line redrawn in place on a terminal, or a line now and
//! then in a log (CI). Fed by the queue's state machine with what Redis last said.

use std::io::IsTerminal as _;
use std::time::Duration;

use crate::clock::BootInstant;
use crate::duration;
use crate::lock::Holder;
use crate::log::{Log, printable, shown};

/// Where a waiter stands, as last reported by Redis.
#[derive(Debug, Clone)]
pub(super) struct Place {
    pub(super) holder: Option<Holder>,
    /// Server time of the report (Unix ms).
    pub(super) now: u64,
    pub(super) position: usize,
    pub(super) length: usize,
    pub(super) received: BootInstant,
}

/// Where the wait stands, on stderr: on a terminal one line redrawn in place (fitted to the
/// terminal's width), otherwise (a CI log) a line when waiting starts and one every
/// `progress_every`, with current figures. Silenced by `-q`.
pub(super) struct Status<'a> {
    key: &'a str,
    log: Log,
    terminal: bool,
    started: BootInstant,
    deadline: Option<BootInstant>,
    progress_every: Option<Duration>,
    place: Option<Place>,
    drawn_at: Option<BootInstant>,
}

impl<'a> Status<'a> {
    pub(super) fn new(
        key: &'a str,
        log: Log,
        deadline: Option<BootInstant>,
        progress_every: Option<Duration>,
    ) -> Self {
        Self {
            key,
            log,
            terminal: !log.quiet && !crate::log::json() && std::io::stderr().is_terminal(),
            started: BootInstant::now(),
            deadline,
            progress_every,
            place: None,
            drawn_at: None,
        }
    }

    fn line(&self) -> String {
        let key = printable(self.key);
        let now = BootInstant::now();
        let waited = match self.deadline {
            Some(deadline) => format!(
                "waited {}, {} left",
                duration::display(now.since(self.started)),
                duration::display(deadline.since(now))
            ),
            None => format!("waited {}", duration::display(now.since(self.started))),
        };
        let Some(place) = &self.place else {
            return format!("waiting for lock '{key}'; {waited}");
        };
        let holder = match &place.holder {
            Some(holder) => {
                // As of now: the server's time of the report, plus the time since.
                let held = Duration::from_millis(place.now.saturating_sub(holder.since))
                    + now.since(place.received);
                let note = match &holder.who.note {
                    Some(note) => format!("; {}", shown(note)),
                    None => String::new(),
                };
                format!(
                    "held by {} pid {} ({}{note}) for {}",
                    shown(&holder.who.host),
                    holder.who.pid,
                    shown(&holder.who.command),
                    duration::display(held)
                )
            }
            None => "being handed over".to_owned(),
        };
        format!(
            "waiting for lock '{key}': {holder}; position {} of {}; {waited}",
            place.position, place.length
        )
    }

    /// A refresh's news: the same wait, another place in the queue.
    pub(super) fn moved(&mut self, position: usize, length: usize) {
        if let Some(place) = &mut self.place {
            place.position = position;
            place.length = length;
        }
    }

    pub(super) fn update(&mut self, place: Place) {
        let first = self.place.is_none();
        self.place = Some(place);
        if self.terminal || first {
            self.draw();
        }
    }

    /// When the terminal's line is next redrawn (every second), or the next progress line is
    /// due; `None` when nothing is shown.
    pub(super) fn redraw_at(&self) -> Option<BootInstant> {
        let every = if self.terminal {
            Some(Duration::from_secs(1))
        } else {
            self.progress_every
        };
        Some(self.drawn_at? + every?)
    }

    pub(super) fn redraw_if_due(&mut self) {
        if self.redraw_at().is_some_and(|at| BootInstant::now() >= at) {
            self.draw();
        }
    }

    fn draw(&mut self) {
        if self.terminal {
            let line = self.line();
            // One column short: a line as wide as the terminal wraps on some terminals.
            let fitted = match crate::log::terminal_width() {
                Some(width) if line.chars().count() + "redlock: ".len() >= width => {
                    let keep = width.saturating_sub("redlock: ".len() + 2);
                    format!("{}…", line.chars().take(keep).collect::<String>())
                }
                _ => line,
            };
            crate::log::redraw(&fitted);
        } else {
            self.log.notice(self.line());
        }
        self.drawn_at = Some(BootInstant::now());
    }

    pub(super) fn clear(&mut self) {
        if self.terminal && self.drawn_at.take().is_some() {
            crate::log::redraw("");
        }
    }

    pub(super) fn acquired(&mut self) {
        if self.place.is_none() {
            return;
        }
        self.clear();
        self.log.notice(format_args!(
            "acquired lock '{}' after waiting {}",
            printable(self.key),
            duration::display(BootInstant::now().since(self.started))
        ));
    }
}
