//! `rediss://`: verified TLS only, with a CA bundle, a server name, a client certificate;
//! each way a certificate can be wrong gets its own one-line error (exit 77) and a hint; no
//! plaintext fallback, ever. Certificates come from a throwaway PKI made by the harness.

use std::time::Duration;

use crate::util::pki::Pki;
use crate::util::{RedisServer, Redlock};

fn tls_url(port: u16) -> String {
    format!("rediss://127.0.0.1:{port}")
}

fn acquire(url: &str) -> Redlock {
    Redlock::new(&["acquire", "--key", "k", "--ttl", "5s"]).env("REDLOCK_URL", url)
}

#[test]
fn a_verified_tls_connection_runs_every_command() {
    let pki = Pki::generate();
    let (server, port) = RedisServer::start_tls(&pki, "server", "no");
    let url = tls_url(port);
    let ca = pki.cert("ca");
    let ca = ca.to_str().unwrap();
    let token = acquire(&url).args(&["--tls-ca", ca]).run();
    token.code(0);
    let token = token.stdout.trim().to_owned();
    Redlock::new(&["inspect", "--key", "k"])
        .env("REDLOCK_URL", &url)
        .env("REDLOCK_TLS_CA", ca)
        .run()
        .code(0);
    Redlock::new(&["release", "--key", "k", "--token", &token, "--tls-ca", ca])
        .env("REDLOCK_URL", &url)
        .run()
        .code(0);
    Redlock::new(&[
        "run", "--key", "k", "--ttl", "1s", "--tls-ca", ca, "--", "sleep", "1",
    ])
    .env("REDLOCK_URL", &url)
    .run()
    .code(0);
    assert_eq!(server.keys_but_history(), ["redlock:{k}:fence"]);

    // By a name the certificate carries, connecting by address.
    let (_named, port) = RedisServer::start_tls(&pki, "wrong-name", "no");
    acquire(&tls_url(port))
        .args(&["--tls-ca", ca, "--tls-server-name", "redis.example"])
        .run()
        .code(0);
}

#[test]
fn every_certificate_problem_has_its_own_error() {
    let pki = Pki::generate();
    let ca = pki.cert("ca").display().to_string();
    let other_ca = pki.cert("other-ca").display().to_string();
    let (_good, good) = RedisServer::start_tls(&pki, "server", "no");

    // Issued by a CA that is not trusted: the system's store, or the wrong bundle.
    acquire(&tls_url(good)).run().code(77).one_line_error(
        "issued by a CA that is not trusted; give the CA bundle that issued it with --tls-ca",
    );
    acquire(&tls_url(good))
        .args(&["--tls-ca", &other_ca])
        .run()
        .code(77)
        .one_line_error("issued by a CA that is not trusted");
    // Not valid for the name connected to.
    let (_named, named) = RedisServer::start_tls(&pki, "wrong-name", "no");
    acquire(&tls_url(named))
        .args(&["--tls-ca", &ca])
        .run()
        .code(77)
        .one_line_error("not valid for that name")
        .stderr_contains("--tls-server-name");
    // Expired.
    let (_expired, expired) = RedisServer::start_tls(&pki, "expired", "no");
    acquire(&tls_url(expired))
        .args(&["--tls-ca", &ca])
        .run()
        .code(77)
        .one_line_error("certificate has expired");
    // The server wants a client certificate: none, one it does not trust, a good one.
    let (_mutual, mutual) = RedisServer::start_tls(&pki, "server", "yes");
    acquire(&tls_url(mutual))
        .args(&["--tls-ca", &ca])
        .run()
        .code(77)
        .one_line_error("requires a client certificate; give one with --tls-cert and --tls-key");
    let (stranger_cert, stranger_key) = (pki.cert("stranger"), pki.key("stranger"));
    acquire(&tls_url(mutual))
        .args(&[
            "--tls-ca",
            &ca,
            "--tls-cert",
            stranger_cert.to_str().unwrap(),
        ])
        .args(&["--tls-key", stranger_key.to_str().unwrap()])
        .run()
        .code(77)
        .one_line_error("refused our client certificate");
    let (cert, key) = (pki.cert("client"), pki.key("client"));
    acquire(&tls_url(mutual))
        .args(&["--tls-ca", &ca])
        .env("REDLOCK_TLS_CERT", cert.to_str().unwrap())
        .env("REDLOCK_TLS_KEY", key.to_str().unwrap())
        .run()
        .code(0);
    // Verification skipped on request: works, and says loudly what it means.
    acquire(&tls_url(expired))
        .arg("--tls-insecure")
        .run()
        .code(0)
        .stderr_contains("warning: --tls-insecure: the server's certificate is not verified");
}

