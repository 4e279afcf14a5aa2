//! The atomic writer of the configMap, secret, downwardAPI and projected volumes (upstream
//! `pkg/volume/util/atomic_writer.go`, `AtomicWriter.Write`, as in the Go kubelet 1.26).
//!
//! Its job: put a volume's payload (relative path, content, mode) on disk so that a container
//! sees every update of the volume at once, tools that watch `..data` (config reloaders) see
//! one event per update, and the Go kubelet 1.26 and this kubelet can take over each other's
//! volume directories on a running node. The layout is upstream's, byte for byte in names:
//!
//! ```text
//! <target>/..2026_11_28_16_20_14.1234567890/   the payload (upstream newTimestampDir: `..` +
//!                                              UTC time `2006_01_02_15_04_05.` + random
//!                                              digits, as os.MkdirTemp names it), dirs 0755,
//!                                              files with their modes
//! <target>/..data -> ..2026_11_28_16_20_14.1234567890
//! <target>/data-1 -> ..data/data-1             one symlink per first path component
//! <target>/path   -> ..data/path               (for `path/to/data-2`)
//! ```
//!
//! [`write`] follows upstream's steps: validate the payload (`validatePayload`); read `..data`;
//! compare the payload with the current timestamped directory (`shouldWritePayload`: content
//! only) and list its paths the payload no longer has (`pathsToRemove`); when nothing changed,
//! write nothing. Otherwise write the payload into a new timestamped directory
//! (`writePayloadToDir`), apply the caller's permissions (`setPerms`: the pod's fsGroup over the
//! whole volume, upstream `SetVolumeOwnership`), point a symlink `..data_tmp` at it and rename
//! it onto `..data` (the atomic swap), create the user-visible symlinks
//! (`createUserVisibleFiles`), remove the user-visible paths no longer in the payload
//! (`removeUserVisiblePaths`) and the old timestamped directory.
//!
//! Beyond upstream, so that either kubelet can follow the other without stale files:
//! - every user-visible path ends as a symlink `<name> -> ..data/<name>`, also when the payload
//!   did not change: a regular file or directory there (written in place by an earlier version
//!   of this kubelet, which had no `..data`) or a symlink elsewhere is replaced (upstream's
//!   `createUserVisibleFiles` skips a path that exists, so the Go kubelet would keep serving the
//!   stale file after a swap back);
//! - without `..data`, the top-level entries of that earlier layout that the payload no longer
//!   has are removed;
//! - a `..data_tmp` or timestamped directory left by an interrupted write is removed (upstream
//!   fails on the former forever and keeps the latter);
//! - `..data` is trusted only when it names a timestamped directory in the target directory: a
//!   link elsewhere (a container that could write the volume) is replaced, never followed for
//!   removal.
//!
//! A layout the Go kubelet wrote is adopted as it is: same payload, nothing written; a changed
//! payload gets a new timestamped directory and the Go kubelet's one is removed after the swap.

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path};

use super::util::VolumeFile;

/// The symlink to the current timestamped directory (upstream `dataDirName`).
pub(super) const DATA_DIR_NAME: &str = "..data";
/// The symlink renamed onto `..data` (upstream `newDataDirName`).
const NEW_DATA_DIR_NAME: &str = "..data_tmp";
/// A user-visible symlink being put in place of a stale entry (reserved: starts with `..`).
const NEW_LINK_NAME: &str = "..link_tmp";
/// Upstream `maxFileNameLength`.
const MAX_FILE_NAME_LENGTH: usize = 255;
/// Upstream `maxPathLength`.
const MAX_PATH_LENGTH: usize = 4096;
/// The mode of the timestamped directory and the payload's directories.
const DIR_MODE: u32 = 0o755;

