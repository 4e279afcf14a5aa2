//! The CRI ImageService on Docker (upstream `docker_image.go`): ListImages, ImageStatus (an
//! empty answer for a missing image, as CRI requires), PullImage with registry credentials and a
//! stall timeout, idempotent RemoveImage by id, tag or digest, ImageFsInfo; and the pod infra
//! image's air-gapped fallback (built from the embedded pause program when it cannot be pulled).

use std::collections::HashMap;

use bollard::auth::DockerCredentials;
use bollard::models::ImageInspect;
use cri_proto::runtime::v1 as cri;
use tracing::{info, warn};

use crate::docker::DockerApi;
use crate::errors::{Result, ShimError};
use crate::shim::Shim;
use crate::timestamp::now_ns;

/// Splits an image config `User` into (uid, username): `1000`, `1000:1000` -> uid 1000;
/// `nobody`, `nobody:x` -> username.
pub fn image_user(user: &str) -> (Option<i64>, String) {
    let name = user.split(':').next().unwrap_or("");
    if name.is_empty() {
        return (None, String::new());
    }
    match name.parse::<i64>() {
        Ok(uid) => (Some(uid), String::new()),
        Err(_) => (None, name.to_string()),
    }
}

fn real_tags(tags: Option<Vec<String>>) -> Vec<String> {
    tags.unwrap_or_default()
        .into_iter()
        .filter(|t| t != "<none>:<none>")
        .collect()
}

fn real_digests(digests: Option<Vec<String>>) -> Vec<String> {
    digests
        .unwrap_or_default()
        .into_iter()
        .filter(|d| d != "<none>@<none>")
        .collect()
}

/// A Docker image (inspect) as a CRI image.
pub fn cri_image(img: &ImageInspect) -> cri::Image {
    let user = img
        .config
        .as_ref()
        .and_then(|c| c.user.clone())
        .unwrap_or_default();
    let (uid, username) = image_user(&user);
    cri::Image {
        id: img.id.clone().unwrap_or_default(),
        repo_tags: real_tags(img.repo_tags.clone()),
        repo_digests: real_digests(img.repo_digests.clone()),
        size: img.size.unwrap_or(0).max(0) as u64,
        uid: uid.map(|value| cri::Int64Value { value }),
        username,
        spec: None,
        pinned: false,
    }
}

