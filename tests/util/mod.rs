//! Test harness: a private `redis-server` per test and a builder that runs the real `redlock`
//! binary against it. Failures print the command, its status, stdout, stderr and the server log.
//!
//! Servers listen on a free loopback port (never 6379), keep nothing on disk, live in their own
//! directory under Cargo's test temp dir, and are killed and reaped in `Drop`.

#![allow(dead_code, unreachable_pub)]

pub mod cluster;
pub mod dist;
pub mod fake_clock;
pub mod pki;
pub mod podman;
pub mod releases;
pub mod sentinel;

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Path of the binary under test.
pub const REDLOCK: &str = env!("CARGO_BIN_EXE_redlock");

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory under Cargo's test temp dir, removed by [`TempDir`]'s `Drop`.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create test dir");
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether nobody listens on `port` right now.
fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// Fails with the reason when this process ignores SIGINT or SIGQUIT: the tests send them to
/// redlock, which would inherit the ignoring through exec and honour it (as under nohup), and
/// those tests would fail without saying why. A shell without job control starts a background
/// job so (`cargo test &` in a script); .ci/run and tests/faults/run reset both themselves.
fn require_default_signals() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let ignored = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .unwrap_or(0);
    let bit = |signal: nix::sys::signal::Signal| 1u64 << (signal as i32 - 1);
    assert!(
        ignored & (bit(nix::sys::signal::SIGINT) | bit(nix::sys::signal::SIGQUIT)) == 0,
        "the tests run with SIGINT or SIGQUIT ignored (SigIgn {ignored:#x}: a background job of a \
         shell without job control?), and the tests that send them would fail: run them with \
         `env --default-signal=INT,QUIT cargo test ...` or from a shell with job control"
    );
}

