//! `pith stats` over a ledger the real proxy wrote.

use std::process::Command;

use pith_testkit::fixtures::{self, Usage};
use pith_testkit::{MockUpstream, Reply};

use crate::support::*;

#[test]
fn stats_totals_per_session_and_model_with_cost_and_unknown_prices() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let u = Usage {
        input: 1000,
        output: 200,
        cache_write: 4000,
        cache_write_1h: 1500,
        cache_read: 50_000,
    };
    let rt = runtime();
    let client = client();
    let calls = [
        (
            "/v1/messages",
            "ses_a",
            r#"{"model":"claude-haiku-4-5","messages":[]}"#,
            Reply::json(fixtures::anthropic::message("x", u)),
        ),
        (
            "/v1/messages",
            "ses_a",
            r#"{"model":"claude-haiku-4-5","stream":true,"messages":[]}"#,
            Reply::sse(fixtures::anthropic::stream(&["x"], u)),
        ),
        (
            "/v1/chat/completions",
            "ses_b",
            r#"{"model":"gpt-5.4","messages":[]}"#,
            Reply::json(fixtures::chat::completion("x", u)),
        ),
    ];
    for (path, session, body, reply) in calls {
        mock.push(reply);
        rt.block_on(async {
            read_all(
                send(
                    &client,
                    request(
                        "POST",
                        &format!("{}{path}", pith.url()),
                        &headers(&[("x-session-id", session)]),
                        body,
                    ),
                )
                .await,
            )
            .await
        });
    }
    pith.wait_rows(3);

    let out = pith_stats(&pith, &["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let total = &v["total"];
    assert_eq!(total["requests"], 3);
    assert_eq!(total["input_tokens"], 3000);
    assert_eq!(total["cache_read_tokens"], 150_000);
    assert_eq!(total["output_tokens"], 600);
    let prompt = 3 * (1000 + 4000 + 50_000);
    assert_eq!(total["prompt_tokens"], prompt);
    let share = total["cache_hit_share"].as_f64().unwrap();
    assert!((share - 150_000.0 / prompt as f64).abs() < 1e-9);
    // Anthropic reports the one-hour part of the writes; Chat Completions has no such field.
    assert_eq!(total["cache_write_1h_tokens"], 2 * 1500);
    // Haiku 4.5 list price: $1 input, $5 output per MTok; a five-minute cache write 1.25x
    // input, a one-hour one 2x, a cache read 0.1x.
    let haiku =
        2.0 * (1000.0 * 1.0 + 200.0 * 5.0 + 2500.0 * 1.25 + 1500.0 * 2.0 + 50_000.0 * 0.1) / 1e6;
    let cost = total["cost_usd"].as_f64().unwrap();
    assert!((cost - haiku).abs() < 1e-9, "{cost} vs {haiku}");
    // The provider's cache discount: reads' discount less both writes' surcharges.
    let discount = 2.0 * (50_000.0 * 0.9 - 2500.0 * 0.25 - 1500.0 * 1.0) / 1e6;
    let got = total["cache_discount_usd"].as_f64().unwrap();
    assert!((got - discount).abs() < 1e-9, "{got} vs {discount}");
    assert_eq!(total["unpriced_models"], serde_json::json!(["gpt-5.4"]));
    let sessions = v["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[0]["session"], "ses_a");
    assert_eq!(sessions[0]["requests"], 2);
    assert_eq!(sessions[1]["cost_usd"], serde_json::Value::Null);
    assert_eq!(v["dropped_rows"], 0);

    let out = pith_stats(&pith, &["--session", "ses_b", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total"]["requests"], 1);

    // The human report, whole: a change of its words or layout is reviewed as a diff.
    let out = pith_stats(&pith, &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    insta::with_settings!({
        filters => vec![(r"(?m)^ledger: .*$", "ledger: [LEDGER]")],
        prepend_module_to_snapshot => true,
    }, {
        insta::assert_snapshot!("human", text);
    });

    let out = pith_stats(&pith, &["--since", "soon"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("use a number with ms, s, m, h, d or w"));
}

/// Nothing recorded yet is not an error (as `pith history list` has it): one line says how to
/// get a ledger, status 0, and `--json` prints the report of an empty ledger.
#[test]
fn stats_without_a_ledger_says_how_to_get_one() {
    let home = tempfile::tempdir().unwrap();
    let stats = |args: &[&str]| {
        Command::new(pith_bin())
            .arg("stats")
            .args(args)
            .env("PITH_HOME", home.path())
            .env_remove("PITH_CONFIG")
            .env_remove("PITH_STORE_URL")
            .output()
            .unwrap()
    };
    let out = stats(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no ledger at") && err.contains("pith run claude"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    let out = stats(&["--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total"]["requests"], 0, "{v:#}");
    assert_eq!(v["sessions"], serde_json::json!([]));
    assert!(
        !home.path().join("ledger.db").exists(),
        "stats made no ledger"
    );
}

/// `pith stats --ledger FILE` with no config from the environment.
fn stats_of(ledger: &std::path::Path) -> std::process::Output {
    stats_with(ledger, &[])
}

/// `pith stats --json --ledger LEDGER ARGS...`, with a home of its own.
fn stats_with(ledger: &std::path::Path, args: &[&str]) -> std::process::Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(pith_bin())
        .args(["stats", "--json", "--ledger"])
        .arg(ledger)
        .args(args)
        .env("PITH_HOME", home.path())
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap()
}

#[cfg(unix)]
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
#[cfg(unix)]
fn stats_reads_a_ledger_without_changing_it() {
    use pith_store::ledger::{Ledger, Row};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let mut ledger = Ledger::open(&path).unwrap();
    let row = Row {
        client: "claude-code".into(),
        provider: "anthropic".into(),
        method: "POST".into(),
        path: "/v1/messages".into(),
        ..Row::default()
    };
    ledger.insert(&[row]).unwrap();
    drop(ledger);
    // Someone else's ledger, readable to us: its mode and bytes are theirs.
    let readable: std::fs::Permissions = std::os::unix::fs::PermissionsExt::from_mode(0o644);
    std::fs::set_permissions(&path, readable).unwrap();
    let before = std::fs::read(&path).unwrap();

    let out = stats_of(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total"]["requests"], 1);
    assert_eq!(mode(&path), 0o644);
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["ledger.db"], "stats left files beside the ledger");
}

#[test]
fn stats_refuses_what_is_not_a_ledger_it_can_read_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |path: &std::path::Path| {
        let out = stats_of(path);
        assert!(!out.status.success(), "stats read {}", path.display());
        String::from_utf8(out.stderr).unwrap()
    };

    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, "").unwrap();
    let err = refused(&empty);
    assert!(err.contains("is empty"), "{err}");
    assert_eq!(
        std::fs::metadata(&empty).unwrap().len(),
        0,
        "stats wrote to an empty file"
    );

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database at all, just some words\n").unwrap();
    let err = refused(&text);
    assert!(err.contains("not an SQLite database"), "{err}");

    // A ledger an older pith wrote (schema version 1 of 5): not upgraded by a reader.
    let old = dir.path().join("old.db");
    drop(
        pith_store::sqlite::open(&old, &["CREATE TABLE requests (id INTEGER PRIMARY KEY);"])
            .unwrap(),
    );
    let err = refused(&old);
    assert!(
        err.contains("written by an older pith") && err.contains("run `pith proxy` once"),
        "{err}"
    );
    // Still version 1: opening it with one migration neither migrates nor refuses it.
    pith_store::sqlite::open(&old, &["CREATE TABLE requests (id INTEGER PRIMARY KEY);"]).unwrap();

    let new = dir.path().join("new.db");
    // One version past the ledger's (schema 10).
    drop(pith_store::sqlite::open(&new, &["SELECT 1;"; 11]).unwrap());
    let err = refused(&new);
    assert!(err.contains("newer than this pith"), "{err}");
}

/// `pith stats --json | head`: a reader that goes away ends the command quietly (status 0,
/// no panic or backtrace on stderr), and a name from outside is stored cut to a table's width.
#[test]
fn a_closed_pipe_ends_stats_quietly_and_long_names_are_cut() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let rt = runtime();
    let post = |headers: &[(String, String)], body: String| {
        rt.block_on(async {
            read_all(
                send(
                    &client(),
                    request(
                        "POST",
                        &format!("{}/v1/messages", pith.url()),
                        headers,
                        body,
                    ),
                )
                .await,
            )
            .await
        })
    };
    let long_model = "m".repeat(20_000);
    post(
        &headers(&[("user-agent", &"u".repeat(9_000))]),
        format!(r#"{{"model":"{long_model}","messages":[]}}"#),
    );
    let rows = pith.wait_rows(1);
    assert!(
        rows[0].model.as_ref().unwrap().len() <= 203,
        "the model name is kept whole"
    );
    assert!(rows[0].client.len() <= 203, "the client name is kept whole");
    // A model name with terminal escapes and a right-to-left override is shown escaped.
    post(
        &[],
        r#"{"model":"\u001b[31mevil\u0007\u202etxt","messages":[]}"#.to_owned(),
    );
    pith.wait_rows(2);
    let text = String::from_utf8(pith_stats(&pith, &[]).stdout).unwrap();
    assert!(
        !text.contains(['\u{1b}', '\u{7}', '\u{202e}']),
        "raw control characters printed:\n{text:?}"
    );
    assert!(text.contains("\\u{1b}[31mevil\\u{7}\\u{202e}txt"), "{text}");
    let mut child = Command::new(pith_bin())
        .args(["stats", "--json"])
        .env("PITH_HOME", pith.home.path())
        .env_remove("PITH_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before pith writes a byte.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
}

/// Requests without a session count for the client that sent each (the ledger keeps them one
/// group per model, whichever clients sent them), savings too; the clients add up to the
/// total, over the totals kept on write and over a `--since` scan alike.
#[test]
fn requests_without_a_session_count_for_their_own_clients() {
    use pith_store::ledger::{Ledger, Row, Saving, Usage};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let row = |client: &str, session: Option<&str>, saved: i64| Row {
        ts_ms: pith_store::clock::now_ms(),
        client: client.into(),
        session: session.map(str::to_owned),
        model: Some("claude-haiku-4-5".into()),
        wire: Some("anthropic".into()),
        method: "POST".into(),
        path: "/v1/messages".into(),
        status: Some(200),
        usage: Some(Usage {
            input: 100,
            output: 10,
            ..Usage::default()
        }),
        savings: if saved > 0 {
            vec![Saving {
                stage: "defer".into(),
                band: "input".into(),
                tokens: saved,
            }]
        } else {
            Vec::new()
        },
        total_ms: 1.0,
        ..Row::default()
    };
    let mut ledger = Ledger::open(&path).unwrap();
    ledger
        .insert(&[
            row("sdk-b", None, 1_000),
            row("sdk-a", None, 0),
            row("sdk-a", None, 0),
            row("claude-code", Some("ses_1"), 500),
        ])
        .unwrap();
    drop(ledger);
    for args in [&[][..], &["--since", "1h"][..]] {
        let out = stats_with(&path, args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let clients: Vec<(String, u64, i64)> = v["clients"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["client"].as_str().unwrap().to_owned(),
                    c["requests"].as_u64().unwrap(),
                    c["estimated_saved_tokens"].as_i64().unwrap_or(0),
                )
            })
            .collect();
        assert_eq!(
            clients,
            [
                ("sdk-a".to_owned(), 2, 0),
                ("claude-code".to_owned(), 1, 500),
                ("sdk-b".to_owned(), 1, 1_000),
            ],
            "{args:?}: {}",
            v["clients"]
        );
        let saved: f64 = v["clients"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["estimated_saved_usd"].as_f64().unwrap_or(0.0))
            .sum();
        let total = v["total"]["estimated_saved_usd"].as_f64().unwrap();
        assert!(
            (saved - total).abs() < 1e-12,
            "{args:?}: {saved} vs {total}"
        );
    }
}
