//! A team gateway: two pith instances on one PostgreSQL (as the team tests start it) behind a
//! real HAProxy running the config the project ships (`scripts/gateway/haproxy.cfg`),
//! round-robin per request. The real OpenCode 1.18.33 with a 40-tool MCP server goes through
//! it in a session where the model searches for a deferred tool: whichever instance serves
//! the next request puts the search blocks back (they are in the team store), deferral goes
//! on, and nothing busts. Then one instance is stopped mid-session, and the session goes on
//! through the other. Last, the stop itself: the health check fails first, then no new
//! connection is accepted, and an open stream finishes.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use pith_store::ledger::{Row, TransformResult};
use pith_testkit::fixtures::anthropic::{self, ToolSearch};
use pith_testkit::fixtures::{ToolCall, Usage};
use pith_testkit::haproxy::Haproxy;
use pith_testkit::postgres::PgServer;
use pith_testkit::upstream::Chunk;
use pith_testkit::{MockUpstream, Reply};
use serde_json::{Value, json};

use crate::clients::{self, Launch};
use crate::opencode::block_types;
use crate::support::*;

const TASK: &str = "find the open login bug in Jira";
const FINAL: &str = "No open issue matches the login bug.";
/// Health checks every 100 ms, two failures to take an instance out.
const CHECK: Duration = Duration::from_millis(100);

fn has_tools(body: &[u8]) -> bool {
    body.windows(9).any(|w| w == b"\"tools\":[")
}

const USAGE: Usage = pith_testkit::fixtures::DEFAULT_USAGE;

/// The session the mock plays: turn 1 searches the deferred tools for the Jira one and calls
/// it; turn 2 calls it again; turn 3 answers. `slow_second`: turn 2 streams over about 1.5 s
/// (the stop test stops an instance while it streams).
fn script_session(mock: &MockUpstream, slow_second: bool) {
    let search = ToolSearch {
        id: "srvtoolu_01Jira".to_owned(),
        pattern: "jira".to_owned(),
        found: vec!["demo_jira_op_7".to_owned()],
    };
    let first = ToolCall::new("toolu_01Jira", "demo_jira_op_7", r#"{"query":"login bug"}"#);
    mock.push_when(
        has_tools,
        Reply::sse(anthropic::stream_with_tool_search(&search, &first, USAGE)),
    );
    let again = ToolCall::new(
        "toolu_02Jira",
        "demo_jira_op_7",
        r#"{"query":"login bug","limit":50}"#,
    );
    let second = anthropic::stream_with_tool(&["Looking wider."], &again, USAGE);
    mock.push_when(
        has_tools,
        if slow_second {
            Reply::stream(pith_testkit::fixtures::split_at_events(
                &second,
                Duration::from_millis(150),
            ))
        } else {
            Reply::sse(second)
        },
    );
    mock.push_when(has_tools, Reply::sse(anthropic::stream(&[FINAL], USAGE)));
}

/// OpenCode with the 40-tool MCP server, its Anthropic provider at `base_url`.
fn opencode_with_jira(base_url: &str) -> clients::Run {
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    clients::write_calc_project(work.path());
    let mut config = clients::opencode_config(base_url, &Value::Null);
    config["mcp"] = json!({"demo": {
        "type": "local",
        "command": [python().to_string_lossy(), python_script("mcp40_server.py").to_string_lossy()],
        "enabled": true,
    }});
    clients::opencode_configured(
        Launch::Direct,
        work.path(),
        home.path(),
        &config,
        &[],
        TASK,
        clients::LIMIT,
    )
}

/// Two instances on one team database, and HAProxy in front with both taken in.
struct Gateway {
    mock: MockUpstream,
    instances: Vec<PithProxy>,
    haproxy: Haproxy,
    url: String,
}

impl Gateway {
    fn start(env: &[(&str, &str)]) -> Gateway {
        let url = PgServer::shared().database().unwrap();
        let mock = MockUpstream::start().unwrap();
        let mut env = env.to_vec();
        env.push(("PITH_STORE_URL", &url));
        let instances: Vec<PithProxy> = (0..2)
            .map(|_| PithProxy::start(&mock.url(), &env))
            .collect();
        let addrs: Vec<SocketAddr> = instances.iter().map(|p| p.addr).collect();
        let haproxy = Haproxy::start(&addrs, CHECK).unwrap();
        for name in ["pith1", "pith2"] {
            assert!(
                haproxy.wait_for(name, "UP", Duration::from_secs(10)),
                "{name} not taken in: {:?}",
                haproxy.servers()
            );
        }
        Gateway {
            mock,
            instances,
            haproxy,
            url,
        }
    }

    /// Every row of both instances (a stopped one wrote everything before it exited).
    fn rows(&self) -> Vec<Row> {
        let mut all = Vec::new();
        for pith in &self.instances {
            if pith.is_running() {
                pith.flush();
            }
            all.extend(rows(&pith.ledger_path()));
        }
        all
    }

    fn logs(&self) -> String {
        self.instances
            .iter()
            .map(PithProxy::stderr)
            .collect::<Vec<_>>()
            .join("\n---\n")
    }

    /// `pith stats --json` over the team database once it holds `requests` rows.
    fn team_stats(&self, requests: u64) -> Value {
        // The shippers run in the instances' processes with no barrier to ask: as the team
        // tests do, look again until the team ledger holds them.
        let home = tempfile::tempdir().unwrap();
        let stats = || crate::team::team_stats(home.path(), &self.url, &[]);
        pith_testkit::wait::wait_for(
            &format!("the team ledger holding {requests} rows"),
            SHIPPED_WITHIN,
            || stats()["total"]["requests"].as_u64() == Some(requests),
        );
        stats()
    }
}

/// The session's main-loop bodies as the mock received them, checked: every turn after the
/// first carries the search blocks back just before the tool_use they led to, with the same
/// tools section (deferral kept, the Jira tools deferred).
fn check_round_trip(mock: &MockUpstream) -> Vec<Value> {
    let turns = crate::opencode::main_loop_turns(mock);
    assert_eq!(turns.len(), 3, "three main-loop turns");
    let deferred = turns[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t.get("defer_loading").is_some())
        .count();
    assert!(deferred >= 40, "the 40 Jira tools deferred ({deferred})");
    for (n, turn) in turns.iter().enumerate().skip(1) {
        let types = block_types(turn);
        let at = types.iter().position(|t| t == "tool_use").unwrap();
        assert!(
            at >= 2
                && types[at - 2..=at] == ["server_tool_use", "tool_search_tool_result", "tool_use"],
            "turn {}: the search blocks are not back before the tool_use: {types:?}",
            n + 1
        );
        assert_eq!(turns[0]["tools"], turn["tools"], "turn {}'s tools", n + 1);
    }
    turns
}

/// What `stage` did on `row`, if it reported.
fn result_of<'a>(row: &'a Row, stage: &str) -> Option<&'a TransformResult> {
    row.transforms
        .iter()
        .find(|t| t.stage == stage)
        .map(|t| &t.result)
}