/// A private redis-server.
pub struct RedisServer {
    child: Child,
    /// The server binary: Debian's `redis-server`, or another release (see [`releases`]).
    binary: PathBuf,
    pub port: u16,
    password: Option<String>,
    dir: TempDir,
    extra: Vec<String>,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (e.g. `["--requirepass", "pw"]`).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_binary(Path::new("redis-server"), extra)
    }

    /// Starts `binary` (another release of Redis, or Valkey) with extra arguments.
    pub fn start_binary(binary: &Path, extra: &[&str]) -> Self {
        require_default_signals();
        let password = extra
            .iter()
            .position(|arg| *arg == "--requirepass")
            .map(|at| extra[at + 1].to_owned());
        let mut last_log = String::new();
        // A Cluster node also listens on its port + 10000 (the cluster bus).
        let cluster = extra.contains(&"--cluster-enabled");
        for _attempt in 0..5 {
            let dir = TempDir::new("redis");
            let mut port = free_port();
            while cluster && (port > 55_535 || !port_is_free(port + 10_000)) {
                port = free_port();
            }
            match launch(binary, &dir, port, extra) {
                Ok(child) => {
                    return Self {
                        child,
                        binary: binary.to_owned(),
                        port,
                        password,
                        dir,
                        extra: extra.iter().map(|arg| (*arg).to_owned()).collect(),
                    };
                }
                Err(log) => last_log = log,
            }
        }
        panic!("redis-server did not start after 5 attempts; last log:\n{last_log}");
    }

    /// A sentinel (`redis-server CONFIG --sentinel`) with `config` as its writable config
    /// file, on a free port.
    pub fn start_sentinel(config: &Path) -> Self {
        let config = config.display().to_string();
        let mut server = Self::start_with(&[]);
        server.kill();
        server.extra = vec![config, "--sentinel".to_owned()];
        server.restart();
        server
    }

    /// A server that also listens with TLS on [`Self::tls_port`], with `cert` (and its key)
    /// and the CA of `pki`; `auth_clients` is `no`, `optional` or `yes`. The plaintext port
    /// stays open for the tests' own checks.
    pub fn start_tls(pki: &pki::Pki, cert: &str, auth_clients: &str) -> (Self, u16) {
        let tls_port = free_port();
        let (port, cert, key, ca) = (
            tls_port.to_string(),
            pki.cert(cert).display().to_string(),
            pki.key(cert).display().to_string(),
            pki.cert("ca").display().to_string(),
        );
        let server = Self::start_with(&[
            "--tls-port",
            &port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            auth_clients,
        ]);
        (server, tls_port)
    }

    /// Kills the server (SIGKILL: nothing is saved) and starts a fresh one on the same port,
    /// with the same arguments and directory.
    pub fn restart(&mut self) {
        self.kill();
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match launch(&self.binary, &self.dir, self.port, &extra) {
                Ok(child) => {
                    self.child = child;
                    return;
                }
                // The port may still be held for a moment.
                Err(log) if Instant::now() >= deadline => {
                    panic!("redis-server did not restart on port {}:\n{log}", self.port)
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Kills the server and waits for it to be gone.
    pub fn kill(&mut self) {
        if alive(self.child.id()) {
            send_signal(self.child.id(), "CONT");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// URL without credentials.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A direct client connection, for setting up and checking state.
    pub fn client(&self) -> redis::Connection {
        let mut url = self.url();
        if let Some(password) = &self.password {
            url = format!("redis://:{password}@127.0.0.1:{}", self.port);
        }
        // No CLIENT SETINFO: Redis 7.0 answers it with an error, which would count in the
        // server's error statistics that tests read.
        let info = redis::IntoConnectionInfo::into_connection_info(url.as_str()).unwrap();
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let con = redis::Client::open(info.set_redis_settings(settings))
            .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(5)))
            .expect("test client connects");
        con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        con
    }

    /// A session of redlock's own library with the server (5 s to connect, 5 s per command):
    /// for tests that drive the lock engine directly.
    pub fn session(&self) -> redlock::conn::Session {
        let access = redlock::conn::Access {
            connect_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(5),
            ..redlock::conn::Access::default()
        };
        redlock::conn::Target::new(&self.url(), access)
            .and_then(|target| target.connect())
            .expect("connect")
    }

    /// The server's clock (TIME), in Unix ms.
    pub fn time_ms(&self) -> u64 {
        let time: Vec<String> = self.cmd(&["TIME"]);
        time[0].parse::<u64>().unwrap() * 1000 + time[1].parse::<u64>().unwrap() / 1000
    }

    /// Runs one Redis command and returns its reply.
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut self.client())
            .unwrap_or_else(|err| panic!("{args:?}: {err}\nserver log:\n{}", self.log()))
    }

    /// A counter of INFO stats (`total_connections_received`, `total_error_replies`, ...).
    /// Each call is a connection of its own, which counts in `total_connections_received`.
    pub fn stat(&self, field: &str) -> u64 {
        let info: String = self.cmd(&["INFO", "stats"]);
        info.lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in INFO stats:\n{info}"))
    }

    /// How many times the server ran or refused any of `commands` (lower case) since it
    /// started or its statistics were reset (INFO commandstats: calls and rejected calls).
    pub fn calls(&self, commands: &[&str]) -> u64 {
        let info: String = self.cmd(&["INFO", "commandstats"]);
        let count = |stats: &str, name: &str| -> u64 {
            stats
                .split(',')
                .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        info.lines()
            .filter_map(|line| line.strip_prefix("cmdstat_")?.split_once(':'))
            .filter(|(command, _)| commands.contains(command))
            .map(|(_, stats)| count(stats, "calls") + count(stats, "rejected_calls"))
            .sum()
    }

    /// Every key in the server, sorted.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.cmd(&["KEYS", "*"]);
        keys.sort();
        keys
    }

    /// Every key but the locks' histories (which outlive a hold by design, with an expiry),
    /// sorted: what a lock leaves behind.
    pub fn keys_but_history(&self) -> Vec<String> {
        let mut keys = self.keys();
        keys.retain(|key| !key.ends_with(":history"));
        keys
    }

    /// Starts recording every command the server runs (MONITOR).
    pub fn monitor(&self) -> Monitor {
        let mut con = self.client();
        con.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        con.send_packed_command(&redis::cmd("MONITOR").get_packed_command())
            .unwrap();
        // The OK: from here on every command is seen.
        let _ = con.recv_response().expect("MONITOR is accepted");
        let stop = Arc::new(AtomicBool::new(false));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, lines) = (Arc::clone(&stop), Arc::clone(&lines));
            // Bounded: a monitor that is never stopped ends after a minute.
            let deadline = Instant::now() + Duration::from_secs(60);
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                    if let Ok(redis::Value::SimpleString(line)) = con.recv_response() {
                        lines.lock().unwrap().push(line);
                    }
                }
            })
        };
        Monitor {
            stop,
            lines,
            thread: Some(thread),
        }
    }

    /// A `redlock` invocation pointed at this server.
    pub fn redlock(&self, args: &[&str]) -> Redlock {
        Redlock::new(args)
            .env("REDLOCK_URL", &self.url())
            .server_log(self.dir.path().join("redis.log"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A stopped server ignores SIGKILL until continued on some kernels; continue it first.
        self.kill();
    }
}

/// Starts redis-server on `port` in `dir` and waits until it answers; on failure, its log.
fn launch(binary: &Path, dir: &TempDir, port: u16, extra: &[&str]) -> Result<Child, String> {
    let log = dir.path().join("redis.log");
    // A config file (a sentinel's) must come first.
    let (config, extra) = match extra.split_first() {
        Some((first, rest)) if first.ends_with(".conf") => (Some(*first), rest),
        _ => (None, extra),
    };
    let mut child = Command::new(binary)
        .args(config)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--logfile")
        .arg(&log)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (the CI script installs it)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if ping(port) {
            return Ok(child);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(std::fs::read_to_string(&log).unwrap_or_default())
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 64];
    // +PONG, or -NOAUTH from a server with a password: either way it is up. -LOADING: up, but
    // still reading its data from disk, and answering nothing else yet.
    matches!(stream.read(&mut reply), Ok(n) if n > 0 && !reply[..n].starts_with(b"-LOADING"))
}

/// A `redlock` command line under construction; the environment starts empty but for PATH.
#[must_use]
pub struct Redlock {
    command: Command,
    argv: Vec<String>,
    server_log: Option<PathBuf>,
}

impl Redlock {
    pub fn new(args: &[&str]) -> Self {
        let mut command = Command::new(REDLOCK);
        command.args(args).env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        Self {
            command,
            argv: args.iter().map(|arg| (*arg).to_owned()).collect(),
            server_log: None,
        }
    }

    pub fn arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> Self {
        self.argv.push(arg.as_ref().to_string_lossy().into_owned());
        self.command.arg(arg);
        self
    }

    pub fn args(mut self, args: &[&str]) -> Self {
        for arg in args {
            self = self.arg(arg);
        }
        self
    }

    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.command.env(name, value);
        self
    }

    pub fn env_remove(mut self, name: &str) -> Self {
        self.command.env_remove(name);
        self
    }

    /// Runs redlock through `bash -c '<setup>; exec redlock ...'`, for what a parent passes on
    /// through exec (an ignored signal, say: dash does not pass on an ignored SIGCHLD, bash
    /// does). Call it last: it takes the arguments and the environment given so far.
    pub fn after_shell(mut self, setup: &str) -> Self {
        let mut command = Command::new("bash");
        command
            .arg("-c")
            .arg(format!("{setup}; exec \"$0\" \"$@\""))
            .arg(REDLOCK)
            .args(self.command.get_args())
            .env_clear();
        for (name, value) in self.command.get_envs() {
            if let Some(value) = value {
                command.env(name, value);
            }
        }
        self.command = command;
        self.argv.insert(0, format!("(after bash: {setup})"));
        self
    }

    /// Runs redlock as the last words of `prefix`, a program that execs it (`ip netns exec NS`:
    /// in a network namespace). Arguments and environment given before or after stay
    /// redlock's; the pid is redlock's once the prefix has exec'd it.
    pub fn inside(mut self, prefix: &[&str]) -> Self {
        let mut command = Command::new(prefix[0]);
        command
            .args(&prefix[1..])
            .arg(REDLOCK)
            .args(self.command.get_args())
            .env_clear();
        for (name, value) in self.command.get_envs() {
            if let Some(value) = value {
                command.env(name, value);
            }
        }
        self.command = command;
        self.argv.insert(0, format!("({})", prefix.join(" ")));
        self
    }

    /// The same command line, run by another build of redlock (`binary`).
    pub fn with_binary(mut self, binary: &std::path::Path) -> Self {
        let mut command = Command::new(binary);
        command.args(self.command.get_args()).env_clear();
        for (name, value) in self.command.get_envs() {
            if let Some(value) = value {
                command.env(name, value);
            }
        }
        self.command = command;
        self
    }

    /// The same command line, run by a build of redlock for another architecture (`binary`)
    /// under `emulator` (qemu-user), which runs it in its own process: the pid is redlock's.
    pub fn emulated(mut self, emulator: &Path, binary: &Path) -> Self {
        let mut command = Command::new(emulator);
        command
            .arg(binary)
            .args(self.command.get_args())
            .env_clear();
        for (name, value) in self.command.get_envs() {
            if let Some(value) = value {
                command.env(name, value);
            }
        }
        self.command = command;
        self.argv.insert(0, format!("({})", emulator.display()));
        self
    }

    fn server_log(mut self, path: PathBuf) -> Self {
        self.server_log = Some(path);
        self
    }

    /// Starts in the background; stdin is closed, stdout and stderr are captured.
    pub fn spawn(mut self) -> Running {
        let child = self
            .command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn redlock");
        Running {
            child: Some(child),
            argv: self.argv,
            started: Instant::now(),
            server_log: self.server_log.take(),
        }
    }

    /// Runs to completion with stderr a pipe nobody reads any more (as under `cmd 2>&1 | head -1`
    /// once head is gone): every write to it fails with EPIPE. Captures stdout.
    pub fn run_with_stderr_closed(mut self) -> Output {
        let (reader, writer) = nix::unistd::pipe().expect("pipe");
        drop(reader);
        self.command.stderr(writer);
        self.argv.insert(0, "(stderr closed)".into());
        self.run()
    }

    /// Runs to completion and captures everything.
    pub fn run(mut self) -> Output {
        let started = Instant::now();
        let output = self
            .command
            .stdin(Stdio::null())
            .output()
            .expect("spawn redlock");
        Output {
            argv: self.argv,
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            elapsed: started.elapsed(),
            server_log: self.server_log.take(),
        }
    }
}

