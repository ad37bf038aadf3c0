//! Basic command-line behaviour.

use std::process::Command;

/// `pith <command…> --help` with nothing from this machine in it: no `PITH_*` value clap would
/// print beside its `[env: …]`, and the width clap wraps at when stdout is not a terminal.
fn help_of(path: &[&str]) -> String {
    let out = Command::new(crate::support::pith_bin())
        .args(path)
        .arg("--help")
        .env_clear()
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    assert!(out.status.success(), "{path:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The names under a help text's `Commands:` heading (clap's layout: two spaces, the name, two
/// or more spaces, its summary; a wrapped summary's lines start with more spaces), `help` aside.
fn commands_in(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.strip_prefix("  "))
        .filter(|line| !line.starts_with(' '))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Every command's `--help`, top to bottom of the tree, is a reviewed snapshot: a change to what
/// pith teaches is read as a diff (`cargo insta review`), not found by a user.
#[test]
fn every_commands_help_is_a_snapshot() {
    let mut pending = vec![Vec::<String>::new()];
    let mut seen = Vec::new();
    while let Some(path) = pending.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help_of(&args);
        for command in commands_in(&text) {
            let mut child = path.clone();
            child.push(command);
            pending.push(child);
        }
        let name = if path.is_empty() {
            "help".to_owned()
        } else {
            format!("help_{}", path.join("_"))
        };
        insta::assert_snapshot!(name.clone(), text);
        seen.push(path.join(" "));
    }
    // The walk found the tree (a layout it misread would snapshot the top alone).
    for command in [
        "proxy",
        "stats",
        "mcp",
        "memory",
        "history",
        "run",
        "service",
        "model",
        "doctor",
        "setup",
        "hook",
        "statusline",
        "memory list",
        "history search",
        "service install",
    ] {
        assert!(
            seen.iter().any(|s| s == command),
            "{command} not walked: {seen:?}"
        );
    }
}

#[test]
fn subcommand_help_teaches_setup_and_pricing() {
    let help = |cmd: &str| {
        let out = Command::new(crate::support::pith_bin())
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
    let out = Command::new(crate::support::pith_bin())
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
