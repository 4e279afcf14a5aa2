//! Socket activation: listeners handed over by systemd (or `systemd-socket-activate`) through
//! `LISTEN_FDS`/`LISTEN_PID`, for `--container-runtime-endpoint fd://`.
//!
//! The protocol is `sd_listen_fds(3)`'s: the sockets are the descriptors 3, 4, ... 3 +
//! `LISTEN_FDS` - 1, meant for the process whose id is `LISTEN_PID`, optionally named by the
//! colon-separated `LISTEN_FDNAMES` (a socket unit's `FileDescriptorName=`, by default the unit's
//! name). [`passed_fds`] takes them once into a process-wide store (setting `FD_CLOEXEC`, so
//! they do not leak into the processes we start), [`unset_environment`] removes the variables
//! (what `sd_listen_fds(1)` does), and [`unix_listener`] hands one out as a tokio listener.
//!
//! The endpoint forms are those of cri-dockerd and Docker: `fd://` is the first passed socket,
//! `fd://N` the passed descriptor N (3 or more), `fd://NAME` the one `LISTEN_FDNAMES` names NAME.
//!
//! [`notify`] is `sd_notify(3)`: it tells the service manager (`Type=notify` units) that we are
//! ready, or stopping, over the datagram socket in `NOTIFY_SOCKET`.
//!
//! An activated socket belongs to the service manager: it created the file and keeps listening
//! on it across our restarts, so a server must never remove or re-chmod it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::Path;

use parking_lot::Mutex;

/// The first passed descriptor (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;

/// The prefix of a socket-activation endpoint.
pub const FD_SCHEME: &str = "fd://";

/// Errors from socket activation and from `fd://` endpoints.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// The endpoint is not a usable `fd://` form.
    #[error("invalid socket-activation endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why it was rejected.
        reason: String,
    },
    /// No `LISTEN_PID` in the environment: nothing was passed.
    #[error(
        "no sockets found via socket activation (LISTEN_PID and LISTEN_FDS are not set): start it \
         from a systemd socket unit (cri-docker.socket) or under systemd-socket-activate, or serve \
         on a unix:// endpoint"
    )]
    NotActivated,
    /// `LISTEN_PID` is not a process id.
    #[error("LISTEN_PID={0:?} is not a process id")]
    BadListenPid(String),
    /// The sockets were passed to another process (an environment inherited by mistake).
    #[error(
        "the passed sockets are for process {listen_pid} (LISTEN_PID), not this one ({pid}): the \
         environment was inherited from the process systemd started"
    )]
    OtherProcess {
        /// `LISTEN_PID`.
        listen_pid: u32,
        /// Our process id.
        pid: u32,
    },
    /// `LISTEN_PID` is set but `LISTEN_FDS` is not, or is not a count.
    #[error("LISTEN_FDS={0:?} is not a number of descriptors")]
    BadListenFds(String),
    /// `LISTEN_FDS=0`.
    #[error("no sockets found via socket activation: LISTEN_FDS=0")]
    NoSockets,
    /// `fd://N` names a descriptor that was not passed.
    #[error("fd {fd} was not passed: the passed descriptors are {}", passed_list(.passed))]
    FdNotPassed {
        /// The descriptor asked for.
        fd: RawFd,
        /// What is (still) passed.
        passed: Vec<PassedFd>,
    },
    /// `fd://NAME` names no passed descriptor.
    #[error("no passed socket is named {name:?}: the passed descriptors are {}", passed_list(.passed))]
    NoSuchName {
        /// The name asked for.
        name: String,
        /// What is (still) passed.
        passed: Vec<PassedFd>,
    },
    /// Every passed descriptor was already handed out.
    #[error("every passed socket was already taken (a second fd:// listener in this process?)")]
    AllTaken,
    /// The descriptor is not a listening unix stream socket.
    #[error("passed fd {fd} is not a listening unix stream socket: {reason}")]
    WrongKind {
        /// The descriptor.
        fd: RawFd,
        /// What it is instead.
        reason: String,
    },
    /// A system call on a passed descriptor failed.
    #[error("passed fd {fd}: {op}: {source}")]
    Io {
        /// The descriptor.
        fd: RawFd,
        /// What was being done.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

fn passed_list(passed: &[PassedFd]) -> String {
    if passed.is_empty() {
        return "none".to_string();
    }
    passed
        .iter()
        .map(|p| match &p.name {
            Some(n) => format!("{} ({n})", p.fd),
            None => p.fd.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A passed descriptor: its number and its name from `LISTEN_FDNAMES`, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassedFd {
    /// The descriptor number (3 and up).
    pub fd: RawFd,
    /// Its `LISTEN_FDNAMES` entry (absent or empty: `None`).
    pub name: Option<String>,
}

/// Which passed socket an `fd://` endpoint means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FdSelector {
    /// `fd://`: the first one (cri-dockerd's form).
    First,
    /// `fd://N`: descriptor N.
    Fd(RawFd),
    /// `fd://NAME`: the one `LISTEN_FDNAMES` names NAME.
    Name(String),
}

impl std::fmt::Display for FdSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FdSelector::First => write!(f, "{FD_SCHEME}"),
            FdSelector::Fd(n) => write!(f, "{FD_SCHEME}{n}"),
            FdSelector::Name(n) => write!(f, "{FD_SCHEME}{n}"),
        }
    }
}

