//! Installing redlock like a system tool: `--version` names the commit and the target
//! (build.rs); the release files dist/package makes for x86_64 and aarch64 (those in
//! `REDLOCK_DIST`, as the release workflow uploads them, or else the binary under test
//! packaged here): SHA256SUMS verifies them all, each .deb installs into a temporary root with
//! dpkg and leaves nothing when removed, passes lintian and has a real maintainer and
//! changelog, each tarball unpacks and runs (aarch64's under qemu-user), each image holds the
//! binary and nothing else and runs it as a user; the README's install commands work for a
//! user with sudo. The release workflow runs only what CI runs; the crate holds what the build
//! needs, and the binary installed from it runs. The committed completion scripts are checked
//! with man/ by `docs::man_pages_are_fresh`.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{REDLOCK, RedisServer, Redlock, TempDir, dist};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The completion scripts in completions/, by shell.
const COMPLETIONS: &[(&str, &str)] = &[
    ("bash", "redlock.bash"),
    ("zsh", "_redlock"),
    ("fish", "redlock.fish"),
];
/// Where the Debian package puts each completion script, by file in completions/.
const DEB_COMPLETIONS: &[(&str, &str)] = &[
    (
        "redlock.bash",
        "usr/share/bash-completion/completions/redlock",
    ),
    ("_redlock", "usr/share/zsh/vendor-completions/_redlock"),
    (
        "redlock.fish",
        "usr/share/fish/vendor_completions.d/redlock.fish",
    ),
];

/// completions/ holds what `redlock completions SHELL` prints today; with UPDATE_MAN set it is
/// rewritten first. `docs::man_pages_are_fresh` calls this, so that the one documented command
/// regenerates man/ and completions/.
pub(crate) fn completions_are_fresh() {
    let dir = Path::new(ROOT).join("completions");
    let stale = "completions/ is stale; regenerate it with: UPDATE_MAN=1 cargo test --test integration man_pages_are_fresh";
    for (shell, file) in COMPLETIONS {
        let out = Redlock::new(&["completions", shell]).run();
        out.code(0);
        if std::env::var_os("UPDATE_MAN").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(file), &out.stdout).unwrap();
        }
        let committed = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        assert!(committed == out.stdout, "completions/{file}: {stale}");
    }
    let on_disk = names(&dir);
    let expected: BTreeSet<String> = COMPLETIONS
        .iter()
        .map(|(_, file)| (*file).to_owned())
        .collect();
    assert_eq!(on_disk, expected, "{stale}");
}

/// `redlock --version` and `-V`: `redlock VERSION (COMMIT TARGET)`, the commit being the
/// checkout's HEAD when built from this repository's checkout.
#[test]
fn version_names_the_commit_and_the_target() {
    let line = version_line(Path::new(REDLOCK));
    let out = Redlock::new(&["-V"]).run();
    out.code(0);
    assert_eq!(out.stdout.trim(), line, "-V and --version differ");
    let inner = line
        .strip_prefix(&format!("redlock {VERSION} ("))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not 'redlock {VERSION} (COMMIT TARGET)': {line:?}"));
    let (commit, target) = inner.rsplit_once(' ').unwrap();
    let env = if cfg!(target_env = "musl") {
        "-linux-musl"
    } else {
        "-linux-gnu"
    };
    assert!(
        target.starts_with(std::env::consts::ARCH) && target.ends_with(env),
        "the target {target:?} is not this build's ({} ... {env})",
        std::env::consts::ARCH
    );
    let root = Path::new(ROOT);
    let top = git(root, &["rev-parse", "--show-toplevel"]);
    let expected = match top {
        Some(top) if Path::new(&top).canonicalize().ok() == root.canonicalize().ok() => {
            git(root, &["rev-parse", "--short=7", "HEAD"]).unwrap()
        }
        _ => "unknown commit".to_owned(),
    };
    assert_eq!(commit, expected, "{line}");
}

