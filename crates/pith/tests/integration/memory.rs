//! `pith memory ...` through the real binary, on temporary workspaces.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// A temporary git-like workspace with a couple of source files.
pub(crate) fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".git")).unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(
        dir.path().join("src/db.rs"),
        "fn open() {}\nfn busy_timeout() {}\nfn close() {}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("src/pool.rs"), "const SIZE: usize = 8;\n").unwrap();
    dir
}

fn pith_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(crate::support::pith_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("PITH_CONFIG")
        .env("PITH_HOME", dir.join(".pith-home"))
        .output()
        .unwrap()
}

/// Run and require success; stdout as text.
fn ok(dir: &Path, args: &[&str]) -> String {
    let out = pith_in(dir, args);
    assert!(
        out.status.success(),
        "pith {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Run and require failure; stderr as text.
fn fails(dir: &Path, args: &[&str]) -> String {
    let out = pith_in(dir, args);
    assert!(!out.status.success(), "pith {args:?} should have failed");
    assert!(out.stdout.is_empty(), "failure printed to stdout");
    String::from_utf8(out.stderr).unwrap()
}

fn json(dir: &Path, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    serde_json::from_str(&ok(dir, &args)).unwrap()
}

fn add_fix(dir: &Path) -> String {
    let v = json(
        dir,
        &[
            "memory",
            "add",
            "fix",
            "Retry on SQLITE_BUSY in the ledger writer",
            "--headline",
            "database is locked",
            "--tag",
            "sqlite,ledger",
            "--evidence",
            "src/db.rs:2-3",
            "--body",
            "Set busy_timeout on every connection; WAL alone is not enough.",
        ],
    );
    v["id"].as_str().unwrap().to_owned()
}

fn add_failed(dir: &Path) -> String {
    let v = json(
        dir,
        &[
            "memory",
            "add",
            "failed",
            "A bigger connection pool did not help",
            "--evidence",
            "src/pool.rs",
            "--body",
            "Raising SIZE to 64 made the busy errors more frequent.",
        ],
    );
    v["id"].as_str().unwrap().to_owned()
}

/// Stable text for snapshots: ids by role, dates blanked.
fn scrub(text: &str, ids: &[(&str, &str)]) -> String {
    let mut text = text.to_owned();
    for (id, name) in ids {
        text = text.replace(id, name);
    }
    text
}

fn snapshot(name: &str, text: &str) {
    insta::with_settings!({
        filters => vec![(r"\d{4}-\d{2}-\d{2}", "[DATE]")],
        prepend_module_to_snapshot => true,
    }, {
        insta::assert_snapshot!(name, text);
    });
}

#[test]
fn memory_cli_human_output() {
    let ws = workspace();
    let dir = ws.path();
    let fix = add_fix(dir);
    let failed = add_failed(dir);
    let ids = [(fix.as_str(), "m-FIX0"), (failed.as_str(), "m-FAIL")];

    let added = ok(dir, &["memory", "add", "note", "CI runs on two cores"]);
    assert!(added.starts_with("saved m-"), "{added}");
    assert!(added.ends_with("(note, unverified): CI runs on two cores\n"));
    let note = added.split_whitespace().nth(1).unwrap().to_owned();
    let ids = [ids[0], ids[1], (note.as_str(), "m-NOTE")];

    snapshot("list", &scrub(&ok(dir, &["memory", "list"]), &ids));
    // An empty list says why: none asked for, none of the kind (it said "no memories yet").
    assert_eq!(
        ok(dir, &["memory", "list", "--limit", "0"]),
        "--limit 0: no memories listed\n"
    );
    assert_eq!(
        ok(dir, &["memory", "list", "--kind", "decision"]),
        "no decision memories here; `pith memory list` shows every kind\n"
    );
    snapshot(
        "search",
        &scrub(&ok(dir, &["memory", "search", "busy", "sqlite"]), &ids),
    );
    snapshot("show", &scrub(&ok(dir, &["memory", "show", &fix]), &ids));

    std::fs::write(dir.join("src/pool.rs"), "const SIZE: usize = 64;\n").unwrap();
    snapshot(
        "verify_stale",
        &scrub(&ok(dir, &["memory", "verify", &failed]), &ids),
    );
    snapshot(
        "forget",
        &scrub(&ok(dir, &["memory", "forget", &note]), &ids),
    );
    snapshot(
        "list_trash",
        &scrub(&ok(dir, &["memory", "list", "--trash"]), &ids),
    );
    snapshot(
        "restore",
        &scrub(&ok(dir, &["memory", "restore", &note]), &ids),
    );
}

#[test]
fn memory_cli_reports_edited_and_deleted_evidence() {
    let ws = workspace();
    let dir = ws.path();
    let fix = add_fix(dir);
    let failed = add_failed(dir);
    let v = json(dir, &["memory", "verify", "--all"]);
    let states: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["fresh", "fresh"]);

    // An edit outside the recorded lines leaves the fix fresh; inside them, stale.
    std::fs::write(
        dir.join("src/db.rs"),
        "fn open_v2() {}\nfn busy_timeout() {}\nfn close() {}\n",
    )
    .unwrap();
    assert_eq!(
        json(dir, &["memory", "verify", &fix])["status"],
        "fresh",
        "edit outside the range"
    );
    std::fs::write(dir.join("src/db.rs"), "fn open() {}\nfn retry() {}\n").unwrap();
    let v = json(dir, &["memory", "verify", &fix]);
    assert_eq!(v["status"], "stale");
    assert_eq!(v["before"], "fresh");
    assert_eq!(v["evidence"][0]["path"], "src/db.rs");
    assert_eq!(v["evidence"][0]["state"], "changed");

    std::fs::remove_file(dir.join("src/pool.rs")).unwrap();
    let text = ok(dir, &["memory", "verify", &failed]);
    assert!(
        text.contains("stale: src/pool.rs gone (was fresh)"),
        "{text}"
    );
    let shown = json(dir, &["memory", "show", &failed]);
    assert_eq!(shown["status"], "stale");
    assert_eq!(shown["evidence"][0]["state"], "gone");

    // Accepting re-records what is there now; the gone file is dropped.
    let v = json(dir, &["memory", "verify", &failed, "--accept"]);
    assert_eq!(v["status"], "unverified");
    assert_eq!(v["accepted"]["status"], "stale");
    let v = json(dir, &["memory", "verify", &fix, "--accept"]);
    assert_eq!(v["status"], "fresh");
    assert_eq!(json(dir, &["memory", "show", &fix])["status"], "fresh");
}

#[test]
fn memory_cli_json_shapes_and_hit_credits() {
    let ws = workspace();
    let dir = ws.path();
    let fix = add_fix(dir);
    add_failed(dir);
    let shown = json(dir, &["memory", "show", &fix]);
    assert_eq!(shown["kind"], "fix");
    assert_eq!(shown["headline"], "database is locked");
    assert_eq!(shown["tags"], serde_json::json!(["sqlite", "ledger"]));
    assert_eq!(shown["evidence"][0]["lines"]["start"], 2);
    assert_eq!(shown["evidence"][0]["hash"].as_str().unwrap().len(), 64);
    assert_eq!(shown["hits"], 1);

    let found = json(dir, &["memory", "search", "ledger", "writer"]);
    assert_eq!(found["total"], 1);
    assert_eq!(found["hits"][0]["id"], fix.as_str());
    assert_eq!(found["hits"][0]["hits"], 2);

    // Listing and a failed search move no counter.
    json(dir, &["memory", "list"]);
    json(dir, &["memory", "search", "nothing-like-this"]);
    let listed = json(dir, &["memory", "list", "--kind", "fix"]);
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["hits"], 2);
}