/// Is `endpoint` a socket-activation endpoint (`fd://...`)?
pub fn is_fd_endpoint(endpoint: &str) -> bool {
    endpoint.trim().starts_with(FD_SCHEME)
}

/// Parses an `fd://` endpoint: `Ok(None)` when it is another kind of endpoint.
///
/// `fd://N` must be 3 or more (0, 1 and 2 are stdin, stdout and stderr); a name follows
/// systemd's `FileDescriptorName=` rules (printable ASCII, no `:`, at most 255 characters).
pub fn parse_fd_endpoint(endpoint: &str) -> Result<Option<FdSelector>, ActivationError> {
    let Some(rest) = endpoint.trim().strip_prefix(FD_SCHEME) else {
        return Ok(None);
    };
    let invalid = |reason: String| ActivationError::InvalidEndpoint {
        endpoint: endpoint.to_string(),
        reason,
    };
    if rest.is_empty() {
        return Ok(Some(FdSelector::First));
    }
    if rest.bytes().all(|b| b.is_ascii_digit()) {
        let fd: RawFd = rest
            .parse()
            .map_err(|_| invalid(format!("descriptor {rest} is out of range")))?;
        if fd < LISTEN_FDS_START {
            return Err(invalid(format!(
                "descriptor {fd} is not a passed socket (systemd passes descriptors from {LISTEN_FDS_START} on)"
            )));
        }
        return Ok(Some(FdSelector::Fd(fd)));
    }
    if rest.len() > 255 {
        return Err(invalid(
            "a descriptor name has at most 255 characters".into(),
        ));
    }
    if let Some(c) = rest.chars().find(|c| !c.is_ascii_graphic() || *c == ':') {
        return Err(invalid(format!(
            "{c:?} cannot be part of a descriptor name (printable ASCII without ':')"
        )));
    }
    Ok(Some(FdSelector::Name(rest.to_string())))
}

struct Entry {
    fd: OwnedFd,
    name: Option<String>,
}

enum Store {
    /// The environment was not looked at yet.
    Unread,
    /// What was passed and is not handed out yet.
    Read(Vec<Entry>),
}

static STORE: Mutex<Store> = Mutex::new(Store::Unread);

/// Reads `LISTEN_PID`/`LISTEN_FDS`/`LISTEN_FDNAMES` (no descriptor is touched).
fn read_environment() -> Result<Vec<PassedFd>, ActivationError> {
    let var = |name| std::env::var(name).ok();
    parse_listen_environment(
        var("LISTEN_PID").as_deref(),
        var("LISTEN_FDS").as_deref(),
        var("LISTEN_FDNAMES").as_deref(),
        std::process::id(),
    )
}

