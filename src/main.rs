//! The `redlock` binary: the library does the work and returns the exit status, so that every
//! destructor runs and no lock is abandoned by `process::exit`.
//!
//! One thing has to happen before std's start-up, which sets SIGPIPE to "ignored" and opens
//! /dev/null on any of the standard descriptors that is closed: reading what redlock's caller
//! handed it. The command `run` starts must begin with the caller's signal dispositions
//! (`trap '' PIPE` in the calling shell stays in force for the command; an ordinary start gives
//! it the default), `acquire` must not take a lock whose token it cannot print, and a
//! descriptor the caller closed must be closed for the command too; once std has changed
//! them nothing tells what they were. So a constructor in `.init_array`, which the
//! C runtime runs before it calls std's start-up, records them.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// musl's allocator returns memory to the kernel eagerly, with a system call for every small
/// allocation it frees; dlmalloc keeps it (docs/performance.md has the figures).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() -> ExitCode {
    // TLS (rediss://) uses ring; chosen here rather than by whichever provider a dependency
    // happens to enable. Only fails when one is installed already, which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let inherited = redlock::Inherited {
        ignored: IGNORED_AT_START.load(Ordering::Relaxed),
        closed: CLOSED_AT_START.load(Ordering::Relaxed),
    };
    ExitCode::from(redlock::run(std::env::args_os(), inherited))
}

/// The signals ignored when the process started: bit N-1 for signal N.
static IGNORED_AT_START: AtomicU64 = AtomicU64::new(0);
/// The standard descriptors (0, 1, 2) that were closed when the process started: bit N for
/// descriptor N.
static CLOSED_AT_START: AtomicU8 = AtomicU8::new(0);

// SAFETY: `.init_array` holds pointers to functions the C runtime calls once, before `main`,
// with no other thread running; this one only reads signal dispositions and the standard
// descriptors' flags, and stores what it read.
#[allow(unsafe_code)]
#[unsafe(link_section = ".init_array")]
#[used]
static RECORD_IGNORED_SIGNALS: extern "C" fn() = record_ignored_signals;

#[allow(unsafe_code)]
extern "C" fn record_ignored_signals() {
    let mut ignored = 0u64;
    for signal in 1..=64 {
        let mut action = std::mem::MaybeUninit::<nix::libc::sigaction>::uninit();
        // SAFETY: with a null new action, sigaction only writes the current one to `action`,
        // which is valid for that write.
        let read = unsafe { nix::libc::sigaction(signal, std::ptr::null(), action.as_mut_ptr()) };
        // SAFETY: sigaction succeeded, so it filled `action` in.
        if read == 0 && unsafe { action.assume_init() }.sa_sigaction == nix::libc::SIG_IGN {
            ignored |= 1 << (signal - 1);
        }
    }
    IGNORED_AT_START.store(ignored, Ordering::Relaxed);
    let mut closed = 0u8;
    for fd in 0..3 {
        // SAFETY: F_GETFD takes no argument and only reads the descriptor's flags.
        if unsafe { nix::libc::fcntl(fd, nix::libc::F_GETFD) } == -1 {
            closed |= 1 << fd;
        }
    }
    CLOSED_AT_START.store(closed, Ordering::Relaxed);
}