/// build.rs, compiled alone and run as Cargo runs it: the commit of a checkout whose top is
/// the package; "unknown commit" for a package inside another checkout (a source tarball
/// unpacked in some repository) and where git is missing; never a failure. (It also names the
/// package's Lua scripts by their SHA-1, which the library's unit tests check.)
#[test]
fn build_script_names_the_commit_or_says_it_is_unknown() {
    let dir = TempDir::new("build-script");
    let script = dir.path().join("build-script");
    check(
        Command::new("rustc")
            .args(["--edition", "2024", "--crate-name", "build_script", "-o"])
            .arg(&script)
            .arg(Path::new(ROOT).join("build.rs")),
    );
    let checkout = dir.path().join("checkout");
    std::fs::create_dir_all(checkout.join("unpacked")).unwrap();
    // Each package has its scripts (the prelude's files in lua/prelude/) and its man pages.
    for package in [checkout.clone(), checkout.join("unpacked")] {
        for folder in ["lua", "lua/prelude", "man"] {
            std::fs::create_dir_all(package.join(folder)).unwrap();
            for file in std::fs::read_dir(Path::new(ROOT).join(folder)).unwrap() {
                let file = file.unwrap();
                if file.file_type().unwrap().is_file() {
                    std::fs::copy(file.path(), package.join(folder).join(file.file_name()))
                        .unwrap();
                }
            }
        }
    }
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    for args in [
        &["init", "-q"][..],
        &[
            "-c",
            "user.name=test",
            "-c",
            "user.email=test@example.invalid",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "a commit",
        ],
    ] {
        check(Command::new("git").arg("-C").arg(&checkout).args(args));
    }
    let head = git(&checkout, &["rev-parse", "--short=7", "HEAD"]).unwrap();
    let no_git = dir.path().join("empty-path");
    std::fs::create_dir_all(&no_git).unwrap();
    let path = std::env::var("PATH").unwrap();
    // What it tells Cargo, and the paths it asks Cargo to watch, which all exist (a missing
    // one would mean a rebuild every time).
    let run = |manifest_dir: &Path, path: &str| {
        let out = check(
            Command::new(&script)
                .env_clear()
                .env("PATH", path)
                .env("CARGO_MANIFEST_DIR", manifest_dir)
                .env("OUT_DIR", &out_dir)
                .env("TARGET", "x86_64-unknown-linux-musl"),
        );
        assert!(out.contains("cargo:rustc-env=REDLOCK_TARGET=x86_64-unknown-linux-musl\n"));
        let scripts = manifest_dir.join("lua");
        assert!(
            out.contains(&format!("cargo:rerun-if-changed={}\n", scripts.display())),
            "{out}"
        );
        let shas = std::fs::read_to_string(out_dir.join("script_shas.rs")).unwrap();
        assert!(
            shas.contains("(\"acquire.lua\") => {") && !shas.contains("prelude.lua"),
            "{shas}"
        );
        let prelude = std::fs::read_to_string(out_dir.join("prelude.lua")).unwrap();
        assert!(prelude.starts_with("-- prelude:"), "{prelude}");
        let man = manifest_dir.join("man");
        let pages = std::fs::read_to_string(out_dir.join("man_pages.rs")).unwrap();
        assert!(
            pages.contains("(\"redlock-run.1\", include_str!("),
            "{pages}"
        );
        let watched: Vec<PathBuf> = out
            .lines()
            .filter_map(|line| line.strip_prefix("cargo:rerun-if-changed="))
            .filter(|watched| {
                *watched != "build.rs" && Path::new(watched) != scripts && Path::new(watched) != man
            })
            .map(PathBuf::from)
            .collect();
        for path in &watched {
            assert!(path.exists(), "{}: {out}", path.display());
        }
        (out, watched)
    };
    for (manifest_dir, path, commit) in [
        (checkout.clone(), path.as_str(), head.as_str()),
        (checkout.join("unpacked"), &path, "unknown commit"),
        (checkout.clone(), no_git.to_str().unwrap(), "unknown commit"),
    ] {
        let (out, watched) = run(&manifest_dir, path);
        assert!(
            out.contains(&format!("cargo:rustc-env=REDLOCK_COMMIT={commit}\n")),
            "{}: {out}",
            manifest_dir.display()
        );
        if commit != "unknown commit" {
            let git_dir = checkout.join(".git");
            assert_eq!(
                watched,
                [
                    git_dir.join("HEAD"),
                    git_dir.join(git(&checkout, &["symbolic-ref", "HEAD"]).unwrap())
                ],
                "{out}"
            );
        }
    }
    // A branch only in packed-refs: that file, and the directory where the branch's own file
    // will appear; never the whole git directory, which changes with every git command.
    check(
        Command::new("git")
            .arg("-C")
            .arg(&checkout)
            .args(["pack-refs", "--all"]),
    );
    let (out, watched) = run(&checkout, &path);
    assert!(out.contains(&format!("REDLOCK_COMMIT={head}\n")), "{out}");
    let git_dir = checkout.join(".git");
    assert_eq!(
        watched,
        [
            git_dir.join("HEAD"),
            git_dir.join("refs/heads"),
            git_dir.join("packed-refs")
        ],
        "{out}"
    );
}

/// The release tarball of each architecture: SHA256SUMS verifies it; it unpacks into one
/// directory named for the version and the target, holding the binary, the committed man
/// pages and completion scripts, the README, the documents it links to (docs/, lua/README.md)
/// and the licences; the binary runs from there (the aarch64 one under qemu-user), and says
/// the version, commit and target of its name; no link of its documents leads to a missing
/// file. Repro: it held README.md without docs/, whose links were all dead.
#[test]
fn release_tarball_verifies_unpacks_and_runs() {
    let dir = TempDir::new("tarball");
    let (out, targets) = release_files(dir.path(), &["tarball"]);
    let verified = check(
        Command::new("sha256sum")
            .args(["--check", "SHA256SUMS"])
            .current_dir(&out),
    );
    for target in &targets {
        let name = format!("redlock-{VERSION}-{target}");
        assert!(
            verified
                .lines()
                .any(|line| line == format!("{name}.tar.gz: OK")),
            "SHA256SUMS does not verify {name}.tar.gz:\n{verified}"
        );
        let unpacked = dir.path().join("unpacked").join(target);
        std::fs::create_dir_all(&unpacked).unwrap();
        check(
            Command::new("tar")
                .arg("-xzf")
                .arg(out.join(format!("{name}.tar.gz")))
                .arg("-C")
                .arg(&unpacked),
        );
        assert_eq!(names(&unpacked), BTreeSet::from([name.clone()]));
        let tree = unpacked.join(&name);
        assert_eq!(
            names(&tree),
            [
                "LICENSE-APACHE",
                "LICENSE-MIT",
                "README.md",
                "completions",
                "docs",
                "lua",
                "man",
                "redlock"
            ]
            .map(str::to_owned)
            .into()
        );
        let root = Path::new(ROOT);
        for (unpacked, committed) in [
            (tree.join("man"), root.join("man")),
            (tree.join("completions"), root.join("completions")),
            (tree.join("docs"), root.join("docs")),
        ] {
            same_files(&unpacked, &committed);
        }
        for file in [
            "README.md",
            "LICENSE-MIT",
            "LICENSE-APACHE",
            "lua/README.md",
        ] {
            assert_eq!(read(&tree.join(file)), read(&root.join(file)), "{file}");
        }
        assert_eq!(
            names(&tree.join("lua")),
            BTreeSet::from(["README.md".to_owned()])
        );
        assert_eq!(dead_links(&tree), Vec::<String>::new());
        assert_eq!(mode(&tree.join("redlock")), 0o755);
        assert_eq!(dist::elf_arch(&tree.join("redlock")), arch_of(target));
        if arch_of(target) != std::env::consts::ARCH && dist::qemu_aarch64_or_skip().is_none() {
            continue;
        }
        assert_eq!(
            version_line(&tree.join("redlock")),
            version_line_for(target)
        );
    }
}

