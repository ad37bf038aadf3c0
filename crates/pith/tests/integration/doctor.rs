//! `pith doctor` on temporary projects, a temporary CODEX_HOME and PITH_HOME: the wiring before
//! and after `pith setup` (and after `--undo`), a stale proxy, a base URL to a dead port, a
//! broken config file.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{PithProxy, pith_bin};

struct Env {
    project: tempfile::TempDir,
    homes: tempfile::TempDir,
    listen: SocketAddr,
}

impl Env {
    fn new() -> Env {
        let project = tempfile::tempdir().unwrap();
        std::fs::create_dir(project.path().join(".git")).unwrap();
        let listen = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        Env {
            project,
            homes: tempfile::tempdir().unwrap(),
            listen,
        }
    }

    fn pith(&self, args: &[&str]) -> Output {
        Command::new(pith_bin())
            .args(args)
            .current_dir(self.project.path())
            .env("CODEX_HOME", self.homes.path().join("codex"))
            .env("PITH_HOME", self.homes.path().join("pith"))
            .env("CLAUDE_CONFIG_DIR", self.homes.path().join("claude"))
            .env("HOME", self.homes.path().join("home"))
            .env("XDG_CONFIG_HOME", self.homes.path().join("home/.config"))
            .env("PATH", "/usr/bin:/bin")
            .env("PITH_LISTEN", self.listen.to_string())
            .env_remove("PITH_CONFIG")
            .env_remove("ANTHROPIC_BASE_URL")
            .env_remove("PITH_LOCAL_PREFILTER")
            .env_remove("PITH_PREFILTER_RANKER")
            .env_remove("PITH_PREFILTER_LOCAL_MODEL")
            .output()
            .unwrap()
    }

    fn setup(&self, args: &[&str]) {
        let mut all = vec!["setup"];
        all.extend_from_slice(args);
        let out = self.pith(&all);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `pith doctor --json`: the exit status, and each check's status by name (several checks
    /// of one name: the worst first).
    fn doctor(&self) -> (bool, Vec<Value>) {
        let out = self.pith(&["doctor", "--json"]);
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        (
            out.status.success(),
            report["checks"].as_array().unwrap().clone(),
        )
    }
}

fn status<'a>(checks: &'a [Value], name: &str) -> Vec<&'a str> {
    checks
        .iter()
        .filter(|c| c["check"] == name)
        .filter_map(|c| c["status"].as_str())
        .collect()
}

fn detail(checks: &[Value], name: &str) -> String {
    checks
        .iter()
        .filter(|c| c["check"] == name)
        .map(|c| format!("{} -> {}", c["detail"], c["fix"]))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn doctor_reports_the_wiring_before_and_after_setup_and_after_undo() {
    let env = Env::new();
    let wired = [
        "claude-code mcp",
        "claude-code hooks",
        "claude-code status line",
        "codex mcp",
        "codex hooks",
        "opencode mcp",
    ];
    // No client installed: one line each, saying so.
    let (ok, none) = env.doctor();
    assert!(ok, "{none:#?}");
    for client in ["claude-code", "codex", "opencode"] {
        assert_eq!(status(&none, client), ["ok"], "{none:#?}");
        assert!(
            detail(&none, client).contains("is not installed here"),
            "{none:#?}"
        );
    }
    assert!(
        wired.iter().all(|name| status(&none, name).is_empty()),
        "{none:#?}"
    );
    // Each client's own settings directory: installed, and not wired yet.
    for dir in ["claude", "codex", "home/.config/opencode"] {
        std::fs::create_dir_all(env.homes.path().join(dir)).unwrap();
    }
    let (ok, before) = env.doctor();
    assert!(ok, "warnings only: {before:#?}");
    for name in wired {
        assert_eq!(
            status(&before, name),
            ["warn"],
            "{name}: {}",
            detail(&before, name)
        );
        assert!(
            detail(&before, name).contains("pith setup"),
            "{}",
            detail(&before, name)
        );
    }
    assert_eq!(status(&before, "config"), ["ok"]);
    assert_eq!(
        status(&before, "proxy"),
        ["warn"],
        "{}",
        detail(&before, "proxy")
    );
    assert_eq!(status(&before, "ledger"), ["ok"]);
    assert_eq!(status(&before, "brain"), ["ok"]);
    assert_eq!(status(&before, "local model"), ["ok"]);

    let bin = pith_bin();
    for client in ["claude-code", "codex", "opencode"] {
        env.setup(&[client, "--command", &bin]);
    }
    let (ok, after) = env.doctor();
    assert!(ok, "{after:#?}");
    for name in wired {
        assert_eq!(
            status(&after, name),
            ["ok"],
            "{name}: {}",
            detail(&after, name)
        );
    }
    // Another binary's entry is named as not this one.
    env.setup(&["--undo", "codex"]);
    env.setup(&["codex", "--command", "/usr/bin/true"]);
    let (_, other) = env.doctor();
    assert_eq!(status(&other, "codex mcp"), ["warn"]);
    assert!(
        detail(&other, "codex mcp").contains("not this binary"),
        "{}",
        detail(&other, "codex mcp")
    );

    for client in ["claude-code", "codex", "opencode"] {
        env.setup(&["--undo", client]);
    }
    let (_, undone) = env.doctor();
    for name in wired {
        assert_eq!(
            status(&undone, name),
            ["warn"],
            "{name}: {}",
            detail(&undone, name)
        );
    }
}

/// Answers `/pith/health` as a pith of another version would.
fn stale_pith(listener: TcpListener) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let body = r#"{"pith":"0.0.1","pid":4242,"ledger":true}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
}

