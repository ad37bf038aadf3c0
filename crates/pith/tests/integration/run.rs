//! `pith run`: the real clients (as scripts/test installs them) do the fix-calc task through
//! `pith run` against the mock upstream, with a private home each: with no proxy running (pith
//! starts a shared one in the background), with one running (pith uses it), and with the port
//! taken by something that is not pith (the client goes straight to the mock, and one line
//! names the port). Then the shared proxy's life: two `pith run` at once start one proxy, the
//! first client exiting does not stop it, and it stops once idle with no client left.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use pith_testkit::fixtures::{DEFAULT_USAGE, ToolCall, anthropic, responses};
use pith_testkit::{MockUpstream, Reply};
use serde_json::Value;

use crate::clients::{self, Launch, Run};
use crate::support::{PithProxy, pith_bin, wait_rows_at};

const TASK: &str = "the test fails, fix calc.py";
const DONE: &str = "Fixed: add now adds.";

/// The captures' project: a git repository with a buggy `calc.py` and its test.
fn project() -> (tempfile::TempDir, tempfile::TempDir) {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    std::fs::write(
        work.path().join("test_calc.py"),
        "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    )
    .unwrap();
    clients::git_commit_all(work.path());
    (work, tempfile::tempdir().unwrap())
}

fn fixed(work: &Path) -> bool {
    std::fs::read_to_string(work.join("calc.py"))
        .unwrap()
        .contains("return a + b")
}

/// A loopback port nothing listens on (bound, then let go).
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `GET /pith/health` on `addr`, as JSON, if pith answers there.
fn health(addr: SocketAddr) -> Option<Value> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    // The proxy serves its pages to loopback host names only (it has no token here).
    s.write_all(
        format!("GET /pith/health HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n")
            .as_bytes(),
    )
    .ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    let (_, body) = reply.split_once("\r\n\r\n")?;
    serde_json::from_str(body).ok()
}

/// A `$PITH_HOME` and a port for `pith run`, with both upstreams at the mock; on drop it stops
/// the proxy `pith run` started there (found through its health page).
struct Shared {
    home: tempfile::TempDir,
    addr: SocketAddr,
    env: Vec<(&'static str, OsString)>,
}

impl Shared {
    fn new(mock: &MockUpstream, addr: SocketAddr, home: tempfile::TempDir) -> Shared {
        let env = vec![
            ("PITH_HOME", home.path().as_os_str().to_owned()),
            ("PITH_LISTEN", addr.to_string().into()),
            ("PITH_ANTHROPIC_UPSTREAM", mock.url().into()),
            ("PITH_OPENAI_UPSTREAM", mock.url().into()),
            ("PITH_IDLE_STOP", "20s".into()),
        ];
        Shared { home, addr, env }
    }

    /// How many proxies `pith run` started here (each writes its banner to the log).
    fn started(&self) -> usize {
        std::fs::read_to_string(self.home.path().join("logs/proxy.log"))
            .map(|log| log.matches("pith proxy listening on").count())
            .unwrap_or(0)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("logs/proxy.log")).unwrap_or_default()
    }

