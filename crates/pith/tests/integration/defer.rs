//! Tool deferral through the real proxy, on by default.

use pith_testkit::fixtures::{self, Capture};
use pith_testkit::{MockUpstream, Reply};

use crate::support::*;

fn capture(id: &str) -> Capture {
    fixtures::captures()
        .unwrap()
        .into_iter()
        .find(|c| c.id() == id)
        .unwrap_or_else(|| panic!("no capture {id}"))
}

/// Send a capture through pith; returns the response headers.
fn replay(pith: &PithProxy, cap: &Capture) -> http::HeaderMap {
    let url = format!("{}{}", pith.url(), cap.path);
    let (status, hdrs, _) = exchange(&cap.method, &url, &capture_headers(cap), cap.body.clone());
    assert_eq!(status, 200, "{}", cap.id());
    hdrs
}

#[test]
fn opencode_mcp40_is_deferred_with_the_beta_header_and_disclosed() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let cap = capture("opencode-1.18.33/anthropic-agentsmd-mcp40/req002");
    let hdrs = replay(&pith, &cap);

    let disclosed = hdrs["pith-transforms"].to_str().unwrap();
    assert!(disclosed.starts_with("defer;tools="), "{disclosed}");
    let got = &mock.received()[0];
    let beta = got.header("anthropic-beta").unwrap();
    assert_eq!(
        beta,
        "structured-outputs-2025-11-13,advanced-tool-use-2025-11-20"
    );
    let body = got.body_json().unwrap();
    let tools = body["tools"].as_array().unwrap();
    let deferred = tools
        .iter()
        .filter(|t| t["defer_loading"] == serde_json::json!(true))
        .count();
    assert!(
        deferred >= 40,
        "only {deferred} of {} tools deferred",
        tools.len()
    );
    assert!(
        tools
            .iter()
            .any(|t| t["type"] == "tool_search_tool_regex_20251119"),
        "no tool search tool added"
    );
    let n: usize = disclosed
        .trim_start_matches("defer;tools=")
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(n, deferred);

    let rows = pith.wait_rows(1);
    assert_eq!(
        crate::support::disclosed(&rows[0]).as_deref(),
        Some(disclosed)
    );
    assert!(rows[0].bytes_upstream > rows[0].bytes_client);

    let out = pith_stats(&pith, &["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let defer = &v["transforms"]["defer"];
    assert_eq!(defer["requests"], 1);
    let chars = defer["facts"]["chars"].as_u64().unwrap();
    assert!(chars > 30_000, "{chars}");
    assert_eq!(defer["estimated_tokens_kept_out"], chars.div_ceil(4));
}

#[test]
fn clients_with_their_own_search_tool_pass_byte_identical_with_defaults() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    for id in [
        "codex-0.169.0/responses-agentsmd-mcp40/req002",
        "opencode-1.18.33/chat-completions-fix-calc/req002",
    ] {
        mock.clear_received();
        let cap = capture(id);
        let hdrs = replay(&pith, &cap);
        assert!(hdrs.get("pith-transforms").is_none(), "{id}");
        let got = &mock.received()[0];
        assert!(got.body == cap.body, "{id}: body changed");
    }
    let rows = pith.wait_rows(2);
    assert_eq!(
        crate::support::unchanged_reason(&rows[0], "defer"),
        Some("already_deferring")
    );
    assert_eq!(
        crate::support::unchanged_reason(&rows[1], "defer"),
        Some("not_applicable")
    );
}