/// A `redlock` running in the background. Dropped while still running (a test that failed
/// before waiting for it), it is killed and reaped: a failed test leaves no process behind
/// (the command redlock runs dies with it: redlock gives its children a parent-death signal).
pub struct Running {
    /// `None` once waited for.
    child: Option<Child>,
    argv: Vec<String>,
    started: Instant,
    server_log: Option<PathBuf>,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends a signal (e.g. "TERM", "KILL") to redlock itself.
    pub fn signal(&self, signal: &str) {
        send_signal(self.pid(), signal);
    }

    /// Waits at most `limit` for the exit; on timeout kills it and fails with its output.
    pub fn wait(mut self, limit: Duration) -> Output {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + limit;
        let finished = loop {
            if child.try_wait().expect("try_wait").is_some() {
                break true;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                break false;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let elapsed = self.started.elapsed();
        let status = child.wait().expect("reap redlock");
        // Read on threads, within a bound: a process redlock left behind (a command's child it
        // failed to stop) keeps the pipes open, and reading them to the end would never end.
        let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            let (sender, receiver) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut text = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut text);
                }
                let _ = sender.send(text);
            });
            receiver
        };
        let stdout = read(child.stdout.take().map(|pipe| Box::new(pipe) as Box<_>));
        let stderr = read(child.stderr.take().map(|pipe| Box::new(pipe) as Box<_>));
        let bound = Instant::now() + Duration::from_secs(10);
        let mut held_open = false;
        let mut collect = |receiver: std::sync::mpsc::Receiver<Vec<u8>>| {
            let left = bound.saturating_duration_since(Instant::now());
            let text = receiver.recv_timeout(left).unwrap_or_else(|_| {
                held_open = true;
                Vec::new()
            });
            String::from_utf8_lossy(&text).into_owned()
        };
        let output = Output {
            argv: std::mem::take(&mut self.argv),
            status,
            stdout: collect(stdout),
            stderr: collect(stderr),
            elapsed,
            server_log: self.server_log.take(),
        };
        if !finished {
            output.fail(&format!("did not exit within {limit:?}"));
        }
        if held_open {
            output.fail("exited, but a process it left behind still holds its stdout or stderr");
        }
        output
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take()
            && child.try_wait().ok().flatten().is_none()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The keys of a JSON object, sorted.
