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

/// Regenerate with: `UPDATE_MAN=1 cargo test --test integration man_pages_are_fresh` (the
/// completion scripts in completions/ too).
#[test]
fn man_pages_are_fresh() {
    crate::packaging::completions_are_fresh();
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
    // A page's footer names redlock's version, and its SYNOPSIS the value each option takes.
    let run_page = std::fs::read_to_string(committed.join("redlock-run.1")).unwrap();
    assert!(
        run_page.contains(&format!(
            ".TH redlock-run 1  \"redlock {}\"",
            env!("CARGO_PKG_VERSION")
        )),
        "the footer of redlock-run(1) lacks the version"
    );
    assert!(
        run_page.contains(r"[\fB\-\-ttl\fR \fIDURATION\fR]"),
        "the SYNOPSIS of redlock-run(1) lacks --ttl's value"
    );
}

/// `redlock --help`, `-h`, bare `redlock` and `redlock help` list every command with what it
/// does (the subcommands are built lazily: an empty description is easy to bring back), and
/// `redlock help COMMAND` is that command's help.
#[test]
fn help_lists_every_command_with_what_it_does() {
    for args in [&["--help"][..], &["-h"], &[], &["help"]] {
        let out = crate::util::Redlock::new(args).run();
        let text = format!("{}{}", out.stdout, out.stderr);
        for command in redlock::cli::man_pages() {
            let described = text.lines().any(|line| {
                line.trim_start()
                    .strip_prefix(command)
                    .is_some_and(|rest| rest.starts_with("  ") && !rest.trim().is_empty())
            });
            if !described {
                out.fail(&format!("{args:?} lists no description of {command}"));
            }
        }
        if text.contains("keep-alive") {
            out.fail(&format!("{args:?} lists the internal keep-alive"));
        }
    }
    crate::util::Redlock::new(&["help", "run"])
        .run()
        .code(0)
        .stdout_contains("Run a command while holding a lock")
        .stdout_contains("--ttl <DURATION>");
}

