//! `util::hash` against golden values printed by the Go kubelet 1.26 code itself (an oracle program built from the
//! vendored Kubernetes 1.26 of openshift/microshift 4.13.0-rc-8 that decodes each manifest as
//! the file source does — `tryDecodeSinglePod`, `applyDefaults` — and prints the static pod
//! UID and each container's `HashContainer`), for the manifests in `testdata/` read from
//! `/tmp/swap-golden/<file>` on node `node1`. Facts, not derived from this code.

use k8s_openapi::api::core::v1::Pod;

use super::common::{Manifest, decode_manifest};
use super::defaults;

const NODE: &str = "node1";

/// (container name, `io.kubernetes.container.hash`).
type Hashes = &'static [(&'static str, &'static str)];

/// (file, contents, static pod UID, hashes).
const GOLDEN: &[(&str, &str, &str, Hashes)] = &[
    (
        "etcd.yaml",
        include_str!("../util/hash/testdata/etcd.yaml"),
        "add56562baf214a912a59e08711cd574",
        &[("etcd", "29c46065")],
    ),
    (
        "kube-apiserver.yaml",
        include_str!("../util/hash/testdata/kube-apiserver.yaml"),
        "12a4da5fff06cfd75ed447d51a37b432",
        &[("kube-apiserver", "62fb7afa")],
    ),
    (
        "kube-controller-manager.yaml",
        include_str!("../util/hash/testdata/kube-controller-manager.yaml"),
        "b6b3b377b8a27a38f52bc96f411257ac",
        &[("kube-controller-manager", "1d6192e9")],
    ),
    (
        "kube-scheduler.yaml",
        include_str!("../util/hash/testdata/kube-scheduler.yaml"),
        "773598f143a12eeaaa9cc76db302cf77",
        &[("kube-scheduler", "9348be62")],
    ),
    (
        "tricky.json",
        include_str!("../util/hash/testdata/tricky.json"),
        "2a81a5ec8c1513a1598cd399d312df6c",
        &[("c", "ffcb5f9f")],
    ),
    (
        "web.yaml",
        include_str!("../util/hash/testdata/web.yaml"),
        "7bc089343e031b0dc8501a756e2dbe2d",
        &[
            ("init", "1d9a5af7"),
            ("nginx", "96f20e0a"),
            ("side", "45bdd8a4"),
        ],
    ),
];

/// The pod as the file source holds it when it computes the UID: decoded and API-defaulted.
fn decoded(text: &str) -> Pod {
    match decode_manifest(text.as_bytes(), false) {
        Ok(Manifest::Pod(p)) => {
            let mut pod = *p;
            defaults::set_defaults_pod(&mut pod);
            pod
        }
        other => panic!("not a pod: {other:?}"),
    }
}

fn location(file: &str) -> String {
    format!("/tmp/swap-golden/{file}")
}

#[test]
fn static_pod_uids_match_the_go_kubelet() {
    let mut wrong = Vec::new();
    for (file, text, uid, _) in GOLDEN {
        let pod = decoded(text);
        if std::env::var_os("SPEW_DUMP").is_some() {
            let _ = std::fs::write(
                format!("/tmp/swap-golden/{file}.ours"),
                crate::util::hash::spew_pod(&pod),
            );
        }
        let got = crate::util::hash::static_pod_uid(&pod, &location(file), true, NODE);
        if got != *uid {
            wrong.push(format!("{file}: got {got}, want {uid}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn container_hashes_match_the_go_kubelet() {
    let mut wrong = Vec::new();
    for (file, text, _, hashes) in GOLDEN {
        let pod = decoded(text);
        let spec = pod.spec.as_ref().expect("defaulted spec");
        let all = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers);
        for c in all {
            let want = hashes
                .iter()
                .find(|(n, _)| *n == c.name)
                .map(|(_, h)| *h)
                .expect("golden hash for every container");
            let got = format!("{:x}", crate::util::hash::hash_container(c));
            if std::env::var_os("SPEW_DUMP").is_some() {
                println!("JSON {} {}", c.name, crate::util::hash::container_json(c));
            }
            if got != want {
                wrong.push(format!("{file}/{}: got {got}, want {want}", c.name));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn fnv32a_and_spew_bytes() {
    // Go: fnv.New32a() over "" and "a".
    assert_eq!(crate::util::hash::fnv32a(b""), 0x811c_9dc5);
    assert_eq!(crate::util::hash::fnv32a(b"a"), 0xe40c_292c);
    assert_eq!(crate::util::hash::spew::bytes(b"{}"), "([]uint8)[123 125]");
}
