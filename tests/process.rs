//! What redlock inherits from its caller and passes on to its command: closed standard
//! descriptors, ignored and blocked signals, every signal that would end it, a terminal with
//! job control, and stderr shared with others (one line, one write). Also: a mistyped option
//! never reaches Redis.

use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{REDLOCK, RedisServer, Redlock, TempDir, wait_for_file, wait_until};

const HOLDERS: &str = "redlock:{k}:holders";

fn lock_is_free(server: &RedisServer) -> bool {
    server.cmd::<i64>(&["EXISTS", HOLDERS]) == 0
}

/// Error replies the server has sent since its stats were reset, but NOSCRIPT (the scripts
/// were flushed on purpose): anything redlock wrote into its connection that was not a
/// well-formed command shows up here.
fn error_replies(server: &RedisServer) -> Vec<String> {
    let info: String = server.cmd(&["INFO", "errorstats"]);
    info.lines()
        .filter(|line| line.starts_with("errorstat_") && !line.starts_with("errorstat_NOSCRIPT"))
        .map(str::to_owned)
        .collect()
}

/// With stdin, stdout or stderr closed by the caller (`2>&-`), no connection may take the
/// descriptor's place: a log line would go into the Redis socket. `-v` logs every step, and an
/// empty script cache makes every script go out as EVAL after a NOSCRIPT reply.
#[test]
fn closed_standard_descriptors_do_not_break_the_lock() {
    let server = RedisServer::start();
    for fd in [0, 1, 2] {
        let close = format!("exec {fd}>&-");
        server.cmd::<()>(&["CONFIG", "RESETSTAT"]);
        server.cmd::<()>(&["SCRIPT", "FLUSH"]);
        server
            .redlock(&["run", "-v", "--key", "k", "--", "true"])
            .after_shell(&close)
            .run()
            .code(0);
        assert!(
            lock_is_free(&server),
            "run with fd {fd} closed left the lock"
        );

        server.cmd::<()>(&["SCRIPT", "FLUSH"]);
        let fence: Option<String> = server.cmd(&["GET", "redlock:{k}:fence"]);
        let acquired = server
            .redlock(&["acquire", "-v", "--key", "k", "--ttl", "30s"])
            .after_shell(&close)
            .run();
        if fd == 1 {
            // Nobody could read the token, so nobody could release the lock: not taken.
            acquired
                .code(74)
                .one_line_error("stdout is closed: the token could not be printed");
            assert!(lock_is_free(&server));
            let after: Option<String> = server.cmd(&["GET", "redlock:{k}:fence"]);
            assert_eq!(after, fence, "acquire took a fence");
        } else {
            acquired.code(0);
            let token = acquired.stdout.trim().to_owned();
            server.cmd::<()>(&["SCRIPT", "FLUSH"]);
            server
                .redlock(&["release", "-v", "--key", "k", "--token", &token])
                .after_shell(&close)
                .run()
                .code(0);
            assert!(
                lock_is_free(&server),
                "release with fd {fd} closed left the lock"
            );
        }
        assert_eq!(
            error_replies(&server),
            Vec::<String>::new(),
            "with fd {fd} closed"
        );
    }
}

/// A standard descriptor the caller closed is closed for the command too, as it would be
/// without redlock (std puts /dev/null in its place for redlock itself). Repro: `redlock run
/// --key k -- /bin/echo hi >&-` exited 0 (the words went to /dev/null); `/bin/echo hi >&-`
/// exits 1, "Bad file descriptor".
#[test]
fn a_descriptor_the_caller_closed_is_closed_for_the_command() {
    let server = RedisServer::start();
    let dir = TempDir::new("closed-fds");
    for fd in 0..3 {
        let seen = dir.path().join(format!("fd{fd}"));
        // What the command finds at `fd`: "closed", or where it leads.
        let probe = format!(
            "exec 9>{}; if [ -e /proc/$$/fd/{fd} ]; then readlink /proc/$$/fd/{fd} >&9; else echo closed >&9; fi",
            seen.display()
        );
        server
            .redlock(&["run", "--key", "k", "--", "sh", "-c", &probe])
            .after_shell(&format!("exec {fd}>&-"))
            .run()
            .code(0);
        assert_eq!(
            std::fs::read_to_string(&seen).unwrap().trim(),
            "closed",
            "fd {fd}"
        );
        // An open one is passed on as it is.
        server
            .redlock(&["run", "--key", "k", "--", "sh", "-c", &probe])
            .run()
            .code(0);
        assert_ne!(std::fs::read_to_string(&seen).unwrap().trim(), "closed");
    }
    // The command's own status, as without redlock.
    let without = Command::new("bash")
        .args(["-c", "exec >&-; exec /bin/echo hi"])
        .status()
        .unwrap();
    assert_eq!(without.code(), Some(1));
    server
        .redlock(&["run", "--key", "k", "--", "/bin/echo", "hi"])
        .after_shell("exec >&-")
        .run()
        .code(1)
        .stderr_contains("Bad file descriptor");
}

