//! Bad input and broken servers: a one-line `redlock: ...` error, the documented exit code,
//! no panic, bounded time, and nothing changed in Redis.

use std::ffi::OsStr;
use std::net::TcpListener;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use crate::util::{RedisServer, Redlock, TempDir, free_port, wait_until};

#[test]
fn bad_keys_are_usage_errors_and_touch_nothing() {
    let server = RedisServer::start();
    let long = "k".repeat(513);
    let cases: [(&str, &str); 4] = [
        ("", "the lock name is empty"),
        (&long, "513 bytes long; the limit is 512"),
        ("line\nbreak", "control characters"),
        ("esc\u{1b}[31m", "control characters"),
    ];
    for (key, why) in cases {
        for args in [
            vec!["acquire", "--key", key, "--ttl", "10s"],
            vec!["release", "--key", key, "--force"],
            vec!["inspect", "--key", key],
        ] {
            server.redlock(&args).run().code(64).one_line_error(why);
        }
    }
    let out = server
        .redlock(&["acquire", "--ttl", "10s", "--key"])
        .arg(OsStr::from_bytes(b"bad\xffutf8"))
        .run();
    out.code(64).one_line_error("invalid UTF-8");
    assert!(
        server.keys().is_empty(),
        "bad input wrote {:?}",
        server.keys()
    );
}

#[test]
fn bad_durations_are_usage_errors() {
    let server = RedisServer::start();
    for (ttl, why) in [
        ("0", "at least 1ms"),
        ("0s", "at least 1ms"),
        ("-5s", "must be positive"),
        ("abc", "is not a duration"),
        ("10M", "means months"),
        ("1y", "years"),
        ("400d", "longer than the limit of 30 days"),
        ("10x", "units ms, s, m or min, h, d, w"),
        ("", "empty duration"),
    ] {
        server
            .redlock(&["acquire", "--key", "k", "--ttl", ttl])
            .run()
            .code(64)
            .one_line_error(why)
            .stderr_contains("see 'redlock acquire --help'");
    }
    // The units offered are the ones accepted: months and years are refused.
    let out = server
        .redlock(&["acquire", "--key", "k", "--ttl", "10x"])
        .run();
    if out.stderr.contains("month") || out.stderr.contains("year") {
        out.fail("offers units that are refused");
    }
    // One rule and one wording for every duration flag, --wait included; run's lease has a
    // higher floor, said the same way for 0 as for 500ms.
    server
        .redlock(&["acquire", "--key", "k", "--ttl", "1s", "--wait", "-1"])
        .run()
        .code(64)
        .one_line_error("invalid value '-1' for '--wait <DURATION>': must be positive");
    for ttl in ["0", "500ms"] {
        server
            .redlock(&["run", "--key", "k", "--ttl", ttl, "--", "true"])
            .run()
            .code(64)
            .one_line_error("must be at least 1.0s for run")
            .stderr_contains("see 'redlock run --help'");
    }
    server
        .redlock(&[
            "acquire",
            "--key",
            "k",
            "--ttl",
            "1s",
            "--connect-timeout",
            "0",
        ])
        .run()
        .code(64)
        .one_line_error("--connect-timeout");
    assert!(server.keys().is_empty());
}

#[test]
fn malformed_command_lines_are_usage_errors() {
    let server = RedisServer::start();
    for (args, why) in [
        (
            vec!["acquire", "--key", "k", "--ttl", "1s", "--bogus"],
            "unexpected argument '--bogus'",
        ),
        (vec!["acquire", "--key", "k"], "--ttl <DURATION>"),
        (
            vec!["acquire", "--key", "k", "--tll", "1s"],
            "tip: a similar argument exists",
        ),
        (vec!["release", "--key", "k"], "--token <TOKEN>"),
        (
            vec!["release", "--key", "k", "--token", "nope"],
            "not a redlock token",
        ),
        (
            vec!["extend", "--key", "k", "--token", "1234", "--ttl", "1s"],
            "not a redlock token",
        ),
        (
            vec!["acquire", "--key", "k", "--ttl", "1s", "-E", "300"],
            "--conflict-exit-code",
        ),
        (vec!["frobnicate"], "unrecognized subcommand"),
        (
            vec!["acquire", "--key", "k", "--ttl", "1s", "--prefix", "a{b"],
            "braces are reserved",
        ),
        (
            vec!["inspect", "--key", "k", "-q", "-v"],
            "cannot be used with",
        ),
        // A negative number is a value out of range, not an unknown flag.
        (
            vec!["acquire", "--key", "k", "--ttl", "1s", "-E", "-1"],
            "-1 is not in 0..=255",
        ),
        (
            vec!["acquire", "--key", "k", "--ttl", "1s", "--limit", "-1"],
            "-1 is not in 1..=10000",
        ),
        (
            vec!["run", "--key", "k", "--history", "-1", "--", "true"],
            "-1 is not in 1..=1000",
        ),
        (
            vec!["release", "--key", "k", "--exit-status", "-1"],
            "-1 is not in 0..=255",
        ),
    ] {
        server.redlock(&args).run().code(64).one_line_error(why);
    }
    // Help and version are not errors.
    Redlock::new(&["--help"])
        .run()
        .code(0)
        .stdout_contains("Usage:");
    Redlock::new(&["--version"])
        .run()
        .code(0)
        .stdout_contains("redlock ");
    Redlock::new(&["acquire", "-h"])
        .run()
        .code(0)
        .stdout_contains("--ttl");
    Redlock::new(&[]).run().code(64);
    assert!(server.keys().is_empty());
}

#[test]
fn redis_urls_that_do_not_parse_are_usage_errors_without_the_password() {
    for url in [
        "not a url",
        "http://:hunter2@127.0.0.1:1",
        "redis://:hunter2@[::1",
    ] {
        let out = Redlock::new(&["inspect", "--key", "k", "--redis", url]).run();
        out.code(64).one_line_error("--redis");
        assert!(!out.stderr.contains("hunter2"), "{}", out.stderr);
    }
}

