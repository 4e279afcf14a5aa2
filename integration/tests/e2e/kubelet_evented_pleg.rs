//! The evented PLEG (`--feature-gates EventedPLEG=true`) end to end: on the embedded dockershim,
//! which serves GetContainerEvents, the kubelet follows the event stream (its generic relist
//! then runs only every 300 s) and a container killed behind its back is restarted through an
//! event; on containerd 1.6, which answers Unimplemented, it falls back to relisting every
//! second and the same restart still happens.

use crate::kubelet_support;

use cri_proto::runtime::v1 as cri;
use integration::require_testbed;
use integration::runtimes::{RuntimeKind, clients};
use kubelet_support::*;

async fn evented(kind: RuntimeKind) {
    let tb = require_testbed!(&format!("kubelet_evented_pleg[{}]", kind.name()));
    let mut k = Kubelet::new(kind, "ev");
    let uid = format!("{}-victim", k.node);
    k.write_manifest(
        "victim.yaml",
        &pod_manifest("victim", &uid, &tb.busybox_image, "sleep 3600", ""),
    );
    k.spawn(&tb, &["--feature-gates".into(), "EventedPLEG=true".into()]);
    let (port, log) = (k.port, k.log.clone());
    let endpoint = k.endpoint(&tb);
    let outcome = tokio::spawn({
        let uid = uid.clone();
        async move {
            let before = wait_for("victim running", &log, || async {
                running_ids(&pod(port, &uid).await?)?.get("main").cloned()
            })
            .await;
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            match kind {
                RuntimeKind::Dockershim => assert!(
                    text.contains("following the runtime's container events"),
                    "the evented PLEG follows dockershim's events"
                ),
                RuntimeKind::Containerd => assert!(
                    text.contains("cannot open the event stream"),
                    "containerd 1.6 has no events: the kubelet says it falls back"
                ),
            }
            let id = before.rsplit("://").next().unwrap_or_default().to_string();
            let (mut rt, _) = clients(&endpoint).await.expect("runtime");
            rt.stop_container(cri::StopContainerRequest {
                container_id: id,
                timeout: 0,
            })
            .await
            .expect("StopContainer behind the kubelet's back");
            wait_for("victim restarted", &log, || async {
                let p = pod(port, &uid).await?;
                let now = running_ids(&p)?.get("main").cloned()?;
                let restarts = p["status"]["containerStatuses"][0]["restartCount"].as_i64()?;
                (now != before && restarts == 1).then_some(())
            })
            .await;
        }
    })
    .await;
    k.shutdown(&tb, &[uid]).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_evented_pleg_containerd() {
    evented(RuntimeKind::Containerd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_evented_pleg_dockershim() {
    evented(RuntimeKind::Dockershim).await;
}
