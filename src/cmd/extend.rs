//! `redlock extend`: token-checked renewal that never re-creates a lost lock.

use super::{Context, named_lock};
use crate::acquire::Kept;
use crate::cli::ExtendArgs;
use crate::duration;
use crate::exit::{Done, Failure, fail};
use crate::lock::Replicas;
use crate::store::{OneRedisOnly, Renewal};

pub(super) fn run(context: &Context, args: &ExtendArgs) -> anyhow::Result<Done> {
    let name = named_lock(&args.lock)?;
    let lock = context.lock(name);
    let key = lock.name.as_str();
    if args.replicas.is_some() {
        context.store.refuse_in_quorum(OneRedisOnly::Replicas)?;
    }
    let replicas = args
        .replicas
        .map(|count| Replicas::within(count, context.command_timeout));
    let renewal = Renewal {
        token: &args.token,
        ttl: args.ttl,
        replicas,
        timeout: context.command_timeout,
    };
    let (extended, _) = context.store.extend(&lock, Kept::default(), &renewal)?;
    if extended {
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
