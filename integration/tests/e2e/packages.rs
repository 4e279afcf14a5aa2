//! The Debian packages `dockershim` and `kubelet` (`hack/build-debs.sh`, cargo-deb), as an
//! operator gets them:
//! - built by the script from the binaries this test run uses, they install together with
//!   `dpkg -i`; `/usr/bin/kubelet --version` answers `Kubernetes v1.26.1`, `/usr/bin/dockershim`
//!   and cri-dockerd's path `/usr/bin/cri-dockerd` (a link to it) answer `dockershim <version>`;
//! - the units (`cri-docker.socket`, `cri-docker.service`, `kubelet.service` with kubeadm's
//!   drop-in `kubelet.service.d/10-kubeadm.conf`) are the repository's files and pass
//!   `systemd-analyze verify` (which needs no running systemd); `/etc/default/kubelet` is a
//!   conffile; the maintainer scripts enabled the units (deb-systemd-helper's links) and started
//!   nothing where systemd does not run;
//! - the packages stand in for cri-dockerd's (Conflicts/Replaces/Provides) and answer kubeadm's
//!   `Depends: kubelet (>= 1.19.0)` with the Kubernetes version the kubelet implements;
//! - lintian reports no error (its warnings are printed);
//! - `dpkg --purge` leaves nothing: no file of either package, no enablement link, no
//!   deb-systemd-helper state. A guard purges them also when a check fails.
//!
//! Needs root and dpkg (skips loudly without them); refuses (skips loudly) on a host where any
//! of the packages' paths or packages of these names already exist, so it never replaces a
//! host's own kubelet. Without the packaging the script is missing and the test fails.
//!
//! Also here, without root: the packaged units are the hand-installed ones of `packaging/`
//! (docs/replace-cri-dockerd.md) with the packaged binaries' paths.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use integration::runtimes::workspace_binary;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A unit file's settings: no comments, no blank lines, the hand-installed binaries' directory
/// (`/usr/local/bin`, docs/replace-cri-dockerd.md) as the package's (`/usr/bin`).
fn settings(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .map(|l| l.replace("/usr/local/bin/", "/usr/bin/"))
        .collect()
}

#[test]
fn packaged_units_are_the_hand_installed_ones_with_the_packaged_binaries() {
    let root = repo_root();
    for (packaged, hand) in [
        (
            "packaging/deb/dockershim/cri-docker.service",
            "packaging/systemd/cri-docker.service",
        ),
        (
            "packaging/deb/dockershim/cri-docker.socket",
            "packaging/systemd/cri-docker.socket",
        ),
        (
            "packaging/deb/kubelet/kubelet.service",
            "packaging/systemd/kubelet.service",
        ),
        (
            "packaging/deb/kubelet/10-kubeadm.conf",
            "packaging/kubeadm/10-kubeadm.conf",
        ),
    ] {
        let packaged_text = read(&root.join(packaged));
        assert_eq!(
            settings(&packaged_text),
            settings(&read(&root.join(hand))),
            "{packaged} must say what {hand} says, with /usr/bin for /usr/local/bin"
        );
        assert!(
            !packaged_text.contains("/usr/local/"),
            "{packaged} names /usr/local"
        );
    }
}

/// Runs `cmd`, stdin closed; the output whatever the status.
fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

/// Runs `cmd` and returns its stdout; panics with both streams on failure.
fn run_ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn required() -> bool {
    std::env::var("CRI_TESTBED_REQUIRED").as_deref() == Ok("1")
}

const PACKAGES: [&str; 2] = ["dockershim", "kubelet"];
/// Packages whose files or place these would take on this host.
const FOREIGN: [&str; 3] = ["cri-dockerd", "kubeadm", "kubernetes-node"];

