//! `redlock extend`: token-checked renewal that never re-creates a lost lock.

use super::{Context, lock_name};
use crate::cli::ExtendArgs;
use crate::duration;
use crate::exit::{Done, Failure, fail};
use crate::lock::{Lock, Replicas};

pub(super) fn run(context: &Context, args: &ExtendArgs) -> anyhow::Result<Done> {
    let name = lock_name(&args.key)?;
    let mut session = context.connect()?;
    let lock = Lock::new(&context.prefix, name);
    let key = lock.name.as_str();
    let replicas = args
        .replicas
        .map(|count| Replicas::within(count, context.command_timeout));
    if lock.extend(&mut session, &args.token, args.ttl, replicas)? {
        context.log.step(format_args!(
            "extended '{key}' to {}",
            duration::display(args.ttl)
        ));
        Ok(Done::Success)
    } else {
        Err(fail(
            Failure::NotHeld,
            format!(
                "lock '{key}' is not held by this token (expired, released, or taken by another holder); not extended"
            ),
        ))
    }
}