/// What a command prints is output: a stdout the caller closed (`>&-`; std puts /dev/null in
/// its place) or a full disk is exit 74 with one line, for every command that prints, help and
/// version included. Repro: `metrics >&-`, `--version >&-`, `--help >/dev/full` exited 0.
#[test]
fn output_that_cannot_be_written_is_exit_74() {
    let server = RedisServer::start();
    server
        .redlock(&["acquire", "--key", "k", "--ttl", "30s"])
        .run()
        .code(0);
    for args in [
        &["metrics"][..],
        &["list"],
        &["inspect", "--key", "k"],
        &["--version"],
        &["--help"],
        &["acquire", "--help"],
        &["man", "run"],
    ] {
        server
            .redlock(args)
            .after_shell("exec 1>&-")
            .run()
            .code(74)
            .one_line_error("writing to stdout: it is closed");
        server
            .redlock(args)
            .after_shell("exec 1>/dev/full")
            .run()
            .code(74)
            .one_line_error("writing to stdout: No space left on device");
    }
    // Help whose reader stopped reading (`--help | head -1`) is no error.
    let out = Redlock::new(&["--help"])
        .after_shell("exec 1> >(exit 0); sleep 0.3")
        .run();
    out.code(0);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
}

/// A pipe whose reader is gone makes printing the token fail: the lock is given back (74).
#[test]
fn acquire_gives_the_lock_back_when_the_token_cannot_be_printed() {
    let server = RedisServer::start();
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);
    let out = Command::new(REDLOCK)
        .args(["acquire", "--key", "k", "--ttl", "30s"])
        .env_clear()
        .env("REDLOCK_URL", server.url())
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(74), "{stderr}");
    assert!(stderr.contains("writing to stdout"), "{stderr}");
    assert!(stderr.contains("released again"), "{stderr}");
    assert!(lock_is_free(&server), "{stderr}");
}

/// What the command sees of its signal state (`SigIgn`, `SigBlk` of /proc/self/status, as
/// numbers), run through redlock or, for comparison, directly, after `setup` in the calling
/// bash. The real-time signals the C library reserves for itself (glibc installs a handler for
/// one before any program code runs) are left out.
fn signal_state(server: &RedisServer, setup: &str, through_redlock: bool) -> (u64, u64) {
    let probe = "grep -E '^Sig(Ign|Blk)' /proc/self/status";
    let command = if through_redlock {
        format!("{setup}; exec {REDLOCK} run --key k -- sh -c \"{probe}\"")
    } else {
        format!("{setup}; exec sh -c \"{probe}\"")
    };
    let out = Command::new("bash")
        .arg("-c")
        .arg(&command)
        .env("REDLOCK_URL", server.url())
        .output()
        .unwrap();
    assert!(out.status.success(), "{command}: {out:?}");
    let reserved = (31..nix::libc::SIGRTMIN() - 1).fold(0u64, |mask, bit| mask | 1 << bit);
    let field = |name: &str| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap()
            & !reserved
    };
    (field("SigIgn:"), field("SigBlk:"))
}