/// The generated completion scripts offer what each place takes: never the internal
/// keep-alive; text and json after --log-format; the pages after `man`; after `run ... --`
/// a command, not redlock's options. Bash runs its script; zsh and fish are read.
#[test]
fn completions_offer_what_each_place_takes() {
    let script = |shell: &str| {
        let out = crate::util::Redlock::new(&["completions", shell]).run();
        out.code(0);
        out.stdout.clone()
    };
    for shell in ["bash", "zsh", "fish"] {
        let text = script(shell);
        // acquire's --keep-alive is an option users give; the keep-alive command is not.
        assert!(
            !text
                .replace("--keep-alive", "")
                .replace("-l keep-alive", "")
                .contains("keep-alive"),
            "{shell} offers the keep-alive command"
        );
        assert!(
            text.contains("text") && text.contains("json"),
            "{shell}: no log formats"
        );
        assert!(text.contains("history"), "{shell}: no page names for man");
    }
    let dir = crate::util::TempDir::new("completions");
    let file = dir.path().join("redlock.bash");
    std::fs::write(&file, script("bash")).unwrap();
    let complete = |words: &[&str]| -> Vec<String> {
        let quoted: Vec<String> = words.iter().map(|word| format!("'{word}'")).collect();
        let program = format!(
            "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; _redlock redlock \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display(),
            quoted.join(" "),
            words.len() - 1
        );
        let out = std::process::Command::new("bash")
            .args(["--norc", "-c", &program])
            .output()
            .expect("bash runs");
        assert!(out.status.success(), "{words:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|line| !line.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let top = complete(&["redlock", ""]);
    assert!(top.contains(&"run".to_owned()), "{top:?}");
    assert!(!top.contains(&"keep-alive".to_owned()), "{top:?}");
    assert_eq!(complete(&["redlock", "--log-format", ""]), ["text", "json"]);
    assert_eq!(complete(&["redlock", "man", "hi"]), ["history"]);
    let after_dashes = complete(&["redlock", "run", "-k", "x", "--", "printen"]);
    assert!(
        after_dashes.contains(&"printenv".to_owned()),
        "{after_dashes:?}"
    );
    let after_command = complete(&["redlock", "run", "-k", "x", "--", "ls", "--"]);
    assert!(
        !after_command.iter().any(|word| word == "--ttl"),
        "{after_command:?}"
    );

    // fish, where installed: its `complete -C` answers for a command line.
    let fish_file = dir.path().join("redlock.fish");
    std::fs::write(&fish_file, script("fish")).unwrap();
    let fish = |line: &str| -> Option<Vec<String>> {
        let out = std::process::Command::new("fish")
            .args(["--no-config", "-c"])
            .arg(format!(
                "source '{}'; complete -C '{line}'",
                fish_file.display()
            ))
            .env("HOME", dir.path())
            .output()
            .ok()?;
        assert!(out.status.success(), "{line}: {out:?}");
        Some(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|line| line.split('\t').next().unwrap_or_default().to_owned())
                .collect(),
        )
    };
    if let Some(top) = fish("redlock ") {
        assert!(top.contains(&"run".to_owned()), "{top:?}");
        assert!(!top.contains(&"keep-alive".to_owned()), "{top:?}");
        assert_eq!(
            fish("redlock list --log-format ").unwrap(),
            ["json", "text"]
        );
        assert_eq!(fish("redlock man hi").unwrap(), ["history"]);
        let after_dashes = fish("redlock run -k x -- printen").unwrap();
        assert!(
            after_dashes.contains(&"printenv".to_owned()),
            "{after_dashes:?}"
        );
        let options = fish("redlock run -k x -- ls --ke").unwrap();
        assert!(!options.contains(&"--key".to_owned()), "{options:?}");
    }
    // zsh, where installed: the script parses; its man page names and run's command (zsh's own
    // command completion) are in it.
    let zsh_script = script("zsh");
    assert!(zsh_script.contains("_cmdambivalent"));
    assert!(zsh_script.contains(
        "(run acquire release extend inspect history check list metrics doctor completions man)"
    ));
    if let Ok(out) = std::process::Command::new("zsh")
        .args(["-n", "-c", &zsh_script])
        .output()
    {
        assert!(out.status.success(), "zsh: {out:?}");
    }
}

/// One page per command, sorted by file name. The top page gets real ENVIRONMENT, EXIT STATUS
/// and EXAMPLES sections built from the same tables as `--help`; the others point to it.
fn man_pages() -> Vec<(String, String)> {
    fn collect(cmd: &clap::Command, pages: &mut Vec<(String, String)>) {
        for sub in cmd.get_subcommands().filter(|sub| !sub.is_hide_set()) {
            collect(sub, pages);
        }
        // The footer names the program and its version (clap_mangen puts the subcommand's
        // name there).
        let man = Man::new(cmd.clone().after_long_help(None))
            .source(format!("redlock {}", env!("CARGO_PKG_VERSION")));
        let mut page = Vec::new();
        man.render(&mut page).unwrap();
        let page = with_option_values_in_synopsis(cmd, &String::from_utf8(page).unwrap());
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
    // `redlock help COMMAND` is `redlock COMMAND --help`: no page of its own.
    cmd = cmd.mut_subcommand("help", |help| help.hide(true));
    let mut pages = Vec::new();
    collect(&cmd, &mut pages);
    pages.sort();
    pages
}

/// clap_mangen's SYNOPSIS names the options without their values (`[--ttl]`); a reader needs
/// to know which take one (`[--ttl DURATION]`).
fn with_option_values_in_synopsis(cmd: &clap::Command, page: &str) -> String {
    let start = page.find(".SH SYNOPSIS\n").expect("a SYNOPSIS section") + ".SH SYNOPSIS\n".len();
    let end = start + page[start..].find('\n').unwrap();
    let mut synopsis = page[start..end].to_owned();
    for arg in cmd.get_arguments() {
        let (Some(long), Some(values)) = (arg.get_long(), arg.get_value_names()) else {
            continue;
        };
        if !arg.get_action().takes_values() {
            continue;
        }
        let option = format!("\\fB\\-\\-{}\\fR", long.replace('-', "\\-"));
        let value = format!(" \\fI{}\\fR", values.join(" ").replace('-', "\\-"));
        for close in ["]", ">"] {
            synopsis = synopsis.replace(
                &format!("{option}{close}"),
                &format!("{option}{value}{close}"),
            );
        }
    }
    format!("{}{synopsis}{}", &page[..start], &page[end..])
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

/// The reference's "Commands and flags" (docs/reference.md) names every command and every option clap knows
/// (short forms too), so that nothing the program accepts is missing from it.
#[test]
fn readme_reference_names_every_command_and_option() {
    let readme = doc("docs/reference.md");
    let section = &readme[readme
        .find("## Commands and flags")
        .expect("a Commands and flags section")..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 3)];
    let mut cmd = Cli::command();
    cmd.build();
    let mut missing = Vec::new();
    let check = |cmd: &clap::Command, missing: &mut Vec<String>| {
        for arg in cmd.get_arguments().filter(|arg| !arg.is_hide_set()) {
            if matches!(arg.get_id().as_str(), "help" | "version") {
                continue;
            }
            if let Some(long) = arg.get_long()
                && !section.contains(&format!("`--{long}"))
                && !section.contains(&format!(" --{long}"))
                && !section.contains(&format!("[--{long}"))
            {
                missing.push(format!("{} --{long}", cmd.get_name()));
            }
            if let Some(short) = arg.get_short()
                && !section.contains(&format!("`-{short}"))
            {
                missing.push(format!("{} -{short}", cmd.get_name()));
            }
        }
    };
    check(&cmd, &mut missing);
    for sub in cmd.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        if !section.contains(&format!("| `{}", sub.get_name())) {
            missing.push(format!("the command {}", sub.get_name()));
        }
        check(sub, &mut missing);
    }
    assert!(missing.is_empty(), "docs/reference.md lacks: {missing:?}");
}

/// README's Development section names every tool `.ci/run` installs when missing.
#[test]
fn readme_development_names_what_ci_installs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = &readme[readme
        .find("## Development")
        .expect("a Development section")..];
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    let tools: Vec<&str> = ci
        .split("command -v ")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    assert!(tools.contains(&"redis-server"), "{tools:?}");
    for tool in tools {
        assert!(
            section.contains(tool),
            "README's Development section lacks {tool}"
        );
    }
}

