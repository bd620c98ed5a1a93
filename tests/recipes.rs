//! docs/recipes.md, exercised: every fenced block in it is marked `<!-- recipe: NAME -->`, and
//! the tests here run each one against a private redis-server: shell lines and crontab entries
//! through `sh`, systemd units through `systemd-analyze verify` and their `ExecStart=`, and the
//! commands in the YAML (GitHub Actions, GitLab CI, Kubernetes CronJobs, an Ansible playbook,
//! parsed with python3's PyYAML) as the scheduler would run them, the Kubernetes ones in their
//! container images with podman too (redlock's image, the report's built from the recipe's
//! Containerfile); metrics written for node_exporter are checked with promtool. Only redlock's
//! path, the Redis URL and password, the registry, and the jobs are swapped for stand-ins;
//! every swap must find its text, so a recipe that changes shape fails here instead of going
//! untested.
//!
//! `every_recipe_block_is_tested` ties the two together: the blocks in the file and the names
//! this file asks for must be the same, so a new block without a test fails.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::util::podman::{Podman, REPORT_BASE};
use crate::util::{REDLOCK, RedisServer, TempDir, send_signal, wait_until};

/// The test servers require this password, so that the recipes' password handling runs too.
const PASSWORD: &str = "recipes-test-password";

/// Where the recipes put redlock, the Redis and the password file.
const DOC_REDLOCK: &str = "/usr/local/bin/redlock";
const DOC_URL: &str = "redis://redis.internal:6379";
const DOC_PASSWORD_FILE: &str = "/etc/redlock/password";

/// What the tests in this file ask for, spelled so that this line does not count as a call.
const SNIPPET_CALL: &str = concat!("snippet", "(\"");

// ---------------------------------------------------------------------------------------------
// Finding the blocks

/// One fenced block of docs/recipes.md.
#[derive(Debug, Clone)]
struct Block {
    name: String,
    info: String,
    body: String,
}

fn recipes_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/recipes.md");
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// Every fenced block, each with the marker on the line right above its opening fence; a
/// block without one, a marker without a block, or an unclosed block fails.
fn blocks() -> Vec<Block> {
    let text = recipes_text();
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let line = lines[at];
        if let Some(name) = marker(line) {
            let fence = lines.get(at + 1).copied().unwrap_or_default();
            assert!(
                fence.starts_with("```"),
                "docs/recipes.md:{}: the marker for {name:?} is not right above a fenced block",
                at + 1
            );
        }
        if let Some(info) = line.strip_prefix("```") {
            let name = at
                .checked_sub(1)
                .and_then(|above| marker(lines[above]))
                .unwrap_or_else(|| {
                    panic!(
                        "docs/recipes.md:{}: a fenced block without a `<!-- recipe: NAME -->` line above it; \
                         give it one and a test in tests/recipes.rs",
                        at + 1
                    )
                });
            let end = (at + 1..lines.len())
                .find(|&end| lines[end] == "```")
                .unwrap_or_else(|| panic!("docs/recipes.md:{}: unclosed block", at + 1));
            let mut body = lines[at + 1..end].join("\n");
            body.push('\n');
            found.push(Block {
                name: name.to_owned(),
                info: info.trim().to_owned(),
                body,
            });
            at = end;
        }
        at += 1;
    }
    found
}

fn marker(line: &str) -> Option<&str> {
    line.trim()
        .strip_prefix("<!-- recipe:")?
        .strip_suffix("-->")
        .map(str::trim)
}

/// The block marked `name`; exactly one must be.
#[track_caller]
fn snippet(name: &str) -> Block {
    let matching: Vec<Block> = blocks()
        .into_iter()
        .filter(|block| block.name == name)
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "docs/recipes.md should have exactly one block marked {name:?}"
    );
    matching.into_iter().next().unwrap()
}

