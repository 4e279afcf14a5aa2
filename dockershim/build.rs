//! Builds the project's pause program (`images/pause/pause.c`) as a static
//! binary that `src/pause_image.rs` embeds into an in-memory image, and sets the `dockershim`
//! binary's link options (see `common/build/pack_relocs.rs`).

use std::env;
use std::path::PathBuf;
use std::process::Command;

include!("../common/build/pack_relocs.rs");

fn main() {
    println!("cargo:rerun-if-changed=../common/build/pack_relocs.rs");
    pack_relative_relocations();
    let src = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"))
        .join("../images/pause/pause.c");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("pause");
    let cc = env::var("CC").unwrap_or_else(|_| "gcc".to_string());
    let status = Command::new(&cc)
        .args(["-static", "-Os", "-s", "-Wall", "-o"])
        .arg(&out)
        .arg(&src)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "{cc} failed to build {} ({s}); static libc (libc6-dev) needed",
            src.display()
        ),
        Err(e) => panic!("cannot run {cc} to build {}: {e}", src.display()),
    }
}