#[test]
fn readme_lists_every_environment_variable() {
    let readme = doc("docs/reference.md");
    let section = &readme[readme
        .find("## Environment")
        .expect("an Environment section")..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 3)];
    for (name, _) in redlock::cli::ENVIRONMENT {
        assert!(
            section.contains(&format!("`{name}`")),
            "docs/reference.md's Environment section lacks {name}"
        );
    }
}

/// `--help`'s environment and exit-status tables: every name stands apart from its meaning,
/// and no line is wider than 80 columns (clap would wrap it back to the margin).
#[test]
fn help_tables_are_aligned_and_fit_80_columns() {
    let out = crate::util::Redlock::new(&["--help"]).run();
    out.code(0);
    let tables = &out.stdout[out.stdout.find("Environment:").unwrap()..];
    let tables = &tables[..tables.find("Examples:").unwrap()];
    for line in tables.lines() {
        assert!(
            line.chars().count() <= 80,
            "wider than 80 columns: {line:?}"
        );
    }
    for (name, _) in redlock::cli::ENVIRONMENT {
        assert!(
            tables.contains(&format!("  {name}  ")),
            "{name} runs into its meaning:\n{tables}"
        );
    }
}

/// Help is wrapped at the terminal's width, at most 100 columns: on an 80-column terminal no
/// line is wider (also one that reports no rows, as `script` and some consoles do: `run -h`
/// was wrapped at 100 there, 37 of its 79 lines wider than 80); on a wider one and in a pipe,
/// at 100.
#[test]
fn help_is_wrapped_at_the_terminals_width() {
    let widest = |columns: &str, args: &str| -> usize {
        let out = std::process::Command::new("script")
            .args([
                "-qfec",
                &format!("stty {columns}; {} {args}", crate::util::REDLOCK),
                "/dev/null",
            ])
            .output()
            .expect("script(1) from util-linux");
        assert!(
            out.status.code() == Some(if args.is_empty() { 64 } else { 0 }),
            "{args}: {out:?}"
        );
        let shown = String::from_utf8_lossy(&out.stdout);
        // (clap's bold and underline: ESC [ ... m)
        let mut plain = String::new();
        let mut chars = shown.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                chars.by_ref().find(|&c| c == 'm');
            } else if c != '\r' {
                plain.push(c);
            }
        }
        plain
            .lines()
            .map(|line| line.chars().count())
            .max()
            .unwrap_or(0)
    };
    for args in ["-h", "run -h", "run --help", "help run", "acquire -h", ""] {
        assert!(widest("cols 80", args) <= 80, "redlock {args}");
        assert!(widest("rows 30 cols 80", args) <= 80, "redlock {args}");
        let wide = widest("rows 30 cols 160", args);
        assert!(wide > 80 && wide <= 100, "redlock {args}: {wide}");
    }
    let piped = crate::util::Redlock::new(&["run", "--help"]).run();
    let widest_piped = piped.stdout.lines().map(|line| line.chars().count()).max();
    assert!(widest_piped.is_some_and(|width| width > 80 && width <= 100));
}

