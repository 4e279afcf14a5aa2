//! The rotation loop (upstream `client-go/util/certificate` `manager.Start`): sleep until the
//! rotation deadline — a random point at 70–90 % of the current certificate's lifetime
//! (`nextRotationDeadline`, `jitteryDuration`), or now when there is no certificate or it no
//! longer matches the template — then make a new key and CSR, wait for the certificate, write
//! it to the store and hand it to the holder. A failed rotation is retried after 2, 4, 8, 16 s
//! and then every 32 s (upstream's backoff, then `PollInfinite(32s)`). A template can change
//! while the manager runs (the serving certificate follows the node's addresses, upstream's
//! dynamic `getTemplate`): a certificate that no longer satisfies the new template is replaced
//! at once. The clock, the jitter and the CSR round trip are injectable, so the loop runs
//! under tokio's paused time in tests.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, info, info_span, warn};

use super::CertError;
use super::csr::{self, Template};
use super::holder::CertHolder;
use super::store::{FileStore, KeyPair};

/// Wall-clock time (certificates' NotBefore/NotAfter are wall-clock).
pub trait Clock: Send + Sync {
    fn now(&self) -> SystemTime;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// Maps a certificate's total lifetime to the offset from NotBefore at which to rotate.
pub type Jitter = Arc<dyn Fn(Duration) -> Duration + Send + Sync>;

/// Upstream `jitteryDuration`: `wait.Jitter(total, 0.2) - 0.3·total`, i.e. uniformly in
/// [0.7, 0.9) of the lifetime.
pub fn jittery_duration(total: Duration) -> Duration {
    crate::util::wait::jitter(total, 0.2) - total.mul_f64(0.3)
}

/// One certificate request round trip: post the CSR, wait for the certificate (PEM) and name
/// the CSR.
#[async_trait::async_trait]
pub trait Requester: Send + Sync {
    async fn request(&self, template: &Template, csr_pem: &str) -> Result<Issued, CertError>;
}

/// An issued certificate and the CSR it came from.
#[derive(Debug, Clone)]
pub struct Issued {
    pub csr_name: String,
    pub cert_pem: String,
}

/// Requests through the API server: with `client` (authenticated by the current certificate),
/// or with `fallback` (the bootstrap credentials) when the current certificate is missing or
/// expired (upstream `getCurrentCertificateOrBootstrap` / `clientsetFn`).
pub struct ApiRequester {
    pub client: kube::Client,
    pub fallback: Option<kube::Client>,
    pub holder: Arc<CertHolder>,
}

#[async_trait::async_trait]
impl Requester for ApiRequester {
    async fn request(&self, template: &Template, csr_pem: &str) -> Result<Issued, CertError> {
        let usable = self
            .holder
            .current()
            .is_some_and(|p| !p.expired_at(SystemTime::now()));
        let client = match (&self.fallback, usable) {
            (Some(f), false) => {
                info!(
                    "the current certificate is expired or missing: using the bootstrap credentials"
                );
                f.clone()
            }
            _ => self.client.clone(),
        };
        let (name, uid) = csr::request_certificate(client.clone(), None, csr_pem, template).await?;
        let cert_pem = csr::wait_for_certificate(client, &name, &uid, csr::ISSUE_TIMEOUT).await?;
        Ok(Issued {
            csr_name: name,
            cert_pem,
        })
    }
}

/// The rotation of one certificate.
pub struct Manager {
    pub name: String,
    /// What the certificate must hold; changes are followed.
    pub template: tokio::sync::watch::Receiver<Template>,
    pub holder: Arc<CertHolder>,
    pub store: FileStore,
    pub requester: Arc<dyn Requester>,
    pub clock: Arc<dyn Clock>,
    pub jitter: Jitter,
    /// The certificate's TTL and renewal errors (`kubelet_certificate_manager_*`).
    pub metrics: crate::metrics::CertificateMetrics,
}

/// Backoff before retry `n` (0-based) of a failed rotation.
fn retry_delay(n: u32) -> Duration {
    if n < 4 {
        Duration::from_secs(2 << n)
    } else {
        Duration::from_secs(32)
    }
}

impl Manager {
    /// A manager with the system clock and upstream's jitter.
    pub fn new(
        name: &str,
        template: Template,
        holder: Arc<CertHolder>,
        store: FileStore,
        requester: Arc<dyn Requester>,
    ) -> Manager {
        Manager {
            name: name.to_string(),
            template: tokio::sync::watch::Sender::new(template).subscribe(),
            holder,
            store,
            requester,
            clock: Arc::new(SystemClock),
            jitter: Arc::new(jittery_duration),
            metrics: Default::default(),
        }
    }

