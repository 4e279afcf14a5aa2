//! Pod validation as the kubelet applies it to static pods (upstream
//! `pkg/apis/core/validation` `ValidatePodCreate` as of 1.26, the parts a pod manifest can get
//! wrong), with upstream's field paths and messages. This module owns:
//! - metadata: the name (DNS-1123 subdomain), the namespace (DNS-1123 label), label keys and
//!   values, annotation keys and the annotations' total size (256 KiB:
//!   `metadata.annotations: Too long: must have at most 262144 bytes`);
//! - volumes: names (DNS-1123 labels, unique), exactly one source, `hostPath` (a path without
//!   `..`, a known type), the items of `configMap`/`secret`/`downwardAPI`/`projected` (relative
//!   paths without `..`, modes ≤ 0777), `emptyDir.sizeLimit`;
//! - containers (init and app): names (DNS-1123 labels, unique across both), image, ports
//!   (ranges, names, protocols, `containerPort` = `hostPort` with `hostNetwork`), env names,
//!   volume mounts (the volume exists, mount paths unique, `subPath`/`subPathExpr` relative
//!   without `..` and exclusive, mount propagation), probes (one handler, non-negative
//!   numbers, `successThreshold` 1 for liveness/startup, none on init containers), resources
//!   (quantities that parse and are non-negative, requests ≤ limits), pull and
//!   termination-message policies;
//! - the pod: restart and DNS policy, grace period, active deadline, hostname and subdomain.
//!
//! Every problem becomes a [`ValidationError`] with the field path, and all of them are
//! collected so a manifest's author sees everything at once. Two deviations keep a hostile
//! manifest's report bounded: an offending value longer than [`MAX_VALUE_IN_MESSAGE`] bytes is
//! cut in the message (its length is given), and the sources report at most
//! [`MAX_REPORTED_ERRORS`] problems of one manifest.
//!
//! Why one file of ~1,200 lines (about 250 of them tests): it is one upstream file's rules
//! (`validation.go`), applied in one pass that threads a single field path and error list
//! through metadata, volumes and containers; split by section, every part would need the path
//! and error helpers and the cross-checks (mounts against volumes, names unique across init and
//! app containers) would straddle files. A split by section is the next step if it grows.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use k8s_openapi::api::core::v1::{Container, KeyToPath, Pod, PodSpec, Probe, Volume};

/// Upstream `TotalAnnotationSizeLimitB`: the annotations' keys and values, 256 KiB in all.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;
/// Longest offending value quoted whole in a message; longer ones are cut (bounded log lines).
pub const MAX_VALUE_IN_MESSAGE: usize = 256;
/// Most problems reported for one manifest (the rest are counted in one last entry).
pub const MAX_REPORTED_ERRORS: usize = 20;

/// The kind of a validation problem (upstream `field.ErrorType`), rendered like upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// `Required value`.
    Required,
    /// `Required value: <detail>`.
    RequiredDetail(String),
    /// `Invalid value: "<value>": <detail>`.
    Invalid {
        /// The offending value.
        value: String,
        /// Why.
        detail: String,
    },
    /// `Invalid value: <number>: <detail>` (upstream prints numbers unquoted).
    InvalidNumber {
        /// The offending value.
        value: i64,
        /// Why.
        detail: String,
    },
    /// `Duplicate value: "<value>"`.
    Duplicate(String),
    /// `Not found: "<value>"`.
    NotFound(String),
    /// `Unsupported value: "<value>": supported values: ...`.
    NotSupported {
        /// The offending value.
        value: String,
        /// Allowed values.
        supported: Vec<&'static str>,
    },
    /// `Forbidden: <detail>`.
    Forbidden(String),
    /// `Too long: must have at most <n> bytes`.
    TooLong(usize),
}

/// `{value:?}`, cut after [`MAX_VALUE_IN_MESSAGE`] bytes.
struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() <= MAX_VALUE_IN_MESSAGE {
            return write!(f, "{:?}", self.0);
        }
        let mut end = MAX_VALUE_IN_MESSAGE;
        while !self.0.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{:?}... ({} bytes)", &self.0[..end], self.0.len())
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Required => f.write_str("Required value"),
            Reason::RequiredDetail(d) => write!(f, "Required value: {d}"),
            Reason::Invalid { value, detail } => {
                write!(f, "Invalid value: {}: {detail}", Quoted(value))
            }
            Reason::InvalidNumber { value, detail } => {
                write!(f, "Invalid value: {value}: {detail}")
            }
            Reason::Duplicate(v) => write!(f, "Duplicate value: {}", Quoted(v)),
            Reason::NotFound(v) => write!(f, "Not found: {}", Quoted(v)),
            Reason::NotSupported { value, supported } => {
                let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                write!(
                    f,
                    "Unsupported value: {}: supported values: {}",
                    Quoted(value),
                    list.join(", ")
                )
            }
            Reason::Forbidden(d) => write!(f, "Forbidden: {d}"),
            Reason::TooLong(n) => write!(f, "Too long: must have at most {n} bytes"),
        }
    }
}

/// One validation problem: the field path and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ValidationError {
    /// Field path, e.g. `spec.containers[1].image`.
    pub field: String,
    /// What is wrong.
    pub reason: Reason,
}

fn err(field: impl Into<String>, reason: Reason) -> ValidationError {
    ValidationError {
        field: field.into(),
        reason,
    }
}

fn invalid(field: impl Into<String>, value: &str, detail: impl Into<String>) -> ValidationError {
    err(
        field,
        Reason::Invalid {
            value: value.to_string(),
            detail: detail.into(),
        },
    )
}

