//! Build script: parse `proto/api.proto` with protox (pure Rust, no `protoc`)
//! into a FileDescriptorSet, save the encoded set in OUT_DIR for runtime
//! introspection, and generate prost messages plus tonic client and server
//! code from it. Servers get default stubs so unimplemented RPCs answer
//! `Unimplemented`.

use std::error::Error;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn Error>> {
    let proto_dir = PathBuf::from("proto");
    let api = proto_dir.join("api.proto");
    println!("cargo:rerun-if-changed={}", api.display());
    println!("cargo:rerun-if-changed=build.rs");

    let mut compiler = protox::Compiler::new([&proto_dir])?;
    compiler.include_source_info(true).include_imports(true);
    compiler.open_file(&api)?;

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("cri_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(true)
        .generate_default_stubs(true)
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
