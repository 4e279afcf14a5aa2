//! Safe `subPath` mounts (upstream `pkg/volume/util/subpath`, Linux).
//!
//! A container must never get, through a `subPath`, a host path outside its volume — even when
//! another container of the pod (or anyone who can write into the volume) swaps a directory for
//! a symlink between the kubelet's check and the runtime's mount (CVE-2017-1002101,
//! CVE-2021-25741). So, as upstream:
//! - a missing subPath directory is created one component at a time with `mkdirat`/`openat`
//!   and `O_NOFOLLOW` from an opened parent (`safe_make_dir`), never by a path walk that
//!   follows symlinks;
//! - the subPath is resolved once (symlinks pointing inside the volume are allowed, as upstream
//!   allows them: configMap keys are symlinks), checked to be inside the volume, and then opened
//!   component by component with `O_NOFOLLOW` (`safe_open`): a symlink met there was swapped in
//!   after the check and fails the mount;
//! - the runtime is given a bind mount of that open file descriptor (`/proc/self/fd/N`) at
//!   `<pod dir>/volume-subpaths/<volume>/<container>/<mount index>`, so what the container sees
//!   is the very inode that was checked, whatever happens to the path afterwards. The mount is
//!   kept for the container's restarts and removed with the pod directory
//!   (`mount::unmount_pod_dir`).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// The directory under a pod's directory that holds its subPath bind mounts (upstream
/// `containerSubPathDirectoryName`).
pub const VOLUME_SUBPATHS_DIR: &str = "volume-subpaths";

/// Upstream `ExpandContainerVolumeMounts`: `$(VAR)` in a `subPathExpr` becomes the value of
/// the container's variable `VAR`; a variable it does not have, or has empty, is an error
/// naming every such variable, sorted (`missing value for A, B`). `$$` and text that is no
/// reference are kept as [`crate::envvars::expand_with`] keeps them.
pub fn expand_sub_path_expr(
    expr: &str,
    env: &std::collections::HashMap<String, String>,
) -> Result<String, String> {
    let missing = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let expanded = crate::envvars::expand_with(expr, |name| match env.get(name) {
        Some(v) if !v.is_empty() => v.clone(),
        _ => {
            missing.borrow_mut().insert(name.to_string());
            String::new()
        }
    });
    let missing = missing.into_inner();
    if missing.is_empty() {
        Ok(expanded)
    } else {
        Err(format!(
            "missing value for {}",
            missing.into_iter().collect::<Vec<_>>().join(", ")
        ))
    }
}

/// One subPath mount to prepare (upstream `subpath.Subpath`).
pub struct Subpath<'a> {
    /// The index of the mount in the container's `volumeMounts`.
    pub volume_mount_index: usize,
    /// The volume's host path joined with the subPath.
    pub path: &'a Path,
    /// The volume's name.
    pub volume_name: &'a str,
    /// The volume's host path.
    pub volume_path: &'a Path,
    /// The pod's directory.
    pub pod_dir: &'a Path,
    /// The container's name.
    pub container_name: &'a str,
}

fn c_string(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{} contains NUL", p.display()))
}

fn os_error(what: &str, path: &Path) -> String {
    format!(
        "{what} {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    )
}

/// `open(2)` of a path that must not be a symlink, as an `O_PATH` descriptor.
fn open_nofollow(path: &Path) -> Result<OwnedFd, String> {
    let c = c_string(path)?;
    // SAFETY: open(2) with a NUL-terminated path; the result is checked before use.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(os_error("cannot open", path));
    }
    // SAFETY: fd is a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(2)` of one path component below `parent`, not following a symlink there.
fn open_child(parent: &OwnedFd, name: &std::ffi::OsStr, shown: &Path) -> Result<OwnedFd, String> {
    let c =
        CString::new(name.as_bytes()).map_err(|_| format!("{} contains NUL", shown.display()))?;
    // SAFETY: openat(2) with a valid directory descriptor and a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            parent.as_raw_fd(),
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(os_error("cannot open", shown));
    }
    // SAFETY: fd is a descriptor we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if file_type(&fd, shown)? == libc::S_IFLNK {
        return Err(format!("unexpected symlink found {}", shown.display()));
    }
    Ok(fd)
}

