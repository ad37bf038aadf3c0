//! Issue 45's third hardening round, the findings about a project directory (a repository the
//! user cloned, a stranger's data): what a committed `.pith/` could make `pith hook`, `pith
//! mcp` and `pith memory` do. Each test is named for its finding and fails on the build before
//! the fix (`PITH_TEST_BIN=<old pith> cargo test --test integration untrusted_project::`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use crate::hook::{claude_payload, hook, note, seeded, test_home};
use crate::support::pith_bin;

/// `count` directories under `dir`, each holding a file, last changed `age` ago.
fn old_dirs(dir: &Path, count: usize, age: Duration) -> Vec<PathBuf> {
    let then = SystemTime::now() - age;
    (0..count)
        .map(|i| {
            let project = dir.join(format!("project-{i:02}"));
            std::fs::create_dir(&project).unwrap();
            std::fs::write(project.join("work.txt"), "the user's work").unwrap();
            std::fs::File::open(&project)
                .unwrap()
                .set_modified(then)
                .unwrap();
            project
        })
        .collect()
}

const TEN_DAYS: Duration = Duration::from_secs(10 * 24 * 3600);

#[test]
fn finding_1_the_hook_prunes_nothing_through_a_session_dir_linked_out_of_the_project() {
    let s = seeded();
    // The user's other projects, beside the clone: untouched for ten days.
    let others = tempfile::tempdir().unwrap();
    let projects = old_dirs(others.path(), 70, TEN_DAYS);
    std::os::unix::fs::symlink(others.path(), s.root.join(".pith/session")).unwrap();
    let read = claude_payload(2, &s.root, "linked-session");
    let (out, _) = hook(read.as_bytes(), &[]);
    let gone: Vec<&PathBuf> = projects.iter().filter(|p| !p.exists()).collect();
    assert!(gone.is_empty(), "deleted through the link: {gone:?}");
    // Nothing can be recorded, so nothing is said (and the hook still exits 0, quietly).
    assert_eq!(note(&out, &read), None);
    let names: Vec<String> = std::fs::read_dir(others.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("project-"))
        .collect();
    assert!(names.is_empty(), "written through the link: {names:?}");
}

#[test]
fn finding_2_the_hook_truncates_nothing_through_a_linked_prune_stamp() {
    let s = seeded();
    let home = tempfile::tempdir().unwrap();
    let bashrc = home.path().join(".bashrc");
    std::fs::write(&bashrc, "export PATH=$HOME/bin:$PATH\n").unwrap();
    // Older than the hour between prunes, so the next new session prunes and stamps.
    std::fs::File::open(&bashrc)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(7200))
        .unwrap();
    let sessions = s.root.join(".pith/session");
    std::fs::create_dir(&sessions).unwrap();
    std::os::unix::fs::symlink(&bashrc, sessions.join(".pruned")).unwrap();
    let read = claude_payload(2, &s.root, "stamp-link");
    let (out, _) = hook(read.as_bytes(), &[]);
    assert!(note(&out, &read).is_some(), "the session itself works");
    assert_eq!(
        std::fs::read_to_string(&bashrc).unwrap(),
        "export PATH=$HOME/bin:$PATH\n"
    );
}

/// `cmd`'s output with `input` on its stdin, given at most `within` (then killed): `None` when
/// it did not end in time.
pub(crate) fn output_within(mut cmd: Command, input: &[u8], within: Duration) -> Option<Output> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = std::io::Write::write_all(&mut stdin, &input);
        drop(stdin);
        let _ = done.send(child.wait_with_output());
    });
    match ended.recv_timeout(within) {
        Ok(out) => Some(out.unwrap()),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            None
        }
    }
}

/// `pith ARGS` in `dir` with `input` on stdin, given at most `within`.
fn run_within(dir: &Path, args: &[&str], input: &[u8], within: Duration) -> Option<Output> {
    let mut cmd = Command::new(pith_bin());
    cmd.args(args)
        .current_dir(dir)
        .env("PITH_HOME", test_home())
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_LOG");
    output_within(cmd, input, within)
}

#[test]
fn finding_5_a_planted_brain_with_a_recursive_view_cannot_hang_the_hook_or_the_cli() {
    let s = seeded();
    let conn = rusqlite::Connection::open(s.root.join(".pith/brain.db")).unwrap();
    conn.execute_batch(
        "DROP TABLE evidence;
         CREATE VIEW evidence(memory_seq, ord, path, line_start, line_end, hash, size, mtime_ns)
         AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)
         SELECT x, 0, 'calc.py', NULL, NULL, NULL, NULL, NULL FROM r;",
    )
    .unwrap();
    drop(conn);
    // Far beyond what either takes; before the fix, neither ever ended.
    let within = Duration::from_secs(30);
    let read = claude_payload(2, &s.root, "view");
    let out =
        run_within(&s.root, &["hook"], read.as_bytes(), within).expect("the hook ends in time");
    assert_eq!(note(&out, &read), None);
    let out = run_within(&s.root, &["memory", "show", &s.note], b"", within)
        .expect("the CLI ends in time");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not a database pith can read safely")
            && stderr.contains("`evidence` is a view, not a table"),
        "{stderr}"
    );
}

/// `pith memory add note TITLE` in `dir`.
fn memory_add(dir: &Path, title: &str) -> Output {
    Command::new(pith_bin())
        .args(["memory", "add", "note", title])
        .current_dir(dir)
        .env("PITH_HOME", test_home())
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap()
}

/// A git work tree with one file.
fn project() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("README.md"), "# a project\n").unwrap();
    crate::clients::git_commit_all(&root);
    (dir, root)
}