pub fn field_names(value: &serde_json::Value) -> Vec<&str> {
    let mut names: Vec<&str> = value
        .as_object()
        .expect("a JSON object")
        .keys()
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    names
}

/// Sends signal `name` ("TERM", "KILL", "STOP", ...) to process `pid`.
#[track_caller]
pub fn send_signal(pid: u32, name: &str) {
    let signal: nix::sys::signal::Signal = format!("SIG{name}").parse().expect("a signal name");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
    nix::sys::signal::kill(pid, signal).unwrap_or_else(|err| panic!("kill -{name} {pid}: {err}"));
}

/// The live processes (not zombies) whose command line, split into its words, satisfies
/// `matches`: how a test finds the processes it started without their pids (a worker of a
/// worker, a probe in a PID namespace), by a marker only they carry.
pub fn processes_matching(matches: impl Fn(&[&[u8]]) -> bool) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let words: Vec<&[u8]> = cmdline.split(|&byte| byte == 0).collect();
                matches(&words)
            })
        })
        .filter(|&pid| alive(pid))
        .collect()
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    })
}

/// Whether process `pid` is stopped (SIGSTOP, or a failpoint that stops it).
pub fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
    })
}

/// Milliseconds since the Unix epoch on this machine's wall clock (the test server's clock).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Waits until `path` exists and has content, at most `limit`; returns the content.
#[track_caller]
pub fn wait_for_file(path: &Path, limit: Duration) -> String {
    let mut content = String::new();
    let found = wait_until(limit, || {
        content = std::fs::read_to_string(path).unwrap_or_default();
        !content.trim().is_empty()
    });
    assert!(found, "{} did not appear within {limit:?}", path.display());
    content.trim().to_owned()
}

