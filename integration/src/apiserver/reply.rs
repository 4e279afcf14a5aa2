//! The fixture's JSON responses: an object or list with a status code, a store error or any
//! other failure as a Kubernetes `Status`, and the 401 of the TLS fixture's authentication.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use super::store::StoreError;

pub(super) type Body = BoxBody<Bytes, Infallible>;

pub(super) fn unauthorized() -> Response<Body> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                      "status": "Failure", "message": "Unauthorized",
                      "reason": "Unauthorized", "code": 401});
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *r.status_mut() = StatusCode::UNAUTHORIZED;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

pub(super) fn full(status: StatusCode, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

pub(super) fn error(e: &StoreError) -> Response<Body> {
    let (code, _) = e.code_reason();
    full(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &e.status(),
    )
}

pub(super) fn status_error(code: u16, reason: &str, message: &str) -> Response<Body> {
    full(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code}),
    )
}