#[test]
fn finding_6_a_save_writes_no_brain_through_a_linked_pith_dir_or_brain_file() {
    let outside = tempfile::tempdir().unwrap();
    // `.pith` itself a link out of the project.
    let (_p, root) = project();
    std::os::unix::fs::symlink(outside.path(), root.join(".pith")).unwrap();
    let out = memory_add(&root, "through the link");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(".pith is a link"), "{stderr}");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);

    // `.pith/brain.db`, or SQLite's `-wal` beside it, a link to a file of the user's.
    for linked in ["brain.db", "brain.db-wal"] {
        let (_p, root) = project();
        std::fs::create_dir(root.join(".pith")).unwrap();
        let mine = outside.path().join(format!("mine-{linked}"));
        std::fs::write(&mine, "the user's file").unwrap();
        std::os::unix::fs::symlink(&mine, root.join(".pith").join(linked)).unwrap();
        let out = memory_add(&root, "through the link");
        assert!(!out.status.success(), "{linked}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&format!("{linked} is a link")), "{stderr}");
        assert_eq!(std::fs::read_to_string(&mine).unwrap(), "the user's file");
    }
}

#[test]
fn finding_7_notes_from_a_brain_that_came_with_the_clone_say_so_until_trusted() {
    let s = seeded();
    // The same brain as a clone brings it: a file this user's pith did not make.
    let db = s.root.join(".pith/brain.db");
    let copy = s.root.join(".pith/brain.db.copy");
    std::fs::copy(&db, &copy).unwrap();
    std::fs::rename(&copy, &db).unwrap();
    let read = claude_payload(2, &s.root, "cloned");
    let (out, _) = hook(read.as_bytes(), &[]);
    let said = note(&out, &read).expect("the memories are named");
    assert!(
        said.starts_with(
            "pith, quoting a memory file that came with this project (not written by your pith; \
             `pith memory trust` once reviewed): 3 memories on this file: "
        ),
        "{said}"
    );
    let trust = Command::new(pith_bin())
        .args(["memory", "trust"])
        .current_dir(&s.root)
        .env("PITH_HOME", test_home())
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    assert!(trust.status.success(), "{trust:?}");
    assert!(
        String::from_utf8_lossy(&trust.stdout).contains("(3 memories)"),
        "{trust:?}"
    );
    let read = claude_payload(2, &s.root, "trusted");
    let (out, _) = hook(read.as_bytes(), &[]);
    let said = note(&out, &read).expect("the memories are named");
    assert!(
        said.starts_with("pith: 3 memories on this file: "),
        "{said}"
    );
}

/// An OpenCode database with the tables pith reads, one session of one user message.
fn opencode_db(dir: &Path) -> (PathBuf, rusqlite::Connection) {
    let path = dir.join("opencode.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        r#"CREATE TABLE session (id TEXT PRIMARY KEY, time_created INTEGER);
           CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER,
                                 data TEXT);
           CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, data TEXT);
           INSERT INTO session VALUES ('ses_1', 1000);
           INSERT INTO message VALUES ('msg_1', 'ses_1', 1000, '{"role":"user"}');
           INSERT INTO part VALUES ('prt_1', 'msg_1', '{"type":"text","text":"fix the bug"}');"#,
    )
    .unwrap();
    (path, conn)
}

/// `pith history import` of only the OpenCode database at `db`, given at most `within`.
fn import_opencode(home: &Path, db: &Path, within: Duration) -> Option<Output> {
    let nowhere = home.join("nowhere");
    let nowhere = nowhere.to_str().unwrap();
    let mut cmd = Command::new(pith_bin());
    cmd.args(["history", "import", "--json", "--claude-dir", nowhere])
        .args([
            "--codex-home",
            nowhere,
            "--opencode-db",
            db.to_str().unwrap(),
        ])
        .env("PITH_HOME", home)
        .env_remove("PITH_CONFIG");
    output_within(cmd, b"", within)
}

/// The report of an import of `db` that ended within `within`, succeeded and said `said` on
/// stderr.
fn import_saying(home: &Path, db: &Path, within: Duration, said: &str) -> serde_json::Value {
    let out = import_opencode(home, db, within).expect("the import ends in time");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(said), "{stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn finding_17_an_opencode_database_with_a_recursive_view_is_refused_and_huge_parts_left_out() {
    let home = tempfile::tempdir().unwrap();
    let (db, conn) = opencode_db(home.path());
    conn.execute_batch(
        "ALTER TABLE session RENAME TO real_session;
         CREATE VIEW session(id, time_created) AS
         WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)
         SELECT 'ses_' || x, x FROM r;",
    )
    .unwrap();
    drop(conn);
    // Milliseconds with the fix; before it, endless (and its sort's temporary file grew until
    // the disk was full), so not long.
    let report = import_saying(
        home.path(),
        &db,
        Duration::from_secs(15),
        "`session` is a view, not a table",
    );
    assert_eq!(report["opencodeSessions"], 0, "{report}");

    // Three parts far over what the history keeps of a message: left out unread, and said.
    let home = tempfile::tempdir().unwrap();
    let (db, conn) = opencode_db(home.path());
    let huge = format!(r#"{{"type":"text","text":"{}"}}"#, "x".repeat(9 << 20));
    for i in 2..5 {
        conn.execute(
            "INSERT INTO part VALUES (?1, 'msg_1', ?2)",
            rusqlite::params![format!("prt_{i}"), huge],
        )
        .unwrap();
    }
    drop(conn);
    let report = import_saying(
        home.path(),
        &db,
        Duration::from_secs(60),
        "left out 3 OpenCode messages or parts over 8 MiB",
    );
    assert_eq!(report["opencodeSessions"], 1, "{report}");
    assert_eq!(report["messagesAdded"], 1, "{report}");
}