/// Repro: `--redis 'redis://default:abc/def+SECRET==@127.0.0.1:6500/0'` printed the
/// whole URL, and `redis://user:Pa?ss-SECRET@h` printed "unknown query parameter 'ss-SECRET@h'".
/// Every ASCII character, around and inside a password, in `--redis` and `REDLOCK_URL`, text and
/// JSON logs: no part of the password is ever printed.
#[test]
fn a_password_with_any_character_is_never_printed() {
    let port = free_port();
    for byte in 0..128_u8 {
        let c = char::from(byte);
        if c == '\0' {
            continue; // cannot be passed in an argument or a variable
        }
        // Two halves, which a separator in the password may cut apart.
        let password = format!("x{c}QZX{c}JVK{c}y");
        for (n, url) in [
            format!("redis://default:{password}@127.0.0.1:{port}/0"),
            format!("redis://:{password}@127.0.0.1:{port}"),
            format!("redis://127.0.0.1:{port}?password={password}"),
        ]
        .iter()
        .enumerate()
        {
            let mut redlock = Redlock::new(&["inspect", "--key", "k", "--connect-timeout", "1s"]);
            redlock = match (usize::from(byte) + n) % 2 {
                0 => redlock.args(&["--redis", url]),
                _ => redlock.env("REDLOCK_URL", url),
            };
            if byte % 3 == 0 {
                redlock = redlock.args(&["--log-format", "json"]);
            }
            let out = redlock.run();
            if out.stderr.contains("QZX") || out.stderr.contains("JVK") {
                out.fail(&format!("a part of the password {password:?} was printed"));
            }
            if !matches!(out.status.code(), Some(64 | 69)) {
                out.fail("expected exit 64 (not a URL) or 69 (nobody listens)");
            }
        }
    }
}

/// Repro: `redlock --redis '' run ...` and `REDLOCK_URL= redlock run ...` exited 0
/// after locking whatever listens on 127.0.0.1:6379; in CI a missing secret becomes an empty
/// variable. Only an unset variable falls back to the default.
#[test]
fn an_empty_url_is_a_usage_error_naming_where_it_came_from() {
    let run = ["run", "--key", "k", "--", "true"];
    let cases = [
        (
            Redlock::new(&["--redis", "", "run", "--key", "k", "--", "true"]),
            "--redis",
        ),
        (
            Redlock::new(&["run", "--redis", " ", "--key", "k", "--", "true"]),
            "--redis",
        ),
        (Redlock::new(&run).env("REDLOCK_URL", ""), "REDLOCK_URL"),
        (Redlock::new(&run).env("REDLOCK_URL", "  "), "REDLOCK_URL"),
        (Redlock::new(&run).env("REDIS_URL", ""), "REDIS_URL"),
        (
            Redlock::new(&["acquire", "--key", "k", "--ttl", "5s"]).env("REDIS_URL", " "),
            "REDIS_URL",
        ),
    ];
    for (redlock, source) in cases {
        redlock
            .run()
            .code(64)
            .one_line_error(&format!("{source} is set but empty"));
    }
}

/// A URL that does not parse is named by where it came from (--redis, REDLOCK_URL or
/// REDIS_URL) and shown with only what could be a password masked, and the message says what
/// is wrong with it. Repro: `REDLOCK_URL=redis://127.0.0.1:6401/abc` said `--redis
/// redis://127.0.0.1:***: ... the database must be a number` (the port and path masked, the
/// wrong source named), and `redis:/host:6379` said "no scheme".
#[test]
fn a_bad_url_names_its_source_and_masks_only_the_password() {
    let run = ["run", "--key", "k", "--", "true"];
    let url = "redis://127.0.0.1:6401/abc";
    for (redlock, source) in [
        (Redlock::new(&run).env("REDLOCK_URL", url), "REDLOCK_URL"),
        (Redlock::new(&run).env("REDIS_URL", url), "REDIS_URL"),
        (
            Redlock::new(&["--redis", url, "run", "--key", "k", "--", "true"]),
            "--redis",
        ),
    ] {
        redlock
            .run()
            .code(64)
            .one_line_error(&format!("{source} redis://127.0.0.1:6401/abc: "))
            .stderr_contains("the database must be a number");
    }
    for (url, shown, why) in [
        (
            "redis://u:s3cret@127.0.0.1:6401/abc",
            "redis://u:***@127.0.0.1:6401/abc",
            "the database must be a number",
        ),
        (
            "redis://127.0.0.1:6401?db=1&password=s3cret&color=s3cret",
            "redis://127.0.0.1:6401?db=1&password=***&***",
            "unknown query parameter",
        ),
        ("redis://:s3cret", "redis://:***", "no host"),
        (
            "redis://u:s3/cret@h:1/0",
            "redis://***",
            "an '@' after the host",
        ),
    ] {
        let out = Redlock::new(&run).env("REDLOCK_URL", url).run();
        out.code(64)
            .one_line_error(&format!("REDLOCK_URL {shown}: "))
            .stderr_contains(why);
        assert!(!out.stderr.contains("s3"), "{}", out.stderr);
    }
    Redlock::new(&run)
        .env("REDLOCK_URL", "redis:/host:6379")
        .run()
        .code(64)
        .one_line_error("REDLOCK_URL redis:/host:6379: ")
        .stderr_contains("'redis:' must be followed by '//'");
}

#[test]
fn foreign_data_at_a_lock_key_is_never_clobbered() {
    let server = RedisServer::start();
    let holders = "redlock:{k}:holders";
    let fence = "redlock:{k}:fence";
    let lock_commands: [&[&str]; 5] = [
        &["acquire", "--key", "k", "--ttl", "10s"],
        &[
            "release",
            "--key",
            "k",
            "--token",
            "0123456789abcdef0123456789abcdef",
        ],
        &["release", "--key", "k", "--force"],
        &[
            "extend",
            "--key",
            "k",
            "--token",
            "0123456789abcdef0123456789abcdef",
            "--ttl",
            "1s",
        ],
        &["inspect", "--key", "k"],
    ];

    server.cmd::<()>(&["SET", holders, "someone else's"]);
    for args in lock_commands {
        server.redlock(args).run().code(64).one_line_error(
            "is a string that redlock did not write; choose another --key or --prefix",
        );
    }
    assert_eq!(server.cmd::<String>(&["GET", holders]), "someone else's");
    assert_eq!(server.keys(), [holders]);
    server.cmd::<()>(&["DEL", holders]);

    server.cmd::<()>(&["HSET", holders, "name", "value"]);
    for args in lock_commands {
        server
            .redlock(args)
            .run()
            .code(64)
            .one_line_error("holds a field that redlock did not write");
    }
    assert_eq!(
        server.cmd::<Vec<String>>(&["HGETALL", holders]),
        ["name", "value"]
    );
    server.cmd::<()>(&["DEL", holders]);

    let queue = "redlock:{k}:queue";
    server.cmd::<()>(&["SET", queue, "someone else's"]);
    for args in [lock_commands[0], lock_commands[1], lock_commands[4]] {
        server
            .redlock(args)
            .run()
            .code(64)
            .one_line_error("redlock:{k}:queue is a string that redlock did not write");
    }
    assert_eq!(server.keys(), [queue]);
    server.cmd::<()>(&["DEL", queue]);

    // (`release --force` said "was free", exit 1, here.)
    for foreign in [&["RPUSH", fence, "x"][..], &["SET", fence, "not a number"]] {
        server.cmd::<()>(foreign);
        for args in [lock_commands[0], lock_commands[2]] {
            server
                .redlock(args)
                .run()
                .code(64)
                .one_line_error("redlock:{k}:fence");
            assert_eq!(server.keys(), [fence], "{args:?} wrote beside foreign data");
        }
        server.cmd::<()>(&["DEL", fence]);
    }
}

