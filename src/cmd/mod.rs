//! One module per subcommand, plus what they share: resolving the global options into a
//! [`Context`] (which Redis, which password, which prefix) and printing holders for people and
//! for JSON. Input is validated before any connection is made, so bad input never reaches Redis.

mod acquire;
mod completions;
mod doctor;
mod extend;
mod history;
mod inspect;
mod keep_alive;
mod list;
mod man;
mod release;
mod run;

use std::fmt::Display;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context as _;

use crate::acquire::{Ask, Outcome, Wait};
use crate::cli::{Cli, Command, Global, LockArgs, TlsArgs};
use crate::conn::{Access, Session, Target, TlsOptions};
use crate::duration;
use crate::exit::{Done, Failure, Hint, fail};
use crate::files;
use crate::keys::{LockName, Prefix};
use crate::lock::{Holder, Identity, Lock, Mode, Replicas, Token, Unreadable};
use crate::log::{Log, cut_shown, printable, quoted, shown};
use crate::quorum::Quorum;
use crate::signals::Inherited;
use crate::signals::Signals;
use crate::store::Store;

/// URL used when neither --redis, REDLOCK_URL nor REDIS_URL is set.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// Runs the parsed command line.
pub(crate) fn dispatch(cli: Cli, inherited: Inherited) -> anyhow::Result<Done> {
    let Cli { global, command } = cli;
    match &command {
        Command::Completions(args) => return completions::run(args),
        Command::Man(args) => return man::run(args),
        _ => {}
    }
    let context = Context::new(global, inherited)?;
    match command {
        Command::Run(args) => run::run(&context, &args),
        Command::Acquire(args) => acquire::run(&context, &args),
        Command::Release(args) => release::run(&context, &args),
        Command::Extend(args) => extend::run(&context, &args),
        Command::Inspect(args) => inspect::run(&context, &args),
        Command::History(args) => history::run(&context, &args),
        Command::List(args) => list::run(&context, &args),
        Command::KeepAlive(args) => keep_alive::run(&context, &args),
        Command::Doctor(args) => doctor::run(&context, &args),
        Command::Completions(_) | Command::Man(_) => unreachable!("handled above"),
    }
}

/// Global options, validated.
pub(crate) struct Context {
    store: Store,
    prefix: Prefix,
    command_timeout: Duration,
    log: Log,
    inherited: Inherited,
    /// How to start another redlock that reaches the same Redis the same way (the keeper of
    /// `acquire --keep-alive`): arguments, and the environment that carries the URL and the
    /// passwords, which never go into arguments.
    relaunch: (Vec<std::ffi::OsString>, Vec<(String, String)>),
}

impl Context {
    fn new(global: Global, inherited: Inherited) -> anyhow::Result<Self> {
        let prefix = Prefix::new(&global.prefix).context("--prefix")?;
        let mut urls = given_urls(&global)?;
        // -q quiets expected outcomes, never a warning about the user's safety.
        let password_in_argv = password_in_argv(&urls);
        if urls.is_empty() {
            urls.push(match std::env::var_os("REDIS_URL") {
                None => DEFAULT_URL.to_owned(),
                Some(url) => url
                    .into_string()
                    .ok()
                    .filter(|url| !url.trim().is_empty())
                    .ok_or_else(|| empty_url("REDIS_URL"))?,
            });
        }
        if urls.len() > 1 {
            crate::quorum::check_count(urls.len())
                .map_err(|why| fail(Failure::Usage, format!("--redis: {why}")))?;
        }
        let sentinel_password = std::env::var("REDLOCK_SENTINEL_PASSWORD")
            .ok()
            .filter(|p| !p.is_empty());
        let url_password = urls.iter().any(|url| crate::conn::url_has_password(url));
        if global.password_file.is_some()
            || std::env::var_os("REDLOCK_PASSWORD").is_some_and(|p| !p.is_empty())
            || sentinel_password.is_some()
            || url_password
            || global.tls.tls_key.is_some()
        {
            keep_out_of_core_dumps();
        }
        let password = match &global.password_file {
            Some(path) => Some(read_password_file(path)?),
            None => std::env::var("REDLOCK_PASSWORD")
                .ok()
                .filter(|p| !p.is_empty()),
        };
        let relaunch = relaunch(&global, &urls.join(" "), password.as_deref());
        let access = Access {
            password,
            sentinel_password,
            tls: tls_options(&global.tls)?,
            connect_timeout: global.connect_timeout,
            command_timeout: global.command_timeout,
        };
        // A quorum may mix TLS and plaintext masters: the TLS options are for the TLS ones.
        let is_tls = |url: &str| url.starts_with("rediss");
        let mixed = urls.iter().any(|url| is_tls(url));
        let mut targets = Vec::with_capacity(urls.len());
        for url in &urls {
            let mut access = access.clone();
            if mixed && !is_tls(url) {
                access.tls = None;
            }
            targets.push(
                Target::new(url, access)
                    .with_context(|| format!("--redis {}", crate::conn::redact_url(url)))?,
            );
        }
        if password_in_argv {
            crate::log::warning(
                "--redis: a password in the URL is visible to every user in the process list; put it in REDLOCK_PASSWORD or a --password-file",
            );
        }
        let store = if targets.len() == 1 {
            Store::One(targets.remove(0))
        } else {
            Store::Quorum(Arc::new(Quorum::new(targets, global.command_timeout)))
        };
        Ok(Self {
            store,
            prefix,
            command_timeout: global.command_timeout,
            log: Log {
                quiet: global.quiet,
                verbose: global.verbose > 0,
            },
            inherited,
            relaunch,
        })
    }

