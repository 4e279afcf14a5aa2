//! The CRI Exec, Attach and PortForward RPCs (upstream `docker_streaming.go`): each checks its
//! request (a command for exec; at least one of stdin/stdout/stderr; tty excludes stderr; valid
//! ports), resolves the container or sandbox to its full id and checks it runs, then asks the
//! streaming server, through the shim's [`StreamingServer`] trait, for the single-use URL the
//! client connects to. The server itself (`crate::streaming`) sits above this module.

use cri_proto::runtime::v1 as cri;

use crate::docker::DockerApi;
use crate::errors::{Result, ShimError};
use crate::labels;
use crate::shim::{Shim, StreamingServer};

fn check_stdio(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> Result<()> {
    if tty && stderr {
        return Err(ShimError::invalid("tty and stderr cannot both be true"));
    }
    if !stdin && !stdout && !stderr {
        return Err(ShimError::invalid(
            "one of stdin, stdout, or stderr must be set",
        ));
    }
    Ok(())
}

impl<D: DockerApi> Shim<D> {
    fn streaming_server(&self) -> Result<&dyn StreamingServer> {
        self.streaming
            .get()
            .map(|s| &**s)
            .ok_or_else(|| ShimError::Unimplemented("the streaming server is not running".into()))
    }

    /// The full id of a running container, or NotFound / FailedPrecondition. One of ours that
    /// an inspect found running is remembered (see `cache`) until any container changes.
    async fn running_container(&self, id: &str, what: &str) -> Result<String> {
        if id.is_empty() {
            return Err(ShimError::invalid(format!("missing required {what}_id")));
        }
        if let Some(full) = self.listing.running(id) {
            return Ok(full);
        }
        let ticket = self.listing.ticket();
        let info = self.docker.inspect_container(id).await.map_err(|e| {
            if e.is_not_found() {
                ShimError::NotFound(format!("{what} {id:?} not found"))
            } else {
                e.into()
            }
        })?;
        if info.state.and_then(|s| s.running) != Some(true) {
            return Err(ShimError::FailedPrecondition(format!(
                "{what} {id} is not running"
            )));
        }
        let full = info.id.unwrap_or_else(|| id.to_string());
        let ours = info
            .config
            .and_then(|c| c.labels)
            .is_some_and(|l| l.contains_key(labels::CONTAINER_TYPE_LABEL_KEY));
        if ours {
            self.listing.store_running(ticket, id, &full);
        }
        Ok(full)
    }

    /// CRI Exec: validates and returns the streaming URL.
    pub async fn exec(&self, mut req: cri::ExecRequest) -> Result<cri::ExecResponse> {
        let server = self.streaming_server()?;
        if req.cmd.is_empty() {
            return Err(ShimError::invalid("cmd is required"));
        }
        check_stdio(req.stdin, req.stdout, req.stderr, req.tty)?;
        req.container_id = self
            .running_container(&req.container_id, "container")
            .await?;
        server.get_exec(req)
    }

    /// CRI Attach: validates and returns the streaming URL.
    pub async fn attach(&self, mut req: cri::AttachRequest) -> Result<cri::AttachResponse> {
        let server = self.streaming_server()?;
        check_stdio(req.stdin, req.stdout, req.stderr, req.tty)?;
        req.container_id = self
            .running_container(&req.container_id, "container")
            .await?;
        server.get_attach(req)
    }

    /// CRI PortForward: validates and returns the streaming URL.
    pub async fn port_forward(
        &self,
        mut req: cri::PortForwardRequest,
    ) -> Result<cri::PortForwardResponse> {
        let server = self.streaming_server()?;
        if req.port.iter().any(|p| !(1..=65535).contains(p)) {
            return Err(ShimError::invalid(format!(
                "invalid port in {:?}",
                req.port
            )));
        }
        req.pod_sandbox_id = self
            .running_container(&req.pod_sandbox_id, "pod_sandbox")
            .await?;
        server.get_port_forward(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdio_rules_follow_upstream() {
        assert!(check_stdio(false, false, false, false).is_err());
        assert!(check_stdio(false, true, true, true).is_err());
        assert!(check_stdio(true, true, false, true).is_ok());
        assert!(check_stdio(false, false, true, false).is_ok());
    }
}
