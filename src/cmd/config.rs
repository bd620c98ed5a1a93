//! The global options resolved: the Redis URLs and where each came from, the password (file or
//! environment, never an argument), TLS files, and how to start another redlock that reaches
//! Redis the same way (the keeper of `acquire --keep-alive`).

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;

use super::Context;
use crate::cli::{Global, TlsArgs};
use crate::conn::{Access, Target, TlsOptions};
use crate::exit::{Failure, fail};
use crate::files;
use crate::keys::Prefix;
use crate::log::Log;
use crate::signals::Inherited;
use crate::store::Store;

impl Context {
    pub(super) fn new(global: Global, inherited: Inherited) -> anyhow::Result<Self> {
        let prefix = Prefix::new(&global.prefix).context("--prefix")?;
        let mut urls = given_urls(&global)?;
        // -q quiets expected outcomes, never a warning about the user's safety.
        let password_in_argv = password_in_argv(&urls);
        // Messages about a URL name where it came from: the user looks there.
        let mut source = url_source(&global);
        let read_redis_url = urls.is_empty();
        if read_redis_url {
            source = "REDIS_URL";
            urls.push(match std::env::var_os("REDIS_URL") {
                None => DEFAULT_URL.to_owned(),
                Some(url) => url
                    .into_string()
                    .ok()
                    .filter(|url| !url.trim().is_empty())
                    .ok_or_else(|| empty_url("REDIS_URL"))?,
            });
        }
        if urls.len() > 1 {
            crate::store::check_count(urls.len())
                .map_err(|why| fail(Failure::Usage, format!("{source}: {why}")))?;
        }
        let sentinel_password = std::env::var("REDLOCK_SENTINEL_PASSWORD")
            .ok()
            .filter(|p| !p.is_empty());
        let url_password = urls.iter().any(|url| crate::conn::url_has_password(url));
        if global.password_file.is_some()
            || std::env::var_os("REDLOCK_PASSWORD").is_some_and(|p| !p.is_empty())
            || sentinel_password.is_some()
            || url_password
            || global.tls.tls_key.is_some()
        {
            keep_out_of_core_dumps();
        }
        let password = match &global.password_file {
            Some(path) => Some(read_password_file(path)?),
            None => std::env::var("REDLOCK_PASSWORD")
                .ok()
                .filter(|p| !p.is_empty()),
        };
        let relaunch = relaunch(&global, &urls.join(" "), password.as_deref());
        let secret_variables = secret_variables(read_redis_url && url_password);
        let access = Access {
            password,
            sentinel_password,
            tls: tls_options(&global.tls)?,
            connect_timeout: global.connect_timeout,
            command_timeout: global.command_timeout,
            release_timeout: global.release_timeout,
        };
        let store = store(&urls, source, &access, global.command_timeout)?;
        if password_in_argv {
            crate::log::warning(
                "--redis: a password in the URL is visible to every user in the process list; put it in REDLOCK_PASSWORD or a --password-file",
            );
        }
        Ok(Self {
            store,
            prefix,
            command_timeout: global.command_timeout,
            log: Log {
                quiet: global.quiet,
                verbose: global.verbose > 0,
            },
            inherited,
            relaunch,
            secret_variables,
        })
    }
}

/// One Redis, or a quorum of masters, reached with `access`. A quorum may mix TLS and
/// plaintext masters: the TLS options are for the TLS ones. `source` names where the URLs
/// came from, for messages.
fn store(
    urls: &[String],
    source: &str,
    access: &Access,
    command_timeout: Duration,
) -> anyhow::Result<Store> {
    let is_tls = |url: &str| url.starts_with("rediss");
    let mixed = urls.iter().any(|url| is_tls(url));
    let mut targets = Vec::with_capacity(urls.len());
    for url in urls {
        let mut access = access.clone();
        if mixed && !is_tls(url) {
            access.tls = None;
        }
        let target = Target::new(url, access)
            .with_context(|| format!("{source} {}", crate::conn::redact_url(url)))?;
        // A quorum's masters must be independent: one server named twice (or two databases of
        // one server) would be two votes lost with one server's data.
        if let Some(twice) = target.places().into_iter().find(|place| {
            targets
                .iter()
                .any(|other: &Target| other.places().contains(place))
        }) {
            return Err(fail(
                Failure::Usage,
                format!(
                    "{source} {}: names the server {twice} again; quorum mode needs independent masters, each named once",
                    crate::conn::redact_url(url)
                ),
            ));
        }
        targets.push(target);
    }
    Ok(Store::new(targets, command_timeout))
}

