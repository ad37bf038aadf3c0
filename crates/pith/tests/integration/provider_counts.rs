//! The provider's own count of what pith kept out (issue 49) through the real proxy: with
//! `PITH_PROVIDER_COUNTS`, a sampled request a stage changed has its client body counted by the
//! provider's token counter beside it (Anthropic `count_tokens`, OpenAI
//! `responses/input_tokens`, answered by the mock's tokenizer); the ledger keeps the count, and
//! `pith stats` and the dashboard compare pith's estimate with it. A counter's 429 is counted,
//! never retried, and never reaches the client.

use pith_testkit::MockUpstream;
use pith_testkit::fixtures::tokens::prompt_tokens;
use serde_json::Value;

use crate::support::*;

/// The requests the mock got on `path` (its query aside).
fn on(mock: &MockUpstream, path: &str) -> Vec<pith_testkit::Recorded> {
    mock.received()
        .into_iter()
        .filter(|r| r.path() == path)
        .collect()
}

/// Claude Code's request with a long earlier Read result (the excerpts change it), its bytes,
/// headers and path.
fn claude_code_request() -> (Vec<u8>, Vec<(String, String)>, String) {
    let (cap, body, _) = crate::outputs::with_long_result();
    (body, capture_headers(&cap), cap.path.clone())
}

/// pith with excerpts on (they change Claude Code's request) and `share` of its changes counted.
fn counting(mock: &MockUpstream, share: &str) -> PithProxy {
    PithProxy::start(
        &mock.url(),
        &[("PITH_TRIM_OUTPUTS", "1"), ("PITH_PROVIDER_COUNTS", share)],
    )
}

fn send(pith: &PithProxy, (body, headers, path): &(Vec<u8>, Vec<(String, String)>, String)) {
    let (status, _, _) = exchange(
        "POST",
        &format!("{}{path}", pith.url()),
        headers,
        body.clone(),
    );
    assert_eq!(status, 200);
}

