//! `pith hook` as the hosts run it: a fresh process per tool call, the payload on stdin, the
//! answer (or nothing) on stdout, exit 0 whatever happens, and nothing on stderr (Claude Code
//! records a hook's stderr with the call, and shows it as a hook error when the exit code is not
//! 0).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use pith_brain::{EvidenceSpec, Kind, NewMemory, Workspace};
use pith_store::brain::open_workspace_brain;
use pith_testkit::fixtures::{claude_code_hook_payloads, codex_hook_payloads};
use serde_json::Value;

use crate::support::pith_bin;

/// A git work tree like the captures' with a brain: a fix for the failing test, a failed
/// attempt and a note on `calc.py`.
pub struct Seeded {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub fix: String,
    pub failed: String,
    pub note: String,
}

/// One PITH_HOME for every hook this test process runs, as a user has one: the brains
/// [`seeded`] makes are recorded in it as the user's own, so their notes speak as pith.
pub fn test_home() -> &'static Path {
    static HOME: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    HOME.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

pub const FIX_HEADLINE: &str = "FAILED test_calc.py::test_add - assert -1 == 5";

pub fn seeded() -> Seeded {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(
        root.join("test_calc.py"),
        "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    )
    .unwrap();
    crate::clients::git_commit_all(&root);
    let mut brain = open_workspace_brain(Workspace::new(&root).unwrap()).unwrap();
    let mut save = |kind, title: &str, headline: Option<&str>| {
        brain
            .save(NewMemory {
                kind,
                title: title.into(),
                body: "Details that the note never carries.".into(),
                tags: vec![],
                headline: headline.map(str::to_owned),
                evidence: vec![EvidenceSpec::parse("calc.py").unwrap()],
            })
            .unwrap()
            .memory
            .id
    };
    let fix = save(
        Kind::Fix,
        "add() subtracted: return a + b",
        Some(FIX_HEADLINE),
    );
    let failed = save(Kind::Failed, "abs() in add broke negative inputs", None);
    let note = save(Kind::Note, "calc.py is the public API", None);
    drop(brain);
    pith_brain::origin::Origins::new(test_home())
        .remember(&root)
        .unwrap();
    Seeded {
        dir,
        root,
        fix,
        failed,
        note,
    }
}

/// Claude Code's payload `i` of the capture, moved into `root` and into `session`.
pub fn claude_payload(i: usize, root: &Path, session: &str) -> String {
    retarget(&claude_code_hook_payloads().unwrap()[i], root, session)
}

fn retarget(payload: &str, root: &Path, session: &str) -> String {
    let mut value: Value = serde_json::from_str(payload).unwrap();
    value["session_id"] = session.into();
    value
        .to_string()
        .replace("/home/dev/calc", root.to_str().unwrap())
}

/// `pith hook` with `input` on stdin, in a clean environment of its own.
pub fn hook(input: &[u8], env: &[(&str, &str)]) -> (Output, Duration) {
    hook_with(&["hook"], input, env)
}

/// `pith <args>` (a hook call) with `input` on stdin, in a clean environment of its own.
fn hook_with(args: &[&str], input: &[u8], env: &[(&str, &str)]) -> (Output, Duration) {
    let mut cmd = Command::new(pith_bin());
    cmd.args(args)
        .env("PITH_HOME", test_home())
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        // The hook may stop reading early; the host would see a closed pipe.
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (out, start.elapsed())
}

/// The note `pith hook` printed for `payload`, after checking it exited 0 with nothing on
/// stderr and printed either nothing or one line of the host's JSON.
pub fn note(out: &Output, payload: &str) -> Option<String> {
    assert_eq!(out.status.code(), Some(0), "exit 0 always");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "nothing on stderr"
    );
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    if stdout.is_empty() {
        return None;
    }
    assert!(
        stdout.ends_with('\n') && stdout.lines().count() == 1,
        "{stdout:?}"
    );
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    let event: Value = serde_json::from_str::<Value>(payload).unwrap()["hook_event_name"].clone();
    assert_eq!(answer["hookSpecificOutput"]["hookEventName"], event);
    Some(
        answer["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

#[test]
fn hook_answers_in_the_hosts_json_once_per_session() {
    let s = seeded();
    let failure = claude_payload(1, &s.root, "session-1");
    let (out, _) = hook(failure.as_bytes(), &[]);
    let said = note(&out, &failure).expect("the fix is named");
    assert_eq!(
        said,
        format!(
            "pith: a recorded fix matches this failure: {} fix [fresh] add() subtracted: \
             return a + b; get_memory or `pith memory show <id>` for details",
            s.fix
        )
    );
    let (again, _) = hook(failure.as_bytes(), &[]);
    assert_eq!(note(&again, &failure), None, "said once per session");
    let other = claude_payload(1, &s.root, "session-2");
    assert!(note(&hook(other.as_bytes(), &[]).0, &other).is_some());

    // The other two moments, through the binary. The Read names the memories on the file the
    // session has not heard of yet (the fix was named one moment earlier).
    let read = claude_payload(2, &s.root, "session-1");
    let said = note(&hook(read.as_bytes(), &[]).0, &read).unwrap();
    assert!(
        said.starts_with("pith: 2 memories on this file: ") && !said.contains(&s.fix),
        "{said}"
    );
    assert!(!said.contains("Details"), "titles, never bodies: {said}");
    // Its failed attempt was named by that Read: the Edit in that session is silent, and in
    // a session that edits first it is said.
    let edit = claude_payload(3, &s.root, "session-1");
    assert_eq!(note(&hook(edit.as_bytes(), &[]).0, &edit), None);
    let edit = claude_payload(3, &s.root, "session-3");
    let said = note(&hook(edit.as_bytes(), &[]).0, &edit).unwrap();
    assert!(
        said.contains(&s.failed) && !said.contains(&s.note),
        "{said}"
    );
    let codex_read = retarget(&codex_hook_payloads().unwrap()[1], &s.root, "codex-1");
    assert!(note(&hook(codex_read.as_bytes(), &[]).0, &codex_read).is_some());
}

#[test]
fn hook_is_silent_and_exits_0_on_garbage_empty_and_huge_input() {
    let s = seeded();
    let mut garbage = Vec::with_capacity(1 << 16);
    let mut x: u32 = 0x9e37_79b9;
    for _ in 0..(1 << 16) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        garbage.push(x as u8);
    }
    let failure = claude_payload(1, &s.root, "g");
    let truncated = &failure.as_bytes()[..failure.len() / 2];
    for (what, input) in [
        ("empty", &b""[..]),
        ("whitespace", b"  \n"),
        ("binary garbage", &garbage),
        ("truncated JSON", truncated),
        ("a JSON array", b"[1,2,3]"),
        (
            "the wrong types",
            br#"{"session_id":7,"cwd":[],"hook_event_name":{}}"#,
        ),
    ] {
        let (out, _) = hook(input, &[]);
        assert_eq!(note(&out, "{}"), None, "{what}");
    }

    // 20 MB: a Read whose response carries a 20 MB file is still one note; 20 MB of garbage
    // is silence.
    let mut read: Value = serde_json::from_str(&claude_payload(2, &s.root, "big")).unwrap();
    read["tool_response"]["file"]["content"] = "x".repeat(20 << 20).into();
    let big = read.to_string();
    assert!(big.len() > 20 << 20);
    let (out, elapsed) = hook(big.as_bytes(), &[]);
    assert!(note(&out, &big).is_some(), "one note for the huge Read");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    let junk = vec![b'{'; 20 << 20];
    let (out, _) = hook(&junk, &[]);
    assert_eq!(note(&out, "{}"), None);
}

#[test]
fn hook_is_silent_on_a_locked_brain_within_its_lock_wait() {
    let s = seeded();
    let db = s.root.join(".pith/brain.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; UPDATE memories SET hits = hits;",
    )
    .unwrap();
    let failure = claude_payload(1, &s.root, "locked");
    let (out, elapsed) = hook(failure.as_bytes(), &[]);
    assert_eq!(note(&out, &failure), None);
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    conn.execute_batch("COMMIT").unwrap();
    drop(conn);
    // Unlocked, the same event is heard: the locked call recorded nothing.
    let (out, _) = hook(failure.as_bytes(), &[]);
    assert!(note(&out, &failure).is_some());
}

#[test]
fn hook_is_silent_on_a_corrupt_brain_and_an_unwritable_pith_dir() {
    let s = seeded();
    let failure = claude_payload(1, &s.root, "w");
    // `.pith/session` cannot be made (a file is in the way; tests may run as root, for whom a
    // mode of 0500 would not stop a write): nothing can be recorded, so nothing is said.
    std::fs::write(s.root.join(".pith/session"), "not a directory").unwrap();
    let pith_dir = s.root.join(".pith");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pith_dir, std::fs::Permissions::from_mode(0o500)).unwrap();
    }
    let (out, _) = hook(failure.as_bytes(), &[]);
    assert_eq!(note(&out, &failure), None);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pith_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    std::fs::remove_file(s.root.join(".pith/session")).unwrap();

    std::fs::write(
        s.root.join(".pith/brain.db"),
        b"SQLite format 3\0 but not really",
    )
    .unwrap();
    for i in 1..4 {
        let payload = claude_payload(i, &s.root, "corrupt");
        let (out, _) = hook(payload.as_bytes(), &[]);
        assert_eq!(note(&out, &payload), None, "payload {i}");
    }
}