    /// Report the certificate's TTL and renewal errors in `metrics`.
    pub fn with_metrics(self, metrics: crate::metrics::CertificateMetrics) -> Manager {
        metrics.set_expiry(self.holder.current().map(|p| p.not_after));
        Manager { metrics, ..self }
    }

    /// Follow `template` from now on (its current value replaces the one given to `new`).
    pub fn following(mut self, template: tokio::sync::watch::Receiver<Template>) -> Manager {
        self.template = template;
        self
    }

    /// When to rotate: now without a certificate or with one that does not match the
    /// template, else NotBefore plus the jittered share of its lifetime.
    pub fn next_rotation_deadline(&self) -> SystemTime {
        let now = self.clock.now();
        match self.holder.current() {
            Some(pair) if self.template.borrow().satisfied_by(&pair) => {
                let total = pair
                    .not_after
                    .duration_since(pair.not_before)
                    .unwrap_or_default();
                let deadline = pair.not_before + (self.jitter)(total);
                info!(manager = %self.name, expiration = %chrono::DateTime::<chrono::Utc>::from(pair.not_after), deadline = %chrono::DateTime::<chrono::Utc>::from(deadline), "certificate rotation deadline");
                deadline
            }
            _ => now,
        }
    }

    /// One rotation: a new key and CSR, the certificate, stored and installed.
    pub async fn rotate(&self) -> Result<KeyPair, CertError> {
        let key = csr::generate_key()?;
        let template = self.template.borrow().clone();
        let csr_pem = csr::make_csr(&template, &key)?;
        let issued = self.requester.request(&template, &csr_pem).await?;
        let pair = self.store.update(&issued.cert_pem, &key.serialize_pem())?;
        info!(manager = %self.name, csr = %issued.csr_name, serial = %pair.serial, not_after = %chrono::DateTime::<chrono::Utc>::from(pair.not_after), "certificate rotated");
        self.holder.set(pair.clone());
        Ok(pair)
    }

    /// Rotates at every deadline, and when the template changes to one the certificate does
    /// not satisfy, until `cancel`.
    pub async fn run(mut self, cancel: CancellationToken) {
        let span = info_span!("certificate_manager", manager = %self.name);
        async move {
            info!("certificate rotation is enabled");
            // A template nobody can change any more (its sender is gone) is not watched.
            let mut watching = true;
            loop {
                let deadline = self.next_rotation_deadline();
                if let Ok(wait) = deadline.duration_since(self.clock.now())
                    && !wait.is_zero()
                {
                    info!(wait = ?wait, "waiting for the next certificate rotation");
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(wait) => {}
                        changed = self.template.changed(), if watching => {
                            match changed {
                                Ok(()) => info!(
                                    dns = ?self.template.borrow().dns_names,
                                    ips = ?self.template.borrow().ip_addresses,
                                    "the certificate template changed"
                                ),
                                Err(_) => watching = false,
                            }
                            continue;
                        }
                    }
                }
                let mut attempt = 0;
                loop {
                    let previous = self.holder.current().map(|p| p.not_before);
                    match self.rotate().await {
                        Ok(pair) => {
                            self.metrics.set_expiry(Some(pair.not_after));
                            if let Some(issued) = previous {
                                self.metrics.rotated(issued);
                            }
                            break;
                        }
                        Err(e) => {
                            // Upstream's `certificateRenewFailure` counter.
                            self.metrics.renew_errors.inc();
                            warn!(error = %e, attempt, "certificate rotation failed");
                        }
                    }
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(retry_delay(attempt)) => {}
                    }
                    attempt += 1;
                }
            }
        }
        .instrument(span)
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    /// Wall time that moves with tokio's (paused) clock from a fixed start.
    struct TestClock {
        base: SystemTime,
        start: tokio::time::Instant,
    }