fn applied(row: &Row, stage: &str) -> bool {
    matches!(result_of(row, stage), Some(TransformResult::Applied(_)))
}

#[test]
fn opencode_through_haproxy_on_two_instances_keeps_deferral_and_busts_nothing() {
    let gw = Gateway::start(&[]);
    script_session(&gw.mock, false);
    let run = opencode_with_jira(&format!("{}/v1", gw.haproxy.url()));
    run.assert_ok(&gw.logs());
    let said = format!("{}\n{}", run.stdout, run.stderr);
    assert!(said.contains(FINAL), "{said}");
    // OpenCode never saw the search: no failed `invalid` call.
    assert!(!said.contains("invalid"), "{said}");
    check_round_trip(&gw.mock);

    // Round-robin per request: both instances served, and the blocks one instance hid were
    // put back by the other from the team store.
    let served = gw.mock.request_count() as u64;
    let rows = gw.rows();
    assert_eq!(rows.len() as u64, served, "each request a row, once");
    let hid = rows.iter().find(|r| applied(r, "search_hide")).unwrap();
    let fetched: Vec<&Row> = rows.iter().filter(|r| applied(r, "search_fetch")).collect();
    assert!(
        fetched.iter().any(|r| r.instance != hid.instance),
        "no request was served by the instance that did not hide the search: {:?}",
        rows.iter()
            .map(|r| (r.instance.clone(), disclosed(r)))
            .collect::<Vec<_>>()
    );
    for r in rows.iter().filter(|r| r.tools_bytes > 0) {
        assert_ne!(
            crate::support::unchanged_reason(r, "defer"),
            Some("mid_session_join"),
            "{:?}",
            disclosed(r)
        );
    }
    let per_server = gw.haproxy.servers().unwrap();
    assert!(per_server.iter().all(|s| s.sessions > 0), "{per_server:?}");

    // The team's stats count each request once, per instance too, and no bust.
    let report = gw.team_stats(served);
    let instances = report["by_instance"].as_array().unwrap();
    assert_eq!(instances.len(), 2, "{instances:?}");
    let per_instance: u64 = instances
        .iter()
        .map(|i| i["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(per_instance, served);
    assert_eq!(
        report["cache_busts"]["by_pith"], 0,
        "{}",
        report["cache_busts"]
    );
    // And `pith stats` shows the requests per instance, by name.
    let home = tempfile::tempdir().unwrap();
    let text = std::process::Command::new(pith_bin())
        .arg("stats")
        .env("PITH_HOME", home.path())
        .env("PITH_STORE_URL", &gw.url)
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("INSTANCE"), "{text}");
    for i in instances {
        let name = i["instance"].as_str().unwrap();
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
}

#[test]
fn an_instance_stopped_mid_session_drains_and_the_session_goes_on_through_the_other() {
    let mut gw = Gateway::start(&[("PITH_DRAIN", "1s"), ("PITH_SHUTDOWN_GRACE", "10s")]);
    script_session(&gw.mock, true);
    let base = format!("{}/v1", gw.haproxy.url());
    let session = std::thread::spawn(move || opencode_with_jira(&base));
    // Turn 2 is streaming (slowly): stop the instance streaming it, as HAProxy sees it.
    let main_turns = |mock: &MockUpstream| {
        mock.received()
            .iter()
            .filter(|r| has_tools(&r.body))
            .count()
    };
    // Each request the mock receives wakes this (the title call may come between the turns).
    let mut received = 1;
    while main_turns(&gw.mock) < 2 {
        assert!(
            gw.mock.wait_requests(received, clients::LIMIT),
            "turn 2 never came"
        );
        received += 1;
    }
    // Turn 2 streams for 1.5 s: HAProxy has it on one instance now.
    let streaming = gw.haproxy.servers().unwrap();
    let busy = streaming
        .iter()
        .position(|s| s.current > 0)
        .unwrap_or_else(|| panic!("no instance is streaming turn 2: {streaming:?}"));
    let name = format!("pith{}", busy + 1);
    let stopping = &mut gw.instances[busy];
    let pid = stopping.pid();
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    // Its health check fails first: HAProxy takes it out while it still serves.
    assert!(
        gw.haproxy.wait_for(&name, "DOWN", Duration::from_secs(5)),
        "{:?}",
        gw.haproxy.servers()
    );
    // Then kill, as a service manager does at the end of its stop timeout.
    let exited = stopping.exit_or_kill(Duration::from_secs(15));
    let run = session.join().unwrap();
    run.assert_ok(&gw.logs());
    let said = format!("{}\n{}", run.stdout, run.stderr);
    assert!(said.contains(FINAL), "{said}");
    assert!(!said.contains("invalid"), "{said}");
    check_round_trip(&gw.mock);
    assert!(
        gw.instances[busy].stderr().contains("draining"),
        "{}",
        gw.instances[busy].stderr()
    );
    assert_eq!(exited.map(|s| s.success()), Some(true), "{}", gw.logs());
    // Nothing cut, nothing lost: every request the mock answered is a row, and each ended ok.
    let rows = gw.rows();
    assert_eq!(rows.len(), gw.mock.request_count(), "{}", gw.logs());
    assert!(
        rows.iter()
            .all(|r| r.outcome == pith_store::ledger::RequestOutcome::Ok),
        "{:?}",
        rows.iter().map(|r| r.outcome).collect::<Vec<_>>()
    );
}

/// Send a Messages request on a fresh connection to `addr`; the raw response, read to its end.
fn post_raw(addr: SocketAddr, body: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        s,
        "POST /v1/messages HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         x-api-key: k\r\nanthropic-version: 2023-06-01\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// `GET /pith/health`'s status line on a fresh connection.
fn health_status(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET /pith/health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out.lines().next().unwrap_or_default().to_owned())
}

#[test]
fn sigterm_fails_the_health_check_first_then_stops_accepting_and_finishes_open_streams() {
    let mock = MockUpstream::start().unwrap();
    // A stream of 30 events, 200 ms apart: about 6 s, longer than the drain.
    let sse = anthropic::stream(&["a"; 28], USAGE);
    let chunks: Vec<Chunk> =
        pith_testkit::fixtures::split_at_events(&sse, Duration::from_millis(200));
    mock.push(Reply::stream(chunks));
    let mut pith = PithProxy::start(
        &mock.url(),
        &[("PITH_DRAIN", "3s"), ("PITH_SHUTDOWN_GRACE", "20s")],
    );
    let addr = pith.addr;
    assert!(health_status(addr).unwrap().contains(" 200 "));
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let open = std::thread::spawn(move || post_raw(addr, body));
    assert!(mock.wait_requests(1, Duration::from_secs(10)));
    let pid = pith.pid();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    // The drain (it says so once the health check fails): health answers 503 while a new
    // request is still served.
    assert!(
        pith.wait_said("pith proxy draining", Duration::from_secs(2)),
        "{}",
        pith.stderr()
    );
    let health = health_status(addr).unwrap();
    assert!(health.contains(" 503 "), "{health}: {}", pith.stderr());
    mock.push(Reply::sse(anthropic::stream(&["still served"], USAGE)));
    let served = post_raw(addr, body).unwrap();
    assert!(served.contains("still served"), "{served}");
    // After the drain: no new connection (it says it stops accepting just before it closes
    // the listener, so a connect may still get in for a moment), while the open stream goes
    // on to its end.
    assert!(
        pith.wait_said("no new connections", Duration::from_secs(6)),
        "{}",
        pith.stderr()
    );
    pith_testkit::wait::wait_for(
        "no longer accepting after the drain",
        Duration::from_secs(5),
        || TcpStream::connect(addr).is_err(),
    );
    let streamed = open.join().unwrap().unwrap();
    assert!(streamed.contains("message_stop"), "{streamed}");
    let exit = pith.exit_or_kill(Duration::from_secs(20)).unwrap();
    assert!(exit.success(), "{}", pith.stderr());
    let rows = rows(&pith.ledger_path());
    assert_eq!(rows.len(), 2);
    assert!(
        rows.iter()
            .all(|r| r.outcome == pith_store::ledger::RequestOutcome::Ok),
        "{rows:?}"
    );
}

/// A free loopback port (bound, then released for the script to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Two free loopback ports in a row, neither `other`.
fn free_pair(other: u16) -> u16 {
    loop {
        let first = free_port();
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if first < u16::MAX && first + 1 != other && first != other && free(first + 1) {
            return first;
        }
    }
}

/// A script the test started, with everything it started: stopped (SIGKILL) when dropped, so
/// a failing test leaves no pith proxy or HAProxy on a port. The script leads its own process
/// group, but the instances and HAProxy run in sessions of their own (`setsid`), out of reach
/// of a group kill: they are found as its descendants while it runs.
struct ScriptTree {
    pid: u32,
    /// The script's status, from a thread that waits on it.
    exited: std::sync::mpsc::Receiver<std::io::Result<std::process::ExitStatus>>,
    done: bool,
}

impl ScriptTree {
    fn spawn(mut cmd: std::process::Command) -> (ScriptTree, std::process::ChildStderr) {
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.stderr(std::process::Stdio::piped()).spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let pid = child.id();
        let (tx, exited) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let tree = ScriptTree {
            pid,
            exited,
            done: false,
        };
        (tree, stderr)
    }

    /// Its status once it exits by itself within `limit`; `None` when it did not.
    fn exit_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let status = self.exited.recv_timeout(limit).ok()?.unwrap();
        self.done = true;
        Some(status)
    }
}

/// Every process below `pid` (children, theirs, ...), from /proc.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces and parentheses, so after the last.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parents.push((child, ppid));
        }
    }
    let mut found = vec![pid];
    let mut at = 0;
    while at < found.len() {
        let parent = found[at];
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        at += 1;
    }
    found.split_off(1)
}

