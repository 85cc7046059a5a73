//! TLS for secure metrics, as controller-runtime serves it: the certificate comes from a
//! directory (`tls.crt`/`tls.key`, e.g. a mounted cert-manager Secret, re-read when it is
//! rotated) or, without one, is self-signed at start. The listener hands axum finished TLS
//! streams; handshakes run in their own tasks so a slow client cannot hold up the others.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::server::TlsStream;

/// A handshake that takes longer is dropped (a scrape's client is on the cluster network).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a rotated certificate in the directory is noticed.
const RELOAD_CHECK: Duration = Duration::from_secs(10);

/// Where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertSource {
    /// PEM files `dir/cert` and `dir/key`.
    Dir {
        dir: PathBuf,
        cert: String,
        key: String,
    },
    /// Generated at start, valid for `localhost` and 127.0.0.1 (clients skip verification).
    SelfSigned,
}

/// The ring provider kube's rustls is built with, named so no other one is picked up.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server configuration for `source`; fails if the certificate cannot be read or made.
pub fn server_config(source: &CertSource) -> anyhow::Result<Arc<ServerConfig>> {
    let provider = provider();
    let resolver: Arc<dyn ResolvesServerCert> = match source {
        CertSource::Dir { dir, cert, key } => Arc::new(DirCert::load(
            dir.join(cert),
            dir.join(key),
            provider.clone(),
        )?),
        CertSource::SelfSigned => Arc::new(rustls::sign::SingleCertAndKey::from(self_signed(
            &provider,
        )?)),
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    // HTTP/1.1 only, as controller-runtime's metrics server (HTTP/2 off since the rapid-reset CVEs).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn self_signed(provider: &CryptoProvider) -> anyhow::Result<CertifiedKey> {
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .context("generating the self-signed metrics certificate")?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        generated.signing_key.serialize_der(),
    ));
    Ok(CertifiedKey::new(
        vec![generated.cert.der().clone()],
        provider.key_provider.load_private_key(key)?,
    ))
}

fn read_pair(cert: &Path, key: &Path, provider: &CryptoProvider) -> anyhow::Result<CertifiedKey> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading the metrics certificate {}", cert.display()))?;
    anyhow::ensure!(!chain.is_empty(), "{} holds no certificate", cert.display());
    let key_der = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading the metrics key {}", key.display()))?;
    Ok(CertifiedKey::new(
        chain,
        provider.key_provider.load_private_key(key_der)?,
    ))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// A certificate read from files, read again when their modification times change (a mounted
/// Secret is swapped atomically by the kubelet), so a rotation needs no restart.
#[derive(Debug)]
struct DirCert {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    stamp: (Option<SystemTime>, Option<SystemTime>),
    checked: Instant,
    key: Arc<CertifiedKey>,
}

impl DirCert {
    fn load(cert: PathBuf, key: PathBuf, provider: Arc<CryptoProvider>) -> anyhow::Result<Self> {
        let stamp = (modified(&cert), modified(&key));
        let pair = read_pair(&cert, &key, &provider)?;
        Ok(Self {
            cert,
            key,
            provider,
            current: Mutex::new(Loaded {
                stamp,
                checked: Instant::now(),
                key: Arc::new(pair),
            }),
        })
    }
}

impl ResolvesServerCert for DirCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.checked.elapsed() >= RELOAD_CHECK {
            current.checked = Instant::now();
            let stamp = (modified(&self.cert), modified(&self.key));
            if stamp != current.stamp {
                match read_pair(&self.cert, &self.key, &self.provider) {
                    Ok(pair) => {
                        tracing::info!(cert = %self.cert.display(), "metrics certificate reloaded");
                        current.key = Arc::new(pair);
                        current.stamp = stamp;
                    }
                    // Half-written files: keep serving the old pair and try again later.
                    Err(e) => tracing::warn!("metrics certificate not reloaded: {e:#}"),
                }
            }
        }
        Some(current.key.clone())
    }
}

/// A listener whose connections have completed the TLS handshake.
pub struct TlsListener {
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        let (sender, accepted) = mpsc::channel(16);
        tokio::spawn(async move {
            while !sender.is_closed() {
                let (stream, peer) = match tcp.accept().await {
                    Ok(connection) => connection,
                    Err(e) => {
                        // Out of file descriptors and the like: back off, as axum does.
                        tracing::debug!("metrics accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, sender) = (acceptor.clone(), sender.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = sender.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, "metrics TLS handshake failed: {e}"),
                        Err(_) => tracing::debug!(%peer, "metrics TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { accepted, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(connection) => connection,
            // The accept task only ends once this listener is gone; never reached.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
