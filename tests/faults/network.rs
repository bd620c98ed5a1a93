//! The network fault harness: real packets dropped, refused and cut between real processes.
//!
//! A [`Net`] is a set of network namespaces the test creates: one router, and "hosts" linked
//! to it by a veth pair each, host N at 10.77.N.2/30 with the router at 10.77.N.1 (addresses
//! that exist only inside these namespaces: nothing of the machine's own network is touched).
//! Every Redis, and every group of clients a row needs, runs in a host of its own
//! ([`NetRedis`], [`Host::redlock`]). Faults are nft rules inside a host's namespace: its
//! packets dropped or refused, to everyone or to some hosts ([`Host::drop_all`],
//! [`Host::reject_all`], [`Host::drop_between`], [`Net::partition`]), or flapping
//! ([`Host::flap`]), or only the first SYN of each peer ([`Host::drop_first_syn`]); or its
//! link taken down ([`Host::cut`]); or the suite's proxy placed in the host to delay or stall
//! it ([`Host::proxy`]); [`Host::heal`] undoes them all. The test itself reaches every server
//! over a Unix socket, which no network fault touches: the oracles see the servers whatever
//! the clients see.
//!
//! Namespaces are named after the test process's pid and a counter, so parallel tests do not
//! collide, and are deleted in `Drop` with every process still in them, even when a test
//! fails. Namespaces left by a test process that died (SIGKILL) are deleted by the next one.
//! Without root, ip(8) or nft(8), [`Net::start`] says what is missing and the rows are skipped.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::harness::{Proxy, Sampler};
use crate::util::{Redlock, TempDir, wait_until};

/// The port every Redis listens on in its host (each host has an address of its own).
pub(super) const REDIS_PORT: u16 = 7379;
/// The port every sentinel listens on in its host.
pub(super) const SENTINEL_PORT: u16 = 26379;

/// The interface of a host on its link (its peer on the router is `l<N>`).
const LINK: &str = "eth0";
/// The nft table a host's faults live in.
const TABLE: &str = "redlock_fault";

static NEXT_NET: AtomicUsize = AtomicUsize::new(0);

