//! The fuzz harness of the static-pod manifest decoder (the `manifest_decode` target in
//! `fuzz/`, built with the `fuzzing` feature; the same function replays the checked-in seeds
//! in a unit test). One input is the bytes of a manifest, taken through both ways the kubelet
//! reads one: the file source's (decode a single Pod, API defaults, static defaults,
//! validation, [`ManifestError`]s) and the http source's ([`pods_from_body`]: a Pod or a
//! PodList).
//!
//! Invariants checked (a violation panics, which the fuzzer reports as a crash):
//! - every error is one line and at most [`MAX_REPORTED_ERRORS`] + 1 are reported per manifest;
//! - a pod that passes is a kubelet-ready static pod: named `<name>-<node>`, a namespace, a
//!   uid that the config-hash annotation repeats, bound to the node, and it validates again;
//! - it survives JSON: encoded and decoded again, it is the same pod.

use super::common::{
    DecodeError, MAX_MANIFEST_BYTES, Manifest, decode_failure, decode_manifest, prepare_static_pod,
    validation_failures,
};
use super::http::{HttpSourceError, pods_from_body};
use super::validation::{MAX_REPORTED_ERRORS, validate_pod};
use super::{CONFIG_HASH_ANNOTATION, FILE_SOURCE, ManifestError};
use k8s_openapi::api::core::v1::Pod;

const NODE: &str = "fuzz-node";
const FILE: &str = "/etc/kubernetes/manifests/fuzz.yaml";
const URL: &str = "http://127.0.0.1:8080/pods";

/// How far one input got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The file source accepted it as a pod.
    pub file_pod: bool,
    /// How many pods the http source accepted.
    pub http_pods: usize,
}

/// Runs one fuzz input (see the module doc).
pub fn manifest_decode(data: &[u8]) -> Outcome {
    let mut outcome = Outcome::default();
    // The file source.
    match decode_manifest(data, false) {
        Ok(Manifest::Pod(pod)) => match prepare_static_pod(*pod, FILE_SOURCE, FILE, true, NODE) {
            Ok(pod) => {
                check_ready(&pod);
                outcome.file_pod = true;
            }
            Err(errs) => check_errors(&validation_failures(FILE_SOURCE, FILE, errs)),
        },
        Ok(Manifest::PodList(_)) => panic!("decode_manifest(_, false) gave a PodList"),
        Err(e) => {
            if let DecodeError::TooLarge { .. } = e {
                assert!(data.len() > MAX_MANIFEST_BYTES, "{e}");
            }
            check_errors(&[decode_failure(FILE_SOURCE, FILE, &e)]);
        }
    }
    // The http source.
    match pods_from_body(URL, data, NODE) {
        Ok(pods) => {
            pods.iter().for_each(check_ready);
            outcome.http_pods = pods.len();
        }
        Err(HttpSourceError::Manifest { errors, .. }) => {
            assert!(!errors.is_empty(), "a refused body must say why");
            for e in &errors {
                assert!(!e.reason.contains('\n'), "a multi-line error: {e:?}");
            }
        }
        Err(e) => panic!("pods_from_body failed without a manifest error: {e}"),
    }
    outcome
}

fn check_errors(errors: &[ManifestError]) {
    assert!(!errors.is_empty(), "a refused manifest must say why");
    assert!(
        errors.len() <= MAX_REPORTED_ERRORS + 1,
        "{} errors reported",
        errors.len()
    );
    for e in errors {
        assert!(!e.reason.contains('\n'), "a multi-line error: {e:?}");
    }
}

fn check_ready(pod: &Pod) {
    let node = NODE.to_lowercase();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    assert!(name.ends_with(&format!("-{node}")), "name {name:?}");
    assert!(
        pod.metadata
            .namespace
            .as_deref()
            .is_some_and(|n| !n.is_empty()),
        "no namespace"
    );
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    assert!(!uid.is_empty(), "no uid");
    let hash = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_HASH_ANNOTATION));
    assert_eq!(
        hash.map(String::as_str),
        Some(uid),
        "config hash annotation"
    );
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(NODE),
        "nodeName"
    );
    let again = validate_pod(pod);
    assert!(
        again.is_empty(),
        "a prepared pod no longer validates: {again:?}"
    );
    let json = serde_json::to_vec(pod).unwrap_or_else(|e| panic!("JSON of a valid pod: {e}"));
    match decode_manifest(&json, false) {
        Ok(Manifest::Pod(back)) => assert_eq!(*back, *pod, "the pod changed through JSON"),
        Ok(Manifest::PodList(_)) => panic!("a pod's JSON decoded as a PodList"),
        // The JSON of a pod near the cap can be over it.
        Err(DecodeError::TooLarge { .. }) => {}
        Err(e) => panic!("the JSON of a valid pod does not decode: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every checked-in seed of the `manifest_decode` fuzz target (`fuzz/corpus/`) goes through
    /// the harness, so the seeds and the invariants are checked without cargo-fuzz.
    #[test]
    fn replays_the_fuzz_corpus() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/manifest_decode");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).expect("fuzz/corpus/manifest_decode") {
            let path = entry.expect("corpus entry").path();
            let data = std::fs::read(&path).expect("corpus file");
            let outcome = manifest_decode(&data);
            // The seeds named good-* are static pods both sources accept (a PodList only the
            // http source); bad-* ones are refused; others are fuzzer finds, only replayed.
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let name = name.unwrap_or_default();
            let want = if name == "good-podlist.json" {
                Some(Outcome {
                    file_pod: false,
                    http_pods: 2,
                })
            } else if name.starts_with("good-") {
                Some(Outcome {
                    file_pod: true,
                    http_pods: 1,
                })
            } else if name.starts_with("bad-") {
                Some(Outcome::default())
            } else {
                None
            };
            if let Some(want) = want {
                assert_eq!(outcome, want, "{name}");
            }
            n += 1;
        }
        assert!(n >= 5, "only {n} seeds in {}", dir.display());
    }
}