    impl Clock for TestClock {
        fn now(&self) -> SystemTime {
            self.base + self.start.elapsed()
        }
    }

    /// Signs every CSR with a CA of its own for `lifetime` from the clock's now; fails the
    /// first `failures` requests.
    struct FakeSigner {
        clock: Arc<TestClock>,
        lifetime: Duration,
        failures: Mutex<u32>,
        calls: Mutex<Vec<SystemTime>>,
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    }

    impl FakeSigner {
        fn new(clock: Arc<TestClock>, lifetime: Duration, failures: u32) -> FakeSigner {
            let ca_key = rcgen::KeyPair::generate().expect("key");
            let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            FakeSigner {
                clock,
                lifetime,
                failures: Mutex::new(failures),
                calls: Mutex::new(Vec::new()),
                issuer: rcgen::Issuer::new(p, ca_key),
            }
        }

        fn sign(&self, csr_pem: &str) -> String {
            let mut req = rcgen::CertificateSigningRequestParams::from_pem(csr_pem).expect("csr");
            let now = self.clock.now();
            req.params.not_before = now.into();
            req.params.not_after = (now + self.lifetime).into();
            req.signed_by(&self.issuer).expect("sign").pem()
        }
    }

    #[async_trait::async_trait]
    impl Requester for FakeSigner {
        async fn request(&self, _t: &Template, csr_pem: &str) -> Result<Issued, CertError> {
            self.calls.lock().push(self.clock.now());
            {
                let mut f = self.failures.lock();
                if *f > 0 {
                    *f -= 1;
                    return Err(CertError::Csr("refused".into()));
                }
            }
            Ok(Issued {
                csr_name: "csr-test".into(),
                cert_pem: self.sign(csr_pem),
            })
        }
    }

