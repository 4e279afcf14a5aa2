//! The shim's own pause image, built from `images/pause/pause.c` by
//! `build.rs` (static, `-Os`) and embedded in the binary, so that dockershim
//! can `docker load` an infra image when the configured one is absent and
//! cannot be pulled (air-gapped start). This module owns the in-memory
//! `docker save`/`docker load` archive: one `layer.tar` holding `/pause`
//! (mode 0755, uid/gid 0, mtime 0), an image config with
//! `Entrypoint ["/pause"]` and a fixed creation time, and `manifest.json`
//! with the requested RepoTag. Everything is deterministic, so the image id
//! (sha256 of the config) is a constant of the build.

use serde_json::json;
use sha2::{Digest, Sha256};

/// The statically linked pause binary.
pub static PAUSE_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pause"));

/// Fixed creation time of the image.
pub const CREATED: &str = "1970-01-01T00:00:00Z";

/// Errors building the archive.
#[derive(Debug, thiserror::Error)]
pub enum PauseImageError {
    #[error("invalid image reference {0:?}")]
    InvalidRef(String),
    #[error("tar entry name too long: {0:?}")]
    NameTooLong(String),
}

/// Docker/OCI name of the architecture the pause binary was built for.
pub fn docker_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        other => other,
    }
}

fn octal(field: &mut [u8], value: u64) {
    // Zero-padded octal, NUL terminated, filling the whole field.
    let width = field.len() - 1;
    let s = format!("{value:0width$o}");
    field[..width].copy_from_slice(&s.as_bytes()[s.len() - width..]);
    field[width] = 0;
}

/// Append one regular-file ustar entry (uid/gid 0, mtime 0) and its data.
fn tar_file(out: &mut Vec<u8>, name: &str, mode: u32, data: &[u8]) -> Result<(), PauseImageError> {
    if name.len() > 100 {
        return Err(PauseImageError::NameTooLong(name.to_string()));
    }
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], u64::from(mode));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], data.len() as u64);
    octal(&mut h[136..148], 0);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[265..269].copy_from_slice(b"root");
    h[297..301].copy_from_slice(b"root");
    octal(&mut h[329..337], 0);
    octal(&mut h[337..345], 0);
    // Checksum: computed with the field as spaces, written as 6 octal digits, NUL, space.
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    let pad = (512 - data.len() % 512) % 512;
    out.extend(std::iter::repeat_n(0u8, pad));
    Ok(())
}