/// The `sd_listen_fds` rules on the three variables' values, for process `pid`.
fn parse_listen_environment(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    listen_fdnames: Option<&str>,
    pid: u32,
) -> Result<Vec<PassedFd>, ActivationError> {
    let Some(pid_text) = listen_pid else {
        return Err(ActivationError::NotActivated);
    };
    let listen_pid: u32 = pid_text
        .trim()
        .parse()
        .map_err(|_| ActivationError::BadListenPid(pid_text.to_string()))?;
    if listen_pid != pid {
        return Err(ActivationError::OtherProcess { listen_pid, pid });
    }
    let fds_text = listen_fds.unwrap_or_default();
    let count: RawFd = fds_text
        .trim()
        .parse()
        .ok()
        .filter(|n| *n >= 0 && *n <= RawFd::MAX - LISTEN_FDS_START)
        .ok_or_else(|| ActivationError::BadListenFds(fds_text.to_string()))?;
    if count == 0 {
        return Err(ActivationError::NoSockets);
    }
    let names: Vec<&str> = listen_fdnames
        .map(|v| v.split(':').collect())
        .unwrap_or_default();
    Ok((0..count)
        .map(|i| PassedFd {
            fd: LISTEN_FDS_START + i,
            name: names
                .get(i as usize)
                .filter(|n| !n.is_empty())
                .map(|n| n.to_string()),
        })
        .collect())
}

fn set_cloexec(fd: RawFd) -> Result<(), ActivationError> {
    let io_err = |op| ActivationError::Io {
        fd,
        op,
        source: io::Error::last_os_error(),
    };
    // SAFETY: fcntl(2) on a descriptor number; an invalid one yields EBADF, nothing else.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io_err("not an open descriptor (F_GETFD)"));
    }
    // SAFETY: as above; only the close-on-exec bit is added.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return Err(io_err("set close-on-exec"));
    }
    Ok(())
}

/// The passed descriptors, like `sd_listen_fds_with_names(0, ...)`.
///
/// The first successful call checks that `LISTEN_PID` is this process, sets `FD_CLOEXEC` on
/// every descriptor and takes ownership of them in a process-wide store; later calls list what
/// is still there (a descriptor handed out by [`unix_listener`] is gone from the list). The
/// environment is only read: a binary calls [`unset_environment`] afterwards, before it starts
/// any thread.
pub fn passed_fds() -> Result<Vec<PassedFd>, ActivationError> {
    let mut store = STORE.lock();
    if let Store::Read(entries) = &*store {
        return Ok(entries.iter().map(Entry::describe).collect());
    }
    let passed = read_environment()?;
    for p in &passed {
        set_cloexec(p.fd)?;
    }
    let entries = passed
        .iter()
        .map(|p| Entry {
            // SAFETY: the service manager passed us these descriptors (LISTEN_PID is this
            // process and fcntl just found each open); the store becomes their only owner, and
            // this branch runs once per process (the store is `Read` afterwards).
            fd: unsafe { OwnedFd::from_raw_fd(p.fd) },
            name: p.name.clone(),
        })
        .collect();
    *store = Store::Read(entries);
    Ok(passed)
}

impl Entry {
    fn describe(&self) -> PassedFd {
        PassedFd {
            fd: self.fd.as_raw_fd(),
            name: self.name.clone(),
        }
    }
}

/// Removes `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES` from the environment, so the
/// processes we start do not believe the sockets are theirs (`sd_listen_fds(1)`).
///
/// # Safety
///
/// No other thread may read or write the environment at the same time (see
/// [`std::env::remove_var`]): call it from `main` before starting threads or a runtime.
pub unsafe fn unset_environment() {
    for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        // SAFETY: the caller guarantees no concurrent access to the environment.
        unsafe { std::env::remove_var(var) };
    }
}

fn sockopt(fd: RawFd, opt: libc::c_int) -> Result<libc::c_int, ActivationError> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt(2) writes at most `len` bytes into `value`, which is that large.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(ActivationError::Io {
            fd,
            op: "getsockopt",
            source: io::Error::last_os_error(),
        });
    }
    Ok(value)
}