/// The reference's JSON examples (docs/reference.md) have exactly the fields `inspect --json`,
/// `history --json` and `check --json` print, at every level (holders, waiters, last run, the
/// holds check names).
#[test]
fn readme_json_examples_match_the_output() {
    let readme = doc("docs/reference.md");
    let section = &readme[readme.find("## JSON output").unwrap()..];
    let mut blocks = section.split("```json\n").skip(1).map(|rest| {
        let json = &rest[..rest.find("```").unwrap()];
        serde_json::from_str::<serde_json::Value>(json).unwrap_or_else(|err| {
            panic!("docs/reference.md JSON example does not parse: {err}\n{json}")
        })
    });
    let (inspect_doc, history_doc, check_doc) = (
        blocks.next().unwrap(),
        blocks.next().unwrap(),
        blocks.next().unwrap(),
    );

    let server = crate::util::RedisServer::start();
    server
        .redlock(&["run", "--key", "deploy", "--", "true"])
        .run()
        .code(0);
    server
        .redlock(&[
            "acquire", "--key", "deploy", "--ttl", "30s", "--note", "why",
        ])
        .run()
        .code(0);
    let waiter = server
        .redlock(&["acquire", "--key", "deploy", "--ttl", "5s", "--wait", "20s"])
        .spawn();
    assert!(crate::util::wait_until(
        std::time::Duration::from_secs(10),
        || server.cmd::<i64>(&["ZCARD", "redlock:{deploy}:queue"]) == 1
    ));
    let inspect = server
        .redlock(&["inspect", "--key", "deploy", "--json"])
        .run()
        .json();
    let history = server
        .redlock(&["history", "--key", "deploy", "--json"])
        .run()
        .json();
    let check = server
        .redlock(&["check", "deploy", "--succeeded-within", "1h", "--json"])
        .run()
        .json();
    waiter.signal("TERM");
    let fields = |value: &serde_json::Value| -> Vec<String> {
        crate::util::field_names(value)
            .into_iter()
            .map(str::to_owned)
            .collect()
    };
    for (what, documented, printed) in [
        ("inspect", &inspect_doc, &inspect),
        (
            "holders[]",
            &inspect_doc["holders"][0],
            &inspect["holders"][0],
        ),
        (
            "waiters[]",
            &inspect_doc["waiters"][0],
            &inspect["waiters"][0],
        ),
        ("last_run", &inspect_doc["last_run"], &inspect["last_run"]),
        ("history[]", &history_doc[0], &history[0]),
        ("check[]", &check_doc[0], &check[0]),
        (
            "check[].last_success",
            &check_doc[0]["last_success"],
            &check[0]["last_success"],
        ),
        (
            "check[].holding[]",
            &check_doc[0]["holding"][0],
            &check[0]["holding"][0],
        ),
        (
            "check[].latest[]",
            &check_doc[0]["latest"][0],
            &check[0]["latest"][0],
        ),
    ] {
        assert_eq!(
            fields(documented),
            fields(printed),
            "docs/reference.md's {what} fields"
        );
    }
}

/// `man --install` (often run as root) follows no symbolic link: a link in
/// place of a page is replaced and its target left alone; a linked `man1` or DIR is refused;
/// pages are 0644 whatever the umask.
#[test]
fn man_install_follows_no_link_and_ignores_the_umask() {
    use std::os::unix::fs::{PermissionsExt as _, symlink};
    let dir = crate::util::TempDir::new("man-links");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "not a manual page\n").unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("man1")).unwrap();
    symlink(&victim, root.join("man1/redlock-run.1")).unwrap();
    crate::util::Redlock::new(&["man", "--install"])
        .arg(&root)
        .after_shell("umask 000")
        .run()
        .code(0);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "not a manual page\n"
    );
    let page = root.join("man1/redlock-run.1");
    let meta = std::fs::symlink_metadata(&page).unwrap();
    assert!(meta.file_type().is_file(), "{meta:?}");
    assert!(std::fs::read_to_string(&page).unwrap().contains(".TH"));
    for entry in std::fs::read_dir(root.join("man1")).unwrap() {
        let meta = entry.unwrap().metadata().unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o644);
    }

    // Under a tight umask the pages are still readable by all, and a new man1 is 0755.
    let fresh = dir.path().join("fresh");
    crate::util::Redlock::new(&["man", "--install"])
        .arg(&fresh)
        .after_shell("umask 077")
        .run()
        .code(0);
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&fresh.join("man1")), 0o755);
    assert_eq!(mode(&fresh.join("man1/redlock.1")), 0o644);

    // A linked man1, or a linked DIR, is refused; nothing is written where they point.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let linked = dir.path().join("linked");
    std::fs::create_dir(&linked).unwrap();
    symlink(&elsewhere, linked.join("man1")).unwrap();
    let linked_root = dir.path().join("linked-root");
    symlink(&elsewhere, &linked_root).unwrap();
    for root in [&linked, &linked_root] {
        crate::util::Redlock::new(&["man", "--install"])
            .arg(root)
            .run()
            .code(64)
            .one_line_error("is a symbolic link");
    }
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// `redlock man --install` writes exactly the committed pages, and `redlock man COMMAND`
/// prints one.
#[test]
fn man_installs_every_committed_page() {
    let dir = crate::util::TempDir::new("man");
    crate::util::Redlock::new(&["man", "--install"])
        .arg(dir.path())
        .run()
        .code(0)
        .stdout_contains("installed");
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let names = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let installed = dir.path().join("man1");
    assert_eq!(names(&installed), names(&committed));
    for name in names(&committed) {
        assert_eq!(
            std::fs::read_to_string(installed.join(&name)).unwrap(),
            std::fs::read_to_string(committed.join(&name)).unwrap(),
            "{name}"
        );
    }
    crate::util::Redlock::new(&["man", "run"])
        .run()
        .code(0)
        .stdout_contains(".TH redlock-run 1");
    crate::util::Redlock::new(&["man", "nosuch"])
        .run()
        .code(64)
        .one_line_error("no manual page for 'nosuch'")
        .stderr_contains("history");
}

