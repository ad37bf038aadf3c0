//! Each WebSocket turn through the request path: a turn of pin commands answered by pith on
//! the socket, the pin riding the next turns with the `previous_response_id` chain valid (the
//! mock keeps one previous response per socket and refuses any other, as the service does), the
//! provider's refusal of a changed frame met with the client's own, a reconnect, a chain pith
//! does not hold, and the real Codex on its default path.

use std::sync::Arc;

use futures_util::SinkExt;
use pith_testkit::fixtures::{self, responses};
use pith_testkit::responses_socket::{self, SocketMock, frames_of};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::pins::{PIN, PINNED, assert_pinned_at_the_tail};
use crate::support::{PithProxy, runtime};
use crate::websocket::{
    CODEX_USAGE, DefaultCodex, answer, codex_runtime, open_with, says_hi_to_codex,
};

/// A pith in front of a socket mock answering each create with `text`.
fn over(answers: responses_socket::Answers) -> (PithProxy, SocketMock, tokio::runtime::Runtime) {
    over_with(answers, &[])
}

/// [`over`], the proxy started with `env`.
fn over_with(
    answers: responses_socket::Answers,
    env: &[(&str, &str)],
) -> (PithProxy, SocketMock, tokio::runtime::Runtime) {
    let rt = runtime();
    let mock = rt.block_on(SocketMock::start(answers)).unwrap();
    let pith = PithProxy::start_with(&mock.url(), &mock.url(), env);
    (pith, mock, rt)
}

/// The mock's answer: one message saying `text`.
fn says(text: &str) -> Vec<String> {
    frames_of(&responses::stream(&[text], fixtures::DEFAULT_USAGE))
}

/// The same, as the ChatGPT backend completes: `output: []` in `response.completed`, the items
/// only in the `response.output_item.done` events.
fn says_without_completed_output(text: &str) -> Vec<String> {
    says(text)
        .into_iter()
        .map(|e| {
            let mut v: Value = serde_json::from_str(&e).unwrap();
            if v["type"] == "response.completed" {
                v["response"]["output"] = json!([]);
            }
            v.to_string()
        })
        .collect()
}

fn user(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
}

/// A create as Codex sends it, chained to `previous` when it is given.
fn create(previous: Option<&str>, input: Value) -> String {
    let mut c = json!({"type": "response.create", "model": "gpt-5.5", "instructions": "be brief",
                       "input": input, "tools": [], "stream": true, "store": false});
    if let Some(id) = previous {
        c["previous_response_id"] = json!(id);
    }
    c.to_string()
}

/// The id of an answer (its `response.completed`'s) and its text (from that event's output, or
/// else its `response.output_item.done`, as Codex reads it).
fn completed(events: &[String]) -> (String, String) {
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["type"], "response.completed", "{events:?}");
    let text_of = |item: &Value| {
        item["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let mut text = text_of(&last["response"]["output"][0]);
    if text.is_empty() {
        text = events
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(e).ok())
            .find(|e| e["type"] == "response.output_item.done")
            .map(|e| text_of(&e["item"]))
            .unwrap_or_default();
    }
    (last["response"]["id"].as_str().unwrap().to_owned(), text)
}

const HEADERS: &[(&str, &str)] = &[("openai-beta", "responses_websockets=2026-02-06")];

