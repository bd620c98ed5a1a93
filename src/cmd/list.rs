//! `redlock list`: every held lock under the prefix, one line each (or a JSON array).

use super::inspect::{HOLDER_HEADER, LockView, holder_cells, mode_summary};
use super::{Context, print_line, printable, table};
use crate::cli::ListArgs;
use crate::exit::Done;
use crate::lock;

pub(super) fn run(context: &Context, args: &ListArgs) -> anyhow::Result<Done> {
    let mut session = context.connect()?;
    let listing = lock::list(&mut session, &context.prefix)?;
    for (key, why) in &listing.skipped {
        context.log.warn(format_args!(
            "skipping {}: it holds data redlock did not write ({why:#})",
            printable(key)
        ));
    }
    let locks = listing.locks;
    if args.json {
        let views: Vec<LockView<'_>> = locks.iter().map(LockView::new).collect();
        print_line(serde_json::to_string_pretty(&views)?)?;
        return Ok(Done::Success);
    }
    if locks.is_empty() {
        context.log.step("no locks are held under this prefix");
        return Ok(Done::Success);
    }
    let mut header = ["KEY", "MODE", "HOLDERS", "WAITERS"]
        .map(str::to_owned)
        .to_vec();
    header.extend(HOLDER_HEADER.map(str::to_owned));
    let mut rows = vec![header];
    for state in &locks {
        let Some(first) = state.holders.first() else {
            continue;
        };
        let mut row = vec![
            printable(state.name.as_str()),
            mode_summary(state),
            state.waiters.len().to_string(),
        ];
        row.extend(holder_cells(first, state.now));
        rows.push(row);
    }
    print_line(table(&rows))?;
    Ok(Done::Success)
}