/// Runs `program args` (with `input` on stdin); its stderr when it fails.
fn run(program: &str, args: &[&str], input: Option<&str>) -> Result<(), String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("{program}: {err}"))?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        use std::io::Write as _;
        stdin
            .write_all(input.as_bytes())
            .map_err(|err| format!("{program}: {err}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|err| format!("{program}: {err}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Runs `program args` and fails the test if it fails: the harness's own steps.
#[track_caller]
fn must(program: &str, args: &[&str], input: Option<&str>) {
    if let Err(err) = run(program, args, input) {
        panic!("network harness: {err}");
    }
}

/// Kills every process in namespace `ns` (continued first: a stopped one would linger) and
/// deletes it.
fn remove_namespace(ns: &str) {
    let pids = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    for pid in pids
        .split_whitespace()
        .filter_map(|pid| pid.parse::<i32>().ok())
    {
        let pid = nix::unistd::Pid::from_raw(pid);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    }
    let _ = run("ip", &["netns", "delete", ns], None);
}

/// Deletes the namespaces of test processes that are gone (named `rl<pid>n...`).
fn remove_abandoned_namespaces() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix("rl")
            .and_then(|rest| rest.split_once('n'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            remove_namespace(name);
        }
    }
}

/// A router namespace and the hosts linked to it; everything is removed in `Drop`.
pub(super) struct Net {
    prefix: String,
    router: String,
    hosts: Vec<Host>,
}

impl Net {
    /// Creates the router, or says what this machine lacks (for [`super::harness::skip`]).
    pub(super) fn start() -> Result<Self, String> {
        remove_abandoned_namespaces();
        let prefix = format!(
            "rl{}n{}",
            std::process::id(),
            NEXT_NET.fetch_add(1, Ordering::Relaxed)
        );
        let router = format!("{prefix}r");
        run("ip", &["netns", "add", &router], None)
            .map_err(|err| format!("root and network namespaces ({err})"))?;
        // From here on `Drop` removes the router, whatever fails next.
        let net = Self {
            prefix,
            router,
            hosts: Vec::new(),
        };
        let router = net.router.as_str();
        run("ip", &["-n", router, "link", "set", "lo", "up"], None)
            .map_err(|err| format!("ip(8) in a network namespace ({err})"))?;
        // Forwarding in the router's namespace only: sysctls under net/ are per namespace.
        run(
            "ip",
            &[
                "netns",
                "exec",
                router,
                "sh",
                "-c",
                "echo 1 > /proc/sys/net/ipv4/ip_forward",
            ],
            None,
        )
        .map_err(|err| format!("forwarding in a network namespace ({err})"))?;
        run(
            "ip",
            &["netns", "exec", router, "nft", "list", "ruleset"],
            None,
        )
        .map_err(|err| format!("nft(8) in a network namespace ({err})"))?;
        Ok(net)
    }

    /// A new host: a namespace of its own, linked to the router, reachable from every other
    /// host at [`Host::addr`].
    pub(super) fn host(&mut self) -> Host {
        let index = self.hosts.len() + 1;
        assert!(index < 250, "a network of at most 249 hosts");
        let ns = format!("{}h{index}", self.prefix);
        let host = Host {
            ns: ns.clone(),
            addr: Ipv4Addr::new(10, 77, index as u8, 2),
            gateway: Ipv4Addr::new(10, 77, index as u8, 1),
        };
        must("ip", &["netns", "add", &ns], None);
        self.hosts.push(host.clone());
        let router = self.router.as_str();
        let peer = format!("l{index}");
        must(
            "ip",
            &[
                "-n", router, "link", "add", &peer, "type", "veth", "peer", "name", LINK, "netns",
                &ns,
            ],
            None,
        );
        let gateway = format!("{}/30", host.gateway);
        let addr = format!("{}/30", host.addr);
        must(
            "ip",
            &["-n", router, "addr", "add", &gateway, "dev", &peer],
            None,
        );
        must("ip", &["-n", router, "link", "set", &peer, "up"], None);
        must("ip", &["-n", &ns, "link", "set", "lo", "up"], None);
        must("ip", &["-n", &ns, "addr", "add", &addr, "dev", LINK], None);
        must("ip", &["-n", &ns, "link", "set", LINK, "up"], None);
        host.route();
        host
    }

    /// Cuts `one` side from the `other` (packets between them dropped, both ways); each side
    /// keeps its own links. [`Host::heal`] on every host of both sides ends it.
    pub(super) fn partition(&self, one: &[&Host], other: &[&Host]) {
        for host in one {
            host.drop_between(other);
        }
        for host in other {
            host.drop_between(one);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for host in &self.hosts {
            remove_namespace(&host.ns);
        }
        remove_namespace(&self.router);
    }
}

/// One host of a [`Net`]: a network namespace with one link to the router.
#[derive(Debug, Clone)]
pub(super) struct Host {
    pub(super) ns: String,
    pub(super) addr: Ipv4Addr,
    gateway: Ipv4Addr,
}

impl Host {
    /// The default route through the router (gone whenever the link went down).
    fn route(&self) {
        let gateway = self.gateway.to_string();
        must(
            "ip",
            &[
                "-n", &self.ns, "route", "replace", "default", "via", &gateway, "dev", LINK,
            ],
            None,
        );
    }

    /// Replaces this host's fault rules with `input` and `output` (nft rule lines).
    fn rules(&self, input: &[String], output: &[String]) {
        self.rules_with("", input, output);
    }

    /// Like [`Self::rules`], with `declarations` (sets) in the table beside the chains.
    fn rules_with(&self, declarations: &str, input: &[String], output: &[String]) {
        let script = format!(
            "table inet {TABLE} {{}}\ndelete table inet {TABLE}\ntable inet {TABLE} {{\n{}\n\
             chain input {{\ntype filter hook input priority 0; policy accept;\n{}\n}}\n\
             chain output {{\ntype filter hook output priority 0; policy accept;\n{}\n}}\n}}\n",
            declarations,
            input.join("\n"),
            output.join("\n")
        );
        must(
            "ip",
            &["netns", "exec", &self.ns, "nft", "-f", "-"],
            Some(&script),
        );
    }

    /// Every packet on the host's link is dropped, both ways: its peers see silence.
    pub(super) fn drop_all(&self) {
        self.rules(
            &[format!("iifname \"{LINK}\" drop")],
            &[format!("oifname \"{LINK}\" drop")],
        );
    }

    /// Every packet on the host's link is refused: a TCP reset (ICMP unreachable for the
    /// rest) comes back at once, to its peers and to its own processes alike.
    pub(super) fn reject_all(&self) {
        self.rules(
            &[
                format!("iifname \"{LINK}\" meta l4proto tcp reject with tcp reset"),
                format!("iifname \"{LINK}\" reject"),
            ],
            &[
                // The resets the input rules send must get out.
                format!("oifname \"{LINK}\" tcp flags rst accept"),
                format!("oifname \"{LINK}\" meta l4proto tcp reject with tcp reset"),
                format!("oifname \"{LINK}\" reject"),
            ],
        );
    }

    /// Packets between this host and `peers` are dropped, both ways; the rest pass.
    pub(super) fn drop_between(&self, peers: &[&Host]) {
        let set = peers
            .iter()
            .map(|peer| peer.addr.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        self.rules(
            &[format!("iifname \"{LINK}\" ip saddr {{ {set} }} drop")],
            &[format!("oifname \"{LINK}\" ip daddr {{ {set} }} drop")],
        );
    }

    /// The first SYN each peer sends to `port` here is dropped, and only that one: a peer's
    /// next SYN passes, whether the kernel sent it again on the same socket (a second later,
    /// RFC 6298) or the peer opened another socket. Installing the rules again forgets the
    /// peers seen; [`Self::syns_dropped`] counts the drops since.
    pub(super) fn drop_first_syn(&self, port: u16) {
        self.rules_with(
            "set seen { type ipv4_addr; flags dynamic; }",
            &[format!(
                "iifname \"{LINK}\" tcp dport {port} tcp flags & (syn | ack) == syn \
                 ip saddr != @seen add @seen {{ ip saddr }} counter drop"
            )],
            &[],
        );
    }

    /// How many SYNs [`Self::drop_first_syn`] dropped since it was installed.
    pub(super) fn syns_dropped(&self) -> u64 {
        let out = self
            .command("nft")
            .args(["list", "table", "inet", TABLE])
            .output()
            .expect("nft list table");
        let listed = String::from_utf8_lossy(&out.stdout);
        listed
            .split_once("counter packets ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|count| count.parse().ok())
            .unwrap_or_else(|| panic!("no counter in the host's rules:\n{listed}"))
    }

    /// The link goes down (a cable pulled): the host's own connects fail at once (network
    /// unreachable), its peers see silence.
    pub(super) fn cut(&self) {
        must("ip", &["-n", &self.ns, "link", "set", LINK, "down"], None);
    }

    /// Every fault of this host ends: no rules, the link up, the route back.
    pub(super) fn heal(&self) {
        self.rules(&[], &[]);
        must("ip", &["-n", &self.ns, "link", "set", LINK, "up"], None);
        self.route();
    }

    /// Drops every packet on the link for `down`, then lets them pass for `up`, `times` times
    /// (up first), in a thread; healed when it ends or is stopped.
    pub(super) fn flap(&self, down: Duration, up: Duration, times: u64) -> Flapper {
        let stop = Arc::new(AtomicBool::new(false));
        let host = self.clone();
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                // Sleeps in short steps so that a stop is seen at once; false when stopped.
                let nap = |length: Duration| {
                    let until = Instant::now() + length;
                    while Instant::now() < until {
                        if stop.load(Ordering::SeqCst) {
                            return false;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    true
                };
                let mut flaps = 0;
                for _ in 0..times {
                    if !nap(up) {
                        break;
                    }
                    host.drop_all();
                    flaps += 1;
                    let going_on = nap(down);
                    host.heal();
                    if !going_on {
                        break;
                    }
                }
                flaps
            })
        };
        Flapper {
            stop,
            thread: Some(thread),
        }
    }

    /// The suite's proxy ([`Proxy`]), listening on this host's loopback and forwarding to
    /// `upstream` from this host: the host's clients reach Redis through it (`Proxy::url`), and
    /// the host's own faults apply to its upstream side.
    pub(super) fn proxy(&self, upstream: SocketAddr) -> Proxy {
        let namespace = PathBuf::from(format!("/run/netns/{}", self.ns));
        // The proxy's threads are started from a thread inside the namespace, and stay there.
        std::thread::spawn(move || {
            let file = std::fs::File::open(&namespace)
                .unwrap_or_else(|err| panic!("{}: {err}", namespace.display()));
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .unwrap_or_else(|err| panic!("setns {}: {err}", namespace.display()));
            Proxy::start_to(upstream)
        })
        .join()
        .expect("start the proxy in the host")
    }

    /// A `redlock` invocation running in this host.
    pub(super) fn redlock(&self, args: &[&str]) -> Redlock {
        Redlock::new(args).inside(&["ip", "netns", "exec", &self.ns])
    }

    /// A command running in this host.
    pub(super) fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.ns, program]);
        command
    }
}

