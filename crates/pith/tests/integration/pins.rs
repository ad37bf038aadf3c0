//! Pins through the real proxy: a turn of only pin commands is answered by pith on every wire,
//! streamed and not, and the official SDKs parse the answer; the next real turn goes up with
//! the pin at its tail and without the command turn.

use pith_store::ledger::{RequestOutcome, TransformResult};
use pith_testkit::fixtures;
use pith_testkit::{MockUpstream, Reply};
use serde_json::{Value, json};

use crate::clients::{self, LIMIT, has, project};
use crate::support::*;

pub(crate) const PIN: &str = "@pith pin be concise";
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
        // The request it saved, priced as its whole prompt read from the cache.
        let prompt = row.tools_bytes + row.system_bytes + row.messages_bytes;
        assert_eq!(row.savings.len(), 1, "{row:?}");
        let saving = &row.savings[0];
        assert_eq!(
            (saving.stage.as_str(), saving.band.as_str()),
            ("pins", "cache_read")
        );
        assert_eq!(saving.tokens, prompt.div_ceil(4) as i64, "{row:?}");
    }
    // Stats add up what adds up: answers, not the pins in force on each request.
    let out = pith_stats(&pith, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("transform pins: changed 6 requests; answered 6 command turns itself\n"),
        "{text}"
    );
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
    let applied = headers["pith-transforms"].to_str().unwrap();
    // The command turn and pith's answer are dropped: more than the block adds.
    assert!(
        applied.starts_with("pins;pins=1;lines_moved=1;turns_dropped=1;chars_out="),
        "{applied}"
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

/// What the real clients show for pith's answer to `@pith pin be concise`.
pub(crate) const PINNED: &str = "@pith pinned 1: be concise";

/// The text of the last block of the last message (Anthropic) or input item (Responses).
fn tail_text(body: &Value) -> String {
    let history = body.get("messages").or_else(|| body.get("input"));
    let last = history
        .and_then(Value::as_array)
        .and_then(|h| h.last())
        .cloned()
        .unwrap_or(Value::Null);
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .last()
            .and_then(|b| b["text"].as_str())
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

/// After a session's first turn was `@pith pin be concise`, the next real turn's request
/// carries the pin at its tail and neither the command nor pith's answer.
pub(crate) fn assert_pinned_at_the_tail(client: &str, body: &Value) {
    let tail = tail_text(body);
    assert!(
        tail.starts_with("<pith-pins>\n") && tail.contains("\n- be concise\n"),
        "{client}: the last content is not the pin block: {tail:?}\n{body}"
    );
    let text = body.to_string();
    assert!(
        !text.contains("@pith pin be concise"),
        "{client}: the command went up: {text}"
    );
    assert!(
        !text.contains(PINNED),
        "{client}: pith's answer went up: {text}"
    );
}

/// Roles in order, with a user message whose content is only harness reminders shown as
/// `user(reminders)`.
fn roles(history: &[Value]) -> Vec<String> {
    history
        .iter()
        .map(|m| {
            let role = m["role"].as_str().unwrap_or("?").to_owned();
            let reminders_only = m["content"].as_array().is_some_and(|blocks| {
                blocks.iter().all(|b| {
                    b["text"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("<system-reminder>"))
                })
            });
            if role == "user" && reminders_only {
                "user(reminders)".to_owned()
            } else {
                role
            }
        })
        .collect()
}

#[test]
fn claude_code_a_typed_pin_is_answered_by_pith_and_rides_the_next_turn() {
    let mock = MockUpstream::start().unwrap();
    mock.set_default(Reply::sse(fixtures::anthropic::stream(
        &["Hi."],
        fixtures::DEFAULT_USAGE,
    )));
    let pith = PithProxy::start(&mock.url(), &[]);
    let (work, home) = project();
    let run = clients::claude_code(work.path(), home.path(), &pith.url(), &[], PIN, LIMIT);
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert!(run.stdout.starts_with(PINNED), "{}", run.stdout);
    assert_eq!(
        mock.request_count(),
        0,
        "Claude Code's pin turn reached the mock"
    );

    let run = clients::claude_code(
        work.path(),
        home.path(),
        &pith.url(),
        &["--continue"],
        "say hi",
        LIMIT,
    );
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert_eq!(run.stdout, "Hi.\n");
    let received = mock.received();
    assert_eq!(received.len(), 1, "one main-loop request");
    let body = received[0].body_json().unwrap();
    assert_pinned_at_the_tail("claude", &body);
    // The first message keeps Claude Code's reminders (its typed command went, with pith's
    // answer); the user's turn follows the client's own system message.
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        roles(messages),
        ["user(reminders)", "system", "user"],
        "{body}"
    );
    assert_eq!(messages[2]["content"][0]["text"], "say hi");
}

#[test]
fn codex_a_typed_pin_is_answered_by_pith_and_rides_the_next_turn() {
    let mock = MockUpstream::start().unwrap();
    mock.set_default(Reply::sse(fixtures::responses::stream(
        &["Hi."],
        fixtures::DEFAULT_USAGE,
    )));
    let pith = PithProxy::start(&mock.url(), &[]);
    let (work, home) = project();
    let base = format!("{}/v1", pith.url());
    let run = clients::codex(work.path(), home.path(), &base, &[], PIN, LIMIT);
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert!(run.stdout.starts_with(PINNED), "{}", run.stdout);
    assert_eq!(mock.request_count(), 0, "Codex's pin turn reached the mock");

    let run = clients::codex(
        work.path(),
        home.path(),
        &base,
        &["resume", "--last"],
        "say hi",
        LIMIT,
    );
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert_eq!(run.stdout, "Hi.\n");
    let received = mock.received();
    assert_eq!(received.len(), 1, "one main-loop request");
    let body = received[0].body_json().unwrap();
    assert_pinned_at_the_tail("codex", &body);
    assert_eq!(
        body["input"].as_array().unwrap().last().unwrap()["role"],
        "developer"
    );
}

#[test]
fn opencode_a_typed_pin_is_answered_by_pith_and_rides_the_next_turn() {
    let mock = MockUpstream::start().unwrap();
    mock.set_default(Reply::sse(fixtures::anthropic::stream(
        &["Hi."],
        fixtures::DEFAULT_USAGE,
    )));
    let pith = PithProxy::start(&mock.url(), &[]);
    let (work, home) = project();
    let base = format!("{}/v1", pith.url());
    let run = clients::opencode(work.path(), home.path(), &base, &[], PIN, LIMIT);
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert!(run.stdout.contains(PINNED), "{}", run.stdout);
    let main_loop = |received: &[pith_testkit::Recorded]| {
        received
            .iter()
            .filter(|r| has(&r.body, "\"tools\":["))
            .map(|r| r.body_json().unwrap())
            .collect::<Vec<Value>>()
    };
    assert!(
        main_loop(&mock.received()).is_empty(),
        "OpenCode's pin turn reached the mock's main loop"
    );
    mock.clear_received();

    let run = clients::opencode(
        work.path(),
        home.path(),
        &base,
        &["--continue"],
        "say hi",
        LIMIT,
    );
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert!(run.stdout.contains("Hi."), "{}", run.stdout);
    let main = main_loop(&mock.received());
    assert_eq!(main.len(), 1, "one main-loop request");
    assert_pinned_at_the_tail("opencode", &main[0]);
}

/// The provider as the last check, on the wires pins runs on: a provider that refuses the body
/// pith changed (here: any body without the command turn) gets the client's own request next,
/// and the client the answer to it.
#[test]
fn a_refused_pin_turn_goes_as_the_client_sent_it_on_every_wire() {
    let chat = |role: &str, text: &str| json!({"role": role, "content": text});
    for (path, body, refusal) in [
        (
            "/v1/messages",
            json!({"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": [
                chat("user", PIN), chat("assistant", PINNED), chat("user", "fix calc.py")]}),
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}"#,
        ),
        (
            "/v1/chat/completions",
            json!({"model": "gpt-5.5", "messages": [
                chat("user", PIN), chat("assistant", PINNED), chat("user", "fix calc.py")]}),
            r#"{"error":{"message":"Invalid 'messages'","type":"invalid_request_error","param":"messages","code":null}}"#,
        ),
        (
            "/v1/responses",
            json!({"model": "gpt-5.5", "input": [
                chat("user", PIN), chat("assistant", PINNED), chat("user", "fix calc.py")]}),
            r#"{"error":{"message":"Invalid 'input'","type":"invalid_request_error","param":"input","code":null}}"#,
        ),
    ] {
        let mock = MockUpstream::start().unwrap();
        mock.push_when(|b| !has(b, PIN), Reply::json_status(400, refusal));
        let pith = PithProxy::start(&mock.url(), &[]);
        let sent = body.to_string();
        let rt = runtime();
        let (status, headers, _) = rt.block_on(async {
            read_all(
                send(
                    &client(),
                    request(
                        "POST",
                        &format!("{}{path}", pith.url()),
                        &[
                            ("content-type".to_owned(), "application/json".to_owned()),
                            ("anthropic-version".to_owned(), "2023-06-01".to_owned()),
                            ("x-session-id".to_owned(), "ses_pins".to_owned()),
                        ],
                        sent.clone(),
                    ),
                )
                .await,
            )
            .await
        });
        assert_eq!(status, 200, "{path}");
        assert!(headers.get("pith-transforms").is_none(), "{path}");
        let got = mock.received();
        assert_eq!(
            got.len(),
            2,
            "{path}: the changed request, then the client's own"
        );
        assert!(!has(&got[0].body, PIN), "{path}: pins changed the first");
        assert_eq!(got[1].body, sent.as_bytes(), "{path}");
        let rows = pith.wait_rows(1);
        assert!(
            matches!(rows[0].transform("pins"), Some(TransformResult::Failed(_))),
            "{path}: {:?}",
            rows[0].transforms
        );
    }
}
