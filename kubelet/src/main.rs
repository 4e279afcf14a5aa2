//! The `kubelet` binary (upstream `cmd/kubelet`): parse flags, set up logging, connect to the
//! container runtime (a CRI endpoint, or an embedded dockershim serving CRI on
//! `<root-dir>/dockershim.sock` when no endpoint is given), start the read-only HTTP server and
//! run the kubelet until SIGTERM/SIGINT. Pods are left running on exit.
//!
//! A failure to start is one line on stderr, `kubelet: <what>: <why>`, and a non-zero exit: a
//! malformed command line (status 2, clap's usage error reduced to its first line), a bad flag
//! value, config file or combination of them, or an unusable `--kubeconfig` (status 1, before
//! anything is started or logged), or a failure while starting (status 1, the whole cause chain
//! on the line).

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use kubelet::kubelet::Kubelet;
use kubelet::kuberuntime::KubeGenericRuntimeManager;
use kubelet::metrics::Metrics;
use tokio_util::sync::CancellationToken;

/// Upstream `--fail-swap-on`: the lines of /proc/swaps after its header, when swap is on.
fn swap_devices() -> Vec<String> {
    std::fs::read_to_string("/proc/swaps")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// What an ignored `shutdownGracePeriodByPodPriority` means, for the ignored-fields line:
/// graceful node shutdown is implemented (`nodeshutdown`), by the two periods only.
const SHUTDOWN_BY_PRIORITY_NOTE: &str = " (graceful node shutdown uses shutdownGracePeriod and shutdownGracePeriodCriticalPods; pods are not grouped by priority)";

/// Process settings upstream applies at start-up: `oomScoreAdj` and `maxOpenFiles` (failures
/// are logged, as upstream).
fn apply_process_settings(config: &kubelet::kubeletconfig::KubeletConfig) {
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", config.oom_score_adj.to_string()) {
        tracing::warn!(value = config.oom_score_adj, error = %e, "Failed to ApplyOOMScoreAdj");
    }
    let lim = libc::rlimit {
        rlim_cur: config.max_open_files as libc::rlim_t,
        rlim_max: config.max_open_files as libc::rlim_t,
    };
    // SAFETY: setrlimit(2) with a valid, initialized struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        tracing::warn!(value = config.max_open_files, error = %std::io::Error::last_os_error(), "Failed to set rlimit on max file handles");
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers");
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("received SIGTERM"),
        _ = int.recv() => tracing::info!("received SIGINT"),
    }
}

/// `--rotate-certificates`: an API client whose certificate is the client certificate
/// manager's (seeded from `--cert-dir` or the kubeconfig), and that manager; it renews with the
/// current certificate, or with the bootstrap credentials once that has expired.
async fn client_rotation(
    kubeconfig: &std::path::Path,
    bootstrap: Option<&std::path::Path>,
    cert_dir: &std::path::Path,
    node_name: &str,
) -> Result<(kube::Client, kubelet::certificate::Manager), kubelet::certificate::CertError> {
    use kubelet::certificate::{self as cert, CertHolder, FileStore};
    let (_, config) = cert::client::load_kubeconfig(kubeconfig).await?;
    let store = FileStore::new(cert_dir, cert::CLIENT_PREFIX);
    let initial = cert::bootstrap::initial_client_pair(&store, kubeconfig).await?;
    let holder = CertHolder::new(cert::CLIENT_PREFIX, initial);
    let client = cert::client::rotating_client(&config, holder.clone())?;
    let fallback = match bootstrap {
        Some(b) => Some(cert::client::client_from_file(b).await?),
        None => None,
    };
    let requester = std::sync::Arc::new(cert::manager::ApiRequester {
        client: client.clone(),
        fallback,
        holder: holder.clone(),
    });
    let manager = cert::Manager::new(
        cert::csr::CLIENT_SIGNER,
        cert::csr::Template::client(node_name),
        holder,
        store,
        requester,
    );
    Ok((client, manager))
}