#[test]
fn every_recipe_block_is_tested() {
    let blocks = blocks();
    assert!(
        !blocks.is_empty(),
        "no marked blocks found in docs/recipes.md"
    );
    let text = recipes_text();
    let fences = text.lines().filter(|line| line.starts_with("```")).count();
    assert_eq!(
        fences,
        blocks.len() * 2,
        "every block opens and closes once"
    );
    let markers = text.lines().filter(|line| marker(line).is_some()).count();
    assert_eq!(markers, blocks.len(), "every marker has a block");
    let in_file: Vec<&str> = blocks.iter().map(|block| block.name.as_str()).collect();
    let unique: BTreeSet<&str> = in_file.iter().copied().collect();
    assert_eq!(
        unique.len(),
        in_file.len(),
        "marker names repeat: {in_file:?}"
    );
    let source = include_str!("recipes.rs");
    let tested: BTreeSet<&str> = source
        .match_indices(SNIPPET_CALL)
        .map(|(at, _)| {
            let rest = &source[at + SNIPPET_CALL.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect();
    assert_eq!(
        unique, tested,
        "the blocks in docs/recipes.md and the blocks tests/recipes.rs runs differ"
    );
    for block in &blocks {
        assert!(
            ["sh", "crontab", "ini", "yaml", "dockerfile"].contains(&block.info.as_str()),
            "{}: unexpected block type {:?}",
            block.name,
            block.info
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// `text` with `from` replaced; fails if `from` is not there, so a changed recipe is noticed.
#[track_caller]
fn swap(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "the recipe no longer contains {from:?}:\n{text}"
    );
    text.replace(from, to)
}

/// A password-protected test server.
fn start_server() -> RedisServer {
    RedisServer::start_with(&["--requirepass", PASSWORD])
}

/// A file holding the test password, readable by its owner only (redlock warns otherwise).
fn password_file(dir: &Path) -> PathBuf {
    let path = dir.join("password");
    std::fs::write(&path, format!("{PASSWORD}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// Writes an executable `sh` script: a stand-in for a recipe's job.
fn script(path: &Path, body: &str) -> PathBuf {
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_owned()
}

/// Shell lines that wait for `$GATE` to exist, at most 10 s (so a failed test ends).
const WAIT_FOR_GATE: &str =
    "i=0; while [ ! -e \"$GATE\" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done\n";

/// The directory of the binary under test, for a PATH "with redlock installed".
fn redlock_dir() -> String {
    Path::new(REDLOCK).parent().unwrap().display().to_string()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[track_caller]
fn wait_for_line(path: &Path, line: &str) {
    assert!(
        wait_until(Duration::from_secs(10), || lines(path)
            .iter()
            .any(|have| have == line)),
        "{} never showed {line:?}; it has {:?}",
        path.display(),
        lines(path)
    );
}

/// A process a test started, with its output captured; killed if it outlives its bound.
struct Started {
    child: Child,
    what: String,
}

impl Started {
    fn new(mut command: Command, what: &str) -> Self {
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|err| panic!("{what}: {err}"));
        Self {
            child,
            what: what.to_owned(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits at most `limit` for the exit; on timeout kills it and fails with its output.
    #[track_caller]
    fn finish(mut self, limit: Duration) -> Output {
        use std::io::Read as _;
        let exited = wait_until(limit, || !self.running());
        if !exited {
            let _ = self.child.kill();
        }
        let status = self.child.wait().unwrap();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        if let Some(mut pipe) = self.child.stdout.take() {
            let _ = pipe.read_to_end(&mut stdout);
        }
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = pipe.read_to_end(&mut stderr);
        }
        let output = Output {
            status,
            stdout,
            stderr,
        };
        assert!(
            exited,
            "{} did not exit within {limit:?}\n{}",
            self.what,
            show(&output)
        );
        output
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn show(output: &Output) -> String {
    format!(
        "status: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[track_caller]
fn run_within(command: Command, what: &str, limit: Duration) -> Output {
    Started::new(command, what).finish(limit)
}

/// Asserts the exit code; a recipe that succeeds must also leave stderr empty (journal and
/// CI-log noise, and a warning there is a promise of the recipe's text broken: see
/// [`assert_clean_stderr`]).
#[track_caller]
fn assert_code(output: &Output, code: i32, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "{what}: unexpected exit\n{}",
        show(output)
    );
    if code == 0 {
        assert_clean_stderr(output, what);
    }
}

/// Nothing on stderr but what the recipes promise there: the lines of a wait in the lock's
/// queue (a CI log shows who holds the lock) and, from a host that skipped with `-E 0`, the
/// line naming the holder (the journal says why it skipped). No warning, no error, no other
/// notice.
#[track_caller]
fn assert_clean_stderr(output: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let noise: Vec<&str> = stderr
        .lines()
        .filter(|line| {
            !(line.starts_with("redlock: waiting for lock ")
                || (line.starts_with("redlock: acquired lock ")
                    && line.contains(" after waiting "))
                || (line.starts_with("redlock: lock '") && line.contains("' is busy: held by ")))
        })
        .collect();
    assert!(
        noise.is_empty(),
        "{what} succeeded, but wrote to stderr: {noise:?}\n{}",
        show(output)
    );
}

#[track_caller]
fn assert_silent(output: &Output, what: &str) {
    assert!(
        output.stdout.is_empty() && output.stderr.is_empty(),
        "{what} should print nothing\n{}",
        show(output)
    );
}

/// `redlock inspect --json` of `key` on `server`.
fn inspect(server: &RedisServer, key: &str) -> Value {
    let out = server
        .redlock(&["inspect", "--json", "--key", key])
        .env("REDLOCK_PASSWORD", PASSWORD)
        .run();
    out.json()
}

fn waiters(server: &RedisServer, key: &str) -> usize {
    inspect(server, key)["waiters"]
        .as_array()
        .map_or(0, Vec::len)
}

/// Whether nothing of `key` is left but its fence counter and history (held by nobody, nobody
/// queued).
fn only_fence_left(server: &RedisServer, key: &str) -> bool {
    server.keys_but_history() == [format!("redlock:{{{key}}}:fence")]
}

/// Remaining lease of `key`'s holders, in ms (negative: no such key or no expiry).
fn lease_left_ms(server: &RedisServer, key: &str) -> i64 {
    server.cmd(&["PTTL", &format!("redlock:{{{key}}}:holders")])
}

/// YAML parsed by python3's PyYAML, as JSON.
#[track_caller]
fn yaml(text: &str) -> Value {
    const PROGRAM: &str = "import json, sys\n\
        try:\n    import yaml\n\
        except ImportError:\n    sys.exit('PyYAML is missing: install python3-yaml (.ci/run does)')\n\
        json.dump(yaml.safe_load(sys.stdin), sys.stdout)\n";
    let mut child = Command::new("python3")
        .args(["-c", PROGRAM])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is needed to parse the recipes' YAML (.ci/run installs it)");
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
    }
    let output = Started {
        child,
        what: "python3 (YAML)".into(),
    }
    .finish(Duration::from_secs(20));
    assert!(
        output.status.success(),
        "the YAML does not parse\n{}\n{text}",
        show(&output)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// A YAML list of strings, which an exec-form command must be.
#[track_caller]
fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|item| {
            item.as_str()
                .unwrap_or_else(|| panic!("not a string: {item} (quote it)"))
                .to_owned()
        })
        .collect()
}

/// The value following `flag` in `argv`.
#[track_caller]
fn flag_value<'a>(argv: &'a [String], flag: &str) -> &'a str {
    let at = argv
        .iter()
        .position(|arg| arg == flag)
        .unwrap_or_else(|| panic!("{flag} missing from {argv:?}"));
    &argv[at + 1]
}

#[track_caller]
fn duration(text: &str) -> Duration {
    humantime::parse_duration(text).unwrap_or_else(|err| panic!("{text:?}: {err}"))
}

/// Intervals `(start, end)` in ns: the most that overlapped at any moment.
fn most_at_once(intervals: &[(u128, u128)]) -> usize {
    intervals
        .iter()
        .map(|&(start, _)| {
            intervals
                .iter()
                .filter(|&&(other_start, other_end)| other_start <= start && start < other_end)
                .count()
        })
        .max()
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Crontab and the password file

/// The password-file commands as written (without sudo, in a test directory): the file is
/// its owner's, mode 0600, and redlock reads it without a warning.
#[test]
fn password_file_recipe_makes_a_file_only_its_owner_reads() {
    let server = start_server();
    let dir = TempDir::new("recipe-password");
    let etc = dir.path().join("etc-redlock");
    let commands = swap(&snippet("password-file").body, "sudo ", "");
    let commands = swap(&commands, "/etc/redlock", &etc.display().to_string());
    let mut shell = Command::new("sh");
    shell.args(["-ec", &commands]).stdin(Stdio::piped());
    let mut child = shell
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        // What the operator types: the password, Enter, Ctrl-D.
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(format!("{PASSWORD}\n").as_bytes()).unwrap();
    }
    let out = Started {
        child,
        what: "password-file recipe".into(),
    }
    .finish(Duration::from_secs(10));
    assert_code(&out, 0, "password-file recipe");
    let file = etc.join("password");
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        nix::unistd::getuid().as_raw()
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("{PASSWORD}\n")
    );
    let out = server
        .redlock(&["run", "--password-file"])
        .arg(&file)
        .args(&["--key", "k", "--", "true"])
        .run();
    out.code(0).stderr_empty();
}

/// The crontab as cron runs it, on three "hosts": two at the same tick, one a little late.
/// Exactly one runs the job; nobody prints anything (cron would mail it).
#[test]
fn crontab_runs_the_job_on_one_host_only() {
    let server = start_server();
    let dir = TempDir::new("recipe-crontab");
    let ran = dir.path().join("ran");
    let job = script(
        &dir.path().join("run.sh"),
        &format!("echo ran >> {}\nsleep 0.5\n", ran.display()),
    );
    let password = password_file(dir.path());
    // What cron gives a command: a bare environment, plus the crontab's own assignments.
    let mut environment: Vec<(String, String)> = vec![
        ("HOME".into(), dir.path().display().to_string()),
        ("LOGNAME".into(), "report".into()),
        ("SHELL".into(), "/bin/sh".into()),
        ("PATH".into(), "/usr/bin:/bin".into()),
    ];
    let mut entries = Vec::new();
    for line in snippet("crontab").body.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let is_assignment = line
            .split_once('=')
            .is_some_and(|(name, _)| name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        if is_assignment {
            let (name, value) = line.split_once('=').unwrap();
            let value = swap(value, DOC_URL, &server.url());
            environment.push((name.to_owned(), value));
        } else {
            entries.push(after_fields(line, 5).to_owned());
        }
    }
    assert_eq!(entries.len(), 1, "one crontab entry");
    let command = &entries[0];
    assert!(!command.contains('%'), "cron turns % into a newline");
    let command = swap(command, DOC_REDLOCK, REDLOCK);
    let command = swap(&command, DOC_PASSWORD_FILE, &password.display().to_string());
    let command = swap(&command, "/opt/report/run.sh", &job.display().to_string());
    let cron = |host: &str| {
        let mut sh = Command::new("/bin/sh");
        sh.args(["-c", &command])
            .env_clear()
            .envs(environment.iter().map(|(name, value)| (name, value)));
        Started::new(sh, &format!("crontab entry on {host}"))
    };
    let (first, second) = (cron("host1"), cron("host2"));
    for out in [first, second].map(|host| host.finish(Duration::from_secs(10))) {
        assert_code(&out, 0, "crontab entry");
        assert_silent(&out, "crontab entry");
    }
    // A host whose clock is late, after the job ended: --min-hold still keeps it out.
    let late = cron("late-host").finish(Duration::from_secs(10));
    assert_code(&late, 0, "late crontab entry");
    assert_silent(&late, "late crontab entry");
    assert_eq!(lines(&ran), ["ran"], "exactly one host runs the job");
}

/// `line` after its first `fields` whitespace-separated fields (a crontab's schedule).
fn after_fields(line: &str, fields: usize) -> &str {
    let mut rest = line.trim_start();
    for _ in 0..fields {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        rest = rest[end..].trim_start();
    }
    rest
}

// ---------------------------------------------------------------------------------------------
// systemd

/// A unit block's file name (from its `# /etc/systemd/system/NAME` line) and text.
fn unit(block: Block) -> (String, String) {
    let first = block.body.lines().next().unwrap();
    let path = first
        .strip_prefix("# /etc/systemd/system/")
        .unwrap_or_else(|| panic!("{}: the first line should name the unit's file", block.name));
    (path.to_owned(), block.body)
}

/// `(section, key, value)` of every setting, in order.
fn ini(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut settings = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not a setting: {line}"));
        settings.push((section.clone(), key.to_owned(), value.to_owned()));
    }
    settings
}

#[track_caller]
fn setting<'a>(settings: &'a [(String, String, String)], section: &str, key: &str) -> &'a str {
    settings
        .iter()
        .find(|(s, k, _)| s == section && k == key)
        .map(|(_, _, value)| value.as_str())
        .unwrap_or_else(|| panic!("[{section}] {key}= missing"))
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let dir = TempDir::new("recipe-units");
    let (service_name, service) = unit(snippet("systemd-service"));
    let (timer_name, timer) = unit(snippet("systemd-timer"));
    assert_eq!(
        service_name.strip_suffix(".service"),
        timer_name.strip_suffix(".timer"),
        "the timer starts the service of its own name"
    );
    assert!(!ini(&timer).iter().any(|(_, key, _)| key == "Unit"));
    // verify checks that ExecStart's program exists and is executable.
    let service = swap(&service, DOC_REDLOCK, REDLOCK);
    let (service_path, timer_path) = (dir.path().join(&service_name), dir.path().join(&timer_name));
    std::fs::write(&service_path, service).unwrap();
    std::fs::write(&timer_path, timer).unwrap();
    let mut verify = Command::new("systemd-analyze");
    verify.arg("verify").arg(&service_path).arg(&timer_path);
    let out = verify
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(|child| {
            Started {
                child,
                what: "systemd-analyze verify".into(),
            }
            .finish(Duration::from_secs(30))
        })
        .unwrap_or_else(|err| {
            panic!("systemd-analyze is needed to check the units ({err}): install systemd (.ci/run does)")
        });
    // Unknown keys and bad values are only warnings (exit 0): any output is a failure.
    assert_code(&out, 0, "systemd-analyze verify");
    assert_silent(&out, "systemd-analyze verify");
}

/// The service's ExecStart as systemd would start it, with its Environment= and its
/// credentials directory for %d; the job is `job_body`.
fn exec_start(
    server: &RedisServer,
    dir: &Path,
    job_body: &str,
) -> (Command, Vec<(String, String, String)>) {
    let (_, service) = unit(snippet("systemd-service"));
    let settings = ini(&service);
    let credentials = dir.join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    let (credential, _) = setting(&settings, "Service", "LoadCredential")
        .split_once(':')
        .unwrap();
    // systemd makes the copy readable by the service's user only.
    let copy = credentials.join(credential);
    std::fs::write(&copy, format!("{PASSWORD}\n")).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o400)).unwrap();
    let job = script(&dir.join("run.sh"), job_body);
    let line = setting(&settings, "Service", "ExecStart");
    assert!(
        !line.contains(['"', '\'', '$']),
        "ExecStart is split on spaces here: {line}"
    );
    let line = swap(line, DOC_REDLOCK, REDLOCK);
    let line = swap(&line, "%d", &credentials.display().to_string());
    let line = swap(&line, "/opt/backup/run.sh", &job.display().to_string());
    let argv: Vec<&str> = line.split_whitespace().collect();
    let mut command = Command::new(argv[0]);
    command.args(&argv[1..]).env_clear().envs([
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        ),
        ("CREDENTIALS_DIRECTORY", credentials.display().to_string()),
    ]);
    for (_, _, value) in settings
        .iter()
        .filter(|(section, key, _)| section == "Service" && key == "Environment")
    {
        let (name, value) = value.split_once('=').unwrap();
        command.env(name, swap(value, DOC_URL, &server.url()));
    }
    (command, settings)
}

/// Two hosts' timers fire together: one backs up, the other logs who holds the lock and
/// succeeds (exit 0, not a failed unit).
#[test]
fn systemd_service_runs_on_one_host_only() {
    let server = start_server();
    let dir = TempDir::new("recipe-systemd");
    let ran = dir.path().join("ran");
    let job = format!("echo ran >> {}\nsleep 0.5\n", ran.display());
    let hosts = ["host1", "host2"].map(|host| {
        let host_dir = dir.path().join(host);
        std::fs::create_dir(&host_dir).unwrap();
        let (command, _) = exec_start(&server, &host_dir, &job);
        Started::new(command, &format!("{host}'s service"))
    });
    let outs = hosts.map(|host| host.finish(Duration::from_secs(10)));
    for out in &outs {
        assert_code(out, 0, "the service");
    }
    assert_eq!(lines(&ran), ["ran"], "exactly one host runs the backup");
    // The journal line the recipe quotes, from the host that skipped.
    let skipped = outs
        .iter()
        .filter(|out| {
            String::from_utf8_lossy(&out.stderr).contains("lock 'db-backup' is busy: held by")
        })
        .count();
    assert_eq!(skipped, 1, "{}\n{}", show(&outs[0]), show(&outs[1]));
}

/// `systemctl stop` with KillMode=mixed: SIGTERM to redlock alone, which passes it on once;
/// the lock is kept for --min-hold as after any run. The unit's timeouts fit redlock's grace.
#[test]
fn systemd_stop_reaches_the_job_once() {
    let server = start_server();
    let dir = TempDir::new("recipe-systemd-stop");
    let log = dir.path().join("log");
    let (command, settings) = exec_start(
        &server,
        dir.path(),
        // (Its sleeps ignore SIGTERM, which reaches the job's whole group: a shell whose
        // child dies of it says "Terminated" on stderr, noise of the stand-in's own.)
        &format!(
            "trap 'echo TERM >> {log}; exit 0' TERM\necho started >> {log}\n\
             i=0; while [ $i -lt 200 ]; do (trap '' TERM; exec sleep 0.05) & wait $!; i=$((i+1)); done\n",
            log = log.display()
        ),
    );
    assert_eq!(setting(&settings, "Service", "Type"), "oneshot");
    assert_eq!(setting(&settings, "Service", "KillMode"), "mixed");
    let argv: Vec<String> = command
        .get_args()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let kill_after = duration(flag_value(&argv, "--kill-after"));
    let stop_timeout = duration(setting(&settings, "Service", "TimeoutStopSec"));
    assert!(
        kill_after + Duration::from_secs(5) <= stop_timeout,
        "TimeoutStopSec ({stop_timeout:?}) leaves redlock no time to release after --kill-after ({kill_after:?})"
    );
    let min_hold = duration(flag_value(&argv, "--min-hold"));
    let service = Started::new(command, "the service");
    wait_for_line(&log, "started");
    send_signal(service.pid(), "TERM");
    let out = service.finish(Duration::from_secs(5));
    assert_code(&out, 0, "the stopped service (its job exits 0 on SIGTERM)");
    assert_eq!(
        lines(&log),
        ["started", "TERM"],
        "one SIGTERM reaches the job"
    );
    let left = lease_left_ms(&server, "db-backup");
    assert!(
        left > 0 && left <= min_hold.as_millis() as i64,
        "the lock should be kept until --min-hold has passed; PTTL {left}"
    );
}

// ---------------------------------------------------------------------------------------------
// GitHub Actions

/// `${{ ... }}` expressions replaced from `values`; any other expression fails.
#[track_caller]
fn github_expand(text: &str, values: &[(&str, &str)]) -> String {
    let mut text = text.to_owned();
    for (expression, value) in values {
        text = text.replace(&format!("${{{{ {expression} }}}}"), value);
    }
    assert!(!text.contains("${{"), "unexpected expression in {text:?}");
    text
}

/// A job's `env:`, expanded.
fn github_env(job: &Value, values: &[(&str, &str)]) -> Vec<(String, String)> {
    job["env"]
        .as_object()
        .expect("the job has an env")
        .iter()
        .map(|(name, value)| (name.clone(), github_expand(value.as_str().unwrap(), values)))
        .collect()
}

/// A `run:` step as the runner starts it: a script file run by `bash -e` (the default shell
/// on Linux), in the workspace, with the job's environment and redlock on PATH; in a process
/// group of its own, as the runner kills a cancelled step's whole tree.
fn github_step(workspace: &Path, run: &str, env: &[(String, String)], step: usize) -> Command {
    let file = workspace.join(format!("step-{step}.sh"));
    std::fs::write(&file, run).unwrap();
    let mut bash = Command::new("bash");
    bash.arg("-e")
        .arg(&file)
        .current_dir(workspace)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", redlock_dir()))
        .env("RUNNER_TEMP", workspace.join("runner-temp"))
        .envs(env.iter().map(|(name, value)| (name, value)))
        .process_group(0);
    bash
}

/// The deploy workflow's job and its deploy step's `run:`.
fn github_deploy_job() -> (Value, String) {
    let workflow = yaml(&snippet("github-deploy").body);
    let job = workflow["jobs"]["deploy"].clone();
    let environments = strings(&job["strategy"]["matrix"]["environment"]);
    assert_eq!(environments, ["staging", "production"]);
    let run = job["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|step| step["run"].as_str())
        .find(|run| run.contains("redlock run"))
        .expect("a step that runs redlock")
        .to_owned();
    assert!(
        run.trim_start().starts_with("exec redlock "),
        "the deploy step must exec redlock, so that a cancel reaches it: {run}"
    );
    // The job's timeout outlasts the wait and the deploy together.
    let argv: Vec<String> = run.split_whitespace().map(str::to_owned).collect();
    let timeout = Duration::from_secs(job["timeout-minutes"].as_u64().unwrap() * 60);
    assert!(
        duration(flag_value(&argv, "--wait")) + duration(flag_value(&argv, "--max-runtime"))
            < timeout,
        "timeout-minutes is shorter than --wait plus --max-runtime"
    );
    (job, run)
}

/// A workspace whose deploy.sh logs `start|end ENV RUN`, waiting for `$GATE` in between,
/// and logs SIGINT (without stopping: it finishes what it is doing).
fn deploy_workspace(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(workspace.join("runner-temp")).unwrap();
    let (log, gate) = (dir.join("log"), dir.join("gate"));
    script(
        &workspace.join("deploy.sh"),
        &format!(
            "trap 'echo \"INT $1 $RUN\" >> {log}' INT\necho \"start $1 $RUN\" >> {log}\n{WAIT_FOR_GATE}echo \"end $1 $RUN\" >> {log}\n",
            log = log.display()
        ),
    );
    (workspace, log, gate)
}

/// Starts the deploy step of run `run` for `environment`.
fn github_deploy(
    server: &RedisServer,
    (job, run_line): &(Value, String),
    (workspace, gate): (&Path, &Path),
    environment: &str,
    run: u32,
) -> Started {
    let url = server.url();
    let env = github_env(
        job,
        &[
            ("matrix.environment", environment),
            ("secrets.REDLOCK_URL", &url),
            ("secrets.REDLOCK_PASSWORD", PASSWORD),
        ],
    );
    let mut step = github_step(workspace, run_line, &env, run as usize);
    step.env("RUN", run.to_string()).env("GATE", gate);
    Started::new(step, &format!("deploy of {environment}, run {run}"))
}

/// Three runs deploy production one after another, in the order they asked; staging
/// deploys meanwhile.
#[test]
fn github_deploys_queue_per_environment() {
    let server = start_server();
    let dir = TempDir::new("recipe-github-queue");
    let job = github_deploy_job();
    let (workspace, log, gate) = deploy_workspace(dir.path());
    let at = (workspace.as_path(), gate.as_path());
    let first = github_deploy(&server, &job, at, "production", 1);
    wait_for_line(&log, "start production 1");
    let second = github_deploy(&server, &job, at, "production", 2);
    assert!(wait_until(Duration::from_secs(10), || waiters(
        &server,
        "deploy-production"
    ) == 1));
    let third = github_deploy(&server, &job, at, "production", 3);
    assert!(wait_until(Duration::from_secs(10), || waiters(
        &server,
        "deploy-production"
    ) == 2));
    let staging = github_deploy(&server, &job, at, "staging", 4);
    wait_for_line(&log, "start staging 4");
    std::fs::write(&gate, "").unwrap();
    for run in [first, second, third, staging] {
        let out = run.finish(Duration::from_secs(15));
        assert_code(&out, 0, "a deploy");
    }
    let production: Vec<String> = lines(&log)
        .into_iter()
        .filter(|line| line.contains("production"))
        .collect();
    assert_eq!(
        production,
        [
            "start production 1",
            "end production 1",
            "start production 2",
            "end production 2",
            "start production 3",
            "end production 3"
        ]
    );
}

/// A cancel while deploying: the runner's SIGINT reaches the deploy (which carries on), and
/// its SIGTERM 7.5 s later (here 0.3 s) ends it at once and frees the lock.
#[test]
fn github_cancel_reaches_the_deploy_and_frees_the_lock() {
    let server = start_server();
    let dir = TempDir::new("recipe-github-cancel");
    let job = github_deploy_job();
    let (workspace, log, gate) = deploy_workspace(dir.path());
    let mut deploy = github_deploy(&server, &job, (&workspace, &gate), "production", 1);
    wait_for_line(&log, "start production 1");
    // The runner signals the step's entry process; `exec` made that redlock.
    send_signal(deploy.pid(), "INT");
    wait_for_line(&log, "INT production 1");
    std::thread::sleep(Duration::from_millis(300));
    assert!(deploy.running(), "the deploy is given time to finish");
    assert_eq!(inspect(&server, "deploy-production")["state"], "held");
    send_signal(deploy.pid(), "TERM");
    let out = deploy.finish(Duration::from_secs(2));
    assert!(
        matches!(out.status.code(), Some(137 | 143)),
        "the deploy was stopped by the second signal\n{}",
        show(&out)
    );
    assert!(
        only_fence_left(&server, "deploy-production"),
        "{:?}",
        server.keys()
    );
    assert!(!lines(&log).contains(&"end production 1".to_owned()));
}

/// A cancel while queued: the job leaves the queue at once (exit 130) and never deploys.
#[test]
fn github_cancel_while_queued_leaves_the_queue() {
    let server = start_server();
    let dir = TempDir::new("recipe-github-queued");
    let job = github_deploy_job();
    let (workspace, log, gate) = deploy_workspace(dir.path());
    let at = (workspace.as_path(), gate.as_path());
    let holder = github_deploy(&server, &job, at, "production", 1);
    wait_for_line(&log, "start production 1");
    let queued = github_deploy(&server, &job, at, "production", 2);
    assert!(wait_until(Duration::from_secs(10), || waiters(
        &server,
        "deploy-production"
    ) == 1));
    send_signal(queued.pid(), "INT");
    let out = queued.finish(Duration::from_secs(2));
    assert_code(&out, 130, "the cancelled, queued deploy");
    assert_eq!(waiters(&server, "deploy-production"), 0);
    std::fs::write(&gate, "").unwrap();
    assert_code(&holder.finish(Duration::from_secs(10)), 0, "the holder");
    assert!(
        !lines(&log)
            .iter()
            .any(|line| line.ends_with("production 2"))
    );
}

/// Keepers (`acquire --keep-alive`) still running against `server`.
fn keepers(server: &RedisServer) -> Vec<u32> {
    let url = format!("REDLOCK_URL={}\0", server.url());
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            // The keeper's own command is `redlock ... keep-alive --key ...`.
            cmdline
                .split(|&byte| byte == 0)
                .any(|arg| arg == b"keep-alive")
                && String::from_utf8_lossy(&environ).contains(&url)
                && crate::util::alive(*pid)
        })
        .collect()
}

/// The multi-step job, run step by step as the runner would: after success, after a failed
/// step, and after a cancel that kills a step, the `if: always()` step gives the lock back and
/// the keeper goes away.
#[test]
fn github_multi_step_job_gives_the_lock_back_whatever_happens() {
    let server = start_server();
    let dir = TempDir::new("recipe-github-steps");
    let workflow = yaml(&snippet("github-multi-step").body);
    let job = &workflow["jobs"]["migrate"];
    let url = server.url();
    let env = github_env(
        job,
        &[
            ("secrets.REDLOCK_URL", &url),
            ("secrets.REDLOCK_PASSWORD", PASSWORD),
        ],
    );
    let steps = job["steps"].as_array().unwrap().clone();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(workspace.join("runner-temp")).unwrap();
    let log = dir.path().join("log");
    script(
        &workspace.join("migrate.sh"),
        &format!(
            "redlock inspect -q --key staging-db > /dev/null && echo migrate-under-lock >> {log}\n\
             [ -z \"$GATE\" ] || {{ {WAIT_FOR_GATE} }}\nexit \"${{MIGRATE_EXIT:-0}}\"\n",
            log = log.display()
        ),
    );
    script(
        &workspace.join("smoke-test.sh"),
        &format!("echo smoke-test >> {}\n", log.display()),
    );
    let run_of = |step: &Value| {
        let run = step["run"].as_str().unwrap();
        // A short lease, so that the keeper notices the release within a second (it renews
        // every ttl/3) and the test can see it go.
        if run.contains("--keep-alive") {
            swap(run, "--ttl 1m", "--ttl 3s")
        } else {
            run.to_owned()
        }
    };
    // Runs the job; `cancel_at` names a step the runner cancels (kills) once it has started.
    let run_job = |extra: &[(&str, &str)], cancel_at: Option<usize>| -> Vec<Option<i32>> {
        let mut env = env.clone();
        env.extend(
            extra
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned())),
        );
        let mut failed = false;
        let mut statuses = Vec::new();
        for (at, step) in steps.iter().enumerate() {
            if step.get("uses").is_some() {
                // actions/checkout: the workspace is already there.
                statuses.push(None);
                continue;
            }
            let always = match step.get("if").and_then(Value::as_str) {
                None => false,
                Some("always()") => true,
                Some(other) => panic!("unexpected if: {other}"),
            };
            if failed && !always {
                statuses.push(None);
                continue;
            }
            let command = github_step(&workspace, &run_of(step), &env, at);
            let started = Started::new(command, &format!("step {at}"));
            let out = if cancel_at == Some(at) {
                wait_for_line(&log, "migrate-under-lock");
                assert_eq!(
                    keepers(&server).len(),
                    1,
                    "a keeper renews the lease between steps"
                );
                // The runner's last resort: the step's whole tree, SIGKILL.
                let group = nix::unistd::Pid::from_raw(started.pid() as i32);
                nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
                started.finish(Duration::from_secs(5))
            } else {
                started.finish(Duration::from_secs(15))
            };
            if step["run"].as_str().unwrap().contains("redlock acquire") {
                assert!(
                    out.stdout.is_empty(),
                    "the token must not reach the log\n{}",
                    show(&out)
                );
            }
            failed |= !out.status.success();
            if out.status.success() {
                assert_clean_stderr(&out, &format!("step {at}"));
            }
            // Killed by a signal: 128+N, as a shell would report it.
            let code = out.status.code().or_else(|| {
                std::os::unix::process::ExitStatusExt::signal(&out.status).map(|n| 128 + n)
            });
            statuses.push(code);
        }
        statuses
    };
    let check_released = |what: &str| {
        assert!(
            only_fence_left(&server, "staging-db"),
            "{what}: {:?}",
            server.keys()
        );
        assert!(
            wait_until(Duration::from_secs(5), || keepers(&server).is_empty()),
            "{what}: the keeper outlived the release: {:?}",
            keepers(&server)
        );
    };

    let statuses = run_job(&[], None);
    assert_eq!(statuses, [None, Some(0), Some(0), Some(0), Some(0)]);
    assert_eq!(lines(&log), ["migrate-under-lock", "smoke-test"]);
    check_released("after success");

    std::fs::remove_file(&log).unwrap();
    let statuses = run_job(&[("MIGRATE_EXIT", "3")], None);
    assert_eq!(statuses, [None, Some(0), Some(3), None, Some(0)]);
    assert_eq!(lines(&log), ["migrate-under-lock"]);
    check_released("after a failed step");

    std::fs::remove_file(&log).unwrap();
    let gate = dir.path().join("gate").display().to_string();
    let statuses = run_job(&[("GATE", &gate)], Some(2));
    assert_eq!(statuses, [None, Some(0), Some(137), None, Some(0)]);
    check_released("after a cancel");
}