/// dpkg's status of `pkg`, empty when dpkg knows nothing of it.
fn dpkg_status(pkg: &str) -> String {
    let out = run(Command::new("dpkg-query").args(["-W", "-f", "${Status}", pkg]));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Purges both packages when dropped, unless already purged: the host keeps no trace of the
/// test even when a check fails.
struct PurgeGuard {
    armed: bool,
}

impl Drop for PurgeGuard {
    fn drop(&mut self) {
        if self.armed {
            eprintln!("packages: purging dockershim and kubelet after a failure");
            let _ = Command::new("dpkg")
                .arg("--purge")
                .args(PACKAGES)
                .stdin(Stdio::null())
                .status();
        }
    }
}

/// Paths (files and links, not directories) a .deb installs, as absolute paths.
fn deb_files(deb: &Path) -> Vec<PathBuf> {
    run_ok(Command::new("dpkg-deb").arg("-c").arg(deb))
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| PathBuf::from(p.trim_start_matches('.')))
        .collect()
}

fn deb_field(deb: &Path, field: &str) -> String {
    run_ok(Command::new("dpkg-deb").arg("-f").arg(deb).arg(field))
        .trim()
        .to_string()
}

/// The enablement the postinst scripts make with deb-systemd-helper (also without a running
/// systemd): links in /etc and the helper's state.
const ENABLEMENT: [&str; 6] = [
    "/etc/systemd/system/sockets.target.wants/cri-docker.socket",
    "/etc/systemd/system/multi-user.target.wants/cri-docker.service",
    "/etc/systemd/system/multi-user.target.wants/kubelet.service",
    "/var/lib/systemd/deb-systemd-helper-enabled/cri-docker.socket.dsh-also",
    "/var/lib/systemd/deb-systemd-helper-enabled/cri-docker.service.dsh-also",
    "/var/lib/systemd/deb-systemd-helper-enabled/kubelet.service.dsh-also",
];