#[test]
fn refused_connection_exits_69_quickly() {
    let port = free_port();
    let out = Redlock::new(&["acquire", "--key", "k", "--ttl", "10s", "-q"])
        .env("REDLOCK_URL", &format!("redis://127.0.0.1:{port}"))
        .run();
    // -q hides notices, never errors.
    out.code(69)
        .one_line_error(&format!("connecting to redis://127.0.0.1:{port}: "))
        .stderr_contains("connection refused");
    assert!(out.elapsed < Duration::from_secs(5), "{:?}", out.elapsed);
}

#[test]
fn a_server_that_never_answers_exits_69_in_bounded_time() {
    // Accepts connections and reads nothing: a hung proxy or a wedged server.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "redis://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let _silent = std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().take(4) {
            held.push(stream);
        }
        std::thread::sleep(Duration::from_secs(30));
    });
    let out = Redlock::new(&["acquire", "--key", "k", "--ttl", "10s"])
        .env("REDLOCK_URL", &url)
        .args_timeouts("500ms", "700ms")
        .run();
    given_up(&out);
    assert!(out.elapsed < Duration::from_secs(4), "{:?}", out.elapsed);

    // Same through a password handshake, which the connect timeout also bounds.
    let out = Redlock::new(&["inspect", "--key", "k"])
        .env("REDLOCK_URL", &url)
        .env("REDLOCK_PASSWORD", "pw")
        .args_timeouts("500ms", "700ms")
        .run();
    out.code(69).one_line_error("no answer within");
    assert!(out.elapsed < Duration::from_secs(4), "{:?}", out.elapsed);
}

#[test]
fn a_stopped_server_exits_69_in_bounded_time() {
    let server = RedisServer::start();
    crate::util::send_signal(server.pid(), "STOP");
    let out = server
        .redlock(&["acquire", "--key", "k", "--ttl", "10s"])
        .args_timeouts("500ms", "700ms")
        .run();
    crate::util::send_signal(server.pid(), "CONT");
    given_up(&out);
    assert!(out.elapsed < Duration::from_secs(4), "{:?}", out.elapsed);
}

/// A host name whose lookup gets no answer (DNS silent): the connect timeout bounds the lookup
/// too, on the main thread and on a worker, with words that name it; a signal ends it at once
/// and nothing is said of a request (none was sent); and a name that resolves is reached.
/// The C library's lookup blocks for the resolver's own timeouts (5 s for musl's): redlock
/// waited for it past the connect timeout, and a signal waited as long. Inside a mount
/// namespace whose /etc/resolv.conf names a loopback address where a socket reads the queries
/// and answers none; skipped, saying why, where that cannot be made (no root, no port 53).
#[test]
fn a_name_lookup_is_bounded_by_the_connect_timeout_and_cut_short_by_a_signal() {
    let server = RedisServer::start();
    let out = Redlock::new(&["run", "--key", "named", "--", "echo", "ran"])
        .env("REDLOCK_URL", &format!("redis://localhost:{}", server.port))
        .run();
    out.code(0).stdout_contains("ran");

    let Some(dns) = SilentResolver::start() else {
        println!("skipped: no loopback address with port 53 free to bind (root is needed)");
        return;
    };
    let dir = TempDir::new("resolv");
    let conf = dir.path().join("resolv.conf");
    std::fs::write(&conf, format!("nameserver {}\n", dns.address)).unwrap();
    let setup = format!(
        "mount --bind '{}' /etc/resolv.conf && exec \"$@\"",
        conf.display()
    );
    let prefix = ["unshare", "--mount", "sh", "-c", &setup, "sh"];
    let namespace = std::process::Command::new(prefix[0])
        .args(&prefix[1..])
        .arg("true")
        .output();
    if !namespace.as_ref().is_ok_and(|out| out.status.success()) {
        println!("skipped: no mount namespace with /etc/resolv.conf replaced: {namespace:?}");
        return;
    }
    let url = "redis://redlock-test.invalid:1";
    let named = |args: &[&str]| Redlock::new(args).env("REDLOCK_URL", url).inside(&prefix);
    let silent = format!("connecting to {url}: the host name lookup got no answer within 500ms");

    let out = named(&[
        "--connect-timeout",
        "500ms",
        "run",
        "--key",
        "k",
        "--",
        "true",
    ])
    .run();
    out.code(69).one_line_error(&silent);
    assert!(
        dns.asked(),
        "the lookup never reached the resolver: {}",
        out.stderr
    );
    assert!(out.elapsed < Duration::from_secs(4), "{:?}", out.elapsed);

    let waiting = |connect_timeout: &str, wait: &str| {
        named(&[
            "-q",
            "--connect-timeout",
            connect_timeout,
            "acquire",
            "--key",
            "k",
            "--ttl",
            "10s",
            "--wait",
            wait,
        ])
    };
    // A waiting acquisition's requests run on a worker thread: bounded there too. (It took
    // the resolver's 5 s per attempt, 13 s in all, and said the lock was busy.)
    let out = waiting("500ms", "1s").run();
    out.code(69).one_line_error(&silent);
    assert!(out.elapsed < Duration::from_secs(5), "{:?}", out.elapsed);

    // Each connect of a waiting acquisition started a lookup of its own, each holding a thread
    // for the resolver's 5 s: a connect now waits for the one under way.
    let (out, lookups) = lookup_threads(waiting("100ms", "3s").spawn());
    out.code(69)
        .one_line_error(&silent.replace("500ms", "100ms"));
    assert_eq!(lookups.most, 1, "lookup threads at once: {lookups:?}");
    // A lookup that has answered is not waited for again: with a resolver that gives up after
    // a second, the connects after it look the name up afresh.
    std::fs::write(
        &conf,
        format!("nameserver {}\noptions timeout:1 attempts:1\n", dns.address),
    )
    .unwrap();
    let (out, lookups) = lookup_threads(waiting("100ms", "4s").spawn());
    out.code(69);
    assert_eq!(lookups.most, 1, "lookup threads at once: {lookups:?}");
    assert!(lookups.threads.len() >= 2, "one lookup in 4 s: {lookups:?}");
    std::fs::write(&conf, format!("nameserver {}\n", dns.address)).unwrap();

    dns.drain();
    let running = named(&[
        "--connect-timeout",
        "60s",
        "run",
        "--key",
        "k",
        "--",
        "true",
    ])
    .spawn();
    assert!(dns.asked(), "the lookup never reached the resolver");
    running.signal("TERM");
    let out = running.wait(Duration::from_secs(4));
    out.code(143).stderr_empty();
}

