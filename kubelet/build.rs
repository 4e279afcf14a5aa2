//! Link options for the `kubelet` binary (see `common/build/pack_relocs.rs`).

include!("../common/build/pack_relocs.rs");

fn main() {
    println!("cargo:rerun-if-changed=../common/build/pack_relocs.rs");
    pack_relative_relocations();
}
