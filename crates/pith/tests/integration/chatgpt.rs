//! Codex signed in with ChatGPT, through pith: its model requests (the Responses API, with the
//! person's ChatGPT tokens), taken under pith's `/chatgpt`, go to the ChatGPT upstream under
//! the backend's `/backend-api/codex`, with
//! pith's work done on them as on the OpenAI API's: over HTTP, where Codex sends its bodies
//! zstd-compressed, and on its WebSocket, with the real Codex.

use pith_testkit::fixtures::{self, responses};
use pith_testkit::{MockUpstream, Reply};
use serde_json::{Value, json};

use crate::pins::{PIN, PINNED, assert_pinned_at_the_tail};
use crate::support::{self, PithProxy};
use crate::websocket::{CHATGPT_ACCOUNT, DefaultCodex, Login, codex_runtime, says_hi_to_codex};

fn zstd(body: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(body, ruzstd::encoding::CompressionLevel::Fastest)
}

/// A ChatGPT-backend request as Codex sends it, its body compressed; the status it got.
fn post(pith: &PithProxy, body: &Value) -> u16 {
    let compressed = zstd(body.to_string().as_bytes());
    let req = support::request(
        "POST",
        &format!("{}/chatgpt/responses", pith.url()),
        &support::headers(&[
            ("content-type", "application/json"),
            ("content-encoding", "zstd"),
            ("authorization", "Bearer chatgpt-access-token"),
            ("chatgpt-account-id", CHATGPT_ACCOUNT),
            ("session-id", "019-chatgpt"),
            ("user-agent", "codex_exec/0.169.0"),
        ]),
        compressed,
    );
    let rt = support::runtime();
    rt.block_on(async {
        let (status, _, _) = support::read_all(support::send(&support::client(), req).await).await;
        status.as_u16()
    })
}

/// A pith whose OpenAI and ChatGPT upstreams are two mocks; the ChatGPT one answers with
/// `first`, then "Hi." to everything.
fn behind_chatgpt(first: &[Reply]) -> (MockUpstream, MockUpstream, PithProxy) {
    let openai = MockUpstream::start().unwrap();
    let chatgpt = MockUpstream::start().unwrap();
    for reply in first {
        chatgpt.push(reply.clone());
    }
    chatgpt.set_default(Reply::sse(responses::stream(
        &["Hi."],
        fixtures::DEFAULT_USAGE,
    )));
    let pith = PithProxy::start_with(
        &openai.url(),
        &openai.url(),
        &[("PITH_CHATGPT_UPSTREAM", &chatgpt.url())],
    );
    (openai, chatgpt, pith)
}

/// pith's answer to the pin turn, as Codex sends it back.
fn pith_answered() -> Value {
    json!({"type": "message", "role": "assistant",
           "content": [{"type": "output_text", "text": PINNED}]})
}

fn user(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
}

#[test]
fn a_chatgpt_request_goes_to_the_chatgpt_upstream_decoded_where_pith_changes_it() {
    let (openai, chatgpt, pith) = behind_chatgpt(&[]);
    let pinned = pith_answered();
    let plain = json!({"model": "gpt-5.5", "stream": true, "store": false,
                       "input": [user("first")]});
    let hi = json!({"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": "Hi."}]});
    let with_pin = json!({"model": "gpt-5.5", "stream": true, "store": false,
                          "input": [user("first"), hi, user(PIN), pinned, user("say hi")]});
    assert_eq!(post(&pith, &plain), 200);
    assert_eq!(post(&pith, &with_pin), 200);

    assert!(openai.received().is_empty(), "went to the OpenAI API");
    let got = chatgpt.received();
    assert_eq!(got.len(), 2);
    for r in &got {
        assert_eq!(r.path(), "/backend-api/codex/responses");
        assert_eq!(
            r.header("authorization"),
            Some("Bearer chatgpt-access-token")
        );
        assert_eq!(r.header("chatgpt-account-id"), Some(CHATGPT_ACCOUNT));
    }
    // Unchanged: the client's compressed bytes, as they came.
    assert_eq!(got[0].header("content-encoding"), Some("zstd"));
    assert_eq!(&got[0].body[..], &zstd(plain.to_string().as_bytes())[..]);
    // Changed by the pins stage: sent as the stage left it, uncompressed.
    assert_eq!(got[1].header("content-encoding"), None);
    let sent = got[1].body_json().unwrap();
    assert_pinned_at_the_tail("chatgpt", &sent);

    // The ledger read the decoded bodies: model, usage, the pins stage's work, history.
    let rows = pith.wait_rows(2);
    for row in &rows {
        assert_eq!(row.path, "/chatgpt/responses");
        assert_eq!(row.wire.as_deref(), Some("responses"));
        assert_eq!(row.model.as_deref(), Some("gpt-5.5"), "{row:?}");
        assert!(row.usage.is_some(), "{row:?}");
    }
    assert!(
        rows[1].transforms.iter().any(|t| t.stage == "pins"
            && matches!(t.result, pith_store::ledger::TransformResult::Applied(_))),
        "{:?}",
        rows[1]
    );
    let recorded = crate::history::wait_recorded(&pith, "019-chatgpt", 4);
    let shown = crate::history::pith_json(
        pith.home.path(),
        &["history", "show", recorded["id"].as_str().unwrap()],
    );
    assert!(shown["messages"].to_string().contains("say hi"), "{shown}");
}