#[test]
fn eight_hook_processes_at_once_say_a_note_once() {
    let s = seeded();
    for round in 0..5 {
        let payload = claude_payload(2, &s.root, &format!("burst-{round}"));
        let children: Vec<_> = (0..8)
            .map(|_| {
                let mut child = Command::new(pith_bin())
                    .arg("hook")
                    .env_remove("PITH_CONFIG")
                    .env_remove("PITH_LOG")
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(payload.as_bytes())
                    .unwrap();
                child
            })
            .collect();
        let notes: Vec<Option<String>> = children
            .into_iter()
            .map(|c| note(&c.wait_with_output().unwrap(), &payload))
            .collect();
        let said = notes.iter().flatten().count();
        assert_eq!(said, 1, "round {round}: {notes:?}");
    }
}

#[test]
fn a_bad_flag_or_a_broken_config_file_is_still_exit_0_and_quiet() {
    let s = seeded();
    let failure = claude_payload(1, &s.root, "cfg");
    let broken = s.dir.path().join("broken.toml");
    std::fs::write(&broken, "[hook\ncapture_fixes = maybe").unwrap();
    let (out, _) = hook(
        failure.as_bytes(),
        &[("PITH_CONFIG", broken.to_str().unwrap())],
    );
    assert!(note(&out, &failure).is_some(), "defaults, not an error");

    let out = Command::new(pith_bin())
        .args(["hook", "--no-such-flag"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
}

#[test]
fn the_verdict_list_and_fix_capture_come_from_config() {
    let s = seeded();
    let config = s.dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[hook]\nverdict_commands = [\"cargo test\"]\ncapture_fixes = true\n",
    )
    .unwrap();
    let env = [("PITH_CONFIG", config.to_str().unwrap())];
    let failure = claude_payload(1, &s.root, "cfg2");
    assert_eq!(
        note(&hook(failure.as_bytes(), &env).0, &failure),
        None,
        "pytest is not listed"
    );
    let cargo = failure.replace("python3 -m pytest -q test_calc.py", "cargo test");
    assert!(note(&hook(cargo.as_bytes(), &env).0, &cargo).is_some());
    // `--config` names the same file (through the command-line parser, where the bare
    // `pith hook` that `pith setup` writes does without it), and wins over `PITH_CONFIG`.
    let elsewhere = s.dir.path().join("elsewhere.toml");
    std::fs::write(&elsewhere, "[hook]\nverdict_commands = [\"make\"]\n").unwrap();
    let (out, _) = hook_with(
        &["--config", config.to_str().unwrap(), "hook"],
        cargo.replace("\"cfg2\"", "\"cfg3\"").as_bytes(),
        &[("PITH_CONFIG", elsewhere.to_str().unwrap())],
    );
    assert!(note(&out, &cargo).is_some(), "{out:?}");
}

#[test]
fn hook_help_teaches_and_reads_nothing() {
    let out = Command::new(pith_bin())
        .args(["hook", "--help"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage: pith hook"), "{help}");
}

#[cfg(target_os = "linux")]
#[test]
fn the_hook_path_opens_no_socket_and_starts_no_thread() {
    let strace = ["/usr/bin/strace", "/bin/strace"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("strace is needed for this test (apt-get install strace)");
    let s = seeded();
    // Each in a session of its own, so each is answered (a memory is named once per session).
    for (i, payload) in [1, 2, 3].map(|i| (i, claude_payload(i, &s.root, &format!("trace-{i}")))) {
        let log = s.dir.path().join(format!("trace-{i}.log"));
        let input = s.dir.path().join(format!("payload-{i}.json"));
        std::fs::write(&input, &payload).unwrap();
        let out = Command::new(strace)
            .args([
                "-f",
                "-qq",
                "-e",
                "trace=socket,connect,clone,clone3,vfork,fork",
                "-o",
            ])
            .arg(&log)
            .arg(pith_bin())
            .arg("hook")
            .env_remove("PITH_CONFIG")
            .stdin(std::fs::File::open(&input).unwrap())
            .output()
            .unwrap();
        assert!(note(&out, &payload).is_some(), "payload {i} is answered");
        let calls = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            calls.trim(),
            "",
            "payload {i}: the hook made these calls:\n{calls}"
        );
    }
}

// The real clients, through the mock, with `pith hook` configured by `pith setup`.

/// A directory holding `pytest`: a stand-in printing pytest's real output for the captures'
/// failure while `calc.py` subtracts, and its pass once it adds (pytest itself is not
/// installed for the tests).
fn fake_pytest(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let failure = pith_testkit::fixtures::error_output("pytest_assert").unwrap();
    let script = format!(
        "#!/bin/sh\nif grep -q 'a - b' calc.py; then\ncat <<'PYTEST_OUT'\n{}PYTEST_OUT\nexit 1\nfi\n\
         echo '.                                                                        [100%]'\n\
         echo '1 passed in 0.01s'\n",
        failure
    );
    let path = bin.join("pytest");
    std::fs::write(&path, script).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

/// `PATH` with `bin` in front.
fn path_with(bin: &Path) -> std::ffi::OsString {
    let mut dirs = vec![bin.to_path_buf()];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

/// `pith setup <client>` in its default scope, for a client whose home is `home`.
fn pith_setup(dir: &Path, home: &Path, codex_home: &Path, client: &str) {
    let out = Command::new(pith_bin())
        .args(["setup", client, "--command", &pith_bin()])
        .current_dir(dir)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
        .env("CODEX_HOME", codex_home)
        .env("PITH_HOME", codex_home.join("pith-home"))
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pith setup {client}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The index of the first request whose body holds `needle`, and how many hold it.
fn first_with(received: &[pith_testkit::Recorded], needle: &str) -> (Option<usize>, usize) {
    let holds: Vec<usize> = received
        .iter()
        .enumerate()
        .filter(|(_, r)| crate::clients::has(&r.body, needle))
        .map(|(i, _)| i)
        .collect();
    (holds.first().copied(), holds.len())
}

/// Every attachment Claude Code recorded about hooks in its session files under `home`.
fn claude_hook_records(home: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    let projects = home.join(".claude/projects");
    for project in std::fs::read_dir(&projects).unwrap().flatten() {
        for file in std::fs::read_dir(project.path()).unwrap().flatten() {
            if file.path().extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            for line in std::fs::read_to_string(file.path()).unwrap().lines() {
                let Ok(v) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                if v["type"] == "attachment"
                    && v["attachment"]["type"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("hook_"))
                {
                    out.push(v["attachment"].clone());
                }
            }
        }
    }
    out
}

#[test]
fn claude_code_hears_each_note_through_pith_setup_and_shows_no_hook_error() {
    use pith_testkit::fixtures::{ToolCall, anthropic};
    use pith_testkit::{MockUpstream, Reply};

    let s = seeded();
    let home = tempfile::tempdir().unwrap();
    pith_setup(
        &s.root,
        home.path(),
        &home.path().join(".codex"),
        "claude-code",
    );
    let bin = fake_pytest(s.dir.path());
    let calc = s.root.join("calc.py");
    let calc = calc.to_str().unwrap();
    let usage = pith_testkit::fixtures::DEFAULT_USAGE;
    let mock = MockUpstream::start().unwrap();
    let turn = |id: &str, tool: &str, input: Value| {
        Reply::sse(anthropic::stream_with_tool(
            &[],
            &ToolCall::new(id, tool, &input.to_string()),
            usage,
        ))
    };
    let pytest = |description: &str| serde_json::json!({"command": "pytest -q test_calc.py", "description": description});
    mock.push(turn("toolu_01", "Bash", pytest("Run tests")));
    mock.push(turn(
        "toolu_02",
        "Read",
        serde_json::json!({"file_path": calc}),
    ));
    mock.push(turn(
        "toolu_03",
        "Edit",
        serde_json::json!({"file_path": calc, "old_string": "return a - b", "new_string": "return a + b"}),
    ));
    mock.push(turn("toolu_04", "Bash", pytest("Run tests again")));
    mock.push(Reply::sse(anthropic::stream(&["Fixed."], usage)));

    let path = path_with(&bin);
    let run = crate::clients::claude_code_with(
        &s.root,
        home.path(),
        &mock.url(),
        &["--allowedTools", "Bash Edit Read", "--"],
        "the test fails, fix calc.py",
        crate::clients::LIMIT,
        &[
            ("PATH", path.as_os_str()),
            ("PITH_HOME", test_home().as_os_str()),
        ],
    );
    run.assert_ok("");
    assert_eq!(run.stdout, "Fixed.\n", "{}", run.stderr);
    assert_eq!(mock.queued_replies(), 0);
    let received = mock.received();
    assert_eq!(received.len(), 5, "one request per turn");
    assert!(
        std::fs::read_to_string(s.root.join("calc.py"))
            .unwrap()
            .contains("a + b"),
        "the edit ran"
    );

    // Each note is in the request right after its tool call, as the host wrapped it, and stays
    // in every later one (Claude Code resends the history).
    let fix = format!(
        "PostToolUseFailure:Bash hook additional context: pith: a recorded fix matches this failure: {} fix [fresh]",
        s.fix
    );
    assert_eq!(first_with(&received, &fix), (Some(1), 4), "the fix note");
    // Each memory is named once per session: the Read names the two the model has not heard
    // of (not the fix, named one call earlier), so the Edit has nothing new to say.
    let read = format!(
        "PostToolUse:Read hook additional context: pith: 2 memories on this file: {} failed:",
        s.failed
    );
    assert_eq!(first_with(&received, &read), (Some(2), 3), "the read note");
    assert!(
        !received
            .iter()
            .any(|r| String::from_utf8_lossy(&r.body)
                .contains(&format!("on this file: {} fix", s.fix))),
        "the fix was named twice"
    );
    let edit = "PostToolUse:Edit hook additional context";
    assert_eq!(first_with(&received, edit), (None, 0), "the edit note");
    // The passing test run is silent: the last request carries the two notes and no more.
    let last = String::from_utf8_lossy(&received[4].body);
    assert_eq!(last.matches("hook additional context").count(), 2, "{last}");
    // The note lands in a system message after the tool result.
    let body = received[1].body_json().unwrap();
    let messages = body["messages"].as_array().unwrap();
    let at = messages
        .iter()
        .position(|m| m.to_string().contains(&fix))
        .unwrap();
    assert_eq!(messages[at]["role"], "system");
    assert!(
        messages[at - 1].to_string().contains("tool_result"),
        "{body}"
    );

    // No hook error anywhere: Claude Code recorded a success for each of the two notes, and
    // nothing at all for the silent calls (an empty stdout leaves no record).
    let records = claude_hook_records(home.path());
    let kinds: Vec<&str> = records.iter().filter_map(|r| r["type"].as_str()).collect();
    assert!(
        kinds
            .iter()
            .all(|k| *k == "hook_success" || *k == "hook_additional_context"),
        "{records:#?}"
    );
    let successes: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "hook_success")
        .collect();
    assert_eq!(successes.len(), 2, "{records:#?}");
    assert!(
        successes
            .iter()
            .all(|r| r["exitCode"] == 0 && r["stderr"] == ""),
        "{records:#?}"
    );
    assert!(!run.stderr.contains("hook"), "{}", run.stderr);
}

#[test]
fn codex_hears_each_note_through_pith_setup_and_its_payloads_have_the_recorded_shape() {
    use pith_testkit::fixtures::{ToolCall, responses};
    use pith_testkit::{MockUpstream, Reply};

    let s = seeded();
    let home = tempfile::tempdir().unwrap();
    let mock = MockUpstream::start().unwrap();
    let codex_home = crate::clients::write_codex_config(home.path(), &format!("{}/v1", mock.url()));
    pith_setup(&s.root, home.path(), &codex_home, "codex");
    // A second hook beside pith's records what Codex sends, to compare with the fixtures.
    let recorded = s.dir.path().join("payloads.jsonl");
    let mut config = std::fs::read_to_string(codex_home.join("config.toml")).unwrap();
    config.push_str(&format!(
        "\n[[hooks.PostToolUse]]\n[[hooks.PostToolUse.hooks]]\ntype = \"command\"\ncommand = {}\n",
        Value::String(format!(
            "cat >> '{}'; echo >> '{}'",
            recorded.display(),
            recorded.display()
        ))
    ));
    std::fs::write(codex_home.join("config.toml"), config).unwrap();
    let bin = fake_pytest(s.dir.path());
    let usage = pith_testkit::fixtures::DEFAULT_USAGE;
    let exec = |id: &str, cmd: &str| {
        Reply::sse(responses::stream_with_tool(
            &[],
            &ToolCall::new(
                id,
                "exec_command",
                &serde_json::json!({"cmd": cmd, "login": false}).to_string(),
            ),
            usage,
        ))
    };
    mock.push(exec("call_01", "pytest -q test_calc.py"));
    mock.push(exec("call_02", "cat calc.py"));
    mock.push(Reply::sse(responses::stream_with_custom_tool(
        &ToolCall::new(
            "call_03",
            "apply_patch",
            "*** Begin Patch\n*** Update File: calc.py\n@@\n def add(a, b):\n-    return a - b\n+    return a + b\n*** End Patch\n",
        ),
        usage,
    )));
    mock.push(exec("call_04", "pytest -q test_calc.py"));
    mock.push(Reply::sse(responses::stream(&["Fixed."], usage)));

    let path = path_with(&bin);
    let run = crate::clients::codex_with(
        &s.root,
        home.path(),
        &["--dangerously-bypass-hook-trust"],
        "the test fails, fix calc.py",
        crate::clients::LIMIT,
        &[
            ("PATH", path.as_os_str()),
            ("PITH_HOME", test_home().as_os_str()),
        ],
    );
    run.assert_ok("");
    assert_eq!(run.stdout, "Fixed.\n", "{}", run.stderr);
    let received = mock.received();
    assert_eq!(received.len(), 5, "one request per turn");
    assert!(
        std::fs::read_to_string(s.root.join("calc.py"))
            .unwrap()
            .contains("a + b"),
        "the patch ran"
    );

    // Each note reaches the model as a developer message in the next request.
    let fix = format!(
        "pith: a recorded fix matches this failure: {} fix [fresh]",
        s.fix
    );
    assert_eq!(first_with(&received, &fix), (Some(1), 4), "the fix note");
    // Each memory once per session: the cat names the two not heard of yet, the patch nothing.
    let read = format!("pith: 2 memories on this file: {} failed:", s.failed);
    assert_eq!(first_with(&received, &read), (Some(2), 3), "the read note");
    let edit = "pith: a failed attempt on record for the file just edited:";
    assert_eq!(first_with(&received, edit), (None, 0), "the edit note");
    let last = received[4].body_json().unwrap();
    let notes: Vec<&Value> = last["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| {
            i["role"] == "developer"
                && i["content"][0]["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("pith: "))
        })
        .collect();
    assert_eq!(notes.len(), 2, "the passing test run is silent: {notes:#?}");
    // Each sits between its tool call and the call's output.
    let input = last["input"].as_array().unwrap();
    let at = input
        .iter()
        .position(|i| i.to_string().contains(&fix))
        .unwrap();
    assert_eq!(input[at - 1]["call_id"], "call_01", "{:#}", input[at - 1]);
    assert_eq!(input[at + 1]["type"], "function_call_output");
    assert_eq!(input[at + 1]["call_id"], "call_01");
    assert!(!run.stderr.contains("hook failed"), "{}", run.stderr);

    // What Codex sent has the recorded fixtures' shape, event for event.
    let live: Vec<Value> = std::fs::read_to_string(&recorded)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let fixtures: Vec<Value> = codex_hook_payloads()
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(live.len(), fixtures.len(), "{live:#?}");
    for (live, fixture) in live.iter().zip(&fixtures) {
        assert_eq!(shape(live), shape(fixture), "{live:#}");
        assert_eq!(live["tool_name"], fixture["tool_name"]);
        assert_eq!(live["tool_input"], fixture["tool_input"]);
    }
}

/// Every key path of a JSON value with the type found there.
fn shape(v: &Value) -> Vec<String> {
    fn walk(v: &Value, at: &str, out: &mut Vec<String>) {
        let kind = match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(map) => {
                for (k, v) in map {
                    walk(v, &format!("{at}.{k}"), out);
                }
                "object"
            }
        };
        out.push(format!("{at}: {kind}"));
    }
    let mut out = Vec::new();
    walk(v, "", &mut out);
    out.sort();
    out
}

/// The binary is linked at a fixed address (crates/pith/build.rs), so that a hook's start does
/// not spend 0.8 ms relocating 41,000 pointers: its ELF type is `ET_EXEC`, not a PIE's
/// `ET_DYN`, unless the build asked for a PIE with `PITH_BUILD_PIE` (a switch: `1`, `true`,
/// `yes`, `on`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_binary_is_linked_at_a_fixed_address_unless_a_pie_is_asked_for() {
    const ET_EXEC: u16 = 2;
    const ET_DYN: u16 = 3;
    let mut header = [0u8; 18];
    std::io::Read::read_exact(&mut std::fs::File::open(pith_bin()).unwrap(), &mut header).unwrap();
    assert_eq!(&header[..4], b"\x7fELF", "not an ELF file");
    let e_type = u16::from_le_bytes([header[16], header[17]]);
    // What build.rs decided (the one reading of PITH_BUILD_PIE).
    let want = match env!("PITH_LINKED_PIE") {
        "1" => ET_DYN,
        _ => ET_EXEC,
    };
    assert_eq!(e_type, want, "ELF type of {}", pith_bin());
}
