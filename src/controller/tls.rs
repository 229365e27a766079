//! The webhook's serving certificate: read from `tls.crt`, `tls.key` and `ca.crt` in a directory
//! (cert-manager's layout, a mounted Secret) or made there self-signed when it is empty, and
//! read again whenever those files change, so that a renewed or rotated certificate is served
//! without a restart. Owns the certificate files and the TLS server configuration; never
//! registers anything (the CA it reads is what `registration` writes into the caBundle).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio_rustls::rustls;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;

/// How often the files are read again to see whether they changed.
pub const RELOAD_EVERY: Duration = Duration::from_secs(5);

/// The webhook's serving certificate: PEM chain, PEM key, and the CA bundle that verifies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingCert {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

impl ServingCert {
    /// Reads `tls.crt`, `tls.key` and `ca.crt` (the CA is the chain itself when `ca.crt` is
    /// missing) from `dir`; `None` when `tls.crt` or `tls.key` is missing.
    pub fn read(dir: &Path) -> anyhow::Result<Option<ServingCert>> {
        let (c, k, a) = (dir.join("tls.crt"), dir.join("tls.key"), dir.join("ca.crt"));
        if !c.exists() || !k.exists() {
            return Ok(None);
        }
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
        };
        let cert_pem = read(&c)?;
        let key_pem = read(&k)?;
        let ca_pem = read(&a).unwrap_or_else(|_| cert_pem.clone());
        Ok(Some(ServingCert {
            cert_pem,
            key_pem,
            ca_pem,
        }))
    }

    /// Reads the certificate from `dir` when present; otherwise makes a self-signed CA and a
    /// serving certificate for `hosts` (DNS names or IPs) and writes them there, so that a
    /// restart keeps the same CA.
    pub fn load_or_create(dir: &Path, hosts: &[String]) -> anyhow::Result<ServingCert> {
        if let Some(sc) = Self::read(dir)? {
            return Ok(sc);
        }
        let sc = Self::generate(hosts)?;
        sc.write(dir)?;
        Ok(sc)
    }

    /// Writes `tls.crt`, `tls.key` and `ca.crt` into `dir` (created if needed).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("tls.crt"), &self.cert_pem)?;
        std::fs::write(dir.join("tls.key"), &self.key_pem)?;
        std::fs::write(dir.join("ca.crt"), &self.ca_pem)?;
        Ok(())
    }

    /// A new self-signed CA and a serving certificate it signs for `hosts`.
    pub fn generate(hosts: &[String]) -> anyhow::Result<ServingCert> {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "muster webhook CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
        let leaf_key = KeyPair::generate()?;
        let mut params = CertificateParams::new(hosts.to_vec())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "muster webhook");
        let leaf = params.signed_by(&leaf_key, &ca)?;
        Ok(ServingCert {
            cert_pem: leaf.pem(),
            key_pem: leaf_key.serialize_pem(),
            ca_pem: ca.pem(),
        })
    }

    /// The chain and key as rustls serves them; an error when either does not parse or the key
    /// is not the certificate's (a half-written rotation).
    pub fn certified_key(&self) -> anyhow::Result<CertifiedKey> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("tls.crt: {e}"))?;
        if certs.is_empty() {
            anyhow::bail!("tls.crt: no certificate");
        }
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| anyhow::anyhow!("tls.key: {e}"))?;
        CertifiedKey::from_der(certs, key, &rustls::crypto::ring::default_provider())
            .map_err(|e| anyhow::anyhow!("tls.crt and tls.key: {e}"))
    }
}

/// What is served now.
struct Served {
    key: Arc<CertifiedKey>,
    cert: ServingCert,
    /// The files as last read, served or not (a pair that did not load is not tried again
    /// until the files change once more).
    seen: ServingCert,
}

/// The certificate the webhook serves, picked per TLS handshake, and read again from its
/// directory by `reload` when the files changed. A change that does not load (a key that is not
/// the certificate's, a file that does not parse) leaves the previous certificate served.
pub struct CertReloader {
    dir: Option<PathBuf>,
    served: RwLock<Served>,
}

impl std::fmt::Debug for CertReloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertReloader")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl CertReloader {
    /// Serves `cert` for good (nothing to read again).
    pub fn fixed(cert: &ServingCert) -> anyhow::Result<Arc<CertReloader>> {
        Self::new(None, cert.clone())
    }

    /// Serves the certificate in `dir` (made self-signed for `hosts` when there is none), and
    /// reads it again from there on `reload`.
    pub fn load_or_create(dir: &Path, hosts: &[String]) -> anyhow::Result<Arc<CertReloader>> {
        let cert = ServingCert::load_or_create(dir, hosts)?;
        Self::new(Some(dir.to_path_buf()), cert)
    }

    fn new(dir: Option<PathBuf>, cert: ServingCert) -> anyhow::Result<Arc<CertReloader>> {
        let key = Arc::new(cert.certified_key()?);
        Ok(Arc::new(CertReloader {
            dir,
            served: RwLock::new(Served {
                key,
                seen: cert.clone(),
                cert,
            }),
        }))
    }

    /// The CA bundle of the certificate served now (what the webhook configuration's caBundle
    /// must hold).
    pub fn ca_pem(&self) -> String {
        self.served
            .read()
            .map(|s| s.cert.ca_pem.clone())
            .unwrap_or_default()
    }

    /// Reads the files again: `Ok(true)` when a new certificate is served from now on,
    /// `Ok(false)` when nothing changed since the last read, an error (the previous certificate
    /// stays) when the changed files do not load. Missing files change nothing.
    pub fn reload(&self) -> anyhow::Result<bool> {
        let Some(dir) = &self.dir else {
            return Ok(false);
        };
        let Some(read) = ServingCert::read(dir)? else {
            return Ok(false);
        };
        let mut served = self
            .served
            .write()
            .map_err(|_| anyhow::anyhow!("certificate lock poisoned"))?;
        if read == served.seen {
            return Ok(false);
        }
        served.seen = read.clone();
        let key = read.certified_key()?;
        served.key = Arc::new(key);
        served.cert = read;
        Ok(true)
    }

    /// `reload`, logged.
    pub fn reload_logged(&self) {
        match self.reload() {
            Ok(true) => tracing::info!(dir = ?self.dir, "webhook certificate reloaded"),
            Ok(false) => {}
            Err(e) => tracing::warn!(dir = ?self.dir, error = %e,
                "the webhook certificate changed but does not load; serving the previous one"),
        }
    }

    /// A TLS server configuration that serves whatever this holds at each handshake.
    pub fn server_config(self: &Arc<Self>) -> anyhow::Result<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Ok(rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(self.clone()))
    }
}