#[test]
fn memory_cli_errors_are_clear() {
    let ws = workspace();
    let dir = ws.path();
    let err = fails(dir, &["memory", "show", "m-0000"]);
    assert!(err.contains("no memory m-0000"), "{err}");
    assert!(err.contains("`pith memory list`"), "{err}");

    let err = fails(dir, &["memory", "add", "bugfix", "x"]);
    assert!(err.contains("use note, fix, failed or decision"), "{err}");

    let err = fails(
        dir,
        &["memory", "add", "note", "x", "--evidence", "src/nope.rs"],
    );
    assert!(err.contains("src/nope.rs does not exist"), "{err}");

    let err = fails(
        dir,
        &["memory", "add", "note", "x", "--evidence", "src/db.rs:7-9"],
    );
    assert!(err.contains("has 3 lines"), "{err}");

    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    let spec = outside.path().join("secret");
    let err = fails(
        dir,
        &[
            "memory",
            "add",
            "note",
            "x",
            "--evidence",
            spec.to_str().unwrap(),
        ],
    );
    assert!(err.contains("outside the workspace"), "{err}");

    let err = fails(dir, &["memory", "add", "note", "two\nlines"]);
    assert!(err.contains("title must be one line"), "{err}");

    let err = fails(dir, &["memory", "search", "--", "-- !!"]);
    assert!(err.contains("no words to search for"), "{err}");

    let id = add_failed(dir);
    let err = fails(dir, &["memory", "restore", &id]);
    assert!(err.contains("not in the trash"), "{err}");
    ok(dir, &["memory", "forget", &id]);
    let err = fails(dir, &["memory", "show", &id]);
    assert!(
        err.contains(&format!("`pith memory restore {id}`")),
        "{err}"
    );
}