#[test]
fn doctor_names_a_stale_proxy_and_a_base_url_to_a_dead_port() {
    let env = Env::new();
    env.setup(&["claude-code", "--command", &pith_bin(), "--proxy"]);
    // Nothing on the port the settings now name: every Claude Code request would fail.
    let (ok, checks) = env.doctor();
    assert!(!ok, "a failed check fails the doctor");
    assert_eq!(
        status(&checks, "claude-code base URL"),
        ["fail"],
        "{checks:#?}"
    );
    let said = detail(&checks, "claude-code base URL");
    assert!(said.contains(&format!("http://{}", env.listen)), "{said}");
    assert!(said.contains("where nothing listens"), "{said}");

    // A pith proxy there: fine.
    let mock = pith_testkit::MockUpstream::start().unwrap();
    let mut proxy = PithProxy::start_in(
        tempfile::tempdir().unwrap(),
        &mock.url(),
        &mock.url(),
        &[("PITH_LISTEN", "unused")],
    );
    let env2 = Env {
        project: env.project,
        homes: env.homes,
        listen: proxy.addr,
    };
    env2.setup(&["--undo", "claude-code"]);
    env2.setup(&["claude-code", "--command", &pith_bin(), "--proxy"]);
    let (ok, checks) = env2.doctor();
    assert!(ok, "{checks:#?}");
    assert_eq!(
        status(&checks, "proxy"),
        ["ok"],
        "{}",
        detail(&checks, "proxy")
    );
    assert!(detail(&checks, "proxy").contains(env!("CARGO_PKG_VERSION")));
    assert_eq!(status(&checks, "claude-code base URL"), ["ok"]);
    proxy.stop();

    // An older pith on the port is named, with how to stop it.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let env3 = Env {
        project: env2.project,
        homes: env2.homes,
        listen: listener.local_addr().unwrap(),
    };
    stale_pith(listener);
    let (_, checks) = env3.doctor();
    assert_eq!(status(&checks, "proxy"), ["warn"]);
    let said = detail(&checks, "proxy");
    assert!(said.contains("a stale pith 0.0.1"), "{said}");
    assert!(said.contains("kill 4242"), "{said}");
}