/// The command starts with the dispositions redlock itself was started with: what the caller
/// ignored stays ignored, and nothing redlock changes for itself (SIGPIPE, SIGCHLD, the
/// signals it blocks) leaks through.
#[test]
fn the_command_inherits_the_callers_signal_dispositions() {
    let server = RedisServer::start();
    for setup in [
        "true",
        "trap '' PIPE",
        "trap '' HUP INT QUIT TERM USR1 ALRM CHLD",
    ] {
        assert_eq!(
            signal_state(&server, setup, true),
            signal_state(&server, setup, false),
            "after `{setup}`"
        );
    }
    // A blocked mask is passed on too (bash cannot block signals; python can).
    let probe = format!(
        "import os, signal; signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGUSR1, signal.SIGALRM}}); \
         os.execv('{REDLOCK}', ['redlock', 'run', '--key', 'k', '--', 'grep', 'SigBlk', '/proc/self/status'])"
    );
    let out = Command::new("python3")
        .args(["-c", &probe])
        .env("REDLOCK_URL", server.url())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // SIGUSR1 is 10, SIGALRM 14: bits 9 and 13.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "SigBlk:\t0000000000002200"
    );
}

/// `(trap '' PIPE; redlock run -- yes | :)`: yes must see EPIPE and report it, as it does
/// under timeout(1); with SIGPIPE reset to the default it would die silently.
#[test]
fn an_ignored_sigpipe_stays_ignored_for_the_command() {
    let server = RedisServer::start();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "trap '' PIPE; {REDLOCK} run --key k -- yes | :; echo status=${{PIPESTATUS[0]}}"
        ))
        .env("REDLOCK_URL", server.url())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("status=1"), "{stdout}{stderr}");
    assert!(stderr.contains("Broken pipe"), "{stderr}");
    assert!(lock_is_free(&server));
}

/// `nohup` or `trap '' INT` before redlock: the signal stays ignored for redlock (nothing is
/// forwarded, nothing stops) and for the command.
#[test]
fn a_signal_the_caller_ignored_is_ignored_by_redlock() {
    let server = RedisServer::start();
    let dir = TempDir::new("ignored");
    let script = format!("echo $$ > {}/pid; sleep 1", dir.path().display());
    let running = server
        .redlock(&["run", "-v", "--key", "k", "--", "sh", "-c", &script])
        .after_shell("trap '' INT HUP")
        .spawn();
    wait_for_file(&dir.path().join("pid"), Duration::from_secs(10));
    running.signal("INT");
    running.signal("HUP");
    let out = running.wait(Duration::from_secs(10));
    out.code(0);
    assert!(!out.stderr.contains("forwarding"), "{}", out.stderr);
    assert!(lock_is_free(&server));
}

/// The signals whose default action ends a process, by the names bash's `kill -s` takes.
fn terminating_signals() -> Vec<(String, i32)> {
    let named = [
        ("HUP", 1),
        ("INT", 2),
        ("QUIT", 3),
        ("ILL", 4),
        ("TRAP", 5),
        ("ABRT", 6),
        ("BUS", 7),
        ("FPE", 8),
        ("USR1", 10),
        ("SEGV", 11),
        ("USR2", 12),
        ("ALRM", 14),
        ("TERM", 15),
        ("STKFLT", 16),
        ("XCPU", 24),
        ("XFSZ", 25),
        ("VTALRM", 26),
        ("PROF", 27),
        ("IO", 29),
        ("PWR", 30),
        ("SYS", 31),
    ];
    let (min, max) = (nix::libc::SIGRTMIN(), nix::libc::SIGRTMAX());
    let mut signals: Vec<(String, i32)> = named
        .iter()
        .map(|(name, number)| ((*name).to_owned(), *number))
        .collect();
    signals.extend([
        ("RTMIN".to_owned(), min),
        ("RTMIN+1".to_owned(), min + 1),
        ("RTMAX-1".to_owned(), max - 1),
        ("RTMAX".to_owned(), max),
    ]);
    signals
}

/// Sends by number: a real-time signal's name means another number to bash (glibc keeps two
/// for itself) than to a musl build of redlock (musl keeps three).
fn send(pid: u32, number: i32) {
    let sent = Command::new("bash")
        .arg("-c")
        .arg(format!("kill -n {number} {pid}"))
        .status()
        .unwrap();
    assert!(sent.success(), "kill -n {number} {pid}");
}

/// A probe that catches every signal it can, writes the number it got, and exits 100 + N.
const PROBE: &str = r#"
import os, signal, sys, time
where = sys.argv[1]
def caught(number, frame):
    with open(where + "/got", "w") as f:
        f.write(str(number))
    os._exit(100 + number)
for number in range(1, signal.NSIG):
    if number in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
        continue
    try:
        signal.signal(number, caught)
    except (OSError, ValueError, RuntimeError):
        pass
with open(where + "/pid", "w") as f:
    f.write(str(os.getpid()))
