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
    let targets = context.store.servers();
    let quorum = targets.len() > 1;
    // Any lock's keys will do: the ACL is checked on the prefix's key pattern.
    let lock = Lock::new(&context.prefix, lock_name("doctor")?);
    let mut examined: Vec<(&Target, Vec<doctor::Finding>)> = Vec::new();
    let mut ids: Vec<(String, String)> = Vec::new();
    let mut unreachable = Vec::new();
    for target in &targets {
        let found = crate::store::connect(target, context.log)
            .and_then(|mut session| doctor::examine(&mut session, target, &lock, quorum));
        let findings = match found {
            Ok((mut findings, id)) => {
                if let Some(id) = id {
                    findings.extend(same_server(&ids, &id));
                    ids.push((id, target.redacted().to_owned()));
                }
                findings
            }
            // A quorum works while a majority answers: one master down is a finding.
            Err(err) if quorum && crate::store::transient(&err) => {
                let detail = format!(
                    "{err:#}: the quorum works while a majority answers, with one master fewer to lose"
                );
                unreachable.push(err);
                vec![doctor::Finding {
                    check: "reachable",
                    verdict: Verdict::Warn,
                    detail,
                }]
            }
            Err(err) => return Err(err),
        };
        examined.push((target, findings));
    }
    let answered = targets.len() - unreachable.len();
    if quorum && answered <= targets.len() / 2 {
        let first = unreachable.remove(0);
        return Err(first.context(format!(
            "only {answered} of {} masters answered",
            targets.len()
        )));
    }
    report(args, quorum, &examined)?;
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

/// Prints the findings: lines under a header per master (in quorum mode), or one JSON array
/// (each finding naming its master in quorum mode).
fn report(
    args: &DoctorArgs,
    quorum: bool,
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
                    master: quorum.then(|| target.redacted()),
                    finding,
                })
            })
            .collect();
        return print_json(&serde_json::to_string_pretty(&shown)?);
    }
    for (target, findings) in examined {
        if quorum {
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