    fn pid(&self) -> Option<u64> {
        health(self.addr).and_then(|h| h["pid"].as_u64())
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.started() > 0
            && let Some(pid) = self.pid()
        {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

/// The notice a client that went straight to its provider was given.
fn notice(run: &Run) -> Option<&str> {
    run.stderr
        .lines()
        .find(|l| l.starts_with("pith: ") && l.contains("runs straight to its provider"))
}

/// Claude Code fixes calc.py: it reads the file, edits it, and is done.
fn claude_fixes_calc(launch: Launch, mock: &MockUpstream, work: &Path, home: &Path) -> Run {
    let calc = work.join("calc.py");
    let calc = calc.to_str().unwrap();
    let turn = |id: &str, tool: &str, input: Value| {
        Reply::sse(anthropic::stream_with_tool(
            &[],
            &ToolCall::new(id, tool, &input.to_string()),
            DEFAULT_USAGE,
        ))
    };
    mock.push(turn(
        "toolu_01",
        "Read",
        serde_json::json!({"file_path": calc}),
    ));
    mock.push(turn(
        "toolu_02",
        "Edit",
        serde_json::json!({"file_path": calc, "old_string": "return a - b", "new_string": "return a + b"}),
    ));
    mock.push(Reply::sse(anthropic::stream(&[DONE], DEFAULT_USAGE)));
    let run = clients::claude_code_via(
        launch,
        work,
        home,
        &mock.url(),
        &["--allowedTools", "Read Edit", "--"],
        TASK,
        clients::LIMIT,
        &[],
    );
    assert_eq!(run.stdout, format!("{DONE}\n"), "{}", run.stderr);
    run
}

/// Codex fixes calc.py with one patch, and is done.
fn codex_fixes_calc(launch: Launch, mock: &MockUpstream, work: &Path, home: &Path) -> Run {
    clients::write_codex_config(home, &format!("{}/v1", mock.url()));
    mock.push(Reply::sse(responses::stream_with_custom_tool(
        &ToolCall::new(
            "call_01",
            "apply_patch",
            "*** Begin Patch\n*** Update File: calc.py\n@@\n def add(a, b):\n-    return a - b\n+    return a + b\n*** End Patch\n",
        ),
        DEFAULT_USAGE,
    )));
    mock.push(Reply::sse(responses::stream(&[DONE], DEFAULT_USAGE)));
    let run = clients::codex_via(launch, work, home, &[], TASK, clients::LIMIT, &[]);
    assert_eq!(run.stdout, format!("{DONE}\n"), "{}", run.stderr);
    run
}

/// OpenCode fixes calc.py: it reads the file, edits it, and is done (its title call, without
/// tools, takes the mock's default answer).
fn opencode_fixes_calc(launch: Launch, mock: &MockUpstream, work: &Path, home: &Path) -> Run {
    let calc = work.join("calc.py");
    let calc = calc.to_str().unwrap();
    let has_tools = |body: &[u8]| clients::has(body, "\"tools\":[");
    let turn = |id: &str, tool: &str, input: Value| {
        Reply::sse(anthropic::stream_with_tool(
            &[],
            &ToolCall::new(id, tool, &input.to_string()),
            DEFAULT_USAGE,
        ))
    };
    mock.push_when(
        has_tools,
        turn("toolu_01", "read", serde_json::json!({"filePath": calc})),
    );
    mock.push_when(
        has_tools,
        turn(
            "toolu_02",
            "edit",
            serde_json::json!({"filePath": calc, "oldString": "return a - b", "newString": "return a + b"}),
        ),
    );
    mock.push_when(
        has_tools,
        Reply::sse(anthropic::stream(&[DONE], DEFAULT_USAGE)),
    );
    let base = format!("{}/v1", mock.url());
    let run = clients::opencode_via(launch, work, home, &base, &[], TASK, clients::LIMIT);
    assert!(run.stdout.contains(DONE), "{}\n{}", run.stdout, run.stderr);
    run
}

type Task = fn(Launch, &MockUpstream, &Path, &Path) -> Run;

/// How many main-loop requests each client's task sends.
const TASKS: [(&str, Task, usize); 3] = [
    ("claude", claude_fixes_calc, 3),
    ("codex", codex_fixes_calc, 2),
    ("opencode", opencode_fixes_calc, 3),
];

#[test]
fn each_client_fixes_calc_through_a_proxy_pith_run_starts() {
    for (name, task, turns) in TASKS {
        let mock = MockUpstream::start().unwrap();
        let shared = Shared::new(&mock, free_port(), tempfile::tempdir().unwrap());
        let (work, home) = project();
        let run = task(
            Launch::PithRun(&shared.env),
            &mock,
            work.path(),
            home.path(),
        );
        run.assert_ok(&format!("pith's log:\n{}", shared.log()));
        assert!(fixed(work.path()), "{name} did not fix calc.py");
        assert_eq!(notice(&run), None, "{name}: {}", run.stderr);
        assert_eq!(
            mock.queued_replies(),
            0,
            "{name}: every turn reached the mock"
        );
        // One proxy was started, it carried every request, and it outlives the client.
        assert_eq!(shared.started(), 1, "{}", shared.log());
        let rows = wait_rows_at(
            shared.addr,
            None,
            &shared.home.path().join("ledger.db"),
            turns,
        );
        assert!(
            rows.iter().all(|r| r.outcome.as_str() == "ok"),
            "{name}: {rows:?}"
        );
        let h = health(shared.addr).expect("the shared proxy outlives its client");
        assert_eq!(h["pith"], env!("CARGO_PKG_VERSION"));
        // It serves every project: it keeps none as its working directory (stop 65's review).
        #[cfg(target_os = "linux")]
        {
            let pid = h["pid"].as_u64().expect("health names its pid");
            assert_eq!(
                std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
                std::path::Path::new("/"),
                "{name}"
            );
        }
    }
}

#[test]
fn each_client_fixes_calc_through_the_proxy_already_running() {
    for (name, task, turns) in TASKS {
        let mock = MockUpstream::start().unwrap();
        let pith = PithProxy::start(&mock.url(), &[]);
        let mut shared = Shared::new(&mock, pith.addr, tempfile::tempdir().unwrap());
        // The running proxy's own $PITH_HOME: its ledger, and no log of a proxy started.
        shared.env[0].1 = pith.home.path().as_os_str().to_owned();
        let (work, home) = project();
        let run = task(
            Launch::PithRun(&shared.env),
            &mock,
            work.path(),
            home.path(),
        );
        run.assert_ok(&format!("pith:\n{}", pith.stderr()));
        assert!(fixed(work.path()), "{name} did not fix calc.py");
        assert_eq!(notice(&run), None, "{name}: {}", run.stderr);
        assert!(
            !pith.home.path().join("logs/proxy.log").exists(),
            "{name}: pith run started a second proxy"
        );
        let rows = pith.wait_rows(turns);
        assert!(rows.len() >= turns, "{name}: {rows:?}");
    }
}

/// Answers every connection with a 404 that is not pith's.
fn not_pith(listener: TcpListener) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(
                b"HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: 9\r\nconnection: close\r\n\r\nnot here\n",
            );
        }
    });
}