/// Three of Claude Code's requests and one of Codex's, every one sampled: each counter gets
/// the client's own body cut to the fields it takes, with the client's credentials; each row
/// keeps the provider's count; `pith stats --json` and its text, and the page, give what the
/// counts say the stages kept out (the client's body counted, less the usage billed for what
/// pith sent) beside pith's estimate of the same. Off by default: no counter is asked.
#[test]
fn the_provider_counts_a_changed_requests_own_body_and_stats_and_the_page_compare() {
    let mock = MockUpstream::start().unwrap();
    mock.count_prompts(true);
    let off = PithProxy::start(&mock.url(), &[("PITH_TRIM_OUTPUTS", "1")]);
    let claude = claude_code_request();
    send(&off, &claude);
    off.wait_rows(1);
    assert_eq!(
        on(&mock, "/v1/messages/count_tokens").len(),
        0,
        "off by default"
    );
    mock.clear_received();

    let pith = counting(&mock, "1");
    for _ in 0..3 {
        send(&pith, &claude);
    }
    let (cap, body, _) =
        crate::outputs::openai_with_long_output("codex-0.169.0/responses-fix-calc/req005");
    let codex = (body, capture_headers(&cap), cap.path.clone());
    send(&pith, &codex);
    let rows = pith.wait_rows(4);

    let counts = on(&mock, "/v1/messages/count_tokens");
    assert_eq!(counts.len(), 3, "one count per changed request");
    let client: Value = serde_json::from_slice(&claude.0).unwrap();
    for count in &counts {
        assert_eq!(count.path_and_query, "/v1/messages/count_tokens?beta=true");
        let asked = count.body_json().unwrap();
        for field in ["model", "system", "messages", "tools"] {
            assert_eq!(asked[field], client[field], "{field} as the client sent it");
        }
        for field in ["max_tokens", "stream", "metadata"] {
            assert!(asked.get(field).is_none(), "{field} is not the counter's");
        }
        for (name, value) in &claude.1 {
            if ["x-api-key", "authorization", "anthropic-version"]
                .contains(&name.to_ascii_lowercase().as_str())
            {
                assert_eq!(count.header(name), Some(value.as_str()), "{name} carried");
            }
        }
        assert!(
            count.header("x-claude-code-session-id").is_none(),
            "nothing else of the request"
        );
    }
    let input_counts = on(&mock, "/v1/responses/input_tokens");
    assert_eq!(
        input_counts.len(),
        1,
        "Codex's request counted by OpenAI's counter"
    );
    let codex_client: Value = serde_json::from_slice(&codex.0).unwrap();
    let asked = input_counts[0].body_json().unwrap();
    assert_eq!(asked["input"], codex_client["input"]);
    assert!(
        asked.get("stream").is_none() && asked.get("store").is_none(),
        "{asked}"
    );

    // Each row keeps the provider's count of the client's own body.
    let expected_count = [claude.0.as_slice(), &claude.0, &claude.0, &codex.0].map(prompt_tokens);
    let kept: Vec<(Option<&str>, Option<u64>)> = rows
        .iter()
        .map(|r| (r.provider_count_outcome.as_deref(), r.provider_count_tokens))
        .collect();
    assert_eq!(
        kept,
        expected_count.map(|n| (Some("counted"), Some(n))).to_vec(),
        "rows in arrival order"
    );

    // What the counts say was kept out: each client body's count less the usage of what pith
    // sent (the mock bills the prompt's own tokens), against pith's estimate on the same rows.
    let sent: Vec<u64> = ["/v1/messages", "/v1/responses"]
        .iter()
        .flat_map(|p| on(&mock, p))
        .map(|r| prompt_tokens(&r.body))
        .collect();
    let counted_kept_out: i64 =
        expected_count.iter().sum::<u64>() as i64 - sent.iter().sum::<u64>() as i64;
    let estimated_kept_out: i64 = rows.iter().flat_map(|r| &r.savings).map(|s| s.tokens).sum();
    assert!(
        counted_kept_out > 0 && estimated_kept_out > 0,
        "{counted_kept_out} {estimated_kept_out}"
    );
    let report: Value = serde_json::from_slice(&pith_stats(&pith, &["--json"]).stdout).unwrap();
    let c = &report["provider_counts"];
    assert_eq!(c["sampled"], 4, "{c}");
    assert_eq!(c["counted"], 4, "{c}");
    assert_eq!(c["compared"], 4, "{c}");
    assert_eq!(c["counted_kept_out"], counted_kept_out, "{c}");
    assert_eq!(c["estimated_kept_out"], estimated_kept_out, "{c}");
    let error = (estimated_kept_out - counted_kept_out) as f64 / counted_kept_out as f64;
    assert!(
        (c["estimate_error"].as_f64().unwrap() - error).abs() < 1e-9,
        "{c}"
    );
    let text = String::from_utf8(pith_stats(&pith, &[]).stdout).unwrap();
    eprintln!("{text}");
    assert!(
        text.contains("counted by the provider: 4 of 4 sampled requests counted\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "kept out of 4 requests: {counted_kept_out} tokens counted by the provider, \
             {estimated_kept_out} estimated by pith ({:+.1}% off the count)",
            100.0 * error
        )),
        "{text}"
    );

    // The page says the same, at a phone's width and a laptop's.
    let url = format!("{}/?poll", pith.url());
    for size in [(390, 844), (1280, 800)] {
        let mut page = crate::browser::Page::open(&url, size);
        page.until(
            "document.getElementById('counted').textContent.includes('counted by the provider')",
            10_000,
        );
        let said = page.eval("document.getElementById('counted').textContent");
        let said = said.as_str().unwrap();
        assert!(
            said.starts_with("4 of 4 sampled requests counted."),
            "{said}"
        );
        assert!(
            said.contains(&format!("({:+.1}% off the count)", 100.0 * error)),
            "{said}"
        );
        crate::dashboard::fits_and_axe_finds_nothing_serious(&mut page, size, "counted");
    }
}

/// The counter answers 429: the first sampled request's row says `rate_limited`, the counter
/// is not asked again while its `retry-after` lasts (the next rows say `paused`), nothing is
/// retried, and every client gets its answer as it would without counting.
#[test]
fn a_429_from_the_counter_is_counted_never_retried_and_never_seen_by_the_client() {
    let mock = MockUpstream::start().unwrap();
    mock.refuse_counts(Some(429));
    let pith = counting(&mock, "1");
    let claude = claude_code_request();
    for n in 1..=3 {
        let (body, headers, path) = &claude;
        let (status, answer_headers, chunks) = exchange(
            "POST",
            &format!("{}{path}", pith.url()),
            headers,
            body.clone(),
        );
        let answer = chunks.concat();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
        assert!(!String::from_utf8_lossy(&answer).contains("rate limit"));
        assert!(answer_headers.get("retry-after").is_none());
        // Its row is written once its count has come back (the 429 seen): the next request
        // finds the counter paused.
        pith.wait_rows(n);
    }
    let rows = pith.wait_rows(3);
    let outcomes: Vec<Option<&str>> = rows
        .iter()
        .map(|r| r.provider_count_outcome.as_deref())
        .collect();
    assert_eq!(
        outcomes,
        [Some("rate_limited"), Some("paused"), Some("paused")]
    );
    assert!(
        rows.iter()
            .all(|r| r.status == Some(200) && r.provider_count_tokens.is_none())
    );
    assert_eq!(
        on(&mock, "/v1/messages/count_tokens").len(),
        1,
        "asked once, never retried"
    );
    let counted_run = on(&mock, "/v1/messages");
    assert_eq!(counted_run.len(), 3);

    // What went up is what goes up without counting, body and headers.
    let plain = PithProxy::start(&mock.url(), &[("PITH_TRIM_OUTPUTS", "1")]);
    mock.clear_received();
    send(&plain, &claude);
    let plain_run = on(&mock, "/v1/messages");
    let headers = |r: &pith_testkit::Recorded| {
        let mut h: Vec<(String, String)> = r
            .headers
            .iter()
            .filter(|(n, _)| n.as_str() != "host")
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or_default().to_owned()))
            .collect();
        h.sort();
        h
    };
    for sent in &counted_run {
        assert!(
            sent.body == plain_run[0].body,
            "the request went up as without counting"
        );
        assert_eq!(headers(sent), headers(&plain_run[0]));
    }
    assert!(
        on(&mock, "/v1/messages/count_tokens").is_empty(),
        "off: not asked"
    );

    let report: Value = serde_json::from_slice(&pith_stats(&pith, &["--json"]).stdout).unwrap();
    let c = &report["provider_counts"];
    assert_eq!(
        (
            c["sampled"].as_u64(),
            c["rate_limited"].as_u64(),
            c["paused"].as_u64(),
            c["counted"].as_u64()
        ),
        (Some(3), Some(1), Some(2), Some(0)),
        "{c}"
    );
    let text = String::from_utf8(pith_stats(&pith, &[]).stdout).unwrap();
    assert!(
        text.contains(
            "counted by the provider: 0 of 3 sampled requests counted; 1 rate limited by the \
             counter (429, not retried), 2 not asked while the counter's 429 wait lasted"
        ),
        "{text}"
    );
}