#[test]
fn claude_code_requests_go_out_with_its_specialised_built_ins_deferred_and_its_beta_once() {
    // Claude Code sends the tool search beta itself (for its own deferred MCP tools): pith
    // appends nothing to it, and leaves its placeholder as it came.
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let cap = capture("claude-code-2.1.328/fix-calc/req002");
    let hdrs = replay(&pith, &cap);
    let disclosed = hdrs["pith-transforms"].to_str().unwrap();
    assert!(disclosed.starts_with("defer;tools=5;"), "{disclosed}");
    let got = &mock.received()[0];
    let beta_sent = cap
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("anthropic-beta"))
        .map(|(_, v)| v.as_str());
    assert!(beta_sent.is_some_and(|b| b.contains("advanced-tool-use-2025-11-20")));
    assert_eq!(got.header("anthropic-beta"), beta_sent);
    let body: serde_json::Value = got.body_json().unwrap();
    let tools = body["tools"].as_array().unwrap();
    let placeholder = tools
        .iter()
        .find(|t| t["name"] == "DeferredToolPlaceholder")
        .unwrap();
    let sent: serde_json::Value = serde_json::from_slice(&cap.body).unwrap();
    let original = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "DeferredToolPlaceholder")
        .unwrap();
    assert_eq!(placeholder, original);
    assert_eq!(tools.len(), sent["tools"].as_array().unwrap().len() + 1);
    let rows = pith.wait_rows(1);
    assert!(rows[0].bytes_upstream > rows[0].bytes_client);
}

#[test]
fn small_tool_lists_pass_unchanged_unless_the_threshold_is_lowered() {
    // OpenCode without MCP: 10 tools, ~6 KB would be deferred, below the default threshold.
    let cap = capture("opencode-1.18.33/anthropic-fix-calc/req002");
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let hdrs = replay(&pith, &cap);
    assert!(hdrs.get("pith-transforms").is_none());
    assert!(mock.received()[0].body == cap.body, "body changed");
    let rows = pith.wait_rows(1);
    assert_eq!(
        crate::support::unchanged_reason(&rows[0], "defer"),
        Some("too_little_to_defer"),
        "{:?}",
        rows[0].transforms
    );
    // `pith stats` says why nothing was deferred.
    let stats = |json: bool| {
        let out = pith_stats(&pith, if json { &["--json"] } else { &[] });
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let v: serde_json::Value = serde_json::from_str(&stats(true)).unwrap();
    let defer = &v["transforms"]["defer"];
    assert_eq!(defer["requests"], 0);
    assert_eq!(defer["unchanged"]["too_little_to_defer"], 1);
    let text = stats(false);
    assert!(
        text.contains("transform tool deferral (defer): changed 0 requests")
            && text.contains(
                "left unchanged: 1 request: too few tool definitions to be worth a search"
            ),
        "{text}"
    );

    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_MIN_DEFERRED_CHARS", "0")]);
    let hdrs = replay(&pith, &cap);
    let disclosed = hdrs["pith-transforms"].to_str().unwrap();
    assert!(disclosed.starts_with("defer;tools=5;"), "{disclosed}");

    let err = proxy_start_error(None, &[("PITH_MIN_DEFERRED_CHARS", "20k")]);
    assert!(
        err.contains("PITH_MIN_DEFERRED_CHARS") && err.contains("whole number"),
        "{err}"
    );
}

#[test]
fn deferral_can_be_switched_off_and_bad_config_is_an_error() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_DEFER_TOOLS", "0")]);
    let cap = capture("opencode-1.18.33/anthropic-agentsmd-mcp40/req002");
    let hdrs = replay(&pith, &cap);
    assert!(hdrs.get("pith-transforms").is_none());
    assert!(mock.received()[0].body == cap.body);

    let err = proxy_start_error(Some("[transforms]\ntool_search = \"fuzzy\"\n"), &[]);
    assert!(err.contains("tool_search") && err.contains("bm25"), "{err}");

    let err = proxy_start_error(None, &[("PITH_DEFER_TOOLS", "maybe")]);
    assert!(err.contains("PITH_DEFER_TOOLS"), "{err}");
}

