//! The aarch64 build, run here under qemu-user against a native redis-server: the binary the
//! arm64 release files hold (the tarball's, in `REDLOCK_DIST`: see tests/util/dist.rs) does
//! what the x86_64 one does. Its version, the README's quick start (a contended run and a
//! waiter with it), a forwarded signal, `inspect --json`, and the exit codes a user or a
//! server can cause. The .deb and the image for arm64 are checked in tests/packaging.rs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::util::dist::{self, AARCH64};
use crate::util::{RedisServer, Redlock, TempDir, free_port, wait_until};

/// The arm64 build and the emulator that runs it, unpacked into a directory of the test's.
struct Arm64 {
    dir: TempDir,
    binary: PathBuf,
    emulator: PathBuf,
}

impl Arm64 {
    /// None, after saying why, where there is no arm64 build or no qemu (see dist::missing).
    fn get() -> Option<Self> {
        let release = dist::release_dir_or_skip()?;
        let emulator = dist::qemu_aarch64_or_skip()?;
        let dir = TempDir::new("aarch64");
        let binary = dist::tarball_binary(&release, AARCH64, dir.path());
        assert_eq!(dist::elf_arch(&binary), "aarch64", "{}", binary.display());
        Some(Self {
            dir,
            binary,
            emulator,
        })
    }

    /// `redlock ARGS` by the arm64 build, against `server`.
    fn redlock(&self, server: &RedisServer, args: &[&str]) -> Redlock {
        server.redlock(args).emulated(&self.emulator, &self.binary)
    }

    /// A shell in which `redlock` is the arm64 build (a function), for lines from the README.
    fn shell(&self, server: &RedisServer, line: &str) -> Redlock {
        let function = format!(
            "redlock() {{ '{}' '{}' \"$@\"; }}",
            self.emulator.display(),
            self.binary.display()
        );
        Redlock::new(&[])
            .with_binary(Path::new("/bin/sh"))
            .arg("-c")
            .arg(format!("{function}\n{line}"))
            .env("REDLOCK_URL", &server.url())
    }
}

/// `--version`: the version, the commit and the target, the same commit as the x86_64 build's.
#[test]
fn aarch64_version_names_its_target_and_commit() {
    let Some(arm64) = Arm64::get() else { return };
    let out = Redlock::new(&["--version"])
        .emulated(&arm64.emulator, &arm64.binary)
        .run();
    out.code(0);
    let native = Redlock::new(&["--version"]).run();
    let expected = native
        .stdout
        .trim()
        .replace(
            &format!("{}-unknown-linux-", std::env::consts::ARCH),
            "aarch64-unknown-linux-",
        )
        .replace("-linux-gnu)", "-linux-musl)");
    assert_eq!(
        out.stdout.trim(),
        expected,
        "the native build: {}",
        native.stdout
    );
    assert!(
        out.stdout.trim().ends_with(&format!(" {AARCH64})")),
        "{}",
        out.stdout
    );
}

/// README's quick start, as written but for the job's `sleep 20` (it waits for a file
/// instead): the first run holds the lock; a second at once exits 75 and names the holder;
/// with `--wait 1m` a third queues, and runs once the first is done, with a higher fence.
#[test]
fn aarch64_quick_start_contention_and_a_waiter() {
    let Some(arm64) = Arm64::get() else { return };
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = &readme[readme.find("## Quick start").expect("README's quick start")..];
    let start = section.find("```sh\n").unwrap() + "```sh\n".len();
    let line = section[start..].lines().next().unwrap();
    assert_eq!(
        line,
        "redlock run --key demo --ttl 10s -- sh -c 'echo \"fence $REDLOCK_FENCE\"; sleep 20'"
    );
    let go = arm64.dir.path().join("go");
    let line = line.replace(
        "sleep 20",
        &format!("while [ ! -e {} ]; do sleep 0.05; done", go.display()),
    );
    let server = RedisServer::start();
    let first = arm64.shell(&server, &line).spawn();
    let held = wait_until(Duration::from_secs(20), || {
        server
            .redlock(&["inspect", "--key", "demo"])
            .run()
            .status
            .code()
            == Some(0)
    });
    assert!(held, "the first run never took the lock");

    let busy = arm64.shell(&server, &line).run();
    busy.code(75).stderr_contains("is busy: held by");

    let waiter = arm64
        .shell(&server, &line.replace("--ttl 10s", "--ttl 10s --wait 1m"))
        .spawn();
    let queued = wait_until(Duration::from_secs(20), || {
        let view = server
            .redlock(&["inspect", "--key", "demo", "--json"])
            .run();
        view.status.code() == Some(0) && view.json()["waiters"].as_array().unwrap().len() == 1
    });
    assert!(queued, "the waiter never queued");
    std::fs::write(&go, "").unwrap();
    let first = first.wait(Duration::from_secs(20));
    first.code(0);
    let waiter = waiter.wait(Duration::from_secs(20));
    waiter.code(0);
    let fence = |out: &crate::util::Output| -> u64 {
        out.stdout
            .trim()
            .strip_prefix("fence ")
            .and_then(|fence| fence.parse().ok())
            .unwrap_or_else(|| out.fail("no 'fence N' line"))
    };
    assert!(
        fence(&waiter) > fence(&first),
        "{} then {}",
        first.stdout,
        waiter.stdout
    );
    server.redlock(&["inspect", "--key", "demo"]).run().code(1);
}