/// Is `reference` an image id (`sha256:<64 hex>` or 64 hex)?
pub(crate) fn is_image_id(reference: &str) -> bool {
    let hex = reference.strip_prefix("sha256:").unwrap_or(reference);
    hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

impl<D: DockerApi> Shim<D> {
    /// ListImages, with the optional image filter (matches an id, tag or digest).
    pub async fn list_images(&self, filter: Option<cri::ImageFilter>) -> Result<Vec<cri::Image>> {
        let want = filter
            .and_then(|f| f.image)
            .map(|i| i.image)
            .filter(|i| !i.is_empty());
        let list = self.docker.list_images().await?;
        let mut out = Vec::with_capacity(list.len());
        for img in list {
            let tags = real_tags(Some(img.repo_tags.clone()));
            let digests = real_digests(Some(img.repo_digests.clone()));
            if let Some(w) = &want {
                let with_latest = if w.contains(':') || w.contains('@') {
                    w.clone()
                } else {
                    format!("{w}:latest")
                };
                let hit = img.id == *w
                    || tags.iter().any(|t| *t == *w || *t == with_latest)
                    || digests.iter().any(|d| d == w);
                if !hit {
                    continue;
                }
            }
            out.push(cri::Image {
                id: img.id.clone(),
                repo_tags: tags,
                repo_digests: digests,
                size: img.size.max(0) as u64,
                uid: None,
                username: String::new(),
                spec: None,
                pinned: false,
            });
        }
        Ok(out)
    }

    /// ImageStatus: `image: None` when the image is absent.
    pub async fn image_status(
        &self,
        req: cri::ImageStatusRequest,
    ) -> Result<cri::ImageStatusResponse> {
        let reference = req
            .image
            .map(|i| i.image)
            .filter(|i| !i.is_empty())
            .ok_or_else(|| ShimError::invalid("ImageStatus: image is required"))?;
        let img = match self.inspect_image_cached(&reference).await {
            Ok(img) => img,
            Err(e) if e.is_not_found() => return Ok(cri::ImageStatusResponse::default()),
            Err(e) => return Err(e.into()),
        };
        let mut info = HashMap::new();
        if req.verbose {
            info.insert(
                "info".to_string(),
                serde_json::json!({
                    "imageSpec": img.config,
                    "architecture": img.architecture,
                    "os": img.os,
                    "created": img.created,
                })
                .to_string(),
            );
        }
        Ok(cri::ImageStatusResponse {
            image: Some(cri_image(&img)),
            info,
        })
    }

    /// Docker's inspect of image `reference`, from the image cache when it holds it.
    async fn inspect_image_cached(
        &self,
        reference: &str,
    ) -> std::result::Result<std::sync::Arc<ImageInspect>, crate::docker::DockerError> {
        if let Some(img) = self.images.get(reference) {
            return Ok(img);
        }
        let ticket = self.images.ticket();
        let img = std::sync::Arc::new(self.docker.inspect_image(reference).await?);
        self.images.put(ticket, reference, img.clone());
        Ok(img)
    }

    /// PullImage: credentials from the request; answers the repo digest, or the id of an image
    /// without one. The repo digest cache forgets the pulled image (it may have gained a
    /// digest), or everything when the pull failed, as which image it changed is unknown.
    pub async fn pull_image(&self, req: cri::PullImageRequest) -> Result<String> {
        let pulled = self.pull_and_inspect(req).await;
        // Whatever the pull did (a tag may name another image now), before the answer.
        self.images.clear();
        let img = pulled.inspect_err(|_| self.image_refs.clear())?;
        if let Some(id) = &img.id {
            self.image_refs.invalidate(id);
        }
        // cri-dockerd's (and upstream dockershim's) `getImageRef`: the repo digest when the
        // image has one, otherwise its id.
        Ok(img
            .repo_digests
            .and_then(|d| d.into_iter().next())
            .or(img.id)
            .unwrap_or_default())
    }

    async fn pull_and_inspect(&self, req: cri::PullImageRequest) -> Result<ImageInspect> {
        let reference = req
            .image
            .map(|i| i.image)
            .filter(|i| !i.is_empty())
            .ok_or_else(|| ShimError::invalid("PullImage: image is required"))?;
        let auth = req.auth.map(|a| DockerCredentials {
            username: (!a.username.is_empty()).then_some(a.username),
            password: (!a.password.is_empty()).then_some(a.password),
            auth: (!a.auth.is_empty()).then_some(a.auth),
            serveraddress: (!a.server_address.is_empty()).then_some(a.server_address),
            identitytoken: (!a.identity_token.is_empty()).then_some(a.identity_token),
            registrytoken: (!a.registry_token.is_empty()).then_some(a.registry_token),
            ..Default::default()
        });
        let progress = self
            .config
            .pull_progress
            .as_ref()
            .and_then(|b| b.publisher(&reference));
        self.docker
            .pull_image(
                &reference,
                auth,
                self.config.image_pull_progress_deadline,
                progress,
            )
            .await
            .map_err(|e| match e {
                crate::docker::DockerError::Timeout(t) => ShimError::DeadlineExceeded(format!(
                    "pull of {reference} made no progress for {t:?}"
                )),
                e => e.into(),
            })?;
        let img = self.docker.inspect_image(&reference).await?;
        info!(image = %reference, id = ?img.id, "image pulled");
        Ok(img)
    }

    /// RemoveImage by id, tag or digest. Removing an absent image succeeds. The reference goes
    /// to Docker as it is, in one call: a tag or digest removes that reference (and the image
    /// with its digests when it was the last tag), an id the image with all its tags when they
    /// are in one repository — as upstream's dockershim and cri-dockerd mean to. Only when
    /// Docker refuses an id unforced (tags in several repositories, or an image in use) is the
    /// image inspected and removed tag by tag, as upstream does. The repo digest cache forgets
    /// the images Docker deleted; when an image only lost a reference (or the call failed) it
    /// forgets everything, as which image changed is unknown.
    pub async fn remove_image(&self, req: cri::RemoveImageRequest) -> Result<()> {
        let removed = self.remove_image_ids(req).await;
        self.images.clear();
        match removed {
            Ok(deleted) if !deleted.is_empty() => {
                for id in &deleted {
                    self.image_refs.invalidate(id);
                }
                Ok(())
            }
            r => {
                self.image_refs.clear();
                r.map(drop)
            }
        }
    }

    /// RemoveImage's Docker calls; answers the ids of the images Docker deleted.
    async fn remove_image_ids(&self, req: cri::RemoveImageRequest) -> Result<Vec<String>> {
        let reference = req
            .image
            .map(|i| i.image)
            .filter(|i| !i.is_empty())
            .ok_or_else(|| ShimError::invalid("RemoveImage: image is required"))?;
        let refused = match self.docker.remove_image(&reference).await {
            Ok(ids) => return Ok(ids),
            Err(e) if e.is_not_found() => return Ok(Vec::new()),
            Err(e @ crate::docker::DockerError::Conflict { .. }) if is_image_id(&reference) => e,
            Err(e) => return Err(e.into()),
        };
        let img = match self.docker.inspect_image(&reference).await {
            Ok(img) => img,
            Err(e) if e.is_not_found() => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let tags = real_tags(img.repo_tags.clone());
        if tags.len() < 2 {
            return Err(refused.into());
        }
        let mut deleted = Vec::new();
        for t in tags {
            match self.docker.remove_image(&t).await {
                Ok(ids) => deleted.extend(ids),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(deleted)
    }

    /// ImageFsInfo: usage of the filesystem holding Docker's data root.
    pub async fn image_fs_info(&self) -> Result<cri::ImageFsInfoResponse> {
        let info = self.docker.info().await?;
        let root = info
            .docker_root_dir
            .unwrap_or_else(|| "/var/lib/docker".to_string());
        let driver = info.driver.unwrap_or_else(|| "overlay2".to_string());
        let mountpoint = format!("{root}/{driver}");
        let (used, inodes) = fs_usage(&root).unwrap_or((0, 0));
        let usage = cri::FilesystemUsage {
            timestamp: now_ns(),
            fs_id: Some(cri::FilesystemIdentifier { mountpoint }),
            used_bytes: Some(cri::UInt64Value { value: used }),
            inodes_used: Some(cri::UInt64Value { value: inodes }),
        };
        Ok(cri::ImageFsInfoResponse {
            image_filesystems: vec![usage.clone()],
            container_filesystems: vec![usage],
        })
    }

    /// Makes sure the pod infra image is present: pulled if possible, else built locally from
    /// the embedded pause program (air-gapped hosts need no registry).
    pub async fn ensure_pod_infra_image(&self) -> Result<()> {
        let image = self.config.pod_infra_image.clone();
        if self.inspect_image_cached(&image).await.is_ok() {
            return Ok(());
        }
        let pulled = self
            .docker
            .pull_image(&image, None, self.config.image_pull_progress_deadline, None)
            .await;
        self.images.clear();
        match pulled {
            Ok(()) => return Ok(()),
            Err(e) => {
                warn!(image = %image, error = %e, "cannot pull the pod infra image; building it from the embedded pause program")
            }
        }
        let archive =
            crate::pause_image::pause_image_archive(&image).map_err(ShimError::internal)?;
        let loaded = self.docker.load_image(archive).await;
        self.images.clear();
        loaded?;
        info!(image = %image, "built the pod infra image locally from the embedded pause program");
        Ok(())
    }
}

/// (used bytes, used inodes) of the filesystem holding `path`.
pub fn fs_usage(path: &str) -> Option<(u64, u64)> {
    let c = std::ffi::CString::new(path).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs writes into `st`, a properly sized, zeroed struct; `c` is NUL-terminated.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let used = (st.f_blocks.saturating_sub(st.f_bfree)) * st.f_frsize;
    let inodes = st.f_files.saturating_sub(st.f_ffree);
    Some((used, inodes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_users_split_uid_and_name() {
        assert_eq!(image_user(""), (None, String::new()));
        assert_eq!(image_user("1000"), (Some(1000), String::new()));
        assert_eq!(image_user("1000:50"), (Some(1000), String::new()));
        assert_eq!(image_user("nobody"), (None, "nobody".to_string()));
        assert_eq!(image_user("www:www"), (None, "www".to_string()));
    }

    #[test]
    fn ids_are_recognised() {
        let hex = "a".repeat(64);
        assert!(is_image_id(&hex));
        assert!(is_image_id(&format!("sha256:{hex}")));
        assert!(!is_image_id("busybox:latest"));
    }

    #[test]
    fn fs_usage_reads_root() {
        let (used, _) = fs_usage("/").expect("statvfs /");
        assert!(used > 0);
    }
}
