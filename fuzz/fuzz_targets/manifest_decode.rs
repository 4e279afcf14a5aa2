//! The static-pod manifest decoder, defaulting and validation, as the file and http sources
//! use them (`kubelet::config::fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = kubelet::config::fuzzing::manifest_decode(data);
});