/// Processes running one of the installed binaries.
fn processes_of(binaries: &[&str]) -> Vec<String> {
    let mut found = vec![];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        if let Ok(exe) = std::fs::read_link(entry.path().join("exe")) {
            let exe = exe
                .to_string_lossy()
                .trim_end_matches(" (deleted)")
                .to_string();
            if binaries.contains(&exe.as_str()) {
                found.push(format!("pid {} {exe}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// `systemd-analyze verify` on a known-good unit: whether it can verify on this host.
fn systemd_analyze_works(dir: &Path) -> Result<(), String> {
    if !have("systemd-analyze") {
        return Err("systemd-analyze is not installed".into());
    }
    let unit = dir.join("kubelet-rs-probe.service");
    std::fs::write(&unit, "[Service]\nType=oneshot\nExecStart=/bin/true\n")
        .map_err(|e| e.to_string())?;
    let out = run(Command::new("systemd-analyze").arg("verify").arg(&unit));
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "systemd-analyze verify fails on a trivial unit: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[test]
fn debian_packages_install_verify_lint_and_purge_cleanly() {
    const TEST: &str = "packages::debian_packages_install_verify_lint_and_purge_cleanly";
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(!required(), "{TEST}: required but this is not root");
        eprintln!("SKIPPED {TEST}: installing packages needs root");
        return;
    }
    if !have("dpkg") || !have("dpkg-deb") || !have("dpkg-query") {
        eprintln!("SKIPPED {TEST}: dpkg is not installed (not a Debian-based host)");
        return;
    }
    // One run at a time on a host (several checkouts may share it).
    let lock_path = Path::new("/run/lock/kubelet-rs-packages-test.lock");
    let lock = std::fs::File::create(lock_path).expect("lock file");
    // SAFETY: flock on a descriptor this function owns.
    assert_eq!(
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) },
        0,
        "flock {}",
        lock_path.display()
    );

    // The packages of the binaries this run uses: target/<profile>/{kubelet,dockershim}.
    let kubelet_bin = workspace_binary("kubelet").expect("the kubelet binary");
    workspace_binary("dockershim").expect("the dockershim binary");
    let profile_dir = kubelet_bin.parent().expect("profile dir");
    let target_dir = profile_dir.parent().expect("target dir");
    let profile = match profile_dir.file_name().and_then(OsStr::to_str) {
        Some("debug") => "dev",
        Some(other) => other,
        None => panic!("profile of {}", kubelet_bin.display()),
    };
    let work = tempfile::tempdir().expect("tempdir");
    let out_dir = work.path().join("debs");
    let built = run_ok(
        Command::new("bash")
            .arg(repo_root().join("hack/build-debs.sh"))
            .args(["--profile", profile, "--no-build", "--fast"])
            .env("CARGO_TARGET_DIR", target_dir)
            .env("DEB_OUTPUT_DIR", &out_dir),
    );
    let debs: Vec<PathBuf> = built.lines().map(PathBuf::from).collect();
    assert_eq!(debs.len(), 2, "two .deb files: {built}");
    let (shim_deb, kubelet_deb) = (&debs[0], &debs[1]);
    assert_eq!(deb_field(shim_deb, "Package"), "dockershim");
    assert_eq!(deb_field(kubelet_deb, "Package"), "kubelet");
    let version = env!("CARGO_PKG_VERSION");
    for deb in &debs {
        assert_eq!(deb_field(deb, "Version"), format!("{version}-1"));
    }

    // What the packages say of other packages.
    for field in ["Conflicts", "Replaces", "Provides"] {
        assert_eq!(
            deb_field(shim_deb, field),
            "cri-dockerd",
            "dockershim {field}"
        );
    }
    assert_eq!(
        deb_field(kubelet_deb, "Provides"),
        format!("kubelet (= {})", &kubelet::version::KUBERNETES_VERSION[1..])
    );
    assert_eq!(deb_field(kubelet_deb, "Replaces"), "kubeadm");
    assert!(
        deb_field(kubelet_deb, "Depends").contains("dockershim | cri-dockerd"),
        "kubelet.service requires cri-docker.socket"
    );

    // lintian: no error; warnings are listed.
    if have("lintian") {
        let out = run(Command::new("lintian")
            .args(["--fail-on", "error"])
            .args(&debs));
        let report = String::from_utf8_lossy(&out.stdout);
        eprintln!("packages: lintian:\n{report}");
        assert!(
            out.status.success() && !report.lines().any(|l| l.starts_with("E:")),
            "lintian reports errors ({}):\n{report}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        assert!(
            !required(),
            "{TEST}: lintian is missing (hack/test.sh installs it)"
        );
        eprintln!("SKIPPED (lintian check of) {TEST}: lintian is not installed");
    }

    // Refuse to touch a host that has any of this already.
    let mut files: Vec<PathBuf> = debs.iter().flat_map(|d| deb_files(d)).collect();
    files.sort();
    for pkg in PACKAGES.iter().chain(FOREIGN.iter()) {
        let status = dpkg_status(pkg);
        if !status.is_empty() && status != "unknown ok not-installed" {
            eprintln!("SKIPPED {TEST} (install part): package {pkg} is on this host ({status})");
            return;
        }
    }
    let present: Vec<&PathBuf> = files
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .collect();
    if !present.is_empty() {
        eprintln!("SKIPPED {TEST} (install part): these paths exist already: {present:?}");
        return;
    }

    let mut guard = PurgeGuard { armed: true };
    run_ok(Command::new("dpkg").arg("-i").args(&debs));
    for pkg in PACKAGES {
        assert_eq!(dpkg_status(pkg), "install ok installed", "{pkg}");
    }

    // The binaries answer.
    let kubelet_version = run_ok(Command::new("/usr/bin/kubelet").arg("--version"));
    assert_eq!(
        kubelet_version.lines().next(),
        Some(format!("Kubernetes {}", kubelet::version::KUBERNETES_VERSION).as_str()),
        "{kubelet_version}"
    );
    for bin in ["/usr/bin/dockershim", "/usr/bin/cri-dockerd"] {
        let v = run_ok(Command::new(bin).arg("--version"));
        assert!(
            v.starts_with(&format!("dockershim {version}")),
            "{bin} --version: {v}"
        );
    }
    assert_eq!(
        std::fs::read_link("/usr/bin/cri-dockerd").expect("cri-dockerd is a link"),
        Path::new("dockershim")
    );

    // The files: the repository's, with their modes.
    let root = repo_root();
    for (installed, source, mode) in [
        ("/usr/bin/dockershim", None, 0o755),
        ("/usr/bin/kubelet", None, 0o755),
        (
            "/usr/lib/systemd/system/cri-docker.socket",
            Some("packaging/systemd/cri-docker.socket"),
            0o644,
        ),
        (
            "/usr/lib/systemd/system/cri-docker.service",
            Some("packaging/deb/dockershim/cri-docker.service"),
            0o644,
        ),
        (
            "/usr/lib/systemd/system/kubelet.service",
            Some("packaging/deb/kubelet/kubelet.service"),
            0o644,
        ),
        (
            "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
            Some("packaging/deb/kubelet/10-kubeadm.conf"),
            0o644,
        ),
        (
            "/etc/default/kubelet",
            Some("packaging/deb/kubelet/default"),
            0o644,
        ),
    ] {
        let meta = std::fs::metadata(installed).unwrap_or_else(|e| panic!("{installed}: {e}"));
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777,
            mode,
            "{installed}"
        );
        if let Some(source) = source {
            assert_eq!(
                read(Path::new(installed)),
                read(&root.join(source)),
                "{installed}"
            );
        }
    }
    assert!(
        read(Path::new("/etc/default/kubelet"))
            .lines()
            .any(|l| l == "KUBELET_EXTRA_ARGS="),
        "/etc/default/kubelet sets KUBELET_EXTRA_ARGS"
    );
    let conffiles =
        run_ok(Command::new("dpkg-query").args(["-W", "-f", "${Conffiles}", "kubelet"]));
    assert!(
        conffiles.contains("/etc/default/kubelet"),
        "conffiles: {conffiles}"
    );

    // The units: enabled by the postinst (deb-systemd-helper), valid.
    for link in ENABLEMENT {
        assert!(
            std::fs::symlink_metadata(link).is_ok(),
            "{link}: the postinst enables the units"
        );
    }
    let units = [
        "/usr/lib/systemd/system/cri-docker.socket",
        "/usr/lib/systemd/system/cri-docker.service",
        "/usr/lib/systemd/system/kubelet.service",
    ];
    match systemd_analyze_works(work.path()) {
        Ok(()) => {
            // kubelet.service is verified with its drop-in (10-kubeadm.conf): its ExecStart.
            let out = run(Command::new("systemd-analyze").arg("verify").args(units));
            let stderr = String::from_utf8_lossy(&out.stderr);
            let ours: Vec<&str> = stderr
                .lines()
                .filter(|l| {
                    ["cri-docker", "kubelet", "10-kubeadm"]
                        .iter()
                        .any(|n| l.contains(n))
                })
                .collect();
            assert!(
                out.status.success() && ours.is_empty(),
                "systemd-analyze verify {units:?}: {}\n{stderr}",
                out.status
            );
        }
        Err(why) => eprintln!(
            "WARNING: {TEST}: NOT CHECKED: the installed units' syntax (systemd-analyze verify): {why}"
        ),
    }
    let binaries = ["/usr/bin/kubelet", "/usr/bin/dockershim"];
    if Path::new("/run/systemd/system").is_dir() {
        // A host where systemd runs: the postinst started the runtime's socket.
        let active = run(Command::new("systemctl").args(["is-active", "cri-docker.socket"]));
        assert_eq!(
            String::from_utf8_lossy(&active.stdout).trim(),
            "active",
            "cri-docker.socket after installation"
        );
    } else {
        assert_eq!(
            processes_of(&binaries),
            Vec::<String>::new(),
            "nothing is started without systemd"
        );
    }

    // Purge: nothing is left.
    run_ok(Command::new("dpkg").arg("--purge").args(PACKAGES));
    guard.armed = false;
    for pkg in PACKAGES {
        let status = dpkg_status(pkg);
        assert!(
            status.is_empty() || status == "unknown ok not-installed",
            "{pkg} after purge: {status}"
        );
    }
    let left: BTreeSet<String> = files
        .iter()
        .map(|p| p.display().to_string())
        .chain(ENABLEMENT.iter().map(|s| s.to_string()))
        .chain(["/usr/lib/systemd/system/kubelet.service.d".to_string()])
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .collect();
    assert!(left.is_empty(), "left after purge: {left:?}");
    assert_eq!(
        processes_of(&binaries),
        Vec::<String>::new(),
        "no process of the packages after purge"
    );
}
