//! The shared background proxy that `pith run` starts and reuses: how to tell that pith answers
//! on an address (`/pith/health`), the locks that keep one proxy per data directory, and where
//! its log goes.
//!
//! Files under `$PITH_HOME`:
//! - `run/start.lock`: held (exclusive) by the one `pith run` that starts a proxy, so two
//!   started at once start one proxy, not a race for the port;
//! - `run/clients.lock`: held shared by every client `pith run` started, for the client's whole
//!   life (the descriptor is inherited across `exec`); a proxy started with `--idle-stop` stops
//!   only when it can take it exclusively, that is when no such client is left;
//! - `logs/proxy.log`: the background proxy's stderr, appended.
//!
//! Everything here is blocking std I/O with short timeouts: `pith run` pays it before every
//! client start, so it starts no async runtime.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;

/// What answered on the proxy's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// A pith proxy.
    Pith(Health),
    /// Something that is not pith (the text says what was seen).
    Other(String),
    /// Nothing listens there.
    Nothing,
}

/// A pith proxy's `/pith/health` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Its version (`CARGO_PKG_VERSION`).
    pub version: String,
    /// Its process id (absent from older versions).
    pub pid: Option<u32>,
    /// Where it sends Anthropic traffic (absent from older versions).
    pub anthropic: Option<String>,
    /// Where it sends OpenAI traffic (absent from older versions).
    pub openai: Option<String>,
    /// Where it sends ChatGPT-backend traffic (absent from older versions).
    pub chatgpt: Option<String>,
}

/// How long one probe may take: a loopback connect is refused or accepted at once, and the
/// health page is answered without touching the ledger.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Ask `addr` for `/pith/health` (with the access token, when one is configured).
pub fn probe(addr: SocketAddr, token: Option<&str>, timeout: Duration) -> Probe {
    let mut stream = match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Probe::Nothing,
        Err(e) => return Probe::Other(format!("connecting failed: {e}")),
    };
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    let _ = stream.set_nodelay(true);
    let token = token
        .map(|t| format!("{}: {t}\r\n", pith_proxy::TOKEN_HEADER))
        .unwrap_or_default();
    let request = format!(
        "GET /pith/health HTTP/1.1\r\nhost: {addr}\r\naccept: application/json\r\n{token}connection: close\r\n\r\n"
    );
    if let Err(e) = stream.write_all(request.as_bytes()) {
        return Probe::Other(format!("it closed the connection ({e})"));
    }
    let mut reply = Vec::new();
    // A reply larger than this is not pith's health page.
    if let Err(e) = (&mut stream).take(64 << 10).read_to_end(&mut reply)
        && reply.is_empty()
    {
        return Probe::Other(format!("it did not answer HTTP ({e})"));
    }
    parse_health(&reply)
}

/// A raw HTTP reply to `GET /pith/health`, read.
fn parse_health(reply: &[u8]) -> Probe {
    let text = String::from_utf8_lossy(reply);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Probe::Other("it did not answer HTTP".to_owned());
    };
    let status = head.lines().next().unwrap_or("");
    if !status.starts_with("HTTP/1.") {
        return Probe::Other("it did not answer HTTP".to_owned());
    }
    let code = status.split_whitespace().nth(1).unwrap_or("");
    let health: Option<Value> = serde_json::from_str(body.trim()).ok();
    // The liveness answer (`{"status": ...}` alone) is what pith tells a caller its page rules
    // do not admit: here, a probe without the proxy's access token.
    let liveness_only = health
        .as_ref()
        .is_some_and(|h| h.get("status").is_some() && h.get("pith").is_none());
    match health
        .as_ref()
        .and_then(|h| h.get("pith"))
        .and_then(Value::as_str)
    {
        Some(version) if code == "200" => {
            let field = |k: &str| {
                health
                    .as_ref()
                    .and_then(|h| h[k].as_str())
                    .map(str::to_owned)
            };
            Probe::Pith(Health {
                version: version.to_owned(),
                pid: health
                    .as_ref()
                    .and_then(|h| h["pid"].as_u64())
                    .and_then(|p| u32::try_from(p).ok()),
                anthropic: field("anthropic"),
                openai: field("openai"),
                chatgpt: field("chatgpt"),
            })
        }
        Some(_) if code == "503" => Probe::Other(
            "a pith proxy that is stopping (its health check fails while it drains); try again \
             once it has stopped"
                .to_owned(),
        ),
        None if liveness_only && code == "503" => Probe::Other(
            "a pith proxy that is stopping (its health check fails while it drains); try again \
             once it has stopped"
                .to_owned(),
        ),
        None if liveness_only => Probe::Other(
            "a pith proxy that shows its details only with its access token (set \
             PITH_PROXY_TOKEN or [proxy] token to the one it was started with)"
                .to_owned(),
        ),
        _ if code == "401" => {
            Probe::Other("it answered 401 (a pith proxy wanting another access token?)".to_owned())
        }
        _ => Probe::Other(format!("an HTTP server that is not pith ({status})")),
    }
}