/// The variables the command `run` starts must not see: redlock's password variables,
/// REDLOCK_URL when one of its URLs holds a password (read or not: it is redlock's), and
/// REDIS_URL when redlock read its password from it (`redis_url_password`). A REDIS_URL that
/// redlock did not read (--redis or REDLOCK_URL was given) is some other service's, left to
/// the command.
fn secret_variables(redis_url_password: bool) -> Vec<&'static str> {
    let mut names = vec!["REDLOCK_PASSWORD", "REDLOCK_SENTINEL_PASSWORD"];
    // Several URLs (quorum mode) are separated by spaces: any one with a secret hides them all.
    if std::env::var("REDLOCK_URL")
        .is_ok_and(|urls| urls.split_whitespace().any(crate::conn::url_has_password))
    {
        names.push("REDLOCK_URL");
    }
    if redis_url_password {
        names.push("REDIS_URL");
    }
    names
}

/// URL used when neither --redis, REDLOCK_URL nor REDIS_URL is set.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// The arguments and environment that reach Redis as `global` does (see `Context::relaunch`).
fn relaunch(
    global: &Global,
    url: &str,
    password: Option<&str>,
) -> (Vec<std::ffi::OsString>, Vec<(String, String)>) {
    // Each value joined to its flag (`--prefix=-team:`): a separate word that starts with `-`
    // would be parsed as a flag, and the keeper, whose errors nobody sees, would not start.
    let mut args: Vec<std::ffi::OsString> = vec![
        with_value("--prefix", global.prefix.as_ref()),
        format!("--connect-timeout={}ms", global.connect_timeout.as_millis()).into(),
        format!("--command-timeout={}ms", global.command_timeout.as_millis()).into(),
        format!("--release-timeout={}ms", global.release_timeout.as_millis()).into(),
    ];
    let tls = &global.tls;
    for (flag, path) in [
        ("--tls-ca", &tls.tls_ca),
        ("--tls-cert", &tls.tls_cert),
        ("--tls-key", &tls.tls_key),
    ] {
        if let Some(path) = path {
            args.push(with_value(flag, path.as_os_str()));
        }
    }
    if let Some(name) = &tls.tls_server_name {
        args.push(with_value("--tls-server-name", name.as_ref()));
    }
    if tls.tls_insecure {
        args.push("--tls-insecure".into());
    }
    let mut env = vec![("REDLOCK_URL".to_owned(), url.to_owned())];
    if let Some(password) = password {
        env.push(("REDLOCK_PASSWORD".to_owned(), password.to_owned()));
    }
    (args, env)
}

/// `--flag=value`, as one argument.
pub(super) fn with_value(flag: &str, value: &std::ffi::OsStr) -> std::ffi::OsString {
    let mut arg = std::ffi::OsString::from(flag);
    arg.push("=");
    arg.push(value);
    arg
}

/// The TLS options given, if any; warns about a key others can read, and loudly about
/// `--tls-insecure`.
fn tls_options(args: &TlsArgs) -> anyhow::Result<Option<TlsOptions>> {
    let options = TlsOptions {
        ca: args.tls_ca.clone(),
        cert: args.tls_cert.clone(),
        key: args.tls_key.clone(),
        server_name: args.tls_server_name.clone(),
        insecure: args.tls_insecure,
    };
    let given = options.ca.is_some()
        || options.cert.is_some()
        || options.server_name.is_some()
        || options.insecure;
    if !given {
        return Ok(None);
    }
    if let Some(key) = &options.key {
        warn_if_readable_by_others(key, "--tls-key")?;
    }
    if options.insecure {
        crate::log::warning(
            "--tls-insecure: the server's certificate is not verified; anyone on the path can pose as the server and read the password",
        );
    }
    Ok(Some(options))
}