while True:
    time.sleep(0.05)
"#;

/// Every signal that would end redlock is passed on to the command, exactly, and the run ends
/// with the lock released; while waiting for the lock, it ends the wait and leaves the queue.
#[test]
fn every_signal_that_would_end_redlock_is_forwarded_and_the_lock_released() {
    let server = RedisServer::start();
    for (name, number) in terminating_signals() {
        let dir = TempDir::new("every-signal");
        let running = server
            .redlock(&[
                "run", "--key", "k", "--ttl", "5s", "--", "python3", "-c", PROBE,
            ])
            .arg(dir.path())
            .spawn();
        wait_for_file(&dir.path().join("pid"), Duration::from_secs(10));
        send(running.pid(), number);
        let out = running.wait(Duration::from_secs(10));
        out.code(100 + number);
        let got = wait_for_file(&dir.path().join("got"), Duration::from_secs(1));
        assert_eq!(got, number.to_string(), "SIG{name} arrived as {got}");
        assert!(lock_is_free(&server), "lock held after SIG{name}");
    }

    let holder = server
        .redlock(&["acquire", "--key", "k", "--ttl", "60s"])
        .run();
    holder.code(0);
    for (name, number) in terminating_signals() {
        let waiter = server
            .redlock(&["run", "--key", "k", "--wait", "60s", "--", "true"])
            .spawn();
        assert!(wait_until(Duration::from_secs(10), || {
            let out = server.redlock(&["inspect", "--key", "k", "--json"]).run();
            out.json()["waiters"]
                .as_array()
                .is_some_and(|w| w.len() == 1)
        }));
        send(waiter.pid(), number);
        waiter.wait(Duration::from_secs(5)).code(128 + number);
        let out = server.redlock(&["inspect", "--key", "k", "--json"]).run();
        assert_eq!(
            out.json()["waiters"],
            serde_json::json!([]),
            "after SIG{name}"
        );
    }
}

/// Ctrl-Z of the command, on a terminal: under a shell with job control, redlock stops with it
/// as a job stopped by SIGTSTP does (the shell's `$?` is 128 + 20, as for any Ctrl-Z), and so
/// does the rest of redlock's job (here the script that called it: a shell sees a job stopped
/// only when all of it is); `fg` continues them. Where no shell could continue redlock (its
/// process group orphaned: here redlock leads the terminal's session), it does not stop, and
/// continues the command. It stopped alone, with SIGSTOP: there for good, the lock held until
/// its lease lapsed (the Ctrl-Z test below hung so, now and then, when its shell left first),
/// and inside a job for good too, the shell waiting for the rest of the job.
#[test]
fn a_command_stopped_on_the_terminal_stops_redlock_only_where_a_shell_can_continue_it() {
    let server = RedisServer::start();
    let dir = TempDir::new("job-control");
    let script = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    // A job of a shell with job control, stopped, then continued with `fg`.
    let under_shell = |job: &str| {
        format!("set -m\n{job}\necho \"stopped rc=$?\"\nfg >/dev/null\necho \"ended rc=$?\"\n")
    };
    let in_job = script(
        "job.sh",
        under_shell("\"$REDLOCK\" run --key k -- sh -c 'kill -TSTP $$; echo after'"),
    );
    let in_script = script(
        "in-script.sh",
        under_shell(
            "sh -c '\"$REDLOCK\" run --key k -- sh -c \"kill -TSTP \\$\\$; echo after\"; echo inner'",
        ),
    );
    let leading = script(
        "leading.sh",
        "exec \"$REDLOCK\" run --key k -- sh -c 'kill -TSTP $$; echo after'\n".to_owned(),
    );
    for (script, expected) in [
        (&leading, &["after"][..]),
        (&in_job, &["stopped rc=148", "after", "ended rc=0"][..]),
        (
            &in_script,
            &["stopped rc=148", "after", "inner", "ended rc=0"][..],
        ),
    ] {
        let terminal = Command::new("script")
            .args(["-qfec", &format!("sh {}", script.display()), "/dev/null"])
            .env("REDLOCK", REDLOCK)
            .env("REDLOCK_URL", server.url())
            // (script(1) runs its command with $SHELL.)
            .env("SHELL", "/bin/sh")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("script(1) runs");
        let pid = terminal.id();
        let ended = wait_until(Duration::from_secs(15), || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |stat| stat.contains(") Z "))
        });
        if !ended {
            // Its descendants first (a stopped redlock outlives script(1)'s end).
            // (One may be gone by now: errors are left unsaid.)
            for stuck in descendants(pid).into_iter().chain([pid]) {
                let stuck = nix::unistd::Pid::from_raw(i32::try_from(stuck).expect("a pid"));
                let _ = nix::sys::signal::kill(stuck, nix::sys::signal::Signal::SIGKILL);
            }
        }
        let out = terminal.wait_with_output().expect("script(1) ends");
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(
            ended,
            "{}: the terminal hung; it showed: {shown}",
            script.display()
        );
        for line in expected {
            assert!(
                shown.contains(line),
                "{}: no '{line}' in: {shown}",
                script.display()
            );
        }
        assert!(
            lock_is_free(&server),
            "{}: the lock stayed held",
            script.display()
        );
    }
}