// ---------------------------------------------------------------------------------------------
// GitLab CI

/// Two pipelines deploy production one after the other while staging deploys beside them;
/// the jobs come from `.gitlab-ci.yml` with `extends` resolved.
#[test]
fn gitlab_deploys_queue_per_environment() {
    let server = start_server();
    let dir = TempDir::new("recipe-gitlab");
    let pipeline = yaml(&snippet("gitlab-deploy").body);
    let pipeline = pipeline.as_object().unwrap();
    let job = |name: &str| -> Value {
        let mut job = pipeline[name].as_object().unwrap().clone();
        if let Some(base) = job.remove("extends") {
            let mut merged = pipeline[base.as_str().unwrap()]
                .as_object()
                .unwrap()
                .clone();
            merged.extend(job);
            job = merged;
        }
        Value::Object(job)
    };
    let jobs: Vec<&String> = pipeline
        .keys()
        .filter(|name| !name.starts_with('.') && *name != "stages")
        .collect();
    assert_eq!(jobs, ["deploy-production", "deploy-staging"]);
    let (workspace, log, gate) = deploy_workspace(dir.path());
    let start = |name: &str, run: u32| {
        let job = job(name);
        let environment = job["environment"].as_str().unwrap();
        let script: Vec<String> = strings(&job["script"]);
        let line = &script[0];
        let argv: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        let timeout = duration(job["timeout"].as_str().unwrap());
        assert!(
            duration(flag_value(&argv, "--wait")) + duration(flag_value(&argv, "--max-runtime"))
                < timeout,
            "{name}: timeout is shorter than --wait plus --max-runtime"
        );
        // GitLab runs the script lines in one shell that stops at the first failure.
        let mut shell = Command::new("bash");
        shell
            .args(["-eo", "pipefail", "-c", &script.join("\n")])
            .current_dir(&workspace)
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", redlock_dir()))
            .env("CI_ENVIRONMENT_NAME", environment)
            .env("REDLOCK_URL", server.url())
            .env("REDLOCK_PASSWORD", PASSWORD)
            .env("RUN", run.to_string())
            .env("GATE", &gate);
        Started::new(shell, &format!("{name}, pipeline {run}"))
    };
    let first = start("deploy-production", 1);
    wait_for_line(&log, "start production 1");
    let second = start("deploy-production", 2);
    assert!(wait_until(Duration::from_secs(10), || waiters(
        &server,
        "deploy-production"
    ) == 1));
    let staging = start("deploy-staging", 3);
    wait_for_line(&log, "start staging 3");
    std::fs::write(&gate, "").unwrap();
    for run in [first, second, staging] {
        assert_code(&run.finish(Duration::from_secs(15)), 0, "a deploy job");
    }
    let production: Vec<String> = lines(&log)
        .into_iter()
        .filter(|line| line.contains("production"))
        .collect();
    assert_eq!(
        production,
        [
            "start production 1",
            "end production 1",
            "start production 2",
            "end production 2"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Kubernetes

/// The CronJob's container command (exec form, paths swapped) with its env, and the pod spec.
fn k8s_container(server: &RedisServer, job: &Path) -> (Command, Vec<String>, Value) {
    let cronjob = yaml(&snippet("k8s-cronjob").body);
    assert_eq!(cronjob["kind"], "CronJob");
    assert_eq!(cronjob["spec"]["concurrencyPolicy"], "Forbid");
    let pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"].clone();
    assert_eq!(pod["restartPolicy"], "Never");
    let container = &pod["containers"][0];
    let argv = strings(&container["command"]);
    assert_eq!(argv[0], DOC_REDLOCK);
    let mut command = Command::new(REDLOCK);
    let job_at = argv
        .iter()
        .position(|arg| arg == "/opt/report/run.sh")
        .expect("the job");
    command
        .args(&argv[1..job_at])
        .arg(job)
        .args(&argv[job_at + 1..]);
    command.env_clear().env("PATH", "/usr/bin:/bin");
    for variable in container["env"].as_array().unwrap() {
        let name = variable["name"].as_str().unwrap();
        let value = if let Some(value) = variable["value"].as_str() {
            assert!(value.starts_with("redis"), "{name}: {value}");
            server.url()
        } else {
            assert_eq!(variable["valueFrom"]["secretKeyRef"]["key"], "password");
            PASSWORD.to_owned()
        };
        command.env(name, value);
    }
    (command, argv, pod)
}

/// The same CronJob in two clusters fires at once: one report runs; the other Job succeeds
/// (-E 0) and its log says who held the lock.
#[test]
fn k8s_cronjob_runs_once_across_clusters() {
    let server = start_server();
    let dir = TempDir::new("recipe-k8s");
    let ran = dir.path().join("ran");
    let job = script(
        &dir.path().join("run.sh"),
        &format!("echo ran >> {}\nsleep 0.5\n", ran.display()),
    );
    let (first, _, _) = k8s_container(&server, &job);
    let (second, _, _) = k8s_container(&server, &job);
    let outs = [
        Started::new(first, "cluster A's pod"),
        Started::new(second, "cluster B's pod"),
    ]
    .map(|pod| pod.finish(Duration::from_secs(10)));
    for out in &outs {
        assert_code(out, 0, "a pod");
    }
    assert_eq!(lines(&ran), ["ran"], "exactly one cluster runs the report");
    let busy = outs
        .iter()
        .filter(|out| String::from_utf8_lossy(&out.stderr).contains("is busy: held by"))
        .count();
    assert_eq!(busy, 1);
}

/// Pod deleted: the SIGTERM reaches the report and redlock ends well inside the grace period.
/// Node lost (redlock SIGKILLed): the report dies with it and the lock's lease is at most
/// --ttl, so it frees itself.
#[test]
fn k8s_pod_deletion_and_node_loss() {
    let dir = TempDir::new("recipe-k8s-stop");
    let (log, pid_file) = (dir.path().join("log"), dir.path().join("pid"));
    let job = script(
        &dir.path().join("run.sh"),
        &format!(
            "trap 'echo TERM >> {log}; exit 0' TERM\necho $$ > {pid}\necho started >> {log}\n\
             i=0; while [ $i -lt 200 ]; do (trap '' TERM; exec sleep 0.05) & wait $!; i=$((i+1)); done\n",
            log = log.display(),
            pid = pid_file.display()
        ),
    );

    let server = start_server();
    let (command, argv, pod) = k8s_container(&server, &job);
    let kill_after = duration(flag_value(&argv, "--kill-after"));
    let grace = Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().unwrap());
    assert!(
        kill_after + Duration::from_secs(5) <= grace,
        "terminationGracePeriodSeconds leaves redlock no time to release after --kill-after"
    );
    let deleted = Started::new(command, "the pod");
    wait_for_line(&log, "started");
    send_signal(deleted.pid(), "TERM");
    assert_code(
        &deleted.finish(Duration::from_secs(5)),
        0,
        "the deleted pod",
    );
    assert_eq!(lines(&log), ["started", "TERM"]);

    std::fs::remove_file(&log).unwrap();
    let server = start_server();
    let (command, _, _) = k8s_container(&server, &job);
    let ttl = duration(flag_value(&argv, "--ttl"));
    let lost = Started::new(command, "the pod on a lost node");
    wait_for_line(&log, "started");
    let report: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    send_signal(lost.pid(), "KILL");
    let _ = lost.finish(Duration::from_secs(5));
    assert!(
        wait_until(Duration::from_secs(5), || !crate::util::alive(report)),
        "the report outlived redlock"
    );
    let left = lease_left_ms(&server, "nightly-report");
    assert!(
        left > 0 && left <= ttl.as_millis() as i64,
        "the lease left ({left} ms) should be at most --ttl"
    );
}

/// The Kubernetes recipes in containers. redlock's image, loaded and pushed as the recipe says
/// (to an archive here, not a registry); the report's image built from the recipe's
/// Containerfile, on a stand-in of the report's own image (tests/util/podman.rs); the
/// CronJob's container run in it with podman as Kubernetes would (its command replacing the
/// entrypoint, its env): twice at once, as in two clusters, one report runs and the other
/// container ends 0 saying who held the lock; once more, deleted (SIGTERM to the container),
/// the signal reaches the report through redlock, the container's first process, and the
/// container ends 0. The check's container runs in redlock's own image: 83 before any report,
/// 0 after one.
#[test]
fn k8s_recipes_run_in_their_images() {
    let dir = TempDir::new("recipe-k8s-images");
    let Some(archive) = crate::util::dist::image_archive(dir.path()) else {
        return;
    };
    let Some(podman) = Podman::start() else {
        return;
    };
    let server = start_server();

    // redlock's image: the recipe's two commands, podman's storage the test's.
    let push = snippet("k8s-image-push").body;
    let file = archive.file_name().unwrap().to_str().unwrap();
    let pushed = dir.path().join("pushed.tar");
    let push = swap(&push, file, archive.to_str().unwrap());
    let push = swap(
        &push,
        "registry.example.com/redlock:0.1.0",
        &format!("oci-archive:{}", pushed.display()),
    );
    let mut redlock_image = String::new();
    for line in push.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[0], "podman", "{line}");
        let mut command = podman.command();
        command.args(&words[1..]);
        let out = run_within(command, line, Duration::from_secs(120));
        assert_code(&out, 0, line);
        if let Some(loaded) = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|said| said.strip_prefix("Loaded image: "))
        {
            redlock_image = loaded.trim().to_owned();
        }
    }
    assert_eq!(
        redlock_image,
        format!("localhost/redlock:{}-amd64", env!("CARGO_PKG_VERSION"))
    );
    assert!(
        push.contains(&format!("podman push --quiet {redlock_image} ")),
        "{push}"
    );
    assert!(pushed.is_file(), "podman push wrote nothing");

    // The report's image, from the recipe's Containerfile.
    let containerfile = snippet("k8s-report-image").body;
    let containerfile = swap(
        &containerfile,
        "registry.example.com/report-base:1.4",
        REPORT_BASE,
    );
    let containerfile = swap(
        &containerfile,
        "registry.example.com/redlock:0.1.0",
        &redlock_image,
    );
    let context = dir.path().join("report-image");
    std::fs::create_dir_all(&context).unwrap();
    std::fs::write(context.join("Containerfile"), containerfile).unwrap();
    let report_image = "localhost/report:test";
    podman.build(&context, report_image);

    let cronjob = yaml(&snippet("k8s-cronjob").body);
    let container = &cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "registry.example.com/report:1.4");
    let argv = strings(&container["command"]);
    let env: Vec<(String, String)> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|variable| {
            let name = variable["name"].as_str().unwrap().to_owned();
            match variable["value"].as_str() {
                Some(value) => {
                    assert!(value.starts_with("rediss://"), "{name}: {value}");
                    (name, server.url())
                }
                None => (name, PASSWORD.to_owned()),
            }
        })
        .collect();
    let env: Vec<(&str, &str)> = env
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let pod = |name: &str| {
        let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
        Started::new(
            podman.container(report_image, Some(name), Some(&argv[0]), &env, &args),
            name,
        )
    };
    let (started, go) = (podman.shared.join("started"), podman.shared.join("go"));

    let mut pods = [pod("cluster-a"), pod("cluster-b")];
    assert!(
        wait_until(Duration::from_secs(30), || started.exists()),
        "no report started"
    );
    assert!(
        wait_until(Duration::from_secs(30), || pods
            .iter_mut()
            .any(|pod| !pod.running())),
        "the second cluster's container did not end while the first held the lock"
    );
    std::fs::write(&go, "").unwrap();
    let outs = pods.map(|pod| pod.finish(Duration::from_secs(30)));
    for out in &outs {
        assert_code(out, 0, "a cluster's container");
    }
    let ran = outs
        .iter()
        .filter(|out| String::from_utf8_lossy(&out.stdout).contains("report ran"))
        .count();
    assert_eq!(ran, 1, "{}\n{}", show(&outs[0]), show(&outs[1]));
    let busy = outs
        .iter()
        .filter(|out| String::from_utf8_lossy(&out.stderr).contains("is busy: held by"))
        .count();
    assert_eq!(busy, 1, "{}\n{}", show(&outs[0]), show(&outs[1]));

    // Deleted: the container gets SIGTERM, as its first process, redlock; the report gets it.
    server.cmd::<String>(&["FLUSHALL"]);
    std::fs::remove_file(&started).unwrap();
    std::fs::remove_file(&go).unwrap();
    let deleted = pod("pod-deleted");
    assert!(
        wait_until(Duration::from_secs(30), || started.exists()),
        "the report did not start"
    );
    let mut kill = podman.command();
    kill.args(["kill", "--signal", "TERM", "pod-deleted"]);
    let kill = run_within(kill, "podman kill", Duration::from_secs(30));
    assert_code(&kill, 0, "podman kill");
    let out = deleted.finish(Duration::from_secs(30));
    assert_code(&out, 0, "the deleted pod");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("report got TERM"),
        "{}",
        show(&out)
    );

    // The check, in redlock's own image.
    server.cmd::<String>(&["FLUSHALL"]);
    let check = yaml(&snippet("k8s-check").body);
    let container = &check["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "registry.example.com/redlock:0.1.0");
    let argv = strings(&container["command"]);
    let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    let check_pod = || {
        run_within(
            podman.container(&redlock_image, None, Some(&argv[0]), &env, &args),
            "the check's container",
            Duration::from_secs(60),
        )
    };
    assert_code(&check_pod(), 83, "the check before any report");
    server
        .redlock(&["run", "--key", "nightly-report", "--", "true"])
        .env("REDLOCK_PASSWORD", PASSWORD)
        .run()
        .code(0);
    let ok = check_pod();
    assert_code(&ok, 0, "the check after the report");
    assert!(String::from_utf8_lossy(&ok.stdout).starts_with("nightly-report: OK: last success "));
}