impl Drop for ScriptTree {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut pids: Vec<String> = descendants(self.pid).iter().map(u32::to_string).collect();
        pids.push(format!("-{}", self.pid));
        let _ = std::process::Command::new("kill")
            .arg("-KILL")
            .arg("--")
            .args(&pids)
            .stderr(std::process::Stdio::null())
            .status();
        let _ = self.exited.recv();
    }
}

#[test]
fn the_shipped_example_runs_two_instances_behind_haproxy_and_stops_them_all() {
    let url = PgServer::shared().database().unwrap();
    let mock = MockUpstream::start().unwrap();
    let home = tempfile::tempdir().unwrap();
    let listen = free_port();
    let first = free_pair(listen);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gateway/run");
    // The test plays a person at a terminal pressing Ctrl-C, so it starts the script as an
    // interactive shell starts a foreground job: with SIGINT at its default. The suite itself
    // may have been started with SIGINT ignored (a background job of a non-interactive shell,
    // as CI wrappers start it, POSIX), that disposition is inherited across exec, and bash
    // cannot trap a signal ignored at its start: the script would never hear the Ctrl-C.
    // Sending SIGTERM instead would leave the script's documented stop (Ctrl-C) untested.
    // GNU env's --default-signal resets it (coreutils 8.31 and later; Debian has it).
    let mut gateway = std::process::Command::new("env");
    gateway
        .arg("--default-signal=INT")
        .arg(script)
        .args(["--store", &url, "--instances", "2", "--check", "100ms"])
        .args(["--listen", &format!("127.0.0.1:{listen}")])
        .args(["--first-port", &first.to_string()])
        .arg("--home")
        .arg(home.path())
        .env("PITH_BIN", pith_bin())
        .env("PITH_ANTHROPIC_UPSTREAM", mock.url())
        .env_remove("PITH_CONFIG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    let (mut gateway, mut stderr) = ScriptTree::spawn(gateway);
    let addr: SocketAddr = ([127, 0, 0, 1], listen).into();
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}"#;
    mock.set_default(Reply::json(anthropic::message("hello", USAGE)));
    // Up once both instances answer through it (HAProxy takes each in after two checks; its
    // health checks are another process's, with nothing to wait on but their effect).
    let start = Instant::now();
    let mut served = 0;
    while served < 6 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the gateway did not serve 6 requests"
        );
        match post_raw(addr, body) {
            Ok(reply) if reply.starts_with("HTTP/1.1 200") => served += 1,
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    let instance_rows = |n: u32| {
        let ledger = home.path().join(n.to_string()).join("ledger.db");
        let port = first + n as u16 - 1;
        wait_rows_at(([127, 0, 0, 1], port).into(), None, &ledger, 1)
    };
    let (one, two) = (instance_rows(1), instance_rows(2));
    assert_eq!(one.len() + two.len(), 6);
    assert_eq!(one[0].instance.as_deref(), Some("gw-1"));
    assert_eq!(two[0].instance.as_deref(), Some("gw-2"));
    // Ctrl-C, as a terminal sends it to the script (the instances run in sessions of their
    // own, so the script alone hears it and stops each once, with its drain).
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &gateway.pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = gateway
        .exit_within(Duration::from_secs(20))
        .expect("the gateway did not stop");
    let mut said = String::new();
    stderr.read_to_string(&mut said).unwrap();
    assert!(status.success(), "{said}");
    assert!(said.contains("[pith1] pith proxy draining"), "{said}");
    assert!(said.contains("[pith1] pith proxy stopped"), "{said}");
    assert!(said.contains("[pith2] pith proxy stopped"), "{said}");
    for port in [listen, first, first + 1] {
        assert!(
            TcpStream::connect(("127.0.0.1", port)).is_err(),
            "{port} still open"
        );
    }
}

/// CI wrappers start the suite as a background job of a non-interactive shell, which starts it
/// with SIGINT ignored (POSIX): the gateway's test, run that way, still stops the gateway with
/// its Ctrl-C. This runs it so, in a test binary of its own (this one, with only that test).
#[test]
fn the_gateway_test_passes_in_a_suite_started_in_the_background_by_a_script() {
    let name = "gateway::the_shipped_example_runs_two_instances_behind_haproxy_and_stops_them_all";
    // The background job (a simple command: bash ignores SIGINT in those, not in a `{ }`
    // group) says what it ignores, then becomes the test binary.
    let out = std::process::Command::new("bash")
        .args([
            "-c",
            r#"sh -c 'grep "^SigIgn:" /proc/self/status >&2; exec "$@"' sh "$@" & wait $!"#,
            "bash",
        ])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads", "1"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The premise: the suite really started with SIGINT (signal 2, bit 1) ignored.
    let ignored = said
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .unwrap_or_else(|| panic!("no SigIgn line: {said}"));
    assert_ne!(ignored & 0b10, 0, "SIGINT not ignored at start: {said}");
    assert!(out.status.success(), "{said}");
    assert!(said.contains("1 passed"), "{said}");
}
