//! A target: the servers one URL names (one Redis, Sentinel, a Cluster's seeds) and how a
//! connection to the one that serves now is found: the master the sentinels name, a seed
//! that answers, within the connect timeout; and the servers a password would reach in clear.

use super::*;

impl Target {
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

    /// Whether every wait of a request to this target can be a `poll` (see `interrupt`): one
    /// server over TCP (a host name is looked up on a thread of its own, whose answer is
    /// polled: `lookup::look_up`). Not the connect of a Unix socket whose server has a full
    /// backlog; a Sentinel or Cluster target may send a request to any server it learns of.
    pub(crate) fn pollable(&self) -> bool {
        match &self.servers {
            Servers::Single(Address::Tcp { .. }) => true,
            Servers::Single(Address::Unix(_))
            | Servers::Sentinel { .. }
            | Servers::Cluster { .. } => false,
        }
    }

    /// Parses `url` and checks `access` against it. Errors are usage errors that say why, and
    /// never contain a password.
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
    /// The caller's own bound on a worker that went quiet (the connect of a Unix socket has no
    /// timeout of ours).
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
