//! Issue 24's second hardening round, one test per finding that is not a test of its own
//! elsewhere: what a cloned repository, a local process or hostile data could do through
//! `pith setup`, `pith hook`, `pith mcp` and `pith history`. Each fails on the build before
//! the fix (`PITH_TEST_BIN=<old pith> cargo test --test integration hardening::`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::pith_bin;

/// `pith setup ARGS` in `dir` with everything of the user's under `home`. An older build
/// (`PITH_TEST_BIN`) knows no `--scope` and wrote the project's files: it runs without it.
fn setup(dir: &Path, home: &Path, args: &[&str]) -> Output {
    let mut args: Vec<&str> = args.to_vec();
    if std::env::var_os("PITH_TEST_BIN").is_some()
        && let Some(at) = args.iter().position(|a| *a == "--scope")
    {
        args.drain(at..at + 2);
    }
    Command::new(pith_bin())
        .arg("setup")
        .args(&args)
        .args(["--command", "pith"])
        .current_dir(dir)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("CODEX_HOME", home.join(".codex"))
        .env("PITH_HOME", home.join("pith-home"))
        .env("PATH", "/usr/bin:/bin")
        .env_remove("CLAUDE_CONFIG_DIR")
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap()
}

/// A project (`.git` in it) and a home beside it holding a file of the user's.
fn project_and_home() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let top = tempfile::tempdir().unwrap();
    let project = top.path().join("project");
    let home = top.path().join("home");
    std::fs::create_dir_all(project.join(".git")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let secret = home.join("notes.txt");
    std::fs::write(&secret, "mine\n").unwrap();
    (top, project, home, secret)
}

#[cfg(unix)]
#[test]
fn setup_writes_through_no_link_out_of_the_project() {
    use std::os::unix::fs::symlink;
    let (_top, project, home, _) = project_and_home();
    // `.mcp.json` a link to a JSON file of the user's: refused, the file untouched.
    let secret = home.join("settings-of-mine.json");
    std::fs::write(&secret, "{\"mine\": true}\n").unwrap();
    symlink(&secret, project.join(".mcp.json")).unwrap();
    let out = setup(&project, &home, &["claude-code", "--scope", "project"]);
    assert!(!out.status.success(), "wrote through the link");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("leads out of the project"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "{\"mine\": true}\n"
    );
    std::fs::remove_file(project.join(".mcp.json")).unwrap();

    // A `.claude/` that is a link elsewhere: nothing written into its target.
    let elsewhere = home.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    symlink(&elsewhere, project.join(".claude")).unwrap();
    let out = setup(&project, &home, &["claude-code"]);
    assert!(!out.status.success(), "wrote through the linked directory");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // Refused before anything was written: the global config has no entry either.
    assert!(!home.join(".claude.json").exists());
}

#[cfg(unix)]
#[test]
fn setup_ignores_a_trap_at_a_temporary_name_and_six_at_once_all_succeed() {
    use std::os::unix::fs::symlink;
    let (_top, project, home, secret) = project_and_home();
    // The fixed temporary names the previous build wrote beside the file it replaced.
    symlink(&secret, project.join(".mcp.pith-tmp")).unwrap();
    std::fs::create_dir_all(project.join(".claude")).unwrap();
    symlink(&secret, project.join(".claude/settings.pith-tmp")).unwrap();
    let mode = |p: &Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions())
            & 0o777
    };
    let secret_mode = mode(&secret);
    let out = setup(&project, &home, &["claude-code", "--scope", "project"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The user's file neither rewritten nor made 0600; the new file is a file of its own.
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "mine\n");
    assert_eq!(mode(&secret), secret_mode);
    assert!(!is_link(&project.join(".mcp.json")));

    // Six at once, each for its own client file set: every one succeeds, one at a time.
    let (_top, project, home, _) = project_and_home();
    let runs: Vec<_> = (0..6)
        .map(|i| {
            let (project, home) = (project.clone(), home.clone());
            std::thread::spawn(move || {
                let client = ["claude-code", "opencode", "codex"][i % 3];
                setup(&project, &home, &[client])
            })
        })
        .collect();
    for run in runs {
        let out = run.join().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let claude: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.join(".claude.json")).unwrap()).unwrap();
    let root = project.canonicalize().unwrap();
    assert_eq!(
        claude["projects"][root.to_str().unwrap()]["mcpServers"]["pith"]["command"],
        "pith"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.join("pith-home/setup.json")).unwrap())
            .unwrap();
    // Each file pith wrote is in the record once: no setup wrote over another's record.
    assert_eq!(record["files"].as_object().unwrap().len(), 4, "{record:#}");
}