#[test]
fn each_client_fixes_calc_straight_to_the_provider_when_the_port_is_not_pith() {
    for (name, task, turns) in TASKS {
        let mock = MockUpstream::start().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        not_pith(listener);
        let shared = Shared::new(&mock, addr, tempfile::tempdir().unwrap());
        let (work, home) = project();
        let started = Instant::now();
        let run = task(
            Launch::PithRun(&shared.env),
            &mock,
            work.path(),
            home.path(),
        );
        run.assert_ok("");
        assert!(fixed(work.path()), "{name} did not fix calc.py");
        let line = notice(&run).unwrap_or_else(|| panic!("{name}: no notice in {}", run.stderr));
        assert!(
            line.contains(&format!("port {}", addr.port())),
            "{name}: {line}"
        );
        assert_eq!(
            run.stderr
                .lines()
                .filter(|l| l.starts_with("pith: "))
                .count(),
            1,
            "{name}: one line: {}",
            run.stderr
        );
        assert_eq!(shared.started(), 0, "{name}: {}", shared.log());
        assert!(!shared.home.path().join("ledger.db").exists());
        // Straight to the mock: every turn, the client's own requests.
        let received = mock.received();
        assert!(received.len() >= turns, "{name}: {}", received.len());
        assert!(started.elapsed() < clients::LIMIT);
    }
}

