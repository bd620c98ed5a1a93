//! The `redlock` binary: everything lives in the library; main only hands it the arguments and
//! returns the exit status, so destructors run and no lock is abandoned by `process::exit`.
//!
//! `no_main`: this C `main` skips std's start-up, which on Linux reads /proc/self/maps to find
//! the main thread's stack guard and sets up an alternate signal stack, a large part of a
//! start that `run` pays on every invocation (measured; README, "Performance"). What that
//! start-up did and redlock needs is done here: SIGPIPE ignored (a closed pipe is an error to
//! handle, not death while holding a lock), the arguments taken from argv (musl gives std no
//! other way to them), stdout flushed, a panic turned into exit 70 rather than unwinding into C.
#![no_main]
#![allow(unsafe_code)]

use std::ffi::{CStr, OsStr, c_char, c_int};
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;

use nix::sys::signal::{SigHandler, Signal, signal};

/// musl's allocator returns memory to the kernel eagerly: a `run` made ~90 mmap/munmap calls
/// with it and 9 with dlmalloc (counted with strace): ~0.6 ms of each run on this VM.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

#[unsafe(no_mangle)]
extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    // SAFETY: SIG_IGN installs no handler code, and no other thread exists yet.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigIgn) };
    let args = (0..usize::try_from(argc).unwrap_or(0)).map(|i| {
        // SAFETY: the C runtime passes `argc` NUL-terminated strings that live as long as the
        // process.
        let arg = unsafe { CStr::from_ptr(*argv.add(i)) };
        OsStr::from_bytes(arg.to_bytes()).to_owned()
    });
    let args = args.collect::<Vec<_>>();
    let code = std::panic::catch_unwind(|| redlock::run(args)).unwrap_or(redlock::exit::INTERNAL);
    let _ = std::io::stdout().flush();
    c_int::from(code)
}
