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
    // Haiku 4.5 list price: $1 input, $5 output, 1.25x cache write, 0.1x cache read per MTok.
    let haiku = 2.0 * (1000.0 * 1.0 + 200.0 * 5.0 + 4000.0 * 1.25 + 50_000.0 * 0.1) / 1e6;
    let cost = total["cost_usd"].as_f64().unwrap();
    assert!((cost - haiku).abs() < 1e-9, "{cost} vs {haiku}");
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

    let out = pith_stats(&pith, &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("unknown price for gpt-5.4"), "{text}");
    assert!(text.contains("claude-haiku-4-5"), "{text}");
    assert!(text.contains("ses_a"), "{text}");

    let out = pith_stats(&pith, &["--since", "soon"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("use a number with m, h, d or w"));
}

#[test]
fn stats_without_a_ledger_says_how_to_get_one() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(pith_bin())
        .arg("stats")
        .env("PITH_HOME", home.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no ledger at") && err.contains("pith proxy"),
        "{err}"
    );
}