/// The name-lookup threads a redlock had: the most at once, and each one's thread id.
#[derive(Debug, Default)]
struct LookupThreads {
    most: usize,
    threads: std::collections::BTreeSet<String>,
    samples: usize,
}

/// Samples `running`'s threads named "lookup" every 20 ms until it ends (20 s at most).
fn lookup_threads(running: crate::util::Running) -> (crate::util::Output, LookupThreads) {
    let pid = running.pid();
    let mut seen = LookupThreads::default();
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while crate::util::alive(pid) && std::time::Instant::now() < until {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            break;
        };
        let lookups: Vec<String> = tasks
            .filter_map(Result::ok)
            .filter(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|comm| comm == "lookup\n")
            })
            .map(|task| task.file_name().to_string_lossy().into_owned())
            .collect();
        seen.most = seen.most.max(lookups.len());
        seen.threads.extend(lookups);
        seen.samples += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    (running.wait(Duration::from_secs(10)), seen)
}

/// A UDP socket on port 53 of a loopback address, for a resolver: it reads queries and answers
/// none.
struct SilentResolver {
    socket: std::net::UdpSocket,
    address: std::net::Ipv4Addr,
}

impl SilentResolver {
    /// On the first address of 127.0.53.0/24 whose port 53 is free; none without root.
    fn start() -> Option<Self> {
        // Any address of 127/8 is the loopback's.
        (2..=254).find_map(|last| {
            let address = std::net::Ipv4Addr::new(127, 0, 53, last);
            let socket = std::net::UdpSocket::bind((address, 53)).ok()?;
            Some(Self { socket, address })
        })
    }

    /// Reads the queries that came so far.
    fn drain(&self) {
        let mut query = [0; 512];
        self.socket.set_nonblocking(true).unwrap();
        while self.socket.recv(&mut query).is_ok() {}
        self.socket.set_nonblocking(false).unwrap();
    }

    /// Whether a query came, or comes within 10 s.
    fn asked(&self) -> bool {
        let mut query = [0; 512];
        self.socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        self.socket.recv(&mut query).is_ok()
    }
}

/// An acquisition whose request got no answer exits 69 with one line: the error, and what the
/// request may still do. (It said "could not leave the queue" first, of a queue it never
/// joined.)
#[track_caller]
fn given_up(out: &crate::util::Output) {
    out.code(69).one_line_error(
        "no answer within 700ms; the request may still run when the server answers: a lock it takes then expires within 10.0s",
    );
}

#[test]
fn passwords_work_from_env_file_and_url_and_are_never_shown() {
    let secret = "s3cret-Pa55";
    let server = RedisServer::start_with(&["--requirepass", secret]);
    let dir = TempDir::new("password");
    let file = dir.path().join("password");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = file.to_str().unwrap();
    let with_password = format!("redis://:{secret}@127.0.0.1:{}", server.port);
    let with_wrong = format!("redis://:wrong-{secret}@127.0.0.1:{}", server.port);

    let mut outputs = Vec::new();
    let no_password = server.redlock(&["inspect", "--key", "k"]).run();
    no_password.code(77).one_line_error("REDLOCK_PASSWORD");
    outputs.push(no_password);

    let env = server
        .redlock(&["acquire", "--key", "k", "--ttl", "10s", "-v"])
        .env("REDLOCK_PASSWORD", secret)
        .run();
    env.code(0);
    outputs.push(env);
    let from_file = server
        .redlock(&["inspect", "--key", "k", "--password-file", file, "-v"])
        .run();
    from_file.code(0).stderr_contains("connected to");
    outputs.push(from_file);
    let from_url = server
        .redlock(&["list", "--json", "-v"])
        .env("REDLOCK_URL", &with_password)
        .run();
    from_url.code(0).stderr_contains(":***@127.0.0.1");
    outputs.push(from_url);
    // REDIS_URL is the fallback when REDLOCK_URL is unset.
    let fallback = server
        .redlock(&["inspect", "--key", "k", "-v"])
        .env_remove("REDLOCK_URL")
        .env("REDIS_URL", &with_password)
        .run();
    fallback.code(0);
    outputs.push(fallback);

    let wrong = server
        .redlock(&["inspect", "--key", "k"])
        .env("REDLOCK_URL", &with_wrong)
        .run();
    wrong.code(77).one_line_error("authentication failed");
    // The server is named once, not by each layer of the error.
    assert_eq!(
        wrong.stderr.matches("127.0.0.1").count(),
        1,
        "{}",
        wrong.stderr
    );
    outputs.push(wrong);
    let wrong_env = server
        .redlock(&["inspect", "--key", "k"])
        .env("REDLOCK_PASSWORD", "nope")
        .run();
    wrong_env.code(77);
    outputs.push(wrong_env);
    // The file beats the environment and the URL.
    let file_wins = server
        .redlock(&["inspect", "--key", "k", "--password-file", file])
        .env("REDLOCK_URL", &with_wrong)
        .env("REDLOCK_PASSWORD", "nope")
        .run();
    file_wins.code(0);
    outputs.push(file_wins);

    let help = Redlock::new(&["--help"])
        .env("REDLOCK_URL", &with_password)
        .env("REDLOCK_PASSWORD", secret)
        .run();
    help.code(0).stdout_contains("REDLOCK_URL");
    outputs.push(help);
    for out in &outputs {
        if out.stdout.contains(secret) || out.stderr.contains(secret) {
            out.fail("the password was printed");
        }
    }
}

