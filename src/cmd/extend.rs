//! `redlock extend`: token-checked renewal that never re-creates a lost lock.

use super::Context;
use crate::cli::ExtendArgs;
use crate::duration;
use crate::exit::{Done, Failure, fail};
use crate::keys::LockName;
use crate::lock::Lock;

pub(super) fn run(context: &Context, args: &ExtendArgs) -> anyhow::Result<Done> {
    let name = LockName::new(&args.key)?;
    let mut session = context.connect()?;
    let lock = Lock::new(&context.prefix, name);
    let key = lock.name.as_str();
    if lock.extend(&mut session, &args.token, args.ttl)? {
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
