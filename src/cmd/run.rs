//! `redlock run`: take the lock, then hand over to the supervisor, which runs the command,
//! renews, forwards signals, self-fences on loss and releases at the end.

use std::ffi::OsString;
use std::time::Duration;

use super::{Context, ask, busy};
use crate::cli::RunArgs;
use crate::conn::redact_url;
use crate::events::Events;
use crate::exit::{Done, Failure, fail};
use crate::keeper::Plan;
use crate::keys::LockName;
use crate::lock::Lock;
use crate::supervisor::{self, Job};
use crate::waiting::{self, Ask, Outcome};
use crate::{child, duration};

/// SIGTERM → SIGKILL grace when `--kill-after` is not given.
const DEFAULT_KILL_AFTER: Duration = Duration::from_secs(10);

pub(super) fn run(context: &Context, args: &RunArgs) -> anyhow::Result<Done> {
    let name = LockName::new(&args.lock.key)?;
    let (plan, warning) = Plan::new(
        args.ttl,
        args.renew_every,
        args.kill_after.unwrap_or(DEFAULT_KILL_AFTER),
        args.kill_after.is_some(),
        context.command_timeout,
    )
    .map_err(|why| fail(Failure::Usage, why))?;
    if let Some(warning) = warning {
        context.log.warn(warning);
    }
    let argv: Vec<OsString> = match &args.shell_command {
        Some(script) => vec!["sh".into(), "-c".into(), script.into()],
        None => args.command.clone(),
    };

    let events = Events::listen()?;
    let session = context.connect()?;
    let lock = Lock::new(&context.prefix, name);
    let key = lock.name.as_str();
    let ask = Ask {
        renews: true,
        ..ask(&args.lock, &lock.name, plan.ttl, &command_line(&argv))
    };
    let outcome = waiting::acquire(&events, session, &context.target, &lock, &ask, context.log)?;
    let (lease, confirmed, session) = match outcome {
        Outcome::Busy { holder, now } => {
            return Err(busy(key, holder.as_ref(), now, args.lock.wait));
        }
        Outcome::Interrupted(signal) => return Ok(Done::Interrupted(signal)),
        Outcome::Acquired {
            lease,
            confirmed,
            session,
        } => (lease, confirmed, session),
    };
    context.log.step(format_args!(
        "acquired lock '{key}' (fence {}, ttl {}, renewing every {})",
        lease.fence,
        duration::display(plan.ttl),
        duration::display(plan.renew_every)
    ));

    let mut remove_env = vec!["REDLOCK_PASSWORD".to_owned()];
    if std::env::var("REDLOCK_URL").is_ok_and(|url| redact_url(&url) != url) {
        remove_env.push("REDLOCK_URL".to_owned());
    }
    let job = Job {
        argv,
        set_env: vec![
            ("REDLOCK_KEY".into(), key.to_owned()),
            ("REDLOCK_TOKEN".into(), lease.token.as_str().to_owned()),
            ("REDLOCK_FENCE".into(), lease.fence.to_string()),
            ("REDLOCK_TTL_MS".into(), plan.ttl.as_millis().to_string()),
            ("REDLOCK_HELD".into(), "1".into()),
        ],
        remove_env,
        plan,
        max_runtime: args.max_runtime,
        min_hold: args.min_hold.unwrap_or_default(),
        foreground: child::owns_terminal(),
    };
    supervisor::supervise(
        events,
        session,
        &context.target,
        &lock,
        &lease,
        confirmed,
        &job,
        context.log,
    )
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