/// A flapping link ([`Host::flap`]).
pub(super) struct Flapper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<u64>>,
}

impl Flapper {
    /// Waits for the flaps to end; how many there were.
    pub(super) fn join(mut self) -> u64 {
        self.thread
            .take()
            .map_or(0, |thread| thread.join().expect("the flapping thread"))
    }
}

impl Drop for Flapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A redis-server (or sentinel) in a host, listening on the host's address and on a Unix
/// socket the test uses; killed in `Drop`.
pub(super) struct NetRedis {
    child: Child,
    dir: TempDir,
    pub(super) host: Host,
    pub(super) port: u16,
}

impl NetRedis {
    /// A server on `port` in `host`, with extra `redis-server` arguments.
    pub(super) fn start(host: &Host, port: u16, extra: &[&str]) -> Self {
        Self::launch(host, port, None, extra)
    }

    /// A sentinel on [`SENTINEL_PORT`] in `host`, watching `master` as service `mymaster`
    /// (quorum 2; quick to act, as tests/util/sentinel.rs's).
    pub(super) fn start_sentinel(host: &Host, master: &NetRedis) -> Self {
        let config = format!(
            "sentinel monitor mymaster {} {} 2\n\
             sentinel down-after-milliseconds mymaster 1000\n\
             sentinel failover-timeout mymaster 3000\n\
             sentinel parallel-syncs mymaster 1\n",
            master.host.addr, master.port
        );
        Self::launch(host, SENTINEL_PORT, Some(&config), &["--sentinel"])
    }