/// The first ```sh block after the paragraph starting with `lead` in the README.
fn readme_block(lead: &str) -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let from = readme
        .find(lead)
        .unwrap_or_else(|| panic!("README lacks {lead:?}"));
    let block = &readme[from..];
    let start = block.find("```sh\n").unwrap() + "```sh\n".len();
    let end = start + block[start..].find("```").unwrap();
    block[start..end].to_owned()
}

/// The README's script recipes, run as written (redlock's path and the job substituted).
#[test]
fn readme_recipes_work() {
    use crate::util::{REDLOCK, RedisServer, TempDir};
    let server = RedisServer::start();
    let dir = TempDir::new("recipes");
    // redlock on PATH, as installed.
    let path = format!(
        "{}:{}",
        Path::new(REDLOCK).parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    let run = |script: &str| {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("REDLOCK_URL", server.url())
            .env("PATH", &path)
            .output()
            .unwrap()
    };

    // A critical section whose job fails: the script stops there with its status (it does not
    // go on to extend), the trap still releases the lock, and the history records the status.
    let section =
        readme_block("**A critical section in a script**").replace("./deploy.sh", "sh -c 'exit 3'");
    let out = run(&section);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(
        server.keys_but_history(),
        ["redlock:{deploy}:fence"],
        "the lock outlived the script"
    );
    let history: Vec<String> = server.cmd(&["ZRANGE", "redlock:{deploy}:history", "0", "-1"]);
    assert!(
        history.len() == 1 && history[0].contains("\"exit\":3"),
        "the history should record exit 3: {history:?}"
    );
    assert!(
        !section.contains("--token"),
        "a token on a command line is public"
    );

    // A script that wraps itself: it runs under the lock; a second copy finds it busy.
    let wrapper = dir.path().join("report.sh");
    let body = readme_block("**A whole script under the lock");
    std::fs::write(
        &wrapper,
        format!("{body}echo \"held=$REDLOCK_HELD\"\nsleep 1\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let first = std::thread::spawn({
        let (wrapper, url, path) = (wrapper.clone(), server.url(), path.clone());
        move || {
            std::process::Command::new(&wrapper)
                .env("REDLOCK_URL", url)
                .env("PATH", path)
                .output()
                .unwrap()
        }
    });
    assert!(crate::util::wait_until(
        std::time::Duration::from_secs(10),
        || { server.cmd::<i64>(&["EXISTS", "redlock:{nightly-report}:holders"]) == 1 }
    ));
    let second = run(&wrapper.display().to_string());
    assert_eq!(second.status.code(), Some(75), "{second:?}");
    let first = first.join().unwrap();
    assert!(first.status.success(), "{first:?}");
    assert_eq!(String::from_utf8_lossy(&first.stdout).trim(), "held=1");
    // However it is started: with sh (executable or not), as ./script, by a relative or an
    // absolute path, or found on PATH.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(&wrapper, bin.join("report")).unwrap();
    let plain = dir.path().join("plain.sh");
    std::fs::write(&plain, std::fs::read(&wrapper).unwrap()).unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    for how in [
        "sh report.sh",
        "sh plain.sh",
        "./report.sh",
        "bin/report",
        &wrapper.display().to_string(),
        "report",
    ] {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(how)
            .current_dir(dir.path())
            .env("REDLOCK_URL", server.url())
            .env("PATH", format!("{}:{path}", bin.display()))
            .output()
            .unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "held=1",
            "started as `{how}`: {out:?}"
        );
    }

    // The cron recipe's command, run twice as two hosts would: one runs, one skips quietly.
    let cron = readme_block("**Cron on several hosts");
    let entry = cron.lines().find(|line| line.starts_with("*/15")).unwrap();
    let command = entry
        .splitn(6, ' ')
        .nth(5)
        .unwrap()
        .replace("/usr/local/bin/redlock", REDLOCK)
        .replace("--password-file /etc/redlock/password ", "")
        .replace("/opt/report/run.sh", "true");
    for _ in 0..2 {
        let out = run(&command);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{command}: {out:?}"
        );
    }
}

