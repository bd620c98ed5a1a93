//! `redlock run`: take the lock, then hand over to the supervisor, which runs the command,
//! renews, forwards signals, self-fences on loss and releases at the end. A lock taken too late
//! to start the command on (redlock stalled after the grant) is given back and, while the wait
//! lasts, taken again.

use std::ffi::OsString;
use std::time::Duration;

use super::request::quoted_words;
use super::{Context, ask, lock_name, named};
use crate::acquire::{Ask, Held, Wait};
use crate::cli::RunArgs;
use crate::duration;
use crate::exit::{Done, Failure, fail};
use crate::lease::{MIN_TTL, Plan, Unfit};
use crate::lock::Lock;
use crate::log::printable;
use crate::signals::Signals;
use crate::supervise::{self, Job, Supervised, TooLate};

/// The lock's name and the command to run (`sh -c STRING` for -c). The name is `--key NAME` or
/// the word before the command, as flock, consul lock and etcdctl lock take theirs: `redlock
/// run NAME -- COMMAND...`, `redlock run NAME COMMAND...` or `redlock run NAME -c STRING`.
/// After `--` every word is the command's, never the name: a forgotten `--key` in `redlock run
/// -- env echo hello` must not lock `env` and run `echo hello`.
fn name_and_argv(args: &RunArgs) -> anyhow::Result<(&str, Vec<OsString>)> {
    let word = args.name.as_ref();
    // clap gives the words after `--` to `command`, and without `--` the first word to NAME
    // and the rest to the flock form's words. (`run --key K COMMAND...` without `--` arrives
    // with a `--` put before the command: see `cli::command_after_key`.)
    let (name_word, command) = if args.command.is_empty() {
        if let Some(option) = args
            .words
            .first()
            .filter(|first| first.to_string_lossy().starts_with('-'))
        {
            return Err(fail(
                Failure::Usage,
                format!(
                    "unknown option {} (see 'redlock run --help'); the command starts at the first word that is not an option, or after '--'",
                    quoted_words(std::slice::from_ref(option))
                ),
            ));
        }
        (word, args.words.clone())
    } else {
        (word, args.command.clone())
    };
    let name_word = name_word
        .map(|word| {
            word.to_str().ok_or_else(|| {
                fail(
                    Failure::Usage,
                    format!(
                        "lock name '{}': invalid UTF-8",
                        printable(&word.to_string_lossy())
                    ),
                )
            })
        })
        .transpose()?;
    let name = match (args.lock.key.as_deref(), name_word) {
        (None, None) if !args.command.is_empty() => {
            return Err(fail(
                Failure::Usage,
                format!(
                    "no lock name: after '--' comes the command ({}), never the lock's name; give the name before '--' (redlock run NAME -- COMMAND) or with --key NAME",
                    quoted_words(&args.command)
                ),
            ));
        }
        (flag, word) => named(flag, word, &[])?,
    };
    match (&args.shell_command, command.is_empty()) {
        (Some(_), false) => Err(fail(
            Failure::Usage,
            format!(
                "-c and {}: give the command one way",
                printable(&command_line(&command))
            ),
        )),
        (Some(script), true) => Ok((name, vec!["sh".into(), "-c".into(), script.into()])),
        (None, true) => Err(fail(
            Failure::Usage,
            format!(
                "lock '{}': no command to run; give it after '--' (redlock run NAME -- COMMAND) or with -c",
                printable(name)
            ),
        )),
        (None, false) => Ok((name, command)),
    }
}

/// SIGTERM → SIGKILL grace when `--kill-after` is not given.
const DEFAULT_KILL_AFTER: Duration = Duration::from_secs(10);

pub(super) fn run(context: &Context, args: &RunArgs) -> anyhow::Result<Done> {
    let (name, argv) = name_and_argv(args)?;
    let name = lock_name(name)?;
    let plan = plan(context, args)?;

    let signals = Signals::block(context.inherited)?;
    let lock = context.lock(name);
    let key = printable(lock.name.as_str());
    let ask = ask(
        context,
        &args.lock,
        &lock.name,
        plan.ttl,
        &if args.hide_arguments {
            recorded_program(&argv)
        } else {
            command_line(&argv)
        },
    )?;
    // A lock handed over is taken on its grant, unless replicas must acknowledge it: then the
    // script call that claims it is followed by WAIT.
    let mut ask = Ask {
        renews: ask.replicas.is_none(),
        ..ask
    };
    let wait_ends = ask.wait.deadline();
    loop {
        let held = match context.take(&signals, &lock, &ask, args.lock.wait, |_, _| {})? {
            Ok(held) => held,
            Err(done) => return Ok(done),
        };
        crate::failpoint::hit("acquired");
        context.log.step(format_args!(
            "acquired lock '{key}' (fence {}, ttl {}, renewing every {})",
            held.lease.fence,
            duration::display(plan.ttl),
            duration::display(plan.renew_every)
        ));
        let job = job(context, args, &lock, &held, plan, argv.clone());
        let late =
            match supervise::supervise(&signals, &context.store, &lock, held, &job, context.log)? {
                Supervised::Done(done) => return Ok(done),
                Supervised::TooLate(late) => late,
            };
        ask.wait = match (ask.wait, wait_ends) {
            (Wait::Forever, _) => Wait::Forever,
            (Wait::UpTo(_), Some(ends)) if !ends.remaining().is_zero() => {
                Wait::UpTo(ends.remaining())
            }
            _ => return Err(too_late(&key, late)),
        };
        context.log.notice(format_args!(
            "lock '{key}' was granted too late to start the command safely ({}); released; queueing again{}",
            stalled(late),
            match ask.wait {
                Wait::UpTo(left) => format!(" ({} of --wait left)", duration::display(left)),
                Wait::No | Wait::Forever => String::new(),
            }
        ));
    }
}

