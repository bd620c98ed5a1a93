//! The supervised command: spawned from argv (never through a shell unless asked), in a process
//! group of its own so that signals and the final kill reach everything it started, with a
//! parent-death signal so it cannot outlive a redlock that was killed with SIGKILL, and, when
//! redlock owns the terminal, as the terminal's foreground group so it can read stdin and
//! receives Ctrl-C itself.
//!
//! This is the library's only module with `unsafe`: the code that runs between clone and exec.

#![allow(unsafe_code)]

use std::ffi::{CString, OsStr, OsString, c_char};
use std::io::{self, IsTerminal as _};
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use nix::errno::Errno;
use nix::libc;
use nix::sched::{CloneFlags, clone};
use nix::sys::signal::{
    SigHandler, SigSet, SigmaskHow, Signal, killpg, pthread_sigmask, signal, sigprocmask,
};
use nix::sys::wait::waitpid;
use nix::unistd::{Pid, getpgrp, getpid, getppid, setpgid, tcgetpgrp, tcsetpgrp};

/// What to run and with which environment changes.
pub(crate) struct Spec<'a> {
    pub(crate) argv: &'a [OsString],
    pub(crate) set_env: &'a [(String, String)],
    pub(crate) remove_env: &'a [String],
    /// Make the child the terminal's foreground process group (see [`owns_terminal`]).
    pub(crate) foreground: bool,
}

/// A running command, identified by its process group (its pid is the group id).
pub(crate) struct Child {
    pub(crate) pid: Pid,
}

/// Whether stdin is a terminal whose foreground group is ours: then the child must take the
/// terminal over, or it would be stopped by SIGTTIN when it reads and never see Ctrl-C.
pub(crate) fn owns_terminal() -> bool {
    let stdin = io::stdin();
    stdin.is_terminal() && tcgetpgrp(stdin.as_fd()).is_ok_and(|group| group == getpgrp())
}

/// Starts the command.
///
/// Not with `std::process::Command`: it forks, and a fork copies redlock's page tables only for
/// exec to throw them away, a measurable part of every `run` (README, "Performance"). The
/// child is cloned with `CLONE_VM | CLONE_VFORK` instead, as `posix_spawn` does: it borrows
/// redlock's memory until exec, so everything it needs is built here first; posix_spawn
/// itself cannot arm the parent-death signal. Call from a thread that lives as long as the
/// child: the parent-death signal fires when the cloning *thread* exits, not the process.
pub(crate) fn spawn(spec: &Spec<'_>) -> io::Result<Child> {
    let program = spec
        .argv
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let candidates = search_path(program)?;
    let argv = spec
        .argv
        .iter()
        .map(|arg| c_string(arg))
        .collect::<io::Result<Vec<_>>>()?;
    let envp = environment(spec)?;
    if spec.foreground {
        // Taking the terminal back later happens from the background group: without this,
        // tcsetpgrp would stop redlock with SIGTTOU. The child inherits it for its own
        // tcsetpgrp and restores the default.
        // SAFETY: setting a signal to SIG_IGN installs no handler code; no other thread
        // changes SIGTTOU's disposition.
        unsafe { signal(Signal::SIGTTOU, SigHandler::SigIgn) }.map_err(io::Error::from)?;
    }
    let pid = match clone_and_exec(&candidates, &argv, &envp, spec.foreground) {
        // As execvp does, and shells: an executable file without `#!` is a shell script.
        Err(NotStarted::Exec(Errno::ENOEXEC, found)) => {
            let shell = c"/bin/sh".to_owned();
            let mut script_argv = vec![shell.clone(), candidates[found].clone()];
            script_argv.extend_from_slice(&argv[1..]);
            clone_and_exec(&[shell], &script_argv, &envp, spec.foreground)
        }
        started => started,
    }
    .map_err(|not_started| match not_started {
        NotStarted::Exec(errno, _) | NotStarted::System(errno) => io::Error::from(errno),
        NotStarted::ParentGone => io::Error::other("redlock exited before the command started"),
    })?;
    // Also from the parent, so a signal sent right after spawn cannot miss the new group.
    // EACCES after the child's exec is expected and harmless.
    let _ = setpgid(pid, pid);
    if spec.foreground {
        let _ = tcsetpgrp(io::stdin().as_fd(), pid);
    }
    Ok(Child { pid })
}