/// Upstream `validatePath`: a payload path must be non-empty, relative, without a `..`
/// component, its first component must not start with `..` (reserved for the writer), its
/// names at most 255 bytes and the whole at most 4096.
pub(super) fn validate_path(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err(format!("invalid path: must not be empty: {p:?}"));
    }
    if Path::new(p).is_absolute() {
        return Err(format!("invalid path: must be relative path: {p}"));
    }
    if p.len() > MAX_PATH_LENGTH {
        return Err(format!(
            "invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters"
        ));
    }
    let items: Vec<&str> = p.split('/').collect();
    for item in &items {
        if *item == ".." {
            return Err(format!("invalid path: must not contain '..': {p}"));
        }
        if item.len() > MAX_FILE_NAME_LENGTH {
            return Err(format!(
                "invalid path: filenames must be less than or equal to {MAX_FILE_NAME_LENGTH} characters"
            ));
        }
    }
    if items[0].starts_with("..") && items[0].len() > 2 {
        return Err(format!("invalid path: must not start with '..': {p}"));
    }
    Ok(())
}

/// Upstream `validatePayload`: every path valid, and cleaned (`filepath.Clean`: no `.` or
/// empty components). A path that cleans to nothing (`.`) cannot be a file: refused.
fn validate_payload(payload: &[VolumeFile]) -> Result<BTreeMap<String, (&[u8], u32)>, String> {
    let mut clean = BTreeMap::new();
    for (path, data, mode) in payload {
        validate_path(path)?;
        let parts: Vec<String> = Path::new(path)
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        if parts.is_empty() {
            return Err(format!("invalid path: names no file: {path}"));
        }
        let mode = u32::try_from(*mode).unwrap_or(0o644) & 0o777;
        clean.insert(parts.join("/"), (data.as_slice(), mode));
    }
    Ok(clean)
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

/// Whether `name` (the target of `..data`) is a timestamped directory name of the target
/// directory: one component, reserved (`..`), not one of the writer's links.
fn is_ts_dir_name(name: &str) -> bool {
    name.len() > 2
        && name.starts_with("..")
        && !name.contains('/')
        && name != DATA_DIR_NAME
        && name != NEW_DATA_DIR_NAME
        && name != NEW_LINK_NAME
        && name[2..].starts_with(|c: char| c.is_ascii_digit())
}

/// The timestamped directory `..data` points at, if it names one; a `..data` that is no
/// symlink is an error, as upstream's `os.Readlink` makes it.
fn current_ts_dir(target: &Path) -> Result<Option<String>, String> {
    let data = target.join(DATA_DIR_NAME);
    match std::fs::read_link(&data) {
        Ok(link) => {
            let name = link.to_string_lossy().into_owned();
            if is_ts_dir_name(&name) && target.join(&name).is_dir() {
                Ok(Some(name))
            } else {
                tracing::warn!(link = %data.display(), to = %name, "..data does not name a timestamped directory of the volume; replacing it");
                Ok(None)
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("error reading link for data directory", &data, e)),
    }
}

/// Relative paths (files and directories, not following symlinks) under `dir`.
fn walk_relative(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) -> Result<(), String> {
    let rd = std::fs::read_dir(dir).map_err(|e| io_err("cannot read", dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| io_err("cannot read", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            walk_relative(&entry.path(), &rel, out)?;
        }
        out.insert(rel);
    }
    Ok(())
}

/// Upstream `pathsToRemove`: the paths of the old timestamped directory that are neither a
/// payload path nor a directory above one.
fn paths_to_remove(
    payload: &BTreeMap<String, (&[u8], u32)>,
    old_ts: &Path,
) -> Result<BTreeSet<String>, String> {
    let mut current = BTreeSet::new();
    walk_relative(old_ts, "", &mut current)?;
    let mut new_paths = BTreeSet::new();
    for path in payload.keys() {
        let mut p = path.as_str();
        loop {
            new_paths.insert(p.to_string());
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => break,
            }
        }
    }
    Ok(current.difference(&new_paths).cloned().collect())
}

/// Upstream `shouldWritePayload`: some payload file is missing from the old timestamped
/// directory or has another content there (modes are not compared, as upstream).
fn should_write_payload(
    payload: &BTreeMap<String, (&[u8], u32)>,
    old_ts: &Path,
) -> Result<bool, String> {
    for (path, (data, _)) in payload {
        let p = old_ts.join(path);
        match std::fs::symlink_metadata(&p) {
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(true),
            _ => {}
        }
        let on_disk = std::fs::read(&p).map_err(|e| io_err("cannot read", &p, e))?;
        if on_disk != *data {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Upstream `newTimestampDir`: `os.MkdirTemp(target, "..2006_01_02_15_04_05.")` in UTC
/// (random decimal digits after the dot), then mode 0755 whatever the umask.
fn new_timestamp_dir(target: &Path) -> Result<String, String> {
    let prefix = chrono::Utc::now()
        .format("..%Y_%m_%d_%H_%M_%S.")
        .to_string();
    for _ in 0..10_000 {
        let name = format!("{prefix}{}", rand::random::<u32>());
        let path = target.join(&name);
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(DIR_MODE))
                    .map_err(|e| io_err("unable to set mode on new temp directory", &path, e))?;
                return Ok(name);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err("unable to create new temp directory", &path, e)),
        }
    }
    Err(format!(
        "unable to create new temp directory in {}: every name taken",
        target.display()
    ))
}

/// `mkdir -p` of `dir` below `base` with mode 0755 (set explicitly: the umask does not count).
fn make_dirs(base: &Path, rel: &Path) -> Result<(), String> {
    let mut cur = base.to_path_buf();
    for c in rel.components() {
        cur.push(c);
        match std::fs::DirBuilder::new().mode(DIR_MODE).create(&cur) {
            Ok(()) => std::fs::set_permissions(&cur, std::fs::Permissions::from_mode(DIR_MODE))
                .map_err(|e| io_err("unable to set mode on directory", &cur, e))?,
            Err(e) if e.kind() == ErrorKind::AlreadyExists && cur.is_dir() => {}
            Err(e) => return Err(io_err("unable to create directory", &cur, e)),
        }
    }
    Ok(())
}

/// Upstream `writePayloadToDir`: each file with its content and mode (chmod after the write,
/// so that the umask does not count).
fn write_payload_to_dir(
    payload: &BTreeMap<String, (&[u8], u32)>,
    dir: &Path,
) -> Result<(), String> {
    use std::io::Write;
    for (path, (data, mode)) in payload {
        let rel = Path::new(path);
        if let Some(parent) = rel.parent() {
            make_dirs(dir, parent)?;
        }
        let full = dir.join(rel);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(*mode)
            .open(&full)
            .map_err(|e| io_err("unable to write file", &full, e))?;
        f.write_all(data)
            .map_err(|e| io_err("unable to write file", &full, e))?;
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(*mode))
            .map_err(|e| io_err("unable to change mode of file", &full, e))?;
    }
    Ok(())
}

/// Removes `path` whatever it is (a directory with its contents; a symlink, not its target);
/// a missing path is no error.
fn remove_any(path: &Path) -> Result<(), String> {
    let res = match std::fs::symlink_metadata(path) {
        Ok(md) if md.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    match res {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(io_err("cannot remove", path, e)),
        _ => Ok(()),
    }
}

/// The first components of the payload's paths: the user-visible names.
fn user_visible_names<'a>(payload: &'a BTreeMap<String, (&[u8], u32)>) -> BTreeSet<&'a str> {
    payload
        .keys()
        .map(|p| p.split('/').next().unwrap_or(p))
        .collect()
}

