//! `pith mcp` over stdio: driven by the official MCP Python SDK (tests/python/mcp_client.py),
//! and byte-level checks that stdout carries protocol only.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The Python with the MCP SDK that scripts/test installs. Without it this test fails: a
/// skipped client test must never pass as a green suite.
fn python() -> PathBuf {
    match std::env::var_os("PITH_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "PITH_TEST_PYTHON is not set. Run the suite with scripts/test, which installs the \
             MCP Python SDK (tests/python/requirements.txt) into .venv and sets it."
        ),
    }
}

fn client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/mcp_client.py")
}

/// A workspace with a .gitignore'd build dir and two symlinks that lead out of it.
fn prepared_workspace() -> (tempfile::TempDir, tempfile::TempDir) {
    let ws = super::memory::workspace();
    let root = ws.path();
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
    std::fs::create_dir_all(root.join("target/debug")).unwrap();
    std::fs::write(root.join("target/debug/gen.rs"), "fn close() {}\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "TOP-SECRET-TOKEN\n").unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("leak")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("up")).unwrap();
    }
    (ws, outside)
}

#[test]
fn mcp_python_sdk_client_drives_every_tool() {
    let python = python();
    let (ws, outside) = prepared_workspace();
    // The history the history tools find, delete, restore and search.
    let home = ws.path().join(".pith-home");
    let claude = super::history::claude_projects_with_junk();
    let imported = Command::new(crate::support::pith_bin())
        .args(["history", "import", "--claude-dir"])
        .arg(claude.path())
        .arg("--codex-home")
        .arg(claude.path().join("no-codex"))
        .env_remove("PITH_CONFIG")
        .env("PITH_HOME", &home)
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
    let out = Command::new(&python)
        .arg(client_script())
        .arg(env!("CARGO_BIN_EXE_pith"))
        .arg(ws.path())
        .arg(outside.path().join("secret.txt"))
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_LOCAL_PREFILTER")
        .env("PITH_HOME", &home)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "MCP client failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let summary: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(summary["ok"], true);
    assert_eq!(
        summary["tools_called"],
        serde_json::json!([
            "forget_memory",
            "get_memory",
            "memory_delete",
            "memory_find_candidates",
            "memory_restore",
            "read_workspace_file",
            "save_memory",
            "search_history",
            "search_memory",
            "search_workspace",
            "tool_output",
            "verify_memory"
        ])
    );
    // The trashed conversation was restored: the history is as it was imported.
    let listed = Command::new(crate::support::pith_bin())
        .args(["history", "trash", "list", "--json"])
        .env_remove("PITH_CONFIG")
        .env("PITH_HOME", &home)
        .output()
        .unwrap();
    let trash: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(trash["conversations"], serde_json::json!([]), "{trash}");
    assert!(summary["history"]["empty"].is_string(), "{summary}");
    assert!(summary["checks"].as_u64().unwrap() > 50, "{summary}");
}

/// Speak raw JSON-RPC lines: every stdout line must be a JSON-RPC message even with debug
/// logging on (which goes to stderr), and closing stdin ends the server.
#[test]
fn mcp_stdout_is_protocol_only() {
    let ws = super::memory::workspace();
    let mut child = Command::new(crate::support::pith_bin())
        .args(["mcp", "--workspace"])
        .arg(ws.path())
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_LOCAL_PREFILTER")
        .env("PITH_LOG", "debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let requests = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search_memory","arguments":{"query":"anything"}}}"#,
    ];
    for r in requests {
        writeln!(stdin, "{r}").unwrap();
    }
    stdin.flush().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut answered = std::collections::BTreeSet::new();
    while answered.len() < 3 {
        let line = lines.next().expect("server closed stdout early").unwrap();
        let msg: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("non-JSON on stdout ({e}): {line:?}"));
        assert_eq!(msg["jsonrpc"], "2.0", "{line}");
        if let Some(id) = msg["id"].as_u64() {
            answered.insert(id);
            if id == 3 {
                let text = msg["result"]["content"][0]["text"].as_str().unwrap();
                assert_eq!(
                    text,
                    "no memories match \"anything\" (none saved in this workspace yet)\n"
                );
            }
        }
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "server exit on stdin EOF: {status}");
    assert!(!ws.path().join(".pith").exists(), "a read created .pith/");
    for rest in lines {
        let line = rest.unwrap();
        serde_json::from_str::<serde_json::Value>(&line)
            .unwrap_or_else(|e| panic!("non-JSON on stdout ({e}): {line:?}"));
    }
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("pith mcp serving on stdio"), "{stderr}");
}

