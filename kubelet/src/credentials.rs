//! Image pull credentials from a node-level Docker config file (upstream
//! `pkg/credentialprovider`: `ReadDockerConfigFile`, `BasicDockerKeyring.Lookup`). The file is
//! `--image-credential-file`, else `<root-dir>/config.json` when it exists (one of the places
//! upstream searches). Both formats are read: `config.json` (`{"auths": {...}}`) and the legacy
//! `.dockercfg` (a bare map). Entries match an image by registry host and path prefix; the
//! matching credentials are tried most specific first.

use std::path::Path;

use cri_proto::runtime::v1 as cri;

/// Credential file errors.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The file cannot be read.
    #[error("cannot read credential file {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not a Docker config.
    #[error("malformed credential file {path}: {reason}")]
    Parse {
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
}

/// One registry entry: `key` is `host[/path]` without scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    key: String,
    username: String,
    password: String,
}

/// The credentials of a node (upstream `BasicDockerKeyring`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DockerKeyring {
    entries: Vec<Entry>,
}

/// Upstream decodes `auth` with Go's `base64.StdEncoding`; padding is not insisted on.
fn b64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const STANDARD_ANY_PADDING: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    STANDARD_ANY_PADDING.decode(s.trim()).ok()
}

/// `https://host/v1/` -> `host`; `host/path` stays.
fn normalize_key(k: &str) -> String {
    let k = k
        .strip_prefix("https://")
        .or_else(|| k.strip_prefix("http://"))
        .unwrap_or(k);
    let k = k.trim_end_matches('/');
    let k = k
        .strip_suffix("/v1")
        .or_else(|| k.strip_suffix("/v2"))
        .unwrap_or(k);
    match k {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".into(),
        _ => k.to_string(),
    }
}

/// The registry host and repository path of an image reference (`docker.io` by default).
pub fn split_image(image: &str) -> (String, String) {
    let name = image.split('@').next().unwrap_or(image);
    let (first, rest) = name.split_once('/').unwrap_or(("", name));
    let is_host = first.contains('.') || first.contains(':') || first == "localhost";
    let (host, path) = if is_host {
        (first.to_string(), rest.to_string())
    } else {
        ("docker.io".to_string(), name.to_string())
    };
    // Drop the tag of the last component.
    let path = match path.rsplit_once('/') {
        Some((dir, last)) => format!("{dir}/{}", last.split(':').next().unwrap_or(last)),
        None => path.split(':').next().unwrap_or(&path).to_string(),
    };
    (host, path)
}

impl DockerKeyring {
    /// Parse a Docker config (`config.json` or `.dockercfg`).
    pub fn parse(text: &str, path: &str) -> Result<Self, CredentialError> {
        let err = |reason: String| CredentialError::Parse {
            path: path.to_string(),
            reason,
        };
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| err(e.to_string()))?;
        let map = v
            .get("auths")
            .unwrap_or(&v)
            .as_object()
            .ok_or_else(|| err("expected an object of registries".into()))?;
        let mut entries = Vec::new();
        for (k, e) in map {
            let (mut username, mut password) = (
                e["username"].as_str().unwrap_or_default().to_string(),
                e["password"].as_str().unwrap_or_default().to_string(),
            );
            if let Some(auth) = e["auth"].as_str().filter(|a| !a.is_empty()) {
                let decoded = b64_decode(auth)
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| err(format!("{k}: auth is not base64")))?;
                let (u, p) = decoded
                    .split_once(':')
                    .ok_or_else(|| err(format!("{k}: auth is not user:password")))?;
                username = u.to_string();
                password = p.to_string();
            }
            entries.push(Entry {
                key: normalize_key(k),
                username,
                password,
            });
        }
        // Most specific first (upstream sorts the index by key, longest first).
        entries.sort_by(|a, b| b.key.len().cmp(&a.key.len()).then(a.key.cmp(&b.key)));
        Ok(Self { entries })
    }

    /// Load a file.
    pub fn load(path: &Path) -> Result<Self, CredentialError> {
        let text = std::fs::read_to_string(path).map_err(|source| CredentialError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The credentials for `image`, most specific first (upstream `Lookup`).
    pub fn lookup(&self, image: &str) -> Vec<cri::AuthConfig> {
        let (host, path) = split_image(image);
        let full = format!("{host}/{path}");
        self.entries
            .iter()
            .filter(|e| e.key == host || full == e.key || full.starts_with(&format!("{}/", e.key)))
            // No server address: the match is done here, and containerd only accepts a URL.
            .map(|e| cri::AuthConfig {
                username: e.username.clone(),
                password: e.password.clone(),
                ..Default::default()
            })
            .collect()
    }

    /// True when there are no credentials.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_formats_and_matches_images() {
        // "testuser:testpassword"
        let cfg = r#"{"auths": {
            "127.0.0.1:5001": {"auth": "dGVzdHVzZXI6dGVzdHBhc3N3b3Jk"},
            "https://index.docker.io/v1/": {"username": "u", "password": "p"},
            "reg.example/team": {"username": "t", "password": "q"}
        }}"#;
        let k = DockerKeyring::parse(cfg, "config.json").expect("parse");
        let a = k.lookup("127.0.0.1:5001/busybox:latest");
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].username.as_str(), a[0].password.as_str()),
            ("testuser", "testpassword")
        );
        assert_eq!(k.lookup("busybox")[0].username, "u", "docker.io default");
        assert_eq!(k.lookup("reg.example/team/app:1")[0].username, "t");
        assert!(k.lookup("reg.example/other/app").is_empty());
        assert!(k.lookup("127.0.0.1:5000/busybox").is_empty());
        let legacy = DockerKeyring::parse(
            r#"{"127.0.0.1:5001": {"auth": "dGVzdHVzZXI6dGVzdHBhc3N3b3Jk"}}"#,
            ".dockercfg",
        )
        .expect("legacy");
        assert_eq!(
            legacy.lookup("127.0.0.1:5001/x")[0].password,
            "testpassword"
        );
        assert!(DockerKeyring::parse("[1]", "x").is_err());
        assert!(DockerKeyring::parse(r#"{"auths":{"h":{"auth":"!!"}}}"#, "x").is_err());
        assert_eq!(
            split_image("localhost/a/b:1@sha256:x"),
            ("localhost".to_string(), "a/b".to_string())
        );
    }
}
