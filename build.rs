//! Build script: tells `redlock --version` the git commit it was built from and the target it
//! was built for (musl or glibc), writes the prelude of the Lua scripts with its constants in
//! place (`src/lua_constants.rs`), and names each script by its SHA-1 (`src/scripts.rs`).
//! Std only. The version part never fails: outside a git checkout of this repository (a
//! source tarball, a crate from a registry) the commit is "unknown commit".

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "src/sha1.rs"]
mod sha1;

// (Public for the tests, which the crate re-exports it to.)
#[allow(unreachable_pub)]
#[path = "src/lua_constants.rs"]
mod lua_constants;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown target".to_owned());
    let commit = commit(&manifest_dir).unwrap_or_else(|| "unknown commit".to_owned());
    println!("cargo:rustc-env=REDLOCK_COMMIT={commit}");
    println!("cargo:rustc-env=REDLOCK_TARGET={target}");
    println!("cargo:rerun-if-changed=build.rs");
    script_shas(&manifest_dir);
    man_pages(&manifest_dir);
}

/// Writes `$OUT_DIR/man_pages.rs`: `PAGES`, each file of `man/` (the pages generated from
/// clap's command tree) by name, with its text, for `redlock man` to carry.
fn man_pages(manifest_dir: &Path) {
    let man = manifest_dir.join("man");
    println!("cargo:rerun-if-changed={}", man.display());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&man)
        .unwrap_or_else(|err| panic!("man/: {err}"))
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "1"))
        .collect();
    files.sort();
    let mut pages = String::from(
        "/// Every page, by file name.\npub(crate) const PAGES: &[(&str, &str)] = &[\n",
    );
    for path in files {
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .expect("a UTF-8 name");
        writeln!(
            pages,
            "    ({name:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .expect("a String takes any text");
    }
    pages.push_str("];\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("man_pages.rs"), pages).expect("OUT_DIR is writable");
}

/// Writes `$OUT_DIR/prelude.lua`, the files of `lua/prelude/` joined in file-name order (the
/// helpers every script shares, kept by concern) with their constants' uses written as their
/// values (`src/lua_constants.rs`), and `$OUT_DIR/script_shas.rs`: a macro
/// `script_sha!("<file>.lua")` giving the SHA-1 that Redis names the script by (the prelude,
/// then the file: the text `src/scripts.rs` sends).
fn script_shas(manifest_dir: &Path) {
    let lua = manifest_dir.join("lua");
    println!("cargo:rerun-if-changed={}", lua.display());
    let read =
        |path: &Path| std::fs::read(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let lua_files = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.ends_with(".lua"))
            .collect();
        names.sort();
        names
    };
    let mut joined = Vec::new();
    for name in lua_files(&lua.join("prelude")) {
        joined.extend(read(&lua.join("prelude").join(name)));
    }
    let joined = String::from_utf8(joined).expect("lua/prelude/ is UTF-8");
    let prelude = lua_constants::inline_constants(&joined).into_bytes();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("prelude.lua"), &prelude).expect("OUT_DIR is writable");
    let names = lua_files(&lua);
    let mut arms = String::new();
    for name in names {
        let mut body = prelude.clone();
        body.extend(read(&lua.join(&name)));
        let sha = sha1::sha1_hex(&body);
        let sha = std::str::from_utf8(&sha).expect("hex digits are ASCII");
        writeln!(arms, "    ({name:?}) => {{ {sha:?} }};").expect("a String takes any text");
    }
    let text = format!("macro_rules! script_sha {{\n{arms}}}\n");
    std::fs::write(out.join("script_shas.rs"), text).expect("OUT_DIR is writable");
}

/// `git` run in `dir`: its trimmed output, or None if it is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

/// The abbreviated commit of `dir`'s checkout, if `dir` is the top of one: a source tarball
/// unpacked inside another repository must not take that repository's commit.
fn commit(dir: &Path) -> Option<String> {
    let top = git(dir, &["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != dir.canonicalize().ok()? {
        return None;
    }
    let commit = git(dir, &["rev-parse", "--short=7", "HEAD"])?;
    // Build again when HEAD moves: HEAD itself, and the branch it names: its file, or while
    // the branch is only in packed-refs, that file and the directory its own file will be
    // written to. A missing path would make Cargo run this script on every build.
    let mut watched = vec![dir.join(git(dir, &["rev-parse", "--git-path", "HEAD"])?)];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        let loose = dir.join(git(dir, &["rev-parse", "--git-path", &branch])?);
        if loose.exists() {
            watched.push(loose);
        } else {
            watched.extend(loose.parent().map(Path::to_owned));
            watched.push(dir.join(git(dir, &["rev-parse", "--git-path", "packed-refs"])?));
        }
    }
    for path in watched.into_iter().filter(|path| path.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Some(commit)
}
