//! `[image]` cases: pull by tag, without a tag and by digest; ImageStatus by tag, id and digest,
//! of a missing image, and the image's user fields; ListImages with its filter; RemoveImage by tag
//! and by id, twice; pull from a registry that wants credentials.

use cri_proto::runtime::v1 as cri;

use super::common::{image_status, pull, spec};
use crate::conformance::{CaseError, CaseResult, Ctx};
use crate::{ensure, ensure_eq};

pub(super) async fn image_pull_status(mut ctx: Ctx) -> CaseResult {
    let image = ctx.settings.busybox_image.clone();
    let image_ref = pull(&mut ctx, &image, None).await?;
    ensure!(
        !image_ref.is_empty(),
        "PullImage returned an empty image_ref"
    );
    let by_tag = image_status(&mut ctx, &image).await?;
    let Some(img) = by_tag else {
        return Err(CaseError::Fail(format!("no status for {image} after pull")));
    };
    ensure!(
        img.repo_tags.contains(&image),
        "repo_tags {:?} lack {image}",
        img.repo_tags
    );
    ensure!(img.size > 0, "size is 0");
    let by_id = image_status(&mut ctx, &img.id).await?;
    ensure_eq!(by_id.map(|i| i.id), Some(img.id.clone()), "status by id");
    if let Some(digest) = img.repo_digests.first() {
        let by_digest = image_status(&mut ctx, digest).await?;
        ensure_eq!(
            by_digest.map(|i| i.id),
            Some(img.id.clone()),
            "status by digest"
        );
    } else {
        return Err(CaseError::Fail("a pulled image has no repo digest".into()));
    }
    Ok(())
}

pub(super) async fn image_pull_no_tag(mut ctx: Ctx) -> CaseResult {
    let untagged = format!("{}/busybox", ctx.settings.registry);
    pull(&mut ctx, &untagged, None).await?;
    let st = image_status(&mut ctx, &format!("{untagged}:latest")).await?;
    ensure!(
        st.is_some(),
        "{untagged}:latest absent after pulling {untagged}"
    );
    Ok(())
}

pub(super) async fn image_list(mut ctx: Ctx) -> CaseResult {
    let image = ctx.settings.busybox_image.clone();
    pull(&mut ctx, &image, None).await?;
    let all = ctx
        .image
        .list_images(cri::ListImagesRequest { filter: None })
        .await?
        .into_inner()
        .images;
    ensure!(
        all.iter().any(|i| i.repo_tags.contains(&image)),
        "{image} not among {} listed images",
        all.len()
    );
    let filtered = ctx
        .image
        .list_images(cri::ListImagesRequest {
            filter: Some(cri::ImageFilter {
                image: spec(&image),
            }),
        })
        .await?
        .into_inner()
        .images;
    // containerd 1.6 ignores the filter (the CRI leaves it loosely defined): the image must be
    // there, other images may be.
    ensure!(
        filtered.iter().any(|i| i.repo_tags.contains(&image)),
        "filter by {image} did not return it: {filtered:?}"
    );
    Ok(())
}

pub(super) async fn image_status_missing(mut ctx: Ctx) -> CaseResult {
    let missing = format!("{}/does-not-exist:never", ctx.settings.registry);
    let st = image_status(&mut ctx, &missing).await?;
    ensure!(st.is_none(), "status of a missing image: {st:?}");
    Ok(())
}