#[cfg(unix)]
#[test]
fn undo_keeps_a_linked_settings_file_a_link() {
    use std::os::unix::fs::symlink;
    let (_top, project, home, _) = project_and_home();
    // The team keeps its shared settings in one place and links to it (inside the project).
    std::fs::create_dir_all(project.join("shared")).unwrap();
    std::fs::write(
        project.join("shared/mcp.json"),
        "{\n  \"mcpServers\": {}\n}\n",
    )
    .unwrap();
    symlink("shared/mcp.json", project.join(".mcp.json")).unwrap();
    let out = setup(&project, &home, &["claude-code", "--scope", "project"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(is_link(&project.join(".mcp.json")));
    let linked = std::fs::read_to_string(project.join("shared/mcp.json")).unwrap();
    assert!(linked.contains("\"pith\""), "{linked}");
    let out = setup(
        &project,
        &home,
        &["--undo", "claude-code", "--scope", "project"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(is_link(&project.join(".mcp.json")));
    assert_eq!(
        std::fs::read_to_string(project.join("shared/mcp.json")).unwrap(),
        "{\n  \"mcpServers\": {}\n}\n"
    );
}

/// Whether `path` is a symbolic link itself (not what it points to).
fn is_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .unwrap()
        .file_type()
        .is_symlink()
}

/// `pith hook` with stdin from this process, written by `feed` (which may keep it open); the
/// exit status once the hook ends, or `None` past `limit`.
fn hook_fed(
    feed: impl FnOnce(std::process::ChildStdin) + Send + 'static,
    limit: Duration,
) -> Option<Output> {
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(pith_bin())
        .arg("hook")
        .env("PITH_HOME", home.path())
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || feed(stdin));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(limit) {
        Ok(out) => Some(out.unwrap()),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            None
        }
    };
    drop(writer);
    out
}

#[test]
fn the_hook_gives_up_on_an_endless_stdin_in_time() {
    // Half a payload, then the pipe stays open and silent: the host would wait 10 s for the
    // hook, then report it as failed.
    let (hold, held) = std::sync::mpsc::channel::<()>();
    let out = hook_fed(
        move |mut stdin| {
            let _ = stdin.write_all(br#"{"session_id":"s","hook_event_name":"PostToolUse""#);
            let _ = held.recv();
            drop(stdin);
        },
        Duration::from_secs(9),
    );
    drop(hold);
    let out = out.expect("the hook still waited on its stdin after 9 s");
    assert!(out.status.success());
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
}

#[test]
fn the_hook_answers_a_patch_of_200k_files_within_its_time() {
    let mut patch = String::from("*** Begin Patch\n");
    for i in 0..200_000 {
        patch.push_str(&format!("*** Add File: gen/f{i}.txt\n+x\n"));
    }
    patch.push_str("*** End Patch\n");
    let payload = serde_json::json!({
        "session_id": "s", "cwd": std::env::temp_dir(), "hook_event_name": "PostToolUse",
        "tool_name": "apply_patch", "tool_input": {"command": patch},
    })
    .to_string();
    let out = hook_fed(
        move |mut stdin| {
            let _ = stdin.write_all(payload.as_bytes());
        },
        Duration::from_secs(5),
    );
    let out = out.expect("the hook took more than 5 s over one apply_patch");
    assert!(out.status.success());
}

#[cfg(unix)]
#[test]
fn mcp_refuses_a_pipe_and_answers_an_over_long_message() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join(".git")).unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(ws.path().join("pipe"))
            .status()
            .unwrap()
            .success()
    );
    let mut client = crate::mcp::RawClient::start(ws.path(), &[]);
    // Without the fix these calls never return: a watchdog ends the server if the test has
    // not finished (dropped `_finished`) within 20 s.
    let pid = client.pid();
    let (_finished, finished) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            finished.recv_timeout(Duration::from_secs(20))
        {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    });
    let (text, is_error) = client.call("read_workspace_file", serde_json::json!({"path": "pipe"}));
    assert!(is_error, "{text}");
    assert!(text.contains("not a regular file"), "{text}");
    // One message over 16 MiB: an error reply with its id, and the next request still served.
    let query = "x".repeat(17 << 20);
    let reply = client.request_raw(
        77,
        &serde_json::json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
                            "params": {"name": "search_workspace", "arguments": {"pattern": query}}})
        .to_string(),
    );
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most"),
        "{reply}"
    );
    let (text, is_error) = client.call(
        "search_workspace",
        serde_json::json!({"pattern": "nothing-here"}),
    );
    assert!(!is_error, "{text}");
}

