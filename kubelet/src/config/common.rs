//! Decoding and static-pod defaulting shared by the file and http sources (upstream
//! `pkg/kubelet/config/common.go`). This module owns: decoding one manifest (YAML or JSON) into
//! a `Pod` or `PodList`, checking its `kind`; upstream `applyDefaults` for static pods (content
//! derived UID, `-<nodeName>` name suffix, `default` namespace, `spec.nodeName`, the
//! `kubernetes.io/config.hash`/`config.source` annotations, the NoExecute toleration for file
//! pods, phase Pending); and the whole pipeline decode -> API defaults -> static defaults ->
//! validation, reporting failures as [`ManifestError`]s.

use k8s_openapi::api::core::v1::{Pod, PodStatus, Toleration};

/// A list of pods (`v1.PodList`).
pub type PodList = k8s_openapi::List<Pod>;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::validation::{ValidationError, validate_pod};
use super::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, ManifestError, defaults};

/// Why a manifest could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Nothing but whitespace.
    #[error("empty manifest")]
    Empty,
    /// Not valid YAML/JSON, or a field has the wrong type (the message carries the position).
    #[error("{0}")]
    Syntax(String),
    /// Decoded, but is not the kind we expected.
    #[error("unexpected kind {kind:?} (apiVersion {api_version:?}), want {want}")]
    WrongKind {
        /// The `kind` found.
        kind: String,
        /// The `apiVersion` found.
        api_version: String,
        /// What was expected.
        want: &'static str,
    },
}

/// A decoded manifest.
#[derive(Debug, Clone, PartialEq)]
pub enum Manifest {
    /// A single pod.
    Pod(Box<Pod>),
    /// A list of pods.
    PodList(PodList),
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    api_version: Option<String>,
}

fn is_json(data: &str) -> bool {
    data.trim_start().starts_with(['{', '['])
}

fn parse<T: for<'de> Deserialize<'de>>(data: &str) -> Result<T, DecodeError> {
    if is_json(data) {
        serde_json::from_str(data).map_err(|e| DecodeError::Syntax(e.to_string()))
    } else {
        serde_saphyr::from_str(data).map_err(|e| DecodeError::Syntax(e.to_string()))
    }
}

/// Decode a manifest: a `Pod`, or (`allow_list`) a `PodList`. A missing `kind` means Pod.
pub fn decode_manifest(data: &[u8], allow_list: bool) -> Result<Manifest, DecodeError> {
    let text = std::str::from_utf8(data).map_err(|e| DecodeError::Syntax(e.to_string()))?;
    if text.trim().is_empty() {
        return Err(DecodeError::Empty);
    }
    let tm: TypeMeta = parse(text)?;
    let api_version = tm.api_version.unwrap_or_default();
    let kind = tm.kind.unwrap_or_default();
    let core_v1 = api_version.is_empty() || api_version == "v1";
    match kind.as_str() {
        "" | "Pod" if core_v1 => Ok(Manifest::Pod(Box::new(parse(text)?))),
        "PodList" if core_v1 && allow_list => Ok(Manifest::PodList(parse(text)?)),
        _ => Err(DecodeError::WrongKind {
            kind,
            api_version,
            want: if allow_list { "Pod or PodList" } else { "Pod" },
        }),
    }
}

/// Upstream `generatePodName`: `<name>-<lowercased nodeName>`.
pub fn generate_pod_name(name: &str, node_name: &str) -> String {
    format!("{name}-{}", node_name.to_lowercase())
}

/// The static pod UID: a hash of the (API-defaulted) pod content and where it came from, so it
/// is stable across restarts and changes when the content changes (upstream: md5 of the object
/// plus `host:<node>file:<path>` or `url:<url>`; we use SHA-256, 32 hex chars).
pub fn static_pod_uid(pod: &Pod, location: &str, is_file: bool, node_name: &str) -> String {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(pod).unwrap_or_else(|_| format!("{pod:?}").into_bytes()));
    if is_file {
        h.update(format!("host:{node_name}"));
        h.update(format!("file:{location}"));
    } else {
        h.update(format!("url:{location}"));
    }
    let mut s = hex::encode(h.finalize());
    s.truncate(32);
    s
}

/// Upstream `AddOrUpdateTolerationInPod`: replace a matching toleration or append it.
fn add_or_update_toleration(pod: &mut Pod, t: Toleration) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let list = spec.tolerations.get_or_insert_with(Vec::new);
    let matches = |e: &Toleration| {
        e.key == t.key && e.operator == t.operator && e.value == t.value && e.effect == t.effect
    };
    match list.iter_mut().find(|e| matches(e)) {
        Some(e) => *e = t,
        None => list.push(t),
    }
}

/// Upstream `applyDefaults` for a static pod from `location` (file path or URL).
pub fn apply_static_defaults(
    pod: &mut Pod,
    source_name: &str,
    location: &str,
    is_file: bool,
    node_name: &str,
) {
    let uid = match pod.metadata.uid.as_deref() {
        Some(u) if !u.is_empty() => u.to_string(),
        _ => static_pod_uid(pod, location, is_file, node_name),
    };
    pod.metadata.uid = Some(uid.clone());
    let name = pod.metadata.name.clone().unwrap_or_default();
    pod.metadata.name = Some(generate_pod_name(&name, node_name));
    if pod.metadata.namespace.as_deref().is_none_or(str::is_empty) {
        pod.metadata.namespace = Some("default".into());
    }
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node_name.to_string());
    }
    let ann = pod
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    ann.insert(CONFIG_HASH_ANNOTATION.into(), uid);
    ann.insert(CONFIG_SOURCE_ANNOTATION.into(), source_name.into());
    if is_file {
        // Static pods must not be evicted on node problems.
        add_or_update_toleration(
            pod,
            Toleration {
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                ..Default::default()
            },
        );
    }
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        ..Default::default()
    });
}

