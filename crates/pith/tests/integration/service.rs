//! `pith service`: the systemd user unit it writes passes `systemd-analyze verify` (scripts/test
//! installs Debian's systemd for the tool when it is missing), runs this binary's proxy with the
//! PITH_HOME in effect, and goes again on uninstall. Starting it is left out (no user session
//! manager in the test environment): `--no-start` / `--no-stop`.

use std::process::{Command, Output};

use crate::support::pith_bin;

fn service(config_home: &std::path::Path, pith_home: &std::path::Path, args: &[&str]) -> Output {
    Command::new(pith_bin())
        .arg("service")
        .args(args)
        .env("XDG_CONFIG_HOME", config_home)
        .env("PITH_HOME", pith_home)
        .env("PITH_LISTEN", "127.0.0.1:9")
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap()
}

fn verify(unit: &std::path::Path) -> Output {
    Command::new("systemd-analyze")
        .arg("verify")
        .arg(unit)
        .output()
        .unwrap_or_else(|e| {
            panic!("systemd-analyze: {e}; run the tests through scripts/test, which installs it")
        })
}

#[cfg(target_os = "linux")]
#[test]
fn the_systemd_unit_verifies_runs_this_proxy_and_is_removed_again() {
    let dir = tempfile::tempdir().unwrap();
    let (config_home, pith_home) = (dir.path().join("config"), dir.path().join("pith"));
    let preview = service(&config_home, &pith_home, &["install", "--dry-run"]);
    assert!(preview.status.success());
    assert!(String::from_utf8_lossy(&preview.stdout).contains("dry run: nothing written."));
    let unit = config_home.join("systemd/user/pith.service");
    assert!(!unit.exists());

    let out = service(&config_home, &pith_home, &["install", "--no-start"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&unit).unwrap();
    let exe = std::path::Path::new(&pith_bin()).canonicalize().unwrap();
    assert!(
        text.contains(&format!("ExecStart={} proxy\n", exe.display())),
        "{text}"
    );
    assert!(
        text.contains(&format!("Environment=PITH_HOME={}\n", pith_home.display())),
        "{text}"
    );
    assert!(text.contains("Restart=on-failure\n"), "{text}");
    let checked = verify(&unit);
    assert!(
        checked.status.success(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    // The tool does judge: the same unit with a relative ExecStart fails.
    let broken = dir.path().join("broken.service");
    std::fs::write(&broken, text.replace("ExecStart=", "ExecStart=relative/")).unwrap();
    assert!(
        !verify(&broken).status.success(),
        "systemd-analyze accepts anything here"
    );

    let status = service(&config_home, &pith_home, &["status"]);
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(said.contains("runs this binary"), "{said}");
    assert!(
        said.contains("proxy: nothing answers on 127.0.0.1:9."),
        "{said}"
    );

    let out = service(&config_home, &pith_home, &["uninstall", "--no-stop"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!unit.exists());
    let again = service(&config_home, &pith_home, &["uninstall", "--no-stop"]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("nothing to remove"));
}
