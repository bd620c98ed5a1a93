//! A Redis Cluster for tests: three masters (and one replica each, when asked) on free
//! loopback ports, made with `redis-cli --cluster create`. The nodes are `RedisServer`s and
//! stop in `Drop`.

use std::process::Command;
use std::time::Duration;

use super::{RedisServer, TempDir, wait_until};

pub struct Cluster {
    pub nodes: Vec<RedisServer>,
    _dir: TempDir,
}

impl Cluster {
    /// Three masters, with `replicas` replicas each (0 or 1), all slots covered.
    pub fn start(replicas: usize) -> Self {
        let dir = TempDir::new("cluster");
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|n| {
                let config = dir.path().join(format!("nodes-{n}.conf"));
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    config.to_str().unwrap(),
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli runs");
        assert!(
            created.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = Self { nodes, _dir: dir };
        let ready = wait_until(Duration::from_secs(30), || {
            cluster.nodes.iter().all(|node| {
                let info: String = node.cmd(&["CLUSTER", "INFO"]);
                let replication: String = node.cmd(&["INFO", "replication"]);
                // A replica serves a failover only once its first sync is done.
                let synced = !replication.contains("role:slave")
                    || (replication.contains("master_link_status:up")
                        && replication.contains("master_sync_in_progress:0"));
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{}", cluster.nodes.len()))
                    && synced
            })
        });
        assert!(ready, "the cluster did not come up");
        cluster
    }

    /// `redis+cluster://` with the first node as the only seed.
    pub fn url(&self) -> String {
        format!("redis+cluster://127.0.0.1:{}", self.nodes[0].port)
    }

    /// The node serving `key`'s slot now (as the first node sees it).
    pub fn node_of(&self, key: &str) -> &RedisServer {
        let slot: i64 = self.nodes[0].cmd(&["CLUSTER", "KEYSLOT", key]);
        let port = self.port_of_slot(slot);
        self.nodes.iter().find(|node| node.port == port).unwrap()
    }

    /// The port of the master serving `slot`, from CLUSTER SLOTS on the first node.
    pub fn port_of_slot(&self, slot: i64) -> u16 {
        let ranges: Vec<redis::Value> = self.nodes[0].cmd(&["CLUSTER", "SLOTS"]);
        for range in ranges {
            let range: Vec<redis::Value> = redis::from_redis_value(range).unwrap();
            let start: i64 = redis::from_redis_value(range[0].clone()).unwrap();
            let end: i64 = redis::from_redis_value(range[1].clone()).unwrap();
            if (start..=end).contains(&slot) {
                let master: Vec<redis::Value> = redis::from_redis_value(range[2].clone()).unwrap();
                let port: i64 = redis::from_redis_value(master[1].clone()).unwrap();
                return u16::try_from(port).unwrap();
            }
        }
        panic!("slot {slot} is not served");
    }

    /// The node id of `node`.
    pub fn id(node: &RedisServer) -> String {
        node.cmd(&["CLUSTER", "MYID"])
    }

    /// `redis+cluster://` with every node as a seed: redlock still finds the Cluster when some
    /// of them are down.
    pub fn seeds_url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Moves `slot` and its keys from `from` to `to`, as `redis-cli --cluster reshard` does,
    /// telling every master the new owner.
    pub fn migrate(&self, slot: i64, from: &RedisServer, to: &RedisServer) {
        self.begin_migration(slot, from, to);
        self.end_migration(slot, to);
    }

    /// The first half of [`Self::migrate`]: `slot` marked IMPORTING on `to` and MIGRATING on
    /// `from`, and its keys moved. Until [`Self::end_migration`], `from` answers a request for
    /// the slot with ASK (none of its keys is there) and `to` serves it after ASKING.
    pub fn begin_migration(&self, slot: i64, from: &RedisServer, to: &RedisServer) {
        Self::mark_migration(slot, from, to);
        Self::move_keys(&slot.to_string(), from, to);
    }

    /// `slot` marked IMPORTING on `to` and MIGRATING on `from`, its keys left where they are:
    /// `from` still serves a request whose keys it all has (TRYAGAIN when it has some).
    pub fn mark_migration(slot: i64, from: &RedisServer, to: &RedisServer) {
        let (from_id, to_id) = (Self::id(from), Self::id(to));
        let slot = slot.to_string();
        to.cmd::<()>(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
        from.cmd::<()>(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
    }

    /// Moves the keys of `slot` still on `from` to `to` (MIGRATE, 100 at a time).
    pub fn move_keys(slot: &str, from: &RedisServer, to: &RedisServer) {
        loop {
            let keys: Vec<String> = from.cmd(&["CLUSTER", "GETKEYSINSLOT", slot, "100"]);
            if keys.is_empty() {
                break;
            }
            let mut migrate = vec![
                "MIGRATE".to_owned(),
                "127.0.0.1".to_owned(),
                to.port.to_string(),
                String::new(),
                "0".to_owned(),
                "5000".to_owned(),
                "KEYS".to_owned(),
            ];
            migrate.extend(keys);
            let migrate: Vec<&str> = migrate.iter().map(String::as_str).collect();
            from.cmd::<()>(&migrate);
        }
    }

    /// The second half of [`Self::migrate`]: every master told that `to` owns `slot`.
    pub fn end_migration(&self, slot: i64, to: &RedisServer) {
        let (to_id, slot) = (Self::id(to), slot.to_string());
        for node in &self.nodes {
            let role: Vec<redis::Value> = node.cmd(&["ROLE"]);
            if redis::from_redis_value::<String>(role[0].clone()).unwrap() == "master" {
                node.cmd::<()>(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
            }
        }
    }
}