#[test]
fn tls_files_and_ports_that_do_not_fit_are_reported() {
    let pki = Pki::generate();
    let ca = pki.cert("ca").display().to_string();
    let (server, tls) = RedisServer::start_tls(&pki, "server", "no");
    // TLS options never turn a plaintext URL into a TLS one, nor are silently dropped.
    acquire(&server.url())
        .args(&["--tls-ca", &ca])
        .run()
        .code(64)
        .one_line_error("TLS options given for a plaintext URL; use a rediss:// URL for TLS");
    // A CA file that holds no certificate, a missing one, a key without its certificate.
    let empty = pki.dir().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    acquire(&tls_url(tls))
        .args(&["--tls-ca", empty.to_str().unwrap()])
        .run()
        .code(64)
        .one_line_error("contains no CA certificate");
    acquire(&tls_url(tls))
        .args(&["--tls-ca", "/nonexistent/ca.pem"])
        .run()
        .code(64)
        .one_line_error("/nonexistent/ca.pem");
    acquire(&tls_url(tls))
        .args(&[
            "--tls-ca",
            &ca,
            "--tls-key",
            pki.key("client").to_str().unwrap(),
        ])
        .run()
        .code(64)
        .one_line_error("--tls-cert");
    // A key others may read: a warning, as for a password file.
    let key = pki.key("client");
    let open_key = pki.dir().join("open.key");
    std::fs::copy(&key, &open_key).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&open_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    acquire(&tls_url(tls))
        .args(&[
            "--tls-ca",
            &ca,
            "--tls-cert",
            pki.cert("client").to_str().unwrap(),
        ])
        .args(&["--tls-key", open_key.to_str().unwrap()])
        .run()
        .code(0)
        .stderr_contains("is readable by others (mode 644); run: chmod 600");
    // TLS to a plaintext port, plaintext to a TLS port: unavailable (69), in bounded time.
    let out = acquire(&format!("rediss://127.0.0.1:{}", server.port))
        .args(&["--tls-ca", &ca, "--connect-timeout", "1s"])
        .run();
    out.code(69).one_line_error("TLS");
    assert!(out.elapsed < Duration::from_secs(4), "{:?}", out.elapsed);
    acquire(&format!("redis://127.0.0.1:{tls}"))
        .args(&["--command-timeout", "1s"])
        .run()
        .code(69);
}

/// A self-signed server certificate that is also a CA (what `openssl req -x509`
/// makes by default), trusted with --tls-ca, is refused by name, not as `Other(...)`.
#[test]
fn a_server_presenting_a_ca_certificate_is_told_in_words() {
    let pki = Pki::generate();
    let ca = pki.cert("ca").display().to_string();
    let (_server, tls) = RedisServer::start_tls(&pki, "ca", "no");
    acquire(&tls_url(tls))
        .args(&["--tls-ca", &ca])
        .run()
        .code(77)
        .one_line_error(
            "TLS: the server presents a CA certificate as its own; give the server a certificate issued by that CA",
        );
}

/// A password goes through TLS like any other; it never shows.
#[test]
fn a_password_over_tls_works_and_never_shows() {
    let pki = Pki::generate();
    let ca = pki.cert("ca").display().to_string();
    let tls_port = crate::util::free_port();
    let server = RedisServer::start_with(&[
        "--requirepass",
        "s3cret-tls",
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        pki.cert("server").to_str().unwrap(),
        "--tls-key-file",
        pki.key("server").to_str().unwrap(),
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]);
    let out = acquire(&tls_url(tls_port))
        .args(&["-v", "--tls-ca", &ca])
        .env("REDLOCK_PASSWORD", "s3cret-tls")
        .run();
    out.code(0);
    assert!(!out.stderr.contains("s3cret"), "{}", out.stderr);
    let out = acquire(&format!("rediss://:wrong@127.0.0.1:{tls_port}"))
        .args(&["--tls-ca", &ca])
        .run();
    out.code(77);
    assert!(!out.stderr.contains("wrong@"), "{}", out.stderr);
    drop(server);
}
