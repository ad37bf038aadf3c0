//! Plain HTTP/1.1 clients for talking to the mock: hyper for async tests, raw TCP for exact
//! wire checks from sync code.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

/// Closes the connection when dropped: how a client hangs up mid-stream (hyper's client keeps
/// the socket open when only the response body is dropped).
pub struct HangUp(tokio::task::JoinHandle<()>);

impl Drop for HangUp {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends one request on a fresh connection and returns the response with its body unread.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> http::Response<Incoming> {
    // Dropping the task handle detaches it: the connection lives until the body is read.
    exchange(addr, method, path, headers, body.into()).await.0
}

/// Like [`send`], with a guard that hangs up when dropped.
pub async fn open(addr: SocketAddr, path: &str) -> (http::Response<Incoming>, HangUp) {
    let (response, connection) = exchange(addr, "POST", path, &[], Bytes::from_static(b"{}")).await;
    (response, HangUp(connection))
}

async fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> (http::Response<Incoming>, tokio::task::JoinHandle<()>) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(body)).unwrap();
    let response = sender.send_request(request).await.unwrap();
    (response, connection)
}

/// Sends one request and reads the whole response.
pub async fn fetch(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: impl Into<Bytes>,
) -> (StatusCode, HeaderMap, Bytes) {
    let response = send(
        addr,
        method,
        path,
        &[("content-type", "application/json")],
        body,
    )
    .await;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, body)
}

/// Writes `request` verbatim on a new connection and reads until the server closes it.
pub fn raw_exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(request).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    response
}

/// Splits a raw HTTP/1.1 response into its head and the data of each chunked-encoding chunk.
pub fn decode_chunked(response: &[u8]) -> (String, Vec<Vec<u8>>) {
    let head_end = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8(response[..head_end].to_vec()).unwrap();
    let mut rest = &response[head_end..];
    let mut chunks = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap(), 16).unwrap();
        rest = &rest[line_end + 2..];
        if size == 0 {
            return (head, chunks);
        }
        chunks.push(rest[..size].to_vec());
        assert_eq!(
            &rest[size..size + 2],
            b"\r\n",
            "chunk data must end with CRLF"
        );
        rest = &rest[size + 2..];
    }
}
