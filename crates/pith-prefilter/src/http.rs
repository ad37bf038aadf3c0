//! A minimal blocking HTTP/1.1 client for a local Ollama server.
//!
//! Why not hyper or reqwest: the ranker is called from `search_workspace`, which is blocking and
//! runs both inside the tokio MCP server (via `spawn_blocking`) and from plain CLI code. A
//! std `TcpStream` with a hard deadline needs no runtime (hyper would need one, and building a
//! runtime inside tokio panics), adds no dependency, and the traffic is two requests to a
//! plain-HTTP loopback server: one request per connection (`Connection: close`), bodies framed by
//! `Content-Length` or chunked encoding (Go's net/http uses chunked for larger replies).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs as _};
use std::time::{Duration, Instant};

/// Largest reply accepted; a ranking reply is a few KB and /api/tags a few tens.
const MAX_RESPONSE_BYTES: usize = 8 << 20;

/// Why an HTTP exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The deadline passed before the reply was complete.
    #[error("timed out")]
    Timeout,
    /// Connecting, writing or reading failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The host name resolved to no address.
    #[error("{0}: no address")]
    NoAddress(String),
    /// The reply is not valid HTTP/1.x or is too large.
    #[error("malformed HTTP reply: {0}")]
    Malformed(&'static str),
    /// The server answered with an error status (see [`Response::ok`]).
    #[error("answered HTTP {status}: {body}")]
    Status {
        /// HTTP status.
        status: u16,
        /// Start of the body (Ollama puts `{"error": ...}` there).
        body: String,
    },
}

/// Where the server is: `http://host:port[/prefix]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    host: String,
    port: u16,
    base_path: String,
}

impl Endpoint {
    /// Parses a plain-HTTP base URL (Ollama serves no TLS); `None` for anything else.
    pub fn parse(url: &str) -> Option<Self> {
        let rest = url.trim().strip_prefix("http://")?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (host, after) = bracketed.split_once(']')?;
            let port = match after {
                "" => 80,
                port => port.strip_prefix(':')?.parse().ok()?,
            };
            (host, port)
        } else {
            match authority.split_once(':') {
                Some((host, port)) => (host, port.parse().ok()?),
                None => (authority, 80),
            }
        };
        if host.is_empty() {
            return None;
        }
        let base_path = path.trim_end_matches('/');
        Some(Self {
            host: host.to_owned(),
            port,
            base_path: if base_path.is_empty() {
                String::new()
            } else {
                format!("/{base_path}")
            },
        })
    }

    fn host_header(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// A complete reply.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    /// The reply if its status is 200; otherwise [`HttpError::Status`] with the start of the
    /// body, which says why.
    pub fn ok(self) -> Result<Response, HttpError> {
        if self.status == 200 {
            return Ok(self);
        }
        Err(HttpError::Status {
            status: self.status,
            body: String::from_utf8_lossy(&self.body)
                .chars()
                .take(200)
                .collect(),
        })
    }
}

/// Sends one request and reads the whole reply, all before `deadline`.
pub fn exchange(
    endpoint: &Endpoint,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    deadline: Instant,
) -> Result<Response, HttpError> {
    let mut stream = connect(endpoint, deadline)?;
    stream.set_nodelay(true)?;
    let body = body.unwrap_or_default();
    let mut request = format!(
        "{method} {}{path} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\n",
        endpoint.base_path,
        endpoint.host_header()
    );
    if method != "GET" {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    stream.set_write_timeout(Some(remaining(deadline)?))?;
    stream
        .write_all(request.as_bytes())
        .map_err(timeout_or_io)?;
    stream.write_all(body).map_err(timeout_or_io)?;

    let mut received = Vec::with_capacity(8192);
    let mut chunk = [0u8; 16384];
    loop {
        if let Some(response) = parse_response(&received, false)? {
            return Ok(response);
        }
        stream.set_read_timeout(Some(remaining(deadline)?))?;
        let read = stream.read(&mut chunk).map_err(timeout_or_io)?;
        if read == 0 {
            return parse_response(&received, true)?
                .ok_or(HttpError::Malformed("connection closed mid-reply"));
        }
        received.extend_from_slice(&chunk[..read]);
        if received.len() > MAX_RESPONSE_BYTES {
            return Err(HttpError::Malformed("reply too large"));
        }
    }
}

fn connect(endpoint: &Endpoint, deadline: Instant) -> Result<TcpStream, HttpError> {
    let addrs: Vec<SocketAddr> = (endpoint.host.as_str(), endpoint.port)
        .to_socket_addrs()?
        .collect();
    let mut last_error = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, remaining(deadline)?) {
            Ok(stream) => return Ok(stream),
            Err(err) => last_error = Some(err),
        }
    }
    Err(last_error.map_or_else(
        || HttpError::NoAddress(endpoint.host.clone()),
        timeout_or_io,
    ))
}