/// The Debian package of each architecture, installed with `dpkg --root` into a temporary
/// root (the machine's own package database is never touched): its control fields, every
/// file where Debian wants it (the same paths and modes in the amd64 and the arm64 package),
/// the binary running (arm64's under qemu-user), `man redlock` reading the gzipped pages, the
/// completion scripts loading, and after `dpkg -r` nothing left but the temporary root's own
/// dpkg database.
#[test]
fn deb_installs_into_a_temporary_root_and_removes_every_file() {
    if let Some(why) = cannot_run_as_root(&["dpkg", "dpkg-deb", "man"]) {
        println!("skipped: {why}");
        return;
    }
    let dir = TempDir::new("deb");
    let (out, targets) = release_files(dir.path(), &["deb"]);
    check(
        Command::new("sha256sum")
            .args(["--check", "SHA256SUMS"])
            .current_dir(&out),
    );
    let root = Path::new(ROOT);
    let mut expected = BTreeSet::from([("usr/bin/redlock".to_owned(), "-rwxr-xr-x")]);
    for page in names(&root.join("man")) {
        expected.insert((format!("usr/share/man/man1/{page}.gz"), "-rw-r--r--"));
    }
    for (_, installed) in DEB_COMPLETIONS {
        expected.insert(((*installed).to_owned(), "-rw-r--r--"));
    }
    for doc in [
        "copyright",
        "changelog.Debian.gz",
        "README.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
    ] {
        expected.insert((format!("usr/share/doc/redlock/{doc}"), "-rw-r--r--"));
    }
    for doc in names(&root.join("docs")) {
        expected.insert((format!("usr/share/doc/redlock/docs/{doc}"), "-rw-r--r--"));
    }
    expected.insert((
        "usr/share/lintian/overrides/redlock".to_owned(),
        "-rw-r--r--",
    ));
    expected.insert((
        "usr/share/doc/redlock/lua/README.md".to_owned(),
        "-rw-r--r--",
    ));
    for target in &targets {
        let arch = debian_arch(target);
        let deb = out.join(format!("redlock_{VERSION}-1_{arch}.deb"));
        let field = |name: &str| check(Command::new("dpkg-deb").arg("--field").arg(&deb).arg(name));
        assert_eq!(field("Package").trim(), "redlock");
        assert_eq!(field("Version").trim(), format!("{VERSION}-1"));
        assert_eq!(field("Architecture").trim(), arch);
        // The static binary needs no library.
        assert_eq!(field("Depends").trim(), "");

        // Every file the package holds, with its mode and owner.
        let contents = check(Command::new("dpkg-deb").arg("--contents").arg(&deb));
        let mut files = BTreeSet::new();
        for line in contents.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields[1], "root/root", "{line}");
            if !fields[0].starts_with('d') {
                files.insert((fields[5].trim_start_matches("./").to_owned(), fields[0]));
            }
        }
        assert_eq!(files, expected, "{}", deb.display());
        deb_installs_and_removes(&dir.path().join(arch), &deb, target);
    }
}