/// Upstream `createUserVisibleFiles`, made to converge: `<name> -> ..data/<name>` for every
/// user-visible name; whatever else is there (a regular file or directory of the layout
/// without `..data`, a symlink elsewhere) is replaced, a file or symlink atomically.
fn create_user_visible_files(target: &Path, names: &BTreeSet<&str>) -> Result<(), String> {
    for name in names {
        let visible = target.join(name);
        let want = Path::new(DATA_DIR_NAME).join(name);
        let existing = match std::fs::symlink_metadata(&visible) {
            Ok(md) => md,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                std::os::unix::fs::symlink(&want, &visible)
                    .map_err(|e| io_err("cannot create symlink", &visible, e))?;
                continue;
            }
            Err(e) => return Err(io_err("cannot stat", &visible, e)),
        };
        if existing.file_type().is_symlink()
            && std::fs::read_link(&visible).is_ok_and(|l| l == want)
        {
            continue;
        }
        tracing::info!(path = %visible.display(), "replacing a stale user-visible path with a symlink into ..data");
        if existing.is_dir() {
            std::fs::remove_dir_all(&visible).map_err(|e| io_err("cannot remove", &visible, e))?;
        }
        let tmp = target.join(NEW_LINK_NAME);
        remove_any(&tmp)?;
        std::os::unix::fs::symlink(&want, &tmp)
            .map_err(|e| io_err("cannot create symlink", &tmp, e))?;
        std::fs::rename(&tmp, &visible).map_err(|e| io_err("cannot rename onto", &visible, e))?;
    }
    Ok(())
}

