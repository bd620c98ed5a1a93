//! Reaching Redis: the server URL and credentials, TLS, bounded connect and command timeouts,
//! and the translation of Redis errors into outcomes with exit codes (`classify`).
//!
//! Secrets never leave this module in clear: [`Target::redacted`] is the only form of the URL
//! used in messages, and no Redis error text carries the password.

mod asking;
mod classify;
mod resp;
mod sentinel;
mod tls;
mod transport;
mod url;

use classify::classify;

pub(crate) use transport::Closer;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use redis::{ConnectionLike, ErrorKind, RedisError, ServerErrorKind};

use sentinel::Sentinels;
use tls::Tls;
pub use tls::TlsOptions;
use transport::Connection;
use url::{Address, RedisUrl, Servers};
pub(crate) use url::{redact_url, url_has_password};

use crate::exit::{Failure, Hint, NotRun, fail, fail_not_run, fail_with, failure_of};

/// Who to log in as. The password never shows in `Debug`.
#[derive(Clone, Default)]
pub(crate) struct Credentials {
    user: Option<String>,
    password: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Everything about reaching Redis besides the URL.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Overrides a password in the URL.
    pub password: Option<String>,
    /// The sentinels' own password (Sentinel URLs).
    pub sentinel_password: Option<String>,
    /// For `rediss://` (the system's trust store when not given).
    pub tls: Option<TlsOptions>,
    pub connect_timeout: Duration,
    pub command_timeout: Duration,
    /// How long a release known not to have run is sent again (see `store::single::release`).
    pub release_timeout: Duration,
}

/// Where and how to connect.
#[derive(Clone)]
pub struct Target {
    servers: Servers,
    sentinels: Option<Sentinels>,
    dial: Arc<Dial>,
}

/// What it takes to open a connection to one server and log in: shared by a target and its
/// sessions (which follow a Cluster's redirections to other nodes).
struct Dial {
    tls: Option<Arc<Tls>>,
    credentials: Credentials,
    db: i64,
    /// The URL as given, password hidden: the only form shown in messages.
    shown: String,
    connect_timeout: Duration,
    command_timeout: Duration,
    release_timeout: Duration,
    /// Sentinels that left a request unanswered in this process: asked last from then on. A
    /// stopped server (SIGSTOP, a hung VM) still accepts connections, so only the silence
    /// tells, and each later request (every request asks the sentinels) would wait it out
    /// again first.
    hung: std::sync::Mutex<Vec<Address>>,
    /// A Cluster's nodes this process learnt of (CLUSTER SLOTS, redirections): tried after
    /// the seeds when none of them answers, as a node that is no seed still knows the slots.
    nodes: std::sync::Mutex<Vec<Address>>,
}

impl Dial {
    /// Remembers `address` as a node of the Cluster (see [`Dial::nodes`]).
    fn learn(&self, address: &Address) {
        let mut nodes = self
            .nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !nodes.contains(address) {
            nodes.push(address.clone());
        }
    }

