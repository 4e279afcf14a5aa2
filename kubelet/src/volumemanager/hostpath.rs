//! The hostPath volume plugin (upstream `pkg/volume/hostpath`): the host's path as given,
//! checked (or created) against the volume's `type` with upstream's messages.

use std::path::Path;

use k8s_openapi::api::core::v1::HostPathVolumeSource;

/// Upstream `checkTypeInternal` (hostPath `type`): creates for `DirectoryOrCreate` (0755) and
/// `FileOrCreate` (0644), else checks the kind of file; an empty type checks nothing.
pub fn check_host_path_type(path: &Path, type_: &str) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let p = path.display();
    let meta = std::fs::metadata(path);
    let ft = meta.as_ref().ok().map(|m| m.file_type());
    match type_ {
        "" => Ok(()),
        "DirectoryOrCreate" | "Directory" => {
            if ft.is_none() && type_ == "DirectoryOrCreate" {
                use std::os::unix::fs::DirBuilderExt;
                return std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(path)
                    .map_err(|e| format!("cannot create directory {p}: {e}"));
            }
            if ft.is_some_and(|f| f.is_dir()) {
                Ok(())
            } else {
                Err(format!(
                    "hostPath type check failed: {p} is not a directory"
                ))
            }
        }
        "FileOrCreate" | "File" => {
            if ft.is_none() && type_ == "FileOrCreate" {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(|e| format!("cannot create directory for {p}: {e}"))?;
                }
                use std::os::unix::fs::OpenOptionsExt;
                return std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o644)
                    .open(path)
                    .map(|_| ())
                    .map_err(|e| format!("cannot create file {p}: {e}"));
            }
            if ft.is_some_and(|f| f.is_file()) {
                Ok(())
            } else {
                Err(format!("hostPath type check failed: {p} is not a file"))
            }
        }
        "Socket" => ft
            .filter(|f| f.is_socket())
            .map(|_| ())
            .ok_or_else(|| format!("hostPath type check failed: {p} is not a socket file")),
        "CharDevice" => ft
            .filter(|f| f.is_char_device())
            .map(|_| ())
            .ok_or_else(|| format!("hostPath type check failed: {p} is not a character device")),
        "BlockDevice" => ft
            .filter(|f| f.is_block_device())
            .map(|_| ())
            .ok_or_else(|| format!("hostPath type check failed: {p} is not a block device")),
        other => Err(format!("{other} is an invalid volume type")),
    }
}

/// Upstream `SetUp` of the hostPath plugin: the type check.
pub(super) fn set_up(hp: &HostPathVolumeSource, path: &Path) -> Result<(), String> {
    check_host_path_type(path, hp.type_.as_deref().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_path_type_checks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let file = d.join("file");
        std::fs::write(&file, "x").expect("file");
        let sock = d.join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("socket");
        let missing = d.join("missing");
        assert_eq!(check_host_path_type(&missing, ""), Ok(()));
        assert_eq!(check_host_path_type(d, "Directory"), Ok(()));
        assert_eq!(
            check_host_path_type(&file, "Directory"),
            Err(format!(
                "hostPath type check failed: {} is not a directory",
                file.display()
            ))
        );
        assert!(check_host_path_type(&missing, "Directory").is_err());
        assert_eq!(check_host_path_type(&file, "File"), Ok(()));
        assert_eq!(
            check_host_path_type(d, "File"),
            Err(format!(
                "hostPath type check failed: {} is not a file",
                d.display()
            ))
        );
        assert_eq!(check_host_path_type(&sock, "Socket"), Ok(()));
        assert_eq!(
            check_host_path_type(&file, "Socket"),
            Err(format!(
                "hostPath type check failed: {} is not a socket file",
                file.display()
            ))
        );
        assert_eq!(
            check_host_path_type(Path::new("/dev/null"), "CharDevice"),
            Ok(())
        );
        assert_eq!(
            check_host_path_type(&file, "CharDevice"),
            Err(format!(
                "hostPath type check failed: {} is not a character device",
                file.display()
            ))
        );
        assert_eq!(
            check_host_path_type(Path::new("/dev/null"), "BlockDevice"),
            Err("hostPath type check failed: /dev/null is not a block device".to_string())
        );
        assert_eq!(
            check_host_path_type(d, "Bogus"),
            Err("Bogus is an invalid volume type".to_string())
        );
        // The *OrCreate types create what is missing, then check like the plain ones.
        let newdir = d.join("a/b");
        assert_eq!(check_host_path_type(&newdir, "DirectoryOrCreate"), Ok(()));
        assert!(newdir.is_dir());
        let newfile = d.join("c/f");
        assert_eq!(check_host_path_type(&newfile, "FileOrCreate"), Ok(()));
        assert!(newfile.is_file());
        assert!(check_host_path_type(&file, "DirectoryOrCreate").is_err());
        assert!(check_host_path_type(d, "FileOrCreate").is_err());
    }
}