impl ResolvesServerCert for CertReloader {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.served.read().ok().map(|s| s.key.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory.
    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("muster-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn hosts() -> Vec<String> {
        vec!["localhost".into(), "127.0.0.1".into()]
    }

    /// The leaf certificate a TLS client is served by `reloader`, verified against `ca_pem`.
    async fn served_leaf(reloader: &Arc<CertReloader>, ca_pem: &str) -> Result<Vec<u8>, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, ServerName};
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots
                .add(c.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let server = reloader.server_config().map_err(|e| e.to_string())?;
        let (a, b) = tokio::io::duplex(64 * 1024);
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
        let (srv, cli) = tokio::join!(acceptor.accept(a), connector.connect(name, b));
        let cli = cli.map_err(|e| format!("TLS: {e}"))?;
        drop(srv);
        let (_, conn) = cli.get_ref();
        conn.peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec())
            .ok_or_else(|| "no certificate".to_string())
    }

    fn leaf_der(cert: &ServingCert) -> Vec<u8> {
        cert.certified_key().expect("loads").cert[0]
            .as_ref()
            .to_vec()
    }

    #[tokio::test]
    async fn a_replaced_certificate_is_served_after_reload() {
        let dir = temp_dir("reload");
        let reloader = CertReloader::load_or_create(&dir, &hosts()).expect("made self-signed");
        let first = ServingCert::read(&dir).expect("reads").expect("written");
        assert_eq!(reloader.ca_pem(), first.ca_pem);
        assert_eq!(
            served_leaf(&reloader, &first.ca_pem).await,
            Ok(leaf_der(&first))
        );
        assert!(!reloader.reload().expect("unchanged"), "nothing changed");

        // A rotation: a new CA and certificate replace the files.
        let second = ServingCert::generate(&hosts()).expect("cert");
        second.write(&dir).expect("written");
        assert!(reloader.reload().expect("reloads"), "the files changed");
        assert_eq!(reloader.ca_pem(), second.ca_pem);
        assert_eq!(
            served_leaf(&reloader, &second.ca_pem).await,
            Ok(leaf_der(&second))
        );
        let old = served_leaf(&reloader, &first.ca_pem).await;
        assert!(
            old.as_ref().is_err_and(|e| e.starts_with("TLS")),
            "the old CA no longer verifies it: {old:?}"
        );

        // Half a rotation (a new certificate, the old key): the previous pair stays served,
        // and the same broken files are not reported again.
        let third = ServingCert::generate(&hosts()).expect("cert");
        std::fs::write(dir.join("tls.crt"), &third.cert_pem).expect("written");
        let e = reloader
            .reload()
            .expect_err("the key is not the certificate's");
        assert!(e.to_string().contains("tls.crt and tls.key"), "{e}");
        assert!(!reloader.reload().expect("seen already"));
        assert_eq!(
            served_leaf(&reloader, &second.ca_pem).await,
            Ok(leaf_der(&second))
        );
        // The key follows: the new pair is served.
        std::fs::write(dir.join("tls.key"), &third.key_pem).expect("written");
        std::fs::write(dir.join("ca.crt"), &third.ca_pem).expect("written");
        assert!(reloader.reload().expect("reloads"));
        assert_eq!(
            served_leaf(&reloader, &third.ca_pem).await,
            Ok(leaf_der(&third))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_existing_certificate_is_read_not_replaced() {
        let dir = temp_dir("existing");
        let cert = ServingCert::generate(&hosts()).expect("cert");
        cert.write(&dir).expect("written");
        assert_eq!(
            ServingCert::load_or_create(&dir, &hosts()).expect("reads"),
            cert
        );
        // Without ca.crt the chain is its own CA bundle.
        std::fs::remove_file(dir.join("ca.crt")).expect("removed");
        let read = ServingCert::read(&dir).expect("reads").expect("present");
        assert_eq!(read.ca_pem, cert.cert_pem);
        // Files that vanish change nothing.
        let reloader = CertReloader::load_or_create(&dir, &hosts()).expect("loads");
        std::fs::remove_dir_all(&dir).expect("removed");
        assert!(!reloader.reload().expect("nothing to read"));
        assert_eq!(reloader.ca_pem(), cert.cert_pem);
    }

    #[test]
    fn a_fixed_certificate_never_reloads_and_a_bad_one_is_refused() {
        let cert = ServingCert::generate(&hosts()).expect("cert");
        let fixed = CertReloader::fixed(&cert).expect("loads");
        assert!(!fixed.reload().expect("nothing to read"));
        fixed.server_config().expect("rustls accepts it");
        let other = ServingCert::generate(&hosts()).expect("cert");
        let mismatched = ServingCert {
            key_pem: other.key_pem,
            ..cert
        };
        assert!(CertReloader::fixed(&mismatched).is_err());
    }
}