/// The README's table for people coming from flock, consul lock and etcdctl lock: the row
/// for `etcdctl lock NAME` (a lock held across commands) takes and gives back the lock as
/// written. Repro: it said "later `redlock release NAME`", which fails without the token.
#[test]
fn readme_etcdctl_row_releases_what_it_takes() {
    use crate::util::{REDLOCK, RedisServer};
    let readme = doc("README.md");
    let row = readme
        .lines()
        .find(|line| line.starts_with("| `etcdctl lock NAME` (holds"))
        .expect("README's etcdctl row");
    let cell = row.split(" | ").nth(1).unwrap();
    let commands: Vec<String> = cell
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|code| code.replace("NAME", "etcd-style").replace(" D", " 30s"))
        .collect();
    assert_eq!(commands.len(), 2, "{row}");
    let server = RedisServer::start();
    let path = format!(
        "{}:{}",
        Path::new(REDLOCK).parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    let out = std::process::Command::new("sh")
        .arg("-ec")
        .arg(format!(
            "{}\nredlock inspect etcd-style >/dev/null\n{}\n",
            commands[0], commands[1]
        ))
        .env("REDLOCK_URL", server.url())
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{commands:?}: {out:?}"
    );
    assert_eq!(server.keys_but_history(), ["redlock:{etcd-style}:fence"]);
}

/// The README's ```console blocks: each `$ command` and the lines shown after it.
fn console_blocks() -> Vec<Vec<(String, Vec<String>)>> {
    let readme = doc("README.md");
    let mut blocks = Vec::new();
    for block in readme.split("```console\n").skip(1) {
        let block = &block[..block.find("```").unwrap()];
        let mut commands: Vec<(String, Vec<String>)> = Vec::new();
        for line in block.lines() {
            match line.strip_prefix("$ ") {
                Some(command) => commands.push((command.to_owned(), Vec::new())),
                None => commands.last_mut().unwrap().1.push(line.to_owned()),
            }
        }
        blocks.push(commands);
    }
    blocks
}

/// Runs `commands` one after the other in one shell on an 80-column terminal (script(1)), as
/// a person types them (redlock on PATH, in `dir`, USER=ci, REDLOCK_URL set): what each
/// showed, by lines.
fn run_console(
    server: &crate::util::RedisServer,
    dir: &Path,
    commands: &[String],
) -> Vec<Vec<String>> {
    let mut lines = format!(
        "stty cols 80; cd '{}'; export PATH='{}':\"$PATH\" USER=ci REDLOCK_URL='{}'\n",
        dir.display(),
        Path::new(crate::util::REDLOCK).parent().unwrap().display(),
        server.url()
    );
    for command in commands {
        // (`echo $?` in an example sees the status of the command before it.)
        lines.push_str(&format!(
            "{command}\n__s=$?; printf '@@@\\n'; (exit $__s)\n"
        ));
    }
    let out = std::process::Command::new("script")
        .args(["-qfec", &lines, "/dev/null"])
        .output()
        .expect("script(1) from util-linux");
    let shown = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    let mut outputs: Vec<Vec<String>> = shown
        .split("@@@\n")
        .map(|part| part.lines().map(str::to_owned).collect())
        .collect();
    outputs.truncate(commands.len());
    assert_eq!(outputs.len(), commands.len(), "{shown}");
    outputs
}