/// Checks that `fd` is a unix stream socket in the listening state.
fn check_listening_unix_stream(fd: RawFd) -> Result<(), ActivationError> {
    let wrong = |reason: String| ActivationError::WrongKind { fd, reason };
    // SAFETY: fstat(2) fills a zeroed stat buffer of the right type.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(ActivationError::Io {
            fd,
            op: "fstat",
            source: io::Error::last_os_error(),
        });
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(wrong("it is not a socket".into()));
    }
    let domain = sockopt(fd, libc::SO_DOMAIN)?;
    if domain != libc::AF_UNIX {
        let family = match domain {
            libc::AF_INET => "an IPv4 socket".to_string(),
            libc::AF_INET6 => "an IPv6 socket".to_string(),
            d => format!("a socket of address family {d}"),
        };
        return Err(wrong(format!(
            "it is {family}; only unix sockets (ListenStream=/path) are served"
        )));
    }
    let ty = sockopt(fd, libc::SO_TYPE)?;
    if ty != libc::SOCK_STREAM {
        let kind = match ty {
            libc::SOCK_DGRAM => "a datagram socket (ListenDatagram=)".to_string(),
            libc::SOCK_SEQPACKET => "a seqpacket socket (ListenSequentialPacket=)".to_string(),
            t => format!("a socket of type {t}"),
        };
        return Err(wrong(format!("it is {kind}; use ListenStream=")));
    }
    if sockopt(fd, libc::SO_ACCEPTCONN)? == 0 {
        return Err(wrong(
            "it is not listening (a connection socket: the socket unit needs Accept=no)".into(),
        ));
    }
    Ok(())
}

/// Takes the passed socket `selector` names out of the store (see [`passed_fds`], which this
/// calls first) as a listening std unix listener in non-blocking mode.
pub fn std_unix_listener(
    selector: &FdSelector,
) -> Result<std::os::unix::net::UnixListener, ActivationError> {
    passed_fds()?;
    let mut store = STORE.lock();
    let Store::Read(entries) = &mut *store else {
        return Err(ActivationError::NotActivated);
    };
    let described = || entries.iter().map(Entry::describe).collect::<Vec<_>>();
    let index = match selector {
        FdSelector::First => {
            if entries.is_empty() {
                return Err(ActivationError::AllTaken);
            }
            0
        }
        FdSelector::Fd(fd) => entries
            .iter()
            .position(|e| e.fd.as_raw_fd() == *fd)
            .ok_or_else(|| ActivationError::FdNotPassed {
                fd: *fd,
                passed: described(),
            })?,
        FdSelector::Name(name) => entries
            .iter()
            .position(|e| e.name.as_deref() == Some(name))
            .ok_or_else(|| ActivationError::NoSuchName {
                name: name.clone(),
                passed: described(),
            })?,
    };
    let fd = entries[index].fd.as_raw_fd();
    check_listening_unix_stream(fd)?;
    let entry = entries.remove(index);
    let listener = std::os::unix::net::UnixListener::from(entry.fd);
    listener
        .set_nonblocking(true)
        .map_err(|source| ActivationError::Io {
            fd,
            op: "set non-blocking",
            source,
        })?;
    Ok(listener)
}

/// The passed socket `selector` names, as a tokio listener (see [`std_unix_listener`]). Must
/// run inside a tokio runtime. The caller must not remove the socket file when it is done: it
/// belongs to the service manager.
pub fn unix_listener(selector: &FdSelector) -> Result<tokio::net::UnixListener, ActivationError> {
    let listener = std_unix_listener(selector)?;
    let fd = listener.as_raw_fd();
    tokio::net::UnixListener::from_std(listener).map_err(|source| ActivationError::Io {
        fd,
        op: "register with the tokio runtime",
        source,
    })
}

/// `sd_notify(0, state)`: sends `state` (e.g. `READY=1`, `STOPPING=1`) to the service manager
/// when `NOTIFY_SOCKET` is set. `Ok(false)` when it is not (not started by a `Type=notify`
/// unit): nothing to do.
pub fn notify(state: &str) -> io::Result<bool> {
    match std::env::var_os("NOTIFY_SOCKET") {
        Some(path) if !path.is_empty() => notify_socket(Path::new(&path), state).map(|()| true),
        _ => Ok(false),
    }
}