/// Why no command runs.
enum NotStarted {
    /// exec failed with this error; the index is the candidate it last tried.
    Exec(Errno, usize),
    /// The clone, or the signal mask set around it, failed.
    System(Errno),
    /// redlock's parent-death signal could not cover the child (see `prepare_child`).
    ParentGone,
}

/// Clones a child that tries `candidates` in turn with `argv` and `envp`, as execvp does.
fn clone_and_exec(
    candidates: &[CString],
    argv: &[CString],
    envp: &[CString],
    foreground: bool,
) -> Result<Pid, NotStarted> {
    let (argv, envp) = (null_terminated(argv), null_terminated(envp));
    let parent = getpid();
    // SAFETY: fd 0 stays open for redlock's whole life; the child only passes it to tcsetpgrp.
    let stdin_fd = unsafe { BorrowedFd::borrow_raw(0) };
    // What the child reports: an errno (or PARENT_GONE), and which candidate it tried last.
    let exec_error = AtomicI32::new(0);
    let tried = AtomicUsize::new(0);
    let child_main = || -> isize {
        let failed = |code: i32| {
            exec_error.store(code, Ordering::Relaxed);
            127
        };
        match prepare_child(parent, foreground, stdin_fd) {
            Ok(true) => {}
            Ok(false) => return failed(PARENT_GONE),
            Err(errno) => return failed(errno as i32),
        }
        // execvp's search: go on past missing files and ones we may not execute.
        let mut denied = false;
        let mut error = Errno::ENOENT;
        for (index, path) in candidates.iter().enumerate() {
            tried.store(index, Ordering::Relaxed);
            // SAFETY: every pointer array is NULL-terminated and points into CStrings that
            // outlive the child's use of them (the parent is suspended until exec or exit).
            unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
            error = Errno::last();
            match error {
                Errno::EACCES => denied = true,
                Errno::ENOENT | Errno::ENOTDIR | Errno::ESTALE | Errno::ENODEV => {}
                _ => break,
            }
        }
        let searched_on = matches!(error, Errno::ENOENT | Errno::ENOTDIR | Errno::EACCES);
        failed(if denied && searched_on {
            Errno::EACCES
        } else {
            error
        } as i32)
    };

    let mut stack = CHILD_STACK.lock().unwrap_or_else(PoisonError::into_inner);
    // With every signal blocked no handler can run in the child on borrowed memory; the
    // child unblocks them just before exec (see `prepare_child`).
    let mut mask = SigSet::empty();
    pthread_sigmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut mask),
    )
    .map_err(NotStarted::System)?;
    // SAFETY: the child runs `child_main` on its own stack in our memory while this thread is
    // suspended (CLONE_VFORK). It allocates nothing, takes no locks and makes only
    // async-signal-safe system calls; what it reads was built above and outlives it, what it
    // writes is two atomics.
    let cloned = unsafe {
        clone(
            Box::new(child_main),
            &mut stack[..],
            CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK,
            Some(Signal::SIGCHLD as i32),
        )
    };
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&mask), None).map_err(NotStarted::System)?;
    drop(stack);
    let pid = cloned.map_err(NotStarted::System)?;
    match exec_error.load(Ordering::Relaxed) {
        0 => Ok(pid),
        code => {
            // It has exited already; reap it here, it never ran the command.
            let _ = waitpid(pid, None);
            Err(if code == PARENT_GONE {
                NotStarted::ParentGone
            } else {
                NotStarted::Exec(Errno::from_raw(code), tried.load(Ordering::Relaxed))
            })
        }
    }
}

/// The child's stack until exec: zero pages in .bss that cost nothing until touched. The lock
/// keeps two spawns from sharing it.
static CHILD_STACK: Mutex<[u8; 64 * 1024]> = Mutex::new([0; 64 * 1024]);

/// What the child reports when it finds redlock gone before the parent-death signal was armed.
const PARENT_GONE: i32 = -1;

