//! Watch streams: the changes after a resourceVersion (or the current objects as ADDED first),
//! then live changes and bookmarks, as newline-delimited JSON events in a chunked response, until
//! the timeout, the client leaving or the test dropping every watch; 410 Gone as an ERROR event
//! when the history no longer reaches back.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use super::reply::{Body, status_error};
use super::request::{Target, matches};
use super::state::Shared;
use super::store::{Change, StoreError};

/// How often a watch that asked for bookmarks gets one.
pub const BOOKMARK_EVERY: Duration = Duration::from_secs(5);

fn event_line(typ: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": typ, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

/// A watch: the changes after the requested resourceVersion (or, without one, every current
/// object as ADDED first), then live changes, bookmarks when asked, until timeoutSeconds, the
/// client leaves, or the test drops watches. A resourceVersion older than the history gets an
/// ERROR event with a 410 Status, as from the real API server.
pub(super) fn watch_response(
    shared: Arc<Shared>,
    t: &Target,
    kind: &'static str,
    api_version: &'static str,
    q: &HashMap<String, String>,
) -> Response<Body> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(256);
    let resource = t.resource.clone();
    let namespace = t.namespace.clone();
    let q_outer = q.clone();
    let q = q.clone();
    let dropped = shared.watches.lock().clone();
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
    let relevant = move |c: &Change| {
        c.key.resource == resource
            && namespace.as_deref().is_none_or(|n| c.key.namespace == n)
            && matches(&c.object, &q)
    };
    // With a resourceVersion: the changes after it. Without (or "0"): every current object as
    // ADDED, then the changes after that listing.
    let (initial, from_rv) = match q_outer.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => {
            let (items, rv) = shared.store.list(&t.resource, t.namespace.as_deref());
            let items = items.into_iter().filter(|o| matches(o, &q_outer)).collect();
            (items, rv)
        }
        Some(v) => match v.parse::<u64>() {
            Ok(rv) => (Vec::new(), rv),
            Err(_) => {
                return status_error(400, "BadRequest", &format!("invalid resourceVersion {v:?}"));
            }
        },
    };
    let watch = shared.store.watch_from(from_rv, &relevant);
    tokio::spawn(async move {
        let (past, mut live) = match watch {
            Ok(w) => w,
            Err(e) => {
                let _ = tx.send(event_line("ERROR", &e.status())).await;
                return;
            }
        };
        let mut last = from_rv;
        for obj in initial {
            if tx.send(event_line("ADDED", &obj)).await.is_err() {
                return;
            }
        }
        for c in past {
            last = c.rv;
            if tx.send(event_line(c.kind, &c.object)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(BOOKMARK_EVERY);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = dropped.cancelled() => return,
                _ = tx.closed() => return,
                _ = tick.tick(), if bookmarks => {
                    let rv = shared.store.resource_version().max(last);
                    let b = json!({"kind": kind, "apiVersion": api_version,
                                   "metadata": {"resourceVersion": rv.to_string()}});
                    if tx.send(event_line("BOOKMARK", &b)).await.is_err() {
                        return;
                    }
                }
                c = live.recv() => match c {
                    Ok(c) => {
                        if c.rv <= last || !relevant(&c) {
                            continue;
                        }
                        last = c.rv;
                        if tx.send(event_line(c.kind, &c.object)).await.is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        let e = StoreError::Gone { requested: last, oldest: last + 1 };
                        let _ = tx.send(event_line("ERROR", &e.status())).await;
                        return;
                    }
                    Err(_) => return,
                }
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .header("transfer-encoding", "chunked")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}
