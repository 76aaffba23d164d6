//! TLS to a shared Redis (`rediss://…`): whom the lanes' processes trust,
//! and the client certificate they show. One rule for the daemon, the
//! bridge and the proxy, checked before any connection is tried, so that a
//! bad setting is named at once rather than as a failed handshake later.
//!
//! The roots are the configured CA file's certificates alone when one is
//! given (a team's private CA: the system's roots would also accept any
//! public certificate for the host), else the system's. A CA file without
//! a usable certificate, and a system without usable roots, are refused.
//! rustls runs on `ring`, so no C toolchain or aws-lc is needed.

use oxidepm_lanes::TlsFiles;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use std::io;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Why the TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file cannot be read or holds nothing usable.
    #[error("{what} {}: {why}; give a readable PEM file", path.display())]
    File {
        /// Which setting.
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// No CA file and no usable system roots.
    #[error(
        "no CA to check the server's certificate: the system has no usable roots ({0}); \
         set tls_ca_file"
    )]
    NoRoots(String),
    /// rustls refused the certificate and key, or a certificate without its key.
    #[error("the TLS client settings are unusable: {0}")]
    Config(String),
}

fn file_error(what: &'static str, path: &Path, why: impl ToString) -> TlsError {
    TlsError::File {
        what,
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// The rustls client configuration for `files`.
pub fn client_config(files: &TlsFiles) -> Result<Arc<ClientConfig>, TlsError> {
    files.check().map_err(|e| TlsError::Config(e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    match &files.ca_file {
        Some(ca) => {
            let certs = read_certs("tls_ca_file", ca)?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(file_error("tls_ca_file", ca, "no usable CA certificate"));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                let why = found
                    .errors
                    .first()
                    .map_or("none found".to_string(), |e| e.to_string());
                return Err(TlsError::NoRoots(why));
            }
        }
    }
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots);
    let config = match (&files.cert_file, &files.key_file) {
        (Some(cert), Some(key)) => {
            let chain = read_certs("tls_cert_file", cert)?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| file_error("tls_key_file", key, e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsError::Config(e.to_string()))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The files of `files` as redis-rs takes them, once they passed the rule
/// of [`client_config`] (redis-rs would take a CA file without a usable
/// certificate, and fail only at the handshake).
pub fn certificates(files: &TlsFiles) -> Result<redis::TlsCertificates, TlsError> {
    client_config(files)?;
    let read = |what: &'static str, p: &Path| std::fs::read(p).map_err(|e| file_error(what, p, e));
    let root_cert = files
        .ca_file
        .as_deref()
        .map(|p| read("tls_ca_file", p))
        .transpose()?;
    let client_tls = match (&files.cert_file, &files.key_file) {
        (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
            client_cert: read("tls_cert_file", c)?,
            client_key: read("tls_key_file", k)?,
        }),
        _ => None,
    };
    Ok(redis::TlsCertificates {
        client_tls,
        root_cert,
    })
}

fn read_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(what, path, e))?;
    if certs.is_empty() {
        return Err(file_error(what, path, "no certificate in it"));
    }
    Ok(certs)
}

/// Runs the TLS handshake over `tcp` with the server named `host` (a DNS
/// name or an IP address, which the certificate must then name).
pub async fn handshake(
    config: &Arc<ClientConfig>,
    host: &str,
    tcp: TcpStream,
) -> io::Result<TlsStream<TcpStream>> {
    let name = ServerName::try_from(host.to_string()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{host}' is not a server name TLS can check: {e}"),
        )
    })?;
    TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| {
            let certificate = e
                .get_ref()
                .and_then(|i| i.downcast_ref::<rustls::Error>())
                .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)));
            let hint = if certificate {
                "; the server's certificate must be signed by the CA of tls_ca_file (else \
                 the system's) and name the host of redis_url"
            } else {
                ""
            };
            io::Error::new(e.kind(), format!("TLS with {host}: {e}{hint}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path, ca: &str) -> TlsFiles {
        let p = dir.join("ca.pem");
        std::fs::write(&p, ca).unwrap();
        TlsFiles {
            ca_file: Some(p),
            ..TlsFiles::default()
        }
    }

    #[test]
    fn a_ca_file_without_a_usable_certificate_is_refused_by_its_setting() {
        let d = tempfile::tempdir().unwrap();
        for text in ["", "not a certificate\n"] {
            let f = files(d.path(), text);
            let e = client_config(&f).unwrap_err().to_string();
            assert!(e.starts_with("tls_ca_file "), "{e}");
            assert!(e.contains("ca.pem"), "{e}");
            // redis-rs's files pass the same rule.
            assert!(certificates(&f).is_err());
        }
        let garbled = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let e = client_config(&files(d.path(), garbled)).unwrap_err();
        assert!(e.to_string().contains("tls_ca_file"), "{e}");
        let missing = TlsFiles {
            ca_file: Some(d.path().join("nowhere.pem")),
            ..TlsFiles::default()
        };
        assert!(client_config(&missing)
            .unwrap_err()
            .to_string()
            .contains("nowhere.pem"));
    }

    #[test]
    fn a_ca_of_real_certificates_and_a_client_pair_are_taken() {
        let d = tempfile::tempdir().unwrap();
        let certs = oxidepm_testkit::tls::Certs::generate(d.path());
        let f = TlsFiles {
            ca_file: Some(certs.ca.clone()),
            cert_file: Some(certs.client_cert.clone()),
            key_file: Some(certs.client_key.clone()),
        };
        client_config(&f).unwrap();
        let c = certificates(&f).unwrap();
        assert!(c.root_cert.is_some() && c.client_tls.is_some());
        let half = TlsFiles {
            key_file: None,
            ..f
        };
        assert!(matches!(client_config(&half), Err(TlsError::Config(_))));
    }
}
