//! How the workspace's binaries are linked: with packed relative relocations (DT_RELR) where
//! the build machine's glibc loads them (issue 14: 1.4 MiB of the kubelet's RSS were its
//! relocation table).

use std::process::Command;

use integration::runtimes::workspace_binary;

#[allow(dead_code)]
mod build_script {
    include!("../../../common/build/pack_relocs.rs");
}

#[test]
fn relative_relocations_are_packed_where_glibc_loads_them() {
    let packable = build_script::glibc_version().is_some_and(|v| v >= (2, 36));
    for name in ["kubelet", "dockershim"] {
        let bin = workspace_binary(name).expect("binary");
        let out = Command::new("readelf")
            .arg("-d")
            .arg(&bin)
            .output()
            .expect("readelf (binutils) runs");
        assert!(out.status.success(), "readelf -d {}", bin.display());
        let dynamic = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            dynamic.contains("(RELR)"),
            packable,
            "{name}: DT_RELR present = {}, glibc {:?}",
            dynamic.contains("(RELR)"),
            build_script::glibc_version()
        );
        if packable {
            // The unpacked table that remains is the few relocations against symbols.
            let sections = Command::new("readelf")
                .args(["-SW"])
                .arg(&bin)
                .output()
                .expect("readelf -S");
            let text = String::from_utf8_lossy(&sections.stdout);
            let rela_size = text
                .lines()
                .find_map(|l| {
                    // `[ 9] .rela.dyn RELA <address> <offset> <size> …`
                    let fields: Vec<&str> = l.split_whitespace().collect();
                    let at = fields.iter().position(|f| *f == ".rela.dyn")?;
                    u64::from_str_radix(fields.get(at + 4)?, 16).ok()
                })
                .expect(".rela.dyn size");
            assert!(
                rela_size < 64 * 1024,
                "{name}: .rela.dyn is {rela_size} bytes"
            );
        }
    }
}
