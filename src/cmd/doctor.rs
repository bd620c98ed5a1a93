//! `redlock doctor`: what the Redis server does to the safety of redlock's locks, one line per
//! subject (or a JSON array), exit 1 when anything is unsafe.

use super::{Context, lock_name, print_json, print_line};
use crate::cli::DoctorArgs;
use crate::conn::Target;
use crate::doctor::{self, Verdict};
use crate::exit::{Done, Failure};
use crate::lock::Lock;

pub(super) fn run(context: &Context, args: &DoctorArgs) -> anyhow::Result<Done> {
    let targets = context.store.servers();
    let mut findings = Vec::new();
    for target in &targets {
        if targets.len() > 1 && !args.json {
            print_line(format_args!("master {}:", target.redacted()))?;
        }
        findings.extend(examine(context, args, target, targets.len() > 1)?);
    }
    let found = |verdict: Verdict, subjects: &[&str]| {
        findings.iter().any(|finding| {
            finding.verdict == verdict && (subjects.is_empty() || subjects.contains(&finding.check))
        })
    };
    Ok(if found(Verdict::Unsafe, &[]) {
        Done::Reported(Failure::Unsafe)
    } else if found(Verdict::Unknown, &doctor::SAFETY_SUBJECTS) {
        Done::Reported(Failure::Unchecked)
    } else {
        Done::Success
    })
}

/// Prints what one server does to the safety of locks, and returns the findings.
/// `quorum`: `target` is one of a quorum's masters.
fn examine(
    context: &Context,
    args: &DoctorArgs,
    target: &Target,
    quorum: bool,
) -> anyhow::Result<Vec<doctor::Finding>> {
    let mut session = crate::store::connect(target, context.log)?;
    // Any lock's keys will do: the ACL is checked on the prefix's key pattern.
    let lock = Lock::new(&context.prefix, lock_name("doctor")?);
    let findings = doctor::examine(&mut session, &lock, quorum)?;
    if args.json {
        print_json(&serde_json::to_string_pretty(&findings)?)?;
    } else {
        for finding in &findings {
            print_line(format_args!(
                "{:<8} {:<12} {}",
                finding.verdict.word(),
                finding.check,
                finding.detail
            ))?;
        }
    }
    Ok(findings)
}