/// `deb` (for `target`) installed into a root of its own, with its own empty package
/// database, which knows the package's architecture; what it installed works; `dpkg -r`
/// leaves nothing.
fn deb_installs_and_removes(dir: &Path, deb: &Path, target: &str) {
    let root = Path::new(ROOT);
    let system = dir.join("root");
    let admin = system.join("var/lib/dpkg");
    for sub in ["info", "updates"] {
        std::fs::create_dir_all(admin.join(sub)).unwrap();
    }
    std::fs::write(admin.join("status"), "").unwrap();
    let dpkg = |args: &[&str]| {
        check(
            Command::new("timeout")
                .args(["60", "dpkg"])
                .arg(format!("--root={}", system.display()))
                .args(args),
        )
    };
    let arch = debian_arch(target);
    if dpkg(&["--print-architecture"]).trim() != arch {
        dpkg(&["--add-architecture", arch]);
    }
    dpkg(&["-i", deb.to_str().unwrap()]);
    assert!(dpkg(&["-s", "redlock"]).contains("Status: install ok installed"));
    let usr = system.join("usr");
    let binary = usr.join("bin/redlock");
    assert_eq!(dist::elf_arch(&binary), arch_of(target));
    if arch_of(target) == std::env::consts::ARCH || dist::qemu_aarch64_or_skip().is_some() {
        assert_eq!(version_line(&binary), version_line_for(target));
    }
    assert_eq!(
        dead_links(&usr.join("share/doc/redlock")),
        Vec::<String>::new()
    );
    for (file, installed) in DEB_COMPLETIONS {
        assert_eq!(
            read(&system.join(installed)),
            read(&root.join("completions").join(file))
        );
    }

    // man finds and formats every page, gzipped as Debian keeps them.
    let manpath = usr.join("share/man");
    for page in names(&root.join("man")) {
        let name = page.trim_end_matches(".1");
        let text = check(
            Command::new("man")
                .arg("-M")
                .arg(&manpath)
                .args(["-P", "cat", name])
                .env("MANWIDTH", "80"),
        );
        assert!(text.contains("NAME"), "man {name}: {text}");
        assert!(text.contains(&format!("{name}(1)")), "man {name}: {text}");
    }
    let overview = check(
        Command::new("man")
            .arg("-M")
            .arg(&manpath)
            .args(["-P", "cat", "redlock"]),
    );
    assert!(overview.contains("EXIT STATUS"), "{overview}");

    // The scripts load for the native build (an emulated one runs the same scripts).
    if arch_of(target) == std::env::consts::ARCH {
        let share = usr.join("share");
        completions_load(
            &usr.join("bin"),
            &share,
            Some(&share.join("zsh/vendor-completions")),
            &dir.join("shell-home"),
        );
    }

    dpkg(&["-r", "redlock"]);
    let status = Command::new("dpkg")
        .arg(format!("--root={}", system.display()))
        .args(["-s", "redlock"])
        .output()
        .unwrap();
    assert!(!status.status.success(), "still known after -r: {status:?}");
    let left: Vec<String> = walk(&system)
        .into_iter()
        .filter(|path| {
            !Path::new("var/lib/dpkg").starts_with(path) && !path.starts_with("var/lib/dpkg")
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(left.is_empty(), "dpkg -r left {left:?}");
}

/// README's first block takes a newcomer with a clone and a Redis from nothing to a locked
/// command in two commands: build and install from the checkout, then run. (cargo's build
/// is not repeated here; the binary it makes is the one under test, put where it installs
/// it.) Repro: the first block needed release files that exist nowhere yet.
#[test]
fn readme_starts_with_two_commands_from_a_checkout() {
    let readme = read(&Path::new(ROOT).join("README.md"));
    let first = readme_block(&readme, "## From nothing");
    let commands: Vec<&str> = first
        .lines()
        .map(|line| line.split("  #").next().unwrap().trim())
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    assert_eq!(commands.len(), 2, "{first}");
    assert_eq!(commands[0], "cargo install --locked --path .", "{first}");
    assert!(
        readme.find("```sh").unwrap() > readme.find("## From nothing").unwrap(),
        "the README's first commands are not this block"
    );
    let server = RedisServer::start();
    let home = TempDir::new("newcomer");
    let cargo_bin = home.path().join(".cargo/bin");
    std::fs::create_dir_all(&cargo_bin).unwrap();
    std::fs::copy(REDLOCK, cargo_bin.join("redlock")).unwrap();
    let run = commands[1].replace("redis://redis.internal:6379", &server.url());
    assert_ne!(
        run, commands[1],
        "the run names no Redis URL to point at the test's"
    );
    let out = Command::new("sh")
        .args(["-c", &run])
        .env("HOME", home.path())
        // (rustup's ~/.cargo/env puts ~/.cargo/bin on PATH.)
        .env(
            "PATH",
            format!("{}:{}", cargo_bin.display(), std::env::var("PATH").unwrap()),
        )
        .env_remove("REDLOCK_URL")
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{run}: {out:?}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "I hold the lock\n");
}

/// README's install commands, exactly as written but for /usr/local (a directory of the test
/// that only root may write) and the Redis URL, run by a throwaway user that has sudo, in its
/// login shell: the release files' block of "From nothing", the tarball's, and the cargo user's
/// (docs/development.md; the binary
/// `cargo install` would build placed in its ~/.cargo/bin: the user has no toolchain).
#[test]
fn readme_install_commands_work_for_a_user_with_sudo() {
    let readme = read(&Path::new(ROOT).join("README.md"));
    let development = read(&Path::new(ROOT).join("docs/development.md"));
    // The forms that fail under sudo: rustup's cargo with root's HOME, redlock not on sudo's
    // PATH. No command in the README or docs/development.md uses them.
    for block in [&readme, &development]
        .into_iter()
        .flat_map(|text| text.split("```sh\n").skip(1))
    {
        let block = &block[..block.find("```").unwrap()];
        for wrong in ["sudo ~/.cargo/bin/cargo", "sudo cargo", "sudo redlock "] {
            assert!(
                !block.contains(wrong),
                "the docs still say `{wrong}`:\n{block}"
            );
        }
    }
    let lead = readme_block(&readme, "For the hosts that run the job, the release files");
    let tarball = readme_block(&readme, "**From the release tarball**");
    let cargo = readme_block(&development, "**With cargo**");
    let file = format!("redlock-{VERSION}-x86_64-unknown-linux-musl.tar.gz");
    assert!(
        lead.contains(&file) && tarball.contains(&file),
        "README's install commands do not name {file}"
    );
    if let Some(why) = cannot_run_as_root(&["sudo", "useradd", "userdel", "runuser", "timeout"]) {
        println!("skipped: {why}");
        return;
    }
    let dir = TempDir::new("sudo-install");
    let (out, _) = release_files(dir.path(), &["tarball"]);
    let user = SudoUser::create();
    for name in ["SHA256SUMS".to_owned(), file.clone()] {
        user.give(&out.join(&name), &name);
    }
    let server = RedisServer::start();
    let version = version_line_for(dist::X86_64);

    // Each block installs into a prefix of its own, which the user cannot write but by sudo.
    let prefix = |name: &str| {
        let prefix = dir.path().join(name);
        std::fs::create_dir_all(&prefix).unwrap();
        prefix.display().to_string()
    };
    let lead_prefix = prefix("lead");
    let lead = lead
        .replace("/usr/local", &format!("{lead_prefix}/usr/local"))
        .replace("redis://redis.internal:6379", &server.url());
    // No cron daemon here: the entry's command runs twice instead, as on two hosts (both
    // exit 0; the second finds the lock held, quietly).
    let cron_line = lead.lines().find(|line| line.contains("crontab")).unwrap();
    let entry = cron_line.split('\'').nth(1).unwrap();
    let command = entry
        .splitn(6, ' ')
        .nth(5)
        .unwrap()
        .replace("/opt/report/run.sh", "true");
    let lead: String = lead
        .lines()
        .filter(|line| !line.contains("crontab"))
        .map(|line| format!("{line}\n"))
        .collect();
    let said = user.run(&format!(
        "export PATH=\"{lead_prefix}/usr/local/bin:$PATH\"\n{lead}{command}\n{command}\n"
    ));
    assert_eq!(said, format!("{file}: OK\nI hold the lock\n"));
    installed_by_root(Path::new(&lead_prefix), &version, Installed::Binary);

    let tarball_prefix = prefix("tarball");
    let tarball = tarball.replace("/usr/local", &format!("{tarball_prefix}/usr/local"));
    let said = user.run(&format!(
        "export PATH=\"{tarball_prefix}/usr/local/bin:$PATH\"\n{tarball}"
    ));
    assert!(said.contains(&version), "{said}");
    installed_by_root(Path::new(&tarball_prefix), &version, Installed::Everything);

    // On arm64 the same commands with `aarch64` for `x86_64`, from the aarch64 tarball; its
    // `redlock --version` runs under qemu-user here.
    let arm64 = if dist::release_dir().is_some() {
        dist::qemu_aarch64_or_skip()
    } else {
        None
    };
    if let Some(qemu) = arm64 {
        let arm64_file = file.replace(dist::X86_64, dist::AARCH64);
        user.give(&out.join(&arm64_file), &arm64_file);
        let arm64_prefix = prefix("tarball-arm64");
        let block = readme_block(&readme, "**From the release tarball**")
            .replace(dist::X86_64, dist::AARCH64)
            .replace("/usr/local", &format!("{arm64_prefix}/usr/local"));
        let block = block.replace(
            "\nredlock --version\n",
            &format!(
                "\n{} {arm64_prefix}/usr/local/bin/redlock --version\n",
                qemu.display()
            ),
        );
        let said = user.run(&block);
        assert!(said.contains(&format!("{arm64_file}: OK\n")), "{said}");
        assert!(
            said.ends_with(&format!("{}\n", version_line_for(dist::AARCH64))),
            "{said}"
        );
        installed_by_root(
            Path::new(&arm64_prefix),
            &version_line_for(dist::AARCH64),
            Installed::Everything,
        );
    }

    // rustup's ~/.cargo/env puts ~/.cargo/bin on PATH; cargo's lines are the build itself.
    user.give(Path::new(REDLOCK), ".cargo/bin/redlock");
    let cargo_prefix = prefix("cargo");
    let cargo: String = cargo
        .replace("/usr/local", &format!("{cargo_prefix}/usr/local"))
        .lines()
        .filter(|line| !line.starts_with("cargo ") && !line.starts_with("rustup "))
        .map(|line| format!("{line}\n"))
        .collect();
    user.run(&format!("export PATH=\"$HOME/.cargo/bin:$PATH\"\n{cargo}"));
    installed_by_root(
        Path::new(&cargo_prefix),
        &version,
        Installed::BashCompletion,
    );
}

/// What a block of install commands installs besides the binary.
#[derive(Clone, Copy, PartialEq)]
enum Installed {
    Binary,
    /// The manual pages and bash's completion script.
    BashCompletion,
    /// The manual pages and every shell's completion script.
    Everything,
}

/// What the install left in `prefix`/usr/local: the binary, root's and 0755, reporting
/// `version`; unless `Installed::Binary`, every page, root's and 0644, that man reads, and the
/// completion scripts, root's and 0644, as committed, that the shells load.
fn installed_by_root(prefix: &Path, version: &str, installed: Installed) {
    let local = prefix.join("usr/local");
    let binary = local.join("bin/redlock");
    let owned = |path: &Path, expected: u32| {
        let meta =
            std::fs::metadata(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        assert_eq!(meta.uid(), 0, "{} is not root's", path.display());
        assert_eq!(
            meta.permissions().mode() & 0o777,
            expected,
            "{}",
            path.display()
        );
    };
    owned(&binary, 0o755);
    assert_eq!(version_line(&binary), version);
    if installed == Installed::Binary {
        assert_eq!(names(&local), BTreeSet::from(["bin".to_owned()]));
        return;
    }
    let root = Path::new(ROOT);
    let man1 = local.join("share/man/man1");
    same_files(&man1, &root.join("man"));
    for page in names(&man1) {
        owned(&man1.join(page), 0o644);
    }
    if which("man") {
        let text = check(
            Command::new("man")
                .arg("-M")
                .arg(local.join("share/man"))
                .args(["-P", "cat", "redlock-run"]),
        );
        assert!(text.contains("redlock-run(1)"), "{text}");
    }
    let mut scripts = vec![("redlock.bash", "share/bash-completion/completions/redlock")];
    let all_shells = installed == Installed::Everything;
    if all_shells {
        scripts.push(("_redlock", "share/zsh/site-functions/_redlock"));
        scripts.push((
            "redlock.fish",
            "share/fish/vendor_completions.d/redlock.fish",
        ));
    }
    for (file, installed) in scripts {
        owned(&local.join(installed), 0o644);
        assert_eq!(
            read(&local.join(installed)),
            read(&root.join("completions").join(file))
        );
    }
    let share = local.join("share");
    let zsh_functions = share.join("zsh/site-functions");
    completions_load(
        &local.join("bin"),
        &share,
        all_shells.then_some(zsh_functions.as_path()),
        &prefix.join("shell-home"),
    );
}

/// The completion scripts installed under `share` load for the `redlock` in `bin`: bash's
/// when sourced and through bash-completion's loader (where installed); zsh's from
/// `zsh_functions` through compinit and fish's from its vendor directory (where those shells
/// are installed, and unless `zsh_functions` is None: only bash's was installed).
fn completions_load(bin: &Path, share: &Path, zsh_functions: Option<&Path>, home: &Path) {
    std::fs::create_dir_all(home).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let shell = |program: &str, args: &[&str], script: String| {
        check(
            Command::new(program)
                .args(args)
                .arg(script)
                .env("HOME", home)
                .env("PATH", &path)
                // Where bash-completion and fish look for scripts of vendors.
                .env("XDG_DATA_DIRS", share),
        )
    };
    let bash = ["--norc", "--noprofile", "-c"];
    let bash_file = share.join("bash-completion/completions/redlock");
    let loaded = shell(
        "bash",
        &bash,
        format!("source '{}' && complete -p redlock", bash_file.display()),
    );
    assert!(
        loaded.contains("-F _redlock") && loaded.trim_end().ends_with(" redlock"),
        "{loaded}"
    );
    let loader = Path::new("/usr/share/bash-completion/bash_completion");
    if loader.exists() {
        let found = shell(
            "bash",
            &bash,
            format!(
                "source '{}'; __load_completion redlock && complete -p redlock",
                loader.display()
            ),
        );
        assert!(found.contains("-F _redlock"), "{found}");
    }
    let Some(zsh_functions) = zsh_functions else {
        return;
    };
    if which("zsh") {
        let found = shell(
            "zsh",
            &["-f", "-c"],
            format!(
                "fpath=('{}' $fpath); autoload -Uz compinit; compinit -u -d '{}/zcompdump'; print -r -- $_comps[redlock]",
                zsh_functions.display(),
                home.display()
            ),
        );
        assert_eq!(found.trim(), "_redlock");
    }
    if which("fish") {
        let found = shell("fish", &["-c"], "complete -C 'redlock '".to_owned());
        assert!(
            found.lines().any(|line| line.starts_with("run\t")),
            "{found}"
        );
    }
}

/// A throwaway user whose sudo needs no password; user and sudoers drop-in are removed in
/// `Drop`.
struct SudoUser {
    name: String,
    dropin: PathBuf,
}

impl SudoUser {
    fn create() -> Self {
        let name = format!("redlock-test-{}", std::process::id());
        // The guard exists before the user does: a failure half-way still cleans up.
        let user = Self {
            dropin: PathBuf::from(format!("/etc/sudoers.d/{name}")),
            name,
        };
        check(Command::new("useradd").args([
            "--create-home",
            "--shell",
            "/bin/sh",
            "--user-group",
            &user.name,
        ]));
        // Written whole under another name, then renamed: sudo never reads half a file.
        let draft = PathBuf::from(format!("/etc/sudoers.d/.{}", user.name));
        std::fs::write(&draft, format!("{} ALL=(ALL) NOPASSWD: ALL\n", user.name)).unwrap();
        std::fs::set_permissions(&draft, std::fs::Permissions::from_mode(0o440)).unwrap();
        std::fs::rename(&draft, &user.dropin).unwrap();
        user
    }

    fn home(&self) -> PathBuf {
        Path::new("/home").join(&self.name)
    }

    /// Copies `file` to `relative` in the user's home, the user's own.
    fn give(&self, file: &Path, relative: &str) {
        let to = self.home().join(relative);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(file, &to).unwrap();
        let owner = format!("{0}:{0}", self.name);
        check(Command::new("chown").args(["-R", &owner]).arg(self.home()));
    }

    /// Runs `script` in the user's login shell (`sh -e`), within two minutes; its stdout.
    fn run(&self, script: &str) -> String {
        check(
            Command::new("timeout")
                .args(["120", "runuser", "-l", &self.name, "-c"])
                .arg(format!("set -e\n{script}")),
        )
    }
}

impl Drop for SudoUser {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.dropin);
        let _ = Command::new("userdel")
            .args(["--remove", &self.name])
            .output();
    }
}