#[test]
fn memory_cli_finds_the_workspace_root() {
    let ws = workspace();
    let sub = ws.path().join("src");
    // From a subdirectory: the brain lands at the root and evidence is cwd-relative.
    let v = json(
        &sub,
        &[
            "memory",
            "add",
            "note",
            "Pool size",
            "--evidence",
            "pool.rs",
        ],
    );
    assert_eq!(v["evidence"][0]["path"], "src/pool.rs");
    assert!(ws.path().join(".pith/brain.db").exists());
    assert!(!sub.join(".pith").exists());

    // --workspace from elsewhere: evidence is root-relative.
    let elsewhere = tempfile::tempdir().unwrap();
    let root = ws.path().to_str().unwrap();
    let v = json(
        elsewhere.path(),
        &[
            "memory",
            "--workspace",
            root,
            "add",
            "note",
            "From outside",
            "--evidence",
            "src/db.rs",
        ],
    );
    assert_eq!(v["evidence"][0]["path"], "src/db.rs");
    let listed = json(elsewhere.path(), &["memory", "list", "--workspace", root]);
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert!(!elsewhere.path().join(".pith").exists());
}

#[test]
fn memory_cli_two_processes_write_at_once() {
    let ws = workspace();
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let dir = ws.path().to_path_buf();
            std::thread::spawn(move || {
                for i in 0..12 {
                    let title = format!("writer {w} memory {i}");
                    ok(&dir, &["memory", "add", "note", &title, "--tag", "load"]);
                    ok(&dir, &["memory", "search", "writer", "memory"]);
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let listed = json(ws.path(), &["memory", "list"]);
    assert_eq!(listed.as_array().unwrap().len(), 24);
    let found = json(ws.path(), &["memory", "search", "load", "--limit", "50"]);
    assert_eq!(found["total"], 24);
}

#[test]
#[cfg(unix)]
fn memory_reads_never_create_or_chmod() {
    let ws = workspace();
    let dir = ws.path();
    let brain_dir = dir.join(".pith");
    for args in [
        &["memory", "list"][..],
        &["memory", "list", "--trash"],
        &["memory", "search", "busy"],
        &["memory", "search", "busy", "--json"],
        &["memory", "verify", "--all"],
    ] {
        ok(dir, args);
        assert!(!brain_dir.exists(), "pith {args:?} created .pith/");
    }
    for args in [
        &["memory", "show", "m-0000"][..],
        &["memory", "verify", "m-0000"],
        &["memory", "forget", "m-0000"],
        &["memory", "restore", "m-0000"],
    ] {
        let err = fails(dir, args);
        assert!(err.contains("no memory m-0000"), "{err}");
        assert!(!brain_dir.exists(), "pith {args:?} created .pith/");
    }

    add_fix(dir);
    let db = brain_dir.join("brain.db");
    let readable: std::fs::Permissions = std::os::unix::fs::PermissionsExt::from_mode(0o644);
    std::fs::set_permissions(&db, readable).unwrap();
    ok(dir, &["memory", "list"]);
    ok(dir, &["memory", "search", "busy"]);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&db).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o644, "a read changed the brain's mode");
}