    /// The one Redis, for a command that talks to one server; in quorum mode, the usage error
    /// naming `command`.
    fn target(&self, command: &str) -> anyhow::Result<&Target> {
        match &self.store {
            Store::One(target) => Ok(target),
            Store::Quorum(_) => Err(fail(
                Failure::Usage,
                format!(
                    "{command}: not available in quorum mode (several --redis); give one master's URL to read it there"
                ),
            )),
        }
    }

    fn connect_to(&self, target: &Target) -> anyhow::Result<Session> {
        let session = target.connect()?;
        self.log
            .step(format_args!("connected to {}", target.redacted()));
        Ok(session)
    }

    /// The lock named `name`; in quorum mode its releases tell the waiters.
    fn lock(&self, name: LockName) -> Lock {
        let lock = Lock::new(&self.prefix, name);
        match self.store {
            Store::One(_) => lock,
            Store::Quorum(_) => lock.notifying(),
        }
    }

    /// Takes the lock as `ask` says (`run`, `acquire`).
    fn take(&self, signals: &Signals, lock: &Lock, ask: &Ask) -> anyhow::Result<Outcome> {
        let taken = crate::acquire::take(signals, &self.store, lock, ask, self.log);
        // The scripts refuse a mode or limit that differs from the holders' ("the lock is a
        // semaphore of 2, not ...") knowing only keys: the line names the lock.
        taken.map_err(|err| {
            let mode_refused = crate::exit::failure_of(&err) == Some(Failure::Usage)
                && err.to_string().starts_with("the lock is ");
            if mode_refused {
                err.context(format!("lock '{}'", lock.name.as_str()))
            } else {
                err
            }
        })
    }
}

/// What the user can do about an error, in the terms of the command line.
pub(crate) fn hint_text(hint: Hint) -> &'static str {
    match hint {
        Hint::GivePassword => "set REDLOCK_PASSWORD or use --password-file",
        Hint::SentinelPassword => {
            "sentinels take their password from REDLOCK_SENTINEL_PASSWORD and their user from ?sentinel_user=NAME"
        }
        Hint::UseMaster => "point --redis at the master",
        // Scripts refuse foreign data before their first write.
        Hint::OtherName => "choose another --key or --prefix (nothing was changed)",
        Hint::UseTls => "use a rediss:// URL for TLS",
        Hint::TrustCa => "give the CA bundle that issued it with --tls-ca",
        Hint::ServerName => "give the name it carries with --tls-server-name",
        Hint::ClientCert => "give one with --tls-cert and --tls-key",
        Hint::ServerCertFromCa => {
            "give the server a certificate issued by that CA (the CA's own goes in --tls-ca)"
        }
    }
}