fn invalid_num(field: impl Into<String>, value: i64, detail: impl Into<String>) -> ValidationError {
    err(
        field,
        Reason::InvalidNumber {
            value,
            detail: detail.into(),
        },
    )
}

fn not_supported(
    field: impl Into<String>,
    value: &str,
    supported: &[&'static str],
) -> ValidationError {
    err(
        field,
        Reason::NotSupported {
            value: value.to_string(),
            supported: supported.to_vec(),
        },
    )
}

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const ENV_VAR_NAME_MSG: &str = "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')";
const PORT_RANGE_MSG: &str = "must be between 1 and 65535, inclusive";
const NEGATIVE_MSG: &str = "must be greater than or equal to 0";
const FILE_MODE_MSG: &str = "must be a number between 0 and 0777 (octal), both inclusive";
const QUANTITY_MSG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

fn max_len_msg(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn is_alnum_lower(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` of any length.
fn is_dns1123_label_shape(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum_lower(b[0])
        && is_alnum_lower(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum_lower(c) || c == b'-')
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && is_dns1123_label_shape(s)
}

/// Dot-separated DNS-1123 labels, at most 253 characters in all. As upstream's
/// `IsDNS1123Subdomain`, the parts between dots are not limited to 63 characters each: a pod
/// name of 64 characters without a dot is valid.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label_shape)
}

/// Upstream `IsDNS1123Label`'s messages.
fn dns1123_label_msgs(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push(max_len_msg(63));
    }
    if !is_dns1123_label_shape(s) {
        out.push(DNS1123_LABEL_MSG.to_string());
    }
    out
}

/// Upstream `IsDNS1123Subdomain`'s messages.
fn dns1123_subdomain_msgs(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push(max_len_msg(253));
    }
    if !s.split('.').all(is_dns1123_label_shape) {
        out.push(DNS1123_SUBDOMAIN_MSG.to_string());
    }
    out
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Upstream `IsQualifiedName`'s messages (label keys, annotation keys): `[prefix/]name`, the
/// prefix a DNS-1123 subdomain, the name at most 63 characters.
pub fn qualified_name_msgs(s: &str) -> Vec<String> {
    let parts: Vec<&str> = s.split('/').collect();
    let mut out = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                out.push("prefix part must be non-empty".to_string());
            } else {
                out.extend(
                    dns1123_subdomain_msgs(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            name
        }
        _ => {
            return vec![format!(
                "a qualified name {QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        out.push(format!("name part {}", max_len_msg(63)));
    }
    if !is_qualified_name_part(name) {
        out.push(format!("name part {QUALIFIED_NAME_MSG}"));
    }
    out
}

/// Upstream `IsValidLabelValue`'s messages.
fn label_value_msgs(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push(max_len_msg(63));
    }
    if !s.is_empty() && !is_qualified_name_part(s) {
        out.push(LABEL_VALUE_MSG.to_string());
    }
    out
}

/// IANA service name (port names): 1-15 chars of `[a-z0-9-]`, at least one letter, no leading,
/// trailing or doubled hyphen.
pub fn is_iana_svc_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 15
        && b.iter().all(|&c| is_alnum_lower(c) || c == b'-')
        && b.iter().any(u8::is_ascii_lowercase)
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

/// Upstream `validateDNS1123Label`: Required when empty, else its messages.
fn validate_dns1123_label(s: &str, path: &str, errs: &mut Vec<ValidationError>) {
    if s.is_empty() {
        errs.push(err(path, Reason::Required));
        return;
    }
    for m in dns1123_label_msgs(s) {
        errs.push(invalid(path, s, m));
    }
}

/// Upstream `ValidateLabels`.
fn validate_labels(labels: &BTreeMap<String, String>, path: &str, errs: &mut Vec<ValidationError>) {
    for (k, v) in labels {
        for m in qualified_name_msgs(k) {
            errs.push(invalid(path, k, m));
        }
        for m in label_value_msgs(v) {
            errs.push(invalid(path, v, m));
        }
    }
}

/// Upstream `ValidateAnnotations`: keys are qualified names (checked lowercased, as upstream)
/// and keys plus values take at most 256 KiB.
fn validate_annotations(
    annotations: &BTreeMap<String, String>,
    path: &str,
    errs: &mut Vec<ValidationError>,
) {
    let mut total = 0usize;
    for (k, v) in annotations {
        for m in qualified_name_msgs(&k.to_lowercase()) {
            errs.push(invalid(path, k, m));
        }
        total = total.saturating_add(k.len()).saturating_add(v.len());
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(err(path, Reason::TooLong(TOTAL_ANNOTATION_SIZE_LIMIT)));
    }
}

/// Upstream `validatePathNoBacksteps`.
fn path_no_backsteps(p: &str, path: &str, errs: &mut Vec<ValidationError>) {
    if p.split('/').any(|part| part == "..") {
        errs.push(invalid(path, p, "must not contain '..'"));
    }
}

/// Upstream `validateLocalDescendingPath`: relative, without `..`.
fn local_descending_path(p: &str, path: &str, errs: &mut Vec<ValidationError>) {
    if p.starts_with('/') {
        errs.push(invalid(path, p, "must be a relative path"));
    }
    path_no_backsteps(p, path, errs);
}

/// Upstream `validateLocalNonReservedPath`.
fn local_non_reserved_path(p: &str, path: &str, errs: &mut Vec<ValidationError>) {
    local_descending_path(p, path, errs);
    if p.starts_with("..") && !p.starts_with("../") {
        errs.push(invalid(path, p, "must not start with '..'"));
    }
}

fn file_mode(mode: Option<i32>, path: &str, errs: &mut Vec<ValidationError>) {
    if let Some(m) = mode
        && !(0..=0o777).contains(&m)
    {
        errs.push(invalid_num(path, m.into(), FILE_MODE_MSG));
    }
}

/// Upstream `validateKeyToPath`.
fn key_to_paths(items: Option<&Vec<KeyToPath>>, path: &str, errs: &mut Vec<ValidationError>) {
    for (i, kp) in items.into_iter().flatten().enumerate() {
        let ip = format!("{path}.items[{i}]");
        if kp.key.is_empty() {
            errs.push(err(format!("{ip}.key"), Reason::Required));
        }
        if kp.path.is_empty() {
            errs.push(err(format!("{ip}.path"), Reason::Required));
        }
        local_non_reserved_path(&kp.path, &format!("{ip}.path"), errs);
        file_mode(kp.mode, &format!("{ip}.mode"), errs);
    }
}

/// The volume sources `v` sets, by their field names (everything but `name`).
pub fn volume_sources(v: &Volume) -> Vec<String> {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::Object(m)) => m
            .into_iter()
            .filter(|(k, v)| k != "name" && !v.is_null())
            .map(|(k, _)| k)
            .collect(),
        _ => Vec::new(),
    }
}

const HOST_PATH_TYPES: [&str; 8] = [
    "",
    "BlockDevice",
    "CharDevice",
    "Directory",
    "DirectoryOrCreate",
    "File",
    "FileOrCreate",
    "Socket",
];

/// Upstream `ValidateVolumes` (with `validateVolumeSource` for the sources the kubelet reads
/// paths from): the volume names, for the mounts to check against.
fn validate_volumes(volumes: &[Volume], errs: &mut Vec<ValidationError>) -> HashSet<String> {
    let mut names = HashSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let vp = format!("spec.volumes[{i}]");
        let name_path = format!("{vp}.name");
        let before = errs.len();
        validate_dns1123_label(&v.name, &name_path, errs);
        if errs.len() == before && !names.insert(v.name.clone()) {
            errs.push(err(&name_path, Reason::Duplicate(v.name.clone())));
        }
        let sources = volume_sources(v);
        match sources.as_slice() {
            [] => errs.push(err(
                &vp,
                Reason::RequiredDetail("must specify a volume type".into()),
            )),
            [_] => {}
            [_, more @ ..] => {
                for s in more {
                    errs.push(err(
                        format!("{vp}.{s}"),
                        Reason::Forbidden("may not specify more than 1 volume type".into()),
                    ));
                }
            }
        }
        if let Some(h) = &v.host_path {
            let p = format!("{vp}.hostPath.path");
            if h.path.is_empty() {
                errs.push(err(&p, Reason::Required));
            }
            path_no_backsteps(&h.path, &p, errs);
            if let Some(t) = h.type_.as_deref()
                && !HOST_PATH_TYPES.contains(&t)
            {
                errs.push(not_supported(
                    format!("{vp}.hostPath.type"),
                    t,
                    &HOST_PATH_TYPES,
                ));
            }
        }
        if let Some(e) = &v.empty_dir
            && let Some(q) = &e.size_limit
            && crate::resource::Quantity::try_from(q).is_ok_and(|q| q.sign() < 0)
        {
            errs.push(err(
                format!("{vp}.emptyDir.sizeLimit"),
                Reason::Forbidden("SizeLimit field must be a valid resource quantity".into()),
            ));
        }
        if let Some(c) = &v.config_map {
            key_to_paths(c.items.as_ref(), &format!("{vp}.configMap"), errs);
            file_mode(c.default_mode, &format!("{vp}.configMap.defaultMode"), errs);
        }
        if let Some(s) = &v.secret {
            key_to_paths(s.items.as_ref(), &format!("{vp}.secret"), errs);
            file_mode(s.default_mode, &format!("{vp}.secret.defaultMode"), errs);
        }
        if let Some(d) = &v.downward_api {
            for (j, f) in d.items.iter().flatten().enumerate() {
                let p = format!("{vp}.downwardAPI.items[{j}]");
                if f.path.is_empty() {
                    errs.push(err(format!("{p}.path"), Reason::Required));
                }
                local_non_reserved_path(&f.path, &format!("{p}.path"), errs);
                file_mode(f.mode, &format!("{p}.mode"), errs);
            }
            file_mode(
                d.default_mode,
                &format!("{vp}.downwardAPI.defaultMode"),
                errs,
            );
        }
        if let Some(p) = &v.projected {
            for (j, s) in p.sources.iter().flatten().enumerate() {
                let sp = format!("{vp}.projected.sources[{j}]");
                if let Some(c) = &s.config_map {
                    key_to_paths(c.items.as_ref(), &format!("{sp}.configMap"), errs);
                }
                if let Some(c) = &s.secret {
                    key_to_paths(c.items.as_ref(), &format!("{sp}.secret"), errs);
                }
                if let Some(d) = &s.downward_api {
                    for (k, f) in d.items.iter().flatten().enumerate() {
                        let fp = format!("{sp}.downwardAPI.items[{k}].path");
                        if f.path.is_empty() {
                            errs.push(err(&fp, Reason::Required));
                        }
                        local_non_reserved_path(&f.path, &fp, errs);
                    }
                }
                if let Some(t) = &s.service_account_token {
                    local_non_reserved_path(
                        &t.path,
                        &format!("{sp}.serviceAccountToken.path"),
                        errs,
                    );
                }
            }
            file_mode(p.default_mode, &format!("{vp}.projected.defaultMode"), errs);
        }
    }
    names
}

fn nonnegative(v: Option<i32>, path: String, errs: &mut Vec<ValidationError>) {
    if let Some(n) = v
        && n < 0
    {
        errs.push(invalid_num(path, n.into(), NEGATIVE_MSG));
    }
}

/// Upstream `validateProbe` and `validateHandler`.
fn validate_probe(p: &Probe, path: &str, errs: &mut Vec<ValidationError>) {
    let handlers: Vec<&str> = [
        ("exec", p.exec.is_some()),
        ("httpGet", p.http_get.is_some()),
        ("tcpSocket", p.tcp_socket.is_some()),
        ("grpc", p.grpc.is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(n, _)| n)
    .collect();
    match handlers.as_slice() {
        [] => errs.push(err(
            path,
            Reason::RequiredDetail("must specify a handler type".into()),
        )),
        [_] => {}
        [_, more @ ..] => {
            for h in more {
                errs.push(err(
                    format!("{path}.{h}"),
                    Reason::Forbidden("may not specify more than 1 handler type".into()),
                ));
            }
        }
    }
    nonnegative(
        p.initial_delay_seconds,
        format!("{path}.initialDelaySeconds"),
        errs,
    );
    nonnegative(p.timeout_seconds, format!("{path}.timeoutSeconds"), errs);
    nonnegative(p.period_seconds, format!("{path}.periodSeconds"), errs);
    nonnegative(
        p.success_threshold,
        format!("{path}.successThreshold"),
        errs,
    );
    nonnegative(
        p.failure_threshold,
        format!("{path}.failureThreshold"),
        errs,
    );
    if let Some(g) = p.termination_grace_period_seconds
        && g <= 0
    {
        errs.push(invalid_num(
            format!("{path}.terminationGracePeriodSeconds"),
            g,
            "must be greater than 0",
        ));
    }
}

/// Upstream `IsOvercommitAllowed`: native resources but huge pages.
fn overcommit_allowed(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    native && !name.starts_with("hugepages-")
}

/// Upstream `ValidateResourceRequirements` (quantities and requests ≤ limits).
fn validate_resources(c: &Container, path: &str, errs: &mut Vec<ValidationError>) {
    use crate::resource::Quantity;
    let Some(res) = c.resources.as_ref() else {
        return;
    };
    let parse = |kind: &str,
                 name: &str,
                 q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
                 errs: &mut Vec<ValidationError>| {
        let qp = format!("{path}.resources.{kind}[{name}]");
        match Quantity::try_from(q) {
            Err(_) => {
                errs.push(invalid(&qp, &q.0, QUANTITY_MSG));
                None
            }
            Ok(v) if v.sign() < 0 => {
                errs.push(invalid(&qp, &q.0, NEGATIVE_MSG));
                None
            }
            Ok(v) => Some(v),
        }
    };
    let mut limits = BTreeMap::new();
    for (name, q) in res.limits.iter().flatten() {
        if let Some(v) = parse("limits", name, q, errs) {
            limits.insert(name.as_str(), v);
        }
    }
    for (name, q) in res.requests.iter().flatten() {
        let Some(v) = parse("requests", name, q, errs) else {
            continue;
        };
        if let Some(l) = limits.get(name.as_str()) {
            if v != *l && !overcommit_allowed(name) {
                errs.push(invalid(
                    format!("{path}.resources.requests"),
                    &q.0,
                    format!("must be equal to {name} limit"),
                ));
            } else if v > *l {
                errs.push(invalid(
                    format!("{path}.resources.requests"),
                    &q.0,
                    format!("must be less than or equal to {name} limit"),
                ));
            }
        }
    }
}

/// Upstream `IsEnvVarName`.
fn env_var_name_msgs(s: &str) -> Vec<String> {
    let b = s.as_bytes();
    let ok = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_');
    let mut out = Vec::new();
    if b.is_empty() || b[0].is_ascii_digit() || !b.iter().all(|&c| ok(c)) {
        out.push(ENV_VAR_NAME_MSG.to_string());
    }
    if s == "." {
        out.push("must not be '.'".to_string());
    } else if s == ".." {
        out.push("must not be '..'".to_string());
    } else if s.starts_with("..") {
        out.push("must not start with '..'".to_string());
    }
    out
}

const MOUNT_PROPAGATIONS: [&str; 3] = ["Bidirectional", "HostToContainer", "None"];

/// What a container is checked against: the pod's volumes, the names seen so far, whether it is
/// an init container and whether the pod is on the host network.
struct ContainerCtx<'a> {
    volumes: &'a HashSet<String>,
    names: &'a mut HashSet<String>,
    init: bool,
    host_network: bool,
}

fn validate_container(
    c: &Container,
    path: &str,
    ctx: &mut ContainerCtx<'_>,
    errs: &mut Vec<ValidationError>,
) {
    let name_path = format!("{path}.name");
    if c.name.is_empty() {
        errs.push(err(name_path, Reason::Required));
    } else if !is_dns1123_label(&c.name) {
        for m in dns1123_label_msgs(&c.name) {
            errs.push(invalid(&name_path, &c.name, m));
        }
    } else if !ctx.names.insert(c.name.clone()) {
        errs.push(err(name_path, Reason::Duplicate(c.name.clone())));
    }
    if c.image.as_deref().is_none_or(|i| i.trim().is_empty()) {
        errs.push(err(format!("{path}.image"), Reason::Required));
    }
    let mut port_names = HashSet::new();
    for (i, p) in c.ports.iter().flatten().enumerate() {
        let pp = format!("{path}.ports[{i}]");
        if let Some(n) = p.name.as_deref() {
            if !is_iana_svc_name(n) {
                errs.push(invalid(
                    format!("{pp}.name"),
                    n,
                    "must be no more than 15 characters, contain only lowercase alphanumerics or '-', contain at least one letter, and not begin, end with or contain consecutive '-'",
                ));
            } else if !port_names.insert(n.to_string()) {
                errs.push(err(format!("{pp}.name"), Reason::Duplicate(n.to_string())));
            }
        }
        if p.container_port == 0 {
            errs.push(err(format!("{pp}.containerPort"), Reason::Required));
        } else if !(1..=65535).contains(&p.container_port) {
            errs.push(invalid_num(
                format!("{pp}.containerPort"),
                p.container_port.into(),
                PORT_RANGE_MSG,
            ));
        }
        if let Some(hp) = p.host_port
            && hp != 0
            && !(1..=65535).contains(&hp)
        {
            errs.push(invalid_num(
                format!("{pp}.hostPort"),
                hp.into(),
                PORT_RANGE_MSG,
            ));
        }
        if let Some(proto) = p.protocol.as_deref()
            && !["TCP", "UDP", "SCTP"].contains(&proto)
        {
            errs.push(not_supported(
                format!("{pp}.protocol"),
                proto,
                &["SCTP", "TCP", "UDP"],
            ));
        }
        if ctx.host_network && p.host_port.unwrap_or(0) != p.container_port {
            errs.push(invalid_num(
                format!("{pp}.containerPort"),
                p.container_port.into(),
                "must match `hostPort` when `hostNetwork` is true",
            ));
        }
    }
    for (i, e) in c.env.iter().flatten().enumerate() {
        let np = format!("{path}.env[{i}].name");
        if e.name.is_empty() {
            errs.push(err(np, Reason::Required));
        } else {
            for m in env_var_name_msgs(&e.name) {
                errs.push(invalid(&np, &e.name, m));
            }
        }
    }
    let mut mount_paths = HashSet::new();
    let privileged = c
        .security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false);
    let mounts_path = format!("{path}.volumeMounts");
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let mp = format!("{mounts_path}[{i}]");
        if m.name.is_empty() {
            errs.push(err(format!("{mp}.name"), Reason::Required));
        }
        if !ctx.volumes.contains(&m.name) {
            errs.push(err(format!("{mp}.name"), Reason::NotFound(m.name.clone())));
        }
        if m.mount_path.is_empty() {
            errs.push(err(format!("{mp}.mountPath"), Reason::Required));
        }
        if !mount_paths.insert(m.mount_path.as_str()) {
            errs.push(invalid(
                format!("{mp}.mountPath"),
                &m.mount_path,
                "must be unique",
            ));
        }
        // Upstream reports subPath and subPathExpr under the list's path, not the item's.
        let sub_path = m.sub_path.as_deref().unwrap_or_default();
        if !sub_path.is_empty() {
            local_descending_path(sub_path, &format!("{mounts_path}.subPath"), errs);
        }
        if let Some(expr) = m.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
            if !sub_path.is_empty() {
                errs.push(invalid(
                    format!("{mp}.subPathExpr"),
                    expr,
                    "subPathExpr and subPath are mutually exclusive",
                ));
            }
            local_descending_path(expr, &format!("{mounts_path}.subPathExpr"), errs);
        }
        if let Some(mode) = m.mount_propagation.as_deref() {
            let pp = format!("{mp}.mountPropagation");
            if !MOUNT_PROPAGATIONS.contains(&mode) {
                errs.push(not_supported(pp, mode, &MOUNT_PROPAGATIONS));
            } else if mode == "Bidirectional" && !privileged {
                errs.push(err(
                    pp,
                    Reason::Forbidden(
                        "Bidirectional mount propagation is available only to privileged containers"
                            .into(),
                    ),
                ));
            }
        }
    }
    for (field, probe) in [
        ("livenessProbe", &c.liveness_probe),
        ("readinessProbe", &c.readiness_probe),
        ("startupProbe", &c.startup_probe),
    ] {
        let Some(p) = probe else { continue };
        let pp = format!("{path}.{field}");
        // Sidecars (restartable init containers) may have probes, plain init containers not.
        if ctx.init && !crate::container::is_restartable_init_container(c) {
            errs.push(err(
                pp,
                Reason::Forbidden("may not be set for init containers".into()),
            ));
            continue;
        }
        validate_probe(p, &pp, errs);
        if field != "readinessProbe"
            && let Some(n) = p.success_threshold
            && n != 1
        {
            errs.push(invalid_num(
                format!("{pp}.successThreshold"),
                n.into(),
                "must be 1",
            ));
        }
        if field == "readinessProbe" && p.termination_grace_period_seconds.is_some() {
            errs.push(invalid_num(
                format!("{pp}.terminationGracePeriodSeconds"),
                p.termination_grace_period_seconds.unwrap_or_default(),
                "must not be set for readinessProbes",
            ));
        }
    }
    validate_resources(c, path, errs);
    // Both are defaulted before validation (absent only in a pod that skipped defaulting).
    match c.image_pull_policy.as_deref() {
        None => {}
        Some("") => errs.push(err(format!("{path}.imagePullPolicy"), Reason::Required)),
        Some(p) if !["Always", "IfNotPresent", "Never"].contains(&p) => errs.push(not_supported(
            format!("{path}.imagePullPolicy"),
            p,
            &["Always", "IfNotPresent", "Never"],
        )),
        _ => {}
    }
    match c.termination_message_policy.as_deref() {
        None => {}
        Some("") => errs.push(err(
            format!("{path}.terminationMessagePolicy"),
            Reason::Required,
        )),
        Some(p) if !["File", "FallbackToLogsOnError"].contains(&p) => errs.push(not_supported(
            format!("{path}.terminationMessagePolicy"),
            p,
            &["File", "FallbackToLogsOnError"],
        )),
        _ => {}
    }
}

fn validate_metadata(pod: &Pod, errs: &mut Vec<ValidationError>) {
    match pod.metadata.name.as_deref() {
        None | Some("") => errs.push(err("metadata.name", Reason::Required)),
        Some(n) => {
            for m in dns1123_subdomain_msgs(n) {
                errs.push(invalid("metadata.name", n, m));
            }
        }
    }
    match pod.metadata.namespace.as_deref() {
        None | Some("") => errs.push(err("metadata.namespace", Reason::Required)),
        Some(n) => {
            for m in dns1123_label_msgs(n) {
                errs.push(invalid("metadata.namespace", n, m));
            }
        }
    }
    if let Some(l) = &pod.metadata.labels {
        validate_labels(l, "metadata.labels", errs);
    }
    if let Some(a) = &pod.metadata.annotations {
        validate_annotations(a, "metadata.annotations", errs);
    }
}

fn validate_spec(spec: &PodSpec, errs: &mut Vec<ValidationError>) {
    let volumes = validate_volumes(spec.volumes.as_deref().unwrap_or_default(), errs);
    let mut names = HashSet::new();
    let host_network = spec.host_network.unwrap_or(false);
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let mut ctx = ContainerCtx {
            volumes: &volumes,
            names: &mut names,
            init: true,
            host_network,
        };
        validate_container(c, &format!("spec.initContainers[{i}]"), &mut ctx, errs);
    }
    if spec.containers.is_empty() {
        errs.push(err("spec.containers", Reason::Required));
    }
    // Container restart policies (KEP-753): only `Always` on init containers (sidecars), none
    // on app containers.
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        if let Some(rp) = c.restart_policy.as_deref()
            && rp != "Always"
        {
            errs.push(not_supported(
                format!("spec.initContainers[{i}].restartPolicy"),
                rp,
                &["Always"],
            ));
        }
    }
    for (i, c) in spec.containers.iter().enumerate() {
        if c.restart_policy.is_some() {
            errs.push(err(
                format!("spec.containers[{i}].restartPolicy"),
                Reason::Forbidden("may not be set for non-init containers".into()),
            ));
        }
    }
    // Upstream `ValidatePodCreate`: ephemeral containers are only added to existing pods
    // through the `ephemeralcontainers` subresource, so a static pod never has them.
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        errs.push(err(
            "spec.ephemeralContainers",
            Reason::Forbidden("cannot be set on create".into()),
        ));
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let mut ctx = ContainerCtx {
            volumes: &volumes,
            names: &mut names,
            init: false,
            host_network,
        };
        validate_container(c, &format!("spec.containers[{i}]"), &mut ctx, errs);
    }
    if let Some(rp) = spec.restart_policy.as_deref()
        && !["Always", "OnFailure", "Never"].contains(&rp)
    {
        errs.push(not_supported(
            "spec.restartPolicy",
            rp,
            &["Always", "OnFailure", "Never"],
        ));
    }
    if let Some(dp) = spec.dns_policy.as_deref()
        && !["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"].contains(&dp)
    {
        errs.push(not_supported(
            "spec.dnsPolicy",
            dp,
            &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"],
        ));
    }
    if let Some(g) = spec.termination_grace_period_seconds
        && g < 0
    {
        errs.push(invalid_num(
            "spec.terminationGracePeriodSeconds",
            g,
            NEGATIVE_MSG,
        ));
    }
    if let Some(d) = spec.active_deadline_seconds
        && !(1..=i64::from(i32::MAX)).contains(&d)
    {
        errs.push(invalid_num(
            "spec.activeDeadlineSeconds",
            d,
            "must be between 1 and 2147483647, inclusive",
        ));
    }
    for (field, v) in [("hostname", &spec.hostname), ("subdomain", &spec.subdomain)] {
        if let Some(h) = v.as_deref().filter(|h| !h.is_empty()) {
            for m in dns1123_label_msgs(h) {
                errs.push(invalid(format!("spec.{field}"), h, m));
            }
        }
    }
}

/// Validate `pod`; an empty list means valid.
pub fn validate_pod(pod: &Pod) -> Vec<ValidationError> {
    let mut errs = Vec::new();
    validate_metadata(pod, &mut errs);
    match pod.spec.as_ref() {
        Some(spec) => validate_spec(spec, &mut errs),
        None => errs.push(err("spec", Reason::Required)),
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn c(name: &str, image: Option<&str>) -> Container {
        Container {
            name: name.into(),
            image: image.map(Into::into),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-node1".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers,
                restart_policy: Some("Always".into()),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn rendered(p: &Pod) -> Vec<String> {
        validate_pod(p).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn valid_pod() {
        assert!(validate_pod(&pod(vec![c("a", Some("nginx"))])).is_empty());
    }

    #[test]
    fn names() {
        assert!(is_dns1123_label("a-1"));
        assert!(!is_dns1123_label("A"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain(&"a".repeat(64)));
        assert!(is_dns1123_subdomain(&format!("{}.b", "a".repeat(100))));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(is_dns1123_subdomain("a.b-c"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(is_iana_svc_name("http"));
        assert!(!is_iana_svc_name("80"));
        assert!(!is_iana_svc_name("a--b"));
        let mut p = pod(vec![c("a", Some("x"))]);
        p.metadata.name = Some("Bad_Name".into());
        p.metadata.namespace = None;
        let e = validate_pod(&p);
        assert_eq!(e[0].field, "metadata.name");
        assert!(matches!(e[0].reason, Reason::Invalid { .. }));
        assert_eq!(e[1].to_string(), "metadata.namespace: Required value");
    }

    #[test]
    fn containers() {
        assert_eq!(
            rendered(&pod(vec![])),
            vec!["spec.containers: Required value"]
        );
        let mut p = pod(vec![c("a", Some("x")), c("b", None), c("a", Some(""))]);
        if let Some(s) = p.spec.as_mut() {
            s.init_containers = Some(vec![c("b", Some("x"))]);
        }
        assert_eq!(
            rendered(&p),
            vec![
                "spec.containers[1].name: Duplicate value: \"b\"",
                "spec.containers[1].image: Required value",
                "spec.containers[2].name: Duplicate value: \"a\"",
                "spec.containers[2].image: Required value",
            ]
        );
    }

    #[test]
    fn ports_and_policy() {
        let mut a = c("a", Some("x"));
        a.ports = Some(vec![
            ContainerPort {
                name: Some("http".into()),
                container_port: 0,
                host_port: Some(70000),
                ..Default::default()
            },
            ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                protocol: Some("ICMP".into()),
                ..Default::default()
            },
        ]);
        let mut p = pod(vec![a]);
        if let Some(s) = p.spec.as_mut() {
            s.restart_policy = Some("Sometimes".into());
        }
        let fields: Vec<String> = validate_pod(&p).into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            vec![
                "spec.containers[0].ports[0].containerPort",
                "spec.containers[0].ports[0].hostPort",
                "spec.containers[0].ports[1].name",
                "spec.containers[0].ports[1].protocol",
                "spec.restartPolicy",
            ]
        );
    }

    fn full_pod(yaml: &str) -> Pod {
        let mut p: Pod = serde_saphyr::from_str(yaml).expect("yaml");
        crate::config::defaults::set_defaults_pod(&mut p);
        p.metadata.namespace.get_or_insert_with(|| "default".into());
        p
    }

    const BASE: &str =
        "metadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: busybox\n";

    #[test]
    fn metadata_labels_and_annotations() {
        let mut p = full_pod(BASE);
        p.metadata.annotations = Some(BTreeMap::from([
            ("a".to_string(), "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT)),
            ("bad key!".to_string(), String::new()),
        ]));
        p.metadata.labels = Some(BTreeMap::from([
            ("example.com/ok".to_string(), "fine_value-1".to_string()),
            ("/nope".to_string(), "-bad-".to_string()),
        ]));
        assert_eq!(
            rendered(&p),
            vec![
                "metadata.labels: Invalid value: \"/nope\": prefix part must be non-empty".to_string(),
                "metadata.labels: Invalid value: \"-bad-\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_string(),
                format!("metadata.annotations: Invalid value: \"bad key!\": name part {QUALIFIED_NAME_MSG}"),
                "metadata.annotations: Too long: must have at most 262144 bytes".to_string(),
            ]
        );
        // Exactly at the limit is fine; upper case keys are checked lowercased, as upstream.
        p.metadata.labels = None;
        p.metadata.annotations = Some(BTreeMap::from([(
            "A.Example.COM/Key".to_string(),
            "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT - 17),
        )]));
        assert!(validate_pod(&p).is_empty(), "{:?}", rendered(&p));
        assert_eq!(qualified_name_msgs("a/b/c").len(), 1);
        assert_eq!(
            qualified_name_msgs(&"n".repeat(64)),
            vec!["name part must be no more than 63 characters"]
        );
    }

    #[test]
    fn volumes_and_mounts() {
        let p = full_pod(
            "metadata:\n  name: p\nspec:\n  volumes:\n  - name: Bad_Vol\n    emptyDir: {}\n  - name: data\n    emptyDir: {}\n  - name: data\n    hostPath: {path: /srv/../etc, type: Weird}\n  - name: both\n    emptyDir: {}\n    hostPath: {path: /x}\n  - name: cm\n    configMap:\n      name: c\n      items:\n      - {key: k, path: ../escape, mode: 4096}\n  containers:\n  - name: c\n    image: busybox\n    volumeMounts:\n    - {name: data, mountPath: /d, subPath: ../../etc}\n    - {name: missing, mountPath: /d}\n    - {name: cm, mountPath: /c, subPath: a, subPathExpr: b}\n    - {name: cm, mountPath: /e, mountPropagation: Bidirectional}\n",
        );
        assert_eq!(
            rendered(&p),
            vec![
                format!("spec.volumes[0].name: Invalid value: \"Bad_Vol\": {DNS1123_LABEL_MSG}"),
                "spec.volumes[2].name: Duplicate value: \"data\"".to_string(),
                "spec.volumes[2].hostPath.path: Invalid value: \"/srv/../etc\": must not contain '..'".to_string(),
                "spec.volumes[2].hostPath.type: Unsupported value: \"Weird\": supported values: \"\", \"BlockDevice\", \"CharDevice\", \"Directory\", \"DirectoryOrCreate\", \"File\", \"FileOrCreate\", \"Socket\"".to_string(),
                "spec.volumes[3].hostPath: Forbidden: may not specify more than 1 volume type".to_string(),
                "spec.volumes[4].configMap.items[0].path: Invalid value: \"../escape\": must not contain '..'".to_string(),
                "spec.volumes[4].configMap.items[0].mode: Invalid value: 4096: must be a number between 0 and 0777 (octal), both inclusive".to_string(),
                "spec.containers[0].volumeMounts.subPath: Invalid value: \"../../etc\": must not contain '..'".to_string(),
                "spec.containers[0].volumeMounts[1].name: Not found: \"missing\"".to_string(),
                "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/d\": must be unique".to_string(),
                "spec.containers[0].volumeMounts[2].subPathExpr: Invalid value: \"b\": subPathExpr and subPath are mutually exclusive".to_string(),
                "spec.containers[0].volumeMounts[3].mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers".to_string(),
            ]
        );
        // A volume without a source is defaulted to emptyDir (upstream too), so it is valid.
        let p = full_pod(
            "metadata:\n  name: p\nspec:\n  volumes:\n  - name: v\n  containers:\n  - name: c\n    image: busybox\n    volumeMounts:\n    - {name: v, mountPath: /v, subPath: sub/dir}\n",
        );
        assert!(validate_pod(&p).is_empty(), "{:?}", rendered(&p));
        assert_eq!(
            volume_sources(&p.spec.as_ref().expect("spec").volumes.as_ref().expect("v")[0]),
            vec!["emptyDir"]
        );
    }

    #[test]
    fn probes_env_resources_policies() {
        let p = full_pod(
            "metadata:\n  name: p\nspec:\n  activeDeadlineSeconds: 0\n  hostname: Not_A_Label\n  initContainers:\n  - name: i\n    image: busybox\n    readinessProbe: {exec: {command: [\"true\"]}}\n  containers:\n  - name: c\n    image: busybox\n    imagePullPolicy: Sometimes\n    env:\n    - {name: 1BAD, value: x}\n    - {name: GOOD_1, value: x}\n    livenessProbe: {successThreshold: 2, periodSeconds: -1}\n    startupProbe: {exec: {command: [\"true\"]}, tcpSocket: {port: 1}}\n    resources:\n      limits: {cpu: 500m, memory: 1Gi, hugepages-2Mi: 2Mi}\n      requests: {cpu: \"1\", memory: -1Gi, hugepages-2Mi: 4Mi, ephemeral-storage: lots}\n",
        );
        assert_eq!(
            rendered(&p),
            vec![
                "spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers".to_string(),
                format!("spec.containers[0].env[0].name: Invalid value: \"1BAD\": {ENV_VAR_NAME_MSG}"),
                "spec.containers[0].livenessProbe: Required value: must specify a handler type".to_string(),
                "spec.containers[0].livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0".to_string(),
                "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1".to_string(),
                "spec.containers[0].startupProbe.tcpSocket: Forbidden: may not specify more than 1 handler type".to_string(),
                "spec.containers[0].resources.requests: Invalid value: \"1\": must be less than or equal to cpu limit".to_string(),
                format!("spec.containers[0].resources.requests[ephemeral-storage]: Invalid value: \"lots\": {QUANTITY_MSG}"),
                "spec.containers[0].resources.requests: Invalid value: \"4Mi\": must be equal to hugepages-2Mi limit".to_string(),
                "spec.containers[0].resources.requests[memory]: Invalid value: \"-1Gi\": must be greater than or equal to 0".to_string(),
                "spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"".to_string(),
                "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive".to_string(),
                format!("spec.hostname: Invalid value: \"Not_A_Label\": {DNS1123_LABEL_MSG}"),
            ]
        );
        // hostNetwork: a hostPort other than the containerPort is refused.
        let p = full_pod(
            "metadata:\n  name: p\nspec:\n  hostNetwork: true\n  containers:\n  - name: c\n    image: busybox\n    ports:\n    - {containerPort: 80, hostPort: 8080}\n    - {containerPort: 81}\n",
        );
        assert_eq!(
            rendered(&p),
            vec![
                "spec.containers[0].ports[0].containerPort: Invalid value: 80: must match `hostPort` when `hostNetwork` is true"
            ]
        );
    }

    #[test]
    fn sidecars_are_allowed_ephemeral_containers_are_not() {
        let p = full_pod(
            "metadata:\n  name: p\nspec:\n  initContainers:\n  - name: s\n    image: busybox\n    restartPolicy: Always\n    readinessProbe:\n      exec:\n        command: [true]\n  containers:\n  - name: c\n    image: busybox\n",
        );
        assert!(rendered(&p).is_empty(), "{:?}", rendered(&p));
        let p = full_pod(
            "metadata:\n  name: p\nspec:\n  initContainers:\n  - name: s\n    image: busybox\n    restartPolicy: Never\n  containers:\n  - name: c\n    image: busybox\n    restartPolicy: Always\n  ephemeralContainers:\n  - name: d\n    image: busybox\n",
        );
        assert_eq!(
            rendered(&p),
            vec![
                "spec.initContainers[0].restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"".to_string(),
                "spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers".to_string(),
                "spec.ephemeralContainers: Forbidden: cannot be set on create".to_string(),
            ]
        );
    }

    #[test]
    fn long_values_are_cut_in_messages() {
        let mut p = full_pod(BASE);
        let key = format!("{}!", "k".repeat(100_000));
        p.metadata.labels = Some(BTreeMap::from([(key, String::new())]));
        let lines = rendered(&p);
        assert!(
            lines
                .iter()
                .all(|l| l.len() < 2 * MAX_VALUE_IN_MESSAGE + 600),
            "{}",
            lines[0].len()
        );
        assert!(
            lines[0].contains("... (100001 bytes)"),
            "{}",
            &lines[0][..400]
        );
    }
}