/// A line of output with what changes from run to run made alike: every number, time and
/// fence `#`, every duration (however many parts) `D`, runs of spaces one.
fn shape(line: &str) -> String {
    let mut numbered = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            let mut run = c.to_string();
            while let Some(next) = chars
                .peek()
                .copied()
                .filter(|next| next.is_ascii_digit() || ".:-TZ".contains(*next))
            {
                run.push(next);
                chars.next();
            }
            // A fence (16 digits, or a pid's few) is not just any number.
            let long = run.len() >= 10 && run.chars().all(|c| c.is_ascii_digit());
            numbered.push_str(if long { "##" } else { "#" });
        } else {
            numbered.push(c);
        }
    }
    let mut words: Vec<String> = Vec::new();
    for word in numbered.split_whitespace() {
        let core = word
            .trim_start_matches('(')
            .trim_end_matches([',', ';', ')']);
        let (head, rest) = word.split_at(word.find(core).unwrap_or(0));
        let tail = &rest[core.len()..];
        let units = ["ms", "s", "m", "min", "h", "d", "day", "days", "w"];
        let duration = core
            .strip_prefix('#')
            .is_some_and(|unit| units.contains(&unit));
        if duration && head.is_empty() && words.last().is_some_and(|last| last == "D") {
            words.pop();
        }
        words.push(match duration {
            true => format!("{head}D{tail}"),
            false => word.to_owned(),
        });
    }
    words.join(" ")
}

/// The README's console examples are real output: each command, run against a lock in the
/// state the example shows, prints what the example shows but for the numbers, times and
/// durations of the moment (and the host's name). Repro: `inspect` was shown with
/// `fence: 42` where real fences have 16 digits, in the table a pipe gets rather than the
/// one a terminal shows.
#[test]
fn readme_console_examples_are_real_output() {
    use crate::util::{RedisServer, TempDir, wait_until};
    let blocks = console_blocks();
    assert_eq!(
        blocks.len(),
        2,
        "README's console blocks changed: test them here"
    );
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let host = host.split('.').next().unwrap().to_owned();
    let compare = |block: &[(String, Vec<String>)], outputs: &[Vec<String>], hosts: &[&str]| {
        for ((command, shown), real) in block.iter().zip(outputs) {
            if shown.is_empty() {
                continue; // (a command shown for what it does, not for its output)
            }
            let real: Vec<String> = real
                .iter()
                .map(|line| shape(&line.replace(&host, hosts[0])))
                .collect();
            let shown: Vec<String> = shown.iter().map(|line| shape(line)).collect();
            assert_eq!(real, shown, "$ {command}");
        }
    };

    // The operator's: a deploy held, its table as an 80-column terminal shows it, and a forced
    // release.
    let server = RedisServer::start();
    let dir = TempDir::new("readme-console");
    std::fs::write(dir.path().join("deploy.sh"), "#!/bin/sh\nsleep 60\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        dir.path().join("deploy.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let mut deploy = std::process::Command::new(crate::util::REDLOCK)
        .args(["run", "--key", "deploy", "--", "./deploy.sh"])
        .current_dir(dir.path())
        .env("REDLOCK_URL", server.url())
        .env("USER", "ci")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(std::time::Duration::from_secs(10), || {
        server.cmd::<i64>(&["EXISTS", "redlock:{deploy}:holders"]) == 1
    }));
    let commands: Vec<String> = blocks[0]
        .iter()
        .map(|(command, _)| command.clone())
        .collect();
    let outputs = run_console(&server, dir.path(), &commands);
    compare(&blocks[0], &outputs, &["web1"]);
    let _ = deploy.kill();
    let _ = deploy.wait();

    // "Did it run?": a report that succeeded 3h 12m ago on web2, and a backup that last
    // succeeded 30 h ago on db1, then expired there, then failed on db2.
    let server = RedisServer::start();
    let hold = |key: &str, args: &[&str]| {
        server
            .redlock(&[&["run", "--key", key, "--"][..], args].concat())
            .run();
    };
    hold("nightly-report", &["true"]);
    hold("backup", &["true"]);
    server
        .redlock(&["acquire", "--key", "backup", "--ttl", "1s"])
        .run()
        .code(0);
    assert!(wait_until(std::time::Duration::from_secs(5), || {
        server.cmd::<i64>(&["EXISTS", "redlock:{backup}:holders"]) == 0
    }));
    hold("backup", &["sh", "-c", "exit 1"]);
    let now = server.time_ms();
    const H: u64 = 3_600_000;
    const M: u64 = 60_000;
    // Each hold's host, start and end (ms before now), oldest first.
    for (key, holds) in [
        (
            "nightly-report",
            &[("web2", 3 * H + 16 * M + 10_000, 3 * H + 12 * M)][..],
        ),
        (
            "backup",
            &[
                ("db1", 30 * H + 40 * M, 30 * H),
                ("db1", 25 * H, 24 * H),
                ("db2", 6 * H + 2 * M, 6 * H),
            ],
        ),
    ] {
        let history = format!("redlock:{{{key}}}:history");
        let entries: Vec<(String, String)> =
            server.cmd(&["ZRANGE", &history, "0", "-1", "WITHSCORES"]);
        assert_eq!(entries.len(), holds.len(), "{entries:?}");
        for ((entry, score), (host, since, end)) in entries.iter().zip(holds) {
            let mut value: serde_json::Value = serde_json::from_str(entry).unwrap();
            value["host"] = (*host).into();
            value["since"] = (now - since).into();
            match value.get("ended") {
                Some(_) => {
                    value["ended"] = (now - end).into();
                    value["exp"] = (now - end + 30_000).into();
                }
                None => value["exp"] = (now - end).into(),
            }
            server.cmd::<()>(&["ZREM", &history, entry]);
            server.cmd::<()>(&["ZADD", &history, score, &value.to_string()]);
        }
    }
    let commands: Vec<String> = blocks[1]
        .iter()
        .map(|(command, _)| command.clone())
        .collect();
    let outputs = run_console(&server, dir.path(), &commands);
    compare(&blocks[1], &outputs, &["web2"]);
}