/// Why a test that changes the system (users, a package database) cannot run here, if so.
fn cannot_run_as_root(tools: &[&str]) -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("not root".to_owned());
    }
    tools
        .iter()
        .find(|tool| !which(tool))
        .map(|tool| format!("{tool} is not installed"))
}

/// The release files to test, and the targets they are for: those in `REDLOCK_DIST`, which
/// dist/package made for every release target (.ci/run), or else the binary under test
/// packaged here into `dir`/out (one target: the x86_64 one).
fn release_files(dir: &Path, what: &[&str]) -> (PathBuf, Vec<String>) {
    if let Some(release) = dist::release_dir() {
        return (release, dist::RELEASE_TARGETS.map(str::to_owned).to_vec());
    }
    let target = version_line(Path::new(REDLOCK))
        .rsplit_once(' ')
        .unwrap()
        .1
        .trim_end_matches(')')
        .to_owned();
    (package(dir, what), vec![target])
}

/// The architecture of a target, in Rust's words.
fn arch_of(target: &str) -> &str {
    target.split('-').next().unwrap()
}

/// The Debian architecture of a release target.
fn debian_arch(target: &str) -> &'static str {
    match arch_of(target) {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no Debian architecture for {other}"),
    }
}

/// What `--version` says for a build of this checkout for `target`: the binary under test's
/// line, with the target changed.
fn version_line_for(target: &str) -> String {
    let line = version_line(Path::new(REDLOCK));
    let (head, _) = line.rsplit_once(' ').unwrap();
    format!("{head} {target})")
}