/// SIGTERM to the arm64 redlock reaches its command, whose death by it is the exit status
/// (143), and the lock is released.
#[test]
fn aarch64_forwards_a_signal_and_releases() {
    let Some(arm64) = Arm64::get() else { return };
    let server = RedisServer::start();
    let started = arm64.dir.path().join("started");
    let running = arm64
        .redlock(
            &server,
            &["run", "--key", "signal", "--ttl", "10s", "--", "sh", "-c"],
        )
        .arg(format!("echo $$ > {}; exec sleep 60", started.display()))
        .spawn();
    let child: u32 = crate::util::wait_for_file(&started, Duration::from_secs(20))
        .parse()
        .unwrap();
    running.signal("TERM");
    let out = running.wait(Duration::from_secs(20));
    out.code(143);
    assert!(!crate::util::alive(child), "the command outlived redlock");
    server
        .redlock(&["inspect", "--key", "signal"])
        .run()
        .code(1);
}

/// `inspect --json` by the arm64 build: the same fields as the native build's, about a lock
/// the arm64 build holds; its token releases it once.
#[test]
fn aarch64_inspect_json_and_release() {
    let Some(arm64) = Arm64::get() else { return };
    let server = RedisServer::start();
    let acquired = arm64
        .redlock(&server, &["acquire", "--key", "held", "--ttl", "30s"])
        .run();
    acquired.code(0);
    let token = acquired.stdout.trim();
    let view = arm64
        .redlock(&server, &["inspect", "--key", "held", "--json"])
        .run();
    view.code(0);
    let view = view.json();
    let native = server
        .redlock(&["inspect", "--key", "held", "--json"])
        .run()
        .json();
    assert_eq!(
        crate::util::field_names(&view),
        crate::util::field_names(&native)
    );
    assert_eq!(view["state"], "held");
    assert_eq!(view["holders"][0]["fence"], native["holders"][0]["fence"]);
    assert_eq!(
        crate::util::field_names(&view["holders"][0]),
        crate::util::field_names(&native["holders"][0])
    );
    arm64
        .redlock(&server, &["release", "--key", "held"])
        .env("REDLOCK_TOKEN", token)
        .run()
        .code(0);
    arm64
        .redlock(&server, &["release", "--key", "held"])
        .env("REDLOCK_TOKEN", token)
        .run()
        .code(1);
}

/// The exit codes a user or a server can cause, each with its one-line error, as the native
/// build gives them: bad input 64, Redis unreachable 69, busy 75 (0 with -E 0), a command not
/// found 127 or not executable 126.
#[test]
fn aarch64_exit_codes() {
    let Some(arm64) = Arm64::get() else { return };
    let server = RedisServer::start();
    let not_executable = arm64.dir.path().join("not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    let unreachable = format!("redis://127.0.0.1:{}", free_port());
    let holder = server
        .redlock(&["acquire", "--key", "busy", "--ttl", "30s"])
        .run();
    holder.code(0);
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            args(&["run", "--key", "k", "--ttl", "10M", "--", "true"]),
            64,
            "--ttl",
        ),
        (
            args(&["--redis", &unreachable, "run", "--key", "k", "--", "true"]),
            69,
            "127.0.0.1",
        ),
        (args(&["run", "--key", "busy", "--", "true"]), 75, "is busy"),
        (
            args(&["run", "--key", "k", "--", "no-such-command-here"]),
            127,
            "no-such-command-here",
        ),
        (
            vec![
                "run".into(),
                "--key".into(),
                "k".into(),
                "--".into(),
                not_executable.display().to_string(),
            ],
            126,
            "permission denied",
        ),
    ];
    for (argv, code, needle) in cases {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let native = server.redlock(&argv).run();
        native.code(code).one_line_error(needle);
        arm64
            .redlock(&server, &argv)
            .run()
            .code(code)
            .one_line_error(needle);
    }
    arm64
        .redlock(
            &server,
            &["run", "-q", "-E", "0", "--key", "busy", "--", "true"],
        )
        .run()
        .code(0)
        .stderr_empty();
}

fn args(words: &[&str]) -> Vec<String> {
    words.iter().map(|word| (*word).to_owned()).collect()
}
