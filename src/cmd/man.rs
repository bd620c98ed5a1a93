//! `redlock man`: the manual pages, built into the binary so that installing them needs
//! nothing but redlock. They are the pages in `man/`, which a test regenerates from the
//! command-line definition and compares (`tests/docs.rs`).

use std::path::Path;

use super::print_line;
use crate::cli::{MAN_PAGES, ManArgs};
use crate::exit::{Done, Failure, fail};

/// Every page, by file name.
pub(crate) const PAGES: &[(&str, &str)] = &[
    ("redlock.1", include_str!("../../man/redlock.1")),
    (
        "redlock-acquire.1",
        include_str!("../../man/redlock-acquire.1"),
    ),
    (
        "redlock-completions.1",
        include_str!("../../man/redlock-completions.1"),
    ),
    (
        "redlock-doctor.1",
        include_str!("../../man/redlock-doctor.1"),
    ),
    (
        "redlock-extend.1",
        include_str!("../../man/redlock-extend.1"),
    ),
    (
        "redlock-history.1",
        include_str!("../../man/redlock-history.1"),
    ),
    (
        "redlock-inspect.1",
        include_str!("../../man/redlock-inspect.1"),
    ),
    ("redlock-list.1", include_str!("../../man/redlock-list.1")),
    ("redlock-man.1", include_str!("../../man/redlock-man.1")),
    (
        "redlock-release.1",
        include_str!("../../man/redlock-release.1"),
    ),
    ("redlock-run.1", include_str!("../../man/redlock-run.1")),
];

pub(super) fn run(args: &ManArgs) -> anyhow::Result<Done> {
    if let Some(root) = &args.install {
        return install(root);
    }
    let name = match args.command.as_deref() {
        None => "redlock.1".to_owned(),
        Some(command) => format!("redlock-{command}.1"),
    };
    let (_, page) = PAGES
        .iter()
        .find(|(file, _)| *file == name)
        .ok_or_else(|| {
            fail(
                Failure::Usage,
                format!(
                    "no manual page for '{}'; the pages are {}",
                    args.command.as_deref().unwrap_or_default().escape_debug(),
                    MAN_PAGES.join(", ")
                ),
            )
        })?;
    print_line(page.trim_end())?;
    Ok(Done::Success)
}

/// Writes every page into `root/man1`, creating it.
fn install(root: &Path) -> anyhow::Result<Done> {
    let dir = root.join("man1");
    let failed = |err: std::io::Error| fail(Failure::Output, format!("{}: {err}", dir.display()));
    std::fs::create_dir_all(&dir).map_err(failed)?;
    for (file, page) in PAGES {
        std::fs::write(dir.join(file), page).map_err(failed)?;
    }
    print_line(format_args!(
        "installed {} pages in {}",
        PAGES.len(),
        dir.display()
    ))?;
    Ok(Done::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names `man` lists and completion offers are exactly the pages built in.
    #[test]
    fn every_page_is_named_and_every_name_has_a_page() {
        let mut files: Vec<String> = MAN_PAGES
            .iter()
            .map(|command| format!("redlock-{command}.1"))
            .chain(["redlock.1".to_owned()])
            .collect();
        files.sort();
        let mut built: Vec<&str> = PAGES.iter().map(|(file, _)| *file).collect();
        built.sort_unstable();
        assert_eq!(files, built);
    }
}