/// Runs dist/package on the binary under test into `dir`/out; the output directory.
fn package(dir: &Path, what: &[&str]) -> PathBuf {
    let out = dir.join("out");
    check(
        Command::new("timeout")
            .arg("300")
            .arg(Path::new(ROOT).join("dist/package"))
            .args(["--binary", REDLOCK, "--out"])
            .arg(&out)
            .args(what),
    );
    out
}

/// `binary --version`, trimmed (an aarch64 binary run under qemu-user).
fn version_line(binary: &Path) -> String {
    check(dist::runner(binary).arg("--version"))
        .trim()
        .to_owned()
}

/// Runs `command` to its end; its stdout. A failure panics with everything it said.
fn check(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|err| panic!("{command:?}: {err}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{command:?}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn which(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", "command -v \"$1\" >/dev/null", "sh", tool])
        .status()
        .is_ok_and(|status| status.success())
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The names in a directory.
fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// `copy` holds the files of `original`, byte for byte, and nothing else.
fn same_files(copy: &Path, original: &Path) {
    assert_eq!(names(copy), names(original), "{}", copy.display());
    for name in names(original) {
        assert_eq!(
            read(&copy.join(&name)),
            read(&original.join(&name)),
            "{}",
            copy.join(&name).display()
        );
    }
}

/// Every path under `root`, relative to it.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path.clone());
            }
            found.push(path.strip_prefix(root).unwrap().to_owned());
        }
    }
    found
}

/// The first ```sh block after `lead` in `readme`.
/// The links of the Markdown files under `root` (`[text](target)`) that lead to no file
/// there: `file: target`. Web addresses and links within a page are not followed.
fn dead_links(root: &Path) -> Vec<String> {
    let mut dead = Vec::new();
    for file in walk(root) {
        if file.extension().is_none_or(|extension| extension != "md") {
            continue;
        }
        let path = root.join(&file);
        for target in read(&path).split("](").skip(1) {
            let Some(end) = target.find(')') else {
                continue;
            };
            let target = target[..end].split('#').next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if !path.parent().unwrap().join(target).exists() {
                dead.push(format!("{}: {target}", file.display()));
            }
        }
    }
    dead
}

fn readme_block(readme: &str, lead: &str) -> String {
    let from = readme
        .find(lead)
        .unwrap_or_else(|| panic!("README lacks {lead:?}"));
    let block = &readme[from..];
    let start = block.find("```sh\n").unwrap() + "```sh\n".len();
    let end = start + block[start..].find("```").unwrap();
    block[start..end].to_owned()
}

/// Every kind of release file for both architectures, in REDLOCK_DIST (what the release
/// workflow uploads): a .deb, a tarball and an image each, and SHA256SUMS listing exactly
/// those six, each of which it verifies.
#[test]
fn release_files_are_every_kind_for_both_architectures() {
    let Some(release) = dist::release_dir_or_skip() else {
        return;
    };
    let mut expected = BTreeSet::new();
    for target in dist::RELEASE_TARGETS {
        expected.insert(format!("redlock_{VERSION}-1_{}.deb", debian_arch(target)));
        expected.insert(format!("redlock-{VERSION}-{target}.tar.gz"));
        expected.insert(format!("redlock-{VERSION}-{target}-image.tar"));
    }
    let listed: BTreeSet<String> = read(&release.join("SHA256SUMS"))
        .lines()
        .map(|line| line.split_once("  ").unwrap().1.to_owned())
        .collect();
    assert_eq!(listed, expected);
    expected.insert("SHA256SUMS".to_owned());
    assert_eq!(names(&release), expected);
    let verified = check(
        Command::new("sha256sum")
            .args(["--check", "SHA256SUMS"])
            .current_dir(&release),
    );
    assert_eq!(
        verified
            .lines()
            .filter(|line| line.ends_with(": OK"))
            .count(),
        6,
        "{verified}"
    );
}