/// A stand-in client on PATH under `name`: a shell script.
fn fake_client(dir: &Path, name: &str, script: &str) -> OsString {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = bin.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut dirs = vec![bin];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

fn pith_run(shared: &Shared, path: &OsString, args: &[&str]) -> Command {
    let mut cmd = Command::new(pith_bin());
    cmd.arg("run")
        .args(args)
        .env("PATH", path)
        .env_remove("PITH_CONFIG");
    for (k, v) in &shared.env {
        cmd.env(k, v);
    }
    cmd
}

#[test]
fn two_pith_runs_at_once_start_one_proxy_that_outlives_the_first_client() {
    let mock = MockUpstream::start().unwrap();
    let shared = Shared::new(&mock, free_port(), tempfile::tempdir().unwrap());
    // The second session answers slowly: its client is still working when the first exits.
    let slow = |body: &[u8]| clients::has(body, "slow session");
    mock.push_when(
        slow,
        Reply::stream(pith_testkit::fixtures::split_at_events(
            &anthropic::stream(&["slow ", "done"], DEFAULT_USAGE),
            Duration::from_millis(700),
        )),
    );
    mock.push_when(
        |b| clients::has(b, "quick session"),
        Reply::sse(anthropic::stream(&["quick done"], DEFAULT_USAGE)),
    );
    let (work_a, home_a) = project();
    let (work_b, home_b) = project();
    let mock_url = mock.url();
    let env = shared.env.clone();
    let b = std::thread::spawn(move || {
        let run = clients::claude_code_via(
            Launch::PithRun(&env),
            work_b.path(),
            home_b.path(),
            &mock.url(),
            &[],
            "slow session",
            clients::LIMIT,
            &[],
        );
        (run, mock)
    });
    let env = shared.env.clone();
    let a = clients::claude_code_via(
        Launch::PithRun(&env),
        work_a.path(),
        home_a.path(),
        &mock_url,
        &[],
        "quick session",
        clients::LIMIT,
        &[],
    );
    a.assert_ok(&shared.log());
    assert_eq!(a.stdout, "quick done\n");
    let pid = shared
        .pid()
        .expect("the proxy is up after the first client exits");
    let (b, mock) = b.join().unwrap();
    b.assert_ok(&shared.log());
    assert_eq!(b.stdout, "slow done\n");
    assert_eq!(notice(&a), None, "{}", a.stderr);
    assert_eq!(notice(&b), None, "{}", b.stderr);
    // One proxy served both, and still serves after the second.
    assert_eq!(shared.started(), 1, "{}", shared.log());
    assert_eq!(shared.pid(), Some(pid));
    assert_eq!(mock.queued_replies(), 0);
    let rows = wait_rows_at(shared.addr, None, &shared.home.path().join("ledger.db"), 2);
    assert_eq!(rows.len(), 2, "{rows:?}");
}

#[test]
fn the_shared_proxy_waits_for_its_last_client_then_stops_when_idle() {
    let mock = MockUpstream::start().unwrap();
    let mut shared = Shared::new(&mock, free_port(), tempfile::tempdir().unwrap());
    shared.env.retain(|(k, _)| *k != "PITH_IDLE_STOP");
    shared.env.push(("PITH_IDLE_STOP", "300ms".into()));
    let dir = tempfile::tempdir().unwrap();
    let stop = dir.path().join("stop");
    // A client that opens no connection and lives until told to stop.
    let path = fake_client(
        dir.path(),
        "claude",
        &format!("while [ ! -e '{}' ]; do sleep 0.05; done", stop.display()),
    );
    let mut client = pith_run(&shared, &path, &["claude"])
        .env("ANTHROPIC_BASE_URL", mock.url())
        .spawn()
        .unwrap();
    pith_testkit::wait::wait_for("the shared proxy up", Duration::from_secs(10), || {
        shared.pid().ok_or_else(|| shared.log())
    });
    // Well past the idle time, with no connection open: the client holds it up.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        shared.pid().is_some(),
        "stopped under a running client: {}",
        shared.log()
    );
    std::fs::write(&stop, "").unwrap();
    assert!(client.wait().unwrap().success());
    // Asked less often than the idle time: each question is a connection, which is activity.
    let deadline = Instant::now() + Duration::from_secs(10);
    while health(shared.addr).is_some() {
        assert!(
            Instant::now() < deadline,
            "the idle proxy did not stop: {}",
            shared.log()
        );
        std::thread::sleep(Duration::from_millis(700));
    }
    assert!(
        shared.log().contains("idle for 300ms: stopping"),
        "{}",
        shared.log()
    );
}