// ---------------------------------------------------------------------------------------------
// Did it run? Checks and metrics

/// A crontab block's assignments (the URL swapped for the test server's) and its one entry's
/// command (after the schedule), redlock's path and the password file swapped.
fn crontab(block: &str, server: &RedisServer, password: &Path) -> (Vec<(String, String)>, String) {
    let mut environment: Vec<(String, String)> = vec![
        ("HOME".into(), "/".into()),
        ("SHELL".into(), "/bin/sh".into()),
        ("PATH".into(), "/usr/bin:/bin".into()),
    ];
    let mut entries = Vec::new();
    for line in block.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once('=') {
            Some((name, value)) if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                let value = if name == "REDLOCK_URL" {
                    swap(value, DOC_URL, &server.url())
                } else {
                    value.to_owned()
                };
                environment.push((name.to_owned(), value));
            }
            _ => entries.push(after_fields(line, 5).to_owned()),
        }
    }
    assert_eq!(entries.len(), 1, "one crontab entry");
    assert!(!entries[0].contains('%'), "cron turns % into a newline");
    let command = swap(&entries[0], DOC_REDLOCK, REDLOCK);
    let command = swap(&command, DOC_PASSWORD_FILE, &password.display().to_string());
    (environment, command)
}

/// A crontab entry as cron runs it: `sh -c`, a bare environment plus the crontab's own.
fn cron_command(environment: &[(String, String)], command: &str) -> Command {
    let mut sh = Command::new("/bin/sh");
    sh.args(["-c", command])
        .env_clear()
        .envs(environment.iter().map(|(name, value)| (name, value)));
    sh
}

