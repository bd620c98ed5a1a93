//! Where a wait stands, on stderr: one line redrawn in place on a terminal, or a line now and
//! then in a log (CI). Fed by the store's acquisition (the queue's state machine, a quorum's
//! rounds) with what Redis last said.

use std::io::IsTerminal as _;
use std::time::Duration;

use crate::clock::BootInstant;
use crate::duration;
use crate::lock::Holder;
use crate::log::{Log, printable, shown};

/// Where a waiter stands, as last reported by Redis.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    pub(crate) holder: Option<Holder>,
    /// Server time of the report (Unix ms).
    pub(crate) now: u64,
    /// The place in the queue and its length; a length of 0: no queue (quorum mode).
    pub(crate) position: usize,
    pub(crate) length: usize,
    pub(crate) received: BootInstant,
}

/// Where the wait stands, on stderr: on a terminal one line redrawn in place (fitted to the
/// terminal's width), otherwise (a CI log) a line when waiting starts and one every
/// `progress_every`, with current figures. Silenced by `-q`.
pub(crate) struct Status<'a> {
    key: &'a str,
    log: Log,
    terminal: bool,
    started: BootInstant,
    deadline: Option<BootInstant>,
    progress_every: Option<Duration>,
    place: Option<Place>,
    drawn_at: Option<BootInstant>,
    /// Redis has not answered since then, and the last error said why.
    unreachable: Option<(BootInstant, String)>,
}