fn remaining(deadline: Instant) -> Result<Duration, HttpError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(HttpError::Timeout)
    } else {
        Ok(left)
    }
}

fn timeout_or_io(err: std::io::Error) -> HttpError {
    match err.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => HttpError::Timeout,
        _ => HttpError::Io(err),
    }
}

/// The reply in `data` if it is complete (`at_eof`: no more bytes will come); `None` if more
/// bytes are needed.
fn parse_response(data: &[u8], at_eof: bool) -> Result<Option<Response>, HttpError> {
    let Some(header_end) = find(data, b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&data[..header_end])
        .map_err(|_| HttpError::Malformed("non-UTF-8 header"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    if !parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) {
        return Err(HttpError::Malformed("bad status line"));
    }
    let status: u16 = parts
        .next()
        .and_then(|code| code.parse().ok())
        .ok_or(HttpError::Malformed("bad status code"))?;
    let mut content_length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(HttpError::Malformed("bad header line"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            content_length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| HttpError::Malformed("bad content-length"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    let body = &data[header_end + 4..];
    let body = if chunked {
        match decode_chunked(body)? {
            Some(decoded) => decoded,
            None if at_eof => return Err(HttpError::Malformed("truncated chunked body")),
            None => return Ok(None),
        }
    } else if let Some(length) = content_length {
        match body.get(..length) {
            Some(exact) => exact.to_vec(),
            None if at_eof => return Err(HttpError::Malformed("truncated body")),
            None => return Ok(None),
        }
    } else if at_eof {
        body.to_vec()
    } else {
        return Ok(None);
    };
    Ok(Some(Response { status, body }))
}

/// Decodes a chunked body; `None` while the terminating zero-size chunk has not arrived.
fn decode_chunked(mut data: &[u8]) -> Result<Option<Vec<u8>>, HttpError> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = find(data, b"\r\n") else {
            return Ok(None);
        };
        let size_field = std::str::from_utf8(&data[..line_end])
            .map_err(|_| HttpError::Malformed("bad chunk size"))?;
        let size_hex = size_field.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| HttpError::Malformed("bad chunk size"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            // Then optional trailer lines (ignored) and an empty line.
            let complete = data.starts_with(b"\r\n") || find(data, b"\r\n\r\n").is_some();
            return Ok(complete.then_some(out));
        }
        let Some(chunk) = data.get(..size) else {
            return Ok(None);
        };
        out.extend_from_slice(chunk);
        match data.get(size..size + 2) {
            Some(b"\r\n") => data = &data[size + 2..],
            Some(_) => return Err(HttpError::Malformed("chunk without CRLF")),
            None => return Ok(None),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_parsing() {
        let e = Endpoint::parse("http://127.0.0.1:11434").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.base_path.as_str()),
            ("127.0.0.1", 11434, "")
        );
        let e = Endpoint::parse("http://localhost/ollama/").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.base_path.as_str()),
            ("localhost", 80, "/ollama")
        );
        let e = Endpoint::parse("http://[::1]:8080").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 8080));
        assert_eq!(e.host_header(), "[::1]:8080");
        assert!(Endpoint::parse("https://example.invalid").is_none());
        assert!(Endpoint::parse("http://:99").is_none());
        assert!(Endpoint::parse("http://host:notaport").is_none());
    }

    /// The framing Go's net/http uses for a reply larger than its buffer.
    #[test]
    fn chunked_reply_as_go_sends_it() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n\
Date: Mon, 01 Jan 2026 00:00:00 GMT\r\nTransfer-Encoding: chunked\r\n\r\n\
7\r\n{\"a\":[1\r\n5\r\n,2,3]\r\n1\r\n}\r\n0\r\n\r\n";
        for cut in 0..wire.len() {
            assert!(
                parse_response(&wire[..cut], false).unwrap().is_none(),
                "cut {cut}"
            );
        }
        let response = parse_response(wire, false).unwrap().unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.body, b"{\"a\":[1,2,3]}");
    }

    #[test]
    fn content_length_reply_and_truncation() {
        let wire = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\nhello";
        let response = parse_response(wire, false).unwrap().unwrap();
        assert_eq!(
            (response.status, response.body.as_slice()),
            (500, &b"hello"[..])
        );
        assert!(
            parse_response(&wire[..wire.len() - 1], false)
                .unwrap()
                .is_none()
        );
        assert!(parse_response(&wire[..wire.len() - 1], true).is_err());
        assert!(parse_response(b"SSH-2.0-OpenSSH\r\n\r\n", true).is_err());
    }
}
