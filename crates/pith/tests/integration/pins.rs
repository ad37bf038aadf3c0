//! Pins through the real proxy: a turn of only pin commands is answered by pith on every wire,
//! streamed and not, and the official SDKs parse the answer; the next real turn goes up with
//! the pin at its tail and without the command turn.

use pith_store::ledger::{RequestOutcome, TransformResult};
use pith_testkit::fixtures;
use pith_testkit::{MockUpstream, Reply};
use serde_json::{Value, json};

use crate::support::*;

const PIN: &str = "@pith pin be concise";
const SIX: [&str; 6] = [
    "anthropic.messages.create",
    "anthropic.messages.stream",
    "openai.chat.create",
    "openai.chat.stream",
    "openai.responses.create",
    "openai.responses.stream",
];

#[test]
fn a_pin_only_turn_is_answered_by_pith_on_every_wire_and_mode_and_the_sdks_parse_it() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let out = std::process::Command::new(python())
        .arg(python_script("sdk_clients.py"))
        .args(["--base-url", &pith.url(), "--prompt", PIN])
        .args(["--calls", &SIX.join(",")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sdk_clients.py failed:\n{}\npith log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        pith.stderr()
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for call in SIX {
        let text = v[call]["text"].as_str().unwrap_or_default();
        assert!(
            text.starts_with("@pith pinned 1: be concise\n"),
            "{call}: {text:?}"
        );
        assert!(text.contains("1. be concise (session)"), "{call}: {text:?}");
    }
    assert_eq!(v["anthropic.messages.create"]["stop_reason"], "end_turn");
    assert_eq!(v["anthropic.messages.stream"]["usage"]["output_tokens"], 0);
    assert_eq!(v["openai.chat.create"]["finish_reason"], "stop");
    assert_eq!(v["openai.chat.stream"]["usage"]["total_tokens"], 0);
    assert_eq!(v["openai.chat.stream"]["usage_chunks"], 1);
    assert_eq!(v["openai.responses.create"]["status"], "completed");
    assert_eq!(v["openai.responses.stream"]["sequence_ok"], true);
    assert_eq!(
        v["openai.responses.stream"]["completed_text"],
        v["openai.responses.stream"]["text"]
    );
    assert_eq!(mock.request_count(), 0, "nothing went upstream");
    let rows = pith.wait_rows(6);
    for row in &rows {
        assert_eq!(row.outcome, RequestOutcome::Local, "{row:?}");
        assert_eq!(row.usage, None);
        assert_eq!(disclosed(row).as_deref(), Some("pins;answered=1;pins=1"));
    }
}

#[test]
fn the_next_turn_goes_up_with_the_pin_at_its_tail_and_without_the_command_turn() {
    let mock = MockUpstream::start().unwrap();
    mock.set_default(Reply::json(fixtures::anthropic::message(
        "ok",
        fixtures::DEFAULT_USAGE,
    )));
    let pith = PithProxy::start(&mock.url(), &[]);
    let rt = runtime();
    let client = client();
    let send_turn = |messages: Value| {
        let body = json!({"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": messages});
        rt.block_on(async {
            read_all(
                send(
                    &client,
                    request(
                        "POST",
                        &format!("{}/v1/messages", pith.url()),
                        &headers(&[
                            ("content-type", "application/json"),
                            ("anthropic-version", "2023-06-01"),
                        ]),
                        body.to_string(),
                    ),
                )
                .await,
            )
            .await
        })
    };
    let (status, _, frames) = send_turn(json!([{"role": "user", "content": PIN}]));
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&concat(&frames)).unwrap();
    let said = answer["content"][0]["text"].as_str().unwrap().to_owned();
    assert_eq!(mock.request_count(), 0);
    // The client sends pith's answer back in its history, as any client does.
    let (status, headers, _) = send_turn(json!([
        {"role": "user", "content": PIN},
        {"role": "assistant", "content": [{"type": "text", "text": said}]},
        {"role": "user", "content": [{"type": "text", "text": "fix calc.py"}]}
    ]));
    assert_eq!(status, 200);
    assert_eq!(
        headers["pith-transforms"],
        "pins;pins=1;lines_moved=1;turns_dropped=1"
    );
    let got = mock.received();
    assert_eq!(got.len(), 1);
    let upstream = got[0].body_json().unwrap();
    let messages = upstream["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "{upstream}");
    assert_eq!(messages[0]["content"][0]["text"], "fix calc.py");
    let block = messages[0]["content"][1]["text"].as_str().unwrap();
    assert!(block.starts_with("<pith-pins>\n"), "{block}");
    assert!(block.contains("\n- be concise\n"), "{block}");
    let rows = pith.wait_rows(2);
    assert_eq!(rows[1].outcome, RequestOutcome::Ok);
    assert!(matches!(
        rows[1].transform("pins"),
        Some(TransformResult::Applied(_))
    ));
}

#[test]
fn with_pins_off_a_command_turn_goes_upstream_as_typed() {
    let mock = MockUpstream::start().unwrap();
    mock.set_default(Reply::json(fixtures::anthropic::message(
        "ok",
        fixtures::DEFAULT_USAGE,
    )));
    let pith = PithProxy::start(&mock.url(), &[("PITH_PINS", "0")]);
    let out = std::process::Command::new(python())
        .arg(python_script("sdk_clients.py"))
        .args(["--base-url", &pith.url(), "--prompt", PIN])
        .args(["--calls", "anthropic.messages.create"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = mock.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body_json().unwrap()["messages"][0]["content"], PIN);
}
