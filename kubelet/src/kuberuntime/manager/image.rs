//! Images for the runtime manager (upstream `kuberuntime_image.go` and the image puller of
//! `pkg/kubelet/images`): `EnsureImageExists` with the pull policy, pull back-off and the pod's
//! pull secrets, and what the image filesystem holds.

use k8s_openapi::api::core::v1::{Container, Pod};
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