/// A bare JSON-RPC client over a `pith mcp` child's stdio, for checks the SDK would hide.
pub(crate) struct RawClient {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    next_id: u64,
}

impl RawClient {
    /// `pith mcp` on workspace `ws`, with `ws/.pith-home` as PITH_HOME and `env` set.
    pub(crate) fn start(ws: &Path, env: &[(&str, &str)]) -> RawClient {
        let mut cmd = Command::new(crate::support::pith_bin());
        cmd.args(["mcp", "--workspace"])
            .arg(ws)
            .env_remove("PITH_CONFIG")
            .env_remove("PITH_LOCAL_PREFILTER")
            .env_remove("PITH_OLLAMA_URL")
            .env_remove("PITH_PREFILTER_URL")
            .env_remove("PITH_PREFILTER_API")
            .env_remove("PITH_PREFILTER_RANKER")
            .env_remove("PITH_PREFILTER_MODEL")
            .env_remove("PITH_PREFILTER_LOCAL_MODEL")
            .env_remove("PITH_PREFILTER_THRESHOLD")
            .env_remove("PITH_PREFILTER_SHOWN")
            .env_remove("PITH_PREFILTER_TIMEOUT_MS")
            .env("PITH_HOME", ws.join(".pith-home"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut client = RawClient {
            child,
            stdin,
            lines,
            next_id: 1,
        };
        client.request(
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "raw", "version": "1"}}),
        );
        writeln!(
            client.stdin,
            r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
        )
        .unwrap();
        client
    }

    fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let id = self.next_id;
        self.next_id += 1;
        let msg =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let line = self.lines.next().expect("server closed stdout").unwrap();
            let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
            if reply["id"] == id {
                return reply;
            }
        }
    }

    /// The server's pid (to end it from a watchdog).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send `line` as it is (one message, written by the caller) and wait for the reply to
    /// `id`.
    pub(crate) fn request_raw(&mut self, id: u64, line: &str) -> serde_json::Value {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let line = self.lines.next().expect("server closed stdout").unwrap();
            let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
            if reply["id"] == id {
                return reply;
            }
        }
    }

    /// A tool call's text, and whether it was a tool error.
    pub(crate) fn call(&mut self, name: &str, args: serde_json::Value) -> (String, bool) {
        let reply = self.request(
            "tools/call",
            serde_json::json!({"name": name, "arguments": args}),
        );
        let result = &reply["result"];
        let text = result["content"][0]["text"].as_str().unwrap().to_owned();
        (text, result["isError"] == true)
    }
}

impl Drop for RawClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const RANK_MATCHES: usize = 60;

/// A workspace where `needle` matches on 60 lines, one per file, in path order n00..n59.
fn needle_workspace() -> tempfile::TempDir {
    let ws = super::memory::workspace();
    for i in 0..RANK_MATCHES {
        std::fs::write(
            ws.path().join(format!("src/n{i:02}.rs")),
            format!("let needle = {i};\n"),
        )
        .unwrap();
    }
    ws
}

fn search_needle(client: &mut RawClient) -> String {
    let (text, is_error) =
        client.call("search_workspace", serde_json::json!({"pattern": "needle"}));
    assert!(!is_error, "{text}");
    text
}

