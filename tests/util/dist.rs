//! The release files under test, and what runs them. `REDLOCK_DIST` names the directory
//! `dist/package` made them in (.ci/run sets it after making them, so that the tests check the
//! very files the release workflow uploads); the aarch64 build runs here under qemu-user. A
//! test that needs what only CI is sure to have says why it is skipped, and fails instead
//! under CI (`CI` set), where .ci/run provides it.

use std::path::{Path, PathBuf};
use std::process::Command;

pub const X86_64: &str = "x86_64-unknown-linux-musl";
pub const AARCH64: &str = "aarch64-unknown-linux-musl";
/// The targets redlock is released for, as dist/package builds them.
pub const RELEASE_TARGETS: [&str; 2] = [X86_64, AARCH64];

/// The directory of release files that `REDLOCK_DIST` names, if set.
pub fn release_dir() -> Option<PathBuf> {
    std::env::var_os("REDLOCK_DIST")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
}

/// A test's precondition is missing: under CI a failure, elsewhere a line saying why the test
/// is skipped.
#[track_caller]
pub fn missing(why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}: CI must run this test (.ci/run provides what it needs)"
    );
    println!("skipped: {why}");
}

/// The release files, or None after saying why (see `missing`).
#[track_caller]
pub fn release_dir_or_skip() -> Option<PathBuf> {
    let dir = release_dir();
    if dir.is_none() {
        missing(
            "no release files: REDLOCK_DIST is unset (run dist/package, then \
             REDLOCK_DIST=target/dist cargo test; .ci/run does)",
        );
    }
    dir
}

/// qemu-user's aarch64 emulator, or None after saying why (see `missing`).
#[track_caller]
pub fn qemu_aarch64_or_skip() -> Option<PathBuf> {
    let found = which("qemu-aarch64-static");
    if found.is_none() {
        missing("qemu-aarch64-static is not installed (package qemu-user-static)");
    }
    found
}

/// The binary in the release tarball for `target` in `dist`, unpacked into `dir`.
pub fn tarball_binary(dist: &Path, target: &str, dir: &Path) -> PathBuf {
    let name = format!("redlock-{}-{target}", env!("CARGO_PKG_VERSION"));
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(dist.join(format!("{name}.tar.gz")))
        .arg("-C")
        .arg(dir)
        .arg(format!("{name}/redlock"))
        .status()
        .expect("run tar");
    assert!(status.success(), "tar could not unpack {name}/redlock");
    dir.join(name).join("redlock")
}

/// The architecture an ELF file is for, from its header's e_machine (little-endian files).
pub fn elf_arch(binary: &Path) -> &'static str {
    let header = std::fs::read(binary).unwrap_or_else(|err| panic!("{}: {err}", binary.display()));
    assert_eq!(
        &header[..4],
        b"\x7fELF",
        "{} is no ELF file",
        binary.display()
    );
    match u16::from_le_bytes([header[18], header[19]]) {
        62 => "x86_64",
        183 => "aarch64",
        other => panic!("{}: ELF machine {other}", binary.display()),
    }
}

/// How to run `binary` here: itself, or under qemu-user when built for another architecture.
pub fn runner(binary: &Path) -> Command {
    if elf_arch(binary) == std::env::consts::ARCH {
        Command::new(binary)
    } else {
        let emulator = which("qemu-aarch64-static").expect("qemu-aarch64-static runs it");
        let mut command = Command::new(emulator);
        command.arg(binary);
        command
    }
}

/// Where `program` is on PATH.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// The x86_64 image archive to test: the release files' (REDLOCK_DIST), or else one that
/// dist/package makes into `dir` of the binary under test, which must then be the static musl
/// build; None after saying why where neither can be had (see `missing`).
#[track_caller]
pub fn image_archive(dir: &Path) -> Option<PathBuf> {
    let name = format!("redlock-{}-{X86_64}-image.tar", env!("CARGO_PKG_VERSION"));
    if let Some(release) = release_dir() {
        return Some(release.join(name));
    }
    if !cfg!(all(target_arch = "x86_64", target_env = "musl")) {
        missing("the binary under test is not the x86_64 static musl build, which an image holds");
        return None;
    }
    if which("podman").is_none() {
        missing("podman is not installed");
        return None;
    }
    let out = dir.join("image");
    let status = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/package"))
        .args(["--binary", super::REDLOCK, "--out"])
        .arg(&out)
        .arg("image")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run dist/package");
    assert!(status.success(), "dist/package image: {status}");
    Some(out.join(name))
}
