//! `redlock run`: take the lock, then hand over to the supervisor, which runs the command,
//! renews, forwards signals, self-fences on loss and releases at the end.

use std::ffi::OsString;
use std::time::Duration;

use super::{Context, ask, busy, lock_name};
use crate::acquire::{Ask, Outcome};
use crate::cli::RunArgs;
use crate::duration;
use crate::exit::{Done, Failure, fail};
use crate::lease::{MIN_TTL, Plan, Unfit};
use crate::log::printable;
use crate::signals::Signals;
use crate::supervise::{self, Job};

/// The lock's name and the command to run (`sh -c STRING` for -c). Without --key the name is
/// the first word, as flock, consul lock and etcdctl lock take theirs: `redlock run NAME --
/// COMMAND...` or `redlock run NAME -c STRING`.
fn name_and_argv(args: &RunArgs) -> anyhow::Result<(&str, Vec<OsString>)> {
    let mut script = args.shell_command.clone().map(OsString::from);
    let (name, command) = match args.lock.key.as_deref() {
        Some(key) => (key, args.command.as_slice()),
        None => {
            let Some((first, rest)) = args.command.split_first() else {
                return Err(fail(
                    Failure::Usage,
                    "lock name: missing; give it first (redlock run NAME -- COMMAND) or with --key NAME",
                ));
            };
            let name = first.to_str().ok_or_else(|| {
                fail(
                    Failure::Usage,
                    format!(
                        "lock name '{}': invalid UTF-8",
                        printable(&first.to_string_lossy())
                    ),
                )
            })?;
            // After the name, clap takes every word as the command's: a `--` it keeps, and
            // flock's `NAME -c STRING` arrives as words too.
            let rest = match rest {
                [dashes, rest @ ..] if dashes == "--" => rest,
                [flag, string]
                    if script.is_none() && (flag == "-c" || flag == "--shell-command") =>
                {
                    script = Some(string.clone());
                    &[]
                }
                // `run NAME --ttl 5s -- CMD`: clap took the options for the command's words.
                [option, ..] if option.to_string_lossy().starts_with('-') => {
                    return Err(fail(
                        Failure::Usage,
                        format!(
                            "lock '{}': {} comes after the lock's name, where the command starts; put options before the name (redlock run [OPTIONS] NAME -- COMMAND)",
                            printable(name),
                            printable(&option.to_string_lossy())
                        ),
                    ));
                }
                rest => rest,
            };
            (name, rest)
        }
    };
    match (script, command.is_empty()) {
        (Some(_), false) => Err(fail(
            Failure::Usage,
            format!(
                "-c and {}: give the command one way",
                printable(&command_line(command))
            ),
        )),
        (Some(script), true) => Ok((name, vec!["sh".into(), "-c".into(), script])),
        (None, true) => Err(fail(
            Failure::Usage,
            format!(
                "lock '{}': no command to run; give it after the name (redlock run NAME -- COMMAND) or with -c",
                printable(name)
            ),
        )),
        (None, false) => Ok((name, command.to_vec())),
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
    let ask = Ask {
        renews: ask.replicas.is_none(),
        ..ask
    };
    let held = match context.take(&signals, &lock, &ask)? {
        Outcome::Busy { holder, now } => {
            return Err(busy(&key, holder.as_ref(), now, args.lock.wait));
        }
        Outcome::Interrupted(signal) => return Ok(Done::Interrupted(signal)),
        Outcome::Acquired(held) => held,
    };
    crate::failpoint::hit("acquired");
    context.log.step(format_args!(
        "acquired lock '{key}' (fence {}, ttl {}, renewing every {})",
        held.lease.fence,
        duration::display(plan.ttl),
        duration::display(plan.renew_every)
    ));

    let remove_env = context
        .secret_variables
        .iter()
        .map(|&name| name.to_owned())
        .collect();
    let job = Job {
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
    };
    supervise::supervise(&signals, &context.store, &lock, held, &job, context.log)
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
    if shortened && args.kill_after.is_some() {
        context.log.warn(format_args!(
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
