//! Basic command-line behaviour.

use std::process::Command;

#[test]
fn help_lists_every_command() {
    let out = Command::new(env!("CARGO_BIN_EXE_pith"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for cmd in ["proxy", "stats", "mcp", "memory", "history", "setup"] {
        assert!(text.contains(cmd), "--help lacks {cmd}:\n{text}");
    }
}

#[test]
fn subcommand_help_teaches_setup_and_pricing() {
    let help = |cmd: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_pith"))
            .args([cmd, "--help"])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let proxy = help("proxy");
    for needle in [
        "ANTHROPIC_BASE_URL",
        "wire_api",
        "PITH_DEFER_TOOLS",
        "--listen",
        "[account.keys]",
        "pith-account-key",
    ] {
        assert!(
            proxy.contains(needle),
            "proxy --help lacks {needle}:\n{proxy}"
        );
    }
    let stats = help("stats");
    for needle in ["unknown price", "--since", "--json", "by_account"] {
        assert!(
            stats.contains(needle),
            "stats --help lacks {needle}:\n{stats}"
        );
    }
}

#[test]
fn an_error_names_its_cause_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let cause = std::net::TcpListener::bind(addr).unwrap_err().to_string();
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pith"))
        .args(["proxy", "--listen", &addr.to_string()])
        .env("PITH_HOME", home.path())
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert_eq!(err.matches(&cause).count(), 1, "{err}");
}