/// Runs a crontab entry as cron would, and waits for it (20 s at most).
fn cron_tick(environment: &[(String, String)], command: &str, what: &str) -> Output {
    run_within(
        cron_command(environment, command),
        what,
        Duration::from_secs(20),
    )
}

/// The fleet's check line: before the report ever ran, one host (of two at the same tick)
/// prints why and the other nothing; after the report succeeded, nothing at all; after it
/// failed for a day, the line naming the failure.
#[test]
fn crontab_check_mails_once_and_only_when_the_report_has_not_succeeded() {
    let server = start_server();
    let dir = TempDir::new("recipe-crontab-check");
    let password = password_file(dir.path());
    let (environment, command) = crontab(&snippet("crontab-check").body, &server, &password);
    assert!(environment.iter().any(|(name, _)| name == "MAILTO"));
    let hosts = ["host1", "host2"]
        .map(|host| Started::new(cron_command(&environment, &command), host))
        .map(|host| host.finish(Duration::from_secs(20)));
    let mails: Vec<String> = hosts
        .iter()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .filter(|stdout| !stdout.is_empty())
        .collect();
    assert_eq!(mails.len(), 1, "one host checks: {hosts:?}");
    assert!(
        mails[0].starts_with("nightly-report: NO HISTORY"),
        "{}",
        mails[0]
    );
    for out in &hosts {
        assert!(out.stderr.is_empty(), "{}", show(out));
    }
    // An hour later (the check's --min-hold has passed): the report succeeded meanwhile.
    let next_hour = || {
        server.cmd::<()>(&[
            "DEL",
            "redlock:{nightly-report-check}:holders",
            "redlock:{nightly-report-check}:leases",
        ]);
    };
    server
        .redlock(&["run", "--key", "nightly-report", "--", "true"])
        .env("REDLOCK_PASSWORD", PASSWORD)
        .run()
        .code(0);
    next_hour();
    let quiet = cron_tick(&environment, &command, "the check after a success");
    assert_code(&quiet, 0, "the check after a success");
    assert_silent(&quiet, "the check after a success");
    // The success 30 hours old, and the report failed since: the line says so.
    server
        .redlock(&["run", "--key", "nightly-report", "--", "sh", "-c", "exit 1"])
        .env("REDLOCK_PASSWORD", PASSWORD)
        .run()
        .code(1);
    let success = server
        .redlock(&["history", "--key", "nightly-report", "--json"])
        .env("REDLOCK_PASSWORD", PASSWORD)
        .run()
        .json()[1]["fence"]
        .as_u64()
        .unwrap();
    age_by_30_hours(&server, "nightly-report", success);
    next_hour();
    let mail = cron_tick(&environment, &command, "the check after a failure");
    let text = String::from_utf8_lossy(&mail.stdout);
    assert!(
        text.starts_with("nightly-report: STALE: last success 1day 6h ago on ")
            && text.contains("none within 26h; latest: exit 1 on "),
        "{}",
        show(&mail)
    );
}

