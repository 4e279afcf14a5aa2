//! dockershim on real Docker: error codes and idempotency of the CRI calls, and the
//! runtime-level RPCs (Version, Status, RuntimeConfig, UpdateRuntimeConfig).

use crate::dockershim_support;

use std::time::Duration;

use cri_proto::runtime::v1 as cri;
use dockershim_support::with_dockershim;
use tonic::Code;

const MISSING: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_errors_and_idempotency() {
    with_dockershim(
        "dockershim_errors",
        Duration::from_secs(120),
        |mut ctx| async move {
            // Stop/Remove of what does not exist succeed.
            ctx.rt
                .stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: MISSING.into(),
                })
                .await
                .expect("StopPodSandbox of a missing sandbox");
            ctx.rt
                .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                    pod_sandbox_id: MISSING.into(),
                })
                .await
                .expect("RemovePodSandbox of a missing sandbox");
            ctx.rt
                .stop_container(cri::StopContainerRequest {
                    container_id: MISSING.into(),
                    timeout: 0,
                })
                .await
                .expect("StopContainer of a missing container");
            ctx.rt
                .remove_container(cri::RemoveContainerRequest {
                    container_id: MISSING.into(),
                })
                .await
                .expect("RemoveContainer of a missing container");

            // Status of unknown ids: NotFound.
            let e = ctx
                .rt
                .container_status(cri::ContainerStatusRequest {
                    container_id: MISSING.into(),
                    verbose: false,
                })
                .await
                .expect_err("ContainerStatus of a missing container");
            assert_eq!(e.code(), Code::NotFound, "{e:?}");
            let e = ctx
                .rt
                .pod_sandbox_status(cri::PodSandboxStatusRequest {
                    pod_sandbox_id: MISSING.into(),
                    verbose: false,
                })
                .await
                .expect_err("PodSandboxStatus of a missing sandbox");
            assert_eq!(e.code(), Code::NotFound, "{e:?}");

            // Missing configs: InvalidArgument.
            let e = ctx
                .rt
                .run_pod_sandbox(cri::RunPodSandboxRequest {
                    config: None,
                    runtime_handler: String::new(),
                })
                .await
                .expect_err("RunPodSandbox without config");
            assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

            let sconfig = ctx.sandbox_config("errors");
            let sid = ctx.run_sandbox(&sconfig).await;
            let mut cconfig =
                integration::fixtures::busybox_container("noimage", &ctx.tb.busybox_image, "true");
            cconfig.image = None;
            let e = ctx
                .create(&sid, &sconfig, &cconfig)
                .await
                .expect_err("CreateContainer without image");
            assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
            cconfig.image = Some(cri::ImageSpec::default());
            let e = ctx
                .create(&sid, &sconfig, &cconfig)
                .await
                .expect_err("CreateContainer with an empty image");
            assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

            // UpdatePodSandboxResources: accepted for a live sandbox (best effort, as
            // upstream), NotFound for an unknown one.
            let resources = Some(cri::LinuxContainerResources {
                cpu_shares: 512,
                memory_limit_in_bytes: 64 << 20,
                ..Default::default()
            });
            ctx.rt
                .update_pod_sandbox_resources(cri::UpdatePodSandboxResourcesRequest {
                    pod_sandbox_id: sid.clone(),
                    overhead: None,
                    resources: resources.clone(),
                })
                .await
                .expect("UpdatePodSandboxResources");
            let e = ctx
                .rt
                .update_pod_sandbox_resources(cri::UpdatePodSandboxResourcesRequest {
                    pod_sandbox_id: MISSING.into(),
                    overhead: None,
                    resources,
                })
                .await
                .expect_err("UpdatePodSandboxResources of a missing sandbox");
            assert_eq!(e.code(), Code::NotFound, "{e:?}");

            // Stopping and removing twice is fine.
            ctx.stop_remove_sandbox(&sid).await;
            ctx.stop_remove_sandbox(&sid).await;
            let e = ctx
                .rt
                .pod_sandbox_status(cri::PodSandboxStatusRequest {
                    pod_sandbox_id: sid.clone(),
                    verbose: false,
                })
                .await
                .expect_err("status of a removed sandbox");
            assert_eq!(e.code(), Code::NotFound, "{e:?}");

            // Images: removing a missing one succeeds; its status is Ok with no image.
            let missing = format!("{}/no-such-image:never", ctx.tb.registry);
            ctx.img
                .remove_image(cri::RemoveImageRequest {
                    image: Some(cri::ImageSpec {
                        image: missing.clone(),
                        ..Default::default()
                    }),
                })
                .await
                .expect("RemoveImage of a missing image");
            let st = ctx
                .img
                .image_status(cri::ImageStatusRequest {
                    image: Some(cri::ImageSpec {
                        image: missing.clone(),
                        ..Default::default()
                    }),
                    verbose: false,
                })
                .await
                .expect("ImageStatus of a missing image")
                .into_inner();
            assert!(st.image.is_none(), "{st:?}");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockershim_runtime_rpcs() {
    with_dockershim(
        "dockershim_runtime_rpcs",
        Duration::from_secs(60),
        |mut ctx| async move {
            let v = ctx
                .rt
                .version(cri::VersionRequest {
                    version: "v1".into(),
                })
                .await
                .expect("Version")
                .into_inner();
            assert_eq!(v.runtime_name, "docker", "{v:?}");
            assert!(!v.runtime_version.is_empty(), "{v:?}");
            assert_eq!(v.runtime_api_version, "v1", "{v:?}");
            let docker_version = dockershim_support::docker(&ctx.tb)
                .version()
                .await
                .expect("docker version")
                .version
                .unwrap_or_default();
            assert_eq!(v.runtime_version, docker_version);

            let st = ctx
                .rt
                .status(cri::StatusRequest { verbose: true })
                .await
                .expect("Status")
                .into_inner();
            let conds = st.status.expect("status").conditions;
            for want in ["RuntimeReady", "NetworkReady"] {
                let c = conds
                    .iter()
                    .find(|c| c.r#type == want)
                    .unwrap_or_else(|| panic!("{want} missing in {conds:?}"));
                assert!(c.status, "{want}: {c:?}");
            }
            let config: serde_json::Value =
                serde_json::from_str(st.info.get("config").expect("verbose config")).expect("json");
            assert_eq!(config["networkPlugin"], "cni", "{config}");

            let rc = ctx
                .rt
                .runtime_config(cri::RuntimeConfigRequest {})
                .await
                .expect("RuntimeConfig")
                .into_inner();
            let driver = rc.linux.expect("linux runtime config").cgroup_driver;
            let docker_driver = dockershim_support::docker(&ctx.tb)
                .info()
                .await
                .expect("docker info")
                .cgroup_driver
                .map(|d| d.to_string())
                .unwrap_or_default();
            let want = if docker_driver == "systemd" {
                cri::CgroupDriver::Systemd
            } else {
                cri::CgroupDriver::Cgroupfs
            };
            assert_eq!(driver, want as i32, "docker says {docker_driver:?}");

            ctx.rt
                .update_runtime_config(cri::UpdateRuntimeConfigRequest {
                    runtime_config: Some(cri::RuntimeConfig {
                        network_config: Some(cri::NetworkConfig {
                            pod_cidr: "10.89.0.0/16".into(),
                        }),
                    }),
                })
                .await
                .expect("UpdateRuntimeConfig");
            let st = ctx
                .rt
                .status(cri::StatusRequest { verbose: true })
                .await
                .expect("Status")
                .into_inner();
            let config: serde_json::Value =
                serde_json::from_str(st.info.get("config").expect("verbose config")).expect("json");
            assert_eq!(config["podCIDR"], "10.89.0.0/16", "{config}");
        },
    )
    .await;
}