/// The arguments and environment that reach Redis as `global` does (see `Context::relaunch`).
fn relaunch(
    global: &Global,
    url: &str,
    password: Option<&str>,
) -> (Vec<std::ffi::OsString>, Vec<(String, String)>) {
    let mut args: Vec<std::ffi::OsString> = vec![
        "--prefix".into(),
        global.prefix.clone().into(),
        "--connect-timeout".into(),
        format!("{}ms", global.connect_timeout.as_millis()).into(),
        "--command-timeout".into(),
        format!("{}ms", global.command_timeout.as_millis()).into(),
    ];
    let tls = &global.tls;
    for (flag, path) in [
        ("--tls-ca", &tls.tls_ca),
        ("--tls-cert", &tls.tls_cert),
        ("--tls-key", &tls.tls_key),
    ] {
        if let Some(path) = path {
            args.extend([flag.into(), path.clone().into_os_string()]);
        }
    }
    if let Some(name) = &tls.tls_server_name {
        args.extend(["--tls-server-name".into(), name.into()]);
    }
    if tls.tls_insecure {
        args.push("--tls-insecure".into());
    }
    let mut env = vec![("REDLOCK_URL".to_owned(), url.to_owned())];
    if let Some(password) = password {
        env.push(("REDLOCK_PASSWORD".to_owned(), password.to_owned()));
    }
    (args, env)
}

/// The TLS options given, if any; warns about a key others can read, and loudly about
/// `--tls-insecure`.
fn tls_options(args: &TlsArgs) -> anyhow::Result<Option<TlsOptions>> {
    let options = TlsOptions {
        ca: args.tls_ca.clone(),
        cert: args.tls_cert.clone(),
        key: args.tls_key.clone(),
        server_name: args.tls_server_name.clone(),
        insecure: args.tls_insecure,
    };
    let given = options.ca.is_some()
        || options.cert.is_some()
        || options.server_name.is_some()
        || options.insecure;
    if !given {
        return Ok(None);
    }
    if let Some(key) = &options.key {
        warn_if_readable_by_others(key, "--tls-key")?;
    }
    if options.insecure {
        crate::log::warning(
            "--tls-insecure: the server's certificate is not verified; anyone on the path can pose as the server and read the password",
        );
    }
    Ok(Some(options))
}

/// The URLs of `--redis` or `REDLOCK_URL` (none: neither is set). An empty one is an error,
/// never the default: in CI an unset secret becomes an empty variable, and the default would
/// lock each runner's own Redis, excluding nothing.
fn given_urls(global: &Global) -> anyhow::Result<Vec<String>> {
    let source = if global.redis_from_env {
        "REDLOCK_URL"
    } else {
        "--redis"
    };
    if global.redis.iter().all(|url| url.trim().is_empty()) {
        return match global.redis.is_empty() {
            true => Ok(Vec::new()),
            false => Err(empty_url(source)),
        };
    }
    // Several URLs are separated by spaces; a space may also have cut a password in two.
    let urls: Vec<String> = global
        .redis
        .iter()
        .filter(|url| !url.trim().is_empty())
        .cloned()
        .collect();
    if urls
        .iter()
        .any(|url| !url.contains("://") && url.contains('@'))
    {
        return Err(fail(
            Failure::Usage,
            format!(
                "{source}: a URL without a scheme holds an '@'; URLs are separated by spaces, so write a space in a password as %20"
            ),
        ));
    }
    Ok(urls)
}

fn empty_url(source: &str) -> anyhow::Error {
    fail(
        Failure::Usage,
        format!(
            "{source} is set but empty; give a Redis URL, or unset it for the default {DEFAULT_URL}"
        ),
    )
}

/// Makes the process non-dumpable before a secret (a password, a TLS key) is read: a crash
/// then writes no core file holding it, and other processes of the same user cannot read its
/// memory (ptrace, /proc/PID/mem, environ). The command `run` starts, and the keeper, are
/// dumpable again after their exec (the keeper marks itself in turn).
fn keep_out_of_core_dumps() {
    // Failing is not a reason to refuse to work; it cannot fail on Linux.
    let _ = nix::sys::prctl::set_dumpable(false);
}

