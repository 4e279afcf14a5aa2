//! Images for the runtime manager (upstream `kuberuntime_image.go` and the image puller of
//! `pkg/kubelet/images`): `EnsureImageExists` with the pull policy, pull back-off and the pod's
//! pull secrets, and what the image filesystem holds. With a runtime in the same process that
//! posts its pulls' progress (the embedded dockershim), a running pull is reported every 10 s in
//! the log and as a `Pulling` event (layers and bytes), as upstream dockershim logs it.

use k8s_openapi::api::core::v1::{Container, Pod};
use node_common::pull_progress::{PullReport, PullWatch, REPORT_INTERVAL};
use tokio::time::Instant;

use super::*;

impl KubeGenericRuntimeManager {
    /// Upstream `EnsureImageExists`: the image reference to run, or (reason, message).
    pub(super) async fn ensure_image_exists(
        &self,
        pod: &Pod,
        c: &Container,
        objects: &ApiObjects,
        backoff: &mut Backoff,
    ) -> Result<String, (String, String)> {
        let image = c.image.clone().unwrap_or_default();
        let policy = c
            .image_pull_policy
            .clone()
            .unwrap_or_else(|| crate::config::defaults::default_image_pull_policy(&image).into());
        let spec = cri::ImageSpec {
            image: image.clone(),
            ..Default::default()
        };
        let present = if policy == "Always" {
            None
        } else {
            match self.image.image_status(spec.clone()).await {
                Ok(i) => i.map(|i| i.id),
                Err(e) => return Err(("ImageInspectError".into(), e.to_string())),
            }
        };
        if let Some(id) = present {
            self.events.event(
                pod,
                Some(&c.name),
                crate::events::EventType::Normal,
                "Pulled",
                format!("Container image {image:?} already present on machine"),
            );
            return Ok(id);
        }
        if policy == "Never" {
            return Err((
                reasons::ERR_IMAGE_NEVER_PULL.into(),
                format!("Container image {image:?} is not present with pull policy of Never"),
            ));
        }
        let key = format!(
            "image_{}_{}",
            pod.metadata.uid.as_deref().unwrap_or_default(),
            image
        );
        let now = Instant::now();
        if backoff.is_in_backoff(&key, now) {
            self.events.event(
                pod,
                Some(&c.name),
                crate::events::EventType::Normal,
                "BackOff",
                format!("Back-off pulling image {image:?}"),
            );
            return Err((
                reasons::IMAGE_PULL_BACK_OFF.into(),
                format!("Back-off pulling image {image:?}"),
            ));
        }
        tracing::info!(image = %image, "pulling image");
        self.events.event(
            pod,
            Some(&c.name),
            crate::events::EventType::Normal,
            "Pulling",
            format!("Pulling image {image:?}"),
        );
        let pull_start = Instant::now();
        // Upstream `pullImage`: each matching credential in turn, anonymous when none match.
        let mut auths: Vec<Option<cri::AuthConfig>> = objects
            .pull_credentials(pod, &image)
            .into_iter()
            .chain(self.credentials.lookup(&image))
            .map(Some)
            .collect();
        if auths.is_empty() {
            auths.push(None);
        }
        // Watched before the pull is asked for, so the runtime's first report is not missed.
        let watch = self.pull_progress.as_ref().map(|b| b.watch(&image));
        let pull = async {
            let mut result = Err(RuntimeError::Timeout {
                op: "pull_image",
                timeout: Duration::ZERO,
            });
            for auth in auths {
                result = self.image.pull_image(spec.clone(), auth, None).await;
                if result.is_ok() {
                    break;
                }
            }
            result
        };
        let result = match &watch {
            None => pull.await,
            Some(watch) => {
                report_pull_progress(pull, watch, |report| {
                    tracing::info!(image = %image, elapsed = ?pull_start.elapsed(), "Pulling image: {report}");
                    self.events.event(
                        pod,
                        Some(&c.name),
                        crate::events::EventType::Normal,
                        "Pulling",
                        format!("Pulling image {image:?}: {report}"),
                    );
                })
                .await
            }
        };
        // The pod startup latency SLI excludes the time spent pulling.
        self.metrics.pod_pulled(
            pod.metadata.uid.as_deref().unwrap_or_default(),
            pull_start.into_std(),
        );
        match result {
            Ok(r) => {
                backoff.reset(&key);
                self.events.event(
                    pod,
                    Some(&c.name),
                    crate::events::EventType::Normal,
                    "Pulled",
                    format!(
                        "Successfully pulled image {image:?} in {:.3}s",
                        pull_start.elapsed().as_secs_f64()
                    ),
                );
                Ok(r)
            }
            Err(e) => {
                backoff.next(&key, now);
                self.events.event(
                    pod,
                    Some(&c.name),
                    crate::events::EventType::Warning,
                    "Failed",
                    format!("Failed to pull image {image:?}: {e}"),
                );
                Err((reasons::ERR_IMAGE_PULL.into(), e.to_string()))
            }
        }
    }

