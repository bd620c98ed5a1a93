//! T35, Lua hygiene, checked on the scripts themselves: each is one fixed text with one fixed
//! SHA (the SHA Redis caches is the SHA-1 of the prelude, `lua/prelude/`'s files joined in
//! file-name order, followed by the script's file,
//! never of text built at run time), no script loads code (`loadstring`, `load`, ...), `KEYS`
//! and `ARGV` are read in one place (each script's call of `inputs`, which names them), and no key
//! name is built inside a script, with one documented exception: other waiters' wake lists
//! (`wake_key`, same hash tag as the lock; `lua/README.md` says why).

use std::path::Path;

use super::harness::Tally;
use crate::util::RedisServer;

/// The one function allowed to build a key name.
const KEY_BUILDER: &str = "wake_key";

/// What breaks the rules in `text` (a script called `name`).
fn violations(name: &str, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut function = String::new();
    // Open parentheses of the script's `inputs(...)` call, while its lines are read.
    let mut in_inputs = 0usize;
    for (number, line) in text.lines().enumerate() {
        let code = line.split("--").next().unwrap_or_default();
        // (Whether this line is part of the call: its last line closes it.)
        let reads_inputs = in_inputs > 0 || code.contains("= inputs(");
        if in_inputs == 0 && code.contains("= inputs(") {
            let call = code
                .split_once("= inputs(")
                .map(|(_, rest)| rest)
                .unwrap_or_default();
            in_inputs = parens_after(1, call);
        } else if in_inputs > 0 {
            in_inputs = parens_after(in_inputs, code);
        }
        if let Some(rest) = code.strip_prefix("local function ") {
            function = rest.split('(').next().unwrap_or_default().to_owned();
        } else if code.starts_with("end") {
            function.clear();
        }
        let at = format!("{name}:{}", number + 1);
        for loader in [
            "loadstring",
            "load(",
            "dofile",
            "loadfile",
            "setfenv",
            "getfenv",
            "_G[",
            "_G.",
        ] {
            if code.contains(loader) {
                found.push(format!("{at}: loads or reaches code ({loader})"));
            }
        }
        if (code.contains("KEYS[") || code.contains("ARGV[")) && !reads_inputs {
            found.push(format!(
                "{at}: KEYS or ARGV read outside the call of inputs()"
            ));
        }
        // A key name built here: a literal ':suffix' joined with `..`.
        let builds_key = code.split("..").skip(1).any(|piece| {
            let piece = piece.trim_start();
            piece.starts_with("':") && piece[2..].starts_with(|c: char| c.is_ascii_lowercase())
        });
        if builds_key && function != KEY_BUILDER {
            found.push(format!("{at}: builds a key name ({})", code.trim()));
        }
    }
    found
}

/// The parentheses still open after `code`, `open` before it.
fn parens_after(open: usize, code: &str) -> usize {
    code.chars().fold(open, |open, c| match c {
        '(' => open + 1,
        ')' => open.saturating_sub(1),
        _ => open,
    })
}

/// The checker finds what it is for.
#[test]
fn the_hygiene_check_catches_what_it_is_for() {
    let bad = "local x = redis.call('GET', KEYS[1] .. ':other')\nlocal f = loadstring(ARGV[1])\n";
    let found = violations("bad.lua", bad);
    assert_eq!(found.len(), 4, "{found:?}");
    assert!(violations("good.lua", "local n = redis.call('GET', key.fence)\n").is_empty());
    let named = "local r, key = inputs(1, 0,\n  {fence = KEYS[1]},\n  {})\nlocal x = KEYS[1]\n";
    assert_eq!(
        violations("named.lua", named),
        ["named.lua:4: KEYS or ARGV read outside the call of inputs()"]
    );
}

#[test]
fn scripts_are_fixed_texts_that_take_their_keys_from_keys() {
    let mut tally = Tally::new(
        "T35",
        "Lua hygiene: fixed SHAs, keys from KEYS, no loaded code",
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
    let lua_files = |dir: &Path| {
        let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "lua"))
            .map(|path| {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&path).unwrap())
            })
            .collect();
        files.sort();
        files
    };
    let mut prelude = String::new();
    let mut scripts = Vec::new();
    let mut broken = Vec::new();
    for (name, text) in lua_files(&root.join("prelude")) {
        let name = format!("prelude/{name}");
        broken.extend(violations(&name, &text));
        prelude.push_str(&text);
        scripts.push((name, text));
    }
    assert_eq!(
        redlock::inline_constants(&prelude),
        redlock::PRELUDE,
        "the prelude compiled in is lua/prelude/'s files joined in file-name order, its \
         constants in place"
    );
    for (name, text) in lua_files(&root) {
        broken.extend(violations(&name, &text));
        scripts.push((name, text));
    }
    tally.runs = scripts.len() as u64;
    assert!(
        prelude.contains(&format!("local function {KEY_BUILDER}(")),
        "the documented exception moved"
    );

    // The SHAs Redis caches are those of the files' texts (the prelude's constants in place,
    // as checked above): run each script once.
    let server = RedisServer::start();
    let token = server
        .redlock(&["acquire", "--key", "h", "--ttl", "10s"])
        .run();
    token.code(0);
    let token = token.stdout.trim().to_owned();
    for args in [
        &["extend", "--key", "h", "--token", &token, "--ttl", "10s"][..],
        &["inspect", "--key", "h"][..],
        &["history", "--key", "h"][..],
        &["release", "--key", "h", "--token", &token][..],
    ] {
        server.redlock(args).run().code(0);
    }
    let mut cached = 0;
    for (name, text) in &scripts {
        if name.starts_with("prelude/") {
            continue;
        }
        let sha = sha1_hex(&format!("{}{text}", redlock::PRELUDE));
        let exists: Vec<i64> = server.cmd(&["SCRIPT", "EXISTS", &sha]);
        cached += exists[0];
        if [
            "acquire.lua",
            "extend.lua",
            "inspect.lua",
            "history.lua",
            "release.lua",
        ]
        .contains(&name.as_str())
        {
            assert_eq!(
                exists,
                [1],
                "{name}: Redis has no script with the file's SHA {sha}"
            );
        }
    }
    if !broken.is_empty() {
        tally.notes = broken.join("; ");
        super::harness::record(&tally, "fail");
        panic!(
            "T35: the scripts break the hygiene rules:\n{}",
            broken.join("\n")
        );
    }
    tally.notes = format!(
        "{} scripts checked; {cached} found in Redis's cache under their files' SHA-1; one documented exception: {KEY_BUILDER} (other waiters' wake lists, same hash tag)",
        scripts.len()
    );
    tally.finish();
}

/// SHA-1 as hex, by the system's `sha1sum` (coreutils).
fn sha1_hex(text: &str) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("sha1sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha1sum (coreutils)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..40].to_owned()
}
