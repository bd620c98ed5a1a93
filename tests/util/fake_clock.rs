//! A wall clock that a test sets: libfaketime preloaded into redis-server (or redlock), its
//! time read from a file at every call (FAKETIME_NO_CACHE). The file holds an offset from the
//! real time (`+3600`: the clock jumps, as an NTP step makes it; the fault suite's clock rows)
//! or a time the clock stands still at (the model's conformance walks, which move it step by
//! step, so that a loaded machine cannot make a lease end between two of their calls). The
//! monotonic clocks are left alone, as an NTP step leaves them: Redis's event loop and
//! timeouts keep running on real time.

use std::path::PathBuf;

use super::{RedisServer, Redlock, TempDir};

pub struct FakeClock {
    dir: TempDir,
    preload: String,
}

impl FakeClock {
    /// A clock at the real time, or what this machine lacks.
    pub fn new() -> Result<Self, String> {
        let arch = format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH);
        let faketime = PathBuf::from(format!("{arch}/faketime/libfaketime.so.1"));
        if !faketime.exists() {
            return Err(format!(
                "libfaketime ({} is missing; Debian's faketime package)",
                faketime.display()
            ));
        }
        // Debian's redis-server links jemalloc, which reads the clock inside its first malloc;
        // libfaketime's own start-up then allocates under jemalloc's lock, and the server hangs
        // before it serves. glibc's malloc, preloaded before it, serves the allocations instead.
        let malloc = PathBuf::from(format!("{arch}/libc_malloc_debug.so.0"));
        let preload = if malloc.exists() {
            format!("{} {}", malloc.display(), faketime.display())
        } else {
            faketime.display().to_string()
        };
        let clock = Self {
            dir: TempDir::new("fakeclock"),
            preload,
        };
        clock.set(0);
        Ok(clock)
    }

    fn time_file(&self) -> PathBuf {
        self.dir.path().join("time")
    }

    /// Written aside and renamed: a reader never sees a half-written time.
    fn write(&self, time: &str) {
        let aside = self.dir.path().join("time.new");
        std::fs::write(&aside, format!("{time}\n")).unwrap();
        std::fs::rename(&aside, self.time_file()).unwrap();
    }

    /// Moves the clock to `seconds` from the real time; it runs on from there.
    pub fn set(&self, seconds: i64) {
        self.write(&format!("{seconds:+}"));
    }

    /// Stops the clock at `ms` since the epoch, until the next `set` or `freeze`.
    pub fn freeze(&self, ms: u64) {
        // Seconds with a fraction (FAKETIME_FMT=%s), parsed as a double: half a millisecond
        // more, so that the rounding of the parse never takes the time below `ms`.
        self.write(&format!("{}.{:03}5", ms / 1000, ms % 1000));
    }

    fn environment(&self) -> [(&'static str, String); 5] {
        [
            ("LD_PRELOAD", self.preload.clone()),
            (
                "FAKETIME_TIMESTAMP_FILE",
                self.time_file().display().to_string(),
            ),
            ("FAKETIME_FMT", "%s".to_owned()),
            ("FAKETIME_NO_CACHE", "1".to_owned()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ]
    }

    /// A redis-server on this clock, or why not. The clock is left as it was.
    pub fn server(&self) -> Result<RedisServer, String> {
        use std::os::unix::fs::PermissionsExt as _;
        let wrapper = self.dir.path().join("redis-server");
        let exports: String = self
            .environment()
            .iter()
            .map(|(name, value)| format!("{name}='{value}' "))
            .collect();
        std::fs::write(
            &wrapper,
            format!("#!/bin/sh\n{exports}exec redis-server \"$@\"\n"),
        )
        .unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        let server = RedisServer::start_binary(&wrapper, &[]);
        // The server's clock must follow the file to the millisecond, or a test on it would
        // measure nothing.
        let was = std::fs::read_to_string(self.time_file()).unwrap();
        let probe_ms = 2_000_000_000_123;
        self.freeze(probe_ms);
        let (seconds, micros): (u64, u64) = server.cmd(&["TIME"]);
        self.write(was.trim_end());
        let read_ms = seconds * 1000 + micros / 1000;
        if read_ms != probe_ms {
            return Err(format!(
                "libfaketime to reach redis-server (its clock read {read_ms} ms, not {probe_ms})"
            ));
        }
        Ok(server)
    }

    /// A redlock on this clock (and its command, which inherits the environment).
    pub fn redlock(&self, redlock: Redlock) -> Redlock {
        self.environment()
            .iter()
            .fold(redlock, |redlock, (name, value)| redlock.env(name, value))
    }
}
