//! Checks the compiled `runtime.v1` descriptor against the upstream CRI
//! method list (k8s.io/cri-api, kubernetes/kubernetes@0268656a), and spot-checks
//! field numbers that are easy to get wrong.

use cri_proto::FILE_DESCRIPTOR_SET;
use prost::Message;
use prost_types::{FileDescriptorProto, FileDescriptorSet};

/// (method, input, output, server_streaming) in upstream order.
const RUNTIME_METHODS: &[(&str, &str, &str, bool)] = &[
    ("Version", "VersionRequest", "VersionResponse", false),
    (
        "RunPodSandbox",
        "RunPodSandboxRequest",
        "RunPodSandboxResponse",
        false,
    ),
    (
        "StopPodSandbox",
        "StopPodSandboxRequest",
        "StopPodSandboxResponse",
        false,
    ),
    (
        "RemovePodSandbox",
        "RemovePodSandboxRequest",
        "RemovePodSandboxResponse",
        false,
    ),
    (
        "PodSandboxStatus",
        "PodSandboxStatusRequest",
        "PodSandboxStatusResponse",
        false,
    ),
    (
        "ListPodSandbox",
        "ListPodSandboxRequest",
        "ListPodSandboxResponse",
        false,
    ),
    (
        "StreamPodSandboxes",
        "StreamPodSandboxesRequest",
        "StreamPodSandboxesResponse",
        true,
    ),
    (
        "CreateContainer",
        "CreateContainerRequest",
        "CreateContainerResponse",
        false,
    ),
    (
        "StartContainer",
        "StartContainerRequest",
        "StartContainerResponse",
        false,
    ),
    (
        "StopContainer",
        "StopContainerRequest",
        "StopContainerResponse",
        false,
    ),
    (
        "RemoveContainer",
        "RemoveContainerRequest",
        "RemoveContainerResponse",
        false,
    ),
    (
        "ListContainers",
        "ListContainersRequest",
        "ListContainersResponse",
        false,
    ),
    (
        "StreamContainers",
        "StreamContainersRequest",
        "StreamContainersResponse",
        true,
    ),
    (
        "ContainerStatus",
        "ContainerStatusRequest",
        "ContainerStatusResponse",
        false,
    ),
    (
        "UpdateContainerResources",
        "UpdateContainerResourcesRequest",
        "UpdateContainerResourcesResponse",
        false,
    ),
    (
        "ReopenContainerLog",
        "ReopenContainerLogRequest",
        "ReopenContainerLogResponse",
        false,
    ),
    ("ExecSync", "ExecSyncRequest", "ExecSyncResponse", false),
    ("Exec", "ExecRequest", "ExecResponse", false),
    ("Attach", "AttachRequest", "AttachResponse", false),
    (
        "PortForward",
        "PortForwardRequest",
        "PortForwardResponse",
        false,
    ),
    (
        "ContainerStats",
        "ContainerStatsRequest",
        "ContainerStatsResponse",
        false,
    ),
    (
        "ListContainerStats",
        "ListContainerStatsRequest",
        "ListContainerStatsResponse",
        false,
    ),
    (
        "StreamContainerStats",
        "StreamContainerStatsRequest",
        "StreamContainerStatsResponse",
        true,
    ),
    (
        "PodSandboxStats",
        "PodSandboxStatsRequest",
        "PodSandboxStatsResponse",
        false,
    ),
    (
        "ListPodSandboxStats",
        "ListPodSandboxStatsRequest",
        "ListPodSandboxStatsResponse",
        false,
    ),
    (
        "StreamPodSandboxStats",
        "StreamPodSandboxStatsRequest",
        "StreamPodSandboxStatsResponse",
        true,
    ),
    (
        "UpdateRuntimeConfig",
        "UpdateRuntimeConfigRequest",
        "UpdateRuntimeConfigResponse",
        false,
    ),
    ("Status", "StatusRequest", "StatusResponse", false),
    (
        "CheckpointContainer",
        "CheckpointContainerRequest",
        "CheckpointContainerResponse",
        false,
    ),
    (
        "GetContainerEvents",
        "GetEventsRequest",
        "ContainerEventResponse",
        true,
    ),
    (
        "ListMetricDescriptors",
        "ListMetricDescriptorsRequest",
        "ListMetricDescriptorsResponse",
        false,
    ),
    (
        "ListPodSandboxMetrics",
        "ListPodSandboxMetricsRequest",
        "ListPodSandboxMetricsResponse",
        false,
    ),
    (
        "StreamPodSandboxMetrics",
        "StreamPodSandboxMetricsRequest",
        "StreamPodSandboxMetricsResponse",
        true,
    ),
    (
        "RuntimeConfig",
        "RuntimeConfigRequest",
        "RuntimeConfigResponse",
        false,
    ),
    (
        "UpdatePodSandboxResources",
        "UpdatePodSandboxResourcesRequest",
        "UpdatePodSandboxResourcesResponse",
        false,
    ),
];

