//! `redlock acquire`: take a lock and print its token, or exit busy at once.

use std::time::Duration;

use serde::Serialize;

use super::{Context, describe, print_line};
use crate::cli::AcquireArgs;
use crate::duration;
use crate::exit::{Done, Failure, fail};
use crate::keys::LockName;
use crate::lock::{Acquisition, Identity, Lock};

#[derive(Serialize)]
struct Acquired<'a> {
    key: &'a str,
    token: &'a str,
    fence: u64,
    ttl_ms: u128,
}

pub(super) fn run(context: &Context, args: &AcquireArgs) -> anyhow::Result<Done> {
    let name = LockName::new(&args.key)?;
    let mut session = context.connect()?;
    let lock = Lock::new(&context.prefix, name);
    let key = lock.name.as_str();
    match lock.acquire(&mut session, args.ttl, &Identity::current("acquire"))? {
        Acquisition::Busy { holder, now } => Err(fail(
            Failure::Busy,
            format!("lock '{key}' is busy: held by {}", describe(&holder, now)),
        )),
        Acquisition::Acquired(lease) => {
            let output = if args.json {
                serde_json::to_string(&Acquired {
                    key,
                    token: lease.token.as_str(),
                    fence: lease.fence,
                    ttl_ms: lease.ttl.as_millis(),
                })?
            } else {
                lease.token.as_str().to_owned()
            };
            // A token nobody can read is a lock nobody can release: give it back.
            if let Err(err) = print_line(output) {
                lock.release(&mut session, &lease.token, Duration::ZERO)?;
                return Err(err.context(format!("lock '{key}' released again")));
            }
            context.log.step(format_args!(
                "acquired '{key}' (fence {}, ttl {})",
                lease.fence,
                duration::display(lease.ttl)
            ));
            Ok(Done::Success)
        }
    }
}
