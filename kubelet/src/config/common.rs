//! Decoding and static-pod defaulting shared by the file and http sources (upstream
//! `pkg/kubelet/config/common.go`). This module owns: decoding one manifest (YAML or JSON) into
//! a `Pod` or `PodList`, checking its `kind`; upstream `applyDefaults` for static pods (content
//! derived UID, `-<nodeName>` name suffix, `default` namespace, `spec.nodeName`, the
//! `kubernetes.io/config.hash`/`config.source` annotations, the NoExecute toleration for file
//! pods, phase Pending); and the whole pipeline decode -> API defaults -> static defaults ->
//! validation, reporting failures as [`ManifestError`]s.
//!
//! Hostile input is bounded before and while it is parsed: a manifest (a file, or an http
//! body) over [`MAX_MANIFEST_BYTES`] is refused before parsing (the file source does not even
//! read it); YAML is parsed with a serde-saphyr [`Budget`](serde_saphyr::Budget) — nesting
//! depth [`MAX_DEPTH`], at most [`MAX_ALIASES`] aliases and anchors, alias replay (an alias
//! bomb's expansion) cut at [`MAX_ALIAS_REPLAY_EVENTS`] events, node and scalar-byte caps;
//! JSON with serde_json's recursion limit (128 levels). Messages are one line.

use k8s_openapi::api::core::v1::{Pod, PodStatus, Toleration};

/// A list of pods (`v1.PodList`).
pub type PodList = k8s_openapi::List<Pod>;
use serde::Deserialize;

use super::validation::{ValidationError, validate_pod};
use super::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, ManifestError, defaults};

/// The largest manifest the file and http sources accept, in bytes (1 MiB): a manifest file,
/// or the body the manifest URL answers. Upstream's sources have no cap of their own; its API
/// server refuses request bodies over 3 MiB and etcd stores objects up to 1.5 MiB. One pod (or
/// the PodList of one node) needs far less; anything larger is refused before it is parsed.
pub const MAX_MANIFEST_BYTES: usize = 1 << 20;
/// Deepest nesting of YAML mappings and sequences (a pod needs about 12).
pub const MAX_DEPTH: usize = 64;
/// Most YAML aliases, and most anchors, in one manifest.
pub const MAX_ALIASES: usize = 1_000;
/// Most parser events replayed for aliases in one manifest (an alias bomb expands
/// exponentially; this stops it early).
pub const MAX_ALIAS_REPLAY_EVENTS: usize = 10_000;

/// Why a manifest could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Nothing but whitespace.
    #[error("empty manifest")]
    Empty,
    /// Over [`MAX_MANIFEST_BYTES`] (`size` is a lower bound when the whole was not read).
    #[error("manifest is {size} bytes, over the limit of {MAX_MANIFEST_BYTES} bytes (not parsed)")]
    TooLarge {
        /// Its size, or how much of it was read.
        size: u64,
    },
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

/// The YAML parser's options: [`MAX_DEPTH`], [`MAX_ALIASES`], [`MAX_ALIAS_REPLAY_EVENTS`] and
/// node and byte caps a manifest of [`MAX_MANIFEST_BYTES`] cannot legitimately need more of;
/// YAML 1.1 integers with a leading `0` are octal, as upstream reads manifests
/// (sigs.k8s.io/yaml on go-yaml v2): `defaultMode: 0644` is 420, where YAML 1.2 refuses the
/// spelling for an integer field and the manifest with it.
fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_DEPTH;
    budget.max_aliases = MAX_ALIASES;
    budget.max_anchors = MAX_ALIASES;
    budget.max_recorded_anchor_events = MAX_ALIAS_REPLAY_EVENTS;
    budget.max_recorded_anchor_bytes = 2 * MAX_MANIFEST_BYTES;
    budget.max_nodes = 250_000;
    budget.max_events = 1_000_000;
    budget.max_total_scalar_bytes = 2 * MAX_MANIFEST_BYTES;
    budget.max_documents = 16;
    let mut aliases = serde_saphyr::options::AliasLimits::default();
    aliases.max_total_replayed_events = MAX_ALIAS_REPLAY_EVENTS;
    aliases.max_replay_stack_depth = 16;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.alias_limits = aliases;
    options.legacy_octal_numbers = true;
    options
}

