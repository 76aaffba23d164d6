//! Certificates for tests of TLS: a CA, a server certificate for
//! `localhost` and 127.0.0.1 signed by it, and a client certificate.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use std::path::{Path, PathBuf};

/// PEM files in a directory.
#[derive(Clone, Debug)]
pub struct Certs {
    /// The CA certificate.
    pub ca: PathBuf,
    /// The server's certificate, then its key.
    pub server_cert: PathBuf,
    /// The server's private key.
    pub server_key: PathBuf,
    /// A client certificate signed by the CA.
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
}

impl Certs {
    /// Generates a fresh set into `dir` (files 0644, keys 0600).
    pub fn generate(dir: &Path) -> Certs {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "oxidepm test CA");
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let leaf = |names: Vec<String>, cn: &str| {
            let mut p = CertificateParams::new(names).unwrap();
            p.distinguished_name.push(DnType::CommonName, cn);
            let key = KeyPair::generate().unwrap();
            let cert = p.signed_by(&key, &ca, &ca_key).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server, server_key) = leaf(vec!["localhost".into(), "127.0.0.1".into()], "localhost");
        let (client, client_key) = leaf(vec!["oxidepm-client".into()], "oxidepm-client");
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let certs = Certs {
            ca: write("ca.pem", &ca.pem()),
            server_cert: write("server.pem", &server),
            server_key: write("server.key", &server_key),
            client_cert: write("client.pem", &client),
            client_key: write("client.key", &client_key),
        };
        use std::os::unix::fs::PermissionsExt;
        for k in [&certs.server_key, &certs.client_key] {
            std::fs::set_permissions(k, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        certs
    }

    /// redis-server's TLS settings for these files; clients must show a
    /// certificate of the CA when `client_auth`.
    pub fn server_conf(&self, client_auth: bool) -> String {
        format!(
            "tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\ntls-auth-clients {}\n",
            self.server_cert.display(),
            self.server_key.display(),
            self.ca.display(),
            if client_auth { "yes" } else { "no" }
        )
    }

    /// The redis crate's TLS settings: trust the CA, show the client
    /// certificate.
    pub fn client(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: std::fs::read(&self.client_cert).unwrap(),
                client_key: std::fs::read(&self.client_key).unwrap(),
            }),
            root_cert: Some(std::fs::read(&self.ca).unwrap()),
        }
    }
}