/// What one run of `redlock` did.
pub struct Output {
    pub argv: Vec<String>,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    server_log: Option<PathBuf>,
}

impl Output {
    /// Asserts the exit code; on mismatch prints everything needed to see why.
    #[track_caller]
    pub fn code(&self, expected: i32) -> &Self {
        if self.status.code() != Some(expected) {
            self.fail(&format!("expected exit code {expected}"));
        }
        self
    }

    /// Asserts that stderr is exactly one line starting `redlock: ` and containing `needle`.
    #[track_caller]
    pub fn one_line_error(&self, needle: &str) -> &Self {
        let lines: Vec<&str> = self.stderr.lines().collect();
        if lines.len() != 1 || !lines[0].starts_with("redlock: ") || !lines[0].contains(needle) {
            self.fail(&format!(
                "expected one stderr line 'redlock: ...{needle}...'"
            ));
        }
        if self.stderr.contains("panicked") || self.stderr.contains("backtrace") {
            self.fail("panic output on stderr");
        }
        self
    }

    #[track_caller]
    pub fn stdout_contains(&self, needle: &str) -> &Self {
        if !self.stdout.contains(needle) {
            self.fail(&format!("stdout should contain {needle:?}"));
        }
        self
    }

    #[track_caller]
    pub fn stderr_contains(&self, needle: &str) -> &Self {
        if !self.stderr.contains(needle) {
            self.fail(&format!("stderr should contain {needle:?}"));
        }
        self
    }

    #[track_caller]
    pub fn stderr_empty(&self) -> &Self {
        if !self.stderr.is_empty() {
            self.fail("stderr should be empty");
        }
        self
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|err| self.fail(&format!("stdout is not JSON: {err}")))
    }

    #[track_caller]
    pub fn fail(&self, why: &str) -> ! {
        let log = self
            .server_log
            .as_ref()
            .map(|path| std::fs::read_to_string(path).unwrap_or_default())
            .unwrap_or_default();
        panic!(
            "{why}\ncommand: redlock {}\nstatus: {:?} after {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- server log ---\n{log}",
            self.argv.join(" "),
            self.status,
            self.elapsed,
            self.stdout,
            self.stderr,
        )
    }
}

/// Commands a server ran, as MONITOR shows them.
pub struct Monitor {
    stop: Arc<AtomicBool>,
    lines: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Monitor {
    /// Stops recording; returns (server wall-clock ms, command line) in order.
    pub fn stop(mut self) -> Vec<(u64, String)> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let lines = std::mem::take(&mut *self.lines.lock().unwrap());
        lines
            .into_iter()
            .filter_map(|line| {
                let (time, rest) = line.split_once(' ')?;
                let ms = (time.parse::<f64>().ok()? * 1000.0) as u64;
                Some((ms, rest.to_owned()))
            })
            .collect()
    }
}

impl Monitor {
    /// Stops recording once every command `server` ran before this call has been seen (a
    /// marker command is sent and awaited, at most 10 s), so none is lost in the socket.
    pub fn stop_after_all(self, server: &RedisServer) -> Vec<(u64, String)> {
        let marker = format!(
            "monitor-marker-{}",
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        );
        let _: String = server.cmd(&["ECHO", &marker]);
        let seen = wait_until(Duration::from_secs(10), || {
            self.lines
                .lock()
                .unwrap()
                .iter()
                .any(|line| line.contains(&marker))
        });
        assert!(seen, "MONITOR did not show the marker within 10 s");
        self.stop()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Runs `redlock run --key job -- sh PROBE` on a fresh pseudo-terminal (script(1) from
/// util-linux) whose input is the returned child's stdin; stdout and stderr are piped.
pub fn run_on_a_terminal(server: &RedisServer, probe: &Path) -> Child {
    let inner = format!("{REDLOCK} run --key job -- sh {}", probe.display());
    Command::new("script")
        .args(["-qfec", &inner, "/dev/null"])
        .env("REDLOCK_URL", server.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) from util-linux")
}

/// Polls `condition` every 10 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
