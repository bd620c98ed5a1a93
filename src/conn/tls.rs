//! TLS for `rediss://`: which certificates to trust, which client certificate to show, which
//! name to verify the server's certificate against, all set up once per process. rustls, with
//! the `ring` crypto provider that `main` installs.
//!
//! The trust store is a CA bundle the user names, or else the system's (read once). The name
//! verified is the host of the URL unless another is given (connecting by IP address to a
//! server whose certificate names a host). There is no fallback to plaintext, ever; skipping
//! verification is an explicit choice the command line warns about.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct};

use crate::exit::{Failure, Hint, fail, fail_with};

/// What the user asked for.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// PEM bundle of the CAs to trust instead of the system's.
    pub ca: Option<PathBuf>,
    /// Client certificate chain and its key (PEM), for servers that require one.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// The name the server's certificate must carry, when it is not the host connected to.
    pub server_name: Option<String>,
    /// Accept any certificate (development only).
    pub insecure: bool,
}

/// A TLS client configuration, ready for every connection of the process.
#[derive(Debug)]
pub(crate) struct Tls {
    config: Arc<ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

impl Tls {
    /// Reads the files and builds the configuration. Errors are usage errors (64) that name
    /// the file and say what is wrong with it.
    pub(crate) fn new(options: &TlsOptions) -> anyhow::Result<Self> {
        let builder = ClientConfig::builder();
        let builder = if options.insecure {
            let provider = Arc::clone(builder.crypto_provider());
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
        } else {
            builder.with_root_certificates(trust_store(options.ca.as_deref())?)
        };
        let config = match (&options.cert, &options.key) {
            (Some(cert), Some(key)) => {
                let pem = read_pem(cert, "certificate chain")?;
                let chain = CertificateDer::pem_slice_iter(&pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|err| bad_file(cert, &err.to_string()))?;
                if chain.is_empty() {
                    return Err(bad_file(cert, "contains no certificate"));
                }
                let mut pem = read_pem(key, "private key")?;
                let parsed = PrivateKeyDer::from_pem_slice(&pem);
                // The key's text is not left in memory once parsed.
                pem.fill(0);
                let key = parsed
                    .map_err(|err| bad_file(key, &format!("no private key in it ({err})")))?;
                builder.with_client_auth_cert(chain, key).map_err(|err| {
                    fail(
                        Failure::Usage,
                        format!("the client certificate and key do not go together: {err}"),
                    )
                })?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(fail(
                    Failure::Usage,
                    "a client certificate needs its key, and a key its certificate",
                ));
            }
        };
        let server_name = options
            .server_name
            .as_deref()
            .map(|name| {
                ServerName::try_from(name.to_owned()).map_err(|_| {
                    fail(
                        Failure::Usage,
                        format!(
                            "'{}' is neither a host name nor an IP address",
                            name.escape_debug()
                        ),
                    )
                })
            })
            .transpose()?;
        Ok(Self {
            config: Arc::new(config),
            server_name,
        })
    }

    /// A client session for a connection to `host`.
    pub(crate) fn session(&self, host: &str) -> anyhow::Result<rustls::ClientConnection> {
        let name = match &self.server_name {
            Some(name) => name.clone(),
            None => ServerName::try_from(host.to_owned()).map_err(|_| {
                fail(
                    Failure::Usage,
                    format!(
                        "'{}' cannot be verified as a TLS server name",
                        host.escape_debug()
                    ),
                )
            })?,
        };
        rustls::ClientConnection::new(Arc::clone(&self.config), name)
            .map_err(|err| fail(Failure::Usage, format!("TLS: {err}")))
    }
}

/// The rustls error inside an I/O error of a TLS stream, if any.
pub(crate) fn rustls_error(err: &io::Error) -> Option<&rustls::Error> {
    err.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// The outcome of a failed TLS stream: a certificate refused (either way) is 77, with what the
/// user can do; anything else, a server that cannot be reached over TLS (69). `timeout` is the
/// bound that was in force.
pub(crate) fn classify(err: &io::Error, timeout: Duration) -> anyhow::Error {
    match rustls_error(err) {
        Some(tls) => classify_tls(tls),
        None => match err.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => fail(
                Failure::Unavailable,
                format!(
                    "no TLS handshake within {} (does the server speak TLS on that port?)",
                    crate::duration::display(timeout)
                ),
            ),
            io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof => fail(
                Failure::Unavailable,
                format!("the server hung up during the TLS handshake ({err})"),
            ),
            _ => fail(Failure::Unavailable, format!("TLS handshake failed: {err}")),
        },
    }
}

/// The outcome of what TLS refused (see [`classify`]).
pub(crate) fn classify_tls(err: &rustls::Error) -> anyhow::Error {
    let refused = |why: String, hint: Hint| fail_with(Failure::Auth, why, hint);
    match err {
        rustls::Error::InvalidCertificate(problem) => match problem {
            CertificateError::UnknownIssuer => refused(
                "TLS: the server's certificate is issued by a CA that is not trusted".into(),
                Hint::TrustCa,
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                refused(
                    format!("TLS: the server's certificate is not valid for that name ({problem})"),
                    Hint::ServerName,
                )
            }
            // webpki's name for it, which rustls passes on only as text: a self-signed
            // certificate with the CA flag (`openssl req -x509` sets it), trusted as its own CA.
            CertificateError::Other(other)
                if format!("{other:?}").contains("CaUsedAsEndEntity") =>
            {
                refused(
                    "TLS: the server presents a CA certificate as its own".into(),
                    Hint::ServerCertFromCa,
                )
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => fail(
                Failure::Auth,
                format!("TLS: the server's certificate has expired ({problem})"),
            ),
            other => fail(
                Failure::Auth,
                format!("TLS: the server's certificate is refused ({other})"),
            ),
        },
        rustls::Error::AlertReceived(AlertDescription::CertificateRequired) => refused(
            "TLS: the server requires a client certificate".into(),
            Hint::ClientCert,
        ),
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::UnknownCA
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::AccessDenied),
        ) => fail(
            Failure::Auth,
            format!("TLS: the server refused our client certificate ({alert:?})"),
        ),
        other => fail(Failure::Unavailable, format!("TLS failed: {other}")),
    }
}

/// The CAs of `bundle`, or else the system's.
fn trust_store(bundle: Option<&Path>) -> anyhow::Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    match bundle {
        Some(path) => {
            let pem = read_pem(path, "CA bundle")?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| bad_file(path, &err.to_string()))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(bad_file(path, "contains no CA certificate"));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(fail_with(
                    Failure::Usage,
                    "TLS: no trusted CA certificates found on this system",
                    Hint::TrustCa,
                ));
            }
        }
    }
    Ok(roots)
}

/// The PEM text of `path`: a regular file of at most a few MiB (`what` it should hold names
/// it in the error).
fn read_pem(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    crate::files::open_regular(path)
        .and_then(|opened| opened.read_all(crate::files::MAX_PEM, what))
        .map_err(|why| bad_file(path, &why))
}

fn bad_file(path: &Path, why: &str) -> anyhow::Error {
    fail(Failure::Usage, format!("{}: {why}", path.display()))
}

/// Accepts any server certificate: encryption without authentication, for development.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            signature,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            signature,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
