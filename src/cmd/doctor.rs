//! `redlock doctor`: what the Redis server does to the safety of redlock's locks, one line per
//! subject (or a JSON array), exit 1 when anything is unsafe.

use super::{Context, lock_name, print_json, print_line, wrapped};
use crate::cli::DoctorArgs;
use crate::conn::Target;
use crate::doctor::{self, Verdict};
use crate::exit::{Done, Failure};
use crate::lock::Lock;

pub(super) fn run(context: &Context, args: &DoctorArgs) -> anyhow::Result<Done> {
    super::fit_tables_to_terminal(false);
    // Any lock's keys will do: the ACL is checked on the prefix's key pattern.
    let lock = Lock::new(&context.prefix, lock_name("doctor")?);
    let mut ids: Vec<(String, String)> = Vec::new();
    let mut examined: Vec<(&Target, Vec<doctor::Finding>)> = Vec::new();
    let answers = context
        .store
        .examine(context.log, |session, target, in_quorum| {
            doctor::examine(session, target, &lock, in_quorum)
        })?;
    // Several servers (a quorum's masters): a header each, and each finding names its master.
    let several = answers.len() > 1;
    for (target, found) in answers {
        let findings = match found {
            Ok((mut findings, id)) => {
                if let Some(id) = id {
                    findings.extend(same_server(&ids, &id));
                    ids.push((id, target.redacted().to_owned()));
                }
                findings
            }
            // A master down, the quorum still working: a finding.
            Err(err) => vec![doctor::Finding {
                check: "reachable",
                verdict: Verdict::Warn,
                detail: format!(
                    "{err:#}: the quorum works while a majority answers, with one master fewer to lose"
                ),
            }],
        };
        examined.push((target, findings));
    }
    report(args, several, &examined)?;
    let findings: Vec<&doctor::Finding> = examined.iter().flat_map(|(_, f)| f).collect();
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

/// The finding for a quorum's master whose `run_id` is `id`, when a master examined before it
/// (in `ids`, with how it is shown) had the same: one server under two names, or as two
/// databases. Losing its data would lose two votes.
fn same_server(ids: &[(String, String)], id: &str) -> Option<doctor::Finding> {
    let (_, first) = ids.iter().find(|(other, _)| other == id)?;
    Some(doctor::Finding {
        check: "independent",
        verdict: Verdict::Unsafe,
        detail: format!(
            "the same server as master {first} (run_id {id}): a quorum's masters must be independent, or one server's lost data loses two votes"
        ),
    })
}

/// Prints the findings: lines under a header per master (`several`: a quorum's), or one JSON
/// array (each finding naming its master when there are several).
fn report(
    args: &DoctorArgs,
    several: bool,
    examined: &[(&Target, Vec<doctor::Finding>)],
) -> anyhow::Result<()> {
    if args.json {
        #[derive(serde::Serialize)]
        struct Shown<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            master: Option<&'a str>,
            #[serde(flatten)]
            finding: &'a doctor::Finding,
        }
        let shown: Vec<Shown<'_>> = examined
            .iter()
            .flat_map(|(target, findings)| {
                findings.iter().map(|finding| Shown {
                    master: several.then(|| target.redacted()),
                    finding,
                })
            })
            .collect();
        return print_json(&serde_json::to_string_pretty(&shown)?);
    }
    for (target, findings) in examined {
        if several {
            print_line(format_args!("master {}:", target.redacted()))?;
        }
        for finding in findings {
            // On a terminal the detail goes on under itself.
            let head = format!("{:<8} {:<12} ", finding.verdict.word(), finding.check);
            print_line(wrapped(&head, &finding.detail, head.chars().count()))?;
        }
    }
    Ok(())
}