    fn launch(host: &Host, port: u16, config: Option<&str>, extra: &[&str]) -> Self {
        let dir = TempDir::new("netredis");
        let socket = dir.path().join("redis.sock");
        let mut command = host.command("redis-server");
        if let Some(config) = config {
            let path = dir.path().join("sentinel.conf");
            std::fs::write(&path, config).unwrap();
            command.arg(path);
        }
        let child = command
            .args(["--port", &port.to_string(), "--bind", "0.0.0.0"])
            .args(["--protected-mode", "no", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--unixsocketperm", "700"])
            .arg("--unixsocket")
            .arg(&socket)
            .arg("--dir")
            .arg(dir.path())
            .arg("--logfile")
            .arg(dir.path().join("redis.log"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ip netns exec redis-server");
        let server = Self {
            child,
            dir,
            host: host.clone(),
            port,
        };
        let up = wait_until(Duration::from_secs(10), || {
            server
                .try_cmd::<String>(&["PING"])
                .is_ok_and(|pong| pong == "PONG")
        });
        assert!(
            up,
            "redis-server did not start in {}:\n{}",
            host.ns,
            server.log()
        );
        server
    }

    /// The URL clients use: the host's address.
    pub(super) fn url(&self) -> String {
        format!("redis://{}:{}", self.host.addr, self.port)
    }

    /// The test's own way in, which no network fault touches.
    pub(super) fn socket_url(&self) -> String {
        format!("unix://{}", self.dir.path().join("redis.sock").display())
    }

    pub(super) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    /// Runs one command over the Unix socket.
    pub(super) fn try_cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        let client = redis::Client::open(self.socket_url())?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(5))?;
        con.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut con)
    }

    /// Runs one command over the Unix socket; fails the test if it fails.
    #[track_caller]
    pub(super) fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        self.try_cmd(args)
            .unwrap_or_else(|err| panic!("{args:?}: {err}\nserver log:\n{}", self.log()))
    }

