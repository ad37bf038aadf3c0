//! Stop 65's findings (a read-only review of the project rule, and a new user's session): what a
//! stranger's text or file (a cloned project, a value a variable or a flag names, a brain's own
//! rows) could make the CLI print or do. Each test fails on the build before the fix
//! (`PITH_TEST_BIN=<old pith> cargo test --test integration stranger_input::`).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::hook::{seeded, test_home};
use crate::support::pith_bin;

/// `pith ARGS` in `dir` with `env` set and stdin empty, ended after `within` (then `None`).
fn pith_within(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    within: Duration,
) -> Option<Output> {
    let mut cmd = Command::new(pith_bin());
    cmd.args(args)
        .current_dir(dir)
        .env("PITH_HOME", test_home())
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    crate::untrusted_project::output_within(cmd, b"", within)
}

const WITHIN: Duration = Duration::from_secs(30);

/// A directory holding a `claude` that does nothing, and a `PATH` of it and the system's: a
/// Claude Code the doctor and `pith run` find.
fn fake_claude() -> (tempfile::TempDir, String) {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().unwrap();
    let claude = bin.path().join("claude");
    std::fs::write(&claude, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    (bin, path)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `pith doctor` in `project`, its clients' homes under `homes` and a Claude Code on `PATH`.
fn doctor_in(project: &Path, homes: &Path) -> Option<Output> {
    let home = homes.join("home");
    let (claude, client_homes) = (homes.join("claude"), homes.join("codex"));
    let (_bin, path) = fake_claude();
    pith_within(
        project,
        &["doctor"],
        &[
            ("PATH", &path),
            ("HOME", home.to_str().unwrap()),
            ("CLAUDE_CONFIG_DIR", claude.to_str().unwrap()),
            ("CODEX_HOME", client_homes.to_str().unwrap()),
            ("XDG_CONFIG_HOME", home.join(".config").to_str().unwrap()),
        ],
        WITHIN,
    )
}

/// An evidence path is a file a stranger named (or a brain's row says anything); an id, a query
/// or a path in an error message is what the user or a file gave. None reaches the terminal
/// raw.
#[test]
fn a_control_character_from_a_brain_an_argument_or_a_path_is_escaped() {
    let s = seeded();
    let conn = rusqlite::Connection::open(s.root.join(".pith/brain.db")).unwrap();
    conn.execute(
        "UPDATE evidence SET path = 'src/we\u{1b}[31mird\nname.rs'",
        [],
    )
    .unwrap();
    drop(conn);
    let out = pith_within(&s.root, &["memory", "show", &s.note], &[], WITHIN).unwrap();
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        shown.contains("src/we\\u{1b}[31mird\\u{a}name.rs"),
        "{shown:?}"
    );
    assert!(!shown.contains('\u{1b}'), "{shown:?}");

    for args in [
        &["memory", "show", "m-\u{1b}[31mX"][..],
        &["history", "show", "c-\u{1b}]0;owned\u{7}"][..],
        &["--config", "/nonexistent/\u{1b}[2J.toml", "stats"][..],
    ] {
        let out = pith_within(&s.root, args, &[], WITHIN).unwrap();
        assert!(!out.status.success(), "{args:?}");
        let said = text(&out.stderr);
        assert!(said.contains("pith: error: "), "{args:?}: {said:?}");
        assert!(
            !said.contains('\u{1b}') && !said.contains('\u{7}'),
            "{args:?}: {said:?}"
        );
    }
}

/// `pith doctor` quotes a project's client settings: a base URL a cloned repository's
/// `.claude/settings.json` sets could rewrite the terminal (a window title, the clipboard).
#[test]
fn doctor_escapes_a_projects_settings() {
    let project = tempfile::tempdir().unwrap();
    let homes = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.path().join(".claude")).unwrap();
    std::fs::write(
        project.path().join(".claude/settings.json"),
        r#"{"env": {"ANTHROPIC_BASE_URL": "https://x\u001b]52;c;b3duZWQ=\u0007.example"}}"#,
    )
    .unwrap();
    let out = doctor_in(project.path(), homes.path()).expect("the doctor ends");
    let shown = text(&out.stdout);
    assert!(shown.contains(".example"), "the value is shown: {shown}");
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
        "{shown:?}"
    );
}