/// Upstream `removeUserVisiblePaths`: of the paths to remove, the top-level ones (the
/// user-visible symlinks; deeper paths went with the old timestamped directory).
fn remove_user_visible_paths(target: &Path, paths: &BTreeSet<String>) -> Result<(), String> {
    let mut last = Ok(());
    for p in paths.iter().filter(|p| !p.contains('/')) {
        if let Err(e) = remove_any(&target.join(p)) {
            tracing::error!(error = %e, "error pruning old user-visible path");
            last = Err(e);
        }
    }
    last
}

/// What an earlier write or another layout left at the top of `target` that the new layout
/// does not have: an interrupted write's `..data_tmp`, `..link_tmp` and timestamped
/// directories (all but `keep`); without an old `..data`, the plain files and directories of
/// the layout without it that are not user-visible names of the payload.
fn remove_leftovers(
    target: &Path,
    keep: &str,
    had_data_dir: bool,
    names: &BTreeSet<&str>,
) -> Result<(), String> {
    let rd = std::fs::read_dir(target).map_err(|e| io_err("cannot read", target, e))?;
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let stale = if name.starts_with("..") {
            name == NEW_DATA_DIR_NAME
                || name == NEW_LINK_NAME
                || (is_ts_dir_name(&name) && name != keep)
        } else {
            !had_data_dir
                && !names.contains(name.as_str())
                && !entry.file_type().is_ok_and(|t| t.is_symlink())
        };
        if stale {
            tracing::info!(path = %entry.path().display(), "removing a leftover of an earlier volume layout");
            remove_any(&entry.path())?;
        }
    }
    Ok(())
}

