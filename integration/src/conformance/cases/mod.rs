//! The conformance cases, grouped by area like critest's validation specs, one module per area:
//! runtime info (`runtime`), images (`images`), sandboxes (`sandbox`), containers (`container`,
//! `logs`, `mounts`, `security`, `seccomp`), stats (`stats`), events (`events`), idempotency and
//! error codes (`errors`) and streaming (`streaming`). Every case creates its own uniquely named
//! pods and removes them whatever the outcome, so cases run in parallel and on a dirty host.
//!
//! This module is the registry at the top: it imports the area modules, which import what they
//! share from `common` (never from each other or from here).

mod common;
mod container;
mod errors;
mod events;
mod images;
mod logs;
mod mounts;
mod runtime;
mod sandbox;
mod seccomp;
mod security;
mod stats;
mod streaming;

use crate::conformance::Case;

/// Every case, in a stable order.
pub fn all() -> Vec<Case> {
    macro_rules! case {
        ($name:expr, $f:path) => {
            Case {
                name: $name,
                run: |ctx| Box::pin($f(ctx)),
            }
        };
    }
    vec![
        case!(
            "[runtime] Version reports name, version and API v1",
            runtime::runtime_version
        ),
        case!(
            "[runtime] Status reports RuntimeReady and NetworkReady",
            runtime::runtime_status
        ),
        case!(
            "[image] pull by tag; status by tag, id and digest",
            images::image_pull_status
        ),
        case!(
            "[image] pull without a tag means latest",
            images::image_pull_no_tag
        ),
        case!(
            "[image] ListImages lists a pulled image, filter by name",
            images::image_list
        ),
        case!(
            "[image] status of a missing image is empty",
            images::image_status_missing
        ),
        case!(
            "[image] remove by tag and by id, idempotent",
            images::image_remove_by_tag
        ),
        case!("[image] pull with credentials", images::image_pull_auth),
        case!("[image] pull by digest", images::image_pull_digest),
        case!(
            "[image] ImageStatus reports the image's user: uid, name, uid:gid, name:group",
            images::image_user_fields
        ),
        case!(
            "[container] the image's user applies; run_as_username",
            security::container_image_user
        ),
        case!(
            "[sandbox] port mapping with a host port, and the pod port without one",
            sandbox::sandbox_port_mapping
        ),
        case!(
            "[sandbox] pod-shared PID namespace, and per-container ones",
            sandbox::sandbox_pid_sharing
        ),
        case!(
            "[container] symlinked host path; mount propagation private / rslave / rshared",
            mounts::container_mount_propagation
        ),
        case!("[container] privileged", security::container_privileged),
        case!(
            "[errors] requests without required fields are refused",
            errors::invalid_argument
        ),
        case!(
            "[container] ReopenContainerLog after the log was moved away",
            logs::container_reopen_log
        ),
        case!(
            "[container] masked and read-only paths",
            security::container_masked_readonly_paths
        ),
        case!(
            "[container] seccomp localhost profile",
            seccomp::container_seccomp_localhost
        ),
        case!(
            "[container] seccomp_profile_path: localhost/<file> applies, a bare path is refused",
            seccomp::container_seccomp_profile_path
        ),
        case!(
            "[container] the log file exists when StartContainer returns",
            logs::container_log_at_start
        ),
        case!(
            "[sandbox] host PID and IPC namespaces, and the pod's own",
            sandbox::sandbox_host_pid_ipc
        ),
        case!(
            "[container] capabilities: add, drop, drop ALL",
            security::container_capabilities
        ),
        case!(
            "[container] no_new_privs and seccomp absent / unconfined / runtime default",
            seccomp::container_nnp_seccomp
        ),
        case!(
            "[container] OOMKilled under a small memory limit",
            container::container_oom_killed
        ),
        case!(
            "[container] UpdateContainerResources changes the memory limit",
            container::container_update_resources
        ),
        case!(
            "[sandbox] run, status, stop, remove round-trip metadata",
            sandbox::sandbox_lifecycle
        ),
        case!(
            "[sandbox] list with id, state and label filters",
            sandbox::sandbox_list_filters
        ),
        case!("[sandbox] hostname is set", sandbox::sandbox_hostname),
        case!(
            "[sandbox] DNS config is written to resolv.conf",
            sandbox::sandbox_dns
        ),
        case!(
            "[sandbox] namespaced sysctls are applied",
            sandbox::sandbox_sysctls
        ),
        case!(
            "[sandbox] pod network has an IP, host network has none",
            sandbox::sandbox_network
        ),
        case!(
            "[container] create, start, stop, remove with status at each step",
            container::container_lifecycle
        ),
        case!(
            "[container] list with id, state, sandbox and label filters",
            container::container_list_filters
        ),
        case!(
            "[container] exit code and reason",
            container::container_exit_codes
        ),
        case!(
            "[container] ExecSync output and exit code",
            container::container_exec_sync
        ),
        case!(
            "[container] ExecSync with a timeout ends and leaves nothing running",
            container::container_exec_timeout
        ),
        case!(
            "[container] logs in the CRI format at the log path",
            logs::container_logs
        ),
        case!(
            "[container] an exited container's log has all its output, a last line without newline too",
            logs::container_short_output
        ),
        case!(
            "[container] command, args, env and working dir",
            container::container_command_env
        ),
        case!(
            "[container] read-only root filesystem",
            security::container_readonly_rootfs
        ),
        case!(
            "[container] run as user and group, supplemental groups",
            security::container_run_as
        ),
        case!(
            "[container] bind mounts, read-only",
            mounts::container_mounts
        ),
        case!(
            "[container] containers of a pod share its network; exec and logs per container",
            container::container_shared_network
        ),
        case!(
            "[stats] container and sandbox stats have CPU and memory",
            stats::stats
        ),
        case!(
            "[events] GetContainerEvents reports a container's lifecycle",
            events::events
        ),
        case!(
            "[errors] stop and remove of missing objects succeed",
            errors::idempotency
        ),
        case!("[errors] unknown ids are NotFound", errors::not_found),
        case!(
            "[errors] a request over 16 MiB is ResourceExhausted",
            errors::oversize_request
        ),
        case!(
            "[sandbox] RunPodSandbox twice with the same metadata leaves one sandbox",
            sandbox::sandbox_same_metadata_twice
        ),
        case!(
            "[container] CreateContainer twice with the same metadata leaves one container",
            container::container_same_metadata_twice
        ),
        case!(
            "[streaming] exec without tty: stdout, stderr, exit code, stdin EOF",
            streaming::exec_plain
        ),
        case!(
            "[streaming] exec with tty and stdin: interactive sh and resize",
            streaming::exec_tty
        ),
        case!(
            "[streaming] attach to a container's stdio, with and without a TTY",
            streaming::attach
        ),
        case!(
            "[streaming] port-forward to a web server in a pod",
            streaming::port_forward_pod
        ),
        case!(
            "[streaming] port-forward to a web server in a host-network pod",
            streaming::port_forward_host_network
        ),
        case!(
            "[streaming] tokens are single use; not-running and unknown containers are refused",
            streaming::refusals
        ),
    ]
}
