//! Per-sandbox checkpoints, file-compatible with the Go dockershim and
//! cri-dockerd (`core/docker_checkpoint.go`, `store/`): one JSON file per
//! sandbox id under `<root-directory>/sandbox/`, holding
//! `{"version":"v1","name":..,"namespace":..,"data":{"port_mappings":[{"protocol",
//! "container_port","host_port","host_ip"}],"host_network":..},"checksum":N}`.
//! The checksum is upstream's `checksum.New(*cp.Data)`: FNV-32a over go-spew's
//! `%#v` rendering (ConfigState{Indent:" ", SortKeys, DisableMethods,
//! SpewKeys}) of the `CheckpointData` struct only. That rendering includes the
//! Go type names, so it depends on the Go package the types lived in:
//! cri-dockerd (`core.CheckpointData`, `config.PortMapping`, `config.Protocol`)
//! and the in-tree dockershim (`dockershim.*`) give different checksums for
//! the same data. We write cri-dockerd's and accept either on read. This
//! module owns the JSON model, the checksum and the [`CheckpointStore`].

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

/// Sub-directory of the shim's root directory holding the checkpoints.
pub const SANDBOX_CHECKPOINT_DIR: &str = "sandbox";
/// `schemaVersion` of the checkpoint.
pub const SCHEMA_VERSION: &str = "v1";
/// Protocol strings used by upstream (`protocolTCP` etc.).
pub const PROTOCOL_TCP: &str = "tcp";
pub const PROTOCOL_UDP: &str = "udp";
pub const PROTOCOL_SCTP: &str = "sctp";

/// One port mapping of a sandbox (upstream `PortMapping`; pointers are
/// `Option`s so that absent fields and the checksum stay faithful).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PortMapping {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_port: Option<i32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

/// Upstream `CheckpointData`. `port_mappings` is `None` for Go's nil slice
/// (absent or `null` in JSON) and `Some(vec![])` for an explicit `[]`; the two
/// hash differently upstream. Both are omitted when writing (`omitempty`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CheckpointData {
    #[serde(
        default,
        deserialize_with = "nullable_vec",
        skip_serializing_if = "vec_omitted"
    )]
    pub port_mappings: Option<Vec<PortMapping>>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub host_network: bool,
}

fn nullable_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<PortMapping>>, D::Error> {
    Option::<Vec<Option<PortMapping>>>::deserialize(d).map(|o| {
        // A `null` element is a nil *PortMapping upstream; keep it as default.
        o.map(|v| v.into_iter().map(Option::unwrap_or_default).collect())
    })
}