/// Searches until the reply is ranked (the server warms the model up in the background when it
/// starts; until then a search says the model is still loading), at most 10 s.
fn search_needle_ranked(client: &mut RawClient) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let text = search_needle(client);
        if text.starts_with("pith: ranked") || std::time::Instant::now() > deadline {
            return text;
        }
        assert!(
            text.starts_with("pith: not ranked by local model") && text.contains("still loading"),
            "{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The needle workspace with one more file, the answer to "where the retry backoff delay is
/// computed", last in path order.
fn backoff_workspace() -> tempfile::TempDir {
    let ws = needle_workspace();
    std::fs::write(
        ws.path().join("src/zz_retry_backoff.rs"),
        "let needle = backoff_delay(retry);\nlet other_needle = 1;\n",
    )
    .unwrap();
    ws
}

fn search_backoff(client: &mut RawClient) -> String {
    let (text, is_error) = client.call(
        "search_workspace",
        serde_json::json!({"pattern": "needle", "intent": "where the retry backoff delay is computed"}),
    );
    assert!(!is_error, "{text}");
    text
}

/// The disclosure line of a ranked `backoff_workspace` search by `ranker`.
fn ranked_header(ranker: &str) -> String {
    format!(
        "pith: ranked by {ranker}: the 10 most relevant of {} matches in {} files, most relevant \
         first; {} withheld. Pass all=true to list every match in path order.",
        RANK_MATCHES + 2,
        RANK_MATCHES + 1,
        RANK_MATCHES + 2 - 10
    )
}

/// The lexical ranking, in-process: nothing to start, the file whose path and line carry the
/// intent's words first though ripgrep lists it last, one line a file, the disclosure and the
/// withheld count; `all=true` still lists every match.
#[test]
fn mcp_search_workspace_ranks_lexically_with_no_model() {
    let ws = backoff_workspace();
    let mut client = RawClient::start(
        ws.path(),
        &[
            ("PITH_LOCAL_PREFILTER", "1"),
            ("PITH_PREFILTER_RANKER", "lexical"),
        ],
    );
    let text = search_backoff(&mut client);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        ranked_header("lexical file ranking (the search's words in paths and lines; no model)")
    );
    assert_eq!(
        lines[1], "src/zz_retry_backoff.rs:1: let needle = backoff_delay(retry);",
        "{text}"
    );
    // One line a file: ten files.
    let files: std::collections::BTreeSet<&str> = lines[1..11]
        .iter()
        .map(|l| l.split(':').next().unwrap())
        .collect();
    assert_eq!(files.len(), 10, "{text}");
    let (every, _) = client.call(
        "search_workspace",
        serde_json::json!({"pattern": "needle", "all": true, "max_results": 500}),
    );
    assert_eq!(
        every.lines().filter(|l| l.contains("needle")).count(),
        RANK_MATCHES + 2
    );
}

/// The in-process model, installed from its wheels: nothing to start; the first search waits
/// for the load instead of answering unranked; the file that answers the intent first; the
/// disclosure names the model. With no model where the config points, the plain page says why.
#[test]
fn mcp_search_workspace_ranks_with_the_in_process_model() {
    let ws = backoff_workspace();
    crate::support::install_test_model(&ws.path().join(".pith-home"));
    let mut client = RawClient::start(
        ws.path(),
        &[
            ("PITH_LOCAL_PREFILTER", "1"),
            ("PITH_PREFILTER_RANKER", "local"),
        ],
    );
    let text = search_backoff(&mut client);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        ranked_header("local model all-MiniLM-L6-v2 (int8 ONNX) (in-process)")
    );
    assert_eq!(
        lines[1], "src/zz_retry_backoff.rs:1: let needle = backoff_delay(retry);",
        "{text}"
    );
    drop(client);

    let missing = ws.path().join(".pith-home/no-such-model");
    let missing = missing.to_str().unwrap();
    let mut client = RawClient::start(
        ws.path(),
        &[
            ("PITH_LOCAL_PREFILTER", "1"),
            ("PITH_PREFILTER_RANKER", "local"),
            ("PITH_PREFILTER_LOCAL_MODEL", missing),
        ],
    );
    let text = search_needle(&mut client);
    assert!(
        text.starts_with(&format!("pith: not ranked by local model in {missing}"))
            && text.contains(&format!(
                "no model is installed in {missing} (install one with `pith model install`)"
            )),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.contains("needle")).count(),
        50,
        "{text}"
    );
}

