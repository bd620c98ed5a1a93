//! A Sentinel setup for tests: one master, one or more replicas and three sentinels (quorum 2)
//! on free loopback ports, quick to act (`down-after-milliseconds 1000`, `failover-timeout 3000`). The
//! servers are `RedisServer`s and stop in `Drop` like any other.

use std::time::Duration;

use super::{RedisServer, TempDir, wait_until};

pub const SERVICE: &str = "mymaster";

pub struct Sentinels {
    pub master: RedisServer,
    pub replicas: Vec<RedisServer>,
    pub sentinels: Vec<RedisServer>,
    _dir: TempDir,
}

impl Sentinels {
    /// One master and one replica.
    pub fn start() -> Self {
        Self::start_with_replicas(1)
    }

    /// Starts everything and waits until the sentinels know the master, its replicas and each
    /// other, and every replica is in sync.
    pub fn start_with_replicas(count: usize) -> Self {
        Self::start_with(&vec![&[][..]; count])
    }

    /// Like [`Self::start_with_replicas`], one replica per entry, started with its extra
    /// arguments (`["--replica-priority", "0"]`: never promoted).
    pub fn start_with(replica_args: &[&[&str]]) -> Self {
        let count = replica_args.len();
        let master = RedisServer::start();
        let replicas: Vec<RedisServer> = replica_args
            .iter()
            .map(|args| {
                let mut all = vec!["--replicaof", "127.0.0.1"];
                let port = master.port.to_string();
                all.push(&port);
                all.extend_from_slice(args);
                RedisServer::start_with(&all)
            })
            .collect();
        let dir = TempDir::new("sentinels");
        let sentinels: Vec<RedisServer> = (0..3)
            .map(|n| {
                let config = dir.path().join(format!("sentinel-{n}.conf"));
                std::fs::write(
                    &config,
                    format!(
                        "sentinel monitor {SERVICE} 127.0.0.1 {port} 2\n\
                         sentinel down-after-milliseconds {SERVICE} 1000\n\
                         sentinel failover-timeout {SERVICE} 3000\n\
                         sentinel parallel-syncs {SERVICE} 1\n",
                        port = master.port
                    ),
                )
                .unwrap();
                RedisServer::start_sentinel(&config)
            })
            .collect();
        let set = Self {
            master,
            replicas,
            sentinels,
            _dir: dir,
        };
        let ready = wait_until(Duration::from_secs(30), || {
            let replication: String = set.master.cmd(&["INFO", "replication"]);
            replication.matches(",state=online,").count() == count
                && set.sentinels.iter().all(|sentinel| {
                    let info: String = sentinel.cmd(&["INFO", "sentinel"]);
                    info.contains(&format!("slaves={count},sentinels=3"))
                })
        });
        assert!(
            ready,
            "the sentinels did not find each other and the replicas"
        );
        set
    }

    /// `redis+sentinel://` naming every sentinel.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|sentinel| format!("127.0.0.1:{}", sentinel.port))
            .collect();
        format!("redis+sentinel://{}/{SERVICE}", hosts.join(","))
    }

    /// The master's port as the first sentinel tells it.
    pub fn master_port(&self) -> u16 {
        let (_, port): (String, u16) =
            self.sentinels[0].cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]);
        port
    }

    /// The server on `port`: the master or one of the replicas.
    pub fn server(&self, port: u16) -> &RedisServer {
        std::iter::once(&self.master)
            .chain(&self.replicas)
            .find(|server| server.port == port)
            .expect("a server of the set")
    }

    /// Asks for a failover and waits until every sentinel names a replica as master.
    pub fn fail_over(&self) {
        let before = self.master_port();
        self.sentinels[0].cmd::<()>(&["SENTINEL", "FAILOVER", SERVICE]);
        let done = wait_until(Duration::from_secs(20), || {
            self.sentinels.iter().all(|sentinel| {
                let (_, port): (String, u16) =
                    sentinel.cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]);
                port != before
            })
        });
        assert!(done, "no failover within 20 s");
    }
}