/// `$PITH_HOME/run/start.lock`.
pub fn start_lock_path(home: &Path) -> PathBuf {
    home.join("run").join("start.lock")
}

/// `$PITH_HOME/run/clients.lock`.
pub fn clients_lock_path(home: &Path) -> PathBuf {
    home.join("run").join("clients.lock")
}

/// `$PITH_HOME/logs/proxy.log`.
pub fn log_path(home: &Path) -> PathBuf {
    home.join("logs").join("proxy.log")
}

/// Create `dir` and its missing parents 0700, whatever the umask.
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

/// Open (creating) a file of pith's: the directory 0700 and the file 0600 whatever the umask,
/// never through a link ([`pith_paths::private::open`], which the proxy's spool uses too).
pub fn open_private(path: &Path, append: bool) -> anyhow::Result<File> {
    if let Some(dir) = path.parent() {
        create_private_dir(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.create(true);
    if append {
        options.append(true);
    } else {
        options.read(true).write(true);
    }
    // A link in its place is never followed: it could lead pith to create or lock a file
    // elsewhere (another user's, in a shared directory).
    #[cfg(unix)]
    let opened = pith_paths::private::open(path, &mut options);
    #[cfg(not(unix))]
    let opened = options.open(path);
    opened.with_context(|| {
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            format!(
                "cannot open {}: it is a link, and pith opens no file of its own through one; \
                 remove it",
                path.display()
            )
        } else {
            format!("cannot open {}", path.display())
        }
    })
}

/// Take a lock on `file` (shared or exclusive), trying until `deadline`: `Ok(false)` when
/// another holder kept it that long, `Err` when the lock itself failed.
pub fn lock_until(file: &File, shared: bool, deadline: Instant) -> std::io::Result<bool> {
    loop {
        let taken = if shared {
            file.try_lock_shared()
        } else {
            file.try_lock()
        };
        match taken {
            Ok(()) => return Ok(true),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => return Ok(false),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// The exclusive clients lock when no `pith run` client holds it (the proxy may stop: keep it
/// until the process ends, so no client starts on a proxy that is going away).
pub fn no_clients(path: &Path) -> Option<File> {
    let file = open_private(path, false).ok()?;
    file.try_lock().ok().map(|()| file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_replies_are_told_apart() {
        let pith = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 9\r\n\r\n{\"pith\":\"0.1.0\",\"pid\":42,\"anthropic\":\"http://a\",\"openai\":\"http://o\",\"chatgpt\":\"http://c\"}";
        assert_eq!(
            parse_health(pith),
            Probe::Pith(Health {
                version: "0.1.0".into(),
                pid: Some(42),
                anthropic: Some("http://a".into()),
                openai: Some("http://o".into()),
                chatgpt: Some("http://c".into()),
            })
        );
        let older = b"HTTP/1.1 200 OK\r\n\r\n{\"pith\":\"0.0.9\",\"ledger\":true}";
        assert!(
            matches!(parse_health(older), Probe::Pith(h) if h.version == "0.0.9" && h.pid.is_none())
        );
        for other in [
            &b"HTTP/1.1 404 Not Found\r\n\r\nno such page"[..],
            b"HTTP/1.1 200 OK\r\n\r\n{\"status\":\"ok\"}",
            b"SSH-2.0-OpenSSH_9.6\r\n",
            b"",
        ] {
            assert!(
                matches!(parse_health(other), Probe::Other(_)),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        // The liveness answer a proxy gives a probe without its token says so.
        let liveness = b"HTTP/1.1 200 OK\r\n\r\n{\"status\":\"ok\"}";
        assert!(
            matches!(parse_health(liveness), Probe::Other(why) if why.contains("access token"))
        );
    }
}