#[test]
fn a_refused_change_to_a_compressed_body_is_met_with_the_clients_own_bytes() {
    // The provider refuses the body pith changed (uncompressed, with the pin), then answers.
    let refusal = Reply::json_status(
        400,
        fixtures::openai_error_body(400, "unsupported developer message"),
    );
    let (_openai, chatgpt, pith) = behind_chatgpt(&[refusal]);
    let pinned = pith_answered();
    let body = json!({"model": "gpt-5.5", "stream": true, "store": false,
                      "input": [user(PIN), pinned, user("say hi")]});
    assert_eq!(post(&pith, &body), 200, "the client sees the second answer");
    let got = chatgpt.received();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].header("content-encoding"), None);
    assert!(
        got[0].body_json().is_ok(),
        "the changed body went up decoded"
    );
    // What the client sent, byte for byte, with its own content-encoding.
    assert_eq!(got[1].header("content-encoding"), Some("zstd"));
    assert_eq!(&got[1].body[..], &zstd(body.to_string().as_bytes())[..]);
    let rows = pith.wait_rows(1);
    let pins = rows[0]
        .transforms
        .iter()
        .find(|t| t.stage == "pins")
        .unwrap();
    assert!(
        format!("{:?}", pins.result).contains("refused"),
        "{:?}",
        rows[0]
    );
}

#[test]
fn the_real_codex_signed_in_with_chatgpt_pins_through_pith_on_its_websocket() {
    let rt = codex_runtime();
    let mock = says_hi_to_codex(&rt, fixtures::DEFAULT_USAGE);
    let url = mock.url();
    // The other upstreams lead nowhere: only the ChatGPT upstream can answer.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let pith = PithProxy::start_with(&nowhere, &nowhere, &[("PITH_CHATGPT_UPSTREAM", &url)]);
    let accounts = MockUpstream::start().unwrap();
    accounts.set_default(Reply::json_status(404, r#"{"detail":"Not Found"}"#));
    let codex = DefaultCodex::signed_in(
        &pith,
        &url,
        Login::ChatGpt {
            account_backend: &accounts.url(),
        },
    );

    let run = codex.run(&[], PIN);
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert!(
        !run.stderr.contains("straight to its provider"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.starts_with(PINNED), "{}", run.stdout);
    let run = codex.run(&["resume", "--last"], "say hi");
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert_eq!(run.stdout, "Hi.\n", "{}", run.stderr);

    let seen = mock.seen();
    assert_eq!(seen.path, "/backend-api/codex/responses");
    let header = |name: &str| {
        seen.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert!(
        header("authorization").is_some_and(|a| a.starts_with("Bearer eyJ")),
        "{:?}",
        seen.headers
    );
    assert_eq!(
        header("chatgpt-account-id").as_deref(),
        Some(CHATGPT_ACCOUNT)
    );
    let creates = seen.creates();
    let turns = seen.turns();
    assert_eq!(turns.len(), 1, "one main-loop create: {creates:?}");
    assert_pinned_at_the_tail("codex", &turns[0]);
    drop(seen);
    let rows = pith.wait_rows(creates.len() + 1);
    let ws: Vec<_> = rows.iter().filter(|r| r.method == "WEBSOCKET").collect();
    assert_eq!(ws.len(), creates.len() + 1, "one row per create: {rows:?}");
    assert!(
        ws.iter().all(|r| r.path == "/chatgpt/responses"),
        "{rows:?}"
    );
    drop(rt);
}
