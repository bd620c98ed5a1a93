//! `redlock doctor`: what the Redis server does to the safety of redlock's locks, one line per
//! subject (or a JSON array), exit 1 when anything is unsafe.

use super::{Context, lock_name, print_line};
use crate::cli::DoctorArgs;
use crate::doctor::{self, Verdict};
use crate::exit::{Done, Failure};
use crate::lock::Lock;

pub(super) fn run(context: &Context, args: &DoctorArgs) -> anyhow::Result<Done> {
    let mut session = context.connect()?;
    // Any lock's keys will do: the ACL is checked on the prefix's key pattern.
    let lock = Lock::new(&context.prefix, lock_name("doctor")?);
    let findings = doctor::examine(&mut session, &lock);
    if args.json {
        print_line(serde_json::to_string_pretty(&findings)?)?;
    } else {
        for finding in &findings {
            let verdict = match finding.verdict {
                Verdict::Ok => "ok",
                Verdict::Warn => "warning",
                Verdict::Unsafe => "UNSAFE",
                Verdict::Unknown => "unknown",
            };
            print_line(format_args!(
                "{verdict:<8} {:<12} {}",
                finding.check, finding.detail
            ))?;
        }
    }
    Ok(
        if findings
            .iter()
            .any(|finding| finding.verdict == Verdict::Unsafe)
        {
            Done::Reported(Failure::Unsafe)
        } else {
            Done::Success
        },
    )
}