/// `--rotate-server-certificates`: the serving certificate's holder (the secure server's
/// resolver) and its manager, for the node's name and IP; the template follows the node's IP
/// (upstream's `getTemplate` from the last observed node addresses), so a changed address gets
/// a new certificate.
fn serving_rotation(
    client: kube::Client,
    tls: &kubelet::server::secure::TlsConfig,
    node_name: &str,
    node_ip: &kubelet::nodestatus::NodeIp,
    cancel: CancellationToken,
) -> (
    std::sync::Arc<kubelet::certificate::CertHolder>,
    kubelet::certificate::Manager,
) {
    use kubelet::certificate::{self as cert, CertHolder, FileStore};
    let store = FileStore::new(&tls.cert_dir, cert::SERVER_PREFIX);
    let initial = match store.current() {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "the stored serving certificate is unusable");
            None
        }
    };
    let holder = CertHolder::new(cert::SERVER_PREFIX, initial);
    let template_of = {
        let node_name = node_name.to_string();
        move |ip: &str| {
            let ips: Vec<std::net::IpAddr> = ip.parse().into_iter().collect();
            cert::csr::Template::serving(&node_name, std::slice::from_ref(&node_name), &ips)
        }
    };
    let mut ips = node_ip.subscribe();
    let template = tokio::sync::watch::Sender::new(template_of(&ips.borrow_and_update()));
    let templates = template.subscribe();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                changed = ips.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let ip = ips.borrow_and_update().clone();
                    template.send_replace(template_of(&ip));
                }
            }
        }
    });
    let requester = std::sync::Arc::new(cert::manager::ApiRequester {
        client,
        fallback: None,
        holder: holder.clone(),
    });
    let initial = templates.borrow().clone();
    let manager = cert::Manager::new(
        cert::csr::SERVING_SIGNER,
        initial,
        holder.clone(),
        store,
        requester,
    )
    .following(templates);
    (holder, manager)
}

fn fail(status: u8, line: impl std::fmt::Display) -> ExitCode {
    eprintln!("kubelet: {line}");
    ExitCode::from(status)
}