const IMAGE_METHODS: &[(&str, &str, &str, bool)] = &[
    (
        "ListImages",
        "ListImagesRequest",
        "ListImagesResponse",
        false,
    ),
    (
        "StreamImages",
        "StreamImagesRequest",
        "StreamImagesResponse",
        true,
    ),
    (
        "ImageStatus",
        "ImageStatusRequest",
        "ImageStatusResponse",
        false,
    ),
    ("PullImage", "PullImageRequest", "PullImageResponse", false),
    (
        "RemoveImage",
        "RemoveImageRequest",
        "RemoveImageResponse",
        false,
    ),
    (
        "ImageFsInfo",
        "ImageFsInfoRequest",
        "ImageFsInfoResponse",
        false,
    ),
];

fn api_file() -> FileDescriptorProto {
    let set = FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).expect("descriptor set decodes");
    set.file
        .into_iter()
        .find(|f| f.package() == "runtime.v1")
        .expect("runtime.v1 file present")
}

fn methods_of(file: &FileDescriptorProto, service: &str) -> Vec<(String, String, String, bool)> {
    let svc = file
        .service
        .iter()
        .find(|s| s.name() == service)
        .unwrap_or_else(|| panic!("service {service} missing"));
    svc.method
        .iter()
        .map(|m| {
            assert!(
                !m.client_streaming(),
                "{} must not be client streaming",
                m.name()
            );
            (
                m.name().to_string(),
                m.input_type()
                    .trim_start_matches(".runtime.v1.")
                    .to_string(),
                m.output_type()
                    .trim_start_matches(".runtime.v1.")
                    .to_string(),
                m.server_streaming(),
            )
        })
        .collect()
}

fn expected(list: &[(&str, &str, &str, bool)]) -> Vec<(String, String, String, bool)> {
    list.iter()
        .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), *d))
        .collect()
}

#[test]
fn services_match_upstream() {
    let file = api_file();
    let names: Vec<&str> = file.service.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["RuntimeService", "ImageService"]);
    assert_eq!(
        methods_of(&file, "RuntimeService"),
        expected(RUNTIME_METHODS)
    );
    assert_eq!(methods_of(&file, "ImageService"), expected(IMAGE_METHODS));
    assert_eq!(cri_proto::RUNTIME_SERVICE_NAME, "runtime.v1.RuntimeService");
    assert_eq!(cri_proto::IMAGE_SERVICE_NAME, "runtime.v1.ImageService");
}

#[test]
fn generated_server_names_match() {
    use tonic::server::NamedService;
    struct Dummy;
    impl cri_proto::RuntimeService for Dummy {}
    impl cri_proto::ImageService for Dummy {}
    assert_eq!(
        <cri_proto::RuntimeServiceServer<Dummy> as NamedService>::NAME,
        "runtime.v1.RuntimeService"
    );
    assert_eq!(
        <cri_proto::ImageServiceServer<Dummy> as NamedService>::NAME,
        "runtime.v1.ImageService"
    );
}

