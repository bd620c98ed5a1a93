//! The documentation cannot drift from the code: the clap definition is self-consistent, the
//! committed man pages are what clap generates today, and the README's exit-code table lists
//! every code the program uses.

use std::path::Path;

use clap::CommandFactory as _;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};
use redlock::Cli;

#[test]
fn cli_definition_is_consistent() {
    Cli::command().debug_assert();
}

/// Regenerate with: `UPDATE_MAN=1 cargo test --test integration man_pages_are_fresh`
#[test]
fn man_pages_are_fresh() {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let generated = man_pages();
    if std::env::var_os("UPDATE_MAN").is_some() {
        let _ = std::fs::remove_dir_all(&committed);
        std::fs::create_dir_all(&committed).unwrap();
        for (name, page) in &generated {
            std::fs::write(committed.join(name), page).unwrap();
        }
    }
    let mut on_disk: Vec<String> = std::fs::read_dir(&committed)
        .map(|entries| {
            entries
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    on_disk.sort();
    let stale = "man/ is stale; regenerate it with: UPDATE_MAN=1 cargo test --test integration man_pages_are_fresh";
    let names: Vec<String> = generated.iter().map(|(name, _)| name.clone()).collect();
    assert_eq!(on_disk, names, "{stale}");
    for (name, page) in &generated {
        let have = std::fs::read_to_string(committed.join(name)).unwrap();
        assert!(&have == page, "{name}: {stale}");
    }
    assert!(names.contains(&"redlock-acquire.1".to_owned()));
}

/// One page per command, sorted by file name. The top page gets real ENVIRONMENT, EXIT STATUS
/// and EXAMPLES sections built from the same tables as `--help`; the others point to it.
fn man_pages() -> Vec<(String, String)> {
    fn collect(cmd: &clap::Command, pages: &mut Vec<(String, String)>) {
        for sub in cmd.get_subcommands() {
            collect(sub, pages);
        }
        let man = Man::new(cmd.clone().after_long_help(None));
        let mut page = Vec::new();
        man.render(&mut page).unwrap();
        let page = String::from_utf8(page).unwrap();
        let extra = if cmd.get_name() == "redlock" {
            top_page_sections()
        } else {
            let mut roff = Roff::new();
            roff.control("SH", ["SEE ALSO"]).text([
                bold("redlock"),
                roman("(1) for the environment, exit status and examples."),
            ]);
            roff.to_roff()
        };
        let at = page.find(".SH VERSION").unwrap_or(page.len());
        pages.push((
            man.get_filename(),
            format!("{}{extra}{}", &page[..at], &page[at..]),
        ));
    }
    let mut cmd = Cli::command();
    cmd.build();
    let mut pages = Vec::new();
    collect(&cmd, &mut pages);
    pages.sort();
    pages
}

fn top_page_sections() -> String {
    let mut roff = Roff::new();
    roff.control("SH", ["ENVIRONMENT"]);
    for (name, meaning) in redlock::cli::ENVIRONMENT {
        roff.control("TP", [])
            .text([bold(*name)])
            .text([roman(*meaning)]);
    }
    roff.control("SH", ["EXIT STATUS"]);
    for (code, meaning) in redlock::exit::TABLE {
        roff.control("TP", [])
            .text([bold(*code)])
            .text([roman(*meaning)]);
    }
    roff.control("SH", ["EXAMPLES"]);
    for (what, commands) in redlock::cli::EXAMPLES {
        roff.control("PP", []).text([roman(*what)]);
        roff.control("RS", []).control("nf", []);
        for command in *commands {
            roff.text([roman(*command)]);
        }
        roff.control("fi", []).control("RE", []);
    }
    roff.to_roff()
}

#[test]
fn readme_lists_every_exit_code() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    for (code, _) in redlock::exit::TABLE {
        assert!(
            readme.contains(&format!("| {code} |")),
            "README's exit-code table lacks {code}"
        );
    }
}