/// In the child, between clone and exec: its own group, the terminal if it is to have it, the
/// parent-death signal, and the signal state of a command started from a shell. `Ok(false)`
/// when redlock died before the parent-death signal was armed.
fn prepare_child(parent: Pid, foreground: bool, stdin: BorrowedFd<'_>) -> nix::Result<bool> {
    // Ignored dispositions survive exec; redlock ignores SIGPIPE (see main.rs).
    // SAFETY: SIG_DFL installs no handler code.
    unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) }?;
    setpgid(Pid::from_raw(0), Pid::from_raw(0))?;
    if foreground {
        // SIGTTOU is ignored (inherited), or this would stop us: we are not in the
        // foreground group yet.
        tcsetpgrp(stdin, getpid())?;
        // SAFETY: SIG_DFL installs no handler code.
        unsafe { signal(Signal::SIGTTOU, SigHandler::SigDfl) }?;
    }
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    if getppid() != parent {
        return Ok(false);
    }
    // redlock blocks the signals it handles (see `signals`) and every signal around the
    // clone; the command must start with none blocked, as if run from a shell.
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    Ok(true)
}

/// Where exec should look for `program`, in order: itself if it names a path, else each
/// directory of PATH (`/bin:/usr/bin` if unset, an empty entry meaning the current one).
fn search_path(program: &OsStr) -> io::Result<Vec<CString>> {
    if program.is_empty() {
        return Err(io::ErrorKind::NotFound.into());
    }
    if program.as_bytes().contains(&b'/') {
        return Ok(vec![c_string(program)?]);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    path.as_bytes()
        .split(|&byte| byte == b':')
        .map(|dir| {
            let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
            let mut candidate = Vec::with_capacity(dir.len() + 1 + program.len());
            candidate.extend_from_slice(dir);
            candidate.push(b'/');
            candidate.extend_from_slice(program.as_bytes());
            c_string(OsStr::from_bytes(&candidate))
        })
        .collect()
}

/// redlock's environment with `spec`'s removals and additions, as `NAME=value` strings.
fn environment(spec: &Spec<'_>) -> io::Result<Vec<CString>> {
    let replaced = |name: &OsStr| {
        spec.remove_env
            .iter()
            .any(|removed| name == OsStr::new(removed))
            || spec.set_env.iter().any(|(set, _)| name == OsStr::new(set))
    };
    let inherited = std::env::vars_os().filter(|(name, _)| !replaced(name));
    let added = spec
        .set_env
        .iter()
        .map(|(name, value)| (OsString::from(name), OsString::from(value)));
    inherited
        .chain(added)
        .map(|(name, value)| {
            let mut entry = name;
            entry.push("=");
            entry.push(value);
            c_string(&entry)
        })
        .collect()
}

fn c_string(text: &OsStr) -> io::Result<CString> {
    CString::new(text.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "an argument or environment entry contains a NUL byte",
        )
    })
}

/// The pointer array exec takes: one per string, then NULL.
fn null_terminated(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|string| string.as_ptr())
        .chain([std::ptr::null()])
        .collect()
}

impl Child {
    /// Sends `signal` to the whole group. `false` when the group is already empty.
    pub(crate) fn signal_group(&self, signal: Signal) -> bool {
        killpg(self.pid, signal) != Err(Errno::ESRCH)
    }

    /// Whether any process of the group is still alive.
    pub(crate) fn group_alive(&self) -> bool {
        killpg(self.pid, None) != Err(Errno::ESRCH)
    }
}

/// Makes `group` the terminal's foreground process group (after a Ctrl-Z and `fg`).
pub(crate) fn hand_terminal_to(group: Pid) {
    let _ = tcsetpgrp(io::stdin().as_fd(), group);
}

/// Gives the terminal back to redlock's own group after a foreground child is done.
pub(crate) fn reclaim_terminal() {
    let _ = tcsetpgrp(io::stdin().as_fd(), getpgrp());
}

/// Restores SIGCHLD's default disposition. An ignored SIGCHLD survives exec (a parent may
/// pass one on); then the kernel reaps our children itself, their exit status is lost and the
/// supervisor would wait for it forever.
pub(crate) fn report_children() -> io::Result<()> {
    // SAFETY: SIG_DFL installs no handler code; no other thread changes SIGCHLD's disposition.
    unsafe { signal(Signal::SIGCHLD, SigHandler::SigDfl) }
        .map(drop)
        .map_err(io::Error::from)
}

/// Makes orphaned descendants of the child ours to reap, so their exit is seen and no zombie
/// stays in the child's group.
pub(crate) fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}
