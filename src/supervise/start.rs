//! Starting the command on a lease just taken: unless a terminating signal came first or the
//! lease is about to lapse (then the lock is released and nothing starts), spawn it in a
//! process group of its own; and the messages for a command that could not be started (what
//! exec found missing: the file, its interpreter, its dynamic loader).

use super::*;

/// Whether the command was started.
pub(super) enum Started {
    /// Running; the lease's connection passed on to the renewals.
    Running(Child, Kept),
    /// Not started (a signal came first); the lock was released.
    Interrupted(Done),
    /// Not started: the lease was about to lapse; the lock was released.
    TooLate(TooLate),
}

/// Starts the command on the lease just taken, unless a terminating signal came first or the
/// lease is about to lapse (`too_late`: an acquisition answered late, or redlock stalled
/// since the answer came at `answered`); when it is not started, the lock is released first,
/// within the hasty bound (and, sent again, not past the lease's end, `lease_ends`).
pub(super) fn start(
    job: &Job,
    signals: &Signals,
    ending: &FinalRelease<'_>,
    session: Kept,
    (answered, too_late, lease_ends): (BootInstant, BootInstant, BootInstant),
) -> anyhow::Result<Started> {
    let key = ending.key;
    let hasty = ReleaseBound {
        answer: HASTY_RELEASE,
        lease_ends: Some(lease_ends),
    };
    // The first that ends redlock among those that came (SIGCHLD of an inherited child
    // passes).
    if let Some(signal) =
        std::iter::from_fn(|| ending.inbox.pending_signal()).find(|s| signals::terminates(*s))
    {
        let why = format!(
            "{} received before the command started",
            signals::name(signal)
        );
        ending.release(session, Duration::ZERO, hasty, None, Some(why))?;
        ending.log.notice(format_args!(
            "{} received before the command started; lock '{key}' released",
            signals::name(signal)
        ));
        return Ok(Started::Interrupted(Done::Interrupted(signal)));
    }
    let now = BootInstant::now();
    if now >= too_late {
        let why = "granted too late to start the command".to_owned();
        ending.release(session, Duration::ZERO, hasty, None, Some(why))?;
        return Ok(Started::TooLate(TooLate {
            answered_late: answered >= too_late,
            since_answer: now.since(answered),
        }));
    }
    if let Err(err) = child::become_subreaper() {
        // The setting's error is the one to report; a release that fails expires anyway.
        let _ = ending.release(session, Duration::ZERO, hasty, None, None);
        return Err(err.into());
    }
    let wrapped;
    let argv = match job.pid_namespace {
        true => {
            wrapped = namespace::holder_argv(&job.argv);
            &wrapped
        }
        false => &job.argv,
    };
    let spec = child::Spec {
        argv,
        set_env: &job.set_env,
        remove_env: &job.remove_env,
        foreground: job.foreground,
        signals: signals.for_command(),
        closed: job.closed,
        parent_outside: false,
        new_group: true,
    };
    match child::spawn(&spec) {
        Ok(child) => {
            crate::failpoint::hit("spawned");
            ending.log.step(format_args!("started pid {}", child.pid));
            Ok(Started::Running(child, session))
        }
        Err(err) => {
            // The history records the status a shell would give (127, 126). In a PID
            // namespace what failed to start is redlock's own holder, not the command.
            let failure = if job.pid_namespace {
                fail(
                    Failure::System,
                    format!("--pid-namespace: cannot start redlock's init (/proc/self/exe): {err}"),
                )
            } else {
                spawn_failure(&job.argv[0], &err)
            };
            let code = i32::from(crate::exit::exit_code(&failure, crate::exit::BUSY));
            let status = Some(ChildStatus::Exited(code));
            ending.release(session, Duration::ZERO, hasty, status, None)?;
            Err(failure)
        }
    }
}

/// The error for a command that could not be started, with its exit code.
pub(super) fn spawn_failure(program: &OsString, err: &std::io::Error) -> anyhow::Error {
    let shown = printable(&program.to_string_lossy());
    let (failure, why) = match err.kind() {
        std::io::ErrorKind::NotFound => (Failure::NotFound, not_found(program_path(program))),
        std::io::ErrorKind::PermissionDenied => {
            (Failure::NotExecutable, "permission denied".to_owned())
        }
        // fork itself failed: the system is out of processes or memory.
        _ if matches!(
            err.raw_os_error(),
            Some(nix::libc::EAGAIN | nix::libc::ENOMEM)
        ) =>
        {
            (Failure::System, err.to_string())
        }
        _ => (Failure::NotExecutable, err.to_string()),
    };
    fail(failure, format!("cannot run '{shown}': {why}"))
}

/// Why exec found nothing to run (ENOENT). When the file is there, what is missing is what runs
/// it: the interpreter its `#!` line names, or (a binary) its dynamic loader; "command not
/// found" would send its user looking for the wrong file.
fn not_found(file: Option<std::path::PathBuf>) -> String {
    use std::io::Read as _;
    let Some(file) = file else {
        return "command not found".to_owned();
    };
    let mut head = [0u8; 256];
    let read = std::fs::File::open(&file)
        .and_then(|mut opened| opened.read(&mut head))
        .unwrap_or(0);
    let first_line = head[..read]
        .split(|&byte| byte == b'\n')
        .next()
        .unwrap_or_default();
    match first_line.strip_prefix(b"#!") {
        // (A line that ends in CR names an interpreter whose name ends in CR, which is not there.)
        Some(line) if line.ends_with(b"\r") => {
            "its #! line ends in a carriage return (Windows line endings): convert the file, e.g. with dos2unix".to_owned()
        }
        Some(line) => {
            let interpreter = String::from_utf8_lossy(line);
            let interpreter = interpreter
                .split([' ', '\t'])
                .find(|word| !word.is_empty())
                .unwrap_or_default();
            format!(
                "its interpreter '{}' (the file's #! line) was not found",
                printable(interpreter)
            )
        }
        None => "the file is there, but what runs it was not found (a binary built for another system, whose dynamic loader is missing?)".to_owned(),
    }
}

/// The file exec would run for `program`: the path itself when it names one (a '/' in it), else
/// the first in PATH that exists; `None` when there is none.
fn program_path(program: &OsString) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::path::Path::new(program);
    if program.as_bytes().contains(&b'/') {
        return path.is_file().then(|| path.to_owned());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(path))
        .find(|candidate| candidate.is_file())
}