/// The first line of a parser's message (serde-saphyr's quote the source below it).
fn first_line(msg: &str) -> String {
    let first = msg
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("malformed manifest");
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

/// JSON when it looks like JSON, else YAML. Upstream converts every manifest with YAML's
/// `ToJSON` (JSON is YAML), so YAML flow style that starts like JSON (`{apiVersion: v1, …}`)
/// is a valid manifest too: what serde_json refuses is parsed again as YAML, and when both
/// refuse it, serde_json's error is the one reported.
fn parse<T: for<'de> Deserialize<'de>>(data: &str) -> Result<T, DecodeError> {
    let yaml = || serde_saphyr::from_str_with_options(data, yaml_options());
    if is_json(data) {
        serde_json::from_str(data).or_else(|json_err| {
            yaml().map_err(|_| DecodeError::Syntax(first_line(&json_err.to_string())))
        })
    } else {
        yaml().map_err(|e| DecodeError::Syntax(first_line(&e.to_string())))
    }
}

/// A manifest's text, with its JSON form: the text itself when it looks like JSON, else its
/// YAML converted to JSON (upstream's `yaml.ToJSON`), or none when that conversion failed.
///
/// Decoding tries the JSON form first, so every manifest that decodes as upstream would decode
/// it (YAML → JSON → the JSON decoder) takes the one serde_json path for each type. Only what
/// that path refuses is decoded by [`parse`] as before: straight from the YAML, where
/// serde-saphyr reads a plain scalar as whatever the field wants (`version: 1` into a label),
/// and whose errors carry the line and column. Why not always straight from the YAML: that
/// decoder is a second copy of the code for every API type, megabytes the kubelet would page in
/// for its manifests and keep resident (issue 14); this way it runs only for those exceptions.
struct Source<'a> {
    text: &'a str,
    json: Option<std::borrow::Cow<'a, str>>,
}

impl<'a> Source<'a> {
    fn new(text: &'a str) -> Self {
        let json = if is_json(text) {
            Some(text.into())
        } else {
            serde_saphyr::from_str_with_options::<serde_json::Value>(text, yaml_options())
                .ok()
                .and_then(|value| serde_json::to_string(&value).ok())
                .map(Into::into)
        };
        Source { text, json }
    }

    fn decode<T: for<'de> Deserialize<'de>>(&self) -> Result<T, DecodeError> {
        if let Some(Ok(decoded)) = self.json.as_deref().map(serde_json::from_str) {
            return Ok(decoded);
        }
        parse(self.text)
    }
}