/// `fstat(2)` of what `fd` refers to.
fn fstat(fd: &OwnedFd, shown: &Path) -> Result<libc::stat, String> {
    // SAFETY: an all-zero stat is a valid out-parameter for fstat(2).
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat(2) on a descriptor we own, into a stat we own.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(os_error("cannot stat", shown));
    }
    Ok(st)
}

/// The `S_IFMT` bits of what `fd` refers to.
fn file_type(fd: &OwnedFd, shown: &Path) -> Result<libc::mode_t, String> {
    Ok(fstat(fd, shown)?.st_mode & libc::S_IFMT)
}

/// The normal components of `rel` (a path relative to a base), refusing `..`.
fn segments(rel: &Path) -> Result<Vec<&std::ffi::OsStr>, String> {
    rel.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(Ok(s)),
            Component::CurDir => None,
            _ => Some(Err(format!("invalid path component in {}", rel.display()))),
        })
        .collect()
}

/// Opens `path`, which must lie within `base`, one component at a time from `base` without
/// following symlinks (upstream `doSafeOpen`). Both paths are expected with their symlinks
/// already resolved: a symlink found on the way is an error.
pub fn safe_open(path: &Path, base: &Path) -> Result<OwnedFd, String> {
    let rel = path.strip_prefix(base).map_err(|_| {
        format!(
            "path {} is outside of allowed base {}",
            path.display(),
            base.display()
        )
    })?;
    let mut fd = open_nofollow(base)?;
    let mut current = base.to_path_buf();
    for seg in segments(rel)? {
        current.push(seg);
        fd = open_child(&fd, seg, &current)?;
    }
    Ok(fd)
}

/// Creates the directory `base/rel` and whatever of it is missing, inside `base` only, with
/// `perm` (upstream `SafeMakeDir`): the existing part is resolved and checked to be inside the
/// volume, then every missing component is made with `mkdirat` and entered with `openat` and
/// `O_NOFOLLOW`, so a symlink created meanwhile makes this fail instead of leading outside.
pub fn safe_make_dir(rel: &Path, base: &Path, perm: u32) -> Result<(), String> {
    let base = base
        .canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", base.display()))?;
    let segs = segments(rel)?;
    // The longest prefix that exists (following symlinks, as upstream's findExistingPrefix).
    let mut existing = 0;
    while existing < segs.len() {
        let p: PathBuf = segs[..=existing]
            .iter()
            .fold(base.clone(), |p, s| p.join(s));
        if std::fs::symlink_metadata(&p).is_err() {
            break;
        }
        existing += 1;
    }
    let prefix: PathBuf = segs[..existing].iter().fold(base.clone(), |p, s| p.join(s));
    let resolved = prefix
        .canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", prefix.display()))?;
    if !resolved.starts_with(&base) {
        return Err(format!(
            "path {} is outside of allowed base {}",
            resolved.display(),
            base.display()
        ));
    }
    let mut fd = safe_open(&resolved, &base)?;
    let mut current = resolved;
    for seg in &segs[existing..] {
        current.push(seg);
        let c = CString::new(seg.as_bytes())
            .map_err(|_| format!("{} contains NUL", current.display()))?;
        // SAFETY: mkdirat(2) with a valid directory descriptor and a NUL-terminated name.
        let rc = unsafe { libc::mkdirat(fd.as_raw_fd(), c.as_ptr(), perm as libc::mode_t) };
        if rc != 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::AlreadyExists {
            return Err(os_error("cannot create directory", &current));
        }
        fd = open_child(&fd, seg, &current)?;
        if file_type(&fd, &current)? != libc::S_IFDIR {
            return Err(format!("{} is not a directory", current.display()));
        }
    }
    Ok(())
}