fn field_numbers(file: &FileDescriptorProto, message: &str) -> Vec<(String, i32)> {
    let msg = file
        .message_type
        .iter()
        .find(|m| m.name() == message)
        .unwrap_or_else(|| panic!("message {message} missing"));
    let mut v: Vec<(String, i32)> = msg
        .field
        .iter()
        .map(|f| (f.name().to_string(), f.number()))
        .collect();
    v.sort_by_key(|(_, n)| *n);
    v
}

fn fields(list: &[(&str, i32)]) -> Vec<(String, i32)> {
    let mut v: Vec<(String, i32)> = list.iter().map(|(n, i)| (n.to_string(), *i)).collect();
    v.sort_by_key(|(_, n)| *n);
    v
}

#[test]
fn tricky_field_numbers_match_upstream() {
    let file = api_file();
    assert_eq!(
        field_numbers(&file, "LinuxSandboxSecurityContext"),
        fields(&[
            ("namespace_options", 1),
            ("selinux_options", 2),
            ("run_as_user", 3),
            ("readonly_rootfs", 4),
            ("supplemental_groups", 5),
            ("privileged", 6),
            ("seccomp_profile_path", 7),
            ("run_as_group", 8),
            ("seccomp", 9),
            ("apparmor", 10),
            ("supplemental_groups_policy", 11),
        ])
    );
    assert_eq!(
        field_numbers(&file, "LinuxContainerSecurityContext"),
        fields(&[
            ("capabilities", 1),
            ("privileged", 2),
            ("namespace_options", 3),
            ("selinux_options", 4),
            ("run_as_user", 5),
            ("run_as_username", 6),
            ("readonly_rootfs", 7),
            ("supplemental_groups", 8),
            ("apparmor_profile", 9),
            ("seccomp_profile_path", 10),
            ("no_new_privs", 11),
            ("run_as_group", 12),
            ("masked_paths", 13),
            ("readonly_paths", 14),
            ("seccomp", 15),
            ("apparmor", 16),
            ("supplemental_groups_policy", 17),
        ])
    );
    assert_eq!(
        field_numbers(&file, "ImageSpec"),
        fields(&[
            ("image", 1),
            ("annotations", 2),
            ("user_specified_image", 18),
            ("runtime_handler", 19),
            ("image_ref", 20),
        ])
    );
    assert_eq!(field_numbers(&file, "Namespace"), fields(&[("options", 2)]));
    assert_eq!(
        field_numbers(&file, "PsiData"),
        fields(&[("Total", 1), ("Avg10", 2), ("Avg60", 3), ("Avg300", 4)])
    );
}

#[test]
fn enum_values_on_the_wire() {
    use cri_proto::runtime::v1::{
        CgroupDriver, ContainerConfig, ContainerEventType, ContainerState, NamespaceMode, Signal,
        security_profile::ProfileType,
    };
    assert_eq!(Signal::Sigrtmax as i32, 65);
    assert_eq!(Signal::Sigterm as i32, 23);
    assert_eq!(Signal::Sigkill as i32, 13);
    assert_eq!(NamespaceMode::Target as i32, 3);
    assert_eq!(ContainerState::ContainerUnknown as i32, 3);
    assert_eq!(ContainerEventType::ContainerDeletedEvent as i32, 3);
    assert_eq!(CgroupDriver::Cgroupfs as i32, 1);
    assert_eq!(ProfileType::Localhost as i32, 2);
    assert_eq!(
        Signal::from_str_name("SIGRTMAXMINUS1"),
        Some(Signal::Sigrtmaxminus1)
    );

    // stop_signal is field 18, varint: key = 18 << 3 = 144 = 0x90 0x01.
    let cfg = ContainerConfig {
        stop_signal: Signal::Sigterm as i32,
        ..Default::default()
    };
    assert_eq!(cfg.encode_to_vec(), vec![0x90, 0x01, 23]);
}