/// The processes below `pid`, from /proc (the kernel's list of each one's children).
fn descendants(pid: u32) -> Vec<u32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|child| child.parse().ok())
        .collect::<Vec<u32>>();
    children
        .iter()
        .flat_map(|&child| descendants(child))
        .chain(children.iter().copied())
        .collect()
}

/// Ctrl-Z pressed again and again while `run` starts its command, under a shell with job
/// control that resumes whatever stops (`fg`), as a person at a terminal would. The command's
/// search through a long PATH makes the moments before exec long. If the command took the
/// terminal before exec, a Ctrl-Z there would stop it while redlock waited for the exec, and
/// the terminal would hang for good.
#[test]
fn ctrl_z_while_the_command_starts_never_hangs_the_terminal() {
    let server = RedisServer::start();
    let bogus: Vec<String> = (0..3000).map(|n| format!("/nonexistent/{n}")).collect();
    let inner = format!(
        "set -m; export PATH={}:/usr/bin:/bin; {REDLOCK} run --key k -- sleep 0.2; rc=$?; n=0; \
         while [ $rc -ge 128 ] && [ $n -lt 100 ]; do n=$((n+1)); fg >/dev/null 2>&1; rc=$?; done",
        bogus.join(":")
    );
    for round in 0..3 {
        let mut shell = Command::new("script")
            .args(["-qfec", &format!("bash -c '{inner}'"), "/dev/null"])
            .env("REDLOCK_URL", server.url())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("script(1) runs");
        let mut typing = shell.stdin.take().unwrap();
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(400) {
            use std::io::Write as _;
            let _ = typing.write_all(b"\x1a");
            let _ = typing.flush();
            std::thread::sleep(Duration::from_millis(2));
        }
        let finished = wait_until(Duration::from_secs(15), || {
            shell.try_wait().unwrap().is_some()
        });
        if !finished {
            let _ = shell.kill();
        }
        drop(typing);
        let _ = shell.wait();
        assert!(finished, "round {round}: the terminal hung");
        // Ended by the command, or by the hang-up when the shell left a stopped job behind.
        assert!(
            wait_until(Duration::from_secs(5), || lock_is_free(&server)),
            "round {round}: the lock stayed held"
        );
    }
}

/// A mistyped option is a usage error before anything reaches Redis; the command starts at
/// `--` or at the first word that is not an option.
#[test]
fn a_mistyped_option_is_a_usage_error_and_never_reaches_redis() {
    let server = RedisServer::start();
    let connections = || -> u64 {
        let info: String = server.cmd(&["INFO", "stats"]);
        info.lines()
            .find_map(|line| line.strip_prefix("total_connections_received:"))
            .and_then(|count| count.trim().parse().ok())
            .unwrap()
    };
    let before = connections();
    server
        .redlock(&["run", "--key", "k", "--tl", "5s", "--", "true"])
        .run()
        .code(64)
        .one_line_error("unexpected argument '--tl'");
    server
        .redlock(&["run", "--key", "k", "--ttll", "5s", "touch", "x"])
        .run()
        .code(64)
        .one_line_error("a similar argument exists: '--ttl'");
    // Each `server.cmd` above counts one connection of its own.
    assert_eq!(connections(), before + 1, "redlock connected to Redis");
    server
        .redlock(&["run", "--key", "k", "sh", "-c", "exit 3"])
        .run()
        .code(3);
    server
        .redlock(&["run", "--key", "k", "--", "--not-an-option"])
        .run()
        .code(127);
}