/// The .deb's maintainer is the one Cargo.toml names, a name and a mail address; its Debian
/// changelog is dist/changelog.Debian, whose latest entry is the version packaged, signed by
/// that maintainer with a date; and lintian (where installed) reports no error in either
/// architecture's package.
#[test]
fn deb_maintainer_changelog_and_lintian() {
    let dir = TempDir::new("deb-fields");
    let (out, targets) = release_files(dir.path(), &["deb"]);
    let manifest = read(&Path::new(ROOT).join("Cargo.toml"));
    let maintainer = manifest
        .lines()
        .find_map(|line| line.strip_prefix("maintainer = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("Cargo.toml names the .deb's maintainer");
    let (name, address) = maintainer
        .strip_suffix('>')
        .and_then(|rest| rest.split_once(" <"))
        .unwrap_or_else(|| panic!("maintainer {maintainer:?} is not 'Name <address>'"));
    assert!(!name.trim().is_empty(), "{maintainer}");
    let (user, host) = address.split_once('@').expect("a mail address");
    assert!(!user.is_empty() && host.contains('.'), "{maintainer}");

    let committed = read(&Path::new(ROOT).join("dist/changelog.Debian"));
    assert!(
        committed.starts_with(&format!("redlock ({VERSION}-1) ")),
        "dist/changelog.Debian's latest entry is not {VERSION}-1:\n{committed}"
    );
    let trailer = committed
        .lines()
        .find(|line| line.starts_with(" -- "))
        .expect("the entry's trailer");
    let (signed, date) = trailer[4..].split_once("  ").expect("' -- NAME  DATE'");
    assert_eq!(signed, maintainer);
    check(Command::new("date").args(["-R", "-d", date]));

    let mut debs = Vec::new();
    for target in &targets {
        let deb = out.join(format!("redlock_{VERSION}-1_{}.deb", debian_arch(target)));
        let field = check(
            Command::new("dpkg-deb")
                .arg("--field")
                .arg(&deb)
                .arg("Maintainer"),
        );
        assert_eq!(field.trim(), maintainer);
        let changelog = check(Command::new("sh").arg("-c").arg(format!(
            "dpkg-deb --fsys-tarfile '{}' | tar -xO ./usr/share/doc/redlock/changelog.Debian.gz | gzip -dc",
            deb.display()
        )));
        assert_eq!(changelog, committed);
        debs.push(deb);
    }
    if !which("lintian") {
        dist::missing("lintian is not installed");
        return;
    }
    let out = Command::new("timeout")
        .args(["300", "lintian", "--fail-on", "error"])
        .args(&debs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "lintian: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `dist/package --check-tag TAG`, the release workflow's first step: quiet for v + the
/// version in Cargo.toml, a one-line error for any other tag.
#[test]
fn dist_package_checks_the_release_tag() {
    let script = Path::new(ROOT).join("dist/package");
    assert_eq!(
        check(Command::new(&script).args(["--check-tag", &format!("v{VERSION}")])),
        ""
    );
    for wrong in ["v0.0.0-not-this", VERSION] {
        let out = Command::new(&script)
            .args(["--check-tag", wrong])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{wrong}: {out:?}");
        assert_eq!(
            stderr,
            format!(
                "dist/package: tag {wrong}: Cargo.toml says version {VERSION}: the release of it is tagged v{VERSION}\n"
            )
        );
    }
}

/// .github/workflows/release.yml parses, runs on a pushed tag, and does nothing but what CI
/// here runs: check the tag with dist/package, run .ci/run (whose dist/package writes the
/// release files to target/dist and whose tests check them), and upload target/dist/*. Every
/// repository path in a step exists, and the scripts it runs are executable.
#[test]
fn release_workflow_runs_what_ci_runs() {
    let root = Path::new(ROOT);
    let workflow = yaml_file(&root.join(".github/workflows/release.yml"));
    // YAML 1.1 (PyYAML) reads the key `on` as true; GitHub reads it as "on".
    let on = workflow
        .get("on")
        .or_else(|| workflow.get("true"))
        .expect("the workflow's `on`");
    assert_eq!(on["push"]["tags"], serde_json::json!(["v*"]));
    let jobs = workflow["jobs"].as_object().unwrap();
    assert_eq!(jobs.len(), 1, "one job");
    let steps = jobs.values().next().unwrap()["steps"].as_array().unwrap();
    let mut runs = Vec::new();
    for step in steps {
        if let Some(action) = step.get("uses") {
            assert_eq!(
                action, "actions/checkout@v4",
                "only the checkout is an action"
            );
        } else {
            runs.push(
                step["run"]
                    .as_str()
                    .expect("a step runs a script")
                    .to_owned(),
            );
        }
    }
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert_eq!(runs[0], "dist/package --check-tag \"$GITHUB_REF_NAME\"");
    assert!(
        runs[1].ends_with(" bash .ci/run"),
        "the second step runs .ci/run: {}",
        runs[1]
    );
    assert!(
        runs[2].contains(" target/dist/*\n") && runs[2].contains("gh release upload "),
        "the last step uploads target/dist: {}",
        runs[2]
    );
    let ci = read(&root.join(".ci/run"));
    assert!(
        ci.lines()
            .any(|line| line == "dist/package --out target/dist"),
        ".ci/run no longer makes the release files in target/dist"
    );
    for run in &runs {
        for word in run.split(|c: char| c.is_whitespace() || c == '"') {
            if ["dist/", ".ci/", "tests/", ".github/"]
                .iter()
                .any(|dir| word.starts_with(dir))
            {
                let path = root.join(word);
                assert!(
                    path.is_file(),
                    "the workflow names {word}, which does not exist"
                );
                assert!(mode(&path) & 0o111 != 0 || run.contains(&format!("bash {word}")));
            }
        }
    }
}

/// The crate as `cargo package` makes it: what the build reads (build.rs, src/, lua/, the man
/// pages `redlock man` carries), the manifest and lock file, the README and the licences; no
/// tests, test servers, benchmarks, docs, release scripts or caches.
#[test]
fn crate_holds_what_the_build_needs() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let listed = check(
        Command::new(cargo)
            .args(["package", "--list", "--locked", "--allow-dirty", "--quiet"])
            .current_dir(ROOT),
    );
    let listed: BTreeSet<String> = listed
        .lines()
        .filter(|line| *line != ".cargo_vcs_info.json")
        .map(str::to_owned)
        .collect();
    let root = Path::new(ROOT);
    let mut expected: BTreeSet<String> = [
        "build.rs",
        "Cargo.toml",
        "Cargo.toml.orig",
        "Cargo.lock",
        "README.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
    ]
    .map(str::to_owned)
    .into();
    for dir in ["src", "lua", "man"] {
        for path in walk(&root.join(dir)) {
            if root.join(dir).join(&path).is_file() {
                expected.insert(format!("{dir}/{}", path.display()));
            }
        }
    }
    assert_eq!(listed, expected);
}

/// The binary `cargo install` built from the packaged crate, unpacked (.ci/run installs it,
/// as `cargo install redlock-cli` would, and names it in REDLOCK_CRATE_BINARY): it knows no
/// commit (a crate is no checkout), and the README's second command from a clone (its first
/// block) takes a lock with it.
#[test]
fn crate_installed_from_the_package_runs() {
    let readme = read(&Path::new(ROOT).join("README.md"));
    let block = readme_block(&readme, "## From nothing");
    let lines: Vec<&str> = block.lines().collect();
    assert_eq!(lines.len(), 2, "two commands from a clone:\n{block}");
    assert_eq!(lines[0], "cargo install --locked --path .", "{block}");
    let Some(binary) = std::env::var_os("REDLOCK_CRATE_BINARY") else {
        dist::missing("REDLOCK_CRATE_BINARY is unset (.ci/run installs the packaged crate)");
        return;
    };
    let binary = PathBuf::from(binary);
    let line = version_line(&binary);
    let target = line.rsplit_once(' ').unwrap().1.trim_end_matches(')');
    assert_eq!(line, format!("redlock {VERSION} (unknown commit {target})"));
    let dir = TempDir::new("crate-install");
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(&binary, bin.join("redlock")).unwrap();
    let server = RedisServer::start();
    let command = lines[1].replace("redis://redis.internal:6379", &server.url());
    let said = check(
        Command::new("sh")
            .arg("-c")
            .arg(&command)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display())),
    );
    assert_eq!(said, "I hold the lock\n", "{command}");
}

/// A YAML file as JSON, through python3's PyYAML.
fn yaml_file(path: &Path) -> serde_json::Value {
    let program =
        "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)";
    let out = check(Command::new("python3").args(["-c", program]).arg(path));
    serde_json::from_str(&out).unwrap()
}

/// The container images (dist/image/): FROM scratch, holding the binary, passwd and group
/// naming its user, and the CA bundle, nothing else; run as that user (uid 65532, not root),
/// with redlock as the container's first process, the one Kubernetes signals. The amd64
/// image runs here with podman (where containers run at all); the arm64 one is for arm64 and
/// holds the arm64 tarball's binary.
#[test]
fn image_holds_the_binary_and_runs_it_as_a_user() {
    let dir = TempDir::new("image");
    let (out, targets) = release_files(dir.path(), &["image"]);
    let Some(podman) = crate::util::podman::Podman::start() else {
        return;
    };
    let server = RedisServer::start();
    for target in &targets {
        let arch = debian_arch(target);
        let image = podman.load(&out.join(format!("redlock-{VERSION}-{target}-image.tar")));
        assert_eq!(image, format!("localhost/redlock:{VERSION}-{arch}"));
        assert_eq!(
            podman.inspect(
                &image,
                "{{.Os}} {{.Architecture}} {{.Config.User}} {{json .Config.Entrypoint}}"
            ),
            format!("linux {arch} 65532:65532 [\"/usr/local/bin/redlock\"]")
        );
        // Every file in it, from a container made (not started) of it.
        let made = check(podman.command().args(["create", &image]));
        let container = made.trim();
        let export = dir.path().join(format!("{arch}.tar"));
        check(
            podman
                .command()
                .args(["export", "--output"])
                .arg(&export)
                .arg(container),
        );
        let binary = dir.path().join(format!("{arch}-redlock"));
        check(
            podman
                .command()
                .arg("cp")
                .arg(format!("{container}:/usr/local/bin/redlock"))
                .arg(&binary),
        );
        check(podman.command().args(["rm", container]));
        let files: BTreeSet<String> = check(Command::new("tar").arg("-tf").arg(&export))
            .lines()
            .filter(|entry| !entry.ends_with('/'))
            .map(|entry| entry.trim_start_matches("./").to_owned())
            .collect();
        assert_eq!(
            files,
            [
                "etc/group",
                "etc/passwd",
                "etc/ssl/certs/ca-certificates.crt",
                "usr/local/bin/redlock"
            ]
            .map(str::to_owned)
            .into()
        );
        assert_eq!(dist::elf_arch(&binary), arch_of(target));
        if dist::release_dir().is_some() {
            let unpacked = dir.path().join(format!("{arch}-tarball"));
            std::fs::create_dir_all(&unpacked).unwrap();
            let tarball_binary = dist::tarball_binary(&out, target, &unpacked);
            assert!(
                std::fs::read(&binary).unwrap() == std::fs::read(&tarball_binary).unwrap(),
                "the {arch} image's binary is not the {arch} tarball's"
            );
        }
        if arch_of(target) != std::env::consts::ARCH {
            continue;
        }
        let version = podman.run(&image, &[], &["--version"]);
        assert!(
            version.status.success(),
            "{}",
            crate::util::podman::show(&version)
        );
        assert_eq!(
            String::from_utf8_lossy(&version.stdout).trim(),
            version_line_for(target)
        );
        let held = podman.run(
            &image,
            &[("REDLOCK_URL", &server.url())],
            &[
                "run",
                "--key",
                "image",
                "--",
                "/usr/local/bin/redlock",
                "inspect",
                "--key",
                "image",
                "--json",
            ],
        );
        assert!(
            held.status.success(),
            "{}",
            crate::util::podman::show(&held)
        );
        let view: serde_json::Value = serde_json::from_slice(&held.stdout).unwrap();
        assert_eq!(view["holders"][0]["user"], "redlock", "{view}");
        assert_eq!(view["holders"][0]["pid"], 1, "{view}");
    }
}
