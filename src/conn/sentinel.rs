//! Redis Sentinel: finding the current master of a service by asking the sentinels in turn,
//! each within the connect timeout. The master found is checked with ROLE (a sentinel may
//! still name a master that has just been demoted); a replica means asking again, a few times,
//! after a pause that doubles. Each new connection discovers afresh, so a renewal or a waiter
//! that meets a dead or demoted master (connection refused, READONLY) finds the new one on its
//! next attempt, and a release, which did not run there, is sent again to it. A master named
//! that is not one, or no sentinel reachable at all, is an answer that nothing ran
//! ([`NotRun::Unreached`]).
//!
//! Sentinels may need credentials of their own: the user from the URL's `sentinel_user`
//! parameter, the password from REDLOCK_SENTINEL_PASSWORD (never the master's: sentinels are
//! often configured apart).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::transport::Connection;
use super::url::Address;
use super::{Credentials, Dial, Session};
use crate::exit::{Failure, Fate, Hint, NotRun, fail, fail_not_run, fail_with, failure_of, fate};

/// Where to ask, and as whom.
#[derive(Debug, Clone)]
pub(crate) struct Sentinels {
    pub(crate) addresses: Vec<Address>,
    pub(crate) service: String,
    pub(crate) credentials: Credentials,
}

/// How many times a master that turns out to be a replica is looked up again.
const LOOKUPS: u32 = 3;

/// The pause before looking up again, doubling each time: the sentinels need a moment to
/// learn of a failover, and asking again at once gets the same stale answer.
const LOOKUP_PAUSE: Duration = Duration::from_millis(100);

impl Sentinels {
    /// The master's address according to the first sentinel that knows it, checked on
    /// `open` (which connects and logs in to it): a replica means asking again, a few times.
    pub(crate) fn connect_master(
        &self,
        dial: &Arc<Dial>,
        timeout: Duration,
        open: impl Fn(&Address) -> anyhow::Result<Session>,
    ) -> anyhow::Result<Session> {
        let mut last = None;
        for lookup in 0..LOOKUPS {
            if lookup > 0 {
                // Bounded by the connect timeout, as each step of the lookup is.
                std::thread::sleep(LOOKUP_PAUSE.saturating_mul(1 << (lookup - 1)).min(timeout));
            }
            let master = self.ask(dial, timeout)?;
            let mut session = open(&master)?;
            match session.role() {
                // ROLE may be denied to the user: then the first write tells (READONLY).
                Ok(None) => return Ok(session),
                Ok(Some(role)) if role == "master" => return Ok(session),
                Ok(Some(role)) => last = Some(format!("{master} is a {role}")),
                Err(err) => return Err(err),
            }
        }
        // No master took the request: it did not run (a release may be sent again).
        Err(fail_not_run(
            NotRun::Unreached,
            format!(
                "the sentinels name a master of '{}' that is not one ({}); a failover may be under way",
                self.service,
                last.unwrap_or_default()
            ),
        ))
    }

    /// Asks each sentinel in turn for the master's address. When none answers, the error says
    /// why for each (once, if all say the same), with the outcome they share: all refusing
    /// the credentials is an authentication failure (77), anything else unavailable (69).
    fn ask(&self, dial: &Arc<Dial>, timeout: Duration) -> anyhow::Result<Address> {
        let mut failures: Vec<(String, anyhow::Error)> = Vec::new();
        let mut unknown = 0;
        // A sentinel that did not answer is asked last from then on (see `Dial::note`).
        for sentinel in dial.in_order(&self.addresses) {
            let asked = self.ask_one(sentinel, dial, timeout);
            dial.note(sentinel, asked.is_err());
            match asked {
                Ok(Some(master)) => return Ok(master),
                Ok(None) => unknown += 1,
                Err(err) => failures.push((sentinel.to_string(), err)),
            }
        }
        if unknown > 0 && failures.is_empty() {
            return Err(fail(
                Failure::Usage,
                format!("no sentinel knows a master named '{}'", self.service),
            ));
        }
        // Each error names the URL (the same for all); the sentinel's address says more.
        let why = |err: &anyhow::Error| {
            let text = format!("{err:#}");
            text.strip_prefix(&format!("{}: ", dial.shown))
                .map_or(text.clone(), str::to_owned)
        };
        let reasons: Vec<String> = failures.iter().map(|(_, err)| why(err)).collect();
        let detail = if reasons.iter().all(|reason| *reason == reasons[0]) && unknown == 0 {
            format!("every sentinel answered: {}", reasons[0])
        } else {
            let each: Vec<String> = failures
                .iter()
                .zip(&reasons)
                .map(|((sentinel, _), reason)| format!("{sentinel}: {reason}"))
                .collect();
            each.join("; ")
        };
        let message = format!(
            "no sentinel told the master of '{}' ({detail})",
            self.service
        );
        let all_auth = unknown == 0
            && failures
                .iter()
                .all(|(_, err)| failure_of(err) == Some(Failure::Auth));
        // Every sentinel refused the connection: nothing was asked of a master.
        let all_unreached = unknown == 0
            && failures
                .iter()
                .all(|(_, err)| matches!(fate(err), Some(Fate::NotRun(NotRun::Unreached))));
        Err(if all_auth {
            fail_with(Failure::Auth, message, Hint::SentinelPassword)
        } else if all_unreached {
            fail_not_run(NotRun::Unreached, message)
        } else {
            fail(Failure::Unavailable, message)
        })
    }

    fn ask_one(
        &self,
        sentinel: &Address,
        dial: &Arc<Dial>,
        timeout: Duration,
    ) -> anyhow::Result<Option<Address>> {
        let deadline = Instant::now() + timeout;
        let con = Connection::open(sentinel, dial.tls.as_ref(), timeout)?;
        let mut session = Session::new(con, sentinel, dial, timeout)?;
        session.log_in(&self.credentials, 0)?;
        session.set_command_timeout(deadline.saturating_duration_since(Instant::now()))?;
        let reply: Option<(String, u16)> = session.run(|con| {
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.service)
                .query(con)
        })?;
        Ok(reply.map(|(host, port)| Address::Tcp { host, port }))
    }
}
