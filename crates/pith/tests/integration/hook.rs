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
    Seeded {
        dir,
        root,
        fix,
        failed,
        note,
    }
}

/// Claude Code's payload `i` of the capture, moved into `root` and into `session`.
fn claude_payload(i: usize, root: &Path, session: &str) -> String {
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
fn hook(input: &[u8], env: &[(&str, &str)]) -> (Output, Duration) {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(pith_bin());
    cmd.arg("hook")
        .env("PITH_HOME", home.path())
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
fn note(out: &Output, payload: &str) -> Option<String> {
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

    // The other two moments, through the binary.
    let read = claude_payload(2, &s.root, "session-1");
    let said = note(&hook(read.as_bytes(), &[]).0, &read).unwrap();
    assert!(
        said.starts_with("pith: 3 memories on this file: "),
        "{said}"
    );
    assert!(!said.contains("Details"), "titles, never bodies: {said}");
    let edit = claude_payload(3, &s.root, "session-1");
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
}

#[cfg(target_os = "linux")]
#[test]
fn the_hook_path_opens_no_socket_and_starts_no_thread() {
    let strace = ["/usr/bin/strace", "/bin/strace"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("strace is needed for this test (apt-get install strace)");
    let s = seeded();
    for (i, payload) in [1, 2, 3].map(|i| (i, claude_payload(i, &s.root, "trace"))) {
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