/// Sends `state` to the notification socket `path` (`@name` for an abstract socket).
pub fn notify_socket(path: &Path, state: &str) -> io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    let bytes = path.as_os_str().as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_forms() {
        assert_eq!(parse_fd_endpoint("unix:///x.sock").unwrap(), None);
        assert_eq!(parse_fd_endpoint("/x.sock").unwrap(), None);
        assert_eq!(parse_fd_endpoint("fd://").unwrap(), Some(FdSelector::First));
        assert_eq!(
            parse_fd_endpoint("fd://3").unwrap(),
            Some(FdSelector::Fd(3))
        );
        assert_eq!(
            parse_fd_endpoint("fd://12").unwrap(),
            Some(FdSelector::Fd(12))
        );
        assert_eq!(
            parse_fd_endpoint("fd://cri-docker.socket").unwrap(),
            Some(FdSelector::Name("cri-docker.socket".into()))
        );
        for bad in [
            "fd://0",
            "fd://2",
            "fd://a:b",
            "fd://a b",
            "fd://99999999999999999999",
        ] {
            let e = parse_fd_endpoint(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        assert!(is_fd_endpoint("fd://"));
        assert!(!is_fd_endpoint("unix:///fd://"));
        assert_eq!(FdSelector::Fd(4).to_string(), "fd://4");
    }

    #[test]
    fn listen_environment_rules() {
        let parse = parse_listen_environment;
        assert!(matches!(
            parse(None, Some("1"), None, 7),
            Err(ActivationError::NotActivated)
        ));
        assert!(matches!(
            parse(Some("x"), Some("1"), None, 7),
            Err(ActivationError::BadListenPid(_))
        ));
        assert!(matches!(
            parse(Some("8"), Some("1"), None, 7),
            Err(ActivationError::OtherProcess {
                listen_pid: 8,
                pid: 7
            })
        ));
        assert!(matches!(
            parse(Some("7"), None, None, 7),
            Err(ActivationError::BadListenFds(_))
        ));
        assert!(matches!(
            parse(Some("7"), Some("-1"), None, 7),
            Err(ActivationError::BadListenFds(_))
        ));
        assert!(matches!(
            parse(Some("7"), Some("0"), None, 7),
            Err(ActivationError::NoSockets)
        ));
        assert_eq!(
            parse(Some("7"), Some("3"), Some("cri::other"), 7).unwrap(),
            vec![
                PassedFd {
                    fd: 3,
                    name: Some("cri".into())
                },
                PassedFd { fd: 4, name: None },
                PassedFd {
                    fd: 5,
                    name: Some("other".into())
                },
            ]
        );
    }

    #[test]
    fn error_texts_name_what_is_missing() {
        let e = ActivationError::FdNotPassed {
            fd: 5,
            passed: vec![
                PassedFd {
                    fd: 3,
                    name: Some("cri".into()),
                },
                PassedFd { fd: 4, name: None },
            ],
        };
        assert_eq!(
            e.to_string(),
            "fd 5 was not passed: the passed descriptors are 3 (cri), 4"
        );
        assert!(
            ActivationError::NotActivated
                .to_string()
                .contains("LISTEN_PID")
        );
    }

    #[test]
    fn socket_kinds_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let listening = std::os::unix::net::UnixListener::bind(dir.path().join("l")).unwrap();
        check_listening_unix_stream(listening.as_raw_fd()).unwrap();
        let dgram = UnixDatagram::bind(dir.path().join("d")).unwrap();
        let e = check_listening_unix_stream(dgram.as_raw_fd()).unwrap_err();
        assert!(e.to_string().contains("datagram"), "{e}");
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = check_listening_unix_stream(tcp.as_raw_fd()).unwrap_err();
        assert!(e.to_string().contains("IPv4"), "{e}");
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let e = check_listening_unix_stream(file.as_raw_fd()).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = check_listening_unix_stream(a.as_raw_fd()).unwrap_err();
        assert!(e.to_string().contains("not listening"), "{e}");
    }

    #[test]
    fn notify_reaches_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let rx = UnixDatagram::bind(&path).unwrap();
        notify_socket(&path, "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let name = format!("@cri-proto-test-{}", std::process::id());
        use std::os::linux::net::SocketAddrExt;
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(&name.as_bytes()[1..]).unwrap();
        let rx = UnixDatagram::bind_addr(&addr).unwrap();
        notify_socket(Path::new(&name), "STOPPING=1").unwrap();
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }
}