#[test]
fn the_clients_exit_code_comes_back_and_a_missing_client_is_named() {
    let mock = MockUpstream::start().unwrap();
    let shared = Shared::new(&mock, free_port(), tempfile::tempdir().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let path = fake_client(dir.path(), "codex", "echo \"$@\"; exit 7");
    let out = pith_run(&shared, &path, &["codex", "exec", "--", "-c", "hi"])
        .env("CODEX_HOME", dir.path())
        .env("OPENAI_BASE_URL", format!("{}/v1", mock.url()))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The wiring leads, the client's own arguments follow as they were, `--` included.
    let port = shared.addr.port();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("-c openai_base_url=\"http://127.0.0.1:{port}/v1\" exec -- -c hi\n")
    );
    let empty = tempfile::tempdir().unwrap();
    let out = pith_run(&shared, &empty.path().as_os_str().to_owned(), &["opencode"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("opencode is not on PATH"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A client that is not on PATH is named before anything starts: no proxy is left up for it.
#[test]
fn a_missing_client_starts_no_proxy() {
    let mock = MockUpstream::start().unwrap();
    let shared = Shared::new(&mock, free_port(), tempfile::tempdir().unwrap());
    let empty = tempfile::tempdir().unwrap();
    for name in ["claude", "claude-code", "opencode"] {
        let out = pith_run(&shared, &empty.path().as_os_str().to_owned(), &[name])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("is not on PATH"), "{err}");
    }
    assert_eq!(shared.started(), 0, "{}", shared.log());
    assert!(health(shared.addr).is_none(), "a proxy answers");
}

/// A setting the proxy would refuse is named at once, and the client goes straight to its
/// provider (before stop 65 it waited two seconds for a proxy that had already exited, and the
/// reason was only in the proxy's log).
#[test]
fn a_setting_the_proxy_refuses_is_named_and_the_client_goes_straight_at_once() {
    let mock = MockUpstream::start().unwrap();
    let mut shared = Shared::new(&mock, free_port(), tempfile::tempdir().unwrap());
    shared.env.retain(|(k, _)| *k != "PITH_ANTHROPIC_UPSTREAM");
    shared
        .env
        .push(("PITH_ANTHROPIC_UPSTREAM", "not a url".into()));
    let dir = tempfile::tempdir().unwrap();
    let path = fake_client(dir.path(), "claude", "echo \"base=$ANTHROPIC_BASE_URL\"");
    let started = Instant::now();
    let out = pith_run(&shared, &path, &["claude"])
        .env("ANTHROPIC_BASE_URL", mock.url())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("base={}\n", mock.url())
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("pith: a pith proxy cannot start here: ")
            && stderr.contains("not a url")
            && stderr
                .trim_end()
                .ends_with("claude runs straight to its provider."),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(shared.started(), 0, "no proxy was started");
}

#[test]
fn a_proxy_that_does_not_come_up_means_straight_to_the_provider_after_two_seconds() {
    let mock = MockUpstream::start().unwrap();
    let shared = Shared::new(&mock, free_port(), tempfile::tempdir().unwrap());
    // The proxy pith run starts exits at once: its ledger's path is a directory (its settings
    // are valid; what it opens is not).
    std::fs::create_dir(shared.home.path().join("ledger.db")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = fake_client(dir.path(), "claude", "echo \"base=$ANTHROPIC_BASE_URL\"");
    let started = Instant::now();
    let out = pith_run(&shared, &path, &["claude"])
        .env("ANTHROPIC_BASE_URL", mock.url())
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    assert!(out.status.success());
    // The client ran unchanged: its own base URL, not the proxy's.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("base={}\n", mock.url())
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains(&format!("127.0.0.1:{}", shared.addr.port()))
            && lines[0].contains("within 2 s")
            && lines[0].contains("logs/proxy.log")
            && lines[0].ends_with("claude runs straight to its provider."),
        "{stderr}"
    );
    assert!(
        elapsed >= Duration::from_secs(2) && elapsed < Duration::from_secs(6),
        "{elapsed:?}"
    );
    // The proxy's own reason is in its log.
    assert!(shared.log().contains("ledger.db"), "{}", shared.log());
}

#[test]
fn a_proxy_with_an_access_token_is_found_and_the_client_sends_the_token() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_PROXY_TOKEN", "s3cret")]);
    let mut shared = Shared::new(&mock, pith.addr, tempfile::tempdir().unwrap());
    shared.env.push(("PITH_PROXY_TOKEN", "s3cret".into()));
    let dir = tempfile::tempdir().unwrap();
    let path = fake_client(
        dir.path(),
        "claude",
        "echo \"base=$ANTHROPIC_BASE_URL\"; echo \"headers=$ANTHROPIC_CUSTOM_HEADERS\"",
    );
    let out = pith_run(&shared, &path, &["claude"])
        .env("ANTHROPIC_BASE_URL", mock.url())
        .env("ANTHROPIC_CUSTOM_HEADERS", "x-team: a")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "the proxy answered its health page to the token"
    );
    // The client's own headers stay; the token is added on a line of its own.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "base=http://{}\nheaders=x-team: a\nx-pith-token: s3cret\n",
            pith.addr
        )
    );
    // Without the token, the proxy does not answer as pith: the client goes straight.
    shared.env.retain(|(k, _)| *k != "PITH_PROXY_TOKEN");
    let out = pith_run(&shared, &path, &["claude"])
        .env("ANTHROPIC_BASE_URL", mock.url())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("access token"), "{stderr}");
    assert!(stderr.contains("runs straight to its provider"), "{stderr}");
}
