//! CRI `runtime.v1` protocol types and gRPC plumbing for the kubelet and
//! dockershim. The [`runtime::v1`] module holds the prost messages and tonic
//! clients/servers generated at build time from `proto/api.proto`, which is
//! wire-identical to upstream `k8s.io/cri-api`; [`transport`] carries the
//! unix-socket serve/connect helpers and the 16 MiB message-size defaults; [`authority`] lets
//! every served socket accept the `:authority` Go and grpcio clients send (the socket path);
//! [`activation`] takes listeners from systemd (`fd://`) and sends `sd_notify`.

pub mod activation;
pub mod authority;
pub mod transport;

/// Generated code for the CRI protobuf package `runtime`.
pub mod runtime {
    /// Generated messages, enums, clients and servers of `runtime.v1`.
    /// Servers are built with default stubs: any RPC a service does not
    /// override answers `Unimplemented`.
    #[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
    pub mod v1 {
        tonic::include_proto!("runtime.v1");
    }
}

pub use activation::{ActivationError, FdSelector};
pub use runtime::v1::image_service_client::ImageServiceClient;
pub use runtime::v1::image_service_server::{ImageService, ImageServiceServer};
pub use runtime::v1::runtime_service_client::RuntimeServiceClient;
pub use runtime::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};
pub use transport::{
    MAX_MSG_SIZE, TransportError, bind_unix, connect, image_client, image_server, parse_endpoint,
    runtime_client, runtime_server, serve_activated, serve_unix, serve_with_listener,
};

/// Encoded `google.protobuf.FileDescriptorSet` for `runtime.v1`, produced by
/// the build script. Useful for reflection and for checking the API surface.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/cri_descriptor.bin"));

/// Fully qualified gRPC service name of the runtime service.
pub const RUNTIME_SERVICE_NAME: &str = "runtime.v1.RuntimeService";
/// Fully qualified gRPC service name of the image service.
pub const IMAGE_SERVICE_NAME: &str = "runtime.v1.ImageService";
