//! What pith creates is private to its user whatever the umask: directories 0700, files 0600.
//! Each command runs under `umask 000` through `sh`, so nothing but pith itself narrows a mode.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::pith_bin;

/// `pith ARGS` under umask 000 (exec'd by `sh`, so the umask is the process's own).
fn under_umask_000(args: &[&str]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "umask 000; exec \"$0\" \"$@\"", &pith_bin()])
        .args(args)
        .env_remove("PITH_CONFIG");
    cmd
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The database and, when they exist at this moment, its WAL and shared-memory files.
fn assert_private_database(db: &Path) {
    assert_eq!(mode(db), 0o600, "{}", db.display());
    for suffix in ["-wal", "-shm"] {
        let mut side = db.as_os_str().to_owned();
        side.push(suffix);
        let side = Path::new(&side);
        if side.exists() {
            assert_eq!(mode(side), 0o600, "{}", side.display());
        }
    }
}

#[test]
fn the_brain_is_private_whatever_the_umask() {
    let ws = crate::memory::workspace();
    let out = under_umask_000(&["memory", "add", "note", "A note", "--body", "text"])
        .current_dir(ws.path())
        .env("PITH_HOME", ws.path().join(".pith-home"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let brain = ws.path().join(".pith");
    assert_eq!(mode(&brain), 0o700);
    assert_eq!(mode(&brain.join(".gitignore")), 0o600);
    assert_private_database(&brain.join("brain.db"));
}

#[test]
fn pith_home_and_the_ledger_are_private_whatever_the_umask() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("new/home");
    let mut child = under_umask_000(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--anthropic-upstream",
        "http://127.0.0.1:9",
        "--openai-upstream",
        "http://127.0.0.1:9",
    ])
    .env("PITH_HOME", &home)
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        said.push_str(&line);
        said.push('\n');
        if line.starts_with("pith proxy listening on") {
            break;
        }
    }
    let ledger = home.join("ledger.db");
    let history = home.join("history.db");
    let modes = (
        mode(&tmp.path().join("new")),
        mode(&home),
        ledger.exists(),
        history.exists(),
    );
    if ledger.exists() {
        assert_private_database(&ledger);
    }
    if history.exists() {
        assert_private_database(&history);
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(modes, (0o700, 0o700, true, true), "{said}");
}

#[test]
fn the_history_and_its_token_key_are_private_whatever_the_umask() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("fresh");
    let out = under_umask_000(&["history", "candidates", "--filter", "empty"])
        .env("PITH_HOME", &home)
        .env_remove("PITH_HISTORY_TOKEN_KEY")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&home), 0o700);
    assert_private_database(&home.join("history.db"));
    assert_eq!(mode(&home.join("history.key")), 0o600);
}

#[test]
fn setup_writes_a_private_new_config_whatever_the_umask() {
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".git")).unwrap();
    let codex = tempfile::tempdir().unwrap();
    let codex_home = codex.path().join("codex");
    for args in [
        &["claude-code", "--scope", "project"][..],
        &["claude-code"],
        &["codex"],
    ] {
        let out = under_umask_000(&[&["setup", "--command", "pith"][..], args].concat())
            .current_dir(project.path())
            .env("HOME", codex.path().join("home"))
            .env_remove("CLAUDE_CONFIG_DIR")
            .env("CODEX_HOME", &codex_home)
            .env("PITH_HOME", codex.path().join("pith-home"))
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(mode(&project.path().join(".mcp.json")), 0o600);
    assert_eq!(mode(&codex.path().join("home/.claude.json")), 0o600);
    assert_eq!(
        mode(&project.path().join(".claude/settings.local.json")),
        0o600
    );
    assert_eq!(mode(&codex_home), 0o700);
    assert_eq!(mode(&codex_home.join("config.toml")), 0o600);
    // The record `pith setup --undo` reads is private too.
    assert_eq!(mode(&codex.path().join("pith-home")), 0o700);
    assert_eq!(mode(&codex.path().join("pith-home/setup.json")), 0o600);
}