/// Whether a URL given on the command line (not through `REDLOCK_URL`) has a password: every
/// user of the host can read it in the process list, and redlock cannot take it back.
fn password_in_argv(urls: &[String]) -> bool {
    let from_env = std::env::var("REDLOCK_URL")
        .is_ok_and(|env| env.split_whitespace().eq(urls.iter().map(String::as_str)));
    !from_env && urls.iter().any(|url| crate::conn::url_has_password(url))
}

/// Warns when `path` (a secret) can be read by group or others; an unreadable file, or one
/// that is not a regular file, is an error.
fn warn_if_readable_by_others(path: &Path, flag: &str) -> anyhow::Result<()> {
    let opened = files::open_regular(path)
        .map_err(|why| fail(Failure::Usage, format!("{flag} {}: {why}", path.display())))?;
    warn_if_mode_open(opened.mode, path, flag);
    Ok(())
}

fn warn_if_mode_open(mode: u32, path: &Path, flag: &str) {
    let shown = path.display();
    if mode & 0o077 != 0 {
        crate::log::warning(format_args!(
            "{flag} {shown} is readable by others (mode {mode:o}); run: chmod 600 {shown}"
        ));
    }
}

/// The password: the first line of a regular file, of at most a few KiB.
fn read_password_file(path: &Path) -> anyhow::Result<String> {
    let shown = path.display();
    let refuse = |why: String| fail(Failure::Usage, format!("--password-file {shown}: {why}"));
    let opened = files::open_regular(path).map_err(refuse)?;
    let mode = opened.mode;
    let password = opened
        .first_line(files::MAX_PASSWORD_LINE)
        .map_err(refuse)?;
    if password.is_empty() {
        return Err(refuse("the first line is empty".to_owned()));
    }
    warn_if_mode_open(mode, path, "--password-file");
    Ok(password)
}

/// Writes `text` and a newline to stdout, each of its lines printable (whatever field data from
/// Redis came in, it cannot drive the terminal), reporting a closed pipe as an error (exit 74)
/// instead of panicking.
fn print_line(text: impl Display) -> anyhow::Result<()> {
    let text = text.to_string();
    let lines: Vec<String> = text.split('\n').map(printable).collect();
    write_stdout(&lines.join("\n"))
}

/// Writes JSON text and a newline to stdout, with bidirectional overrides escaped (serde_json
/// escapes control characters, not those).
fn print_json(json: &str) -> anyhow::Result<()> {
    write_stdout(&crate::log::json_text(json))
}

/// Writes `text` and a newline to stdout as it is.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .map_err(|err| fail(Failure::Output, format!("writing to stdout: {err}")))
}

fn elapsed(from_ms: u64, to_ms: u64) -> Duration {
    Duration::from_millis(to_ms.saturating_sub(from_ms))
}

fn rfc3339(unix_ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(unix_ms)).to_string()
}

/// The width tables are fitted to (0: not fitted), set by [`fit_tables_to_terminal`].
static FIT_WIDTH: AtomicUsize = AtomicUsize::new(0);

/// Columns cut to fit a terminal, widest first; the others are short by nature.
const CUTTABLE: [&str; 2] = ["COMMAND", "NOTE"];

/// The narrowest a cut column gets: enough to recognise a command.
const MIN_CUT_WIDTH: usize = 12;

/// Tables printed from now on fit the terminal on stdout, unless `wide` (--wide) or stdout is
/// not a terminal: a pipe or a file always gets every character.
fn fit_tables_to_terminal(wide: bool) {
    if !wide && let Some(width) = terminal_width() {
        FIT_WIDTH.store(width, Ordering::Relaxed);
    }
}

/// The columns of the terminal on stdout; `None` for anything else.
#[allow(unsafe_code)] // TIOCGWINSZ: std cannot ask a terminal its size.
fn terminal_width() -> Option<usize> {
    use std::io::IsTerminal as _;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    let mut size = nix::libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ on an open descriptor (stdout, a terminal) writes one `winsize` into
    // `size`, which outlives the call, and reads nothing else.
    let asked = unsafe { nix::libc::ioctl(1, nix::libc::TIOCGWINSZ, &raw mut size) };
    (asked == 0 && size.ws_col > 0).then(|| usize::from(size.ws_col))
}