    /// The nodes learnt of that are not among `seeds`.
    fn learnt_besides(&self, seeds: &[Address]) -> Vec<Address> {
        self.nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|node| !seeds.contains(node))
            .cloned()
            .collect()
    }

    /// `address` left a request unanswered (`true`), or answered one (`false`).
    fn note(&self, address: &Address, hung: bool) {
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
    fn in_order<'a>(&self, addresses: &'a [Address]) -> Vec<&'a Address> {
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
    fn open(self: &Arc<Self>, address: &Address, timeout: Duration) -> anyhow::Result<Session> {
        self.open_checked(address, timeout, false, false)
    }

    /// Like [`Self::open`]; with `answers`, the server has also answered a request within
    /// `timeout`: the login's, or else a PING. A stopped server (SIGSTOP, a hung VM) still
    /// accepts connections, and a login without a password sends nothing: only a round trip
    /// shows it is there before a request is entrusted to it (and may have to be waited out).
    fn open_checked(
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

impl Target {
    /// Parses `url` and checks `access` against it. Errors are usage errors that say why, and
    /// never contain a password.
    /// Where the servers this target names are (`Address::place`): one for a server; for
    /// Sentinel, each sentinel's with the service (one group of sentinels watches many
    /// masters: the same service through a shared sentinel is the same master); each seed's
    /// for a Cluster.
    pub fn places(&self) -> Vec<String> {
        match &self.servers {
            Servers::Single(address) => vec![address.place()],
            Servers::Sentinel { sentinels, service } => sentinels
                .iter()
                .map(|sentinel| format!("{}/{service}", sentinel.place()))
                .collect(),
            Servers::Cluster { seeds } => seeds.iter().map(Address::place).collect(),
        }
    }

    pub fn new(url: &str, access: Access) -> anyhow::Result<Self> {
        let url = RedisUrl::parse(url)
            .map_err(|why| fail(Failure::Usage, format!("not a Redis URL: {why}")))?;
        let shown = url.shown(access.password.is_some());
        let credentials = Credentials {
            user: url.user,
            password: access.password.or(url.password),
        };
        // Without a password the user would be ignored and the default user taken instead.
        // (Not named: some clients read a lone userinfo as the password.)
        if credentials.user.is_some() && credentials.password.is_none() {
            return Err(fail_with(
                Failure::Usage,
                "the URL names a user but no password is given (a password alone is written redis://:PASSWORD@host)",
                Hint::GivePassword,
            ));
        }
        let tls = match (url.tls, access.tls) {
            (true, options) => Some(Arc::new(Tls::new(&options.unwrap_or_default())?)),
            (false, None) => None,
            // Never a silent plaintext connection when TLS was asked for.
            (false, Some(_)) => {
                return Err(fail_with(
                    Failure::Usage,
                    "TLS options given for a plaintext URL",
                    Hint::UseTls,
                ));
            }
        };
        let sentinels = match &url.servers {
            Servers::Sentinel { sentinels, service } => Some(Sentinels {
                addresses: sentinels.clone(),
                service: service.clone(),
                credentials: Credentials {
                    user: url.sentinel_user,
                    password: access.sentinel_password,
                },
            }),
            Servers::Single(_) | Servers::Cluster { .. } => None,
        };
        if sentinels.as_ref().is_some_and(|sentinels| {
            sentinels.credentials.user.is_some() && sentinels.credentials.password.is_none()
        }) {
            return Err(fail_with(
                Failure::Usage,
                "the URL names a sentinel user but no sentinel password is given",
                Hint::SentinelPassword,
            ));
        }
        Ok(Self {
            servers: url.servers,
            sentinels,
            dial: Arc::new(Dial {
                tls,
                credentials,
                db: url.db,
                shown,
                connect_timeout: access.connect_timeout,
                command_timeout: access.command_timeout,
                release_timeout: access.release_timeout,
                hung: std::sync::Mutex::new(Vec::new()),
                nodes: std::sync::Mutex::new(Vec::new()),
            }),
        })
    }

    /// Where the password goes without TLS to servers the URL does not list, as `session`
    /// (open on this target) finds them: the master a sentinel names, or a Cluster's nodes
    /// that are not among the seeds (and any host a MOVED or ASK names: the session follows
    /// redirections). Over TLS each host's certificate must carry the name the session
    /// dialled; without it, whoever can answer for a sentinel or a node can name a host of
    /// theirs and be sent the password. `None` without a password, over TLS, for one server,
    /// or a Cluster whose every node is a seed.
    pub(crate) fn unlisted_in_clear(&self, session: &mut Session) -> Option<Unlisted> {
        if self.dial.credentials.password.is_none() || self.dial.tls.is_some() {
            return None;
        }
        match &self.servers {
            Servers::Single(_) => None,
            Servers::Sentinel { .. } => Some(Unlisted::Master(session.address.to_string())),
            Servers::Cluster { seeds } => {
                let listed: Vec<String> = seeds.iter().map(Address::place).collect();
                let Ok(nodes) = session.cluster_nodes() else {
                    return Some(Unlisted::Nodes(None));
                };
                let unlisted: Vec<String> = nodes
                    .iter()
                    .filter(|node| !listed.contains(&node.place()))
                    .map(ToString::to_string)
                    .collect();
                (!unlisted.is_empty()).then_some(Unlisted::Nodes(Some(unlisted)))
            }
        }
    }

    /// The URL with any password replaced by `***`.
    pub(crate) fn redacted(&self) -> &str {
        &self.dial.shown
    }

    /// How long a release known not to have run (refused before running, or never reaching a
    /// server) is sent again, rediscovering the master or the slot's node each time.
    pub(crate) fn release_timeout(&self) -> Duration {
        self.dial.release_timeout
    }

    /// The database number the sessions select.
    pub(crate) fn db(&self) -> i64 {
        self.dial.db
    }

    /// The longest a request on a connection not yet open can take: connecting (asking each
    /// sentinel first, or trying each seed of a Cluster and then each node learnt of, each of
    /// which must answer within the connect timeout), logging in, and one request (in a
    /// Cluster, its redirections and pauses included: all of it within the command timeout).
    /// The caller's own bound on a worker that went quiet (a name lookup has no timeout of
    /// ours).
    pub(crate) fn request_bound(&self) -> Duration {
        let connects = match &self.servers {
            Servers::Single(_) => 1,
            Servers::Sentinel { sentinels, .. } => sentinels.len() + 1,
            Servers::Cluster { seeds } => seeds.len() + self.dial.learnt_besides(seeds).len(),
        };
        self.dial.connect_timeout * u32::try_from(connects).unwrap_or(u32::MAX)
            + self.dial.command_timeout
            + Duration::from_secs(1)
    }

    /// Whether a connection may serve more than one request. Not with Sentinel: after a
    /// failover the old master may accept writes for seconds before it is demoted, and a lease
    /// renewed there is not the lease on the new master; each request asks the sentinels.
    pub(crate) fn reuses_connections(&self) -> bool {
        self.sentinels.is_none()
    }

    /// Opens a connection whose every command fails after the command timeout.
    pub fn connect(&self) -> anyhow::Result<Session> {
        self.connect_within(self.dial.connect_timeout)
    }

    /// Like [`Self::connect`], with a connect timeout of at most `limit`: reaching the server
    /// (finding it through the sentinels, or reaching a seed of a Cluster, whose redirections
    /// the session follows), the TLS handshake, and logging in.
    pub(crate) fn connect_within(&self, limit: Duration) -> anyhow::Result<Session> {
        let timeout = self
            .dial
            .connect_timeout
            .min(limit)
            .max(Duration::from_millis(1));
        let open = |address: &Address| self.dial.open(address, timeout);
        match (&self.servers, &self.sentinels) {
            (Servers::Single(address), _) => open(address),
            (Servers::Cluster { seeds }, _) => {
                let (mut failures, mut all_auth) = (Vec::new(), true);
                // Each seed in turn, those that did not answer last; then the nodes learnt of
                // (CLUSTER SLOTS, redirections), which know the slots as well as a seed does.
                // Each must answer before it is used (see `Dial::open_checked`): a seed that
                // does not costs one connect timeout, and no request is lost with it.
                // A caller's bound shorter than the connect timeout (a give-up step, a hasty
                // release: redlock ends within a second of a signal) bounds the whole search,
                // not each node.
                let whole = (limit < self.dial.connect_timeout).then(|| Instant::now() + limit);
                let mut candidates = seeds.clone();
                let learnt = self.dial.learnt_besides(seeds);
                let learnt_count = learnt.len();
                candidates.extend(learnt);
                self.dial
                    .in_order(&candidates)
                    .into_iter()
                    .find_map(|node| {
                        let timeout = match whole {
                            Some(deadline) if Instant::now() >= deadline => return None,
                            Some(deadline) => timeout.min(left_until(deadline)),
                            None => timeout,
                        };
                        let opened =
                            self.dial
                                .open_checked(node, timeout, true, !seeds.contains(node));
                        // A refused login is an answer: the node is there.
                        self.dial.note(
                            node,
                            opened
                                .as_ref()
                                .is_err_and(|err| failure_of(err) != Some(Failure::Auth)),
                        );
                        opened
                            .map_err(|err| {
                                all_auth &= failure_of(&err) == Some(Failure::Auth);
                                failures.push(format!("{node}: {err:#}"));
                            })
                            .ok()
                    })
                    .map(|mut session| {
                        session.cluster = true;
                        session
                    })
                    .ok_or_else(|| {
                        // Every seed refusing the login: the credentials, not the network.
                        let failures = failures.join("; ");
                        let (nodes, all) = if learnt_count == 0 {
                            ("seed node".to_owned(), "seed node".to_owned())
                        } else {
                            (
                                format!("seed node (nor any of {learnt_count} nodes learnt of)"),
                                format!("seed node (and each of {learnt_count} nodes learnt of)"),
                            )
                        };
                        if all_auth && !failures.is_empty() {
                            fail(
                                Failure::Auth,
                                format!("every {all} refused the login ({failures})"),
                            )
                        } else if failures.is_empty() {
                            fail(
                                Failure::Unavailable,
                                format!(
                                    "no {nodes} answered within {}",
                                    crate::duration::display(limit)
                                ),
                            )
                        } else {
                            fail(
                                Failure::Unavailable,
                                format!("no {nodes} answered ({failures})"),
                            )
                        }
                    })
            }
            (_, Some(sentinels)) => sentinels.connect_master(&self.dial, timeout, open),
            (Servers::Sentinel { .. }, None) => unreachable!("made with its sentinels"),
        }
        .map_err(|err| {
            // A refusal while logging in names the server already: once is enough.
            if err.to_string() == self.dial.shown {
                err
            } else {
                err.context(format!("connecting to {}", self.dial.shown))
            }
        })
    }
}

/// Servers a password goes to without TLS that the URL does not list
/// ([`Target::unlisted_in_clear`]).
pub(crate) enum Unlisted {
    /// The master the sentinels named (the URL lists the sentinels alone).
    Master(String),
    /// A Cluster's nodes (masters and replicas) that are not seeds; `None`: CLUSTER SLOTS could
    /// not be read.
    Nodes(Option<Vec<String>>),
}

/// Redirections a Cluster request may follow (a slot moved, or moving) before it fails.
const MAX_REDIRECTIONS: usize = 5;

/// The longest a Cluster request pauses in all for TRYAGAIN (within its command timeout): a
/// slot's keys moving to another node, as a reshard moves them, a slot at a time.
const TRYAGAIN_FOR: Duration = Duration::from_secs(4);

/// What is left of the time until `deadline` (at least a millisecond: a socket takes no zero
/// timeout, and a request with none left fails at once anyway).
fn left_until(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// The least a resent request is given (or all of a shorter command timeout): a resend left
/// with a millisecond would time out for certain, and a request that timed out may have run,
/// where one given up before it was sent again certainly did not.
fn resend_floor(timeout: Duration) -> Duration {
    (timeout / 2).min(Duration::from_millis(50))
}

/// Sleeps for `pause` when a request would still have [`resend_floor`] left after it; `false`
/// (at once) when it would not: the request ends rather than pause past its command timeout.
fn pause_within(pause: Duration, deadline: Instant, timeout: Duration) -> bool {
    if Instant::now() + pause + resend_floor(timeout) >= deadline {
        return false;
    }
    std::thread::sleep(pause);
    true
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
    con: Box<Connection>,
    address: Address,
    dial: Arc<Dial>,
    /// The connection is to a Cluster node: MOVED and ASK are followed.
    cluster: bool,
    command_timeout: Duration,
    /// A request went out on it since it was opened (logging in aside).
    used: bool,
}

impl Session {
    /// A session with a sentinel (or any server) at `address`, not logged in.
    fn new(
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
    fn log_in(&mut self, credentials: &Credentials, db: i64) -> anyhow::Result<()> {
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
    fn role(&mut self) -> anyhow::Result<Option<String>> {
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
    fn cluster_nodes(&mut self) -> anyhow::Result<Vec<Address>> {
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

#[cfg(test)]
mod tests {
    use super::{RedisUrl, redact_url};

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        assert_eq!(redact_url("redis://:s3cret@h:1/0"), "redis://:***@h:1");
        assert_eq!(redact_url("redis://u:s3cret@h:1/2"), "redis://u:***@h:1/2");
        assert_eq!(redact_url("redis://s3cret@h"), "redis://***@h:6379");
        assert_eq!(redact_url("redis://u:p@ss@h"), "redis://u:***@h:6379");
        assert_eq!(
            redact_url("redis+unix:///tmp/r.sock?db=1&pass=s3cret"),
            "unix:///tmp/r.sock?db=1&password=***"
        );
        // Not URLs: shown but for what could be a password (with an '@' past the host, all
        // but the scheme; a port that is no number, or of a host that does
        // not look like one, and all after it; query values that could be one).
        assert_eq!(redact_url(":s3cret@h"), "***@h");
        assert_eq!(
            redact_url("redis://default:abc/def+s3cret==@127.0.0.1:6500/0"),
            "redis://***"
        );
        assert_eq!(redact_url("redis://u:Pa?ss-s3cret@h"), "redis://***");
        assert_eq!(redact_url("redis://h:99999"), "redis://h:***");
        assert_eq!(
            redact_url("redis://127.0.0.1:6401/abc"),
            "redis://127.0.0.1:6401/abc"
        );
        assert_eq!(
            redact_url("redis://u:s3cret@10.0.0.1:6401/x?db=1&user=u&s3cret#s3cret"),
            "redis://u:***@10.0.0.1:6401/x?db=1&user=***&***#***"
        );
        assert_eq!(
            redact_url("redis://[::1]:6401/abc"),
            "redis://[::1]:6401/abc"
        );
        assert_eq!(redact_url("redis://user:5/s3cret"), "redis://user:***");
        assert_eq!(redact_url("redis:/h:6379"), "redis:/h:6379");
        assert_eq!(redact_url("redis://:s3cret"), "redis://:***");
        assert_eq!(redact_url("redis://default:s3cret"), "redis://default:***");
        assert_eq!(
            redact_url("unix://:s3cret@/tmp/redis.sock"),
            "unix:///tmp/redis.sock?password=***"
        );
        assert_eq!(redact_url("redis://h:x?password=s3cret"), "redis://h:***");
    }

    /// Every ASCII character, anywhere in a password, in every place a password can go: neither
    /// the shown form nor a parse error quotes any of it.
    #[test]
    fn no_password_survives_redaction_or_a_parse_error() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut passwords = Vec::new();
        for byte in 0..128_u8 {
            let c = char::from(byte);
            passwords.push(format!("{c}SECRETxyz"));
            passwords.push(format!("SECRET{c}xyz"));
            passwords.push(format!("SECRETxyz{c}"));
            passwords.push(format!("SEC{c}RET"));
        }
        for _ in 0..2_000 {
            let len = 1 + next() % 24;
            let mut password: String = (0..len)
                .map(|_| char::from(u8::try_from(next() % 128).unwrap()))
                .collect();
            password.insert_str(usize::try_from(next() % (len + 1)).unwrap(), "SECRET");
            passwords.push(password);
        }
        for password in &passwords {
            // A lone userinfo is a user name up to its first ':' (the URL's own rule).
            let lone = password.replace(':', "");
            for url in [
                format!("redis://user:{password}@127.0.0.1:6500/0"),
                format!("redis://:{password}@h"),
                format!("rediss://{lone}@h:1"),
                format!("redis+sentinel://:{password}@s1,s2/mymaster"),
                format!("redis://h?password={password}"),
                format!("unix:///tmp/s?pass={password}"),
                format!("unix://:{password}@/tmp/s"),
                // Without a host (a mistake): the rest after an '@' in the password would be
                // the host, by the URL's own rule; any other password is never shown.
                format!("redis://:{}", password.replace('@', "")),
                format!("redis://user:{}", password.replace('@', "")),
            ] {
                // Neither half of the marker, which a separator in the password may split.
                let quotes_it = |text: &str| text.contains("SEC") || text.contains("RET");
                let shown = redact_url(&url);
                assert!(!quotes_it(&shown), "{url:?} shown as {shown:?}");
                if let Err(why) = RedisUrl::parse(&url) {
                    assert!(!quotes_it(&why), "{url:?}: {why}");
                }
            }
        }
    }
}
