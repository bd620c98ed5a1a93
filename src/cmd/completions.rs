//! `redlock completions SHELL`: shell completion scripts generated from the clap definition,
//! without the hidden internal commands; for bash and fish, the words after `run ... --` are
//! left to the command being run, and fish is told the page names `man` takes.

use clap::CommandFactory as _;
use clap_complete::Shell;

use crate::cli::{Cli, CompletionsArgs};
use crate::exit::Done;

use super::write_stdout;

pub(super) fn run(args: &CompletionsArgs) -> anyhow::Result<Done> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut visible_cli(), "redlock", &mut script);
    let mut script = String::from_utf8_lossy(&script).into_owned();
    match args.shell {
        Shell::Bash => script = bash_after_double_dash(&script),
        Shell::Fish => script.push_str(&fish_additions()),
        Shell::Zsh => script = zsh_positionals(&script),
        _ => {}
    }
    // The script as generated: `print_line` would escape what shells need verbatim.
    write_stdout(script.trim_end())?;
    Ok(Done::Success)
}

/// The command line as users see it: clap's generators offer hidden subcommands too, so this
/// copy leaves them out (`keep-alive` is redlock's own).
fn visible_cli() -> clap::Command {
    let mut full = Cli::command();
    full.build();
    // `build` has made -h and -V arguments of their own: keep them, and not a second copy.
    clap::Command::new("redlock")
        .version(env!("CARGO_PKG_VERSION"))
        .disable_help_flag(true)
        .disable_version_flag(true)
        .disable_help_subcommand(true)
        .args(full.get_arguments().cloned())
        .subcommands(
            full.get_subcommands()
                .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
                .cloned(),
        )
}

/// What bash completes after `redlock run ... --`: a command name right after `--`, then the
/// shell's default (file names); never redlock's own options. clap's bash script has no notion
/// of `--`, so this check goes in front of its dispatch on the subcommand.
const BASH_DOUBLE_DASH: &str = r#"    # After `run ... --` the words are the command to run and its arguments.
    if [[ "${cmd}" == "redlock__subcmd__run" ]]; then
        for i in "${COMP_WORDS[@]:2:COMP_CWORD-2}"; do
            if [[ "${i}" == "--" ]]; then
                if [[ "${prev}" == "--" ]]; then
                    COMPREPLY=( $(compgen -c -- "${cur}") )
                fi
                return 0
            fi
        done
    fi

"#;

fn bash_after_double_dash(script: &str) -> String {
    let dispatch = "    case \"${cmd}\" in\n";
    match script.find(dispatch) {
        Some(at) => format!("{}{BASH_DOUBLE_DASH}{}", &script[..at], &script[at..]),
        // A clap_complete that writes its script differently: the test of completions fails.
        None => script.to_owned(),
    }
}

/// zsh's positionals as a person types them. clap's script lists the hidden words after `--`
/// that other commands refuse, and gives `run`'s NAME and flock-form COMMAND file names; zsh
/// goes on past `--` (`_arguments -S`) with the same positionals, so `run` gets one catch-all
/// that completes a command and then its arguments (`_cmdambivalent`), as before its name
/// became a positional of its own.
fn zsh_positionals(script: &str) -> String {
    let mut lines: Vec<&str> = Vec::new();
    for line in script.lines() {
        if line.starts_with("'*::after_dashes -- ") {
            continue;
        }
        if line.starts_with("'*::words -- ")
            && lines
                .last()
                .is_some_and(|last| last.starts_with("'::name -- "))
        {
            lines.pop();
            lines.push(
                "'*::command -- The lock'\\''s name (unless --key), then the command and its arguments:_cmdambivalent' \\",
            );
            continue;
        }
        lines.push(line);
    }
    let mut joined = lines.join("\n");
    joined.push('\n');
    joined
}

/// What clap's fish script lacks: the pages after `man` (it offers no positional's values),
/// and after `run ... --` the completions of the command being run.
fn fish_additions() -> String {
    format!(
        r#"
complete -c redlock -n "__fish_redlock_using_subcommand man" -f -a "{pages}"
function __fish_redlock_after_dashes
    set -l words (commandline -opc)
    set -l at (contains -i -- -- $words); or return 1
    __fish_complete_subcommand --commandline $words[(math $at + 1)..-1] (commandline -ct)
end
complete -c redlock -n "__fish_redlock_using_subcommand run; and contains -- -- (commandline -opc)" -x -a "(__fish_redlock_after_dashes)"
"#,
        pages = crate::cli::man_pages().join(" ")
    )
}
