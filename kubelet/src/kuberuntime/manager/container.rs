//! Containers for the runtime manager (upstream `kuberuntime_container.go`): start (pull,
//! create, start, postStart hook), restart back-off, kill with the preStop hook and grace period,
//! removal of dead containers and sandboxes, and the container calls other managers use (exec,
//! log paths, log reopening).

use super::*;

impl KubeGenericRuntimeManager {
    /// Upstream `startContainer`: pull, create, start. `pid_target` is the runtime id of the
    /// container whose process namespace an ephemeral container joins (its
    /// `targetContainerName`).
    /// Counted in `kubelet_started_containers_total{container_type}` and, on failure, in
    /// `kubelet_started_containers_errors_total{container_type,code}` with the failure's reason
    /// as upstream's `start` does.
    #[tracing::instrument(skip_all, fields(container = %c.name))]
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn start_container(
        &self,
        target: &SandboxTarget<'_>,
        c: &Container,
        pod: &Pod,
        status: &PodStatus,
        objects: &ApiObjects,
        backoff: &mut Backoff,
        pid_target: Option<&str>,
    ) -> Result<(), (String, String)> {
        let spec = pod.spec.as_ref();
        let container_type = if spec
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|v| v.iter().any(|i| i.name == c.name))
        {
            "init_container"
        } else if spec
            .and_then(|s| s.ephemeral_containers.as_ref())
            .is_some_and(|v| v.iter().any(|e| e.name == c.name))
        {
            "ephemeral_container"
        } else {
            "container"
        };
        let r = self
            .start_container_uncounted(target, c, pod, status, objects, backoff, pid_target)
            .await;
        self.metrics.container_started(
            container_type,
            r.as_ref().err().map(|(reason, _)| reason.as_str()),
        );
        r
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_container_uncounted(
        &self,
        target: &SandboxTarget<'_>,
        c: &Container,
        pod: &Pod,
        status: &PodStatus,
        objects: &ApiObjects,
        backoff: &mut Backoff,
        pid_target: Option<&str>,
    ) -> Result<(), (String, String)> {
        let image_ref = self.ensure_image_exists(pod, c, objects, backoff).await?;
        let restart_count = status
            .find_container_status_by_name(&c.name)
            .map(|s| s.restart_count + 1)
            .unwrap_or(0);
        let logdir = self.pod_logs_dir(pod).join(&c.name);
        if let Err(e) = std::fs::create_dir_all(&logdir) {
            tracing::warn!(container = %c.name, dir = %logdir.display(), error = %e, "cannot create container log directory");
        }
        let mut config = generate_container_config(
            c,
            pod,
            restart_count,
            &image_ref,
            target.ips,
            &self.node_ip.get(),
            objects,
            self.services.as_ref(),
        )
        .map_err(|e| self.create_container_config_error(pod, c, e.to_string()))?;
        if let Some(r) = config.linux.as_mut().and_then(|l| l.resources.as_mut()) {
            r.oom_score_adj = self.cm.oom_score_adj(pod, c);
        }
        if let Some(t) = pid_target
            && let Some(ns) = config
                .linux
                .as_mut()
                .and_then(|l| l.security_context.as_mut())
                .and_then(|s| s.namespace_options.as_mut())
            && ns.pid == cri::NamespaceMode::Container as i32
        {
            // Upstream `generateLinuxContainerConfig`: join the target's PID namespace.
            ns.pid = cri::NamespaceMode::Target as i32;
            ns.target_id = t.to_string();
        }
        let pod_dir = self.pod_dir(pod.metadata.uid.as_deref().unwrap_or_default());
        let volumes = crate::volumemanager::volume_host_paths(pod, &pod_dir, objects);
        let read_only = crate::volumemanager::read_only_volumes(pod);
        let config_error = |e: crate::volumemanager::VolumeError| {
            self.create_container_config_error(pod, c, e.to_string())
        };
        // `subPathExpr` expands against the container's environment (upstream `makeMounts`).
        let env: HashMap<String, String> = config
            .envs
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect();
        config.mounts = crate::volumemanager::make_mounts(c, &volumes, &read_only, &pod_dir, &env)
            .map_err(config_error)?;
        let managed = crate::volumemanager::kubelet_managed_mounts(
            pod,
            c,
            &pod_dir,
            target.ips,
            &config.mounts,
        )
        .map_err(config_error)?;
        config.mounts.extend(managed);
        let id = self
            .runtime
            .create_container(target.id, config, target.config.clone())
            .await
            .map_err(|e| {
                self.events.event(
                    pod,
                    Some(&c.name),
                    crate::events::EventType::Warning,
                    "Failed",
                    format!("Error: {e}"),
                );
                (reasons::CREATE_CONTAINER_ERROR.to_string(), e.to_string())
            })?;
        self.events.event(
            pod,
            Some(&c.name),
            crate::events::EventType::Normal,
            "Created",
            format!("Created container {}", c.name),
        );
        self.runtime
            .start_container(&id)
            .await
            .map_err(|e| (reasons::RUN_CONTAINER_ERROR.to_string(), e.to_string()))?;
        tracing::info!(id = %id, restart_count, "started container");
        self.events.event(
            pod,
            Some(&c.name),
            crate::events::EventType::Normal,
            "Started",
            format!("Started container {}", c.name),
        );
        if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            let pod_ip = target.ips.first().map(String::as_str).unwrap_or_default();
            if let Err(msg) = self.run_hook(&id, h, c, pod_ip, self.timeout).await {
                tracing::warn!(error = %msg, "postStart hook failed, killing the container");
                let grace = grace_period_for(Some(pod), None);
                let _ = self.kill_container(&id, grace).await;
                return Err((
                    reasons::POST_START_HOOK_ERROR.to_string(),
                    format!("PostStartHook failed: {msg}"),
                ));
            }
        }
        Ok(())
    }

    /// Upstream `startContainer` on a `generateContainerConfig` error: a `Failed` event
    /// `Error: <message>`, and the container waits with `CreateContainerConfigError`.
    fn create_container_config_error(
        &self,
        pod: &Pod,
        c: &Container,
        message: String,
    ) -> (String, String) {
        self.events.event(
            pod,
            Some(&c.name),
            crate::events::EventType::Warning,
            "Failed",
            format!("Error: {message}"),
        );
        (reasons::CREATE_CONTAINER_CONFIG_ERROR.to_string(), message)
    }

    /// Upstream `doBackOff`: the CrashLoopBackOff message when `c` must still wait.
    pub(super) fn do_backoff(
        &self,
        pod: &Pod,
        c: &Container,
        status: &PodStatus,
        backoff: &mut Backoff,
    ) -> Option<String> {
        let cs = status
            .find_container_status_by_name(&c.name)
            .filter(|s| s.state == ContainerState::Exited)?;
        let key = container_backoff_key(pod, c);
        let now = Instant::now();
        let event = instant_of(cs.finished_at, now);
        if backoff.is_in_backoff_since(&key, event, now) {
            let delay = backoff.get(&key).unwrap_or_default();
            self.events.event(
                pod,
                Some(&c.name),
                crate::events::EventType::Warning,
                "BackOff",
                format!(
                    "Back-off restarting failed container {} in pod {}",
                    c.name,
                    pod_full_name(pod)
                ),
            );
            return Some(backoff_message(delay, &c.name, &pod_full_name(pod)));
        }
        backoff.next(&key, event);
        None
    }

    /// Upstream `handlerRunner.Run`: exec (CRI `ExecSync`), httpGet, tcpSocket or sleep.
    pub(super) async fn run_hook(
        &self,
        id: &str,
        h: &k8s_openapi::api::core::v1::LifecycleHandler,
        c: &Container,
        pod_ip: &str,
        timeout: Duration,
    ) -> Result<(), String> {
        if let Some(s) = &h.sleep {
            tokio::time::sleep(Duration::from_secs(u64::try_from(s.seconds).unwrap_or(0))).await;
            return Ok(());
        }
        let probe = k8s_openapi::api::core::v1::Probe {
            exec: h.exec.clone(),
            http_get: h.http_get.clone(),
            tcp_socket: h.tcp_socket.clone(),
            timeout_seconds: i32::try_from(timeout.as_secs()).ok(),
            ..Default::default()
        };
        crate::probe::run_probe(self, &probe, c, id, pod_ip).await
    }

    /// Upstream `killContainer` with the container's spec: run `preStop` (bounded by the grace
    /// period, which it uses up), then `StopContainer` with what remains.
    pub async fn kill_container_with_hook(
        &self,
        id: &str,
        spec: Option<&Container>,
        pod_ip: &str,
        grace_secs: i64,
    ) -> Result<(), RuntimeError> {
        self.kill_container_ordered(id, spec, pod_ip, grace_secs, None)
            .await
    }

    /// [`Self::kill_container_with_hook`] taking its turn in `ordering` (upstream
    /// `killContainer` with a `terminationOrdering`): after `preStop`, wait until the
    /// containers it must outlive stopped (using up grace period), then stop it and let those
    /// waiting for it go on.
    async fn kill_container_ordered(
        &self,
        id: &str,
        spec: Option<&Container>,
        pod_ip: &str,
        grace_secs: i64,
        ordering: Option<(&TerminationOrdering, &str)>,
    ) -> Result<(), RuntimeError> {
        let mut grace = grace_secs;
        if let Some(c) = spec
            && let Some(h) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref())
        {
            let start = std::time::Instant::now();
            let budget = Duration::from_secs(u64::try_from(grace_secs).unwrap_or(0));
            match tokio::time::timeout(budget, self.run_hook(id, h, c, pod_ip, budget)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(container = %c.name, error = %e, "preStop hook failed")
                }
                Err(_) => {
                    tracing::warn!(container = %c.name, "preStop hook did not finish in the grace period")
                }
            }
            let used = i64::try_from(start.elapsed().as_secs()).unwrap_or(i64::MAX);
            grace = (grace_secs - used).max(MINIMUM_GRACE_PERIOD_SECONDS);
        }
        let Some((order, name)) = ordering else {
            return self.kill_container(id, grace).await;
        };
        let waited = order.wait_for_turn(name, grace).await;
        let waited = i64::try_from(waited.as_secs()).unwrap_or(i64::MAX);
        grace = (grace - waited).max(MINIMUM_GRACE_PERIOD_SECONDS);
        let r = self.kill_container(id, grace).await;
        order.container_terminated(name);
        r
    }

    /// Upstream `killContainer`: `StopContainer` with the grace period.
    pub async fn kill_container(&self, id: &str, grace_secs: i64) -> Result<(), RuntimeError> {
        self.runtime.stop_container(id, grace_secs).await
    }

    pub(super) async fn stop_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime.stop_pod_sandbox(id).await
    }

    /// Stop `containers` (id, name, grace, spec) at once, but in `ordering`'s turns when
    /// given, then `sandboxes`.
    pub(super) async fn kill_all(
        &self,
        containers: Vec<(String, String, i64, Option<Container>)>,
        ordering: Option<&TerminationOrdering>,
        pod_ip: &str,
        sandboxes: Vec<String>,
    ) -> Result<(), RuntimeError> {
        let kills = containers.iter().map(|(id, name, grace, spec)| {
            let turn = ordering.map(|o| (o, name.as_str()));
            self.kill_container_ordered(id, spec.as_ref(), pod_ip, *grace, turn)
        });
        let mut first_err = None;
        for r in futures::future::join_all(kills).await {
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        for s in sandboxes {
            self.stop_sandbox(&s).await?;
        }
        Ok(())
    }

    /// Kill a pod from its status: stop running containers in parallel, then its sandboxes.
    /// With `pod`, containers' `preStop` hooks run first and sidecars stop after the app
    /// containers, in reverse order ([`TerminationOrdering`]).
    pub async fn kill_pod_status(
        &self,
        pod: Option<&Pod>,
        status: &PodStatus,
        grace: i64,
    ) -> Result<(), RuntimeError> {
        let spec_of = |name: &str| {
            pod.and_then(|p| p.spec.as_ref())
                .and_then(|s| {
                    s.containers
                        .iter()
                        .chain(s.init_containers.iter().flatten())
                        .find(|c| c.name == name)
                })
                .cloned()
        };
        let containers = status
            .container_statuses
            .iter()
            .filter(|c| {
                matches!(
                    c.state,
                    ContainerState::Running | ContainerState::Unknown | ContainerState::Created
                )
            })
            .map(|c| (c.id.id.clone(), c.name.clone(), grace, spec_of(&c.name)))
            .collect::<Vec<_>>();
        let ordering = pod.map(|p| {
            TerminationOrdering::new(p, containers.iter().map(|(_, name, _, _)| name.as_str()))
        });
        if let Some(p) = pod {
            for (_, _, _, spec) in &containers {
                if let Some(c) = spec {
                    self.events.event(
                        p,
                        Some(&c.name),
                        crate::events::EventType::Normal,
                        "Killing",
                        format!("Stopping container {}", c.name),
                    );
                }
            }
        }
        // Every sandbox, not only the ready one (upstream `ConvertPodStatusToRunningPod` keeps
        // them all): one that died with the runtime still holds its network (a CNI IP, an
        // open netns) until StopPodSandbox releases it.
        let sandboxes = status
            .sandbox_statuses
            .iter()
            .map(|s| s.id.clone())
            .collect();
        let pod_ip = status.ips.first().cloned().unwrap_or_default();
        self.kill_all(containers, ordering.as_ref(), &pod_ip, sandboxes)
            .await
    }

    /// Kill a pod the kubelet only knows from the runtime (upstream `KillPod` with a runtime
    /// pod): grace from the container annotations unless `grace_override`.
    pub async fn kill_runtime_pod(
        &self,
        pod: &RuntimePod,
        grace_override: Option<i64>,
    ) -> Result<(), RuntimeError> {
        let containers = pod
            .containers
            .iter()
            .filter(|c| c.state != ContainerState::Exited)
            .map(|c| {
                (
                    c.id.clone(),
                    c.name.clone(),
                    grace_override
                        .or(c.grace_period)
                        .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)
                        .max(MINIMUM_GRACE_PERIOD_SECONDS),
                    None,
                )
            })
            .collect();
        let sandboxes = pod
            .sandboxes
            .iter()
            .filter(|s| s.state == ContainerState::Running)
            .map(|s| s.id.clone())
            .collect();
        self.kill_all(containers, None, "", sandboxes).await
    }

    pub(crate) async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime.remove_container(id).await
    }

    /// Upstream `containerGC.removeSandbox`: the sandbox is stopped first, in case nothing
    /// stopped it (its termination failed while the runtime was down, or it died with the
    /// runtime): StopPodSandbox tears down its network (pod IP, CNI state), which a removal
    /// alone leaves behind on dockershim and cri-dockerd. When the stop fails, the sandbox is
    /// kept for the next attempt; a sandbox already gone (`NotFound`) is removed as usual.
    pub(crate) async fn remove_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        match self.runtime.stop_pod_sandbox(id).await {
            Ok(()) => {}
            Err(e) if e.code() == Some(tonic::Code::NotFound) => {}
            Err(e) => return Err(e),
        }
        self.runtime.remove_pod_sandbox(id).await
    }

    /// Remove every stopped container and not-ready sandbox of pod `uid` (the terminated pod's
    /// cleanup; upstream does it through the garbage collector).
    pub async fn remove_pod(&self, uid: &str) -> Result<(), RuntimeError> {
        let sel = HashMap::from([(POD_UID_LABEL.to_string(), uid.to_string())]);
        for c in self.list_containers(sel.clone()).await? {
            if c.state != cri::ContainerState::ContainerRunning as i32 {
                self.remove_container(&c.id).await?;
            }
        }
        for s in self.list_sandboxes(sel).await? {
            if s.state != cri::PodSandboxState::SandboxReady as i32 {
                self.remove_sandbox(&s.id).await?;
            }
        }
        Ok(())
    }

    /// Upstream `RunInContainer` / CRI `ExecSync`: the command's exit code.
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<i32, RuntimeError> {
        self.runtime
            .exec_sync(id, cmd, timeout)
            .await
            .map(|r| r.exit_code)
    }

    /// CRI `ContainerStatus`: the container's log path and whether it runs.
    pub async fn container_log_info(&self, id: &str) -> Result<(String, bool), RuntimeError> {
        let st = self.runtime.container_status(id).await?;
        Ok((
            st.log_path,
            st.state == cri::ContainerState::ContainerRunning as i32,
        ))
    }

    /// CRI `ReopenContainerLog`.
    pub async fn reopen_container_log(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime.reopen_container_log(id).await
    }
}

/// Exec probes and hooks run through `ExecSync`.
#[async_trait::async_trait]
impl crate::probe::CommandRunner for KubeGenericRuntimeManager {
    async fn run_in_container(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<i32, String> {
        self.exec_sync(id, cmd, timeout)
            .await
            .map_err(|e| e.to_string())
    }
}