fn vec_omitted(v: &Option<Vec<PortMapping>>) -> bool {
    v.as_ref().is_none_or(Vec::is_empty)
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Upstream `PodSandboxCheckpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodSandboxCheckpoint {
    pub version: String,
    pub name: String,
    pub namespace: String,
    /// `*CheckpointData` upstream; a file without it cannot be verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<CheckpointData>,
    #[serde(default)]
    pub checksum: u64,
}

/// Which Go package layout the checksum is computed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumFlavor {
    /// Mirantis cri-dockerd: `core.CheckpointData`, `config.PortMapping`.
    CriDockerd,
    /// kubernetes `pkg/kubelet/dockershim` (1.19–1.23, `PortMapping` with `HostIP`).
    Dockershim,
    /// older in-tree dockershim whose `PortMapping` had no `HostIP` field.
    DockershimNoHostIp,
}

impl ChecksumFlavor {
    pub const ALL: [ChecksumFlavor; 3] = [
        ChecksumFlavor::CriDockerd,
        ChecksumFlavor::Dockershim,
        ChecksumFlavor::DockershimNoHostIp,
    ];

    fn type_names(self) -> (&'static str, &'static str, &'static str) {
        match self {
            ChecksumFlavor::CriDockerd => (
                "core.CheckpointData",
                "config.PortMapping",
                "config.Protocol",
            ),
            ChecksumFlavor::Dockershim | ChecksumFlavor::DockershimNoHostIp => (
                "dockershim.CheckpointData",
                "dockershim.PortMapping",
                "dockershim.Protocol",
            ),
        }
    }
}

/// go-spew `%#v` of `CheckpointData` (DisableMethods, no maps involved so
/// SortKeys/SpewKeys do not matter, Indent is unused by Fprintf).
pub fn spew_checkpoint_data(data: &CheckpointData, flavor: ChecksumFlavor) -> String {
    let (data_ty, pm_ty, proto_ty) = flavor.type_names();
    let mut s = format!("({data_ty}){{PortMappings:([]*{pm_ty})");
    match &data.port_mappings {
        None => s.push_str("<nil>"),
        Some(pms) => {
            s.push('[');
            for (i, pm) in pms.iter().enumerate() {
                if i > 0 {
                    s.push(' ');
                }
                // Slice elements: type suppressed, pointer shown as `<*>`.
                s.push_str("<*>{Protocol:");
                match &pm.protocol {
                    Some(p) => s.push_str(&format!("(*{proto_ty}){p}")),
                    None => s.push_str(&format!("(*{proto_ty})<nil>")),
                }
                for (name, v) in [
                    ("ContainerPort", pm.container_port),
                    ("HostPort", pm.host_port),
                ] {
                    match v {
                        Some(n) => s.push_str(&format!(" {name}:(*int32){n}")),
                        None => s.push_str(&format!(" {name}:(*int32)<nil>")),
                    }
                }
                if flavor != ChecksumFlavor::DockershimNoHostIp {
                    s.push_str(" HostIP:(string)");
                    s.push_str(&pm.host_ip);
                }
                s.push('}');
            }
            s.push(']');
        }
    }
    s.push_str(&format!(" HostNetwork:(bool){}}}", data.host_network));
    s
}

/// FNV-1a, 32 bit (Go `hash/fnv.New32a`).
pub fn fnv32a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Upstream `checksum.New(data)` for the given flavor.
pub fn checksum(data: &CheckpointData, flavor: ChecksumFlavor) -> u64 {
    u64::from(fnv32a(spew_checkpoint_data(data, flavor).as_bytes()))
}

impl PodSandboxCheckpoint {
    /// Upstream `NewPodSandboxCheckpoint(namespace, name, data)`; checksum is
    /// filled in by [`PodSandboxCheckpoint::marshal`].
    pub fn new(namespace: &str, name: &str, data: CheckpointData) -> Self {
        PodSandboxCheckpoint {
            version: SCHEMA_VERSION.into(),
            name: name.into(),
            namespace: namespace.into(),
            data: Some(data),
            checksum: 0,
        }
    }

    /// Set the (cri-dockerd flavor) checksum and encode like Go's `json.Marshal`.
    pub fn marshal(&mut self) -> Result<Vec<u8>, CheckpointError> {
        let data = self.data.get_or_insert_with(CheckpointData::default);
        self.checksum = checksum(data, ChecksumFlavor::CriDockerd);
        serde_json::to_vec(self).map_err(CheckpointError::Encode)
    }

    /// Verify the checksum against every known flavor; returns the match. A file without
    /// port mappings may have been hashed with an empty slice rather than nil (the JSON omits
    /// both): that form is accepted too.
    pub fn verify_checksum(&self) -> Option<ChecksumFlavor> {
        let data = self.data.as_ref()?;
        let empty = CheckpointData {
            port_mappings: Some(Vec::new()),
            ..data.clone()
        };
        let forms: &[&CheckpointData] = if data.port_mappings.is_none() {
            &[data, &empty]
        } else {
            &[data]
        };
        ChecksumFlavor::ALL
            .into_iter()
            .find(|f| forms.iter().any(|d| checksum(d, *f) == self.checksum))
    }
}

/// Errors of the checkpoint store.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint is not found")]
    NotFound,
    #[error("checkpoint is corrupted: {0}")]
    Corrupt(String),
    #[error("invalid checkpoint key {0:?}")]
    InvalidKey(String),
    #[error("encoding checkpoint: {0}")]
    Encode(serde_json::Error),
    #[error("checkpoint I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Upstream store key rule: `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at
/// most 250 characters (so no path separators and no leading dot).
pub fn validate_key(key: &str) -> Result<(), CheckpointError> {
    let b = key.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 250
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(CheckpointError::InvalidKey(key.to_string()))
    }
}

