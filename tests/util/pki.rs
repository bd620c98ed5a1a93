//! A throwaway PKI for TLS tests, made with openssl(1): a CA; server certificates for
//! 127.0.0.1 and localhost (good, expired, issued by another CA, and one for another name);
//! client certificates (from the CA and from the other CA). Keys are P-256.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::TempDir;

pub struct Pki {
    dir: TempDir,
}

impl Pki {
    pub fn generate() -> Self {
        let dir = TempDir::new("pki");
        let pki = Self { dir };
        pki.self_signed("ca", "redlock test CA");
        pki.self_signed("other-ca", "another CA");
        pki.issue(
            "server",
            "localhost",
            "IP:127.0.0.1,DNS:localhost",
            "ca",
            None,
        );
        pki.issue(
            "wrong-name",
            "redis.example",
            "DNS:redis.example",
            "ca",
            None,
        );
        pki.issue(
            "untrusted",
            "localhost",
            "IP:127.0.0.1,DNS:localhost",
            "other-ca",
            None,
        );
        pki.issue(
            "expired",
            "localhost",
            "IP:127.0.0.1,DNS:localhost",
            "ca",
            Some(("20200101000000Z", "20200201000000Z")),
        );
        pki.issue("client", "redlock client", "DNS:client", "ca", None);
        pki.issue("stranger", "stranger", "DNS:stranger", "other-ca", None);
        for name in [
            "server",
            "wrong-name",
            "untrusted",
            "expired",
            "client",
            "stranger",
        ] {
            restrict(&pki.key(name));
        }
        pki
    }

    /// `<name>.crt`
    pub fn cert(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.crt"))
    }

    /// `<name>.key`
    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.key"))
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn self_signed(&self, name: &str, subject: &str) {
        openssl(
            self.dir(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-days",
                "30",
                "-subj",
                &format!("/CN={subject}"),
            ],
        );
    }

    /// A certificate for `subject` with `san`, issued by `ca`, valid for 30 days from now or
    /// for the `(start, end)` dates given.
    fn issue(&self, name: &str, subject: &str, san: &str, ca: &str, dates: Option<(&str, &str)>) {
        let dir = self.dir();
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={subject}"),
            ],
        );
        let db = dir.join(format!("{ca}.db"));
        if !db.exists() {
            std::fs::create_dir_all(&db).unwrap();
            std::fs::write(db.join("index.txt"), "").unwrap();
            std::fs::write(db.join("serial"), "01\n").unwrap();
        }
        let config = dir.join(format!("{name}.cnf"));
        std::fs::write(
            &config,
            format!(
                "[ca]\ndefault_ca = test\n[test]\ndatabase = {db}/index.txt\nserial = {db}/serial\n\
                 new_certs_dir = {db}\ndefault_md = sha256\npolicy = any\nunique_subject = no\n\
                 x509_extensions = leaf\n[any]\ncommonName = supplied\n[leaf]\n\
                 subjectAltName = {san}\nextendedKeyUsage = serverAuth,clientAuth\n\
                 basicConstraints = CA:FALSE\n",
                db = db.display()
            ),
        )
        .unwrap();
        let (start, end) = dates.unwrap_or(("", ""));
        let mut args = vec![
            "ca",
            "-batch",
            "-notext",
            "-config",
            config.to_str().unwrap(),
            "-cert",
        ];
        let (ca_cert, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
        let (csr, out) = (format!("{name}.csr"), format!("{name}.crt"));
        args.extend([&ca_cert[..], "-keyfile", &ca_key, "-in", &csr, "-out", &out]);
        if dates.is_some() {
            args.extend(["-startdate", start, "-enddate", end]);
        } else {
            args.extend(["-days", "30"]);
        }
        openssl(dir, &args);
    }
}

fn restrict(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl must be installed (the CI script installs it)");
    assert!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}
