//! A session: an open, logged-in connection and what explains its failures; in a Cluster it
//! follows MOVED, ASK and TRYAGAIN to the node that serves the lock's slot, within the
//! request's command timeout.

use super::*;

/// Redirections a Cluster request may follow (a slot moved, or moving) before it fails.
pub(super) const MAX_REDIRECTIONS: usize = 5;

/// The longest a Cluster request pauses in all for TRYAGAIN (within its command timeout): a
/// slot's keys moving to another node, as a reshard moves them, a slot at a time.
pub(super) const TRYAGAIN_FOR: Duration = Duration::from_secs(4);

/// The least a resent request is given (or all of a shorter command timeout): a resend left
/// with a millisecond would time out for certain, and a request that timed out may have run,
/// where one given up before it was sent again certainly did not.
fn resend_floor(timeout: Duration) -> Duration {
    (timeout / 2).min(Duration::from_millis(50))
}

/// Sleeps for `pause` when a request would still have [`resend_floor`] left after it; `false`
/// (at once) when it would not: the request ends rather than pause past its command timeout;
/// and when a signal cut the pause short (`interrupt`).
fn pause_within(pause: Duration, deadline: Instant, timeout: Duration) -> bool {
    if Instant::now() + pause + resend_floor(timeout) >= deadline {
        return false;
    }
    crate::interrupt::pause(pause).is_ok()
}

/// A request that redirections kept from reaching the slot's node within `timeout`: it did
/// not run.
fn out_of_time(timeout: Duration) -> anyhow::Error {
    fail_not_run(
        NotRun::Unreached,
        format!(
            "the Cluster kept redirecting the request past the command timeout ({})",
            crate::duration::display(timeout)
        ),
    )
}

/// An open connection and what is needed to explain its failures and, in a Cluster, to follow
/// them to the node that serves the lock's slot.
pub struct Session {
    // Boxed: sessions travel between threads inside replies.
    pub(super) con: Box<Connection>,
    pub(super) address: Address,
    pub(super) dial: Arc<Dial>,
    /// The connection is to a Cluster node: MOVED and ASK are followed.
    pub(super) cluster: bool,
    pub(super) command_timeout: Duration,
    /// A request went out on it since it was opened (logging in aside).
    pub(super) used: bool,
}

impl Session {
    /// A session with a sentinel (or any server) at `address`, not logged in.
    pub(super) fn new(
        con: Connection,
        address: &Address,
        dial: &Arc<Dial>,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let mut session = Self {
            con: Box::new(con),
            address: address.clone(),
            dial: Arc::clone(dial),
            cluster: false,
            command_timeout: timeout,
            used: false,
        };
        session.set_command_timeout(timeout)?;
        Ok(session)
    }

    /// AUTH and SELECT, within the timeout in force.
    pub(super) fn log_in(&mut self, credentials: &Credentials, db: i64) -> anyhow::Result<()> {
        if let Some(password) = &credentials.password {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = &credentials.user {
                auth.arg(user);
            }
            auth.arg(password);
            // Not through `run`, whose errors quote the server: an error reply to AUTH may
            // quote the password.
            if let Err(err) = auth.query::<()>(&mut *self.con) {
                return Err(if err.code().is_some() {
                    self.named(classify::failed_auth(&err))
                } else {
                    self.explain(&err)
                });
            }
        }
        if db != 0 {
            self.run(|con| redis::cmd("SELECT").arg(db).query::<()>(con))?;
        }
        Ok(())
    }