    /// The runtime's (first) image filesystem (CRI `ImageFsInfo`).
    pub async fn image_fs(&self) -> Result<Option<cri::FilesystemUsage>, RuntimeError> {
        Ok(self.image.image_fs_info().await?.into_iter().next())
    }

    /// The runtime's images as (names: repo tags then repo digests, size).
    pub async fn image_names_and_sizes(&self) -> Result<Vec<(Vec<String>, u64)>, RuntimeError> {
        let list = self.image.list_images(None).await?;
        Ok(list
            .into_iter()
            .map(|i| {
                let mut names = i.repo_digests;
                names.splice(0..0, i.repo_tags);
                if names.is_empty() {
                    names.push(i.id);
                }
                (names, i.size)
            })
            .collect())
    }
}

/// Runs `pull` to its end; every [`REPORT_INTERVAL`] while it runs, hands what the runtime
/// posted since the last report (if anything changed) to `report`.
async fn report_pull_progress<T>(
    pull: impl std::future::Future<Output = T>,
    watch: &PullWatch,
    mut report: impl FnMut(PullReport),
) -> T {
    let mut tick = tokio::time::interval_at(Instant::now() + REPORT_INTERVAL, REPORT_INTERVAL);
    let mut last = None;
    tokio::pin!(pull);
    loop {
        tokio::select! {
            out = &mut pull => return out,
            _ = tick.tick() => {
                if let Some(now) = watch.latest()
                    && Some(now) != last
                {
                    last = Some(now);
                    report(now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use node_common::pull_progress::{PullProgressBoard, PullReport};

    use super::report_pull_progress;

    fn layers(done: usize) -> PullReport {
        PullReport {
            layers_done: done,
            layers: 2,
            downloaded: done as u64 * 1_000_000,
            total: 2_000_000,
        }
    }

    /// A 35 s pull whose runtime posts one layer at 5 s and both at 15 s: reported at the
    /// 10 s and 20 s ticks, not again at 30 s (nothing new), and the pull's answer comes back.
    #[tokio::test(start_paused = true)]
    async fn a_running_pull_is_reported_every_interval_when_it_moved() {
        let board = PullProgressBoard::default();
        let watch = board.watch("img:1");
        let publisher = board.publisher("img:1").expect("watched");
        let pull = async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            publisher.publish(layers(1));
            tokio::time::sleep(Duration::from_secs(10)).await;
            publisher.publish(layers(2));
            tokio::time::sleep(Duration::from_secs(20)).await;
            "sha256:abc"
        };
        let start = tokio::time::Instant::now();
        let mut seen = Vec::new();
        let out = report_pull_progress(pull, &watch, |r| {
            seen.push((start.elapsed().as_secs(), r.to_string()))
        })
        .await;
        assert_eq!(out, "sha256:abc");
        assert_eq!(
            seen,
            vec![
                (10, "1/2 layers, 1.0 MB of 2.0 MB downloaded".to_string()),
                (20, "2/2 layers, 2.0 MB of 2.0 MB downloaded".to_string()),
            ]
        );
    }

    /// A pull that is over before the first interval, or whose runtime posts nothing, is not
    /// reported at all.
    #[tokio::test(start_paused = true)]
    async fn a_short_or_silent_pull_is_not_reported() {
        let board = PullProgressBoard::default();
        let watch = board.watch("img:1");
        let mut reports = 0;
        report_pull_progress(tokio::time::sleep(Duration::from_secs(9)), &watch, |_| {
            reports += 1
        })
        .await;
        report_pull_progress(tokio::time::sleep(Duration::from_secs(25)), &watch, |_| {
            reports += 1
        })
        .await;
        assert_eq!(reports, 0);
    }
}