/// Moves the times of the history entry of `fence` 30 hours into the past, as if the hold
/// had ended then (the test cannot wait that long).
fn age_by_30_hours(server: &RedisServer, key: &str, fence: u64) {
    let history = format!("redlock:{{{key}}}:history");
    let fence = fence.to_string();
    let found: Vec<String> = server.cmd(&["ZRANGEBYSCORE", &history, &fence, &fence]);
    let mut entry: Value = serde_json::from_str(&found[0]).unwrap();
    for field in ["since", "exp", "ended"] {
        let at = entry[field].as_u64().unwrap();
        entry[field] = Value::from(at - 30 * 3_600_000);
    }
    server.cmd::<()>(&["ZREM", &history, &found[0]]);
    server.cmd::<()>(&["ZADD", &history, &fence, &entry.to_string()]);
}

/// The textfile line: the file node_exporter reads passes promtool and names the locks; a
/// failed run leaves the last complete file in place.
#[test]
fn node_exporter_textfile_is_replaced_whole() {
    let server = start_server();
    let dir = TempDir::new("recipe-textfile");
    let password = password_file(dir.path());
    let textfiles = dir.path().join("node-exporter");
    std::fs::create_dir_all(&textfiles).unwrap();
    let (environment, command) =
        crontab(&snippet("node-exporter-textfile").body, &server, &password);
    let command = swap(
        &command,
        "/var/lib/prometheus/node-exporter",
        &textfiles.display().to_string(),
    );
    server
        .redlock(&["run", "--key", "nightly-report", "--", "true"])
        .env("REDLOCK_PASSWORD", PASSWORD)
        .run()
        .code(0);
    let out = cron_tick(&environment, &command, "the metrics line");
    assert_code(&out, 0, "the metrics line");
    assert_silent(&out, "the metrics line");
    let mut files: Vec<String> = std::fs::read_dir(&textfiles)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["redlock.prom"], "the temporary file is gone");
    let prom = textfiles.join("redlock.prom");
    let written = std::fs::read_to_string(&prom).unwrap();
    assert!(
        written.contains("redlock_lock_last_success_timestamp_seconds{key=\"nightly-report\"} "),
        "{written}"
    );
    let checked = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&prom).unwrap())
        .output()
        .expect("promtool is needed (apt-get install prometheus; .ci/run does)");
    assert!(checked.status.success(), "promtool: {checked:?}");
    // Redis unreachable: redlock fails, the file node_exporter reads stays whole and as it was.
    drop(server);
    let failed = cron_tick(&environment, &command, "the metrics line, Redis down");
    assert_code(&failed, 69, "the metrics line, Redis down");
    assert_eq!(std::fs::read_to_string(&prom).unwrap(), written);
}

