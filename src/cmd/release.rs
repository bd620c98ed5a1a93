//! `redlock release`: token-checked release, or an audited forced one.

use std::time::Duration;

use super::{Context, describe, named_lock, print_line, warn_unreadable};
use crate::acquire::Kept;
use crate::cli::ReleaseArgs;
use crate::exit::{Done, Failure, fail};
use crate::lock::{Ending, Identity, Release, ReleaseRequest};
use crate::store::{Forced, ReleaseBound};

pub(super) fn run(context: &Context, args: &ReleaseArgs) -> anyhow::Result<Done> {
    let name = named_lock(&args.lock)?;
    let lock = context.lock(name);
    let key = lock.name.as_str();
    if args.force {
        // The history says who forced the lock, and why if they said.
        let me = Identity::current("release --force");
        let mut why = format!("by {}@{}", me.user, me.host);
        if let Some(reason) = &args.reason {
            why.push_str(&format!(": {reason}"));
        }
        let Forced {
            now,
            evicted,
            unreadable,
        } = context.store.force_release(&lock, &why, context.log)?;
        warn_unreadable(context, &unreadable);
        if evicted.is_empty() && unreadable.is_empty() {
            return Err(fail(
                Failure::NotHeld,
                format!("lock '{key}' was free; nothing to release"),
            ));
        }
        for holder in &evicted {
            print_line(format_args!(
                "released '{key}' by force, evicting {}",
                describe(holder, now)
            ))?;
        }
        return Ok(Done::Success);
    }
    let token = args
        .token
        .as_ref()
        .ok_or_else(|| fail(Failure::Usage, "--token or --force is required"))?;
    let ending = Ending {
        exit: args.exit_status,
        ..Ending::default()
    };
    let request = ReleaseRequest {
        token,
        min_hold: Duration::ZERO,
        ending: &ending,
    };
    let released = context.store.release(
        &lock,
        Kept::default(),
        &request,
        ReleaseBound::answer_within(context.command_timeout),
        context.log,
    )?;
    match released {
        Release::Released | Release::Kept(_) => {
            context.log.step(format_args!("released '{key}'"));
            Ok(Done::Success)
        }
        Release::StillHeld(holds) => {
            context.log.step(format_args!(
                "released one hold of '{key}'; {holds} left (re-entered by nested invocations)"
            ));
            Ok(Done::Success)
        }
        Release::NotHeld => Err(fail(
            Failure::NotHeld,
            format!(
                "lock '{key}' is not held by this token (expired, released, or taken by another holder); nothing changed"
            ),
        )),
    }
}
