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
    let out = Command::new(&python)
        .arg(client_script())
        .arg(env!("CARGO_BIN_EXE_pith"))
        .arg(ws.path())
        .arg(outside.path().join("secret.txt"))
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_LOCAL_PREFILTER")
        .env("PITH_HOME", ws.path().join(".pith-home"))
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
            "read_workspace_file",
            "save_memory",
            "search_memory",
            "search_workspace",
            "verify_memory"
        ])
    );
    assert!(summary["checks"].as_u64().unwrap() > 50, "{summary}");
}

/// Speak raw JSON-RPC lines: every stdout line must be a JSON-RPC message even with debug
/// logging on (which goes to stderr), and closing stdin ends the server.
#[test]
fn mcp_stdout_is_protocol_only() {
    let ws = super::memory::workspace();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pith"))
        .args(["mcp", "--workspace"])
        .arg(ws.path())
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
                assert_eq!(text, "no memories match \"anything\"\n");
            }
        }
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "server exit on stdin EOF: {status}");
    for rest in lines {
        let line = rest.unwrap();
        serde_json::from_str::<serde_json::Value>(&line)
            .unwrap_or_else(|e| panic!("non-JSON on stdout ({e}): {line:?}"));
    }
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("pith mcp serving on stdio"), "{stderr}");
}