/// Narrows the COMMAND and NOTE columns (the widest first, none below [`MIN_CUT_WIDTH`]) until
/// the rows fit `width`, cutting their cells with an ellipsis. `rows[0]` is the header.
fn fit_columns(rows: &mut [Vec<String>], widths: &mut [usize], width: usize) {
    let cuttable: Vec<usize> = rows.first().map_or_else(Vec::new, |header| {
        header
            .iter()
            .enumerate()
            .filter(|(_, name)| CUTTABLE.contains(&name.as_str()))
            .map(|(column, _)| column)
            .collect()
    });
    let total =
        |widths: &[usize]| widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
    // One column at a time, one character at a time: bounded by the columns' total width.
    let mut steps = widths.iter().sum::<usize>();
    while steps > 0 && total(widths) > width {
        steps -= 1;
        let Some(&widest) = cuttable
            .iter()
            .filter(|&&column| widths[column] > MIN_CUT_WIDTH)
            .max_by_key(|&&column| widths[column])
        else {
            break;
        };
        widths[widest] -= 1;
    }
    for &column in &cuttable {
        for row in rows.iter_mut().skip(1) {
            if let Some(cell) = row.get_mut(column) {
                *cell = cut_to(cell, widths[column]);
            }
        }
    }
}

/// The width output is fitted to, when it is (see [`fit_tables_to_terminal`]).
fn fit_width() -> Option<usize> {
    Some(FIT_WIDTH.load(Ordering::Relaxed)).filter(|width| *width > 0)
}

/// `text` in at most `width` characters (at least 1), its end replaced by an ellipsis if cut.
fn cut_to(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width.max(1) - 1).collect();
    cut.push('…');
    cut
}

/// The lock's name, given with --key or as the first word (flock's, consul's and etcdctl's
/// habit): one of them, or both the same.
fn named<'a>(flag: Option<&'a str>, word: Option<&'a str>) -> anyhow::Result<&'a str> {
    match (flag, word) {
        (Some(flag), Some(word)) if flag != word => Err(fail(
            Failure::Usage,
            format!(
                "lock name: given twice, as --key '{}' and as '{}'; give it once",
                printable(flag),
                printable(word)
            ),
        )),
        (Some(name), _) | (None, Some(name)) => Ok(name),
        (None, None) => Err(fail(
            Failure::Usage,
            "lock name: missing; give it first (redlock run NAME -- COMMAND) or with --key NAME",
        )),
    }
}

/// The lock named by `--key`, which every JSON log line names from now on.
fn lock_name(key: &str) -> anyhow::Result<LockName> {
    let name = LockName::new(key).context("--key")?;
    crate::log::set_key(name.as_str());
    Ok(name)
}

/// What `run` or `acquire` asks for: the mode flags, the wait, and re-entry when this process
/// runs under `run` of the same lock (REDLOCK_KEY names it, REDLOCK_TOKEN holds it) and
/// `--no-reenter` was not given.
fn ask(
    context: &Context,
    args: &LockArgs,
    name: &LockName,
    ttl: Duration,
    command: &str,
) -> anyhow::Result<Ask> {
    if let (Store::Quorum(_), Some(_)) = (&context.store, args.replicas) {
        return Err(fail(
            Failure::Usage,
            "--replicas: not in quorum mode (the majority of independent masters is the redundancy)",
        ));
    }
    if let (Store::Quorum(_), Some(_)) = (&context.store, args.limit) {
        return Err(fail(
            Failure::Usage,
            "--limit: not in quorum mode: with every master admitting N holders, N+1 holders can each win a majority",
        ));
    }
    let mode = match (args.shared, args.limit) {
        (_, Some(limit)) => Mode::Semaphore(limit),
        (true, None) => Mode::Shared,
        (false, None) => Mode::Exclusive,
    };
    let nested =
        !args.no_reenter && std::env::var("REDLOCK_KEY").ok().as_deref() == Some(name.as_str());
    let mut who = Identity::current(command);
    who.note = match &args.note {
        Some(note) => Some(checked_note(note)?),
        None => ci_job_url(),
    };
    Ok(Ask {
        ttl,
        mode,
        who,
        wait: args.wait,
        reenter: std::env::var("REDLOCK_TOKEN")
            .ok()
            .filter(|_| nested)
            .and_then(|token| Token::parse(&token).ok()),
        renews: false,
        progress_every: args.progress_every.0,
        replicas: args
            .replicas
            .map(|count| Replicas::within(count, context.command_timeout)),
    })
}