#[test]
fn mcp_search_workspace_ranks_when_the_env_opts_in() {
    use pith_testkit::ollama::{ChatReply, MockOllama};
    let ollama = MockOllama::start(&["tiny:1b"], ChatReply::last(RANK_MATCHES, 10)).unwrap();
    let ws = needle_workspace();
    let url = ollama.url();
    let mut client = RawClient::start(
        ws.path(),
        &[
            ("PITH_LOCAL_PREFILTER", "1"),
            ("PITH_OLLAMA_URL", url.as_str()),
            ("PITH_PREFILTER_MODEL", "tiny:1b"),
        ],
    );
    let text = search_needle_ranked(&mut client);
    let mut lines = text.lines();
    let disclosure = lines.next().unwrap();
    assert!(
        disclosure.starts_with("pith: ranked by local model tiny:1b (Ollama)"),
        "{text}"
    );
    assert!(disclosure.contains("all=true"), "{disclosure}");
    assert_eq!(
        lines.next(),
        Some("src/n59.rs:1: let needle = 59;"),
        "{text}"
    );
    assert_eq!(ollama.chat_requests().len(), 1);

    // all=true: every match in path order, no model call.
    let (text, _) = client.call(
        "search_workspace",
        serde_json::json!({"pattern": "needle", "all": true, "max_results": 100}),
    );
    assert!(
        text.starts_with("src/n00.rs:1: let needle = 0;\n"),
        "{text}"
    );
    assert!(text.contains("60 matches in 60 files."), "{text}");
    assert_eq!(ollama.chat_requests().len(), 1);
}

#[test]
fn mcp_search_workspace_ranks_when_the_config_opts_in_on_either_api() {
    use pith_testkit::ollama::{ChatReply, MockOllama};
    let ollama = MockOllama::start(&["tiny:1b"], ChatReply::last(RANK_MATCHES, 10)).unwrap();
    let ws = needle_workspace();
    let config = ws.path().join("pith.toml");
    for (api, label, path) in [
        ("ollama", "Ollama", "/api/chat"),
        ("openai", "OpenAI-compatible API", "/v1/chat/completions"),
    ] {
        std::fs::write(
            &config,
            format!(
                "[mcp]\nlocal_prefilter = true\nprefilter_api = \"{api}\"\nprefilter_url = \"{}\"\n\
                 model = \"tiny:1b\"\nprefilter_threshold = 20\nprefilter_shown = 10\n\
                 prefilter_timeout_ms = 2000\n",
                ollama.url()
            ),
        )
        .unwrap();
        let mut client = RawClient::start(ws.path(), &[("PITH_CONFIG", config.to_str().unwrap())]);
        let text = search_needle_ranked(&mut client);
        assert!(
            text.starts_with(&format!(
                "pith: ranked by local model tiny:1b ({label}): the 10 most relevant of 60"
            )),
            "{text}"
        );
        assert_eq!(text.lines().count(), 11, "{text}");
        assert_eq!(ollama.chat_requests().last().unwrap().path, path);
    }
}

#[test]
fn mcp_warms_a_cold_model_at_start_and_says_it_is_loading_meanwhile() {
    use pith_testkit::ollama::{ChatReply, MockOllama};
    let ollama = MockOllama::start(&["tiny:1b"], ChatReply::last(RANK_MATCHES, 10)).unwrap();
    ollama.set_load_time(std::time::Duration::from_secs(3));
    let ws = needle_workspace();
    let url = ollama.url();
    let mut client = RawClient::start(
        ws.path(),
        &[
            ("PITH_LOCAL_PREFILTER", "1"),
            ("PITH_PREFILTER_URL", url.as_str()),
            ("PITH_PREFILTER_MODEL", "tiny:1b"),
            ("PITH_PREFILTER_TIMEOUT_MS", "500"),
        ],
    );
    // The warm-up started with the server, before any search.
    pith_testkit::wait::wait_for(
        "the warm-up request",
        std::time::Duration::from_secs(5),
        || !ollama.warm_up_requests().is_empty(),
    );
    assert_eq!(ollama.warm_up_requests().len(), 1);
    let started = std::time::Instant::now();
    let text = search_needle(&mut client);
    assert!(started.elapsed() < std::time::Duration::from_millis(1500));
    assert!(
        text.starts_with(
            "pith: not ranked by local model tiny:1b (Ollama) (the model is still loading); \
             matches in path order.\nsrc/n00.rs:1: let needle = 0;\n"
        ),
        "{text}"
    );
    assert!(ollama.chat_requests().is_empty());
    let text = search_needle_ranked(&mut client);
    assert!(
        text.starts_with("pith: ranked by local model tiny:1b"),
        "{text}"
    );
    assert_eq!(ollama.chat_requests().len(), 1);
    assert_eq!(ollama.warm_up_requests().len(), 1);
}

