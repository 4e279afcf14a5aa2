// Shared by the build scripts of `kubelet` and `dockershim` (each `include!`s this file).

/// Link the package's binaries with packed relative relocations (DT_RELR, the GNU linker's
/// `-z pack-relative-relocs`) when that is safe: a native glibc Linux build whose glibc
/// (`getconf GNU_LIBC_VERSION`) is 2.36 or newer, the first that loads such binaries.
///
/// Why: a position-independent executable carries a 24-byte relocation for every pointer in
/// its read-only data, and the loader reads all of them at start-up, so they stay resident:
/// 1.4 MiB of the kubelet's RSS and 0.6 MiB of dockershim's (issue 14). Packed, they are
/// 20 KiB. The binaries stay position-independent (ASLR), only the table's encoding changes.
fn pack_relative_relocations() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let native = var("TARGET") == var("HOST");
    let glibc_linux = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    if native && glibc_linux && glibc_version().is_some_and(|v| v >= (2, 36)) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// The build machine's glibc version, e.g. `(2, 36)` from `glibc 2.36`.
pub(crate) fn glibc_version() -> Option<(u32, u32)> {
    let out = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.trim().strip_prefix("glibc ")?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}
