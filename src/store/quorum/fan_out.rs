//! How quorum mode asks its masters: each master's kept connection and helper thread
//! (`Master`), and the rounds that send one request to many masters at once and gather the
//! replies, all of them, a majority, or as many as decide the round (`Quorum::fan_out`,
//! `fan_out_to_majority_of`, `fan_out_until` and `ask_until`, `fan_out_where`).

use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::helpers::Helper;
use super::{Quorum, STRAGGLER_GRACE};
use crate::clock::BootInstant;
use crate::conn::{Session, Target};
use crate::exit::{Failure, fail};

/// One master, the connection kept to it between requests, and the thread that asks it.
pub(super) struct Master {
    pub(super) target: Target,
    session: Mutex<Option<Session>>,
    helper: Helper,
}

impl Master {
    pub(super) fn new(target: Target) -> Self {
        Self {
            target,
            session: Mutex::new(None),
            helper: Helper::new(),
        }
    }

    /// The connection kept to the master, taken (a request that handles its own connections,
    /// the release, starts on it).
    pub(super) fn take_session(&self) -> Option<Session> {
        self.session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Runs `request` over the kept connection, or a new one, within `limit` for connecting
    /// and `limit` for the request. A connection that failed is dropped.
    fn call<T>(
        &self,
        limit: Duration,
        request: impl FnOnce(&mut Session) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let mut session = match self.take_session() {
            Some(session) => session,
            None => self.target.connect_within(limit)?,
        };
        session.set_command_timeout(limit)?;
        let result = request(&mut session);
        if result.is_ok() && self.target.reuses_connections() {
            *self
                .session
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(session);
        }
        result.with_context_of(&self.target)
    }
}

/// Names the master in an error that does not name it yet.
pub(super) trait WithContextOf<T> {
    fn with_context_of(self, target: &Target) -> anyhow::Result<T>;
}

impl<T> WithContextOf<T> for anyhow::Result<T> {
    fn with_context_of(self, target: &Target) -> anyhow::Result<T> {
        self.map_err(|err| {
            let shown = target.redacted().to_owned();
            if format!("{err:#}").contains(&shown) {
                err
            } else {
                err.context(shown)
            }
        })
    }
}

impl Quorum {
    /// Runs `request` on every master at once, each within `limit`; the replies in the
    /// masters' order. Returns when the last master answered or timed out.
    pub(super) fn fan_out<T: Send + 'static>(
        &self,
        limit: Duration,
        request: impl Fn(&mut Session) -> anyhow::Result<T> + Send + Sync + 'static,
    ) -> Vec<anyhow::Result<T>> {
        self.fan_out_where(limit, move |_, session| request(session), |_| true)
            .into_iter()
            .enumerate()
            .map(|(index, reply)| reply.unwrap_or_else(|| self.no_answer(index)))
            .collect()
    }