/// A setting the proxy refuses (here `PITH_HOLDOUT` past its range) stops `pith proxy` at once.
/// `pith doctor` said all was well, and `pith run` waited two seconds and said only that no
/// proxy answered, its client then going straight to the provider.
#[test]
fn a_setting_the_proxy_refuses_fails_the_doctor_and_is_named_by_run() {
    let dir = tempfile::tempdir().unwrap();
    let (_bin, path) = fake_claude();
    let bad = [("PITH_HOLDOUT", "0.9"), ("PATH", path.as_str())];
    let out = pith_within(dir.path(), &["doctor"], &bad, WITHIN).unwrap();
    let shown = text(&out.stdout);
    assert!(!out.status.success(), "{shown}");
    let line = shown
        .lines()
        .find(|l| l.contains("proxy settings"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        line.starts_with("FAIL proxy settings: ") && line.contains("PITH_HOLDOUT"),
        "{line}"
    );

    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let started = Instant::now();
    let out = pith_within(
        dir.path(),
        &["run", "claude", "--version"],
        &[bad[0], bad[1], ("PITH_LISTEN", &listen)],
        WITHIN,
    )
    .unwrap();
    let said = text(&out.stderr);
    assert!(
        said.contains("a pith proxy cannot start here: ") && said.contains("PITH_HOLDOUT"),
        "{said}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "said before the wait for a proxy: {:?}",
        started.elapsed()
    );
}

/// A config file named by a flag or a variable, or a project's client settings file, may be a
/// FIFO (opening it waited for a writer: every command hung, `pith hook` too) or a device
/// (`/dev/zero` took gigabytes).
#[test]
fn a_fifo_or_a_device_where_a_config_or_settings_file_is_expected_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.toml");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let fifo = fifo.to_str().unwrap();
    for config in [fifo, "/dev/zero"] {
        let out = pith_within(dir.path(), &["--config", config, "stats"], &[], WITHIN)
            .unwrap_or_else(|| panic!("{config}: still running"));
        assert!(!out.status.success());
        assert!(
            text(&out.stderr).contains("not a regular file"),
            "{config}: {}",
            text(&out.stderr)
        );
        let out = pith_within(dir.path(), &["hook"], &[("PITH_CONFIG", config)], WITHIN)
            .unwrap_or_else(|| panic!("{config}: the hook still running"));
        assert!(out.status.success() && out.stdout.is_empty() && out.stderr.is_empty());
    }

    // A project whose `.claude/settings.local.json` and `.mcp.json` are FIFOs and whose
    // `opencode.json` leads to `/dev/zero`.
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".claude")).unwrap();
    for fifo in [".claude/settings.local.json", ".mcp.json"] {
        assert!(
            Command::new("mkfifo")
                .arg(project.path().join(fifo))
                .status()
                .unwrap()
                .success()
        );
    }
    std::os::unix::fs::symlink("/dev/zero", project.path().join("opencode.json")).unwrap();
    let homes = tempfile::tempdir().unwrap();
    let out = doctor_in(project.path(), homes.path()).expect("the doctor ends");
    let shown = text(&out.stdout);
    assert!(
        shown.contains("settings.local.json cannot be read: not valid JSON, or not a regular file"),
        "{shown}"
    );
}

/// A relative `PITH_HOME` (or `PITH_CONFIG`, history path, keys file) is found in whatever
/// directory pith runs in: in a cloned project, a config of the project's choosing.
#[test]
fn a_relative_home_or_config_from_the_environment_is_refused() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("config.toml"), "[proxy]\n").unwrap();
    for (var, value) in [("PITH_HOME", "pith-home"), ("PITH_CONFIG", "config.toml")] {
        let out = pith_within(project.path(), &["stats"], &[(var, value)], WITHIN).unwrap();
        assert!(!out.status.success(), "{var}");
        let said = text(&out.stderr);
        assert!(
            said.contains(&format!("{var} is a relative path")),
            "{var}: {said}"
        );
        assert!(!project.path().join("pith-home").exists());
    }
    // Given on the command line, a relative config is the user's own choice.
    let out = pith_within(
        project.path(),
        &["--config", "config.toml", "stats"],
        &[],
        WITHIN,
    )
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// An error written to a stderr nobody reads (a pipe whose reader left) panicked, with exit
/// status 101 and a stack trace, instead of failing with 1.
#[test]
fn an_error_with_nobody_reading_stderr_fails_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = Command::new(pith_bin())
        .args(["--config", "/nonexistent/config.toml", "stats"])
        .env("PITH_HOME", test_home())
        .stdout(Stdio::null())
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
}
