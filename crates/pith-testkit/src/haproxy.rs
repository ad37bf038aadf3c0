//! A real HAProxy for tests: Debian's `haproxy` (installed by `scripts/test`, or the binary
//! `PITH_TEST_HAPROXY` names) in front of pith instances, run with the config the project ships
//! for a team gateway (`scripts/gateway/haproxy.cfg`, one `server` line appended per instance),
//! on a free loopback port. Its runtime API (a Unix socket) tells which instances its health
//! checks have taken in or out, so a test waits on that instead of the clock.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The config the project ships for a team gateway.
pub fn shipped_config() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gateway/haproxy.cfg")
}

/// Why HAProxy could not be had.
#[derive(Debug, thiserror::Error)]
pub enum HaproxyError {
    /// No binary.
    #[error(
        "no haproxy binary (looked at $PITH_TEST_HAPROXY and PATH): install Debian's haproxy \
         package (scripts/test does)"
    )]
    NotInstalled,
    /// A step failed.
    #[error("{step}: {source}")]
    Io {
        /// What was being done.
        step: String,
        /// Why.
        source: std::io::Error,
    },
    /// It refused the config or did not come up.
    #[error("haproxy did not start: {0}")]
    NotReady(String),
}

fn io(step: &str) -> impl FnOnce(std::io::Error) -> HaproxyError + '_ {
    move |source| HaproxyError::Io {
        step: step.to_owned(),
        source,
    }
}

/// A running HAProxy; stopped when dropped.
pub struct Haproxy {
    child: Child,
    addr: SocketAddr,
    stats: PathBuf,
    _dir: tempfile::TempDir,
}

/// An instance's state as HAProxy's health checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerState {
    /// Its name in the config (`pith1`, ...).
    pub name: String,
    /// `UP`, `DOWN`, `MAINT`, or a transition such as `UP 1/2`.
    pub status: String,
    /// Sessions HAProxy sent it so far (`stot`; in HTTP mode a request each).
    pub sessions: u64,
    /// Sessions on it now (`scur`: a request in flight, a stream open).
    pub current: u64,
}

impl Haproxy {
    /// HAProxy on a free loopback port, balancing over `servers` (named `pith1`, `pith2`, ...
    /// in order) with health checks every `check`.
    pub fn start(servers: &[SocketAddr], check: Duration) -> Result<Haproxy, HaproxyError> {
        let bin = std::env::var_os("PITH_TEST_HAPROXY")
            .map(PathBuf::from)
            .or_else(|| {
                ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
                    .into_iter()
                    .map(PathBuf::from)
                    .find(|p| p.exists())
            })
            .ok_or(HaproxyError::NotInstalled)?;
        let dir = tempfile::tempdir().map_err(io("a directory for haproxy"))?;
        let mut config =
            std::fs::read_to_string(shipped_config()).map_err(io("reading the shipped config"))?;
        for (i, server) in servers.iter().enumerate() {
            config.push_str(&format!("    server pith{} {server}\n", i + 1));
        }
        let cfg = dir.path().join("haproxy.cfg");
        std::fs::write(&cfg, config).map_err(io("writing haproxy.cfg"))?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(io("a free port"))?
            .port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let stats = dir.path().join("stats.sock");
        let child = Command::new(&bin)
            .arg("-f")
            .arg(&cfg)
            .arg("-db")
            .env("PITH_GATEWAY_LISTEN", addr.to_string())
            .env("PITH_GATEWAY_CHECK", format!("{}ms", check.as_millis()))
            .env("PITH_GATEWAY_STATS", &stats)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io("starting haproxy"))?;
        let mut haproxy = Haproxy {
            child,
            addr,
            stats,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while haproxy.servers().is_err() {
            if let Ok(Some(_)) = haproxy.child.try_wait() {
                let mut said = String::new();
                if let Some(mut e) = haproxy.child.stderr.take() {
                    let _ = e.read_to_string(&mut said);
                }
                return Err(HaproxyError::NotReady(said));
            }
            if Instant::now() > deadline {
                return Err(HaproxyError::NotReady(
                    "its runtime API did not answer within 10 s".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(haproxy)
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its process id (for a benchmark's CPU and memory figures).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://` and its address.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Each instance as HAProxy sees it now (`show stat` of the backend).
    pub fn servers(&self) -> std::io::Result<Vec<ServerState>> {
        let mut socket = UnixStream::connect(&self.stats)?;
        socket.write_all(b"show stat\n")?;
        let mut csv = String::new();
        socket.read_to_string(&mut csv)?;
        let mut lines = csv.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .trim_start_matches("# ")
            .split(',')
            .collect();
        let col = |name: &str| header.iter().position(|h| *h == name);
        let (Some(px), Some(sv), Some(status), Some(total), Some(current)) = (
            col("pxname"),
            col("svname"),
            col("status"),
            col("stot"),
            col("scur"),
        ) else {
            return Err(std::io::Error::other(format!("unexpected stats: {csv}")));
        };
        Ok(lines
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|f| {
                f.len() > total.max(current) && f[px] == "pith" && f[sv].starts_with("pith")
            })
            .map(|f| ServerState {
                name: f[sv].to_owned(),
                status: f[status].to_owned(),
                sessions: f[total].parse().unwrap_or(0),
                current: f[current].parse().unwrap_or(0),
            })
            .collect())
    }

    /// Wait until the health checks have `name` in state `status` (`UP`, `DOWN`), at most
    /// `limit`; whether they did.
    pub fn wait_for(&self, name: &str, status: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let now = self.servers().unwrap_or_default();
            if now.iter().any(|s| s.name == name && s.status == status) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