/// Turn a decoded pod into a kubelet-ready static pod: API defaults, static defaults, then
/// validation (upstream `tryDecodeSinglePod` after decoding).
pub fn prepare_static_pod(
    mut pod: Pod,
    source_name: &str,
    location: &str,
    is_file: bool,
    node_name: &str,
) -> Result<Pod, Vec<ValidationError>> {
    defaults::set_defaults_pod(&mut pod);
    apply_static_defaults(&mut pod, source_name, location, is_file, node_name);
    let errs = validate_pod(&pod);
    if errs.is_empty() { Ok(pod) } else { Err(errs) }
}

/// Build the [`ManifestError`]s for a decode failure.
pub fn decode_failure(source_name: &str, location: &str, e: &DecodeError) -> ManifestError {
    ManifestError {
        source_name: source_name.into(),
        location: location.into(),
        field: match e {
            DecodeError::WrongKind { .. } => Some("kind".into()),
            _ => None,
        },
        reason: e.to_string(),
    }
}

/// Build the [`ManifestError`]s for validation failures.
pub fn validation_failures(
    source_name: &str,
    location: &str,
    errs: Vec<ValidationError>,
) -> Vec<ManifestError> {
    errs.into_iter()
        .map(|e| ManifestError {
            source_name: source_name.into(),
            location: location.into(),
            field: Some(e.field),
            reason: e.reason.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: nginx\n    image: nginx:1.25\n    ports:\n    - containerPort: 80\n";

    fn decode_pod(s: &str) -> Pod {
        match decode_manifest(s.as_bytes(), false) {
            Ok(Manifest::Pod(p)) => *p,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn decodes_yaml_and_json() {
        let p = decode_pod(YAML);
        assert_eq!(p.metadata.name.as_deref(), Some("web"));
        let json = serde_json::to_string(&p).expect("json");
        assert_eq!(decode_pod(&json), p);
        assert!(matches!(
            decode_manifest(b"kind: Service\n", false),
            Err(DecodeError::WrongKind { .. })
        ));
        assert!(matches!(
            decode_manifest(b"  \n", false),
            Err(DecodeError::Empty)
        ));
        assert!(matches!(
            decode_manifest(b"metadata: [\n", false),
            Err(DecodeError::Syntax(_))
        ));
        let list = r#"{"apiVersion":"v1","kind":"PodList","items":[]}"#;
        assert!(matches!(
            decode_manifest(list.as_bytes(), true),
            Ok(Manifest::PodList(_))
        ));
        assert!(decode_manifest(list.as_bytes(), false).is_err());
    }

    #[test]
    fn static_defaults() {
        let p = prepare_static_pod(decode_pod(YAML), "file", "/etc/m/web.yaml", true, "Node1")
            .expect("valid");
        assert_eq!(p.metadata.name.as_deref(), Some("web-node1"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
        let uid = p.metadata.uid.clone().expect("uid");
        assert_eq!(uid.len(), 32);
        let ann = p.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(ann.get(CONFIG_HASH_ANNOTATION), Some(&uid));
        assert_eq!(
            ann.get(CONFIG_SOURCE_ANNOTATION).map(String::as_str),
            Some("file")
        );
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("Node1"));
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        let tol = spec.tolerations.as_ref().expect("tolerations");
        assert_eq!(tol.len(), 1);
        assert_eq!(tol[0].effect.as_deref(), Some("NoExecute"));
        assert_eq!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Pending")
        );

        // Stable for the same content; changes with content, path or node.
        let again = prepare_static_pod(decode_pod(YAML), "file", "/etc/m/web.yaml", true, "Node1")
            .expect("valid");
        assert_eq!(again.metadata.uid.as_deref(), Some(uid.as_str()));
        let changed = YAML.replace("nginx:1.25", "nginx:1.26");
        let other = prepare_static_pod(
            decode_pod(&changed),
            "file",
            "/etc/m/web.yaml",
            true,
            "Node1",
        )
        .expect("valid");
        assert_ne!(other.metadata.uid.as_deref(), Some(uid.as_str()));
        let url = prepare_static_pod(decode_pod(YAML), "http", "http://x/", false, "Node1")
            .expect("valid");
        assert_ne!(url.metadata.uid.as_deref(), Some(uid.as_str()));
        assert!(
            url.spec
                .as_ref()
                .and_then(|s| s.tolerations.as_ref())
                .is_none()
        );
    }

    #[test]
    fn validation_errors_become_manifest_errors() {
        let bad = YAML.replace("    image: nginx:1.25\n", "");
        let errs = prepare_static_pod(decode_pod(&bad), "file", "/m/web.yaml", true, "n")
            .expect_err("invalid");
        let me = validation_failures("file", "/m/web.yaml", errs);
        assert_eq!(
            me[0].to_string(),
            "file: /m/web.yaml: spec.containers[0].image: Required value"
        );
    }
}