/// Starts the embedded dockershim on a tokio runtime of its own, on threads of its own, as if
/// it were its own process: the kubelet's bursts (a relist, 110 pods' statuses, a `/pods`
/// answer) then do not hold up the shim's calls behind them on shared worker threads, and the
/// kernel shares the CPUs between the two as between cri-dockerd and the Go kubelet. Answers,
/// once the shim serves CRI, a receiver that completes when it has stopped.
async fn start_embedded_dockershim(
    config: dockershim::config::ShimConfig,
    cancel: CancellationToken,
) -> anyhow::Result<tokio::sync::oneshot::Receiver<()>> {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("dockershim")
        .enable_all()
        .build()
        .context("starting the embedded dockershim's tokio runtime")?;
    std::thread::Builder::new()
        .name("dockershim".into())
        .spawn(move || {
            runtime.block_on(async move {
                match dockershim::start(config, cancel).await {
                    Ok(running) => {
                        let _ = ready_tx.send(Ok(()));
                        let _ = running.server.await;
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
            let _ = stopped_tx.send(());
        })
        .context("starting the embedded dockershim's thread")?;
    ready_rx
        .await
        .context("the embedded dockershim's thread ended while starting")??;
    Ok(stopped_rx)
}

fn main() -> ExitCode {
    // Before any thread starts (see node_common::memory).
    node_common::memory::one_arena();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(async_main()),
        Err(e) => fail(1, format!("starting the tokio runtime: {e}")),
    }
}

async fn async_main() -> ExitCode {
    // Like upstream, --version answers before the config file is read.
    if std::env::args()
        .skip(1)
        .any(|a| a == "--version" || a == "--version=true")
    {
        print!("{}", kubelet::version::version_text());
        return ExitCode::SUCCESS;
    }
    let (flags, config) = match kubelet::flags::load(std::env::args_os()) {
        Ok(v) => v,
        // --help
        Err(kubelet::kubeletconfig::ConfigError::Clap(e)) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(kubelet::kubeletconfig::ConfigError::Clap(e)) => {
            return fail(2, dockershim::config::clap_error_line(&e));
        }
        Err(e) => return fail(1, e),
    };
    kubelet::logging::init(&config.logging_format, config.verbosity);
    // Upstream builds its API client before it starts anything: an unusable kubeconfig stops
    // it ("invalid kubeconfig"). With --bootstrap-kubeconfig, a missing or expired one is first
    // made by TLS bootstrap (upstream `LoadClientCert`).
    let mut client_manager = None;
    let api_client = match &config.api {
        None => None,
        Some(api) => {
            if let Some(boot) = &flags.bootstrap_kubeconfig
                && let Err(e) = kubelet::certificate::bootstrap::load_client_cert(
                    &api.kubeconfig,
                    boot,
                    &config.tls.cert_dir,
                    &config.node_name,
                    kubelet::certificate::csr::ISSUE_TIMEOUT,
                )
                .await
            {
                return fail(
                    1,
                    format_args!("failed to run Kubelet: TLS bootstrap from {boot:?}: {e}"),
                );
            }
            if config.tls.rotate_certificates {
                match client_rotation(
                    &api.kubeconfig,
                    flags.bootstrap_kubeconfig.as_deref(),
                    &config.tls.cert_dir,
                    &config.node_name,
                )
                .await
                {
                    Ok((c, m)) => {
                        client_manager = Some(m);
                        Some(c)
                    }
                    Err(e) => {
                        return fail(
                            1,
                            format_args!(
                                "invalid value for --kubeconfig: {:?}: {e}",
                                api.kubeconfig
                            ),
                        );
                    }
                }
            } else {
                match kubelet::apimode::client_from_kubeconfig(&api.kubeconfig).await {
                    Ok(c) => Some(c),
                    Err(e) => return fail(1, e),
                }
            }
        }
    };
    // Upstream `BuildAuth`: a webhook without an API server stops the kubelet (whether the
    // secure port is on or not, as upstream's).
    let auth = match kubelet::server::auth::build(
        &config.auth,
        config.tls.client_ca_file.is_some(),
        config.tls.anonymous_auth,
        api_client.clone(),
        &config.node_name,
    ) {
        Ok(a) => a,
        Err(e) => return fail(1, e),
    };
    match run(flags, config, api_client, auth, client_manager).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(1, format_args!("{e:#}")),
    }
}

async fn run(
    flags: kubelet::flags::KubeletFlags,
    mut config: kubelet::kubeletconfig::KubeletConfig,
    api_client: Option<kube::Client>,
    auth: kubelet::server::auth::Auth,
    client_manager: Option<kubelet::certificate::Manager>,
) -> anyhow::Result<()> {
    tracing::info!(node = %config.node_name, root_dir = %config.root_dir.display(), version = kubelet::version::KUBERNETES_VERSION, "starting kubelet");
    if let Some(path) = &config.config_file
        && !config.ignored_fields.is_empty()
    {
        let shutdown = config
            .ignored_fields
            .iter()
            .any(|f| f == "shutdownGracePeriodByPodPriority");
        tracing::warn!(
            "kubelet config file {}: fields accepted but ignored (this kubelet does not implement them): {}{}",
            path.display(),
            config.ignored_fields.join(", "),
            if shutdown {
                SHUTDOWN_BY_PRIORITY_NOTE
            } else {
                ""
            }
        );
    }
    let swaps = swap_devices();
    if config.fail_swap_on && !swaps.is_empty() {
        anyhow::bail!(
            "running with swap on is not supported, please disable swap! or set --fail-swap-on flag to false. /proc/swaps contained: {swaps:?}"
        );
    }
    apply_process_settings(&config);
    let node_ip = kubelet::nodestatus::NodeIp::new(config.node_ip.clone());
    config.dns.node_ips = node_ip.get().parse().into_iter().collect();
    if let Some(w) = config.dns.check_limits_for_resolv_conf() {
        tracing::warn!(reason = "CheckLimitsForResolvConf", "{w}");
    }
    std::fs::create_dir_all(&config.root_dir)
        .with_context(|| format!("creating root dir {}", config.root_dir.display()))?;
    let cancel = CancellationToken::new();
    let shim_cancel = CancellationToken::new();
    let mut shim_server = None;
    let mut pull_progress = None;
    let endpoint = match &config.container_runtime_endpoint {
        Some(e) => e.clone(),
        None => {
            let endpoint = format!("unix://{}/dockershim.sock", config.root_dir.display());
            let mut shim = dockershim::ShimConfig::with_endpoint(endpoint.clone());
            shim.docker_endpoint = config.docker_endpoint.clone();
            shim.pod_infra_image = config.pod_infra_container_image.clone();
            shim.root_directory = config.root_dir.join("dockershim");
            shim.streaming_idle_timeout = config.streaming_connection_idle_timeout;
            shim.image_pull_progress_deadline = flags.image_pull_progress_deadline;
            let board = node_common::pull_progress::PullProgressBoard::default();
            shim.pull_progress = Some(board.clone());
            pull_progress = Some(board);
            if flags.network_plugin == "cni" {
                shim.cni = Some(dockershim::config::CniSettings {
                    bin_dirs: flags.cni.bin_dirs(),
                    conf_dir: flags.cni.cni_conf_dir.clone().into(),
                    cache_dir: flags.cni.cni_cache_dir.clone().into(),
                });
            }
            tracing::info!(endpoint = %endpoint, docker = %shim.docker_endpoint, cni = shim.cni.is_some(), "starting embedded dockershim");
            shim_server = Some(
                start_embedded_dockershim(shim, shim_cancel.clone())
                    .await
                    .context("starting the embedded dockershim")?,
            );
            endpoint
        }
    };
    let metrics = Arc::new(Metrics::new(&config.node_name));
    let runtime = KubeGenericRuntimeManager::connect(
        &endpoint,
        config.image_service_endpoint.as_deref(),
        config.runtime_request_timeout,
        Arc::clone(&metrics),
    )
    .await
    .with_context(|| format!("connecting to the container runtime at {endpoint}"))?
    .with_root_dir(config.root_dir.clone());
    let mut cgroups = config.cgroups.clone();
    if let Some(driver) = runtime.runtime_cgroup_driver().await
        && driver != cgroups.driver
    {
        tracing::info!(flag = %cgroups.driver, runtime = %driver, "using the cgroup driver the runtime reports");
        cgroups.driver = driver;
    }
    let runtime = runtime
        .with_container_manager(kubelet::cm::ContainerManager::new(cgroups))
        .with_dns(config.dns.clone())
        .with_node_ip(node_ip.clone());
    let runtime = match pull_progress {
        Some(board) => runtime.with_pull_progress(board),
        None => runtime,
    };
    let runtime = match &config.image_credential_file {
        Some(path) => runtime.with_credentials(
            kubelet::credentials::DockerKeyring::load(path)
                .context("loading --image-credential-file")?,
        ),
        None => runtime,
    };
    let port = config.read_only_port;
    let addr = format!("{}:{}", config.address, port);
    let read_only_root = config.root_dir.clone();
    let secure = (config.port > 0).then(|| {
        (
            format!("{}:{}", config.address, config.port),
            config.tls.clone(),
            config.node_name.clone(),
            config.root_dir.clone(),
        )
    });
    let healthz = (config.healthz_port > 0).then(|| {
        kubelet::server::healthz::join_host_port(&config.healthz_bind_address, config.healthz_port)
    });
    if let Some(m) = client_manager {
        tokio::spawn(
            m.with_metrics(metrics.client_certificate.clone())
                .run(cancel.clone()),
        );
    }
    // --rotate-server-certificates: the serving certificate from a kubelet-serving CSR.
    let serving = match (&secure, &api_client) {
        (Some((_, tls, node_name, _)), Some(client)) if tls.server_tls_bootstrap => Some(
            serving_rotation(client.clone(), tls, node_name, &node_ip, cancel.clone()),
        ),
        (Some((_, tls, _, _)), None) if tls.server_tls_bootstrap => {
            tracing::warn!(
                "--rotate-server-certificates needs an API server (--kubeconfig): using the configured or self-signed serving certificate"
            );
            None
        }
        _ => None,
    };
    let kl = Kubelet::new(config, runtime, metrics);
    let kl = match api_client {
        Some(c) => kl.with_api_client(c),
        None => kl,
    };
    if let Some(addr) = healthz {
        tokio::spawn(kubelet::server::healthz::run(
            addr,
            kl.shared(),
            cancel.clone(),
        ));
    }
    if port > 0 {
        let (local, serve) =
            kubelet::server::serve(&addr, kl.shared(), read_only_root, cancel.clone())
                .await
                .context("starting the read-only server")?;
        tracing::info!(address = %local, "read-only server listening");
        tokio::spawn(serve);
    }
    if let Some((secure_addr, tls, node_name, root_dir)) = secure {
        let hosts = vec![
            node_name,
            node_ip.get(),
            "localhost".to_string(),
            "127.0.0.1".to_string(),
        ];
        let tls_config = match serving {
            Some((holder, manager)) => {
                tokio::spawn(
                    manager
                        .with_metrics(kl.shared().metrics.server_certificate.clone())
                        .run(cancel.clone()),
                );
                kubelet::server::secure::server_config_with_resolver(&tls, holder)
            }
            None => kubelet::server::secure::server_config(&tls, &hosts),
        };
        match tls_config {
            Ok(tls_config) => match kubelet::server::secure::serve(
                &secure_addr,
                tls_config,
                auth,
                kl.shared(),
                root_dir,
                cancel.clone(),
            )
            .await
            {
                Ok((local, serve)) => {
                    tracing::info!(address = %local, "secure server listening");
                    tokio::spawn(serve);
                }
                Err(e) => tracing::error!(error = %e, "secure server not started"),
            },
            Err(e) => tracing::error!(error = %e, "secure server not started"),
        }
    }
    // Give the allocator's free pages back after bursts (see node_common::memory); this also
    // covers the embedded dockershim, which shares the process.
    tokio::spawn(node_common::memory::scavenge(
        node_common::memory::SCAVENGE_PERIOD,
        cancel.clone(),
    ));
    let run = tokio::spawn(kl.run(cancel.clone()));
    shutdown_signal().await;
    cancel.cancel();
    let _ = run.await;
    shim_cancel.cancel();
    if let Some(stopped) = shim_server {
        // In-flight calls (a StopContainer waiting out a grace period) need not finish.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(3), stopped).await;
    }
    tracing::info!("kubelet stopped");
    Ok(())
}