/// Found in review: a server whose AUTH is renamed answers it with `ERR unknown command
/// 'AUTH', with args beginning with: 'PASSWORD'`, and redlock printed that reply: the password
/// in text and JSON logs, and in doctor's error; a sentinel's password went the same way. A
/// refused login is 77 with redlock's own words, never the server's text, on every path that
/// logs in: one server, TLS, a sentinel, a Cluster's seed, a quorum's masters.
#[test]
fn a_refused_login_never_prints_the_servers_reply() {
    let secret = "S3CRET-echoed-back";
    let renamed = ["--rename-command", "AUTH", "LOGINELSEWHERE"];
    let server = RedisServer::start_with(&renamed);
    let port = server.port;
    let url = server.url();
    let secret_outputs = |out: &crate::util::Output| {
        if out.stdout.contains(secret) || out.stderr.contains(secret) || out.stderr.contains("S3CR")
        {
            out.fail("the password was printed");
        }
    };
    let refused = |out: &crate::util::Output| {
        out.code(77);
        secret_outputs(out);
        if !out.stderr.contains("its reply is not shown") {
            out.fail("the refusal says why its reply is not shown");
        }
    };
    let inspect = |url: &str| {
        Redlock::new(&["inspect", "--key", "k"])
            .env("REDLOCK_URL", url)
            .env("REDLOCK_PASSWORD", secret)
    };
    for extra in [
        &[][..],
        &["-v"],
        &["--log-format", "json"],
        &["--log-format", "json", "-v"],
    ] {
        let out = inspect(&url).args(extra).run();
        refused(&out);
        if extra.is_empty() {
            out.one_line_error("AUTH");
        }
    }
    // With a user: AUTH USER PASSWORD.
    let with_user = format!("redis://someone@127.0.0.1:{port}");
    refused(&inspect(&with_user).run());
    for doctor in [&["doctor"][..], &["doctor", "--json"]] {
        refused(
            &Redlock::new(doctor)
                .env("REDLOCK_URL", &url)
                .env("REDLOCK_PASSWORD", secret)
                .run(),
        );
    }
    // The server as a sentinel, with the sentinels' own password; as a Cluster's seed.
    let sentinel = Redlock::new(&["inspect", "--key", "k"])
        .env(
            "REDLOCK_URL",
            &format!("redis+sentinel://127.0.0.1:{port}/mymaster"),
        )
        .env("REDLOCK_SENTINEL_PASSWORD", secret)
        .run();
    sentinel.code(77);
    secret_outputs(&sentinel);
    refused(&inspect(&format!("redis+cluster://127.0.0.1:{port}")).run());
    // Three such masters: quorum mode.
    let others = [
        RedisServer::start_with(&renamed),
        RedisServer::start_with(&renamed),
    ];
    let masters = format!("{url} {} {}", others[0].url(), others[1].url());
    let out = inspect(&masters).run();
    secret_outputs(&out);
    assert!(out.status.code() != Some(70), "{:?}", out.status);
    refused(
        &Redlock::new(&["acquire", "--key", "k", "--ttl", "5s"])
            .env("REDLOCK_URL", &masters)
            .env("REDLOCK_PASSWORD", secret)
            .run(),
    );

    // Over TLS.
    let pki = crate::util::pki::Pki::generate();
    let tls_port = free_port().to_string();
    let (cert, key, ca) = (
        pki.cert("server").display().to_string(),
        pki.key("server").display().to_string(),
        pki.cert("ca").display().to_string(),
    );
    let _tls = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
        "--rename-command",
        "AUTH",
        "LOGINELSEWHERE",
    ]);
    refused(
        &inspect(&format!("rediss://127.0.0.1:{tls_port}"))
            .args(&["--tls-ca", &ca])
            .run(),
    );
}

#[test]
fn password_file_problems_are_reported() {
    let dir = TempDir::new("password-file");
    let missing = dir.path().join("missing");
    Redlock::new(&[
        "inspect",
        "--key",
        "k",
        "--password-file",
        missing.to_str().unwrap(),
    ])
    .run()
    .code(64)
    .one_line_error("--password-file");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    Redlock::new(&[
        "inspect",
        "--key",
        "k",
        "--password-file",
        empty.to_str().unwrap(),
    ])
    .run()
    .code(64)
    .one_line_error("the first line is empty");

    let server = RedisServer::start_with(&["--requirepass", "pw"]);
    let open = dir.path().join("open");
    std::fs::write(&open, "pw").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    server
        .redlock(&[
            "inspect",
            "--key",
            "k",
            "--password-file",
            open.to_str().unwrap(),
        ])
        .run()
        .code(1)
        .stderr_contains("readable by others (mode 644); run: chmod 600");
}

/// Repro: `-q` silenced the warnings about the user's own safety (a password file
/// others can read, a password on the command line, `--tls-insecure`). `-q` quiets expected
/// outcomes only.
#[test]
fn quiet_never_silences_a_security_warning() {
    let dir = TempDir::new("quiet-warnings");
    let server = RedisServer::start_with(&["--requirepass", "pw"]);
    let open = dir.path().join("open");
    std::fs::write(&open, "pw").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let file = open.to_str().unwrap();
    server
        .redlock(&["inspect", "-q", "--key", "k", "--password-file", file])
        .run()
        .code(1)
        .stderr_contains("readable by others (mode 644)");
    let with_password = format!("redis://:pw@127.0.0.1:{}", server.port);
    Redlock::new(&["inspect", "-q", "--key", "k", "--redis", &with_password])
        .run()
        .code(1)
        .stderr_contains("a password in the URL is visible to every user");
    let tls = format!("rediss://127.0.0.1:{}", free_port());
    Redlock::new(&[
        "inspect",
        "-q",
        "--key",
        "k",
        "--tls-insecure",
        "--redis",
        &tls,
    ])
    .args(&["--connect-timeout", "1s"])
    .run()
    .code(69)
    .stderr_contains("--tls-insecure: the server's certificate is not verified");
}

trait Timeouts {
    fn args_timeouts(self, connect: &str, command: &str) -> Self;
}

impl Timeouts for Redlock {
    fn args_timeouts(self, connect: &str, command: &str) -> Self {
        self.arg("--connect-timeout")
            .arg(connect)
            .arg("--command-timeout")
            .arg(command)
    }
}

/// The ACL docs/servers.md documents for redlock's own user.
pub(crate) const MINIMAL_ACL: &str = "resetkeys ~redlock:* resetchannels -@all +evalsha +eval +script|load +blpop +scan +type +exists +get +time +hgetall +hlen +hget +hmget +hset +hdel +zcard +zcount +zrange +zrangebyscore +zrank +zadd +zrem +incr +set +pttl +pexpire +pexpireat +del +rpush +ping";