/// The directory of sandbox checkpoints, `<root>/sandbox`.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    dir: PathBuf,
    /// Checkpoints read so far (see [`CheckpointStore::reads`]).
    #[cfg(test)]
    reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl CheckpointStore {
    /// Open (creating if needed) `<root_directory>/sandbox`.
    pub fn new(root_directory: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let dir = root_directory.as_ref().join(SANDBOX_CHECKPOINT_DIR);
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        Ok(CheckpointStore {
            dir,
            #[cfg(test)]
            reads: Default::default(),
        })
    }

    /// How many checkpoints [`CheckpointStore::get`] has read (each is a file read and a JSON
    /// parse; listings should not need one per sandbox).
    #[cfg(test)]
    pub fn reads(&self) -> u64 {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The checkpoint directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: &str) -> Result<PathBuf, CheckpointError> {
        validate_key(id)?;
        Ok(self.dir.join(id))
    }

    /// Write the checkpoint of sandbox `id` atomically (temp file, fsync,
    /// rename), setting its checksum.
    pub fn write(&self, id: &str, cp: &mut PodSandboxCheckpoint) -> Result<(), CheckpointError> {
        let path = self.path(id)?;
        let blob = cp.marshal()?;
        let tmp = self.dir.join(format!(".{id}.tmp{}", std::process::id()));
        let res = (|| {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(&blob)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            if let Ok(d) = fs::File::open(&self.dir) {
                let _ = d.sync_all();
            }
            Ok(())
        })();
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        res.map_err(io_err(&path))
    }

    /// Read and verify the checkpoint of sandbox `id`.
    pub fn get(&self, id: &str) -> Result<PodSandboxCheckpoint, CheckpointError> {
        let path = self.path(id)?;
        #[cfg(test)]
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let blob = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(CheckpointError::NotFound);
            }
            Err(e) => return Err(io_err(&path)(e)),
        };
        let cp: PodSandboxCheckpoint = serde_json::from_slice(&blob)
            .map_err(|e| CheckpointError::Corrupt(format!("{}: {e}", path.display())))?;
        if cp.data.is_none() {
            return Err(CheckpointError::Corrupt(format!(
                "{}: no data",
                path.display()
            )));
        }
        if cp.verify_checksum().is_none() {
            return Err(CheckpointError::Corrupt(format!(
                "{}: checksum mismatch",
                path.display()
            )));
        }
        Ok(cp)
    }

    /// Remove the checkpoint of sandbox `id`; absent is not an error.
    pub fn remove(&self, id: &str) -> Result<(), CheckpointError> {
        let path = self.path(id)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// Ids of all checkpoints (temp files, starting with `.`, are skipped), sorted.
    pub fn list(&self) -> Result<Vec<String>, CheckpointError> {
        let mut ids = Vec::new();
        for ent in fs::read_dir(&self.dir).map_err(io_err(&self.dir))? {
            let ent = ent.map_err(io_err(&self.dir))?;
            if !ent.file_type().map(|t| t.is_file()).unwrap_or(false) {
                continue;
            }
            if let Some(name) = ent.file_name().to_str()
                && !name.starts_with('.')
            {
                ids.push(name.to_string());
            }
        }
        ids.sort();
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pm(proto: &str, c: Option<i32>, h: Option<i32>, ip: &str) -> PortMapping {
        PortMapping {
            protocol: Some(proto.into()),
            container_port: c,
            host_port: h,
            host_ip: ip.into(),
        }
    }

    fn sample() -> CheckpointData {
        CheckpointData {
            port_mappings: Some(vec![
                pm("tcp", Some(80), Some(8080), "127.0.0.1"),
                pm("udp", Some(53), None, ""),
            ]),
            host_network: false,
        }
    }

    // Golden values produced by Go 1.19 with go-spew 1.1.1 (the version
    // kubernetes and cri-dockerd vendor), with the same struct definitions in
    // packages named `core`/`config` and `dockershim`.
    #[test]
    fn a_portless_checkpoint_verifies_after_a_round_trip() {
        for ports in [None, Some(Vec::new())] {
            let mut cp = PodSandboxCheckpoint::new(
                "ns",
                "pod",
                CheckpointData {
                    port_mappings: ports,
                    host_network: false,
                },
            );
            let bytes = cp.marshal().unwrap();
            let back: PodSandboxCheckpoint = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(back.verify_checksum(), Some(ChecksumFlavor::CriDockerd));
        }
    }

    #[test]
    fn spew_and_checksum_match_go() {
        let d = sample();
        assert_eq!(
            spew_checkpoint_data(&d, ChecksumFlavor::CriDockerd),
            "(core.CheckpointData){PortMappings:([]*config.PortMapping)[<*>{Protocol:(*config.Protocol)tcp ContainerPort:(*int32)80 HostPort:(*int32)8080 HostIP:(string)127.0.0.1} <*>{Protocol:(*config.Protocol)udp ContainerPort:(*int32)53 HostPort:(*int32)<nil> HostIP:(string)}] HostNetwork:(bool)false}"
        );
        assert_eq!(checksum(&d, ChecksumFlavor::CriDockerd), 2252295919);
        let hostnet = CheckpointData {
            port_mappings: None,
            host_network: true,
        };
        assert_eq!(checksum(&hostnet, ChecksumFlavor::CriDockerd), 12315789);
        let empty = CheckpointData {
            port_mappings: Some(vec![]),
            host_network: false,
        };
        assert_eq!(checksum(&empty, ChecksumFlavor::CriDockerd), 3930330829);
        let ds = CheckpointData {
            port_mappings: Some(vec![pm("tcp", Some(80), Some(8080), "")]),
            host_network: false,
        };
        assert_eq!(checksum(&ds, ChecksumFlavor::Dockershim), 928727533);
        assert_eq!(
            checksum(&CheckpointData::default(), ChecksumFlavor::Dockershim),
            815459779
        );
    }

    #[test]
    fn json_matches_go_marshal() {
        let mut cp = PodSandboxCheckpoint::new("default", "nginx", sample());
        let blob = cp.marshal().unwrap();
        assert_eq!(
            String::from_utf8(blob).unwrap(),
            r#"{"version":"v1","name":"nginx","namespace":"default","data":{"port_mappings":[{"protocol":"tcp","container_port":80,"host_port":8080,"host_ip":"127.0.0.1"},{"protocol":"udp","container_port":53}]},"checksum":2252295919}"#
        );
        let mut hn = PodSandboxCheckpoint::new(
            "kube-system",
            "proxy",
            CheckpointData {
                port_mappings: None,
                host_network: true,
            },
        );
        assert_eq!(
            String::from_utf8(hn.marshal().unwrap()).unwrap(),
            r#"{"version":"v1","name":"proxy","namespace":"kube-system","data":{"host_network":true},"checksum":12315789}"#
        );
    }

    #[test]
    fn store_write_get_list_remove() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(tmp.path()).unwrap();
        assert_eq!(store.dir(), tmp.path().join("sandbox"));
        let mut cp = PodSandboxCheckpoint::new("default", "nginx", sample());
        store.write("abc123", &mut cp).unwrap();
        store
            .write(
                "def456",
                &mut PodSandboxCheckpoint::new("ns", "p", CheckpointData::default()),
            )
            .unwrap();
        let got = store.get("abc123").unwrap();
        assert_eq!(got, cp);
        assert_eq!(got.verify_checksum(), Some(ChecksumFlavor::CriDockerd));
        assert_eq!(store.list().unwrap(), vec!["abc123", "def456"]);
        assert!(matches!(store.get("nope"), Err(CheckpointError::NotFound)));
        store.remove("abc123").unwrap();
        store.remove("abc123").unwrap();
        assert_eq!(store.list().unwrap(), vec!["def456"]);
        assert!(matches!(
            store.get("../etc"),
            Err(CheckpointError::InvalidKey(_))
        ));
    }

    #[test]
    fn corrupt_files_are_their_own_error() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(tmp.path()).unwrap();
        let dir = store.dir().to_path_buf();
        fs::write(
            dir.join("bad1"),
            r#"{"version":"v1","name":"nginx","namespace":"default","data":{"host_network":true},"checksum":1}"#,
        )
        .unwrap();
        fs::write(dir.join("bad2"), "{not json").unwrap();
        fs::write(
            dir.join("bad3"),
            r#"{"version":"v1","name":"a","namespace":"b","checksum":0}"#,
        )
        .unwrap();
        for id in ["bad1", "bad2", "bad3"] {
            assert!(
                matches!(store.get(id), Err(CheckpointError::Corrupt(_))),
                "{id}"
            );
        }
    }

    #[test]
    fn reads_dockershim_written_file() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(tmp.path()).unwrap();
        fs::write(
            store.dir().join("c0ffee"),
            r#"{"version":"v1","name":"web","namespace":"default","data":{"port_mappings":[{"protocol":"tcp","container_port":80,"host_port":8080}]},"checksum":928727533}"#,
        )
        .unwrap();
        let cp = store.get("c0ffee").unwrap();
        assert_eq!(cp.verify_checksum(), Some(ChecksumFlavor::Dockershim));
        assert_eq!(
            cp.data.unwrap().port_mappings.unwrap()[0].host_port,
            Some(8080)
        );
    }
}
