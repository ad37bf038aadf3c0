//! The held-out share of conversations (issue 49) through the real proxy: with
//! `PITH_HOLDOUT`, a conversation whose opening falls in the share reaches the provider byte
//! for byte as the client sent it, every turn of it and through any instance, and its rows say
//! it was held out; the rest are transformed as always; `pith stats` compares the two arms.

use pith_testkit::MockUpstream;
use pith_transform::holdout::held_out;
use pith_wire::Wire;
use serde_json::{Value, json};

use crate::support::*;

/// Claude Code's request with a long earlier Read result (the excerpts change it), its
/// conversation opened with `tag` and sent under session `tag`: its bytes and headers.
fn conversation(tag: &str) -> (Vec<u8>, Vec<(String, String)>, String) {
    let (cap, body, _) = crate::outputs::with_long_result();
    let mut body: Value = serde_json::from_slice(&body).unwrap();
    // A model with a list price, so the arms' costs are known.
    body["model"] = json!("claude-sonnet-4-5");
    let first = &mut body["messages"][0]["content"];
    match first {
        Value::String(text) => text.push_str(&format!("\n{tag}")),
        Value::Array(blocks) => blocks.push(json!({"type": "text", "text": tag})),
        _ => panic!("the capture's first message: {first}"),
    }
    let mut headers = capture_headers(&cap);
    for (name, value) in &mut headers {
        if name.eq_ignore_ascii_case("x-claude-code-session-id") {
            *value = tag.to_owned();
        }
    }
    let url_path = cap.path.clone();
    (serde_json::to_vec(&body).unwrap(), headers, url_path)
}

/// Openings tagged `prefix-N`, until `want` held out and `want` not at `share`.
pub(crate) fn tags(prefix: &str, share: f64, want: usize) -> (Vec<String>, Vec<String>) {
    let (mut held, mut rest) = (Vec::new(), Vec::new());
    for n in 0.. {
        let tag = format!("{prefix}-{n}");
        let (body, _, _) = conversation(&tag);
        let arm = if held_out(Wire::AnthropicMessages, &body, share) {
            &mut held
        } else {
            &mut rest
        };
        if arm.len() < want {
            arm.push(tag);
        }
        if held.len() == want && rest.len() == want {
            return (held, rest);
        }
    }
    unreachable!()
}

/// Conversation `tag`'s request sent through `pith`: the bytes the client sent.
pub(crate) fn send(pith: &PithProxy, tag: &str) -> Vec<u8> {
    let (body, headers, path) = conversation(tag);
    let (status, _, _) = exchange(
        "POST",
        &format!("{}{path}", pith.url()),
        &headers,
        body.clone(),
    );
    assert_eq!(status, 200);
    body
}

/// Two instances in front of one upstream, each conversation's turns sent through both: a
/// held-out conversation reaches the provider byte for byte from either, a transformed one is
/// changed by either; the rows of the held-out one say so. (In front of one team database:
/// `team::two_proxies_on_one_database_keep_a_conversation_in_one_arm`.)
#[test]
fn a_held_out_conversation_reaches_the_provider_as_sent_through_any_instance() {
    let mock = MockUpstream::start().unwrap();
    let env = [("PITH_HOLDOUT", "0.5"), ("PITH_TRIM_OUTPUTS", "1")];
    let (one, two) = (
        PithProxy::start(&mock.url(), &env),
        PithProxy::start(&mock.url(), &env),
    );
    let (held, rest) = tags("arm", 0.5, 1);
    for (tag, kept) in [(&held[0], true), (&rest[0], false)] {
        for pith in [&one, &two] {
            let sent = send(pith, tag);
            let received = mock.received().last().unwrap().body.clone();
            assert_eq!(received == sent, kept, "{tag}: held out {kept}");
        }
    }
    for pith in [&one, &two] {
        let rows = pith.wait_rows(2);
        let said: Vec<bool> = rows
            .iter()
            .map(|r| {
                r.transforms.iter().any(|t| {
                    t.stage == "holdout"
                        && matches!(&t.result, pith_store::ledger::TransformResult::Unchanged(why) if why == "held_out")
                })
            })
            .collect();
        assert_eq!(
            said,
            [true, false],
            "the held-out row says so, the other not"
        );
    }
}

