//! The arguments of the commands that serve the shell rather than locks: completion scripts
//! and the manual pages.

use std::path::PathBuf;

use clap::Args;
use clap_complete::Shell;

/// Print a shell completion script to stdout
///
/// e.g. `redlock completions bash > /etc/bash_completion.d/redlock`
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// Shell to generate for
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Print a manual page, or install them all
///
/// `redlock man run | man -l -` reads one; `sudo "$(command -v redlock)" man --install
/// /usr/local/share/man` puts every page where `man` finds it (sudo searches a PATH of its own,
/// without ~/.cargo/bin).
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The command whose page to print (default: the overview)
    #[arg(value_name = "COMMAND", value_parser = PageName)]
    pub command: Option<String>,

    /// Write every page into DIR/man1 instead (e.g. /usr/local/share/man)
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub install: Option<PathBuf>,
}

/// The commands that have a manual page (`redlock man COMMAND`), in the order of `--help`:
/// every command of clap's tree but the hidden ones (which redlock runs itself).
pub fn man_pages() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        // Built once and kept for the process, so the names live as long as it does.
        let tree: &'static clap::Command =
            Box::leak(Box::new(<super::Cli as clap::CommandFactory>::command()));
        tree.get_subcommands()
            .filter(|command| !command.is_hide_set())
            .map(clap::Command::get_name)
            .collect()
    })
}

/// `redlock man`'s COMMAND: any word parses (the command says which pages exist, in its own
/// words), but the pages are the possible values, for help and shell completion.
#[derive(Clone)]
struct PageName;

impl clap::builder::TypedValueParser for PageName {
    type Value = String;

    fn parse_ref(
        &self,
        command: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(command, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            man_pages()
                .iter()
                .map(|name| clap::builder::PossibleValue::new(*name)),
        ))
    }
}