fn tar_end(out: &mut Vec<u8>) {
    out.extend(std::iter::repeat_n(0u8, 1024));
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// The single layer: `pause` at the root, mode 0755.
pub fn layer_tar() -> Vec<u8> {
    let mut t = Vec::with_capacity(PAUSE_BINARY.len() + 2048);
    // The name is a constant shorter than 100 bytes.
    let _ = tar_file(&mut t, "pause", 0o755, PAUSE_BINARY);
    tar_end(&mut t);
    t
}

/// The image config JSON (keys sorted, compact).
pub fn image_config() -> Vec<u8> {
    let diff_id = format!("sha256:{}", sha256_hex(&layer_tar()));
    let cfg = json!({
        "architecture": docker_arch(),
        "os": "linux",
        "created": CREATED,
        "config": {
            "Entrypoint": ["/pause"],
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "User": "0:0",
            "WorkingDir": "/",
        },
        "rootfs": { "type": "layers", "diff_ids": [diff_id] },
        "history": [{ "created": CREATED, "created_by": "kubelet-rs dockershim: COPY pause /pause" }],
    });
    serde_json::to_vec(&cfg).unwrap_or_default()
}

/// The image id Docker will report after loading: `sha256:<hex of config>`.
pub fn pause_image_id() -> String {
    format!("sha256:{}", sha256_hex(&image_config()))
}

/// A `docker load` archive of the pause image tagged `image_ref`
/// (e.g. `registry.k8s.io/pause:3.9`).
pub fn pause_image_archive(image_ref: &str) -> Result<Vec<u8>, PauseImageError> {
    if image_ref.is_empty()
        || image_ref.contains('@')
        || image_ref
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(PauseImageError::InvalidRef(image_ref.to_string()));
    }
    let layer = layer_tar();
    let layer_hex = sha256_hex(&layer);
    let config = image_config();
    let config_hex = sha256_hex(&config);
    let manifest = json!([{
        "Config": format!("{config_hex}.json"),
        "RepoTags": [image_ref],
        "Layers": [format!("{layer_hex}/layer.tar")],
    }]);
    let manifest = serde_json::to_vec(&manifest).unwrap_or_default();
    let mut out = Vec::with_capacity(layer.len() + 8192);
    tar_file(&mut out, &format!("{config_hex}.json"), 0o644, &config)?;
    tar_file(&mut out, &format!("{layer_hex}/layer.tar"), 0o644, &layer)?;
    tar_file(&mut out, "manifest.json", 0o644, &manifest)?;
    tar_end(&mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Minimal ustar reader for the tests: (name, mode, uid, mtime, data).
    fn entries(t: &[u8]) -> Vec<(String, u32, u64, u64, Vec<u8>)> {
        let num = |f: &[u8]| {
            let s = std::str::from_utf8(f)
                .unwrap()
                .trim_matches(|c| c == '\0' || c == ' ');
            u64::from_str_radix(s, 8).unwrap()
        };
        let mut out = Vec::new();
        let mut off = 0;
        while off + 512 <= t.len() && t[off] != 0 {
            let h = &t[off..off + 512];
            let name_end = h[..100].iter().position(|b| *b == 0).unwrap_or(100);
            let name = String::from_utf8(h[..name_end].to_vec()).unwrap();
            let size = num(&h[124..136]) as usize;
            let mut sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
            sum = sum - h[148..156].iter().map(|b| u64::from(*b)).sum::<u64>() + 8 * 32;
            assert_eq!(sum, num(&h[148..156]), "checksum of {name}");
            let data = t[off + 512..off + 512 + size].to_vec();
            out.push((
                name,
                num(&h[100..108]) as u32,
                num(&h[108..116]),
                num(&h[136..148]),
                data,
            ));
            off += 512 + size.div_ceil(512) * 512;
        }
        out
    }

    #[test]
    fn archive_layout_and_digests() {
        let a = pause_image_archive("registry.k8s.io/pause:3.9").unwrap();
        let e = entries(&a);
        let names: Vec<&str> = e.iter().map(|x| x.0.as_str()).collect();
        let id = pause_image_id();
        let hex_id = id.strip_prefix("sha256:").unwrap();
        assert_eq!(names[0], format!("{hex_id}.json"));
        assert!(names[1].ends_with("/layer.tar"));
        assert_eq!(names[2], "manifest.json");
        // The config digest is the image id.
        assert_eq!(sha256_hex(&e[0].4), hex_id);
        let cfg: serde_json::Value = serde_json::from_slice(&e[0].4).unwrap();
        assert_eq!(cfg["config"]["Entrypoint"], json!(["/pause"]));
        assert_eq!(cfg["created"], CREATED);
        assert_eq!(cfg["os"], "linux");
        let layer = &e[1].4;
        assert_eq!(format!("{}/layer.tar", sha256_hex(layer)), names[1]);
        assert_eq!(
            cfg["rootfs"]["diff_ids"][0],
            format!("sha256:{}", sha256_hex(layer))
        );
        let le = entries(layer);
        assert_eq!(le.len(), 1);
        assert_eq!(
            (le[0].0.as_str(), le[0].1, le[0].2, le[0].3),
            ("pause", 0o755, 0, 0)
        );
        assert_eq!(le[0].4, PAUSE_BINARY);
        assert_eq!(&PAUSE_BINARY[..4], b"\x7fELF");
        let m: serde_json::Value = serde_json::from_slice(&e[2].4).unwrap();
        assert_eq!(m[0]["RepoTags"], json!(["registry.k8s.io/pause:3.9"]));
        assert_eq!(m[0]["Config"], format!("{hex_id}.json"));
        assert_eq!(a.len() % 512, 0);
    }

    #[test]
    fn deterministic_and_validated() {
        assert_eq!(
            pause_image_archive("p:1").unwrap(),
            pause_image_archive("p:1").unwrap()
        );
        assert_eq!(pause_image_id(), pause_image_id());
        assert!(pause_image_archive("").is_err());
        assert!(pause_image_archive("a b").is_err());
        assert!(pause_image_archive("x@sha256:00").is_err());
    }

    #[tokio::test]
    async fn docker_loads_it() {
        use futures::StreamExt;
        let sock = std::path::Path::new("/var/run/docker.sock");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || !sock.exists() {
            crate::testbed::skip("docker_loads_it", "needs root and /var/run/docker.sock");
            return;
        }
        let docker = match bollard::Docker::connect_with_unix_defaults() {
            Ok(d) if d.ping().await.is_ok() => d,
            _ => {
                crate::testbed::skip("docker_loads_it", "Docker does not answer");
                return;
            }
        };
        let tag = format!("kubelet-rs-test/pause:t{}", std::process::id());
        let archive = pause_image_archive(&tag).unwrap();
        let mut s = docker.import_image(
            bollard::query_parameters::ImportImageOptions {
                quiet: true,
                ..Default::default()
            },
            bollard::body_full(archive.into()),
            None,
        );
        while let Some(r) = s.next().await {
            r.expect("docker load");
        }
        let img = docker
            .inspect_image(&tag)
            .await
            .expect("inspect loaded image");
        let cleanup = docker
            .remove_image(
                &tag,
                None::<bollard::query_parameters::RemoveImageOptions>,
                None,
            )
            .await;
        assert_eq!(img.id.as_deref(), Some(pause_image_id().as_str()));
        assert_eq!(
            img.config.and_then(|c| c.entrypoint),
            Some(vec!["/pause".to_string()])
        );
        cleanup.expect("remove test tag");
    }
}
