//! The `redlock` binary: everything lives in the library; main only hands it the arguments and
//! returns the exit status, so destructors run and no lock is abandoned by `process::exit`.

fn main() -> std::process::ExitCode {
    redlock::run(std::env::args_os())
}
