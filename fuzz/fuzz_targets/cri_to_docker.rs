//! RunPodSandbox and CreateContainer from a protobuf `CreateContainerRequest`, through
//! dockershim's gRPC face on the fake Docker Engine (`dockershim::fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = dockershim::fuzzing::cri_to_docker(data);
});
