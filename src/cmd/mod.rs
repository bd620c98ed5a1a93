//! One module per subcommand, plus what they share: resolving the global options into a
//! [`Context`] (which Redis, which password, which prefix) and printing holders for people and
//! for JSON. Input is validated before any connection is made, so bad input never reaches Redis.

mod acquire;
mod check;
mod completions;
mod doctor;
mod extend;
mod history;
mod inspect;
mod keep_alive;
mod list;
mod man;
mod metrics;
mod release;
mod run;

mod config;
mod output;
pub(crate) use output::STDOUT_CLOSED_ERROR;
mod request;
mod views;

use std::time::Duration;

use crate::acquire::{Ask, Held, Outcome, Wait};
use crate::cli::{Cli, Command};
use crate::exit::{Done, Hint, Refusal, refusal_of};
use crate::keys::{LockName, Prefix};
use crate::lock::{Holder, Lock};
use crate::log::Log;
use crate::signals::{Inherited, Signals};
use crate::store::Store;

use crate::log::{printable, shown};
use output::{
    MIN_CUT_WIDTH, cut_to, describe, elapsed, fit_tables_to_terminal, fit_width, host_and_pid,
    narrow, narrow_table, print_json, print_line, rfc3339, table, warn_unread_locks,
    warn_unreadable, wrapped, write_stdout,
};
use request::{ask, busy, lock_name, named, named_lock};

/// Runs the parsed command line.
pub(crate) fn dispatch(cli: Cli, inherited: Inherited) -> anyhow::Result<Done> {
    let Cli { global, command } = cli;
    output::note_stdout_closed(inherited.stdout_closed());
    match &command {
        Command::Completions(args) => return completions::run(args),
        Command::Man(args) => return man::run(args),
        // Redis is none of its business: no global option is resolved.
        Command::PidNamespaceInit(args) => {
            return crate::supervise::pid_namespace_init(args, inherited);
        }
        _ => {}
    }
    let context = Context::new(global, inherited);
    // `check --nagios` words even these errors as the plugin's UNKNOWN line.
    if let Command::Check(args) = &command {
        return check::run(context, args);
    }
    let context = context?;
    match command {
        Command::Run(args) => run::run(&context, &args),
        Command::Acquire(args) => acquire::run(&context, &args),
        Command::Release(args) => release::run(&context, &args),
        Command::Extend(args) => extend::run(&context, &args),
        Command::Inspect(args) => inspect::run(&context, &args),
        Command::History(args) => history::run(&context, &args),
        Command::List(args) => list::run(&context, &args),
        Command::Metrics(args) => metrics::run(&context, &args),
        Command::KeepAlive(args) => keep_alive::run(&context, &args),
        Command::Doctor(args) => doctor::run(&context, &args),
        Command::Completions(_)
        | Command::Man(_)
        | Command::Check(_)
        | Command::PidNamespaceInit(_) => {
            unreachable!("handled above")
        }
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
    /// The environment variables that hold a secret redlock read, or one of its own: never
    /// passed on to the command `run` starts.
    secret_variables: Vec<&'static str>,
}

impl Context {
    /// The lock named `name`, on the store.
    fn lock(&self, name: LockName) -> Lock {
        self.store.lock(&self.prefix, name)
    }

    /// Takes the lock as `ask` says (`run`, `acquire`): the lock held, or how redlock ends
    /// (a signal while waiting). Busy (not waiting, or the wait over) is the busy error, naming
    /// who holds it and the `--wait` given (`run` queues again with what is left of it);
    /// `on_busy` hears of it first (a script that asked for JSON reads it whatever happened).
    fn take(
        &self,
        signals: &Signals,
        lock: &Lock,
        ask: &Ask,
        given: Wait,
        on_busy: impl FnOnce(Option<&Holder>, u64),
    ) -> anyhow::Result<Result<Held, Done>> {
        let taken = self
            .store
            .take(signals, lock, ask, self.log)
            .map_err(|err| {
                // The scripts refuse a mode or limit that differs from the holders' ("the lock is
                // a semaphore of 2, not ...") knowing only keys: the line names the lock.
                if refusal_of(&err) == Some(Refusal::OtherMode) {
                    err.context(format!("lock '{}'", lock.name.as_str()))
                } else {
                    err
                }
            })?;
        match taken {
            Outcome::Acquired(held) => Ok(Ok(held)),
            Outcome::Interrupted(signal) => Ok(Err(Done::Interrupted(signal))),
            Outcome::Busy { holder, now } => {
                on_busy(holder.as_ref(), now);
                let key = printable(lock.name.as_str());
                Err(busy(&key, holder.as_ref(), now, given))
            }
        }
    }
}

/// `check --nagios` given a command line that does not parse: the plugin's UNKNOWN line on
/// stdout (the monitoring system shows it; the exit code says UNKNOWN too).
pub(crate) fn print_plugin_unknown(why: &str) {
    let _ = check::print_unknown(why);
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