#[test]
fn embeddings_config_ranks_tools_semantically_once_per_session_on_either_api() {
    for (api, path) in [("ollama", "/api/embed"), ("openai", "/v1/embeddings")] {
        embeddings_once_per_session(api, path);
    }
    let err = proxy_start_error(
        Some("[transforms]\nembeddings_url = \"http://127.0.0.1:11434\"\n"),
        &[],
    );
    assert!(err.contains("embeddings_model is missing"), "{err}");
    let err = proxy_start_error(
        Some(
            "[transforms]\nembeddings_url = \"http://127.0.0.1:11434\"\n\
             embeddings_model = \"m\"\nembeddings_api = \"grpc\"\n",
        ),
        &[],
    );
    assert!(err.contains("transforms.embeddings_api"), "{err}");
    let err = proxy_start_error(Some("[transforms]\nembeddings_api = \"openai\"\n"), &[]);
    assert!(err.contains("embeddings_api is set but"), "{err}");
}

fn embeddings_once_per_session(api: &str, path: &str) {
    use pith_testkit::ollama::{ChatReply, EmbedReply, MockOllama};

    let ollama = MockOllama::start(&["nomic-embed-text"], ChatReply::last(1, 1)).unwrap();
    // "build" matches no tool by words (BM25 would keep the first tool, read_file); the mock
    // embeds "compiler" as "build", so the vectors favour cargo_check.
    ollama.set_embed_reply(EmbedReply::with_aliases(&[("compiler", "build")]));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[transforms]\nkeep_relevant = 1\nmin_deferred_chars = 0\nembeddings_url = \"{}\"\n\
             embeddings_model = \"nomic-embed-text\"\nembeddings_api = \"{api}\"\n",
            ollama.url()
        ),
    )
    .unwrap();
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_CONFIG", config.to_str().unwrap())]);

    let tool = |name: &str, description: &str| {
        serde_json::json!({"name": name, "description": description,
                           "input_schema": {"type": "object", "properties": {}}})
    };
    let body = serde_json::json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "fix the build"}],
        "tools": [
            tool("read_file", "Read a file from disk"),
            tool("list_dir", "List a directory"),
            tool("send_email", "Send a mail message"),
            tool("cargo_check", "Run the compiler over the workspace"),
        ],
    })
    .to_string();
    let headers = [
        ("content-type".to_owned(), "application/json".to_owned()),
        ("anthropic-version".to_owned(), "2023-06-01".to_owned()),
        ("x-api-key".to_owned(), "test-key".to_owned()),
    ];
    let rt = runtime();
    for turn in 0..2 {
        let (status, hdrs, _) = rt.block_on(async {
            read_all(
                send(
                    &client(),
                    request(
                        "POST",
                        &format!("{}/v1/messages", pith.url()),
                        &headers,
                        body.clone(),
                    ),
                )
                .await,
            )
            .await
        });
        assert_eq!(status, 200, "turn {turn}");
        let disclosed = hdrs["pith-transforms"].to_str().unwrap();
        assert!(
            disclosed.starts_with("defer;tools=3;"),
            "turn {turn}: {disclosed}"
        );
    }
    let received = mock.received();
    assert_eq!(received.len(), 2);
    for got in &received {
        let sent = got.body_json().unwrap();
        let loaded: Vec<&str> = sent["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t.get("defer_loading").is_none() && t.get("type").is_none())
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(loaded, ["cargo_check"], "{}", pith.stderr());
    }
    assert!(received[0].body == received[1].body, "turns differ");
    assert_eq!(ollama.embed_requests().len(), 1, "second turn re-embedded");
    assert_eq!(ollama.embed_requests()[0].path, path);
    assert!(
        pith.home
            .path()
            .join("embeddings/decisions")
            .read_dir()
            .unwrap()
            .next()
            .is_some()
    );
}