impl<'a> Status<'a> {
    pub(crate) fn new(
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
            unreachable: None,
        }
    }

    /// A request failed for want of Redis (`why`). The warning of the first failure is the
    /// first line; from then on each line says for how long Redis has been unreachable, and
    /// how much longer the wait tries.
    pub(crate) fn unreachable(&mut self, why: String) {
        let now = BootInstant::now();
        let since = self.unreachable.take().map_or(now, |(since, _)| since);
        self.unreachable = Some((since, why));
        self.drawn_at.get_or_insert(now);
    }

    /// Redis answered again.
    pub(crate) fn reachable(&mut self) {
        self.unreachable = None;
    }

    /// The line while Redis cannot be reached.
    fn unreachable_line(&self, since: BootInstant, why: &str) -> String {
        let now = BootInstant::now();
        format!(
            "waiting for lock '{}': Redis unreachable for {} ({}); {}",
            printable(self.key),
            duration::display(now.since(since)),
            printable(why),
            self.trying(now)
        )
    }

    /// The line as a log shows it: every figure whole.
    fn line(&self) -> String {
        if let Some((since, why)) = &self.unreachable {
            return self.unreachable_line(*since, why);
        }
        let pieces = self.pieces();
        let key = &pieces.key;
        let waited = match &pieces.left {
            Some(left) => format!("waited {}, {left} left", pieces.waited),
            None => format!("waited {}", pieces.waited),
        };
        match (&pieces.holder, &pieces.place) {
            (Some(holder), Some(place)) => format!(
                "waiting for lock '{key}': {}; {place}; {waited}",
                holder.describe(false)
            ),
            // (No queue: quorum mode.)
            (Some(holder), None) => format!(
                "waiting for lock '{key}': {}; {waited}",
                holder.describe(false)
            ),
            _ => format!("waiting for lock '{key}'; {waited}"),
        }
    }

    /// The line a terminal shows, in at most `width` characters: what must stay first (the
    /// lock, the place in the queue, the time left), then who holds it and for how long, the
    /// holder's command and note last, and the end cut to fit. (The log's order, cut at 80
    /// columns, lost the place and the time left: `...; po…`.)
    fn fitted_line(&self, width: usize) -> String {
        let line = match &self.unreachable {
            Some((since, why)) => {
                let now = BootInstant::now();
                format!(
                    "waiting for lock '{}' (Redis unreachable for {}, {}): {}",
                    printable(self.key),
                    duration::display(now.since(*since)),
                    self.trying(now),
                    printable(why)
                )
            }
            None => {
                let pieces = self.pieces();
                // ("place": the short word, where columns are few.)
                let mut figures: Vec<String> = pieces
                    .place
                    .iter()
                    .map(|place| place.replacen("position", "place", 1))
                    .collect();
                figures.push(match &pieces.left {
                    Some(left) => format!("{left} left"),
                    None => format!("waited {}", pieces.waited),
                });
                let head = format!("waiting for lock '{}' ({})", pieces.key, figures.join(", "));
                match &pieces.holder {
                    Some(holder) => format!("{head}: {}", holder.describe(true)),
                    None => head,
                }
            }
        };
        cut(&line, width)
    }

    /// How much longer the wait tries.
    fn trying(&self, now: BootInstant) -> String {
        match self.deadline {
            Some(deadline) => format!("trying for {} more", duration::display(deadline.since(now))),
            None => "trying until it answers (--wait forever)".to_owned(),
        }
    }

    fn pieces(&self) -> Pieces {
        let now = BootInstant::now();
        let holder = self.place.as_ref().map(|place| match &place.holder {
            Some(holder) => {
                // As of now: the server's time of the report, plus the time since.
                let held = Duration::from_millis(place.now.saturating_sub(holder.since))
                    + now.since(place.received);
                let mut command = shown(&holder.who.command);
                if let Some(note) = &holder.who.note {
                    command.push_str(&format!("; {}", shown(note)));
                }
                Who::Holder {
                    host: shown(&holder.who.host),
                    pid: holder.who.pid,
                    command,
                    held: duration::display(held),
                }
            }
            None => Who::HandedOver,
        });
        Pieces {
            key: printable(self.key),
            holder,
            place: self
                .place
                .as_ref()
                .filter(|place| place.length > 0)
                .map(|place| format!("position {} of {}", place.position, place.length)),
            waited: duration::display(now.since(self.started)),
            left: self
                .deadline
                .map(|deadline| duration::display(deadline.since(now))),
        }
    }

    /// A refresh's news: the same wait, another place in the queue.
    pub(crate) fn moved(&mut self, position: usize, length: usize) {
        self.unreachable = None;
        if let Some(place) = &mut self.place {
            place.position = position;
            place.length = length;
        }
    }

    pub(crate) fn update(&mut self, place: Place) {
        self.unreachable = None;
        let first = self.place.is_none();
        self.place = Some(place);
        if self.terminal || first {
            self.draw();
        }
    }

    /// When the terminal's line is next redrawn (every second), or the next progress line is
    /// due; `None` when nothing is shown.
    pub(crate) fn redraw_at(&self) -> Option<BootInstant> {
        let every = if self.terminal {
            Some(Duration::from_secs(1))
        } else {
            self.progress_every
        };
        Some(self.drawn_at? + every?)
    }

    pub(crate) fn redraw_if_due(&mut self) {
        if self.redraw_at().is_some_and(|at| BootInstant::now() >= at) {
            self.draw();
        }
    }

    fn draw(&mut self) {
        if self.terminal {
            // One column short: a line as wide as the terminal wraps on some terminals.
            let fitted = match crate::log::terminal_width() {
                Some(width) => self.fitted_line(width.saturating_sub("redlock: ".len() + 1)),
                None => self.line(),
            };
            crate::log::redraw(&fitted);
        } else {
            self.log.notice(self.line());
        }
        self.drawn_at = Some(BootInstant::now());
    }

    pub(crate) fn clear(&mut self) {
        if self.terminal && self.drawn_at.take().is_some() {
            crate::log::redraw("");
        }
    }

    pub(crate) fn acquired(&mut self) {
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

/// The figures of a status line, as text.
struct Pieces {
    key: String,
    /// `None` before Redis first answered.
    holder: Option<Who>,
    place: Option<String>,
    waited: String,
    left: Option<String>,
}

/// Who has the lock, as a status line names it.
enum Who {
    Holder {
        host: String,
        pid: u32,
        /// The command, and the note after a `; `.
        command: String,
        held: String,
    },
    /// Handed to the waiter before this one, which has not taken it up yet.
    HandedOver,
}

impl Who {
    /// `held by HOST pid PID (COMMAND) for HELD`; with `command_last`, the command after the
    /// time held (a terminal's line is cut from its end).
    fn describe(&self, command_last: bool) -> String {
        match self {
            Who::Holder {
                host,
                pid,
                command,
                held,
            } if command_last => format!("held by {host} pid {pid} for {held} ({command})"),
            Who::Holder {
                host,
                pid,
                command,
                held,
            } => format!("held by {host} pid {pid} ({command}) for {held}"),
            Who::HandedOver => "being handed over".to_owned(),
        }
    }
}

/// `text` in at most `width` characters, an ellipsis where it was cut.
fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}