/// `pith stats` compares the arms per client and models with the figures a replay of the
/// same rows gives: conversations, requests and cost per conversation; below 20 conversations
/// an arm says there are not enough yet, at 20 each the difference comes with its interval.
#[test]
fn stats_compares_the_held_out_arm_with_the_transformed_one() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(
        &mock.url(),
        &[("PITH_HOLDOUT", "0.5"), ("PITH_TRIM_OUTPUTS", "1")],
    );
    let (held, rest) = tags("stats", 0.5, 20);
    for tag in &held[..3] {
        send(&pith, tag);
    }
    for tag in &rest[..5] {
        send(&pith, tag);
    }
    pith.wait_rows(8);
    let stats = |args: &[&str]| pith_stats(&pith, args);
    let text = String::from_utf8(stats(&[]).stdout).unwrap();
    assert!(
        text.contains("not enough conversations yet (20 priced in each arm needed)"),
        "{text}"
    );
    let report: Value = serde_json::from_slice(&stats(&["--json"]).stdout).unwrap();
    let group = &report["holdout"]["groups"][0];
    assert_eq!(group["held_out"]["conversations"], 3, "{group}");
    assert_eq!(group["transformed"]["conversations"], 5, "{group}");
    assert_eq!(group["cost_per_conversation_difference"], Value::Null);

    for tag in held[3..].iter().chain(&rest[5..]) {
        send(&pith, tag);
    }
    pith.wait_rows(40);
    let report: Value = serde_json::from_slice(&stats(&["--json"]).stdout).unwrap();
    // The replay: each session's cost from the same report, split by the arm its opening hashes to.
    let cost_of = |tags: &[String]| -> Vec<f64> {
        tags.iter()
            .map(|tag| {
                report["sessions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|s| s["session"] == tag.as_str())
                    .and_then(|s| s["cost_usd"].as_f64())
                    .unwrap_or_else(|| panic!("session {tag} priced"))
            })
            .collect()
    };
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    let (a, b) = (cost_of(&held), cost_of(&rest));
    let group = &report["holdout"]["groups"][0];
    assert_eq!(group["held_out"]["conversations"], 20, "{group}");
    assert_eq!(group["transformed"]["requests"], 20, "{group}");
    let close = |x: &Value, y: f64| (x.as_f64().unwrap() - y).abs() < 1e-12;
    assert!(
        close(&group["held_out"]["cost_per_conversation_usd"], mean(&a)),
        "{group}"
    );
    assert!(
        close(&group["transformed"]["cost_per_conversation_usd"], mean(&b)),
        "{group}"
    );
    let d = &group["cost_per_conversation_difference"];
    assert!(close(&d["estimate"], mean(&b) - mean(&a)), "{d}");
    assert!(
        d["low"].as_f64() <= d["estimate"].as_f64() && d["estimate"].as_f64() <= d["high"].as_f64(),
        "{d}"
    );
    let text = String::from_utf8(stats(&[]).stdout).unwrap();
    assert!(
        text.contains("per conversation against held out (95% interval"),
        "{text}"
    );

    // The dashboard shows the same comparison, a row per arm, at a phone's width and a
    // laptop's, and axe-core finds nothing serious in it.
    let url = format!("{}/?poll", pith.url());
    let conversations = |arm: &str| group[arm]["conversations"].to_string();
    for size in [(390, 844), (1280, 800)] {
        let mut page = crate::browser::Page::open(&url, size);
        page.until(
            "document.querySelectorAll('#holdout tbody tr').length === 2",
            10_000,
        );
        let rows = page.eval(
            "[...document.querySelectorAll('#holdout tbody tr')].map(r => [...r.cells].map(c => c.textContent))",
        );
        assert_eq!(rows[0][2], "held out", "{rows}");
        assert_eq!(rows[0][3], conversations("held_out").as_str(), "{rows}");
        assert_eq!(rows[1][2], "transformed", "{rows}");
        assert_eq!(rows[1][3], conversations("transformed").as_str(), "{rows}");
        let verdict = rows[0][7].as_str().unwrap();
        assert!(verdict.contains("per conversation (95% interval"), "{rows}");
        crate::dashboard::fits_and_axe_finds_nothing_serious(&mut page, size, "holdout");
    }
}

/// A share that is not one, or more than half, stops the proxy at start with what to set.
#[test]
fn a_share_out_of_range_is_refused_with_what_to_set() {
    for (value, said) in [
        ("0.7", "PITH_HOLDOUT = 0.7 is out of range"),
        (
            "a tenth",
            "PITH_HOLDOUT=\"a tenth\" is not a share of conversations",
        ),
    ] {
        let err = proxy_refuses_with("PITH_HOLDOUT", value);
        assert!(err.contains(said), "{value}: {err}");
        assert!(err.contains("0.1 for a tenth"), "{err}");
    }
}
