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
    /// Redis has not answered since then, and the last error said why.
    unreachable: Option<(BootInstant, String)>,
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
            unreachable: None,
        }
    }

    /// A request failed for want of Redis (`why`). The warning of the first failure is the
    /// first line; from then on each line says for how long Redis has been unreachable, and
    /// how much longer the wait tries.
    pub(super) fn unreachable(&mut self, why: String) {
        let now = BootInstant::now();
        let since = self.unreachable.take().map_or(now, |(since, _)| since);
        self.unreachable = Some((since, why));
        self.drawn_at.get_or_insert(now);
    }

    /// Redis answered again.
    pub(super) fn reachable(&mut self) {
        self.unreachable = None;
    }

    /// The line while Redis cannot be reached.
    fn unreachable_line(&self, since: BootInstant, why: &str) -> String {
        let now = BootInstant::now();
        let trying = match self.deadline {
            Some(deadline) => format!("trying for {} more", duration::display(deadline.since(now))),
            None => "trying until it answers (--wait forever)".to_owned(),
        };
        format!(
            "waiting for lock '{}': Redis unreachable for {} ({}); {trying}",
            printable(self.key),
            duration::display(now.since(since)),
            printable(why)
        )
    }

    /// The line as a log shows it: every figure whole.
    fn line(&self) -> String {
        if let Some((since, why)) = &self.unreachable {
            return self.unreachable_line(*since, why);
        }
        self.pieces().compose(Shown::All)
    }

    /// The line in at most `width` characters: the lock, the place in the queue and the time
    /// left stay; the holder's command and note go first, then the time waited, then the
    /// holder's pid.
    fn fitted_line(&self, width: usize) -> String {
        if let Some((since, why)) = &self.unreachable {
            // The error gives way first, then the beginning.
            let line = self.unreachable_line(*since, why);
            let over = line.chars().count().saturating_sub(width);
            let why = cut(why, why.chars().count().saturating_sub(over).max(1));
            let line = self.unreachable_line(*since, &why);
            let skip = line.chars().count().saturating_sub(width);
            return match skip {
                0 => line,
                _ => format!("…{}", line.chars().skip(skip + 1).collect::<String>()),
            };
        }
        let pieces = self.pieces();
        let fits = |line: &String| line.chars().count() <= width;
        let full = pieces.compose(Shown::All);
        if fits(&full) {
            return full;
        }
        // The command and note, cut to what the rest leaves.
        let bare = pieces.compose(Shown::Command(0));
        let room = width.saturating_sub(bare.chars().count() + " ()".len());
        if let Some(line) = Some(pieces.compose(Shown::Command(room)))
            .filter(|_| room >= 4)
            .filter(fits)
        {
            return line;
        }
        for shown in [
            Shown::NoCommand,
            Shown::NoWaited,
            Shown::HostOnly,
            Shown::PlaceOnly,
        ] {
            let line = pieces.compose(shown);
            if fits(&line) {
                return line;
            }
        }
        // Too narrow even so: the end (place and time left) stays, the beginning is cut.
        let line = pieces.compose(Shown::PlaceOnly);
        let skip = line.chars().count().saturating_sub(width.saturating_sub(1));
        format!("…{}", line.chars().skip(skip).collect::<String>())
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
                Who {
                    host: shown(&holder.who.host),
                    pid: holder.who.pid.to_string(),
                    command: Some(command),
                    held: duration::display(held),
                }
            }
            None => Who {
                host: String::new(),
                pid: String::new(),
                command: None,
                held: String::new(),
            },
        });
        Pieces {
            key: printable(self.key),
            holder,
            place: self
                .place
                .as_ref()
                .map(|place| format!("position {} of {}", place.position, place.length)),
            waited: duration::display(now.since(self.started)),
            left: self
                .deadline
                .map(|deadline| duration::display(deadline.since(now))),
        }
    }

    /// A refresh's news: the same wait, another place in the queue.
    pub(super) fn moved(&mut self, position: usize, length: usize) {
        self.unreachable = None;
        if let Some(place) = &mut self.place {
            place.position = position;
            place.length = length;
        }
    }

    pub(super) fn update(&mut self, place: Place) {
        self.unreachable = None;
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

/// The figures of a status line, as text.
struct Pieces {
    key: String,
    /// `None` before Redis first answered.
    holder: Option<Who>,
    place: Option<String>,
    waited: String,
    left: Option<String>,
}

/// The holder, as a status line names it (all empty while the lock is being handed over).
struct Who {
    host: String,
    pid: String,
    /// The command, and the note after a `; `.
    command: Option<String>,
    held: String,
}

/// How much of a status line to show, from everything down to what must stay.
#[derive(Clone, Copy)]
enum Shown {
    All,
    /// The command and note cut to this many characters (0: left out).
    Command(usize),
    NoCommand,
    NoWaited,
    /// Nor the holder's pid.
    HostOnly,
    /// Nor the holder.
    PlaceOnly,
}

impl Pieces {
    fn compose(&self, shown: Shown) -> String {
        let key = &self.key;
        let waited = match (&self.left, shown) {
            (Some(left), Shown::NoWaited | Shown::HostOnly | Shown::PlaceOnly) => {
                format!("{left} left")
            }
            (Some(left), _) => format!("waited {}, {left} left", self.waited),
            (None, _) => format!("waited {}", self.waited),
        };
        let Some(holder) = &self.holder else {
            return format!("waiting for lock '{key}'; {waited}");
        };
        let place = self.place.as_deref().unwrap_or_default();
        let who = match (&holder.command, shown) {
            (_, Shown::PlaceOnly) => return format!("waiting for lock '{key}'; {place}; {waited}"),
            _ if holder.host.is_empty() => "being handed over".to_owned(),
            (_, Shown::HostOnly) => format!("held by {} for {}", holder.host, holder.held),
            (Some(command), Shown::All) => format!(
                "held by {} pid {} ({command}) for {}",
                holder.host, holder.pid, holder.held
            ),
            (Some(command), Shown::Command(room)) if room > 0 => format!(
                "held by {} pid {} ({}) for {}",
                holder.host,
                holder.pid,
                cut(command, room),
                holder.held
            ),
            _ => format!(
                "held by {} pid {} for {}",
                holder.host, holder.pid, holder.held
            ),
        };
        format!("waiting for lock '{key}': {who}; {place}; {waited}")
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