/// A client's settings file that does not parse is named as such: the doctor said "not
/// registered, run `pith setup`", and setup then refused the same file.
#[test]
fn doctor_names_a_clients_settings_file_it_cannot_read() {
    let env = Env::new();
    let file = env.homes.path().join("claude/.claude.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "{\"mcpServers\": {").unwrap();
    let (_, checks) = env.doctor();
    assert_eq!(status(&checks, "claude-code mcp"), ["warn"], "{checks:#?}");
    let said = detail(&checks, "claude-code mcp");
    assert!(
        said.contains(".claude.json cannot be read: not valid JSON")
            && said.contains("fix it or move it away"),
        "{said}"
    );
}

#[test]
fn doctor_reports_a_broken_config_and_goes_on() {
    let env = Env::new();
    let config = env.homes.path().join("config.toml");
    std::fs::write(&config, "[proxy]\nlisten = 8787\nnot_a_key = 1\n").unwrap();
    let out = Command::new(pith_bin())
        .args(["--config", config.to_str().unwrap(), "doctor"])
        .current_dir(env.project.path())
        .env("CODEX_HOME", env.homes.path().join("codex"))
        .env("PITH_HOME", env.homes.path().join("pith"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or("");
    assert!(
        first.starts_with("FAIL config: invalid config file"),
        "{text}"
    );
    assert!(first.contains(" -> "), "the fix is on the line: {first}");
    // The other checks still ran, one line each.
    assert!(
        text.lines().any(|l| l.contains("claude-code mcp")),
        "{text}"
    );
    assert!(
        text.lines()
            .all(|l| l.starts_with("ok") || l.starts_with("warn") || l.starts_with("FAIL")),
        "{text}"
    );
}

/// The lexical ranking needs no model server: doctor says so instead of probing one.
#[test]
fn doctor_checks_no_server_for_the_lexical_ranking() {
    let env = Env::new();
    let home = env.homes.path().join("pith");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        "[mcp]\nlocal_prefilter = true\nprefilter_ranker = \"lexical\"\n",
    )
    .unwrap();
    let (_, checks) = env.doctor();
    assert_eq!(status(&checks, "local model"), ["ok"], "{checks:#?}");
    assert!(
        detail(&checks, "local model").contains("none needed"),
        "{}",
        detail(&checks, "local model")
    );
}

/// The in-process model: doctor checks its files and runs it; with none installed it fails,
/// naming the command that installs one.
#[test]
fn doctor_checks_the_in_process_model() {
    let env = Env::new();
    let home = env.homes.path().join("pith");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        "[mcp]\nlocal_prefilter = true\nprefilter_ranker = \"local\"\n",
    )
    .unwrap();
    let (_, checks) = env.doctor();
    assert_eq!(status(&checks, "local model"), ["fail"], "{checks:#?}");
    assert!(
        detail(&checks, "local model").contains("pith model install"),
        "{checks:#?}"
    );
    crate::support::install_test_model(&home);
    let (_, checks) = env.doctor();
    assert_eq!(status(&checks, "local model"), ["ok"], "{checks:#?}");
    assert!(
        detail(&checks, "local model").contains("(in-process): checksums match, loads and embeds"),
        "{checks:#?}"
    );
}

/// `pith doctor`'s own words for a person, as a reviewed snapshot at three points: nothing
/// installed, the clients' settings directories there but not wired, and each client set up.
/// The machine's paths and the port are named by role.
#[test]
fn doctor_human_output() {
    let env = Env::new();
    let human = |env: &Env| {
        let out = env.pith(&["doctor"]);
        let text = String::from_utf8(out.stdout).unwrap();
        let text = text
            .replace(&env.homes.path().display().to_string(), "[HOMES]")
            .replace(&env.project.path().display().to_string(), "[PROJECT]")
            .replace(&env.listen.to_string(), "[LISTEN]")
            .replace(&pith_bin(), "[PITH]");
        format!("exit status {}\n{text}", out.status.code().unwrap_or(-1))
    };
    let snapshot = |name: &str, text: String| {
        insta::with_settings!({ prepend_module_to_snapshot => true }, {
            insta::assert_snapshot!(name, text);
        });
    };
    snapshot("doctor_nothing_installed", human(&env));
    for dir in ["claude", "codex", "home/.config/opencode"] {
        std::fs::create_dir_all(env.homes.path().join(dir)).unwrap();
    }
    snapshot("doctor_clients_not_wired", human(&env));
    for client in ["claude", "codex", "opencode"] {
        env.setup(&[client]);
    }
    snapshot("doctor_clients_set_up", human(&env));
}