/// Longest `--note`, in bytes.
const MAX_NOTE: usize = 500;

/// `--note` as given, or the usage error saying why not.
fn checked_note(note: &str) -> anyhow::Result<String> {
    if note.len() > MAX_NOTE {
        return Err(fail(
            Failure::Usage,
            format!("--note: {} bytes long; the limit is {MAX_NOTE}", note.len()),
        ));
    }
    if note.chars().any(char::is_control) {
        return Err(fail(
            Failure::Usage,
            format!(
                "--note \"{}\": control characters are not allowed",
                note.escape_debug()
            ),
        ));
    }
    Ok(note.to_owned())
}

/// The URL of the CI job this runs in, from the variables GitHub Actions, GitLab CI, Jenkins
/// and Buildkite set; `None` outside CI (or when the value would not be a valid note).
fn ci_job_url() -> Option<String> {
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let github = || {
        Some(format!(
            "{}/{}/actions/runs/{}",
            var("GITHUB_SERVER_URL")?,
            var("GITHUB_REPOSITORY")?,
            var("GITHUB_RUN_ID")?
        ))
    };
    github()
        .or_else(|| var("CI_JOB_URL"))
        .or_else(|| var("BUILDKITE_BUILD_URL"))
        .or_else(|| var("BUILD_URL"))
        .filter(|url| checked_note(url).is_ok())
}

/// The error for a lock that stayed busy: names the holder, and the wait if there was one.
fn busy(key: &str, holder: Option<&Holder>, now: u64, wait: Wait) -> anyhow::Error {
    let who = match holder {
        None => "being handed to the next waiter".to_owned(),
        Some(holder) if holder.mode == "semaphore" => format!(
            "all {} permits are taken, e.g. by {}",
            holder.limit,
            describe(holder, now)
        ),
        Some(holder) if holder.granted => format!(
            "being handed over to {} (a grant not yet taken up)",
            describe(holder, now)
        ),
        Some(holder) => format!("held by {}", describe(holder, now)),
    };
    let message = match wait {
        Wait::UpTo(limit) => format!(
            "lock '{key}' is still busy after waiting {}: {who}",
            duration::display(limit)
        ),
        Wait::No | Wait::Forever => format!("lock '{key}' is busy: {who}"),
    };
    fail(Failure::Busy, message)
}

/// One line naming a holder, for busy notices and force-release audits.
fn describe(holder: &Holder, now: u64) -> String {
    let note = match &holder.who.note {
        Some(note) => format!(" note {}", quoted(&shown(note))),
        None => String::new(),
    };
    format!(
        "{} pid {} user {} command {}{note} fence {}, held for {}, expires in {}",
        shown(&holder.who.host),
        holder.who.pid,
        shown(&holder.who.user),
        quoted(&shown(&holder.who.command)),
        holder.fence,
        duration::display(elapsed(holder.since, now)),
        duration::display(elapsed(now, holder.exp)),
    )
}

/// Warns, once per record, of records left out because they cannot be read: the data is
/// someone else's doing, never a reason to fail.
fn warn_unreadable(context: &Context, unreadable: &[Unreadable]) {
    for record in unreadable {
        context.log.warn(format_args!(
            "skipping {} in {} that redlock cannot read ({})",
            record.what,
            shown(&record.key),
            shown(&record.why)
        ));
    }
}

/// Formats rows as left-aligned columns two spaces apart; a cell longer than
/// [`crate::log::MAX_SHOWN`] characters is cut.
fn table(rows: &[Vec<String>]) -> String {
    let mut rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| cut_shown(cell)).collect())
        .collect();
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|row| row.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let fit = FIT_WIDTH.load(Ordering::Relaxed);
    if fit > 0 {
        fit_columns(&mut rows, &mut widths, fit);
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if c + 1 < row.len() {
                // Padded by hand: a formatting width past 65,535 panics.
                let pad = widths[c] - cell.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.pop();
    out
}
