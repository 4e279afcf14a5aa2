//! The CRI socket serves clients whatever `:authority` they send. A hand-written HTTP/2 client
//! (frames and HPACK by hand, so nothing normalises the authority on the way) calls `Version`
//! with the authorities real clients send; the same bytes against tonic without the adapter
//! are reset, which proves the client reproduces the failure the adapter exists for.

mod common;

use common::VersionOnly;
use std::path::Path;

use cri_proto::TransportError;
use cri_proto::runtime::v1::{VersionRequest, VersionResponse};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;

/// How one call ended.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// The server answered; the gRPC status and the decoded response.
    Answered(String, Option<VersionResponse>),
    /// The server reset the stream with this HTTP/2 error code.
    Reset(u32),
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

async fn read_frame(conn: &mut UnixStream) -> (u8, u8, u32, Vec<u8>) {
    let mut head = [0u8; 9];
    conn.read_exact(&mut head).await.expect("frame header");
    let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
    let mut payload = vec![0u8; len];
    conn.read_exact(&mut payload).await.expect("frame payload");
    let sid = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    (head[3], head[4], sid, payload)
}

/// Calls `Version` once per authority, all on one connection (streams 1, 3, …), with an HPACK
/// encoder that indexes, so later calls depend on the dynamic table.
async fn raw_calls(path: &Path, authorities: &[&[u8]]) -> Vec<Outcome> {
    let mut conn = UnixStream::connect(path).await.expect("connect");
    let mut enc = loona_hpack::Encoder::new();
    let mut dec = loona_hpack::Decoder::new();
    conn.write_all(PREFACE).await.unwrap();
    conn.write_all(&frame(0x4, 0, 0, &[])).await.unwrap();
    let mut outcomes = Vec::new();
    for (i, authority) in authorities.iter().enumerate() {
        let sid = 1 + 2 * i as u32;
        let fields: [(&[u8], &[u8]); 6] = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/runtime.v1.RuntimeService/Version"),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ];
        let block = enc.encode(fields);
        conn.write_all(&frame(0x1, 0x4, sid, &block)).await.unwrap();
        let msg = VersionRequest {
            version: format!("call-{i}"),
        }
        .encode_to_vec();
        let mut body = vec![0u8];
        body.extend((msg.len() as u32).to_be_bytes());
        body.extend(msg);
        conn.write_all(&frame(0x0, 0x1, sid, &body)).await.unwrap();

        let mut data = Vec::new();
        let outcome = loop {
            let (kind, flags, stream, payload) = read_frame(&mut conn).await;
            match kind {
                0x4 if flags & 0x1 == 0 => conn.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap(),
                0x3 if stream == sid => {
                    let code = u32::from_be_bytes(payload[..4].try_into().unwrap());
                    break Outcome::Reset(code);
                }
                0x7 => panic!("GOAWAY: {payload:?}"),
                0x0 if stream == sid => data.extend(payload),
                0x1 if stream == sid => {
                    let headers = dec.decode(&payload).expect("server's header block");
                    if flags & 0x1 == 0 {
                        continue;
                    }
                    let status = headers
                        .iter()
                        .find(|(n, _)| n == b"grpc-status")
                        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                        .unwrap_or_default();
                    let resp = (data.len() > 5)
                        .then(|| VersionResponse::decode(&data[5..]).expect("response"));
                    break Outcome::Answered(status, resp);
                }
                _ => {}
            }
        };
        outcomes.push(outcome);
    }
    outcomes
}

fn serve(
    listener: tokio::net::UnixListener,
) -> (CancellationToken, JoinHandle<Result<(), TransportError>>) {
    let token = CancellationToken::new();
    let router = Server::builder().add_service(cri_proto::runtime_server(VersionOnly));
    let task = tokio::spawn(cri_proto::serve_with_listener(
        router,
        listener,
        token.clone(),
    ));
    (token, task)
}

#[tokio::test]
async fn any_authority_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cri.sock");
    let (token, task) = serve(cri_proto::bind_unix(&path).await.unwrap());
    let raw = path.to_str().unwrap().as_bytes().to_vec();
    let encoded = path.to_str().unwrap().replace('/', "%2F").into_bytes();
    let authorities: Vec<&[u8]> = vec![
        &raw,              // Go gRPC (crictl, critest, the Go kubelet), grpc-java, grpcurl
        &encoded,          // grpcio >= 1.57
        b"",               // clients that send none
        b"localhost",      // grpcio with grpc.default_authority, tonic
        b"127.0.0.1:1234", // host:port
        &raw,              // again, now from the client's dynamic table
    ];
    let outcomes = raw_calls(&path, &authorities).await;
    for (i, o) in outcomes.iter().enumerate() {
        let expected = Outcome::Answered(
            "0".into(),
            Some(VersionResponse {
                version: "0.1.0".into(),
                runtime_name: "test".into(),
                runtime_version: format!("call-{i}"),
                runtime_api_version: "v1".into(),
            }),
        );
        assert_eq!(
            o,
            &expected,
            "authority {:?}",
            String::from_utf8_lossy(authorities[i])
        );
    }
    token.cancel();
    task.await.unwrap().unwrap();
}

/// Without the adapter, tonic's h2 resets the same request: if this starts failing, h2 has
/// learnt to accept such authorities and the adapter may go (the test above must still pass).
#[tokio::test]
async fn tonic_alone_refuses_a_socket_path_authority() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.sock");
    let listener = cri_proto::bind_unix(&path).await.unwrap();
    let token = CancellationToken::new();
    let router = Server::builder().add_service(cri_proto::runtime_server(VersionOnly));
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let task = tokio::spawn(
        router.serve_with_incoming_shutdown(incoming, token.clone().cancelled_owned()),
    );
    let raw = path.to_str().unwrap().as_bytes().to_vec();
    let outcomes = raw_calls(&path, &[b"localhost", &raw]).await;
    assert!(matches!(outcomes[0], Outcome::Answered(ref s, Some(_)) if s == "0"));
    assert_eq!(outcomes[1], Outcome::Reset(1), "PROTOCOL_ERROR expected");
    token.cancel();
    task.await.unwrap().unwrap();
}