/// Where the URLs of `global` came from: `--redis` or `REDLOCK_URL`.
fn url_source(global: &Global) -> &'static str {
    if global.redis_from_env {
        "REDLOCK_URL"
    } else {
        "--redis"
    }
}

/// The URLs of `--redis` or `REDLOCK_URL` (none: neither is set). An empty one is an error,
/// never the default: in CI an unset secret becomes an empty variable, and the default would
/// lock each runner's own Redis, excluding nothing.
fn given_urls(global: &Global) -> anyhow::Result<Vec<String>> {
    let source = url_source(global);
    if global.redis.iter().all(|url| url.trim().is_empty()) {
        return match global.redis.is_empty() {
            true => Ok(Vec::new()),
            false => Err(empty_url(source)),
        };
    }
    // Several URLs are separated by spaces (clap splits at those), or by tabs and line breaks
    // (a multi-line value in a CI file's YAML); a space may also have cut a password in two.
    let urls: Vec<String> = global
        .redis
        .iter()
        .flat_map(|url| url.split_ascii_whitespace())
        .map(str::to_owned)
        .collect();
    if urls
        .iter()
        .any(|url| !url.contains("://") && url.contains('@'))
    {
        return Err(fail(
            Failure::Usage,
            format!(
                "{source}: a URL without a scheme holds an '@'; URLs are separated by spaces, so write a space in a password as %20"
            ),
        ));
    }
    Ok(urls)
}

fn empty_url(source: &str) -> anyhow::Error {
    fail(
        Failure::Usage,
        format!(
            "{source} is set but empty; give a Redis URL, or unset it for the default {DEFAULT_URL}"
        ),
    )
}

/// Makes the process non-dumpable before a secret (a password, a TLS key) is read: a crash
/// then writes no core file holding it, and other processes of the same user cannot read its
/// memory (ptrace, /proc/PID/mem, environ). The command `run` starts, and the keeper, are
/// dumpable again after their exec (the keeper marks itself in turn).
fn keep_out_of_core_dumps() {
    // Failing is not a reason to refuse to work; it cannot fail on Linux.
    let _ = nix::sys::prctl::set_dumpable(false);
}

/// Whether a URL given on the command line (not through `REDLOCK_URL`) has a password: every
/// user of the host can read it in the process list, and redlock cannot take it back.
fn password_in_argv(urls: &[String]) -> bool {
    let from_env = std::env::var("REDLOCK_URL")
        .is_ok_and(|env| env.split_whitespace().eq(urls.iter().map(String::as_str)));
    !from_env && urls.iter().any(|url| crate::conn::url_has_password(url))
}

/// Warns when `path` (a secret) can be read by group or others; an unreadable file, or one
/// that is not a regular file, is an error.
fn warn_if_readable_by_others(path: &Path, flag: &str) -> anyhow::Result<()> {
    let opened = files::open_regular(path)
        .map_err(|why| fail(Failure::Usage, format!("{flag} {}: {why}", path.display())))?;
    warn_if_mode_open(opened.mode, path, flag);
    Ok(())
}

fn warn_if_mode_open(mode: u32, path: &Path, flag: &str) {
    let shown = path.display();
    if mode & 0o077 != 0 {
        crate::log::warning(format_args!(
            "{flag} {shown} is readable by others (mode {mode:o}); run: chmod 600 {shown}"
        ));
    }
}

/// The password: the first line of a regular file, of at most a few KiB.
fn read_password_file(path: &Path) -> anyhow::Result<String> {
    let shown = path.display();
    let refuse = |why: String| fail(Failure::Usage, format!("--password-file {shown}: {why}"));
    let opened = files::open_regular(path).map_err(refuse)?;
    let mode = opened.mode;
    let password = opened
        .first_line(files::MAX_PASSWORD_LINE)
        .map_err(refuse)?;
    if password.is_empty() {
        return Err(refuse("the first line is empty".to_owned()));
    }
    warn_if_mode_open(mode, path, "--password-file");
    Ok(password)
}