/// Decode a manifest: a `Pod`, or (`allow_list`) a `PodList`. A missing `kind` means Pod.
/// Over [`MAX_MANIFEST_BYTES`] it is refused unparsed.
pub fn decode_manifest(data: &[u8], allow_list: bool) -> Result<Manifest, DecodeError> {
    if data.len() > MAX_MANIFEST_BYTES {
        return Err(DecodeError::TooLarge {
            size: data.len() as u64,
        });
    }
    let text = std::str::from_utf8(data).map_err(|e| DecodeError::Syntax(e.to_string()))?;
    if text.trim().is_empty() {
        return Err(DecodeError::Empty);
    }
    let source = Source::new(text);
    let tm: TypeMeta = source.decode()?;
    let api_version = tm.api_version.unwrap_or_default();
    let kind = tm.kind.unwrap_or_default();
    let core_v1 = api_version.is_empty() || api_version == "v1";
    match kind.as_str() {
        "" | "Pod" if core_v1 => Ok(Manifest::Pod(Box::new(source.decode()?))),
        "PodList" if core_v1 && allow_list => Ok(Manifest::PodList(source.decode()?)),
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

/// The static pod UID: upstream `applyDefaults`' MD5 over the decoded, API-defaulted pod as
/// go-spew prints the internal `core.Pod`, then `host:<node>` and `file:<path>` (or
/// `url:<url>`), in hex — the UID the Go kubelet 1.26 gives the same manifest (see
/// [`crate::util::hash`]), so a kubelet swap finds the pod's sandbox and containers its own.
pub fn static_pod_uid(pod: &Pod, location: &str, is_file: bool, node_name: &str) -> String {
    crate::util::hash::static_pod_uid(pod, location, is_file, node_name)
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

/// Build the [`ManifestError`]s for validation failures: the first
/// [`MAX_REPORTED_ERRORS`](super::validation::MAX_REPORTED_ERRORS), then one counting the rest.
pub fn validation_failures(
    source_name: &str,
    location: &str,
    errs: Vec<ValidationError>,
) -> Vec<ManifestError> {
    use super::validation::MAX_REPORTED_ERRORS;
    let more = errs.len().saturating_sub(MAX_REPORTED_ERRORS);
    let mut out: Vec<ManifestError> = errs
        .into_iter()
        .take(MAX_REPORTED_ERRORS)
        .map(|e| ManifestError {
            source_name: source_name.into(),
            location: location.into(),
            field: Some(e.field),
            reason: e.reason.to_string(),
        })
        .collect();
    if more > 0 {
        out.push(ManifestError {
            source_name: source_name.into(),
            location: location.into(),
            field: None,
            reason: format!("{more} more validation errors not shown"),
        });
    }
    out
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
    fn yaml_file_modes_with_a_leading_zero_are_octal() {
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: i\n  volumes:\n  - name: s\n    secret:\n      secretName: x\n      defaultMode: 0644\n      items:\n      - key: k\n        path: p\n        mode: 0400\n  - name: d\n    configMap:\n      name: y\n      defaultMode: 420\n";
        let volumes = decode_pod(yaml)
            .spec
            .and_then(|s| s.volumes)
            .unwrap_or_default();
        let secret = volumes[0].secret.as_ref().expect("secret");
        assert_eq!(secret.default_mode, Some(0o644));
        let items = secret.items.as_deref().unwrap_or_default();
        assert_eq!(items[0].mode, Some(0o400));
        let cm = volumes[1].config_map.as_ref().expect("configMap");
        assert_eq!(cm.default_mode, Some(420), "a decimal mode stays decimal");
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
        // YAML flow style starts like JSON and is a manifest too (upstream: YAML ToJSON).
        let flow = "{apiVersion: v1, kind: Pod, metadata: {name: web}, spec: {containers: [{name: nginx, image: 'nginx:1.25', ports: [{containerPort: 80}]}]}}\n";
        assert_eq!(decode_pod(flow), p);
        assert!(matches!(
            decode_manifest(b"{\"kind\": \"Pod\", ", false),
            Err(DecodeError::Syntax(m)) if m.contains("EOF")
        ));
        let list = r#"{"apiVersion":"v1","kind":"PodList","items":[]}"#;
        assert!(matches!(
            decode_manifest(list.as_bytes(), true),
            Ok(Manifest::PodList(_))
        ));
        assert!(decode_manifest(list.as_bytes(), false).is_err());
    }

    /// Decoding through the JSON form gives exactly what decoding straight from the YAML gives,
    /// and the usual manifests (the examples, anchors, quantities, int-or-string ports, block
    /// scalars) take the JSON path; what it refuses (a number where a string belongs) falls back
    /// to the straight decode, which accepts it as it always did.
    #[test]
    fn the_json_path_decodes_what_the_yaml_decoder_does() {
        let straight = |doc: &str| -> Pod {
            serde_saphyr::from_str_with_options(doc, yaml_options()).expect("straight decode")
        };
        let json_path = |doc: &str| -> Option<Pod> {
            serde_json::from_str(Source::new(doc).json.as_deref()?).ok()
        };
        let usual = [
            include_str!("../../../examples/web.yaml"),
            include_str!("../../../examples/init.yaml"),
            include_str!("../../../examples/sidecar.yaml"),
            YAML,
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: q\n  labels: {app: q, tier: \"1\"}\nspec:\n  containers:\n  - &c\n    name: a\n    image: busybox\n    resources:\n      limits: {cpu: 0.5, memory: 64Mi}\n      requests: {cpu: 1, memory: 1.5e3}\n    livenessProbe:\n      httpGet: {port: 8080, path: /}\n    readinessProbe:\n      tcpSocket: {port: http}\n    env:\n    - {name: A, value: \"true\"}\n    - name: B\n      value: |\n        two\n        lines\n  - <<: *c\n    name: b\n  terminationGracePeriodSeconds: 2\n  hostNetwork: false\n  nodeSelector: ~\n",
        ];
        for doc in usual {
            let via_json = json_path(doc).unwrap_or_else(|| panic!("JSON path refused:\n{doc}"));
            assert_eq!(via_json, straight(doc), "{doc}");
            assert_eq!(decode_pod(doc), via_json);
        }
        // Plain scalars that are not strings where strings belong: upstream refuses them, the
        // JSON path too, and the straight decode reads them as strings.
        let lenient = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: l\n  labels:\n    version: 1\n    canary: true\nspec:\n  containers:\n  - name: a\n    image: busybox\n    env:\n    - {name: N, value: 3}\n";
        assert!(json_path(lenient).is_none());
        let p = decode_pod(lenient);
        assert_eq!(p, straight(lenient));
        let labels = p.metadata.labels.expect("labels");
        assert_eq!(labels.get("version").map(String::as_str), Some("1"));
        assert_eq!(labels.get("canary").map(String::as_str), Some("true"));
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

    fn syntax(data: &[u8]) -> String {
        match decode_manifest(data, false) {
            Err(DecodeError::Syntax(m)) => m,
            other => panic!("want a syntax error, got {other:?}"),
        }
    }

    #[test]
    fn oversize_manifests_are_refused_unparsed() {
        let mut big = YAML.to_string();
        big.push_str(&format!(
            "    args: [\"{}\"]\n",
            "x".repeat(MAX_MANIFEST_BYTES)
        ));
        assert_eq!(
            decode_manifest(big.as_bytes(), false),
            Err(DecodeError::TooLarge {
                size: big.len() as u64
            })
        );
        assert_eq!(
            decode_failure(
                "file",
                "/m/big.yaml",
                &DecodeError::TooLarge { size: 5 << 20 }
            )
            .to_string(),
            "file: /m/big.yaml: manifest is 5242880 bytes, over the limit of 1048576 bytes (not parsed)"
        );
        // Just under the cap still parses.
        let mut ok = YAML.to_string();
        ok.push_str(&format!(
            "    args: [\"{}\"]\n",
            "x".repeat(MAX_MANIFEST_BYTES - YAML.len() - 20)
        ));
        assert!(ok.len() <= MAX_MANIFEST_BYTES);
        assert!(matches!(
            decode_manifest(ok.as_bytes(), false),
            Ok(Manifest::Pod(_))
        ));
    }

    #[test]
    fn hostile_yaml_and_json_are_bounded_and_reported_in_one_line() {
        // 100 000-deep JSON: where a value is kept (fieldsV1 is free-form JSON), serde_json's
        // recursion limit (128) stops it; where it is ignored (an unknown field), serde_json
        // skips it without recursion (one byte a level), and the pod fails validation.
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let deep_kept = format!(
            "{{\"metadata\":{{\"name\":\"d\",\"managedFields\":[{{\"fieldsV1\":{}}}]}}}}",
            nest(100_000)
        );
        let m = syntax(deep_kept.as_bytes());
        assert!(m.contains("recursion limit exceeded"), "{m}");
        let deep_ignored = format!("{{\"apiVersion\":\"v1\",\"x\":{}}}", nest(100_000));
        match decode_manifest(deep_ignored.as_bytes(), false) {
            Ok(Manifest::Pod(p)) => {
                let errs = prepare_static_pod(*p, "file", "/m/d.json", true, "n")
                    .expect_err("no name, no containers");
                assert!(
                    errs.iter().any(|e| e.field == "spec.containers"),
                    "{errs:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Deep YAML, block and flow.
        let mut block = String::from("metadata:\n");
        for i in 1..200 {
            block.push_str(&format!("{}k{i}:\n", "  ".repeat(i)));
        }
        let m = syntax(block.as_bytes());
        assert!(m.contains("budget breached: Depth"), "{m}");
        assert_eq!(m.lines().count(), 1, "{m}");
        let flow = format!("metadata: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
        syntax(flow.as_bytes());
        // A billion-laughs alias bomb into a field that ignores what it reads.
        let mut bomb = String::from(
            "apiVersion: v1\nkind: Pod\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
        );
        for i in 1..10 {
            let p = i - 1;
            bomb.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        bomb.push_str("metadata:\n  name: bomb\n  labels: *a9\n");
        let m = syntax(bomb.as_bytes());
        assert!(m.contains("budget breached: RecordedAnchorEvents"), "{m}");
        assert_eq!(m.lines().count(), 1, "{m}");
        // Truncated YAML, binary junk, invalid UTF-8.
        syntax(b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: \"trunc");
        assert!(decode_manifest(&[0xff, 0xfe, 0x00, 0x01], false).is_err());
        assert!(decode_manifest(b"\x00\x01\x02\x7f{{{\x00", false).is_err());
        // Many documents.
        assert!(decode_manifest("---\n".repeat(1000).as_bytes(), false).is_err());
    }

    #[test]
    fn many_validation_errors_are_capped() {
        use super::super::validation::MAX_REPORTED_ERRORS;
        let errs: Vec<ValidationError> = (0..100)
            .map(|i| ValidationError {
                field: format!("spec.volumes[{i}].name"),
                reason: super::super::validation::Reason::Required,
            })
            .collect();
        let me = validation_failures("file", "/m/x.yaml", errs);
        assert_eq!(me.len(), MAX_REPORTED_ERRORS + 1);
        assert_eq!(
            me[MAX_REPORTED_ERRORS].to_string(),
            "file: /m/x.yaml: 80 more validation errors not shown"
        );
    }
}
