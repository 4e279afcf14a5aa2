//! Helpers for unit tests of the managers above the runtime manager, on the fake runtime.

use super::KubeGenericRuntimeManager;

/// A pod of node `node1` running `image` on the fake runtime.
pub(crate) async fn run_pod(
    runtime: &KubeGenericRuntimeManager,
    uid: &str,
    image: &str,
    policy: &str,
) -> k8s_openapi::api::core::v1::Pod {
    use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
    let pod = Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(format!("{uid}-node1")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(policy.into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some(image.into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let status = runtime
        .get_pod_status(uid, &format!("{uid}-node1"), "default")
        .await
        .expect("status");
    let r = runtime
        .sync_pod(
            &pod,
            &status,
            &crate::apiobjects::ApiObjects::standalone("default"),
            &mut crate::kuberuntime::backoff::Backoff::default(),
        )
        .await;
    assert!(r.is_ok(), "{:?}", r.errors);
    pod
}