/// The provider as the last check: the API refuses a body with a field it does not take (the
/// 400 its documentation shows for an unknown input), so pith sends the client's own request,
/// the client gets that answer, and deferral stays off for the rest of the session.
#[test]
fn a_request_the_provider_refuses_as_pith_changed_it_goes_as_the_client_sent_it() {
    use pith_store::ledger::TransformResult;
    use pith_testkit::Reply;
    let mock = MockUpstream::start().unwrap();
    let refusal = r#"{"type":"error","error":{"type":"invalid_request_error","message":"tools.40.defer_loading: Extra inputs are not permitted"}}"#;
    for _ in 0..2 {
        mock.push_when(
            |body| crate::clients::has(body, "defer_loading"),
            Reply::json_status(400, refusal),
        );
    }
    let pith = PithProxy::start(&mock.url(), &[]);
    let cap = capture("opencode-1.18.33/anthropic-agentsmd-mcp40/req002");
    assert!(
        cap.headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("x-session-id")),
        "the capture names its session"
    );
    let hdrs = replay(&pith, &cap);
    assert!(hdrs.get("pith-transforms").is_none(), "{hdrs:?}");
    let received = mock.received();
    assert_eq!(received.len(), 2);
    assert!(crate::clients::has(&received[0].body, "defer_loading"));
    assert_eq!(
        received[1].body, cap.body,
        "the client's own body, byte for byte"
    );
    let client_beta = cap
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("anthropic-beta"))
        .map(|(_, v)| v.as_str());
    assert_eq!(received[1].header("anthropic-beta"), client_beta);
    let rows = pith.wait_rows(1);
    assert_eq!(rows.len(), 1, "one request, one row");
    assert_eq!(rows[0].status, Some(200));
    match rows[0].transform("defer") {
        Some(TransformResult::Failed(why)) => {
            assert!(
                why.contains("the provider refused") && why.contains("defer_loading"),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }

    // The session's next request goes as the client sent it: deferral stays off.
    replay(&pith, &cap);
    let received = mock.received();
    assert_eq!(received.len(), 3);
    assert_eq!(received[2].body, cap.body);
    assert_eq!(
        mock.queued_replies(),
        1,
        "the second refusal was never needed"
    );
    let rows = pith.wait_rows(2);
    assert_eq!(
        crate::support::unchanged_reason(&rows[1], "defer"),
        Some("refused_by_provider")
    );
}

/// A session's requests in order: a shared capture folder or one recorded in this repository.
fn session(folder: &str) -> Vec<Capture> {
    let mut all = fixtures::captures().unwrap();
    all.extend(fixtures::recorded().unwrap());
    let session: Vec<Capture> = all
        .into_iter()
        .filter(|c| format!("{}/{}", c.client_folder, c.scenario) == folder)
        .collect();
    assert!(!session.is_empty(), "no session {folder}");
    session
}

#[test]
fn the_ledger_estimate_of_claude_code_savings_agrees_with_a_cache_weighted_replay() {
    use pith_testkit::cache_sim::{CostModel, RequestCost, session_costs};
    use pith_testkit::fixtures::{Usage, anthropic};

    let weighted = |costs: &[RequestCost]| costs.iter().map(RequestCost::weighted).sum::<f64>();
    for folder in [
        "claude-code-2.1.328/fix-calc",
        "claude-code-2.1.328/fix-calc-long",
    ] {
        let session = session(folder);
        // What pith sends for each request of the session.
        let mock = MockUpstream::start().unwrap();
        let pith = PithProxy::start(&mock.url(), &[]);
        for cap in &session {
            replay(&pith, cap);
        }
        let sent: Vec<Vec<u8>> = mock.received().iter().map(|r| r.body.to_vec()).collect();
        drop(pith);
        let original: Vec<Vec<u8>> = session.iter().map(|c| c.body.to_vec()).collect();
        let before = session_costs(&original, CostModel::DOCUMENTED).unwrap();
        let after = session_costs(&sent, CostModel::DOCUMENTED).unwrap();
        let replayed = weighted(&before) - weighted(&after);
        assert!(replayed > 0.25 * weighted(&before), "{folder}: {replayed}");

        // The same session again, the provider answering each request with the usage Anthropic's
        // cache rules give for what pith sent: the ledger prices what defer kept out from it.
        let mock = MockUpstream::start().unwrap();
        for cost in &after {
            let tokens = |t: f64| t.round() as u64;
            let usage = Usage {
                input: tokens(cost.prompt.uncached),
                output: 5,
                cache_write: tokens(cost.prompt.write),
                cache_write_1h: 0,
                cache_read: tokens(cost.prompt.read),
            };
            mock.push(Reply::sse(anthropic::stream(&["ok"], usage)));
        }
        let pith = PithProxy::start(&mock.url(), &[]);
        for cap in &session {
            replay(&pith, cap);
        }
        let again: Vec<Vec<u8>> = mock.received().iter().map(|r| r.body.to_vec()).collect();
        assert!(
            again == sent,
            "{folder}: pith sent other bytes the second time"
        );
        pith.wait_rows(session.len());
        let out = pith_stats(&pith, &["--json"]);
        assert!(out.status.success());
        let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let saved = &stats["transforms"]["defer"]["estimated_saved_tokens"];
        let band = |name: &str| saved[name].as_i64().unwrap_or(0) as f64;
        let estimated = band("input")
            + 1.25 * band("cache_write_5m")
            + 2.0 * band("cache_write_1h")
            + 0.1 * band("cache_read");
        let off = (estimated - replayed).abs() / replayed;
        assert!(
            off < 0.05,
            "{folder}: the ledger estimates {estimated:.0} weighted tokens saved, the replay \
             {replayed:.0} ({:.1}% apart): {saved}",
            off * 100.0
        );
    }
}

#[test]
fn a_refused_deferral_goes_as_the_client_sent_it_for_claude_code_and_on_responses() {
    // Claude Code's request (its own placeholder deferred, pith's deferral added), refused the
    // way the API refuses a `tool_reference` to a tool it does not have; and Codex's request
    // without its own tool search (so pith defers on Responses; its 11 KB of tools are below
    // the default threshold, lowered here), refused the way the OpenAI API refuses an unknown
    // parameter.
    let claude_code = capture("claude-code-2.1.328/fix-calc/req002");
    let mut codex = capture("codex-0.169.0/responses-agentsmd-mcp40/req002");
    let mut body: serde_json::Value = serde_json::from_slice(&codex.body).unwrap();
    body["tools"]
        .as_array_mut()
        .unwrap()
        .retain(|t| t["type"] != "tool_search");
    codex.body = serde_json::to_vec(&body).unwrap().into();
    let anthropic_refusal = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Tool reference 'Workflow' not found in available tools"}}"#;
    let openai_refusal = r#"{"error":{"message":"Unknown parameter: 'tools[3].defer_loading'.","type":"invalid_request_error","param":"tools[3].defer_loading","code":"unknown_parameter"}}"#;
    for (cap, refusal, env) in [
        (claude_code, anthropic_refusal, &[][..]),
        (
            codex,
            openai_refusal,
            &[("PITH_MIN_DEFERRED_CHARS", "0")][..],
        ),
    ] {
        let mock = MockUpstream::start().unwrap();
        mock.push_when(
            |body| {
                crate::clients::has(body, "tool_search_tool_regex")
                    || crate::clients::has(body, "{\"type\":\"tool_search\"}")
            },
            Reply::json_status(400, refusal),
        );
        let pith = PithProxy::start(&mock.url(), env);
        replay(&pith, &cap);
        let received = mock.received();
        assert_eq!(received.len(), 2, "{}", cap.id());
        assert!(received[0].body != cap.body, "{}: pith deferred", cap.id());
        assert!(
            received[1].body == cap.body,
            "{}: the client's own body, byte for byte",
            cap.id()
        );
        let rows = pith.wait_rows(1);
        assert_eq!(rows[0].status, Some(200), "{}", cap.id());
        match rows[0].transform("defer") {
            Some(pith_store::ledger::TransformResult::Failed(why)) => {
                assert!(why.contains("the provider refused"), "{}: {why}", cap.id())
            }
            other => panic!("{}: {other:?}", cap.id()),
        }
    }
}
