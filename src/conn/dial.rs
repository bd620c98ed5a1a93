//! Dialling one server: what it takes to open a connection and log in (TLS, credentials,
//! database, timeouts), shared by a target and its sessions; the order addresses are tried
//! in (servers that went silent in this process last), and the Cluster nodes learnt of.

use super::*;

/// What it takes to open a connection to one server and log in: shared by a target and its
/// sessions (which follow a Cluster's redirections to other nodes).
pub(super) struct Dial {
    pub(super) tls: Option<Arc<Tls>>,
    pub(super) credentials: Credentials,
    pub(super) db: i64,
    /// The URL as given, password hidden: the only form shown in messages.
    pub(super) shown: String,
    pub(super) connect_timeout: Duration,
    pub(super) command_timeout: Duration,
    pub(super) release_timeout: Duration,
    /// Sentinels that left a request unanswered in this process: asked last from then on. A
    /// stopped server (SIGSTOP, a hung VM) still accepts connections, so only the silence
    /// tells, and each later request (every request asks the sentinels) would wait it out
    /// again first.
    pub(super) hung: std::sync::Mutex<Vec<Address>>,
    /// A Cluster's nodes this process learnt of (CLUSTER SLOTS, redirections): tried after
    /// the seeds when none of them answers, as a node that is no seed still knows the slots.
    pub(super) nodes: std::sync::Mutex<Vec<Address>>,
}

impl Dial {
    /// Remembers `address` as a node of the Cluster (see [`Dial::nodes`]).
    pub(super) fn learn(&self, address: &Address) {
        let mut nodes = self
            .nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !nodes.contains(address) {
            nodes.push(address.clone());
        }
    }

    /// The nodes learnt of that are not among `seeds`.
    pub(super) fn learnt_besides(&self, seeds: &[Address]) -> Vec<Address> {
        self.nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|node| !seeds.contains(node))
            .cloned()
            .collect()
    }

    /// `address` left a request unanswered (`true`), or answered one (`false`).
    pub(super) fn note(&self, address: &Address, hung: bool) {
        let mut list = self
            .hung
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        list.retain(|seen| seen != address);
        if hung {
            list.push(address.clone());
        }
    }

    /// `addresses` in the order to try them: those that answered (or were not asked) first,
    /// in their given order, then the ones that left a request unanswered, longest ago first.
    pub(super) fn in_order<'a>(&self, addresses: &'a [Address]) -> Vec<&'a Address> {
        let hung = self
            .hung
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut ordered: Vec<&Address> = addresses
            .iter()
            .filter(|address| !hung.contains(address))
            .collect();
        ordered.extend(
            hung.iter()
                .filter_map(|seen| addresses.iter().find(|a| *a == seen)),
        );
        ordered
    }

    /// A logged-in session with `address`, connecting and logging in within `timeout`.
    pub(super) fn open(
        self: &Arc<Self>,
        address: &Address,
        timeout: Duration,
    ) -> anyhow::Result<Session> {
        self.open_checked(address, timeout, false, false)
    }

    /// Like [`Self::open`]; with `answers`, the server has also answered a request within
    /// `timeout`: the login's, or else a PING. A stopped server (SIGSTOP, a hung VM) still
    /// accepts connections, and a login without a password sends nothing: only a round trip
    /// shows it is there before a request is entrusted to it (and may have to be waited out).
    pub(super) fn open_checked(
        self: &Arc<Self>,
        address: &Address,
        timeout: Duration,
        answers: bool,
        learnt: bool,
    ) -> anyhow::Result<Session> {
        let deadline = Instant::now() + timeout;
        let con = Box::new(Connection::open(address, self.tls.as_ref(), timeout)?);
        let mut session = Session {
            con,
            address: address.clone(),
            dial: Arc::clone(self),
            cluster: false,
            command_timeout: timeout,
            used: false,
        };
        session.set_command_timeout(left_until(deadline))?;
        session.log_in(&self.credentials, self.db)?;
        if learnt {
            // A node learnt of earlier may be gone, and its address taken by another server
            // (a pod's address reused): only one that serves slots of a Cluster is used, never
            // a lone Redis that would take the lock where nobody else looks for it.
            let slots: anyhow::Result<Vec<redis::Value>> =
                session.run(|con| redis::cmd("CLUSTER").arg("SLOTS").query(con));
            match slots {
                Ok(slots) if !slots.is_empty() => {}
                Ok(_) | Err(_) => {
                    return Err(fail(
                        Failure::Unavailable,
                        "a node learnt of earlier no longer serves slots of a Cluster",
                    ));
                }
            }
        } else if answers && self.credentials.password.is_none() && self.db == 0 {
            // Any reply will do, a refusal (NOPERM) too: the server answered.
            match session.run(|con| redis::cmd("PING").query::<redis::Value>(con)) {
                Err(err) if crate::exit::no_reply(&err).is_some() => return Err(err),
                _ => {}
            }
        }
        session.set_command_timeout(self.command_timeout)?;
        session.used = false;
        Ok(session)
    }
}