/// Who kept the command from starting on a lease too near its end, for a message.
fn stalled(late: TooLate) -> String {
    if late.answered_late {
        "Redis answered late".to_owned()
    } else {
        format!(
            "redlock was held up for {} after the answer",
            duration::display(late.since_answer)
        )
    }
}

/// The error for a lease too near its end to start the command on, with no wait left: Redis
/// unavailable (69) when it answered too late, else busy (75): the command could not run
/// under the lock within the wait asked for, though Redis is fine.
fn too_late(key: &str, late: TooLate) -> anyhow::Error {
    let failure = if late.answered_late {
        Failure::Unavailable
    } else {
        Failure::Busy
    };
    fail(
        failure,
        format!(
            "lock '{key}' was granted too late to start the command safely ({}); released, and no --wait time is left to queue again",
            stalled(late)
        ),
    )
}

/// What to run under the lock just `held`.
fn job(
    context: &Context,
    args: &RunArgs,
    lock: &Lock,
    held: &Held,
    plan: Plan,
    argv: Vec<OsString>,
) -> Job {
    // Every variable redlock read a secret from (see config.rs).
    let remove_env = context
        .secret_variables
        .iter()
        .map(|&name| name.to_owned())
        .collect();
    Job {
        argv,
        set_env: vec![
            ("REDLOCK_KEY".into(), lock.name.as_str().to_owned()),
            ("REDLOCK_TOKEN".into(), held.lease.token.as_str().to_owned()),
            ("REDLOCK_FENCE".into(), held.lease.fence.to_string()),
            ("REDLOCK_TTL_MS".into(), plan.ttl.as_millis().to_string()),
            ("REDLOCK_HELD".into(), "1".into()),
        ],
        remove_env,
        plan,
        max_runtime: args.max_runtime,
        min_hold: args.min_hold.unwrap_or_default(),
        foreground: supervise::owns_terminal(),
        replicas: args.lock.replicas,
        closed: context.inherited.closed,
        pid_namespace: args.pid_namespace,
    }
}

/// The timing plan for the flags given, or the usage error naming them.
fn plan(context: &Context, args: &RunArgs) -> anyhow::Result<Plan> {
    let kill_after = args.kill_after.unwrap_or(DEFAULT_KILL_AFTER);
    let (plan, shortened) = Plan::new(
        args.ttl,
        args.renew_every,
        kill_after,
        context.command_timeout,
    )
    .map_err(|unfit| {
        let ttl = duration::display(args.ttl);
        fail(
            Failure::Usage,
            match unfit {
                Unfit::LeaseTooShort => format!(
                    "--ttl {ttl}: must be at least {} for run (renewals and the kill schedule must fit in the lease)",
                    duration::display(MIN_TTL)
                ),
                Unfit::RenewalsTooFarApart { at_most } => format!(
                    "--renew-every {} is too long for --ttl {ttl}: renew at most every {}",
                    duration::display(args.renew_every.unwrap_or_default()),
                    duration::display(at_most)
                ),
            },
        )
    })?;
    // The rule is documented (--kill-after's help, docs/reference.md) and applies to the
    // default grace as well: a warning on every run of a well-set job (a systemd unit or a
    // CronJob giving its command a long grace for a stop) would be journal noise. -v says it.
    if shortened {
        context.log.step(format_args!(
            "--kill-after {} shortened to {} when the lock is lost, so the command is dead before the {} lease can lapse",
            duration::display(kill_after),
            duration::display(plan.loss_grace),
            duration::display(plan.ttl)
        ));
    }
    Ok(plan)
}

/// The program alone, for `--hide-arguments`: `psql …` (an ellipsis when there were arguments).
fn recorded_program(argv: &[OsString]) -> String {
    let program = command_line(&argv[..1.min(argv.len())]);
    if argv.len() > 1 {
        format!("{program} …")
    } else {
        program
    }
}

/// The command as a person would type it, for `inspect`.
fn command_line(argv: &[OsString]) -> String {
    argv.iter()
        .map(|arg| {
            let arg = arg.to_string_lossy();
            if !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
            {
                arg.into_owned()
            } else {
                format!("'{}'", arg.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
