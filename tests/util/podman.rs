//! podman for the container tests, with a storage of the test's own (vfs, under its temp dir:
//! nothing is left in the machine's) and the flags that let containers run in a sandbox as on
//! a CI runner: cgroupfs, runc where installed (crun refuses a host with cgroups v1 and v2
//! mounted side by side), the host's network (the test's Redis listens on loopback), and
//! resource limits lowered, never raised (raising needs CAP_SYS_RESOURCE).
//!
//! `Podman::start` first builds and runs a stand-in of a job's image: a static program
//! (compiled with musl-gcc) at the recipe's path, /opt/report/run.sh. Where even that cannot
//! run, containers do not work on this host, which is no fault of redlock's: the test says
//! why and is skipped. The stand-in is also the report that docs/recipes.md's image wraps.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::TempDir;
use super::dist::{missing, which};

/// The stand-in report: writes /shared/started and says "report ran", then ends when
/// /shared/go appears (0), on SIGTERM ("report got TERM", 0), or after 60 s (1). With an
/// argument it only prints it: the probe.
const REPORT_C: &str = r#"
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
static volatile sig_atomic_t term;
static void on_term(int signal) { (void)signal; term = 1; }
int main(int argc, char **argv) {
    if (argc > 1) { puts(argv[1]); return 0; }
    signal(SIGTERM, on_term);
    close(open("/shared/started", O_CREAT | O_WRONLY, 0666));
    puts("report ran");
    fflush(stdout);
    for (int i = 0; i < 600 && !term; i++) {
        if (access("/shared/go", F_OK) == 0) return 0;
        usleep(100000);
    }
    if (term) { puts("report got TERM"); return 0; }
    return 1;
}
"#;

/// The stand-in report's image, which `Podman::start` builds.
pub const REPORT_BASE: &str = "localhost/report-base:test";

pub struct Podman {
    dir: TempDir,
    /// podman's run root, which must be a path of under 50 characters: under /tmp.
    run_root: PathBuf,
    runc: Option<PathBuf>,
    /// Shared with the containers as /shared, writable by any user.
    pub shared: PathBuf,
}

impl Podman {
    /// podman with the stand-in report's image built and run once; None, after saying why,
    /// where podman or musl-gcc is missing or no container runs here.
    pub fn start() -> Option<Self> {
        let Some(podman) = which("podman") else {
            missing("podman is not installed");
            return None;
        };
        if which("musl-gcc").is_none() {
            missing(
                "musl-gcc is not installed (package musl-tools): it builds the stand-in report",
            );
            return None;
        }
        let dir = TempDir::new("podman");
        let shared = dir.path().join("shared");
        std::fs::create_dir_all(&shared).unwrap();
        let open = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o777);
        std::fs::set_permissions(&shared, open).unwrap();
        let run_root = std::env::temp_dir().join(format!(
            "redlock-podman-{}",
            dir.path().file_name().unwrap().to_string_lossy()
        ));
        let this = Self {
            runc: which("runc"),
            shared,
            run_root,
            dir,
        };
        let context = this.dir.path().join("report-base");
        std::fs::create_dir_all(&context).unwrap();
        std::fs::write(context.join("report.c"), REPORT_C).unwrap();
        check(
            Command::new("musl-gcc")
                .args(["-static", "-Os", "-o"])
                .arg(context.join("run.sh"))
                .arg(context.join("report.c")),
        );
        std::fs::write(
            context.join("Containerfile"),
            "FROM scratch\nCOPY run.sh /opt/report/run.sh\n",
        )
        .unwrap();
        this.build(&context, REPORT_BASE);
        let probe = this.run(REPORT_BASE, &[], &["/opt/report/run.sh", "probe"]);
        if !probe.status.success() || String::from_utf8_lossy(&probe.stdout) != "probe\n" {
            println!(
                "skipped: {} cannot run a container here: {}",
                podman.display(),
                String::from_utf8_lossy(&probe.stderr).trim()
            );
            return None;
        }
        Some(this)
    }

    /// `podman` with this test's storage.
    pub fn command(&self) -> Command {
        let mut command = Command::new("podman");
        command
            .arg("--root")
            .arg(self.dir.path().join("storage"))
            .arg("--runroot")
            .arg(&self.run_root)
            .args(["--storage-driver", "vfs", "--cgroup-manager", "cgroupfs"]);
        if let Some(runc) = &self.runc {
            command.arg("--runtime").arg(runc);
        }
        command
    }

    /// Builds `context`/Containerfile as `tag`.
    pub fn build(&self, context: &Path, tag: &str) {
        check(
            self.command()
                .args(["build", "--quiet", "--tag", tag, "--file"])
                .arg(context.join("Containerfile"))
                .arg(context),
        );
    }

    /// Loads an image archive; the image's name.
    pub fn load(&self, archive: &Path) -> String {
        let out = check(self.command().args(["load", "--input"]).arg(archive));
        out.lines()
            .find_map(|line| line.strip_prefix("Loaded image: "))
            .unwrap_or_else(|| panic!("podman load said {out:?}"))
            .trim()
            .to_owned()
    }

    /// `podman image inspect --format FORMAT image`, trimmed.
    pub fn inspect(&self, image: &str, format: &str) -> String {
        check(
            self.command()
                .args(["image", "inspect", "--format", format, image]),
        )
        .trim()
        .to_owned()
    }

    /// `podman run` of `image` with `args` (the container's command, or the entrypoint's
    /// arguments), `env` passed by name from this process's environment given to it (so that
    /// a password is not in podman's argv), /shared mounted; bounded to 60 s.
    pub fn run(&self, image: &str, env: &[(&str, &str)], args: &[&str]) -> Output {
        let child = self
            .container(image, None, None, env, args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn podman");
        finish(child, Duration::from_secs(60))
    }

    /// The `podman run` command for such a container, named `name` if given, and with
    /// `entrypoint` for the image's own: Kubernetes' `command` replaces the entrypoint.
    pub fn container(
        &self,
        image: &str,
        name: Option<&str>,
        entrypoint: Option<&str>,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Command {
        let mut command = self.command();
        command.args([
            "run",
            "--rm",
            "--network",
            "host",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
        ]);
        command
            .arg("--volume")
            .arg(format!("{}:/shared", self.shared.display()));
        if let Some(name) = name {
            command.args(["--name", name]);
        }
        if let Some(entrypoint) = entrypoint {
            command.args(["--entrypoint", entrypoint]);
        }
        for (variable, value) in env {
            command.args(["--env", variable]).env(variable, value);
        }
        command.arg(image).args(args);
        command
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.run_root);
    }
}

/// Waits at most `limit` for `child`; on timeout kills it and fails with its output.
pub fn finish(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("podman did not end within {limit:?}: {}", show(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// An output, for a failure message.
pub fn show(out: &Output) -> String {
    format!(
        "{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `command` to its end within two minutes; its stdout. A failure panics with everything
/// it said.
fn check(command: &mut Command) -> String {
    let description = format!("{command:?}");
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("{description}: {err}"));
    let out = finish(child, Duration::from_secs(120));
    assert!(out.status.success(), "{description}: {}", show(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