    /// Runs `request` on the masters `chosen` by index (the others' replies are "no answer
    /// yet"), each within `limit` to connect and `limit` for the request, and returns once
    /// every chosen master answered or failed, or a majority has answered and the rest did not
    /// within [`STRAGGLER_GRACE`]. A master still in flight then is counted as failed ("no
    /// answer yet"); its request goes on without us and ends within its own bounds (or with
    /// the process).
    pub(super) fn fan_out_to_majority_of<T: Send + 'static>(
        &self,
        limit: Duration,
        request: impl Fn(&mut Session) -> anyhow::Result<T> + Send + Sync + 'static,
        chosen: impl Fn(usize) -> bool,
    ) -> Vec<anyhow::Result<T>> {
        let majority = self.majority();
        self.fan_out_until(
            limit,
            move |_, session| request(session),
            chosen,
            |results| results.iter().filter(|r| matches!(r, Some(Ok(_)))).count() >= majority,
        )
    }

    /// Runs `request` on the masters `chosen` by index (the others' replies are "no answer
    /// yet"), each within `limit` to connect and `limit` for the request, and returns once
    /// every chosen master has answered or failed, or the replies so far have `settled` the
    /// round and the rest did not answer within [`STRAGGLER_GRACE`]. A master still in flight
    /// then is counted as failed ("no answer yet"); its request goes on without us and ends
    /// within its own bounds (or with the process). So a stopped master costs a round the
    /// grace, not its limit, whenever the others decide it.
    pub(super) fn fan_out_until<T: Send + 'static>(
        &self,
        limit: Duration,
        request: impl Fn(usize, &mut Session) -> anyhow::Result<T> + Send + Sync + 'static,
        chosen: impl Fn(usize) -> bool,
        settled: impl Fn(&[Option<anyhow::Result<T>>]) -> bool,
    ) -> Vec<anyhow::Result<T>> {
        self.ask_until(
            limit * 2,
            move |index, master| master.call(limit, |session| request(index, session)),
            chosen,
            settled,
        )
    }

    /// Like `fan_out_until`, with `request` asking its master itself (its connections, its
    /// bounds: all within `within`).
    pub(super) fn ask_until<T: Send + 'static>(
        &self,
        within: Duration,
        request: impl Fn(usize, &Master) -> anyhow::Result<T> + Send + Sync + 'static,
        chosen: impl Fn(usize) -> bool,
        settled: impl Fn(&[Option<anyhow::Result<T>>]) -> bool,
    ) -> Vec<anyhow::Result<T>> {
        // Every master on a helper, none on this thread: it waits for the round to settle only.
        let (mut results, replies) = self.hand_out(request, &chosen, None);
        let mut deadline = BootInstant::now() + within + Duration::from_secs(1);
        while (0..results.len()).any(|index| chosen(index) && results[index].is_none()) {
            if settled(&results) {
                // The rest get a moment (a healthy master answers in it, and its part of the
                // lock goes too), not the whole limit.
                deadline = deadline.min(BootInstant::now() + STRAGGLER_GRACE);
            }
            match replies.recv_timeout(deadline.remaining()) {
                Ok((index, result)) => results[index] = Some(result),
                Err(_) => break,
            }
        }
        results
            .into_iter()
            .enumerate()
            .map(|(index, result)| result.unwrap_or_else(|| self.no_answer(index)))
            .collect()
    }

    /// The reply of a master that did not answer in time.
    pub(super) fn no_answer<T>(&self, index: usize) -> anyhow::Result<T> {
        Err(fail(Failure::Unavailable, "no answer yet"))
            .with_context_of(&self.masters[index].target)
    }

    /// Hands `request` to the helper of each master `chosen` but `here` (see `helpers`), each
    /// within `limit`. Returns a slot per master, filled for those whose request could not be
    /// sent out (no thread), and where the other replies come as `(index, reply)`.
    #[allow(clippy::type_complexity)]
    pub(super) fn send_out<T: Send + 'static>(
        &self,
        limit: Duration,
        request: impl Fn(usize, &mut Session) -> anyhow::Result<T> + Send + Sync + 'static,
        chosen: impl Fn(usize) -> bool,
        here: Option<usize>,
    ) -> (
        Vec<Option<anyhow::Result<T>>>,
        Receiver<(usize, anyhow::Result<T>)>,
    ) {
        self.hand_out(
            move |index, master| master.call(limit, |session| request(index, session)),
            chosen,
            here,
        )
    }

    /// Like `send_out`, with `request` asking its master itself.
    #[allow(clippy::type_complexity)]
    fn hand_out<T: Send + 'static>(
        &self,
        request: impl Fn(usize, &Master) -> anyhow::Result<T> + Send + Sync + 'static,
        chosen: impl Fn(usize) -> bool,
        here: Option<usize>,
    ) -> (
        Vec<Option<anyhow::Result<T>>>,
        Receiver<(usize, anyhow::Result<T>)>,
    ) {
        let request = Arc::new(request);
        let (sender, replies) = mpsc::channel();
        let mut results: Vec<Option<anyhow::Result<T>>> =
            (0..self.masters.len()).map(|_| None).collect();
        for (index, master) in self.masters.iter().enumerate() {
            if !chosen(index) || Some(index) == here {
                continue;
            }
            let (asked, request, sender) =
                (Arc::clone(master), Arc::clone(&request), sender.clone());
            let sent = master.helper.run(
                move || request(index, &asked),
                move |reply| {
                    let _ = sender.send((index, reply));
                },
            );
            if let Err(err) = sent {
                results[index] = Some(Err(fail(
                    Failure::System,
                    format!("starting a thread for a master: {err}"),
                )));
            }
        }
        (results, replies)
    }

    /// Like `fan_out`, on the masters `chosen` by index only; `request` is told the index.
    /// Returns when every chosen master answered or failed (each within its own bounds); the
    /// others' slots are `None`.
    pub(super) fn fan_out_where<T: Send + 'static>(
        &self,
        limit: Duration,
        request: impl Fn(usize, &mut Session) -> anyhow::Result<T> + Send + Sync + 'static,
        chosen: impl Fn(usize) -> bool,
    ) -> Vec<Option<anyhow::Result<T>>> {
        // The first chosen master is served by this thread: one hand-off fewer.
        let first = (0..self.masters.len()).find(|&index| chosen(index));
        let request = Arc::new(request);
        let shared = Arc::clone(&request);
        let (mut results, replies) = self.send_out(
            limit,
            move |index, session| shared(index, session),
            &chosen,
            first,
        );
        if let Some(index) = first {
            results[index] =
                Some(self.masters[index].call(limit, |session| request(index, session)));
        }
        while (0..self.masters.len()).any(|index| chosen(index) && results[index].is_none()) {
            match replies.recv() {
                Ok((index, reply)) => results[index] = Some(reply),
                // Every helper delivered or dropped its request (cannot happen: each delivers).
                Err(_) => break,
            }
        }
        results
    }
}