/// Each line redlock writes to stderr is one write: lines from parallel jobs sharing a CI log
/// cannot interleave. A datagram socket keeps each write a message of its own.
#[test]
fn each_stderr_line_is_one_write() {
    use std::os::unix::net::UnixDatagram;
    let server = RedisServer::start();
    let holder = server
        .redlock(&["acquire", "--key", "k", "--ttl", "30s"])
        .run();
    holder.code(0);
    for args in [
        &["run", "-v", "--key", "other", "--", "true"][..],
        &["run", "--key", "k", "--", "true"],
        &[
            "run",
            "--key",
            "k",
            "--wait",
            "1s",
            "--progress-every",
            "200ms",
            "--",
            "true",
        ],
    ] {
        let (ours, theirs) = UnixDatagram::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let status = Command::new(REDLOCK)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("REDLOCK_URL", server.url())
            .stdin(Stdio::null())
            .stderr(Stdio::from(OwnedFd::from(theirs)))
            .status()
            .unwrap();
        let mut messages = Vec::new();
        let mut buffer = [0u8; 65536];
        while let Ok(n) = ours.recv(&mut buffer) {
            if n == 0 {
                break;
            }
            messages.push(String::from_utf8_lossy(&buffer[..n]).into_owned());
        }
        assert!(!messages.is_empty(), "{args:?} ({status:?}) wrote nothing");
        for message in &messages {
            assert!(
                message.starts_with("redlock: ")
                    && message.ends_with('\n')
                    && message.matches('\n').count() == 1,
                "{args:?}: a write that is not one whole line: {message:?} in {messages:?}"
            );
        }
    }
}

/// Whether the process `pid` is non-dumpable, as a process of another user sees it: as root,
/// the files in its /proc directory are root's instead of its owner's; otherwise its
/// environment cannot be read.
fn non_dumpable(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    if nix::unistd::geteuid().is_root() {
        std::fs::metadata(format!("/proc/{pid}/environ"))
            .unwrap()
            .uid()
            == 0
    } else {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_err_and(|err| err.kind() == std::io::ErrorKind::PermissionDenied)
    }
}

/// A waiting `redlock acquire` under another user than the test's (as root: nobody), with
/// `password` in REDLOCK_PASSWORD if given; whether it is non-dumpable while it waits.
fn waits_non_dumpable(server: &RedisServer, password: Option<&str>) -> bool {
    use std::os::unix::process::CommandExt as _;
    let mut command = Command::new(REDLOCK);
    command
        .args([
            "acquire", "--key", "k", "--ttl", "10s", "--wait", "10s", "-q",
        ])
        .env_clear()
        .env("REDLOCK_URL", server.url())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(password) = password {
        command.env("REDLOCK_PASSWORD", password);
    }
    if nix::unistd::geteuid().is_root() {
        command.uid(65534).gid(65534);
    }
    let mut waiter = command.spawn().unwrap();
    let pid = waiter.id();
    let queued = wait_until(Duration::from_secs(5), || {
        server.cmd::<i64>(&["ZCARD", "redlock:{k}:queue"]) == 1
    });
    let seen = non_dumpable(pid);
    let _ = waiter.kill();
    let _ = waiter.wait();
    assert!(queued, "the waiter never queued");
    // Its queue entry goes when it would have timed out; not waited for.
    server.cmd::<()>(&["DEL", "redlock:{k}:queue", "redlock:{k}:waiters"]);
    seen
}

/// Once redlock holds a password it is non-dumpable (no core file with the password
/// in it, no reading of its memory by the same user); without one it stays as it was.
#[test]
fn a_process_holding_a_password_is_not_dumpable() {
    let open = RedisServer::start();
    let holder = open
        .redlock(&["acquire", "--key", "k", "--ttl", "30s"])
        .run();
    holder.code(0);
    assert!(
        !waits_non_dumpable(&open, None),
        "dumpable without a password"
    );

    let guarded = RedisServer::start_with(&["--requirepass", "pw"]);
    guarded
        .redlock(&["acquire", "--key", "k", "--ttl", "30s"])
        .env("REDLOCK_PASSWORD", "pw")
        .run()
        .code(0);
    assert!(waits_non_dumpable(&guarded, Some("pw")));
}