#[test]
fn pith_history_escapes_what_it_prints() {
    let home = tempfile::tempdir().unwrap();
    let claude = tempfile::tempdir().unwrap();
    let project = claude.path().join("projects/-p");
    std::fs::create_dir_all(&project).unwrap();
    let session = "s\u{1b}[2J\u{7}evil";
    let lines = [
        serde_json::json!({"type": "user", "sessionId": session, "uuid": "u1",
            "timestamp": "2026-11-30T03:00:00.000Z",
            "message": {"role": "user", "content": "fix \u{202e}gnp.exe the bug"}}),
        serde_json::json!({"type": "assistant", "sessionId": session, "uuid": "u2",
            "timestamp": "2026-11-30T03:00:01.000Z",
            "message": {"id": "m1", "role": "assistant", "type": "message",
                        "content": [{"type": "text", "text": "done \u{1b}]0;title\u{7}"}]}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(project.join("evil.jsonl"), text).unwrap();
    crate::history::import(home.path(), claude.path(), &home.path().join("no-codex"));
    let listed = crate::history::pith(home.path(), &["history", "list"]);
    let id = String::from_utf8_lossy(&listed.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let shown = crate::history::pith(home.path(), &["history", "show", &id]);
    let found = crate::history::pith(home.path(), &["history", "search", "bug"]);
    for out in [&listed, &shown, &found] {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(
            !text.contains(['\u{1b}', '\u{7}', '\u{202e}']),
            "raw control text reached the terminal: {text:?}"
        );
    }
    assert!(String::from_utf8_lossy(&listed.stdout).contains("\\u{1b}"));
}

#[test]
fn a_deletion_token_deletes_once() {
    let home = tempfile::tempdir().unwrap();
    let claude = crate::history::claude_projects_with_junk();
    crate::history::import(home.path(), claude.path(), &home.path().join("no-codex"));
    let found = crate::history::pith_json(
        home.path(),
        &["history", "candidates", "--filter", "single-assistant"],
    );
    let token = found["filterToken"].as_str().unwrap().to_owned();
    let id = found["items"][0]["id"].as_str().unwrap().to_owned();
    let done = crate::history::pith_json(home.path(), &["history", "delete", "--token", &token]);
    assert_eq!(done["trashed"].as_array().unwrap().len(), 1, "{done}");
    crate::history::pith_json(home.path(), &["history", "trash", "restore", &id]);
    // The same token, within its lifetime: refused, and the conversation stays restored.
    let again = crate::history::pith(home.path(), &["history", "delete", "--token", &token]);
    assert!(!again.status.success(), "the token deleted twice");
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("used to delete once already"), "{err}");
    let trash = crate::history::pith_json(home.path(), &["history", "trash", "list"]);
    assert!(
        trash["conversations"].as_array().unwrap().is_empty(),
        "{trash}"
    );
    // Restoring what is not there restores nothing, and fails saying why (it said "restored:
    // 0" and exited 0).
    let again = crate::history::pith(home.path(), &["history", "trash", "restore", "c-1"]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("nothing restored: c-1: no such conversation in this account"),
        "{err}"
    );
}

/// A directory holding a `claude` that exits 0 at once, for `pith run claude`.
#[cfg(unix)]
fn fake_claude(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let claude = bin.join("claude");
    std::fs::write(&claude, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// `pith run claude` with `home` as PITH_HOME, on a port where nothing listens.
#[cfg(unix)]
fn pith_run(home: &Path, bin: &Path) -> Output {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    Command::new(pith_bin())
        .args(["run", "claude"])
        .env("PITH_HOME", home)
        .env("PITH_LISTEN", port.to_string())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap()
}

#[cfg(unix)]
#[test]
fn pith_run_refuses_a_home_others_can_write_and_follows_no_linked_lock() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let top = tempfile::tempdir().unwrap();
    let bin = fake_claude(top.path());
    let shared = top.path().join("shared-home");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = pith_run(&shared, &bin);
    assert!(!out.status.success(), "ran with a world-writable PITH_HOME");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("writable by other users"), "{err}");

    // A lock planted as a link to nothing: never followed (no file appears at its target).
    let home = top.path().join("home");
    std::fs::create_dir_all(home.join("run")).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let target = top.path().join("planted");
    symlink(&target, home.join("run/start.lock")).unwrap();
    let out = pith_run(&home, &bin);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!target.exists(), "a file was created through the link");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("it is a link"), "{err}");
}

#[cfg(target_os = "linux")]
#[test]
fn the_proxy_raises_its_soft_descriptor_limit_to_the_hard_one() {
    use std::io::BufRead;
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new("sh")
        .args([
            "-c",
            "ulimit -Sn 256 && exec \"$0\" proxy --listen 127.0.0.1:0 --no-ledger",
            &pith_bin(),
        ])
        .env("PITH_HOME", home.path())
        .env_remove("PITH_CONFIG")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap() > 0 && !line.contains("listening on") {
        line.clear();
    }
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let open = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let numbers: Vec<&str> = open.split_whitespace().skip(3).take(2).collect();
    assert_ne!(numbers[0], "256", "{open}");
    assert_eq!(numbers[0], numbers[1], "{open}");
}

#[test]
fn refused_requests_are_counted_by_reason_and_write_no_row() {
    let mock = pith_testkit::MockUpstream::start().unwrap();
    let pith =
        crate::support::PithProxy::start(&mock.url(), &[("PITH_PROXY_TOKEN", "s3cret-token-0123")]);
    // A flood of requests with a wrong token: each refused, none a row.
    for _ in 0..50 {
        let mut conn = std::net::TcpStream::connect(pith.addr).unwrap();
        write!(
            conn,
            "POST /v1/messages HTTP/1.1\r\nhost: {}\r\nx-pith-token: wrong\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}",
            pith.addr
        )
        .unwrap();
        let mut reply = String::new();
        std::io::Read::read_to_string(&mut conn, &mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 401"), "{reply}");
    }
    // (An older build has no barrier: the flush then only waits a moment.)
    let flushed = pith.flush();
    if !flushed.is_empty() {
        let flushed: serde_json::Value = serde_json::from_str(&flushed).unwrap();
        assert_eq!(flushed["flushed"], true);
    }
    assert!(
        crate::support::rows(&pith.ledger_path()).is_empty(),
        "a refusal was written as a row"
    );
    let stats = Command::new(pith_bin())
        .args(["stats", "--json"])
        .env("PITH_HOME", pith.home.path())
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(report["refused_requests"]["access_token"], 50, "{report}");
    let text = Command::new(pith_bin())
        .arg("stats")
        .env("PITH_HOME", pith.home.path())
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("requests refused: 50 with no or a wrong access token"),
        "{text}"
    );
    assert_eq!(mock.request_count(), 0);
}