    /// The server's role (`master`, `slave`, `sentinel`), or `None` when the user may not ask.
    pub(super) fn role(&mut self) -> anyhow::Result<Option<String>> {
        let reply: anyhow::Result<Vec<redis::Value>> =
            self.run(|con| redis::cmd("ROLE").query(con));
        match reply {
            Ok(reply) => Ok(reply
                .first()
                .and_then(|role| redis::from_redis_value::<String>(role.clone()).ok())),
            Err(err) if failure_of(&err) == Some(Failure::Auth) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Whether this session talks to a Redis Cluster (a request may be redirected).
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// Whether nothing was sent on it since it was opened (logging in aside).
    pub(crate) fn is_fresh(&self) -> bool {
        !self.used
    }

    /// Runs one request; a failure becomes an error with the right outcome and the server
    /// named. In a Cluster, a request for a slot another node serves is sent there (MOVED: from
    /// now on; ASK: during a slot's migration, each of its commands after `ASKING`), at most
    /// [`MAX_REDIRECTIONS`] times; a second MOVED follows a pause of 50 ms doubled for each
    /// redirection so far. A TRYAGAIN (the slot is moving, and the request's keys are not all
    /// on one side yet) sends it again to the same node after a pause of 50 ms, doubling up to
    /// 800 ms, as long as the pauses add up to at most [`TRYAGAIN_FOR`]. None of those ran the
    /// request. All of it, pauses, the redirected node's connect and each resend, ends by the
    /// command timeout from the start: each gets what is left of it.
    pub(crate) fn run<T>(
        &mut self,
        mut request: impl FnMut(&mut dyn ConnectionLike) -> redis::RedisResult<T>,
    ) -> anyhow::Result<T> {
        self.used = true;
        let timeout = self.command_timeout;
        let deadline = Instant::now() + timeout;
        let mut redirections = 0;
        let mut retries = 0;
        let mut paused = Duration::ZERO;
        // The node an ASK named, for as long as the request is sent there.
        let mut asked: Option<Session> = None;
        let result = loop {
            let result = match asked.as_mut() {
                Some(there) => request(&mut asking::Asking(&mut there.con)),
                None => request(&mut *self.con),
            };
            let err = match result {
                Ok(reply) => break Ok(reply),
                Err(err) => err,
            };

            let explain = |err: &RedisError| asked.as_ref().unwrap_or(self).explain(err);
            if !self.cluster {
                break Err(explain(&err));
            }
            match (err.kind(), err.redirect_node()) {
                (
                    ErrorKind::Server(kind @ (ServerErrorKind::Moved | ServerErrorKind::Ask)),
                    Some((node, _)),
                ) => {
                    if redirections == MAX_REDIRECTIONS {
                        // Says so, rather than quote the last redirection.
                        break Err(fail_not_run(
                            NotRun::Unreached,
                            format!("more than {MAX_REDIRECTIONS} redirections in the Cluster"),
                        )
                        .context(self.dial.shown.clone()));
                    }
                    let address = match self.node_address(node) {
                        Ok(address) => address,
                        Err(err) => break Err(err),
                    };
                    self.dial.learn(&address);
                    if kind == ServerErrorKind::Moved {
                        // Moved again: the nodes disagree about the slot's owner for now (a
                        // reconfiguration under way), and would send it back and forth at once.
                        if redirections > 0 {
                            let pause = Duration::from_millis(50 << redirections);
                            if !pause_within(pause, deadline, timeout) {
                                break Err(out_of_time(timeout).context(self.dial.shown.clone()));
                            }
                        }
                        let moved = match self.open_redirected(&address, deadline) {
                            Ok(moved) => moved,
                            Err(err) => break Err(err),
                        };
                        self.con = moved.con;
                        self.address = address;
                        asked = None;
                    } else if asked.as_ref().is_none_or(|there| there.address != address) {
                        asked = match self.open_redirected(&address, deadline) {
                            Ok(there) => Some(there),
                            Err(err) => break Err(err),
                        };
                    }
                    redirections += 1;
                }
                (ErrorKind::Server(ServerErrorKind::TryAgain), _) => {
                    let pause = Duration::from_millis(50 << retries.min(4));
                    if paused + pause > TRYAGAIN_FOR || !pause_within(pause, deadline, timeout) {
                        break Err(explain(&err));
                    }
                    paused += pause;
                    retries += 1;
                }
                _ => break Err(explain(&err)),
            }
            // The resend waits only for what is left of the request's time, and is not sent
            // with too little of it left (a reconnect may have taken the rest): it did not run.
            let left = left_until(deadline);
            if left < resend_floor(timeout) {
                break Err(out_of_time(timeout).context(self.dial.shown.clone()));
            }
            let con = match asked.as_mut() {
                Some(there) => &mut there.con,
                None => &mut self.con,
            };
            if let Err(err) = con.set_timeout(left) {
                break Err(
                    fail(Failure::Unavailable, err.to_string()).context(self.dial.shown.clone())
                );
            }
        };
        if redirections + retries > 0 {
            // Later requests on this connection get the whole timeout again. (Setting it fails
            // only on a socket no longer usable, whose next request fails anyway.)
            let _ = self.con.set_timeout(self.command_timeout);
        }
        result
    }

    /// A session with the node a redirection named, connecting by `deadline` (within the
    /// connect timeout) and bounding its requests by what is left until then. The request has
    /// not run: a node that refuses the connection says so (see [`NotRun::Unreached`]); one
    /// that does not answer is silence, which a release does not wait out twice.
    fn open_redirected(&self, address: &Address, deadline: Instant) -> anyhow::Result<Session> {
        let mut there = self
            .dial
            .open(address, self.dial.connect_timeout.min(left_until(deadline)))?;
        there.cluster = true;
        there.set_command_timeout(left_until(deadline))?;
        Ok(there)
    }

    /// Sessions with every master that holds keys: in a Cluster one per master (CLUSTER
    /// SLOTS), this one among them; elsewhere just this one. For reading every key (SCAN).
    pub fn masters(mut self) -> anyhow::Result<Vec<Session>> {
        if !self.cluster {
            return Ok(vec![self]);
        }
        let slots: Vec<Vec<redis::Value>> =
            self.run(|con| redis::cmd("CLUSTER").arg("SLOTS").query(con))?;
        let mut addresses = Vec::new();
        for range in &slots {
            // [start, end, [host, port, id, ...], replicas...]
            let master = range.get(2).and_then(|master| {
                let parts: Vec<redis::Value> = redis::from_redis_value(master.clone()).ok()?;
                let host: String = redis::from_redis_value(parts.first()?.clone()).ok()?;
                let port: u16 = redis::from_redis_value(parts.get(1)?.clone()).ok()?;
                Some(format!("{host}:{port}"))
            });
            let Some(master) = master else {
                return Err(fail(
                    Failure::Unavailable,
                    "CLUSTER SLOTS answered something other than slot ranges",
                )
                .context(self.dial.shown.clone()));
            };
            let address = self.node_address(&master)?;
            self.dial.learn(&address);
            if !addresses.contains(&address) {
                addresses.push(address);
            }
        }
        let mut sessions = Vec::with_capacity(addresses.len());
        for address in addresses {
            if address == self.address {
                continue;
            }
            let mut session = self.dial.open(&address, self.dial.connect_timeout)?;
            session.cluster = true;
            sessions.push(session);
        }
        sessions.insert(0, self);
        Ok(sessions)
    }

    /// Every node of the Cluster that serves slots, masters and replicas (CLUSTER SLOTS),
    /// each once.
    pub(super) fn cluster_nodes(&mut self) -> anyhow::Result<Vec<Address>> {
        let slots: Vec<Vec<redis::Value>> =
            self.run(|con| redis::cmd("CLUSTER").arg("SLOTS").query(con))?;
        let mut addresses = Vec::new();
        // [start, end, [host, port, id, ...] of the master, then of each replica]
        for node in slots.iter().flat_map(|range| range.iter().skip(2)) {
            let host_port = (|| {
                let parts: Vec<redis::Value> = redis::from_redis_value(node.clone()).ok()?;
                let host: String = redis::from_redis_value(parts.first()?.clone()).ok()?;
                let port: u16 = redis::from_redis_value(parts.get(1)?.clone()).ok()?;
                Some(format!("{host}:{port}"))
            })();
            if let Some(address) = host_port.and_then(|node| self.node_address(&node).ok())
                && !addresses.contains(&address)
            {
                self.dial.learn(&address);
                addresses.push(address);
            }
        }
        Ok(addresses)
    }

    /// The address of a node a redirection names (`host:port`; an empty host is this one's).
    fn node_address(&self, node: &str) -> anyhow::Result<Address> {
        let (host, port) = node
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
            .ok_or_else(|| fail(Failure::Unavailable, format!("a redirection to '{node}'")))?;
        let host = match (&self.address, host) {
            (Address::Tcp { host, .. }, "") => host.clone(),
            (_, host) => host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
        };
        Ok(Address::Tcp { host, port })
    }

    /// The outcome of a failed request, with the server named where that helps.
    pub(crate) fn explain(&self, err: &RedisError) -> anyhow::Error {
        self.named(match self.con.tls_error() {
            Some(tls) => tls::classify_tls(tls),
            None => classify(err, self.command_timeout),
        })
    }

    /// An outcome of a request on this session, with the server named where that helps.
    fn named(&self, err: anyhow::Error) -> anyhow::Error {
        // A refusal about the data speaks for itself; a failure to talk names the server (in
        // a Cluster, whose URL names seeds, the node that failed too).
        if failure_of(&err) == Some(Failure::Usage) {
            err
        } else if self.cluster {
            err.context(format!("{} (node {})", self.dial.shown, self.address))
        } else {
            err.context(self.dial.shown.clone())
        }
    }

    /// Changes the bound on each later command.
    pub(crate) fn set_command_timeout(&mut self, timeout: Duration) -> anyhow::Result<()> {
        self.command_timeout = timeout;
        self.con
            .set_timeout(timeout)
            .map_err(|err| fail(Failure::Unavailable, err.to_string()))
            .with_context(|| self.dial.shown.clone())
    }

    /// Subscribes to `channel` (Pub/Sub): from now on the connection only receives messages
    /// ([`Self::next_message`]). Returns a handle that ends the subscription from another
    /// thread.
    pub(crate) fn subscribe(&mut self, channel: &str) -> anyhow::Result<transport::Closer> {
        self.run(|con| {
            redis::cmd("SUBSCRIBE")
                .arg(channel)
                .query::<redis::Value>(con)
        })?;
        self.con
            .closer()
            .map_err(|err| fail(Failure::Unavailable, err.to_string()))
    }

    /// Blocks for the next message on a subscribed connection, within the timeout in force.
    pub(crate) fn next_message(&mut self) -> anyhow::Result<()> {
        self.con
            .next_push()
            .map(drop)
            .map_err(|err| self.explain(&err))
    }

    /// The bound on each command now in force.
    pub(crate) fn command_timeout(&self) -> Duration {
        self.command_timeout
    }
}