/// The checking CronJob's container: a failed Job (83) before the report ever ran, a
/// succeeded one after it did.
#[test]
fn k8s_check_fails_its_job_until_the_report_succeeded() {
    let server = start_server();
    let cronjob = yaml(&snippet("k8s-check").body);
    assert_eq!(cronjob["kind"], "CronJob");
    let pod = &cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    let container = &pod["containers"][0];
    let argv = strings(&container["command"]);
    assert_eq!(argv[0], DOC_REDLOCK);
    assert_eq!(argv[1], "check");
    let container_run = || {
        let mut command = Command::new(REDLOCK);
        command
            .args(&argv[1..])
            .env_clear()
            .env("PATH", "/usr/bin:/bin");
        for variable in container["env"].as_array().unwrap() {
            let name = variable["name"].as_str().unwrap();
            let value = match variable["value"].as_str() {
                Some(value) => swap(
                    value,
                    "rediss://redlock@redis.example.com:6380",
                    &server.url(),
                ),
                None => {
                    assert_eq!(variable["valueFrom"]["secretKeyRef"]["key"], "password");
                    PASSWORD.to_owned()
                }
            };
            command.env(name, value);
        }
        run_within(command, "the check's container", Duration::from_secs(20))
    };
    let failed = container_run();
    assert_code(&failed, 83, "the check before any report");
    assert!(String::from_utf8_lossy(&failed.stdout).starts_with("nightly-report: NO HISTORY"));
    server
        .redlock(&["run", "--key", "nightly-report", "--", "true"])
        .env("REDLOCK_PASSWORD", PASSWORD)
        .run()
        .code(0);
    let ok = container_run();
    assert_code(&ok, 0, "the check after the report");
    assert!(String::from_utf8_lossy(&ok.stdout).starts_with("nightly-report: OK: last success "));
}

