//! `redlock acquire`: take a lock (waiting in its queue with --wait) and print its token.

use std::time::Duration;

use serde::Serialize;

use super::{Context, ask, busy, print_line};
use crate::cli::AcquireArgs;
use crate::duration;
use crate::events::Events;
use crate::exit::Done;
use crate::keys::LockName;
use crate::lock::Lock;
use crate::waiting::{self, Outcome};

#[derive(Serialize)]
struct Acquired<'a> {
    key: &'a str,
    token: &'a str,
    fence: u64,
    ttl_ms: u128,
}

pub(super) fn run(context: &Context, args: &AcquireArgs) -> anyhow::Result<Done> {
    let name = LockName::new(&args.lock.key)?;
    let events = Events::listen()?;
    let session = context.connect()?;
    let lock = Lock::new(&context.prefix, name);
    let key = lock.name.as_str();
    let ask = ask(&args.lock, &lock.name, args.ttl, "acquire");
    let outcome = waiting::acquire(&events, session, &context.target, &lock, &ask, context.log)?;
    let (lease, mut session) = match outcome {
        Outcome::Busy { holder, now } => {
            return Err(busy(key, holder.as_ref(), now, args.lock.wait));
        }
        Outcome::Interrupted(signal) => return Ok(Done::Interrupted(signal)),
        Outcome::Acquired { lease, session, .. } => (lease, session),
    };
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
    // A signal that came with the grant: the caller is gone, so is the lock.
    if let Some(signal) = events.pending_signal() {
        lock.release(&mut session, &lease.token, Duration::ZERO)?;
        return Ok(Done::Interrupted(signal));
    }
    context.log.step(format_args!(
        "acquired '{key}' (fence {}, ttl {})",
        lease.fence,
        duration::display(lease.ttl)
    ));
    Ok(Done::Success)
}