#[test]
fn mcp_rejects_a_prefilter_api_it_does_not_speak() {
    let ws = super::memory::workspace();
    for (config, env, named) in [
        (
            "[mcp]\nprefilter_api = \"vllm\"\n",
            None,
            "mcp.prefilter_api",
        ),
        (
            "",
            Some(("PITH_PREFILTER_API", "grpc")),
            "PITH_PREFILTER_API",
        ),
        (
            "",
            Some(("PITH_PREFILTER_SHOWN", "ten")),
            "PITH_PREFILTER_SHOWN",
        ),
    ] {
        let file = ws.path().join("pith-api.toml");
        std::fs::write(&file, config).unwrap();
        let mut cmd = Command::new(crate::support::pith_bin());
        cmd.args(["mcp", "--workspace"])
            .arg(ws.path())
            .env("PITH_CONFIG", &file)
            .env_remove("PITH_PREFILTER_API")
            .stdin(Stdio::null());
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{err}");
    }
}

#[test]
fn mcp_search_workspace_is_unranked_by_default_and_fails_open() {
    use pith_testkit::ollama::{ChatReply, MockOllama};
    let ollama = MockOllama::start(&["tiny:1b"], ChatReply::prose(RANK_MATCHES, 10)).unwrap();
    let ws = needle_workspace();
    let path_order = "src/n00.rs:1: let needle = 0;\n";
    let page = "Showing matches 1-50 of 60 matches in 60 files (sorted by path, then line). \
                10 more: pass offset=50 for the next page";

    // Not opted in: the model is never asked.
    let mut client = RawClient::start(ws.path(), &[("PITH_OLLAMA_URL", ollama.url().as_str())]);
    let text = search_needle(&mut client);
    assert!(
        text.starts_with(path_order) && text.contains(page),
        "{text}"
    );
    assert!(ollama.requests().is_empty());
    drop(client);

    // Opted in, but the model answers in prose: the plain page, nothing withheld.
    let mut client = RawClient::start(
        ws.path(),
        &[
            ("PITH_LOCAL_PREFILTER", "1"),
            ("PITH_OLLAMA_URL", ollama.url().as_str()),
            ("PITH_PREFILTER_MODEL", "tiny:1b"),
        ],
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let text = loop {
        let text = search_needle(&mut client);
        if !text.contains("still loading") || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let (first, rest) = text.split_once('\n').unwrap();
    assert!(
        first.starts_with(
            "pith: not ranked by local model tiny:1b (Ollama) (answer rejected: answer is not"
        ) && first.ends_with("; matches in path order."),
        "{text}"
    );
    assert!(
        rest.starts_with(path_order) && rest.contains(page),
        "{text}"
    );
    assert!(!text.contains("pith: ranked by"), "{text}");
    assert_eq!(ollama.chat_requests().len(), 1);
}

#[test]
fn mcp_rejects_a_mistyped_prefilter_switch() {
    let ws = super::memory::workspace();
    let out = Command::new(crate::support::pith_bin())
        .args(["mcp", "--workspace"])
        .arg(ws.path())
        .env("PITH_LOCAL_PREFILTER", "yes please")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PITH_LOCAL_PREFILTER"), "{err}");
}

#[test]
fn mcp_refuses_an_oversized_memory_and_says_what_to_do() {
    let ws = super::memory::workspace();
    let mut client = RawClient::start(ws.path(), &[]);
    let body = format!("needle {}", "w".repeat(5 << 20));
    let (text, is_error) = client.call(
        "save_memory",
        serde_json::json!({"kind": "note", "title": "A pasted log", "body": body}),
    );
    assert!(is_error, "saved a 5 MB body: {text}");
    assert!(
        text.contains("16 KiB") && text.contains("evidence"),
        "{text}"
    );
    let (text, is_error) = client.call(
        "save_memory",
        serde_json::json!({"kind": "note", "title": "A short note", "body": "needle and thread"}),
    );
    assert!(!is_error, "{text}");
    let (text, _) = client.call("search_memory", serde_json::json!({"query": "needle"}));
    assert!(
        text.contains("A short note") && !text.contains("A pasted log"),
        "{text}"
    );
}