// ---------------------------------------------------------------------------------------------
// Ansible and ssh

/// The playbook's tasks, by name.
fn ansible_task(name_starts: &str) -> Value {
    let playbook = yaml(&snippet("ansible-playbook").body);
    let tasks = playbook[0]["tasks"].as_array().unwrap();
    tasks
        .iter()
        .find(|task| task["name"].as_str().unwrap().starts_with(name_starts))
        .unwrap_or_else(|| panic!("no task {name_starts:?}"))
        .clone()
}

/// What the command module runs on a host: the task's argv (paths swapped) and environment.
fn ansible_command(task: &Value, server: &RedisServer, job_from: &str, job: &Path) -> Command {
    let argv = strings(&task["ansible.builtin.command"]["argv"]);
    assert_eq!(argv[0], DOC_REDLOCK);
    let mut command = Command::new(REDLOCK);
    for arg in &argv[1..] {
        if arg == job_from {
            command.arg(job);
        } else {
            command.arg(arg);
        }
    }
    assert!(argv.iter().any(|arg| arg == job_from), "{argv:?}");
    command.env_clear().env("PATH", "/usr/bin:/bin");
    let url = server.url();
    for (name, value) in task["environment"].as_object().unwrap() {
        let value = value.as_str().unwrap();
        let value = match value {
            "{{ redlock_url }}" => url.as_str(),
            "{{ redlock_password }}" => PASSWORD,
            other => panic!("unexpected variable {other}"),
        };
        command.env(name, value);
    }
    command
}

/// Five hosts run the once-per-group task together: one rebuilds (rc 0, "changed"), the
/// others get the code the task's failed_when accepts.
#[test]
fn ansible_task_runs_on_one_host_of_the_group() {
    let server = start_server();
    let dir = TempDir::new("recipe-ansible-once");
    let ran = dir.path().join("ran");
    let job = script(
        &dir.path().join("rebuild.sh"),
        &format!("echo ran >> {}\nsleep 0.5\n", ran.display()),
    );
    let task = ansible_task("Rebuild the shared cache");
    let argv = strings(&task["ansible.builtin.command"]["argv"]);
    let skip_code: i32 = flag_value(&argv, "-E").parse().unwrap();
    let register = task["register"].as_str().unwrap();
    assert_eq!(task["changed_when"], format!("{register}.rc == 0"));
    assert_eq!(
        task["failed_when"],
        format!("{register}.rc not in [0, {skip_code}]")
    );
    let hosts: Vec<Started> = (1..=5)
        .map(|host| {
            Started::new(
                ansible_command(&task, &server, "/opt/app/rebuild-cache.sh", &job),
                &format!("host {host}"),
            )
        })
        .collect();
    let mut codes: Vec<i32> = hosts
        .into_iter()
        .map(|host| {
            let out = host.finish(Duration::from_secs(10));
            assert_silent(&out, "the task (-q)");
            out.status.code().unwrap()
        })
        .collect();
    codes.sort_unstable();
    assert_eq!(codes, [0, skip_code, skip_code, skip_code, skip_code]);
    // A host of a later batch (forks), after the rebuild ended: --min-hold keeps it out.
    let late = Started::new(
        ansible_command(&task, &server, "/opt/app/rebuild-cache.sh", &job),
        "a host of a later batch",
    );
    assert_code(
        &late.finish(Duration::from_secs(10)),
        skip_code,
        "the late host",
    );
    assert_eq!(lines(&ran), ["ran"]);
}

/// Five hosts restart at once through the semaphore: never more than two at a time, and two
/// do run together.
#[test]
fn ansible_restarts_two_hosts_at_a_time() {
    let server = start_server();
    let dir = TempDir::new("recipe-ansible-limit");
    let log = dir.path().join("log");
    let job = script(
        &dir.path().join("restart.sh"),
        &format!(
            "start=$(date +%s%N)\nsleep 0.4\necho \"$start $(date +%s%N)\" >> {}\n",
            log.display()
        ),
    );
    let task = ansible_task("Restart the app");
    let hosts: Vec<Started> = (1..=5)
        .map(|host| {
            Started::new(
                ansible_command(&task, &server, "/opt/app/restart-and-check.sh", &job),
                &format!("host {host}"),
            )
        })
        .collect();
    for host in hosts {
        assert_code(&host.finish(Duration::from_secs(20)), 0, "a restart");
    }
    let intervals: Vec<(u128, u128)> = lines(&log)
        .iter()
        .map(|line| {
            let (start, end) = line.split_once(' ').unwrap();
            (start.parse().unwrap(), end.parse().unwrap())
        })
        .collect();
    assert_eq!(intervals.len(), 5);
    assert_eq!(most_at_once(&intervals), 2, "{intervals:?}");
}

/// The ssh loop, each "host" a local shell (ssh hands the line to the remote shell): one host
/// warms the cache; the loop run again within --min-hold warms nothing.
#[test]
fn ssh_fan_out_warms_the_cache_once() {
    let server = start_server();
    let dir = TempDir::new("recipe-ssh");
    let ran = dir.path().join("ran");
    let job = script(
        &dir.path().join("warm.sh"),
        &format!("echo ran >> {}\nsleep 0.3\n", ran.display()),
    );
    let password = password_file(dir.path());
    let body = snippet("ssh-fan-out").body;
    let body = swap(&body, "ssh \"$host\" ", "");
    let body = swap(&body, DOC_URL, &server.url());
    let body = swap(&body, DOC_REDLOCK, REDLOCK);
    let body = swap(&body, DOC_PASSWORD_FILE, &password.display().to_string());
    let body = swap(&body, "/opt/app/warm-cache.sh", &job.display().to_string());
    for round in ["first", "second"] {
        let mut sh = Command::new("sh");
        sh.args(["-ec", &body])
            .env_clear()
            .env("PATH", "/usr/bin:/bin");
        let out = run_within(sh, &format!("{round} fan-out"), Duration::from_secs(15));
        assert_code(&out, 0, round);
        assert_silent(&out, round);
    }
    assert_eq!(lines(&ran), ["ran"]);
}

#[test]
fn most_at_once_counts_overlaps() {
    assert_eq!(most_at_once(&[(0, 10), (5, 15), (10, 20)]), 2);
    assert_eq!(most_at_once(&[(0, 10), (10, 20)]), 1);
    assert_eq!(most_at_once(&[]), 0);
}