#[test]
fn a_pin_turn_between_two_real_turns_is_answered_on_the_socket_and_the_chain_stays_valid() {
    // Answers as the ChatGPT backend gives them, so the transcript must read the done items.
    let (pith, mock, rt) = over(Arc::new(|_: &Value, n| {
        says_without_completed_output(&format!("answer {n}"))
    }));
    let got = rt.block_on(async {
        let mut ws = open_with(&pith, HEADERS).await;
        let mut got = Vec::new();
        let mut previous: Option<String> = None;
        for input in [user("first"), user(PIN), user("second"), user("third")] {
            let frame = create(previous.as_deref(), json!([input]));
            ws.send(Message::text(frame)).await.unwrap();
            let events = answer(&mut ws).await;
            let (id, text) = completed(&events);
            previous = Some(id.clone());
            got.push((id, text));
        }
        ws.close(None).await.unwrap();
        got
    });
    // The client got every answer, the pin turn's from pith (its own id).
    assert_eq!(got[0].1, "answer 1");
    assert!(got[1].0.starts_with("resp_pith_"), "{got:?}");
    assert!(got[1].1.starts_with(PINNED), "{got:?}");
    assert_eq!(got[2].1, "answer 2");
    assert_eq!(got[3].1, "answer 3");

    let seen = mock.seen();
    let creates = seen.creates();
    assert_eq!(creates.len(), 3, "the pin turn went upstream: {creates:?}");
    let frames = seen.frames.join("\n");
    assert!(!frames.contains("resp_pith"), "pith's id went up: {frames}");
    // The provider's items go back without their ids (with `store: false` it keeps none).
    assert!(
        !frames.contains("msg_MockUpstream"),
        "an item id went up: {frames}"
    );
    // The turn after the pin chains to the provider's own answer, with its new input and the
    // pin at the tail (neither the command nor pith's answer).
    assert_eq!(creates[1]["previous_response_id"], got[0].0.as_str());
    let input = creates[1]["input"].as_array().unwrap();
    assert_eq!(input.len(), 2, "{input:?}");
    assert_eq!(input[0]["content"][0]["text"], "second");
    assert_pinned_at_the_tail("socket", &creates[1]);
    // The next one cannot chain: the provider holds the pin block at the old tail. It goes up
    // whole, the pin once, at the new tail: the prompt an HTTP request would show.
    assert!(
        creates[2].get("previous_response_id").is_none(),
        "{creates:?}"
    );
    assert_pinned_at_the_tail("socket", &creates[2]);
    let whole = creates[2].to_string();
    assert_eq!(whole.matches("<pith-pins>").count(), 1, "{whole}");
    let texts: Vec<&str> = creates[2]["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["content"][0]["text"].as_str())
        .collect();
    assert_eq!(
        texts[..5],
        ["first", "answer 1", "second", "answer 2", "third"]
    );

    // One row per create: the pin turn pith's own (no usage, as over HTTP: it billed nothing),
    // the others the provider's, with usage.
    let rows = pith.wait_rows(4);
    let outcomes: Vec<&str> = rows.iter().map(|r| r.outcome.as_str()).collect();
    assert_eq!(outcomes, ["ok", "local", "ok", "ok"], "{rows:?}");
    assert!(rows.iter().all(|r| r.method == "WEBSOCKET"));
    let usages: Vec<bool> = rows.iter().map(|r| r.usage.is_some()).collect();
    assert_eq!(usages, [true, false, true, true], "{rows:?}");
    for row in [&rows[2], &rows[3]] {
        assert!(
            row.transforms.iter().any(|t| t.stage == "pins"
                && matches!(t.result, pith_store::ledger::TransformResult::Applied(_))),
            "{row:?}"
        );
    }
    // History holds the conversation the person had, the pin turn included.
    let recorded = crate::history::wait_recorded(&pith, "019-session", 8);
    let shown = crate::history::pith_json(
        pith.home.path(),
        &["history", "show", recorded["id"].as_str().unwrap()],
    );
    let said = shown["messages"].to_string();
    for text in [
        "first", PIN, PINNED, "second", "answer 2", "third", "answer 3",
    ] {
        assert!(said.contains(text), "{text} is not in the history: {said}");
    }
}

#[test]
fn a_refused_change_is_met_with_the_clients_own_frame_and_the_refusal_is_never_seen() {
    // The provider refuses any frame that carries pith's pin block.
    let (pith, mock, rt) = over(Arc::new(|create: &Value, n| {
        if create.to_string().contains("<pith-pins>") {
            vec![responses_socket::refusal(
                "developer messages are not allowed here",
            )]
        } else {
            says(&format!("answer {n}"))
        }
    }));
    let got = rt.block_on(async {
        let mut ws = open_with(&pith, HEADERS).await;
        let mut got = Vec::new();
        let mut previous: Option<String> = None;
        for input in [user(PIN), user("hi"), user("again")] {
            let frame = create(previous.as_deref(), json!([input]));
            ws.send(Message::text(frame.clone())).await.unwrap();
            let events = answer(&mut ws).await;
            assert!(
                events.iter().all(|e| !e.contains(r#""type":"error""#)),
                "the client saw an error: {events:?}"
            );
            let (id, text) = completed(&events);
            previous = Some(id);
            got.push((frame, text));
        }
        got
    });
    // (The mock numbers every create it takes, the refused one too.)
    assert!(got[0].1.starts_with(PINNED));
    assert_eq!(got[1].1, "answer 2");
    assert_eq!(got[2].1, "answer 3");
    let seen = mock.seen();
    let creates = seen.creates();
    // The changed frame, refused; then the client's own conversation, whole (the refusal
    // evicted what the changed frame chained to); then, with pins off for the session, the
    // client's frame as it came, chained to the answer the provider holds.
    assert_eq!(creates.len(), 3, "{creates:?}");
    assert!(creates[0].to_string().contains("<pith-pins>"));
    assert!(creates[1].get("previous_response_id").is_none());
    assert!(
        creates[1].to_string().contains(PIN),
        "the client's own: {}",
        creates[1]
    );
    assert_eq!(seen.frames.last().unwrap(), &got[2].0);
    let rows = pith.wait_rows(3);
    let pins = rows[1]
        .transforms
        .iter()
        .find(|t| t.stage == "pins")
        .unwrap();
    let failed = format!("{:?}", pins.result);
    assert!(
        failed.contains("refused") && failed.contains("off for the session"),
        "{failed}"
    );
    assert_eq!(rows[1].outcome.as_str(), "ok", "{rows:?}");
}

#[test]
fn a_refused_change_whose_resend_is_never_answered_keeps_its_row_saying_so() {
    let (pith, _mock, rt) = over(Arc::new(|create: &Value, _| {
        if create.to_string().contains("<pith-pins>") {
            vec![responses_socket::refusal(
                "developer messages are not allowed here",
            )]
        } else {
            vec![responses_socket::HANG_UP.to_owned()]
        }
    }));
    rt.block_on(async {
        let mut ws = open_with(&pith, HEADERS).await;
        ws.send(Message::text(create(None, json!([user(PIN)]))))
            .await
            .unwrap();
        let (id, _) = completed(&answer(&mut ws).await);
        ws.send(Message::text(create(Some(&id), json!([user("hi")]))))
            .await
            .unwrap();
        // The upstream hangs up on the resend: the socket ends, and the refusal never shows.
        while let Some(Ok(msg)) = futures_util::StreamExt::next(&mut ws).await {
            assert!(!msg.to_string().contains("not allowed"), "{msg:?}");
        }
    });
    let rows = pith.wait_rows(2);
    let pins = rows[1]
        .transforms
        .iter()
        .find(|t| t.stage == "pins")
        .unwrap();
    let said = format!("{:?}", pins.result);
    assert!(
        said.contains("refused") && said.contains("ended before its answer"),
        "{said}"
    );
    assert_eq!(rows[1].outcome.as_str(), "upstream_broken", "{:?}", rows[1]);
}

#[test]
fn a_reconnect_sends_the_whole_conversation_and_a_chain_pith_does_not_hold_is_never_guessed() {
    let (pith, mock, rt) = over(Arc::new(|_: &Value, n| says(&format!("answer {n}"))));
    let pinned = rt.block_on(async {
        let mut ws = open_with(&pith, HEADERS).await;
        ws.send(Message::text(create(None, json!([user(PIN)]))))
            .await
            .unwrap();
        let events = answer(&mut ws).await;
        ws.close(None).await.unwrap();
        completed(&events)
    });
    // A new socket: Codex sends the whole input again, pith's answer as it showed it.
    let reply = json!({"type": "message", "role": "assistant",
                       "content": [{"type": "output_text", "text": pinned.1}]});
    let to_pith = create(Some(&pinned.0), json!([user("later")]));
    let elsewhere = create(Some("resp_of_another_socket"), json!([user("later")]));
    rt.block_on(async {
        let mut ws = open_with(&pith, HEADERS).await;
        let whole = create(None, json!([user(PIN), reply, user("hi")]));
        ws.send(Message::text(whole)).await.unwrap();
        let (_, text) = completed(&answer(&mut ws).await);
        assert_eq!(text, "answer 1");
        ws.close(None).await.unwrap();
        // Chains this socket never saw. To pith's own id from the closed socket: no provider
        // holds it, so pith answers as the service would, and nothing goes up.
        let mut ws = open_with(&pith, HEADERS).await;
        ws.send(Message::text(to_pith.clone())).await.unwrap();
        let said = first_event(&mut ws).await;
        assert!(said.contains("previous_response_not_found"), "{said}");
        // To an answer of the provider's on another socket: pith does not know the
        // conversation, so the frame goes up as it came (no pin guessed) and the provider says.
        ws.send(Message::text(elsewhere.clone())).await.unwrap();
        let said = first_event(&mut ws).await;
        assert!(said.contains("previous_response_not_found"), "{said}");
    });
    let seen = mock.seen();
    let creates = seen.creates();
    assert_eq!(creates.len(), 2, "{creates:?}");
    assert!(creates[0].get("previous_response_id").is_none());
    assert_pinned_at_the_tail("socket", &creates[0]);
    assert_eq!(seen.frames.last().unwrap(), &elsewhere);
    assert!(!seen.frames.join("\n").contains("resp_pith"));
    let rows = pith.wait_rows(4);
    assert_eq!(
        (rows[2].outcome.as_str(), rows[2].status),
        ("client_error", Some(400)),
        "{:?}",
        rows[2]
    );
    assert!(
        !rows[3].transforms.is_empty()
            && rows[3]
                .transforms
                .iter()
                .all(|t| format!("{:?}", t.result).contains("transcript_not_held")),
        "{:?}",
        rows[3]
    );
    assert_eq!(rows[3].status, Some(400));
}

#[test]
fn the_real_codex_pins_on_its_websocket_and_the_pin_rides_the_resumed_session() {
    let (rt, usage) = (codex_runtime(), CODEX_USAGE);
    let mock = says_hi_to_codex(&rt, usage);
    let upstream_url = mock.url();
    let pith = PithProxy::start_with(&upstream_url, &upstream_url, &[]);
    let codex = DefaultCodex::new(&pith, &upstream_url);
    let run = codex.run(&[], PIN);
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert!(run.stdout.starts_with(PINNED), "{}", run.stdout);
    {
        let seen = mock.seen();
        let creates = seen.creates();
        assert!(
            creates.iter().all(responses_socket::is_warm_up),
            "Codex's pin turn reached the mock: {creates:?}"
        );
    }

    let run = codex.run(&["resume", "--last"], "say hi");
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert_eq!(run.stdout, "Hi.\n", "{}", run.stderr);
    let seen = mock.seen();
    let creates = seen.creates();
    let turns = seen.turns();
    assert_eq!(turns.len(), 1, "one main-loop create: {creates:?}");
    // The pin at the tail of what the provider gets over the socket; not the command, not
    // pith's answer, not pith's id.
    assert_pinned_at_the_tail("codex", &turns[0]);
    assert!(!seen.frames.join("\n").contains("resp_pith"));
    assert!(seen.connections >= 2, "{}", seen.connections);
    drop(seen);

    // One row per create (two warm-ups, pith's answer, the turn), the provider's with usage
    // (pith's own has none, as over HTTP: it billed nothing).
    let rows = pith.wait_rows(creates.len() + 1);
    let ws: Vec<_> = rows.iter().filter(|r| r.method == "WEBSOCKET").collect();
    assert_eq!(ws.len(), creates.len() + 1, "{rows:?}");
    let (local, provider): (Vec<&&pith_store::ledger::Row>, Vec<_>) =
        ws.iter().partition(|r| r.outcome.as_str() == "local");
    assert_eq!(local.len(), 1, "{ws:?}");
    assert!(local[0].usage.is_none(), "{ws:?}");
    assert!(provider.iter().all(|r| r.usage.is_some()), "{ws:?}");
    // History holds both turns.
    let session = ws[0].session.clone().unwrap();
    let recorded = crate::history::wait_recorded(&pith, &session, 4);
    let shown = crate::history::pith_json(
        pith.home.path(),
        &["history", "show", recorded["id"].as_str().unwrap()],
    );
    let said = shown["messages"].to_string();
    for text in [PIN, PINNED, "say hi", "Hi."] {
        assert!(said.contains(text), "{text} is not in the history: {said}");
    }
    drop(rt);
}

/// The first text the client reads.
async fn first_event(ws: &mut crate::websocket::Socket) -> String {
    let msg = futures_util::StreamExt::next(ws).await.unwrap().unwrap();
    msg.to_text().unwrap().to_owned()
}

#[test]
fn the_real_codex_on_its_websocket_is_recorded_as_its_own_session_file_imports() {
    // A turn that runs a command (the model calls exec_command, Codex runs it and sends its
    // output), then a resumed turn.
    let rt = codex_runtime();
    let call = pith_testkit::fixtures::ToolCall::new(
        "call_01Cat",
        "exec_command",
        r#"{"cmd":"cat README.md"}"#,
    );
    let looked = frames_of(&responses::stream_with_tool(
        &["Let me look."],
        &call,
        CODEX_USAGE,
    ));
    let done = frames_of(&responses::stream(&["Done: it is a greeter."], CODEX_USAGE));
    let mock = rt
        .block_on(SocketMock::start(Arc::new(move |create: &Value, _| {
            if responses_socket::is_warm_up(create) {
                responses_socket::warm_up_answer(250)
            } else if create["input"]
                .as_array()
                .is_some_and(|i| i.iter().any(|item| item["type"] == "function_call_output"))
            {
                done.clone()
            } else {
                looked.clone()
            }
        })))
        .unwrap();
    let url = mock.url();
    let pith = PithProxy::start_with(&url, &url, &[]);
    let codex = DefaultCodex::new(&pith, &url);
    for (args, prompt) in [
        (&[][..], "what is in README.md?"),
        (&["resume", "--last"][..], "and again"),
    ] {
        let run = codex.run(args, prompt);
        run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    }
    assert!(mock.seen().connections >= 2, "not over the socket");
    let rows = pith.wait_rows(4);
    let session = rows
        .iter()
        .find_map(|r| r.session.clone())
        .expect("a session");
    let recorded = crate::history::wait_recorded(&pith, &session, 5);
    let home = pith.home.path();
    crate::history::import(
        home,
        &codex.codex_home().join("no-claude"),
        &codex.codex_home(),
    );
    let imported = crate::history::imported_conversation(home, &session);
    let proxy_shape = crate::history::shape(home, recorded["id"].as_str().unwrap());
    assert_eq!(
        proxy_shape,
        crate::history::shape(home, imported["id"].as_str().unwrap()),
        "the socket's history differs from Codex's own"
    );
    assert_eq!(recorded["realUserMessages"], imported["realUserMessages"]);
    assert_eq!(recorded["realUserMessages"], 2, "{recorded}");
    let proxied = crate::history::said(home, recorded["id"].as_str().unwrap());
    assert_eq!(
        proxied,
        crate::history::said(home, imported["id"].as_str().unwrap()),
        "message for message"
    );
    let previews = format!("{proxied:?}");
    assert!(
        previews.contains("exec_command") && previews.contains("# greeter"),
        "the command and its output: {previews}"
    );
}

/// Tool output excerpts on Codex's socket: the long output rides whole in the create that
/// carries it; the next create, whose conversation now shows the excerpt, goes up whole (the
/// provider holds the output whole, so its chain is no prefix), and the one after chains to
/// the provider's answer again with only its new input: the excerpt's bytes did not change.
#[test]
fn an_output_shortened_on_the_socket_goes_up_whole_once_then_the_chain_resumes() {
    let (pith, mock, rt) = over_with(
        Arc::new(|_: &Value, n| says(&format!("answer {n}"))),
        &[("PITH_TRIM_OUTPUTS", "1")],
    );
    let long: String = (1..=400)
        .map(|n| format!("{n:6}\t    let value_{n} = compute_{n}(input);\n"))
        .collect();
    let first = json!([
        user("read src/lib.rs"),
        {"type": "function_call", "call_id": "call_1", "name": "shell",
         "arguments": "{\"command\":[\"bash\",\"-lc\",\"cat -n src/lib.rs\"]}"},
        {"type": "function_call_output", "call_id": "call_1", "output": long},
    ]);
    let ids = rt.block_on(async {
        let mut ws = open_with(&pith, HEADERS).await;
        let mut ids: Vec<String> = Vec::new();
        for input in [first, json!([user("go on")]), json!([user("and on")])] {
            ws.send(Message::text(create(ids.last().map(String::as_str), input)))
                .await
                .unwrap();
            ids.push(completed(&answer(&mut ws).await).0);
        }
        ws.close(None).await.unwrap();
        ids
    });
    let creates = mock.seen().creates();
    assert_eq!(creates.len(), 3);
    assert_eq!(
        creates[0]["input"][2]["output"],
        long.as_str(),
        "whole in its own turn"
    );
    assert!(
        creates[1].get("previous_response_id").is_none(),
        "{:?}",
        creates[1]
    );
    let shown = creates[1]["input"][2]["output"].as_str().unwrap();
    assert!(
        shown.starts_with("[pith shortened this tool output: "),
        "{shown}"
    );
    assert_eq!(creates[2]["previous_response_id"], ids[1].as_str());
    let input = creates[2]["input"].as_array().unwrap();
    assert_eq!(input.len(), 1, "only the new input: {input:?}");
    let rows = pith.wait_rows(3);
    let shortened: Vec<bool> = rows
        .iter()
        .map(|r| {
            r.transforms.iter().any(|t| {
                t.stage == "outputs"
                    && matches!(t.result, pith_store::ledger::TransformResult::Applied(_))
            })
        })
        .collect();
    assert_eq!(shortened, [false, true, true], "{rows:?}");
}