    /// The suite's sampler, over the Unix socket.
    pub(super) fn sampler(&self, ttl: Duration) -> Sampler {
        Sampler::start_url(self.socket_url(), ttl)
    }

    /// Whether `token` holds lock `key` here: its field in the holders hash (which expires
    /// with the lease on the server's clock).
    pub(super) fn holds(&self, key: &str, token: &str) -> bool {
        self.try_cmd::<bool>(&["HEXISTS", &format!("redlock:{{{key}}}:holders"), token])
            .unwrap_or(false)
    }

    /// The tokens holding lock `key` here.
    pub(super) fn holders(&self, key: &str) -> Vec<String> {
        self.try_cmd(&["HKEYS", &format!("redlock:{{{key}}}:holders")])
            .unwrap_or_default()
    }
}

impl Drop for NetRedis {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGCONT,
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The network harness itself: faults reach the clients and only them, and everything it
/// creates is gone after `Drop`.
#[test]
fn the_network_harness_drops_refuses_cuts_and_cleans_up() {
    let mut net = match Net::start() {
        Ok(net) => net,
        Err(needs) => {
            println!("SKIPPED: needs {needs} (the network harness's own test)");
            return;
        }
    };
    let redis_host = net.host();
    let client = net.host();
    let bystander = net.host();
    let server = NetRedis::start(&redis_host, REDIS_PORT, &[]);
    // Whether a PING from `host` through `port` on `addr` is answered within a second and a
    // half, and how long it took to find out.
    let ping_at = |host: &Host, addr: Ipv4Addr, port: u16| -> (bool, Duration) {
        let started = Instant::now();
        let out = host
            .command("timeout")
            .args(["1.5", "redis-cli", "-h", &addr.to_string()])
            .args(["-p", &port.to_string(), "PING"])
            .output()
            .expect("timeout and redis-cli");
        let answered = String::from_utf8_lossy(&out.stdout).contains("PONG");
        (answered, started.elapsed())
    };
    let ping = |host: &Host| ping_at(host, server.host.addr, REDIS_PORT);
    assert!(ping(&client).0);

    client.drop_all();
    let (answered, took) = ping(&client);
    assert!(!answered, "a dropped link answered");
    assert!(
        took >= Duration::from_millis(1400),
        "dropped, but failed in {took:?}"
    );
    assert!(ping(&bystander).0, "a fault reached another host");
    assert_eq!(
        server.cmd::<String>(&["PING"]),
        "PONG",
        "the Unix socket was cut"
    );

    client.reject_all();
    let (answered, took) = ping(&client);
    assert!(!answered, "a refusing link answered");
    assert!(
        took < Duration::from_millis(1000),
        "refused, but failed after {took:?}"
    );

    client.heal();
    assert!(ping(&client).0, "healed, but no answer");
    client.cut();
    assert!(!ping(&client).0, "a cut link answered");
    client.heal();
    net.partition(&[&client], &[&redis_host]);
    assert!(!ping(&client).0, "a partition let a packet through");
    assert!(ping(&bystander).0, "a partition reached another host");
    client.heal();
    redis_host.heal();
    assert!(ping(&client).0);

    // The proxy inside the client's host stalls what goes through it.
    let proxy = client.proxy(SocketAddr::from((server.host.addr, REDIS_PORT)));
    proxy.set(super::harness::Link::Stall);
    let loopback = Ipv4Addr::LOCALHOST;
    assert!(
        !ping_at(&client, loopback, proxy.port).0,
        "a stalled proxy answered"
    );
    proxy.set(super::harness::Link::Pass);
    assert!(
        ping_at(&client, loopback, proxy.port).0,
        "the proxy does not pass"
    );
    drop(proxy);

    let namespaces = [client.ns.clone(), redis_host.ns.clone(), net.router.clone()];
    let pid = server.child.id();
    drop(server);
    drop(net);
    let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    for ns in namespaces {
        assert!(!listed.contains(&ns), "{ns} is left behind");
    }
    assert!(!crate::util::alive(pid), "redis-server is left behind");
}
