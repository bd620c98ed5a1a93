//! What a lock command asks for, checked: the lock's name (flag or word), the note (the CI job's
//! URL by default), the acquisition's `Ask`; and the error for a lock that stayed busy.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::Context as _;

use super::{Context, describe};
use crate::acquire::{Ask, Wait};
use crate::cli::{LockArgs, NameArgs};
use crate::duration;
use crate::exit::{Failure, fail};
use crate::keys::LockName;
use crate::lock::{Holder, Identity, Mode, Replicas, Retention, Token};
use crate::log::printable;
use crate::store::OneRedisOnly;

/// The lock's name, given with --key or as the first word (flock's, consul's and etcdctl's
/// habit): one of them, or both the same. Never a word after `--` (`after_dashes`): there
/// only `run` takes words, its command.
pub(super) fn named<'a>(
    flag: Option<&'a str>,
    word: Option<&'a str>,
    after_dashes: &[OsString],
) -> anyhow::Result<&'a str> {
    nothing_after_dashes(after_dashes)?;
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
            "no lock name: give it as the first word (redlock run NAME -- COMMAND, redlock inspect NAME) or with --key NAME",
        )),
    }
}

/// Refuses words after `--` in a command that runs no command: a lock's name is never taken
/// from there, whatever the command.
pub(super) fn nothing_after_dashes(after_dashes: &[OsString]) -> anyhow::Result<()> {
    if after_dashes.is_empty() {
        return Ok(());
    }
    Err(fail(
        Failure::Usage,
        format!(
            "{} after '--': a lock name is never taken from after '--', where only run takes words (its command); give the name before '--' or with --key NAME",
            quoted_words(after_dashes)
        ),
    ))
}

/// Words as a person would read them back: `'job'`, `'env echo hello'`.
pub(super) fn quoted_words(words: &[OsString]) -> String {
    let words: Vec<String> = words
        .iter()
        .map(|word| word.to_string_lossy().into_owned())
        .collect();
    format!("'{}'", printable(&words.join(" ")))
}

/// The lock named by `--key`, which every JSON log line names from now on.
/// The lock a command names (`NameArgs`): as the first word or as --key, once.
pub(super) fn named_lock(args: &NameArgs) -> anyhow::Result<LockName> {
    lock_name(named(
        args.key.as_deref(),
        args.name.as_deref(),
        &args.after_dashes,
    )?)
}

pub(super) fn lock_name(key: &str) -> anyhow::Result<LockName> {
    let name = LockName::new(key).context("--key")?;
    crate::log::set_key(name.as_str());
    Ok(name)
}

/// What `run` or `acquire` asks for: the mode flags, the wait, and re-entry when this process
/// runs under `run` of the same lock (REDLOCK_KEY names it, REDLOCK_TOKEN holds it) and
/// `--no-reenter` was not given.
pub(super) fn ask(
    context: &Context,
    args: &LockArgs,
    name: &LockName,
    ttl: Duration,
    command: &str,
) -> anyhow::Result<Ask> {
    if args.replicas.is_some() {
        context.store.refuse_in_quorum(OneRedisOnly::Replicas)?;
    }
    if args.limit.is_some() {
        context.store.refuse_in_quorum(OneRedisOnly::Limit)?;
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
        history: Retention {
            holds: args.history,
            ttl: args.history_ttl,
        },
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
pub(super) fn busy(key: &str, holder: Option<&Holder>, now: u64, wait: Wait) -> anyhow::Error {
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
