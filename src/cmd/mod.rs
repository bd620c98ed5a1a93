//! One module per subcommand, plus what they share: resolving the global options into a
//! [`Context`] (which Redis, which password, which prefix) and printing holders for people and
//! for JSON. Input is validated before any connection is made, so bad input never reaches Redis.

mod acquire;
mod completions;
mod extend;
mod inspect;
mod list;
mod release;
mod run;

use std::fmt::Display;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context as _;

use crate::cli::{Cli, Command, Global, LockArgs};
use crate::conn::{Session, Target};
use crate::duration;
use crate::exit::{Done, Failure, fail};
use crate::keys::{LockName, Prefix};
use crate::lock::{Holder, Identity, Mode, Token};
use crate::log::Log;
use crate::waiting::{Ask, Wait};

/// URL used when neither --redis, REDLOCK_URL nor REDIS_URL is set.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// Runs the parsed command line.
pub(crate) fn dispatch(cli: Cli) -> anyhow::Result<Done> {
    let Cli { global, command } = cli;
    if let Command::Completions(args) = command {
        return completions::run(&args);
    }
    let context = Context::new(global)?;
    match command {
        Command::Run(args) => run::run(&context, &args),
        Command::Acquire(args) => acquire::run(&context, &args),
        Command::Release(args) => release::run(&context, &args),
        Command::Extend(args) => extend::run(&context, &args),
        Command::Inspect(args) => inspect::run(&context, &args),
        Command::List(args) => list::run(&context, &args),
        Command::Completions(_) => unreachable!("handled above"),
    }
}

/// Global options, validated.
pub(crate) struct Context {
    target: Target,
    prefix: Prefix,
    command_timeout: Duration,
    log: Log,
}

impl Context {
    fn new(global: Global) -> anyhow::Result<Self> {
        let prefix = Prefix::new(&global.prefix)?;
        let url = global
            .redis
            .filter(|url| !url.is_empty())
            .or_else(|| {
                std::env::var("REDIS_URL")
                    .ok()
                    .filter(|url| !url.is_empty())
            })
            .unwrap_or_else(|| DEFAULT_URL.to_owned());
        let password = match &global.password_file {
            Some(path) => Some(read_password_file(path, global.quiet)?),
            None => std::env::var("REDLOCK_PASSWORD")
                .ok()
                .filter(|p| !p.is_empty()),
        };
        Ok(Self {
            target: Target::new(
                url,
                password,
                global.connect_timeout,
                global.command_timeout,
            ),
            prefix,
            command_timeout: global.command_timeout,
            log: Log {
                quiet: global.quiet,
                verbose: global.verbose > 0,
            },
        })
    }

    fn connect(&self) -> anyhow::Result<Session> {
        let session = self.target.connect()?;
        self.log
            .step(format_args!("connected to {}", session.server()));
        Ok(session)
    }
}

fn read_password_file(path: &Path, quiet: bool) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|err| fail(Failure::Usage, format!("--password-file {shown}: {err}")))?;
    let password = text.lines().next().unwrap_or_default().to_owned();
    if password.is_empty() {
        return Err(fail(
            Failure::Usage,
            format!("--password-file {shown}: the first line is empty"),
        ));
    }
    let mode = std::fs::metadata(path).map_or(0, |meta| meta.permissions().mode());
    if mode & 0o077 != 0 && !quiet {
        crate::log::line(format_args!(
            "warning: --password-file {shown} is readable by others (mode {:o}); run: chmod 600 {shown}",
            mode & 0o777
        ));
    }
    Ok(password)
}

/// Writes `text` and a newline to stdout, reporting a closed pipe as an error instead of panicking.
fn print_line(text: impl Display) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .context("writing to stdout")
}

/// Replaces control characters, so data read from Redis cannot drive the terminal.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn elapsed(from_ms: u64, to_ms: u64) -> Duration {
    Duration::from_millis(to_ms.saturating_sub(from_ms))
}

fn rfc3339(unix_ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(unix_ms)).to_string()
}

/// What `run` or `acquire` asks for: the mode flags, the wait, and re-entry when this process
/// runs under `run` of the same lock (REDLOCK_KEY names it, REDLOCK_TOKEN holds it) and
/// `--no-reenter` was not given.
fn ask(args: &LockArgs, name: &LockName, ttl: Duration, command: &str) -> Ask {
    let mode = match (args.shared, args.limit) {
        (_, Some(limit)) => Mode::Semaphore(limit),
        (true, None) => Mode::Shared,
        (false, None) => Mode::Exclusive,
    };
    let nested =
        !args.no_reenter && std::env::var("REDLOCK_KEY").ok().as_deref() == Some(name.as_str());
    Ask {
        ttl,
        mode,
        who: Identity::current(command),
        wait: args.wait,
        reenter: std::env::var("REDLOCK_TOKEN")
            .ok()
            .filter(|_| nested)
            .and_then(|token| Token::parse(&token).ok()),
        renews: false,
    }
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
    format!(
        "{} pid {} user {} command '{}' fence {}, held for {}, expires in {}",
        printable(&holder.who.host),
        holder.who.pid,
        printable(&holder.who.user),
        printable(&holder.who.command),
        holder.fence,
        duration::display(elapsed(holder.since, now)),
        duration::display(elapsed(now, holder.exp)),
    )
}

/// Formats rows as left-aligned columns two spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|row| row.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.pop();
    out
}