/// A share that is not one, or above 1, stops the proxy at start with what to set.
#[test]
fn a_share_out_of_range_is_refused_with_what_to_set() {
    for (value, said) in [
        ("1.5", "PITH_PROVIDER_COUNTS = 1.5 is out of range"),
        (
            "half",
            "PITH_PROVIDER_COUNTS=\"half\" is not a share of requests",
        ),
    ] {
        let err = proxy_refuses_with("PITH_PROVIDER_COUNTS", value);
        assert!(err.contains(said), "{value}: {err}");
    }
}

/// The row waits for a count that comes after the answer's end, and takes one that came
/// before it; at a share of a half, every other changed request is counted, from the first.
#[test]
fn a_late_count_is_waited_for_a_ready_one_taken_and_a_share_samples_every_other() {
    use pith_testkit::Reply;
    use pith_testkit::fixtures::{self, DEFAULT_DELTAS, DEFAULT_USAGE};
    let mock = MockUpstream::start().unwrap();
    mock.count_prompts(true);
    let pith = counting(&mock, "0.5");
    let claude = claude_code_request();
    let expected = prompt_tokens(&claude.0);
    // 1st (sampled): the count comes 400 ms after the answer has ended.
    mock.delay_counts(std::time::Duration::from_millis(400));
    send(&pith, &claude);
    // 2nd: not sampled.
    send(&pith, &claude);
    // 3rd (sampled): the answer's body comes 400 ms after its head, the count at once.
    mock.delay_counts(std::time::Duration::ZERO);
    let mut chunks = fixtures::split_at_events(
        &fixtures::anthropic::stream(DEFAULT_DELTAS, DEFAULT_USAGE),
        std::time::Duration::ZERO,
    );
    chunks[0].delay = std::time::Duration::from_millis(400);
    mock.push(Reply::stream(chunks));
    send(&pith, &claude);
    send(&pith, &claude);
    let rows = pith.wait_rows(4);
    let kept: Vec<(Option<&str>, Option<u64>)> = rows
        .iter()
        .map(|r| (r.provider_count_outcome.as_deref(), r.provider_count_tokens))
        .collect();
    let counted = (Some("counted"), Some(expected));
    assert_eq!(kept, [counted, (None, None), counted, (None, None)]);
    assert_eq!(on(&mock, "/v1/messages/count_tokens").len(), 2);
}

/// A counter that is not there (a 404: a gateway without it): that row says `failed`, and the
/// counter is not asked again for a while (the next says `paused`); the clients see nothing.
#[test]
fn a_counter_that_refuses_is_not_asked_again_for_a_while() {
    let mock = MockUpstream::start().unwrap();
    mock.refuse_counts(Some(404));
    let pith = counting(&mock, "1");
    let claude = claude_code_request();
    for n in 1..=2 {
        send(&pith, &claude);
        pith.wait_rows(n);
    }
    let rows = pith.wait_rows(2);
    let outcomes: Vec<Option<&str>> = rows
        .iter()
        .map(|r| r.provider_count_outcome.as_deref())
        .collect();
    assert_eq!(outcomes, [Some("failed"), Some("paused")]);
    assert_eq!(on(&mock, "/v1/messages/count_tokens").len(), 1);
}
