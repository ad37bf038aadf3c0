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
    for cmd in ["proxy", "stats", "mcp", "memory", "setup"] {
        assert!(text.contains(cmd), "--help lacks {cmd}:\n{text}");
    }
}