/// Upstream `AtomicWriter.Write` of `payload` into `target` (created when missing):
/// `set_perms` gets the new timestamped directory's path before it is published (upstream
/// `setPerms`). Returns whether a new timestamped directory was written.
pub(super) fn write(
    target: &Path,
    payload: &[VolumeFile],
    set_perms: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<bool, String> {
    let clean = validate_payload(payload)?;
    std::fs::create_dir_all(target).map_err(|e| io_err("cannot create", target, e))?;
    let names = user_visible_names(&clean);
    let old = current_ts_dir(target)?;
    let had_data_dir = old.is_some();
    let mut to_remove = BTreeSet::new();
    if let Some(old) = &old {
        let old_path = target.join(old);
        to_remove = paths_to_remove(&clean, &old_path)?;
        if !should_write_payload(&clean, &old_path)? && to_remove.is_empty() {
            tracing::trace!(target = %target.display(), "no update required for target directory");
            // Upstream returns here (later versions recreate missing user-visible links):
            // make sure each is the link into ..data, then drop what an interrupted write left.
            create_user_visible_files(target, &names)?;
            remove_leftovers(target, old, true, &names)?;
            return Ok(false);
        }
    }

    let ts_name = new_timestamp_dir(target)?;
    let ts_path = target.join(&ts_name);
    let publish = || -> Result<(), String> {
        write_payload_to_dir(&clean, &ts_path)?;
        set_perms(&ts_path)?;
        let tmp = target.join(NEW_DATA_DIR_NAME);
        remove_any(&tmp)?;
        std::os::unix::fs::symlink(&ts_name, &tmp)
            .map_err(|e| io_err("error creating symbolic link for atomic update", &tmp, e))?;
        let data = target.join(DATA_DIR_NAME);
        if let Err(e) = std::fs::rename(&tmp, &data) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err("error renaming symbolic link onto", &data, e));
        }
        Ok(())
    };
    if let Err(e) = publish() {
        let _ = std::fs::remove_dir_all(&ts_path);
        return Err(e);
    }
    tracing::debug!(target = %target.display(), ts_dir = %ts_name, "volume payload written");

    create_user_visible_files(target, &names)?;
    remove_user_visible_paths(target, &to_remove)?;
    if let Some(old) = &old {
        remove_any(&target.join(old))?;
    }
    remove_leftovers(target, &ts_name, had_data_dir, &names)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn file(path: &str, data: &str, mode: i32) -> VolumeFile {
        (path.to_string(), data.as_bytes().to_vec(), mode)
    }

    fn link(p: &Path) -> String {
        std::fs::read_link(p)
            .unwrap_or_else(|e| panic!("{} is no symlink: {e}", p.display()))
            .to_string_lossy()
            .into_owned()
    }

    fn ts_dirs(target: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(target)
            .expect("read_dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| is_ts_dir_name(n))
            .collect();
        v.sort();
        v
    }

    fn entries(target: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(target)
            .expect("read_dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).expect("stat").mode() & 0o7777
    }

    fn no_perms(_: &Path) -> Result<(), String> {
        Ok(())
    }

    #[test]
    fn first_write_lays_out_upstreams_symlinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("vol");
        let written = write(
            &target,
            &[
                file("data-1", "value-1", 0o644),
                file("path/to/data-2", "value-2", 0o400),
            ],
            no_perms,
        )
        .expect("write");
        assert!(written);
        let ts = ts_dirs(&target);
        assert_eq!(ts.len(), 1, "{ts:?}");
        // `..` + UTC `2006_01_02_15_04_05` + `.` + random digits.
        let name = &ts[0];
        let (stamp, random) = name[2..].split_once('.').expect("a dot after the time");
        assert_eq!(stamp.len(), 19, "{name}");
        assert!(
            stamp
                .split('_')
                .map(str::len)
                .eq([4usize, 2, 2, 2, 2, 2].into_iter()),
            "{name}"
        );
        assert!(
            !random.is_empty() && random.bytes().all(|b| b.is_ascii_digit()),
            "{name}"
        );
        assert_eq!(link(&target.join("..data")), *name);
        assert_eq!(link(&target.join("data-1")), "..data/data-1");
        assert_eq!(link(&target.join("path")), "..data/path");
        assert_eq!(
            entries(&target),
            vec![
                name.clone(),
                "..data".into(),
                "data-1".into(),
                "path".into()
            ]
        );
        assert_eq!(
            std::fs::read_to_string(target.join("data-1")).expect("read"),
            "value-1"
        );
        assert_eq!(
            std::fs::read_to_string(target.join("path/to/data-2")).expect("read"),
            "value-2"
        );
        // Modes as given, directories 0755, the real files in the timestamped directory.
        let real = target.join(name);
        assert_eq!(mode(&real), 0o755);
        assert_eq!(mode(&real.join("data-1")), 0o644);
        assert_eq!(mode(&real.join("path")), 0o755);
        assert_eq!(mode(&real.join("path/to")), 0o755);
        assert_eq!(mode(&real.join("path/to/data-2")), 0o400);
        assert!(
            std::fs::symlink_metadata(real.join("data-1"))
                .expect("stat")
                .file_type()
                .is_file()
        );
    }

    #[test]
    fn an_update_swaps_data_and_drops_the_old_directory_and_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path();
        write(
            target,
            &[
                file("a", "1", 0o644),
                file("b", "2", 0o644),
                file("sub/c", "3", 0o644),
            ],
            no_perms,
        )
        .expect("first");
        let first = ts_dirs(target);
        let mut perms_on = None;
        let written = write(target, &[file("a", "changed", 0o644)], |p: &Path| {
            perms_on = Some(p.to_path_buf());
            Ok(())
        })
        .expect("update");
        assert!(written);
        let second = ts_dirs(target);
        assert_eq!(second.len(), 1, "{second:?}");
        assert_ne!(first, second, "a new timestamped directory");
        assert_eq!(perms_on, Some(target.join(&second[0])));
        assert_eq!(link(&target.join("..data")), second[0]);
        assert_eq!(
            std::fs::read_to_string(target.join("a")).expect("read"),
            "changed"
        );
        assert_eq!(
            entries(target),
            vec![second[0].clone(), "..data".into(), "a".into()],
            "dropped keys and the old directory are gone"
        );
        // Dropping a key alone (same content otherwise) is an update too.
        write(target, &[], no_perms).expect("empty");
        assert_eq!(entries(target).len(), 2, "{:?}", entries(target));
        assert!(
            target.join("..data").is_dir(),
            "an empty payload has ..data"
        );
    }

    #[test]
    fn an_unchanged_payload_writes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path();
        let payload = [file("a", "1", 0o644), file("x/y", "2", 0o600)];
        assert!(write(target, &payload, no_perms).expect("first"));
        let before = ts_dirs(target);
        let ino = std::fs::metadata(target.join("a")).expect("stat").ino();
        let mut called = false;
        let written = write(target, &payload, |_: &Path| {
            called = true;
            Ok(())
        })
        .expect("again");
        assert!(!written);
        assert!(!called, "no permissions step without a write");
        assert_eq!(ts_dirs(target), before);
        assert_eq!(
            std::fs::metadata(target.join("a")).expect("stat").ino(),
            ino
        );
        // A deleted user-visible link comes back, still without a write.
        std::fs::remove_file(target.join("x")).expect("rm");
        assert!(!write(target, &payload, no_perms).expect("relink"));
        assert_eq!(link(&target.join("x")), "..data/x");
        assert_eq!(ts_dirs(target), before);
    }

    #[test]
    fn upgrade_from_plain_files_replaces_them_with_symlinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path();
        // What an earlier version of this kubelet left: files in place, no ..data.
        std::fs::write(target.join("data-1"), "old-1").expect("write");
        std::fs::create_dir_all(target.join("path/to")).expect("mkdir");
        std::fs::write(target.join("path/to/data-2"), "old-2").expect("write");
        std::fs::write(target.join("gone"), "dropped key").expect("write");
        std::fs::write(target.join("data-1.kubelet-tmp"), "tmp").expect("write");
        let written = write(
            target,
            &[
                file("data-1", "value-1", 0o644),
                file("path/to/data-2", "value-2", 0o644),
            ],
            no_perms,
        )
        .expect("write");
        assert!(written);
        let ts = ts_dirs(target);
        assert_eq!(
            entries(target),
            vec![
                ts[0].clone(),
                "..data".into(),
                "data-1".into(),
                "path".into()
            ]
        );
        assert_eq!(link(&target.join("data-1")), "..data/data-1");
        assert_eq!(link(&target.join("path")), "..data/path");
        assert_eq!(
            std::fs::read_to_string(target.join("path/to/data-2")).expect("read"),
            "value-2"
        );
        // A regular file under ..data's name does not stand: after the same payload the
        // user-visible path is the link again.
        std::fs::remove_file(target.join("data-1")).expect("rm");
        std::fs::write(target.join("data-1"), "stale").expect("write");
        assert!(
            !write(
                target,
                &[
                    file("data-1", "value-1", 0o644),
                    file("path/to/data-2", "value-2", 0o644)
                ],
                no_perms
            )
            .expect("again")
        );
        assert_eq!(link(&target.join("data-1")), "..data/data-1");
        assert_eq!(
            std::fs::read_to_string(target.join("data-1")).expect("read"),
            "value-1"
        );
    }

    /// A Go kubelet's layout (a timestamped directory, `..data`, user-visible links): kept
    /// as it is for the same payload; a changed payload replaces its directory.
    #[test]
    fn a_go_kubelet_layout_is_adopted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path();
        let go_ts = "..2023_01_05_10_20_30.2834712345";
        std::fs::create_dir_all(target.join(go_ts).join("path/to")).expect("mkdir");
        std::fs::write(target.join(go_ts).join("data-1"), "value-1").expect("write");
        std::fs::write(target.join(go_ts).join("path/to/data-2"), "value-2").expect("write");
        std::os::unix::fs::symlink(go_ts, target.join("..data")).expect("symlink");
        std::os::unix::fs::symlink("..data/data-1", target.join("data-1")).expect("symlink");
        std::os::unix::fs::symlink("..data/path", target.join("path")).expect("symlink");
        let payload = [
            file("data-1", "value-1", 0o644),
            file("path/to/data-2", "value-2", 0o644),
        ];
        assert!(!write(target, &payload, no_perms).expect("same payload"));
        assert_eq!(ts_dirs(target), vec![go_ts.to_string()]);
        let changed = [
            file("data-1", "value-1", 0o644),
            file("path/to/data-2", "new", 0o644),
        ];
        assert!(write(target, &changed, no_perms).expect("changed payload"));
        let ts = ts_dirs(target);
        assert_eq!(ts.len(), 1);
        assert_ne!(ts[0], go_ts);
        assert_eq!(link(&target.join("..data")), ts[0]);
        assert_eq!(
            std::fs::read_to_string(target.join("path/to/data-2")).expect("read"),
            "new"
        );
        assert_eq!(
            entries(target),
            vec![
                ts[0].clone(),
                "..data".into(),
                "data-1".into(),
                "path".into()
            ]
        );
    }

    #[test]
    fn leftovers_of_an_interrupted_write_and_a_foreign_data_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("vol");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::fs::write(outside.join("keep"), "x").expect("write");
        write(&target, &[file("a", "1", 0o644)], no_perms).expect("first");
        std::os::unix::fs::symlink("..2020_01_01_00_00_00.1", target.join("..data_tmp"))
            .expect("symlink");
        std::fs::create_dir(target.join("..2020_01_01_00_00_00.1")).expect("mkdir");
        assert!(write(&target, &[file("a", "2", 0o644)], no_perms).expect("update"));
        let ts = ts_dirs(&target);
        assert_eq!(
            entries(&target),
            vec![ts[0].clone(), "..data".into(), "a".into()]
        );
        // ..data pointing outside the volume is replaced, and what it points at kept.
        std::fs::remove_file(target.join("..data")).expect("rm");
        std::os::unix::fs::symlink(&outside, target.join("..data")).expect("symlink");
        assert!(write(&target, &[file("a", "2", 0o644)], no_perms).expect("rewrite"));
        assert!(outside.join("keep").exists());
        let ts = ts_dirs(&target);
        assert_eq!(ts.len(), 1, "{ts:?}");
        assert_eq!(link(&target.join("..data")), ts[0]);
        assert_eq!(
            std::fs::read_to_string(target.join("a")).expect("read"),
            "2"
        );
    }

    #[test]
    fn payload_paths_are_validated_and_cleaned() {
        let dir = tempfile::tempdir().expect("tempdir");
        for bad in ["", "/abs", "../x", "a/../b", "..data", "..x/y", "."] {
            assert!(
                write(dir.path(), &[file(bad, "x", 0o644)], no_perms).is_err(),
                "{bad:?}"
            );
        }
        assert!(validate_path(&"n".repeat(256)).is_err());
        assert!(validate_path("..").is_err());
        assert!(validate_path("a..b/..c").is_ok());
        assert!(entries(dir.path()).is_empty(), "nothing written");
        write(dir.path(), &[file("./a//b", "x", 0o644)], no_perms).expect("cleaned");
        assert_eq!(link(&dir.path().join("a")), "..data/a");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b")).expect("read"),
            "x"
        );
    }
}