#[test]
fn the_documented_minimal_acl_suffices_and_missing_permissions_exit_77() {
    let server = RedisServer::start();
    let add_user = |name: &str, rules: &str| {
        let mut args = vec!["ACL", "SETUSER", name, "on", ">pw"];
        args.extend(rules.split_whitespace());
        server.cmd::<()>(&args);
        format!("redis://{name}:pw@127.0.0.1:{}", server.port)
    };
    let locker = add_user("locker", MINIMAL_ACL);
    let as_locker = |args: &[&str]| server.redlock(args).env("REDLOCK_URL", &locker);

    let holder = as_locker(&["run", "--key", "k", "--ttl", "3s", "--", "sleep", "1"]).spawn();
    assert!(crate::util::wait_until(Duration::from_secs(10), || {
        as_locker(&["inspect", "--key", "k", "-q"])
            .run()
            .status
            .success()
    }));
    let out = as_locker(&["acquire", "--key", "k", "--ttl", "10s", "--wait", "20s"]).run();
    out.code(0);
    holder.wait(Duration::from_secs(10)).code(0);
    let token = out.stdout.trim();
    as_locker(&["extend", "--key", "k", "--token", token, "--ttl", "10s"])
        .run()
        .code(0);
    as_locker(&["list", "--json"]).run().code(0);
    as_locker(&["release", "--key", "k", "--force"])
        .run()
        .code(0);
    // The line documented before the scripts used EXISTS still suffices: they ask first and,
    // where it is not granted, read the lock's keys one by one; no call is ever denied (the
    // ACL log stays empty), and the doctor says what granting it saves.
    let older = add_user("older", &MINIMAL_ACL.replace(" +exists", ""));
    for _ in 0..2 {
        server
            .redlock(&["run", "--key", "o", "--", "true"])
            .env("REDLOCK_URL", &older)
            .run()
            .code(0);
    }
    let log: Vec<redis::Value> = server.cmd(&["ACL", "LOG"]);
    assert!(log.is_empty(), "{log:?}");
    server
        .redlock(&["doctor"])
        .env("REDLOCK_URL", &older)
        .run()
        .stdout_contains("may not run exists on redlock's keys: requests work");
    // --replicas needs WAIT, which the minimal list leaves out: refused before anything is
    // taken (WAIT 0 0 comes first).
    as_locker(&["acquire", "--key", "w", "--ttl", "10s", "--replicas", "1"])
        .run()
        .code(77)
        .one_line_error("no permissions to run the 'wait' command");
    assert_eq!(server.cmd::<i64>(&["EXISTS", "redlock:{w}:holders"]), 0);
    let waiter = add_user("waiter", &format!("{MINIMAL_ACL} +wait"));
    server
        .redlock(&["acquire", "--key", "w", "--ttl", "10s", "--replicas", "1"])
        .env("REDLOCK_URL", &waiter)
        .run()
        .code(69)
        .one_line_error("only 0 of the 1 replicas");
    assert_eq!(server.cmd::<i64>(&["EXISTS", "redlock:{w}:holders"]), 0);

    // No scripts allowed, or keys outside the user's pattern: permission denied, exit 77.
    let no_scripts = add_user("no-scripts", "resetkeys ~redlock:* -@all +ping +get");
    server
        .redlock(&["acquire", "--key", "k", "--ttl", "10s"])
        .env("REDLOCK_URL", &no_scripts)
        .run()
        .code(77)
        .one_line_error("permission denied");
    let other_keys = MINIMAL_ACL.replace("~redlock:*", "~other:*");
    let elsewhere = add_user("elsewhere", &other_keys);
    server
        .redlock(&["acquire", "--key", "k", "--ttl", "10s"])
        .env("REDLOCK_URL", &elsewhere)
        .run()
        .code(77)
        .one_line_error("permission denied");
    // (No fence for `w`: nothing was ever taken there.)
    assert_eq!(
        server.keys_but_history(),
        ["redlock:{k}:fence", "redlock:{o}:fence"]
    );
}

/// A user who may take a lock but not read what letting it go reads is refused before it takes
/// anything (77, nothing written), as one who may not make a release's writes is. Repro: a
/// user without HLEN ran its command, its release failed ("could not release") and the lock
/// stayed held for its whole lease.
#[test]
fn an_acquisition_is_refused_for_a_user_who_could_not_read_to_let_go() {
    let server = RedisServer::start();
    for command in [
        "hlen",
        "hget",
        "hmget",
        "zcard",
        "zcount",
        "zrange",
        "zrangebyscore",
        "zrank",
        "get",
        "type",
        "pttl",
    ] {
        let rules = MINIMAL_ACL.replace(&format!(" +{command} "), " ");
        assert_ne!(
            rules, MINIMAL_ACL,
            "{command} is not in the documented line"
        );
        let mut args = vec!["ACL", "SETUSER", command, "on", ">pw"];
        args.extend(rules.split_whitespace());
        server.cmd::<()>(&args);
        server
            .redlock(&["run", "--key", "k", "--", "true"])
            .env(
                "REDLOCK_URL",
                &format!("redis://{command}:pw@127.0.0.1:{}", server.port),
            )
            .run()
            .code(77)
            // (A read the acquisition makes itself is denied by Redis, in its own words.)
            .one_line_error("");
        assert!(server.keys_but_history().is_empty(), "{command}");
    }
}

/// Waits until a waiter polls (it joined, and its block was refused: three script calls), then
/// resets the server's counts and lets 3 s pass: the window the tests count calls over.
fn counting_window_once_polling(server: &RedisServer) {
    assert!(
        wait_until(Duration::from_secs(10), || server
            .calls(&["evalsha", "eval"])
            >= 3),
        "the waiter never polled"
    );
    server.cmd::<()>(&["CONFIG", "RESETSTAT"]);
    std::thread::sleep(Duration::from_secs(3));
}

/// A Redis user that may not block (no BLPOP) still waits, by looking at the lock twice a
/// second, with one warning: never a loop of script calls.
/// Repro: a BLPOP refused with an error reply (renamed away, as some hardened
/// servers do; Redis 5.0's fractional timeouts) fell into the "woken" branch, which looked at
/// the lock and blocked again at once: 5,518 connections and script calls in 3 s here. An error
/// reply to BLPOP now means polling twice a second, with one warning.
#[test]
fn a_waiter_whose_blpop_is_refused_polls_gently() {
    let server = RedisServer::start_with(&["--rename-command", "BLPOP", ""]);
    let holder = server
        .redlock(&["acquire", "--key", "k", "--ttl", "30s"])
        .run();
    holder.code(0);
    let token = holder.stdout.trim().to_owned();
    let waiter = server
        .redlock(&["acquire", "--key", "k", "--ttl", "10s", "--wait", "30s"])
        .spawn();
    counting_window_once_polling(&server);
    let connections = server.stat("total_connections_received");
    let scripts = server.calls(&["evalsha", "eval"]);
    // The test's own INFO connections count too.
    assert!(connections <= 6, "{connections} connections in 3 s");
    assert!(scripts <= 12, "{scripts} script calls in 3 s");
    server
        .redlock(&["release", "--key", "k", "--token", &token])
        .run()
        .code(0);
    let out = waiter.wait(Duration::from_secs(10));
    out.code(0)
        .stderr_contains("looking at the lock every 500ms");
}

