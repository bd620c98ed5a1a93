//! `redlock man`: the manual pages, built into the binary so that installing them needs
//! nothing but redlock. They are the pages in `man/`, which a test regenerates from the
//! command-line definition and compares (`tests/docs.rs`).

use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{OFlag, open, openat, renameat};
use nix::sys::stat::{Mode, fchmod};
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::print_line;
use crate::cli::{ManArgs, man_pages};
use crate::exit::{Done, Failure, fail};

// Every page, by file name: `PAGES`, the files of `man/` (build.rs lists them; a test checks
// that they are what clap's tree generates today).
include!(concat!(env!("OUT_DIR"), "/man_pages.rs"));

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
                    man_pages().join(", ")
                ),
            )
        })?;
    print_line(page.trim_end())?;
    Ok(Done::Success)
}

/// Writes every page into `root/man1`, creating it. Often run as root into a directory
/// others may have touched: neither `root`, `man1` nor a page is followed if it is a
/// symbolic link (a link in place of a page is replaced, its target left alone), and pages
/// are 0644 and a created `man1` 0755 whatever the umask.
fn install(root: &Path) -> anyhow::Result<Done> {
    let dir = root.join("man1");
    let failed =
        |err: &dyn std::fmt::Display| fail(Failure::Output, format!("{}: {err}", dir.display()));
    refuse_link(root)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(root)
        .map_err(|err| fail(Failure::Output, format!("{}: {err}", root.display())))?;
    refuse_link(&dir)?;
    let created = match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
        Ok(()) => true,
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(err) => return Err(failed(&err)),
    };
    // O_NOFOLLOW: a link put in its place since the check is refused, not followed; every
    // later step is relative to this descriptor, not to the path.
    let man1 = open(
        &dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|err| match err {
        Errno::ELOOP | Errno::ENOTDIR => not_a_directory(&dir),
        err => failed(&err),
    })?;
    if created {
        fchmod(&man1, Mode::from_bits_truncate(0o755)).map_err(|err| failed(&err))?;
    }
    for (file, page) in PAGES {
        write_page(&man1, file, page).map_err(|err| failed(&format_args!("{file}: {err}")))?;
    }
    print_line(format_args!(
        "installed {} pages in {}",
        PAGES.len(),
        dir.display()
    ))?;
    Ok(Done::Success)
}

/// Writes `page` as `file` in the directory `man1`: into a new temporary file there (never an
/// existing file, never through a link), renamed over `file` once whole.
fn write_page(man1: &OwnedFd, file: &str, page: &str) -> std::io::Result<()> {
    let temporary = format!(".{file}.{}.tmp", std::process::id());
    let created = openat(
        man1,
        temporary.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )?;
    let written = (|| -> std::io::Result<()> {
        // The mode given at creation loses what the umask takes away; fchmod's does not.
        fchmod(&created, Mode::from_bits_truncate(0o644))?;
        std::fs::File::from(created).write_all(page.as_bytes())?;
        // rename replaces a link named `file` itself, not what it points to.
        renameat(man1, temporary.as_str(), man1, file)?;
        Ok(())
    })();
    if written.is_err() {
        let _ = unlinkat(man1, temporary.as_str(), UnlinkatFlags::NoRemoveDir);
    }
    written
}

/// Refuses `path` if it is a symbolic link (that it is missing is fine: it is created).
fn refuse_link(path: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(not_a_directory(path)),
        _ => Ok(()),
    }
}

fn not_a_directory(path: &Path) -> anyhow::Error {
    fail(
        Failure::Usage,
        format!(
            "man --install: {} is a symbolic link or not a directory; give the real directory",
            path.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names `man` lists and completion offers are exactly the pages built in.
    #[test]
    fn every_page_is_named_and_every_name_has_a_page() {
        let mut files: Vec<String> = man_pages()
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