    fn setup(failures: u32) -> (tempfile::TempDir, Arc<TestClock>, Arc<FakeSigner>, Manager) {
        let dir = tempfile::tempdir().expect("tempdir");
        // A whole second, as X.509 times are.
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000);
        let clock = Arc::new(TestClock {
            base,
            start: tokio::time::Instant::now(),
        });
        let signer = Arc::new(FakeSigner::new(
            clock.clone(),
            Duration::from_secs(100),
            failures,
        ));
        let holder = CertHolder::new("test", None);
        let m = Manager {
            name: "test".into(),
            template: tokio::sync::watch::Sender::new(Template::client("n1")).subscribe(),
            holder,
            store: FileStore::new(dir.path(), "kubelet-client"),
            requester: signer.clone(),
            clock: clock.clone(),
            jitter: Arc::new(|total: Duration| total.mul_f64(0.8)),
            metrics: Default::default(),
        };
        (dir, clock, signer, m)
    }

    #[test]
    fn the_jittered_deadline_is_within_70_to_90_percent() {
        let total = Duration::from_secs(1000);
        for _ in 0..1000 {
            let d = jittery_duration(total);
            assert!(
                d >= Duration::from_secs(700) && d < Duration::from_secs(900),
                "{d:?}"
            );
        }
    }

    #[test]
    fn failed_rotations_back_off_like_upstream() {
        let delays: Vec<u64> = (0..7).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, vec![2, 4, 8, 16, 32, 32, 32]);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_certificate_one_is_requested_at_once_then_renewed_at_the_deadline() {
        let (dir, clock, signer, m) = setup(0);
        let holder = m.holder.clone();
        let base = clock.now();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(m.run(cancel.clone()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let first = holder.current().expect("a certificate at once");
        assert_eq!(first.common_name, "system:node:n1");
        assert_eq!(first.not_before, base);
        // Lifetime 100 s, jitter fixed at 80 %: the next request is at base + 80 s.
        tokio::time::sleep(Duration::from_secs(120)).await;
        let calls = signer.calls.lock().clone();
        assert_eq!(calls, vec![base, base + Duration::from_secs(80)]);
        let second = holder.current().expect("renewed");
        assert_ne!(second.serial, first.serial);
        let on_disk = FileStore::new(dir.path(), "kubelet-client")
            .current()
            .expect("read")
            .expect("stored");
        assert_eq!(on_disk.serial, second.serial);
        cancel.cancel();
        task.await.expect("join");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_rotation_is_retried_with_backoff_and_connections_are_ended() {
        let (_dir, clock, signer, m) = setup(3);
        let metrics = crate::metrics::CertificateMetrics::default();
        let m = m.with_metrics(metrics.clone());
        assert_eq!(metrics.ttl.seconds(), f64::INFINITY, "no certificate yet");
        let holder = m.holder.clone();
        let token = holder.connection_token();
        let base = clock.now();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(m.run(cancel.clone()));
        tokio::time::sleep(Duration::from_secs(30)).await;
        let secs: Vec<u64> = signer
            .calls
            .lock()
            .iter()
            .map(|t| t.duration_since(base).map(|d| d.as_secs()).unwrap_or(0))
            .collect();
        // Fails at 0, 2 (after 2 s), 6 (after 4 s); succeeds at 14 (after 8 s).
        assert_eq!(secs, vec![0, 2, 6, 14]);
        assert!(holder.current().is_some());
        // `kubelet_certificate_manager_*_expiration_renew_errors` and the TTL.
        assert_eq!(metrics.renew_errors.get(), 3);
        assert!(metrics.ttl.seconds().is_finite());
        assert!(
            token.is_cancelled(),
            "connections of the old certificate end"
        );
        cancel.cancel();
        task.await.expect("join");
    }

    #[tokio::test(start_paused = true)]
    async fn a_certificate_not_matching_the_template_is_replaced_at_once() {
        let (dir, _clock, signer, m) = setup(0);
        let (c, k) = crate::certificate::store::tests::self_signed("system:node:other", 3600);
        let pair = KeyPair::from_pem(&c, &k).expect("pair");
        m.holder.set(pair);
        let holder = m.holder.clone();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(m.run(cancel.clone()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(signer.calls.lock().len(), 1);
        assert_eq!(
            holder.current().map(|p| p.common_name),
            Some("system:node:n1".to_string())
        );
        drop(dir);
        cancel.cancel();
        task.await.expect("join");
    }

    #[tokio::test(start_paused = true)]
    async fn a_changed_template_replaces_the_certificate_at_once_and_only_when_unsatisfied() {
        let (_dir, clock, signer, m) = setup(0);
        let ip = |s: &str| vec![s.parse::<std::net::IpAddr>().expect("ip")];
        let serving =
            |ips: Vec<std::net::IpAddr>| Template::serving("n1", &["n1".to_string()], &ips);
        let tx = tokio::sync::watch::Sender::new(serving(ip("10.0.0.1")));
        let m = m.following(tx.subscribe());
        let holder = m.holder.clone();
        let base = clock.now();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(m.run(cancel.clone()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let first = holder.current().expect("issued");
        assert_eq!(first.ip_addresses, vec!["10.0.0.1".to_string()]);
        // The same addresses again: nothing to do.
        tx.send_replace(serving(ip("10.0.0.1")));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(signer.calls.lock().len(), 1);
        // The node's address changed: a new certificate at once, not at the 80 s deadline.
        tx.send_replace(serving(ip("10.0.0.2")));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let calls = signer.calls.lock().clone();
        assert_eq!(calls, vec![base, base + Duration::from_secs(11)]);
        let second = holder.current().expect("renewed");
        assert_eq!(second.ip_addresses, vec!["10.0.0.2".to_string()]);
        assert_ne!(second.serial, first.serial);
        // The next rotation is at the new certificate's deadline (80 % of 100 s).
        tokio::time::sleep(Duration::from_secs(85)).await;
        assert_eq!(signer.calls.lock().len(), 3);
        // A template whose sender is gone stops being watched, the deadlines go on.
        drop(tx);
        tokio::time::sleep(Duration::from_secs(81)).await;
        assert_eq!(signer.calls.lock().len(), 4);
        cancel.cancel();
        task.await.expect("join");
    }
}