#[test]
fn a_waiter_denied_blpop_polls_gently() {
    let server = RedisServer::start();
    let rules = MINIMAL_ACL.replace(" +blpop", "");
    let mut args = vec!["ACL", "SETUSER", "noblock", "on", ">pw"];
    args.extend(rules.split_whitespace());
    server.cmd::<()>(&args);
    let url = format!("redis://noblock:pw@127.0.0.1:{}", server.port);
    let holder = server
        .redlock(&["acquire", "--key", "k", "--ttl", "30s"])
        .run();
    holder.code(0);
    let token = holder.stdout.trim().to_owned();
    let waiter = server
        .redlock(&["acquire", "--key", "k", "--ttl", "10s", "--wait", "30s"])
        .env("REDLOCK_URL", &url)
        .spawn();
    counting_window_once_polling(&server);
    let scripts = server.calls(&["evalsha", "eval"]);
    // Twice a second, and a few for a refused block now and then.
    assert!(scripts <= 12, "{scripts} script calls in 3 s");
    server
        .redlock(&["release", "--key", "k", "--token", &token])
        .run()
        .code(0);
    let out = waiter.wait(Duration::from_secs(10));
    out.code(0);
    assert_eq!(
        out.stderr
            .matches("instead of waiting for a wake-up")
            .count(),
        1,
        "{}",
        out.stderr
    );
}

/// Every misconfiguration a user or a server can cause has its own exit code and one line,
/// and leaves Redis as it was: 70 is kept for bugs in redlock.
#[test]
fn no_known_redis_error_is_an_internal_error() {
    let server = RedisServer::start_with(&["--requirepass", "pw"]);
    let url =
        |userinfo: &str, path: &str| format!("redis://{userinfo}127.0.0.1:{}{path}", server.port);
    let acquire = |url: &str, key: &str| {
        Redlock::new(&["acquire", "--key", key, "--ttl", "5s"])
            .env("REDLOCK_URL", url)
            .env("REDLOCK_PASSWORD", "pw")
    };
    let keys = || server.keys();

    // No password where one is needed (a script call has too many arguments for an
    // unauthenticated client: the server answers with a protocol error and hangs up).
    Redlock::new(&["acquire", "--key", "k", "--ttl", "5s"])
        .env("REDLOCK_URL", &url("", ""))
        .run()
        .code(77)
        .one_line_error("the server needs a password; set REDLOCK_PASSWORD");
    // A user but no password anywhere: refused before connecting, not the default user.
    Redlock::new(&["acquire", "--key", "k", "--ttl", "5s"])
        .env("REDLOCK_URL", &url("someone@", ""))
        .run()
        .code(64)
        .one_line_error("the URL names a user but no password is given");
    // A password for a server that has none.
    let open = RedisServer::start();
    Redlock::new(&["acquire", "--key", "k", "--ttl", "5s"])
        .env("REDLOCK_URL", &open.url())
        .env("REDLOCK_PASSWORD", "pw")
        .run()
        .code(77)
        .one_line_error("a password was given, but the server has none set");
    assert!(open.keys().is_empty());
    // A database the server does not have.
    acquire(&url("", "/99"), "k")
        .run()
        .code(64)
        .one_line_error("the server has no database of that number");
    // A command inside a script that the ACL denies.
    server.cmd::<()>(&[
        "ACL",
        "SETUSER",
        "nohset",
        "on",
        ">pw",
        "~redlock:*",
        "-@all",
        "+evalsha",
        "+eval",
        "+script|load",
        "+get",
        "+time",
        "+hgetall",
        "+incr",
        "+ping",
    ]);
    acquire(&url("nohset@", ""), "k")
        .run()
        .code(77)
        .one_line_error("permission denied");
    assert_eq!(
        keys(),
        Vec::<String>::new(),
        "a denied script changed something"
    );
    // A fence counter at its maximum.
    server.cmd::<()>(&["SET", "redlock:{f}:fence", "9223372036854775807"]);
    acquire(&url("", ""), "f")
        .run()
        .code(64)
        .one_line_error("is at its maximum");
    assert_eq!(keys(), ["redlock:{f}:fence"]);
    // Out of memory.
    server.cmd::<()>(&["CONFIG", "SET", "maxmemory", "1"]);
    acquire(&url("", ""), "o")
        .run()
        .code(69)
        .one_line_error("out of memory");
    server.cmd::<()>(&["CONFIG", "SET", "maxmemory", "0"]);
    // Too few replicas for writes.
    server.cmd::<()>(&["CONFIG", "SET", "min-replicas-to-write", "1"]);
    acquire(&url("", ""), "o")
        .run()
        .code(69)
        .one_line_error("too few replicas");
    server.cmd::<()>(&["CONFIG", "SET", "min-replicas-to-write", "0"]);
    assert_eq!(keys(), ["redlock:{f}:fence"]);

    // A replica: not the master.
    let replica = RedisServer::start_with(&[
        "--replicaof",
        "127.0.0.1",
        &server.port.to_string(),
        "--masterauth",
        "pw",
    ]);
    Redlock::new(&["acquire", "--key", "k", "--ttl", "5s"])
        .env("REDLOCK_URL", &replica.url())
        .run()
        .code(69)
        .one_line_error("read-only replica; point --redis at the master");

    // Something that is not Redis on the port.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let http = std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            use std::io::Write as _;
            let _ = stream.write_all(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    Redlock::new(&["acquire", "--key", "k", "--ttl", "5s"])
        .env("REDLOCK_URL", &format!("redis://127.0.0.1:{port}"))
        .run()
        .code(69)
        .one_line_error("not a Redis server");
    http.join().unwrap();
}

/// The minimal ACL is docs/servers.md's, word for word, and grants every command redlock's scripts
/// call: a script that starts calling a new command fails this test until the docs say so.
#[test]
fn the_documented_acl_covers_every_command_the_scripts_call() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("docs/servers.md")).unwrap();
    let line = readme
        .lines()
        .find(|line| line.starts_with("ACL SETUSER redlock on >PASSWORD "))
        .expect("docs/servers.md's ACL line");
    assert_eq!(
        line.trim_start_matches("ACL SETUSER redlock on >PASSWORD "),
        MINIMAL_ACL
    );
    let granted: Vec<String> = MINIMAL_ACL
        .split_whitespace()
        .filter_map(|rule| rule.strip_prefix('+'))
        .map(str::to_ascii_lowercase)
        .collect();
    for entry in std::fs::read_dir(root.join("lua")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|ext| ext != "lua") {
            continue;
        }
        let script = std::fs::read_to_string(&path).unwrap();
        for piece in script
            .split("redis.call(")
            .skip(1)
            .chain(script.split("redis.call, ").skip(1))
        {
            let Some(name) = piece
                .strip_prefix('\'')
                .and_then(|rest| rest.split('\'').next())
            else {
                continue;
            };
            if name == "INFO" {
                // Only on a server older than 6.0, to name its version: such a server has no
                // ACL.
                assert!(script.contains("if redis.setresp == nil then"));
                continue;
            }
            if name == "PUBLISH" {
                // Quorum mode's best-effort release notice, documented with its own rights.
                assert!(readme.contains("`+publish +subscribe` and the channel pattern"));
                continue;
            }
            assert!(
                granted.contains(&name.to_ascii_lowercase()),
                "{} calls {name}, which the documented ACL does not grant",
                path.display()
            );
        }
    }
}