/// Bind-mounts `source` (a `/proc/self/fd/N` path) at `target`.
fn bind_mount(source: &Path, target: &Path) -> Result<(), String> {
    let src = c_string(source)?;
    let dst = c_string(target)?;
    // SAFETY: mount(2) with NUL-terminated paths and no data.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "error mounting {}: {}",
            target.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Prepares the host path the runtime mounts for `sp` (upstream `PrepareSafeSubpath`, Linux
/// `doBindSubPath`): resolves and checks the subPath, opens it safely and bind-mounts the open
/// descriptor under the pod's `volume-subpaths` directory; returns that bind mount's path. A
/// mount left by an earlier start of the same container is reused.
pub fn prepare_safe_subpath(sp: &Subpath<'_>) -> Result<PathBuf, String> {
    let volume_path = sp
        .volume_path
        .canonicalize()
        .map_err(|e| format!("error resolving symlinks in {:?}: {e}", sp.volume_path))?;
    let path = sp
        .path
        .canonicalize()
        .map_err(|e| format!("error resolving symlinks in {:?}: {e}", sp.path))?;
    if !path.starts_with(&volume_path) {
        return Err(format!(
            "subpath {:?} not within volume path {:?}",
            path.display().to_string(),
            volume_path.display().to_string()
        ));
    }
    let fd = safe_open(&path, &volume_path)?;
    let target = sp
        .pod_dir
        .join(VOLUME_SUBPATHS_DIR)
        .join(sp.volume_name)
        .join(sp.container_name)
        .join(sp.volume_mount_index.to_string());
    if super::mount::is_mount_point(&target) {
        // Mounted by an earlier start: kept when it still shows the same file (upstream
        // `checkSubPathFileEqual`), replaced when the subPath is another one now (a directory
        // removed and made again: the old mount would show the deleted one).
        let st = fstat(&fd, &path)?;
        if let Ok(md) = std::fs::metadata(&target) {
            use std::os::unix::fs::MetadataExt;
            if md.dev() == st.st_dev && md.ino() == st.st_ino {
                return Ok(target);
            }
        }
        let c = c_string(&target)?;
        // SAFETY: umount2(2) with a NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
            return Err(os_error("error unmounting", &target));
        }
    }
    let create = |e: std::io::Error| format!("error creating {}: {e}", target.display());
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(create)?;
    }
    if file_type(&fd, &path)? == libc::S_IFDIR {
        match std::fs::create_dir(&target) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(create(e)),
            _ => {}
        }
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&target)
            .map_err(create)?;
    }
    let source = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    bind_mount(&source, &target)?;
    tracing::debug!(subpath = %path.display(), target = %target.display(), "bind-mounted subPath");
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream `TestExpandVolumeMountsWithSubpath` (helpers_test.go): references become
    /// values; a missing or empty variable is an error naming each such variable, sorted.
    #[test]
    fn sub_path_expr_expands_like_upstream() {
        let env: std::collections::HashMap<String, String> = [
            ("POD_NAME", "foo"),
            ("NS", "bar"),
            ("EMPTY", ""),
            ("ABS", "/abs"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let ok = |e: &str| expand_sub_path_expr(e, &env);
        assert_eq!(ok("$(POD_NAME)").as_deref(), Ok("foo"));
        assert_eq!(ok("$(NS)/$(POD_NAME)/logs").as_deref(), Ok("bar/foo/logs"));
        assert_eq!(ok("plain").as_deref(), Ok("plain"));
        assert_eq!(ok("$$(POD_NAME)").as_deref(), Ok("$(POD_NAME)"));
        assert_eq!(ok("$(ABS)").as_deref(), Ok("/abs"), "checked by the caller");
        assert_eq!(ok("$(NOPE)"), Err("missing value for NOPE".to_string()));
        assert_eq!(
            ok("$(POD_NAME)/$(ZED)/$(EMPTY)/$(NOPE)"),
            Err("missing value for EMPTY, NOPE, ZED".to_string())
        );
    }

    #[test]
    fn safe_make_dir_creates_inside_and_refuses_symlinks_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vol = dir.path().join("vol");
        std::fs::create_dir(&vol).expect("vol");
        safe_make_dir(Path::new("a/b/c"), &vol, 0o750).expect("nested");
        assert!(vol.join("a/b/c").is_dir());
        // Idempotent on what exists.
        safe_make_dir(Path::new("a/b"), &vol, 0o750).expect("again");

        // An existing symlink that stays inside is followed, as upstream.
        std::os::unix::fs::symlink("a", vol.join("inside")).expect("symlink");
        safe_make_dir(Path::new("inside/new"), &vol, 0o750).expect("inside");
        assert!(vol.join("a/new").is_dir());

        // One leading out is refused, and nothing is created outside.
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).expect("outside");
        std::os::unix::fs::symlink(&outside, vol.join("out")).expect("symlink");
        let err = safe_make_dir(Path::new("out/x"), &vol, 0o750).expect_err("escape");
        assert!(err.contains("outside of allowed base"), "{err}");
        assert!(!outside.join("x").exists());
        assert!(safe_make_dir(Path::new("../x"), &vol, 0o750).is_err());
    }

    #[test]
    fn safe_open_refuses_a_symlink_on_the_way() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vol = dir.path().canonicalize().expect("canonical").join("vol");
        std::fs::create_dir_all(vol.join("real/deeper")).expect("dirs");
        safe_open(&vol.join("real/deeper"), &vol).expect("plain directories");
        // What a swap after the check leaves: a component that is now a symlink.
        std::os::unix::fs::symlink("real", vol.join("link")).expect("symlink");
        let err = safe_open(&vol.join("link/deeper"), &vol).expect_err("symlink");
        assert!(err.contains("unexpected symlink found"), "{err}");
        let err = safe_open(Path::new("/etc"), &vol).expect_err("outside");
        assert!(err.contains("outside of allowed base"), "{err}");
    }

    #[test]
    fn prepare_checks_the_resolved_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vol = dir.path().join("vol");
        std::fs::create_dir(&vol).expect("vol");
        std::os::unix::fs::symlink("/", vol.join("escape")).expect("symlink");
        let path = vol.join("escape");
        let pod_dir = dir.path().join("pod");
        let sp = Subpath {
            volume_mount_index: 0,
            path: &path,
            volume_name: "v",
            volume_path: &vol,
            pod_dir: &pod_dir,
            container_name: "c",
        };
        let err = prepare_safe_subpath(&sp).expect_err("escape");
        assert!(err.contains("not within volume path"), "{err}");
        assert!(
            !pod_dir.join(VOLUME_SUBPATHS_DIR).exists(),
            "nothing prepared"
        );
    }

    /// The bind mount itself needs CAP_SYS_ADMIN (the test bed runs as root).
    #[test]
    fn prepare_bind_mounts_the_checked_directory() {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED prepare_bind_mounts_the_checked_directory: needs root to mount");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let vol = dir.path().join("vol");
        std::fs::create_dir_all(vol.join("sub")).expect("sub");
        std::fs::write(vol.join("sub/file"), "x").expect("file");
        let path = vol.join("sub");
        let pod_dir = dir.path().join("pod");
        let sp = Subpath {
            volume_mount_index: 3,
            path: &path,
            volume_name: "v",
            volume_path: &vol,
            pod_dir: &pod_dir,
            container_name: "c",
        };
        let target = prepare_safe_subpath(&sp).expect("prepared");
        assert_eq!(target, pod_dir.join("volume-subpaths/v/c/3"));
        assert!(super::super::mount::is_mount_point(&target));
        // Prepared again (the container restarts): the existing mount is reused.
        assert_eq!(prepare_safe_subpath(&sp).expect("again"), target);
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let here = target.display().to_string();
        assert_eq!(
            mounts
                .lines()
                .filter(|l| l.split(' ').nth(4) == Some(here.as_str()))
                .count(),
            1
        );
        // The mount pins the directory: swapping the path for a symlink changes nothing.
        std::fs::rename(vol.join("sub"), vol.join("moved")).expect("move");
        std::os::unix::fs::symlink("/", vol.join("sub")).expect("symlink");
        assert_eq!(
            std::fs::read_to_string(target.join("file")).expect("read"),
            "x"
        );
        // The directory removed and made again: the mount is replaced by one of the new one.
        std::fs::remove_file(vol.join("sub")).expect("unlink");
        std::fs::create_dir(vol.join("sub")).expect("again");
        std::fs::write(vol.join("sub/file"), "new").expect("file");
        assert_eq!(prepare_safe_subpath(&sp).expect("replaced"), target);
        assert_eq!(
            std::fs::read_to_string(target.join("file")).expect("read"),
            "new"
        );
        std::fs::remove_dir_all(vol.join("sub")).expect("remove");
        std::os::unix::fs::symlink("/", vol.join("sub")).expect("symlink");
        // Once the path leads out, it is refused even though a mount exists.
        let err = prepare_safe_subpath(&sp).expect_err("the path is a symlink out now");
        assert!(err.contains("not within volume path"), "{err}");
        super::super::mount::unmount_pod_dir(&pod_dir);
        assert!(!super::super::mount::is_mount_point(&target));
    }
}