/// `--log-format json`: every stderr line is a JSON object whose fields are the ones the
/// README documents, with those it marks "always" present.
#[test]
fn json_log_lines_follow_the_documented_schema() {
    use crate::util::RedisServer;
    let readme = doc("docs/reference.md");
    let section = &readme[readme.find("### redlock's own lines as JSON").unwrap()..];
    let rows: Vec<(String, bool)> = section
        .lines()
        .skip_while(|line| !line.starts_with("| field |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_owned(), cells[2] == "yes")
        })
        .collect();
    assert!(rows.len() >= 5, "{rows:?}");
    let server = RedisServer::start();
    let holder = server
        .redlock(&["acquire", "--key", "k", "--ttl", "30s"])
        .run();
    holder.code(0);
    let mut seen = std::collections::BTreeSet::new();
    for (args, code) in [
        (&["-v", "run", "--key", "other", "--", "true"][..], 0),
        (&["run", "--key", "k", "--", "true"], 75),
        (
            &[
                "run",
                "--key",
                "k",
                "--wait",
                "1500ms",
                "--progress-every",
                "1s",
                "--",
                "true",
            ],
            75,
        ),
        (&["run", "--key", "k", "--tl", "1s", "--", "true"], 64),
    ] {
        let out = server
            .redlock(&[&["--log-format", "json"][..], args].concat())
            .run();
        out.code(code);
        for line in out.stderr.lines() {
            let record: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|err| out.fail(&format!("not JSON ({err}): {line}")));
            for field in crate::util::field_names(&record) {
                assert!(
                    rows.iter().any(|(name, _)| name == field),
                    "{field} is not documented: {line}"
                );
                seen.insert(field.to_owned());
            }
            for (name, always) in &rows {
                assert!(
                    !always || record.get(name).is_some(),
                    "{name} missing: {line}"
                );
            }
            if record["level"] == "error" || !record["exit"].is_null() {
                assert_eq!(record["exit"], code, "{line}");
            }
        }
    }
    let documented: std::collections::BTreeSet<String> =
        rows.into_iter().map(|(name, _)| name).collect();
    assert_eq!(
        seen, documented,
        "documented fields that never appear, or the reverse"
    );
}

/// A document of the repository, by its path from the root.
fn doc(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|err| panic!("{path}: {err}"))
}

/// Found in review: docs/performance.md's commands and docs/reference.md's tables put the token
/// on a command line (`--token`), which every local user can read in the process list, and the
/// README said "pass it to `release`" without saying how. No example, code block or table row
/// of the documentation passes a token as an argument, and a line that says to pass a token on
/// names `REDLOCK_TOKEN`.
#[test]
fn no_example_puts_a_token_on_a_command_line() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = vec!["README.md".to_owned(), "lua/README.md".to_owned()];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            paths.push(format!("docs/{name}"));
        }
    }
    let mut offending = Vec::new();
    for path in &paths {
        let mut in_code = false;
        for (number, line) in doc(path).lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
                continue;
            }
            let shown = in_code || line.trim_start().starts_with('|');
            let argument = line.contains("--token")
                || ((line.contains("release") || line.contains("extend")) && line.contains(" -t "));
            let passed = line.contains("pass it") && line.contains("token");
            if (shown && argument) || (passed && !line.contains("REDLOCK_TOKEN")) {
                offending.push(format!("{path}:{}: {line}", number + 1));
            }
        }
    }
    assert!(offending.is_empty(), "{}", offending.join("\n"));
}