/// A fake server on a loopback port: to each connection's first request it sends what
/// `answer` writes (until that returns or the client hangs up). Serves for at most 60 s.
fn fake_server(answer: fn(&mut std::net::TcpStream)) -> String {
    use std::io::Read as _;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "redis://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let until = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < until {
            let Ok((mut stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            std::thread::spawn(move || {
                let _ = stream.set_nonblocking(false);
                let mut request = [0u8; 4096];
                if matches!(stream.read(&mut request), Ok(n) if n > 0) {
                    answer(&mut stream);
                }
            });
        }
    });
    url
}

/// A reply that never ends in one piece: a valid bulk string, one byte per 300 ms (each read
/// gets something well within the command timeout). Ends when the client hangs up.
fn trickle(stream: &mut std::net::TcpStream) {
    use std::io::Write as _;
    let reply = format!("$40\r\n{}\r\n", "x".repeat(40));
    for byte in reply.bytes() {
        if stream.write_all(&[byte]).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The command timeout bounds a whole reply, not each read of it.
#[test]
fn a_reply_that_trickles_in_is_given_up_after_the_command_timeout() {
    let url = fake_server(trickle);
    let token = "0123456789abcdef0123456789abcdef";
    for args in [
        &["release", "--key", "k", "--token", token][..],
        &["extend", "--key", "k", "--token", token, "--ttl", "10s"],
        &["inspect", "--key", "k"],
        &["list"],
        &["history", "--key", "k"],
        // The doctor fails as any command does at its first request, not per check.
        &["doctor"],
    ] {
        let out = Redlock::new(args)
            .env("REDLOCK_URL", &url)
            .args_timeouts("1s", "1s")
            .run();
        out.code(69).one_line_error("no answer within 1.0s");
        assert!(
            out.elapsed < Duration::from_secs(3),
            "{args:?}: {:?}",
            out.elapsed
        );
    }
}

/// The start of a reply far larger than any redlock asks for, then silence.
fn huge_bulk(stream: &mut std::net::TcpStream) {
    use std::io::Write as _;
    let _ = stream.write_all(b"*1000\r\n$536870912\r\n");
    let _ = stream.write_all(&vec![b'x'; 8 << 20]);
    std::thread::sleep(Duration::from_secs(10));
}

/// Arrays each within any one length cap, whose elements together are too many, then silence.
fn endless_array(stream: &mut std::net::TcpStream) {
    use std::io::Write as _;
    let mut wire = b"*1000\r\n*1000000\r\n".to_vec();
    wire.extend(b":1\r\n".repeat(1_100_000));
    let _ = stream.write_all(&wire);
    std::thread::sleep(Duration::from_secs(10));
}

/// A reply larger than any redlock asks for is refused as it arrives, not
/// buffered until memory runs out (nor waited for until the timeout).
#[test]
fn a_reply_too_large_for_any_request_is_refused_at_once() {
    for answer in [huge_bulk as fn(&mut std::net::TcpStream), endless_array] {
        let url = fake_server(answer);
        for args in [&["inspect", "--key", "k"][..], &["list"]] {
            let out = Redlock::new(args)
                .env("REDLOCK_URL", &url)
                .args_timeouts("5s", "5s")
                .run();
            out.code(69).one_line_error("not a Redis server");
            assert!(
                out.elapsed < Duration::from_secs(4),
                "{args:?}: {:?}",
                out.elapsed
            );
        }
    }
}

/// A secret or certificate path that is not a small regular file (a FIFO,
/// which would block before any timeout, a device that never ends, a huge file) is refused at
/// once with exit 64, saying why.
#[test]
fn secret_and_certificate_files_must_be_small_regular_files() {
    let dir = TempDir::new("files");
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let fifo = fifo.to_str().unwrap();
    let long_line = dir.path().join("long");
    std::fs::write(&long_line, "p".repeat(5000)).unwrap();
    std::fs::set_permissions(&long_line, std::fs::Permissions::from_mode(0o600)).unwrap();
    let huge = dir.path().join("huge.pem");
    std::fs::write(&huge, "#".repeat(5 << 20)).unwrap();
    let key = dir.path().join("key.pem");
    std::fs::write(&key, "").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (huge, key) = (huge.to_str().unwrap(), key.to_str().unwrap());
    let not_regular = "not a regular file (a FIFO, socket or device)";
    let cases: [(&str, &[&str], &str); 8] = [
        ("redis", &["--password-file", fifo], not_regular),
        ("redis", &["--password-file", "/dev/zero"], not_regular),
        (
            "redis",
            &["--password-file", long_line.to_str().unwrap()],
            "the first line is longer than 4 KiB",
        ),
        ("rediss", &["--tls-ca", fifo], not_regular),
        ("rediss", &["--tls-ca", "/dev/zero"], not_regular),
        ("rediss", &["--tls-ca", huge], "larger than 4 MiB"),
        (
            "rediss",
            &["--tls-cert", fifo, "--tls-key", key],
            not_regular,
        ),
        (
            "rediss",
            &["--tls-cert", huge, "--tls-key", fifo],
            &format!("--tls-key {fifo}: {not_regular}"),
        ),
    ];
    for (scheme, args, why) in cases {
        Redlock::new(&["inspect", "--key", "k"])
            .args(args)
            .env("REDLOCK_URL", &format!("{scheme}://127.0.0.1:1"))
            .spawn()
            .wait(Duration::from_secs(5))
            .code(64)
            .one_line_error(why);
    }
}