pub(super) async fn image_remove_by_tag(mut ctx: Ctx) -> CaseResult {
    // An image no other case uses (containerd removes every tag of the image).
    let tagged = format!("{}/removable:1", ctx.settings.registry);
    pull(&mut ctx, &tagged, None).await?;
    ensure!(
        image_status(&mut ctx, &tagged).await?.is_some(),
        "pulled {tagged} is absent"
    );
    for _ in 0..2 {
        ctx.image
            .remove_image(cri::RemoveImageRequest {
                image: spec(&tagged),
            })
            .await?;
    }
    let st = image_status(&mut ctx, &tagged).await?;
    ensure!(
        st.as_ref().is_none_or(|i| !i.repo_tags.contains(&tagged)),
        "{tagged} still present after removal: {st:?}"
    );
    // Pulled again and removed by its id: gone under every reference; twice is fine.
    pull(&mut ctx, &tagged, None).await?;
    let id = image_status(&mut ctx, &tagged)
        .await?
        .map(|i| i.id)
        .ok_or_else(|| CaseError::Fail(format!("pulled {tagged} is absent")))?;
    for _ in 0..2 {
        ctx.image
            .remove_image(cri::RemoveImageRequest { image: spec(&id) })
            .await?;
    }
    ensure!(
        image_status(&mut ctx, &id).await?.is_none(),
        "image {id} still present after removal by id"
    );
    ensure!(
        image_status(&mut ctx, &tagged).await?.is_none(),
        "{tagged} still present after its image was removed by id"
    );
    Ok(())
}

pub(super) async fn image_pull_auth(mut ctx: Ctx) -> CaseResult {
    let Some((registry, user, password)) = ctx.settings.auth_registry.clone() else {
        return Err(CaseError::Skip(
            "no registry with credentials configured".into(),
        ));
    };
    let image = format!("{registry}/busybox:latest");
    let denied = ctx
        .image
        .pull_image(cri::PullImageRequest {
            image: spec(&image),
            auth: None,
            sandbox_config: None,
        })
        .await;
    ensure!(
        denied.is_err(),
        "pull from {registry} without credentials succeeded"
    );
    let auth = cri::AuthConfig {
        username: user,
        password,
        ..Default::default()
    };
    pull(&mut ctx, &image, Some(auth)).await?;
    ensure!(
        image_status(&mut ctx, &image).await?.is_some(),
        "{image} absent after pull"
    );
    Ok(())
}

/// A pull by digest gives the same image as the tag it was pushed under. (Removal by id is not
/// a case: the test bed's busybox tags share one image, which other cases use.)
pub(super) async fn image_pull_digest(mut ctx: Ctx) -> CaseResult {
    // The suite's busybox: no other case removes it (busybox:1.36 is removed by another case).
    let tagged = ctx.settings.busybox_image.clone();
    pull(&mut ctx, &tagged, None).await?;
    let img = image_status(&mut ctx, &tagged)
        .await?
        .ok_or_else(|| CaseError::Fail(format!("{tagged} absent after pull")))?;
    let digest = img
        .repo_digests
        .first()
        .cloned()
        .ok_or_else(|| CaseError::Fail("a pulled image has no repo digest".into()))?;
    let image_ref = pull(&mut ctx, &digest, None).await?;
    ensure!(
        !image_ref.is_empty(),
        "pull by digest returned no image_ref"
    );
    let by_digest = image_status(&mut ctx, &digest).await?;
    ensure_eq!(
        by_digest.map(|i| i.id),
        Some(img.id.clone()),
        "status by digest"
    );
    Ok(())
}

/// The test bed's images whose config sets the user (images/build.sh), and what ImageStatus
/// must say: (tag, uid, username).
const USER_IMAGES: [(&str, Option<i64>, &str); 4] = [
    ("uid", Some(1002), ""),
    ("name", None, "testuser"),
    ("uid-gid", Some(1004), ""),
    ("name-group", None, "testuser"),
];

pub(super) async fn image_user_fields(mut ctx: Ctx) -> CaseResult {
    for (tag, uid, username) in USER_IMAGES {
        let image = format!("{}/busybox-user:{tag}", ctx.settings.registry);
        pull(&mut ctx, &image, None).await?;
        let img = image_status(&mut ctx, &image)
            .await?
            .ok_or_else(|| CaseError::Fail(format!("{image} absent after pull")))?;
        ensure_eq!(img.uid.map(|u| u.value), uid, format!("uid of {image}"));
        ensure_eq!(
            img.username.as_str(),
            username,
            format!("username of {image}")
        );
    }
    Ok(())
}
