//! pith's own pages on the proxy's address, over a ledger of replayed real captures: the API
//! agrees with `pith stats --json`, `/metrics` parses with the Prometheus client's parser, the
//! page is served, none of it lands in the ledger, and a proxy with a token refuses them
//! without it.

use pith_testkit::MockUpstream;
use pith_testkit::fixtures::captures;
use serde_json::Value;

use crate::support::*;

pub(crate) fn get(pith: &PithProxy, path: &str, extra: &[(&str, &str)]) -> (u16, String, String) {
    let rt = runtime();
    let client = client();
    rt.block_on(async {
        let (status, headers, frames) = read_all(
            send(
                &client,
                request("GET", &format!("{}{path}", pith.url()), &headers(extra), ""),
            )
            .await,
        )
        .await;
        let kind = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        (
            status.as_u16(),
            kind,
            String::from_utf8_lossy(&concat(&frames)).into_owned(),
        )
    })
}

/// Every main-loop capture of the OpenCode mcp40 session and Claude Code's fix-calc, through
/// pith against the mock's default replies.
fn replay(pith: &PithProxy) -> usize {
    let rt = runtime();
    let client = client();
    let mut sent = 0;
    for c in captures().unwrap().iter().filter(|c| {
        c.scenario == "anthropic-agentsmd-mcp40" || c.client_folder.starts_with("claude-code")
    }) {
        rt.block_on(async {
            read_all(
                send(
                    &client,
                    request(
                        "POST",
                        &format!("{}{}", pith.url(), c.path),
                        &capture_headers(c),
                        c.body.clone(),
                    ),
                )
                .await,
            )
            .await
        });
        sent += 1;
    }
    sent
}

#[test]
fn the_api_agrees_with_pith_stats_and_metrics_parse_and_pages_are_not_traffic() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let sent = replay(&pith);
    let rows = pith.wait_rows(sent).len();

    let (status, kind, body) = get(&pith, "/pith/api/stats", &[]);
    assert_eq!((status, kind.as_str()), (200, "application/json"), "{body}");
    let api: Value = serde_json::from_str(&body).unwrap();
    let out = pith_stats(&pith, &["--json"]);
    assert!(out.status.success());
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(api, cli, "the API and pith stats --json disagree");
    assert_eq!(api["total"]["requests"], sent as u64);
    assert_eq!(api["cache_busts"]["by_pith"], 0);
    // Per session too, and the sessions add up to the total.
    let sessions = api["sessions"].as_array().unwrap();
    let by_pith: u64 = sessions
        .iter()
        .map(|s| s["cache_busts_by_pith"].as_u64().unwrap())
        .sum();
    let pairs: u64 = sessions
        .iter()
        .map(|s| s["cache_bust_pairs"].as_u64().unwrap())
        .sum();
    assert_eq!(
        (by_pith, pairs),
        (0, api["cache_busts"]["pairs"].as_u64().unwrap())
    );
    assert!(pairs > 0);

    // The chart's timeline holds the same tokens and cost as the report.
    let (status, _, body) = get(&pith, "/pith/api/timeline", &[]);
    assert_eq!(status, 200, "{body}");
    let timeline: Value = serde_json::from_str(&body).unwrap();
    let buckets = timeline["buckets"].as_array().unwrap();
    for kind in [
        "input_tokens",
        "cache_write_tokens",
        "cache_read_tokens",
        "output_tokens",
        "requests",
    ] {
        let sum: u64 = buckets.iter().map(|b| b[kind].as_u64().unwrap()).sum();
        assert_eq!(sum, api["total"][kind].as_u64().unwrap(), "{kind}");
    }
    let cost: f64 = buckets.iter().filter_map(|b| b["cost_usd"].as_f64()).sum();
    let total_cost = api["total"]["cost_usd"].as_f64().unwrap();
    assert!((cost - total_cost).abs() < 1e-9, "{cost} {total_cost}");
    let (status, _, body) = get(&pith, "/pith/api/timeline?bucket=soon", &[]);
    assert_eq!(status, 400);
    assert!(body.contains("bucket=soon"), "{body}");

    let (status, _, body) = get(&pith, "/pith/api/requests?limit=3", &[]);
    assert_eq!(status, 200);
    let recent: Value = serde_json::from_str(&body).unwrap();
    let recent = recent["requests"].as_array().unwrap();
    assert_eq!(recent.len(), 3);
    assert!(
        recent[0]["id"].as_i64() > recent[1]["id"].as_i64(),
        "newest first"
    );
    let after = recent[1]["id"].as_i64().unwrap();
    let (_, _, body) = get(&pith, &format!("/pith/api/requests?after={after}"), &[]);
    let newer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(newer["requests"].as_array().unwrap().len(), 1, "{newer}");

    let (status, kind, metrics) = get(&pith, "/metrics", &[]);
    assert_eq!(status, 200);
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    let parsed = std::process::Command::new(python())
        .arg(python_script("parse_metrics.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(metrics.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(
        parsed.status.success(),
        "the Prometheus parser refused /metrics:\n{}\n{metrics}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    let samples: Value = serde_json::from_slice(&parsed.stdout).unwrap();
    assert_eq!(samples["pith_requests_total{}"], sent as f64);
    assert_eq!(
        samples["pith_tokens_total{kind=output}"],
        api["total"]["output_tokens"].as_f64().unwrap()
    );
    assert_eq!(samples["pith_cache_busts_total{cause=pith}"], 0.0);
    assert_eq!(
        samples["pith_request_duration_seconds_count{}"],
        sent as f64
    );
    assert_eq!(
        samples["pith_request_duration_seconds_bucket{le=+Inf}"],
        sent as f64
    );
    assert!(samples["pith_time_to_first_byte_seconds_count{}"].as_f64() > Some(0.0));

    let (status, kind, page) = get(&pith, "/", &[]);
    assert_eq!((status, kind.as_str()), (200, "text/html; charset=utf-8"));
    assert!(page.contains("<title>pith</title>") && page.contains("/pith/api/stats"));
    // Where a person looks for it beside its API, the same page.
    for path in ["/pith/", "/pith"] {
        let (status, kind, body) = get(&pith, path, &[]);
        assert_eq!(
            (status, kind.as_str()),
            (200, "text/html; charset=utf-8"),
            "{path}"
        );
        assert_eq!(body, page, "{path}");
    }
    let (status, _, body) = get(&pith, "/pith/nothing", &[]);
    assert_eq!(status, 404);
    assert!(body.contains("/pith/api/stats"), "{body}");

    // None of these reads is a ledger row: once the spool is written, the rows are as before.
    let flushed: serde_json::Value = serde_json::from_str(&pith.flush()).unwrap();
    assert_eq!(flushed, serde_json::json!({"flushed": true, "waiting": 0}));
    let after_reads = pith.wait_rows(rows).len();
    assert_eq!(after_reads, rows);
    assert_eq!(
        mock.request_count(),
        sent,
        "pith's pages never went upstream"
    );
}

#[test]
fn with_a_token_the_pages_need_it_too() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_PROXY_TOKEN", "s3cret")]);
    let (status, _, _) = get(&pith, "/", &[]);
    assert_eq!(status, 401);
    let (status, _, _) = get(&pith, "/pith/api/stats", &[]);
    assert_eq!(status, 401);
    let (status, _, body) = get(&pith, "/pith/health", &[("x-pith-token", "s3cret")]);
    assert_eq!(status, 200, "{body}");
    let health: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["pith"], env!("CARGO_PKG_VERSION"));
    assert_eq!(mock.request_count(), 0);
}

/// Headless Chromium on `url`, every network switch off, with `args`: (stdout, stderr).
pub(crate) fn headless(url: &str, args: &[&str]) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(crate::browser::chromium())
        .args(crate::browser::HEADLESS)
        .args([
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1280,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A proxy whose ledger holds the replayed captures, with `pith stats --json` over it (the
/// mock is returned to keep it serving).
fn replayed_with_stats() -> (MockUpstream, PithProxy, usize, Value) {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let sent = replay(&pith);
    pith.wait_rows(sent);
    let out = pith_stats(&pith, &["--json"]);
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    (mock, pith, sent, stats)
}

#[test]
fn a_real_browser_shows_the_ledgers_numbers_with_no_script_error() {
    let (_mock, pith, sent, stats) = replayed_with_stats();

    // `?poll`: the page polls instead of holding an event stream open, which would keep the
    // headless browser's virtual clock from running out (the stream has its own test).
    let url = format!("{}/?poll", pith.url());
    let (dom, log) = headless(&url, &["--virtual-time-budget=8000", "--dump-dom"]);
    assert!(!log.contains("Uncaught"), "a script error:\n{log}");
    assert!(
        dom.contains(r#"<p id="error" role="status"></p>"#),
        "the page reported an error:\n{dom}"
    );
    // The cards and the session table carry the ledger's numbers.
    assert!(
        dom.contains(&format!("<b>{}</b>requests", stats["total"]["requests"])),
        "{dom}"
    );
    for session in stats["sessions"].as_array().unwrap() {
        // A session is a link to its page; requests without one are a row of their own.
        let shown = match session["session"].as_str() {
            Some(id) => format!(">{id}</a></td>"),
            None => "<td>(none)</td>".to_owned(),
        };
        assert!(dom.contains(&shown), "session {shown} missing:\n{dom}");
    }
    // Each client and each model in its table, with its requests; they add up to the total,
    // and so do their savings.
    for (list, key) in [("clients", "client"), ("models", "model")] {
        let mut requests = 0;
        let mut saved = 0.0;
        for x in stats[list].as_array().unwrap() {
            let name = x[key].as_str().unwrap();
            assert!(
                dom.contains(&format!("<td>{name}</td><td>{}</td>", x["requests"])),
                "{list}: {name} missing:\n{dom}"
            );
            requests += x["requests"].as_u64().unwrap();
            saved += x["estimated_saved_usd"].as_f64().unwrap_or(0.0);
        }
        assert_eq!(requests, stats["total"]["requests"], "{list}");
        let total = stats["total"]["estimated_saved_usd"].as_f64().unwrap();
        assert!(
            (saved - total).abs() < 1e-9,
            "{list}: {saved} against {total}"
        );
    }
    let rows = dom.matches("<tr data-id=").count();
    assert_eq!(rows, sent, "the live table shows every request");
    // The chart's bars hold every request once.
    let charted: u64 = dom
        .split("data-requests=\"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].parse::<u64>().unwrap())
        .sum();
    assert_eq!(charted, sent as u64, "the chart's bars");
    // The savings card: the report's estimate, marked as one.
    let saved = stats["total"]["estimated_saved_usd"].as_f64().unwrap();
    assert!(saved > 0.0, "{}", stats["total"]);
    assert!(
        dom.contains(&format!("<b>≈${saved:.4}</b>saved by pith (estimate)")),
        "{dom}"
    );
    assert!(dom.contains(stats["savings_method"].as_str().unwrap()));
    words_not_codes(&dom, &stats);

    // A new request reaches the live table.
    replay(&pith);
    pith.wait_rows(2 * sent);
    let (dom, _) = headless(&url, &["--virtual-time-budget=8000", "--dump-dom"]);
    assert_eq!(dom.matches("<tr data-id=").count(), 2 * sent);
}

#[test]
fn the_page_fits_a_phone_and_a_laptop_and_axe_finds_nothing_serious() {
    let (_mock, pith, sent, _stats) = replayed_with_stats();
    let url = format!("{}/?poll", pith.url());
    for size in [(390, 844), (1280, 800)] {
        let mut page = crate::browser::Page::open(&url, size);
        page.until(
            &format!("document.querySelectorAll('#requests tbody tr').length === {sent}"),
            10_000,
        );
        fits_and_axe_finds_nothing_serious(&mut page, size, "dashboard");
        // At a laptop's width the sessions table, savings and cache busts included, is seen
        // whole without scrolling its box (issue 49: they began past 1,300 px).
        if size.0 >= 1280 {
            let widths = page.eval(
                "(t => [t.scrollWidth, t.parentElement.clientWidth, \
                 t.querySelector('th:last-child').getBoundingClientRect().right])\
                 (document.getElementById('sessions'))",
            );
            let (table, shown) = (widths[0].as_f64().unwrap(), widths[1].as_f64().unwrap());
            assert!(
                table <= shown,
                "the sessions table is {widths} wide (table, box, last column's edge)"
            );
            assert!(widths[2].as_f64().unwrap() <= f64::from(size.0), "{widths}");
        }
    }
}

/// On a session's page, Enter on request `request`'s button, from the keyboard: its record
/// opens.
pub(crate) fn open_record(page: &mut crate::browser::Page, request: i64) {
    page.eval(&format!(
        "document.querySelector('#session-requests tr[data-id=\"{request}\"] button').focus()"
    ));
    page.press("Enter");
    page.until(
        &format!("document.getElementById('record-{request}') !== null"),
        10_000,
    );
}

/// `text` percent-encoded for a URL's query or fragment (its unreserved bytes as they are).
pub(crate) fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// At the page's viewport `size`: the page never scrolls sideways and a table wider than the
/// page scrolls inside its own box; the whole page, light and dark, kept as the test's
/// artifacts (`{name}-{width}x{height}-{scheme}.png`), and axe-core finds no serious or
/// critical violation in either (contrast is checked against the colours shown).
pub(crate) fn fits_and_axe_finds_nothing_serious(
    page: &mut crate::browser::Page,
    size: (u32, u32),
    name: &str,
) {
    let widths =
        page.eval("[document.documentElement.scrollWidth, document.documentElement.clientWidth]");
    assert_eq!(widths[1].as_u64(), Some(u64::from(size.0)), "the viewport");
    assert!(
        widths[0].as_u64() <= widths[1].as_u64(),
        "{name} {size:?}: the page is {widths} wide"
    );
    let cut = page.eval(
        "[...document.querySelectorAll('table')].filter(t => t.offsetParent !== null && \
         t.scrollWidth > t.parentElement.clientWidth && \
         getComputedStyle(t.parentElement).overflowX !== 'auto').map(t => t.id)",
    );
    assert_eq!(
        cut,
        serde_json::json!([]),
        "{name} {size:?}: tables cut off"
    );
    // No chart text shown smaller than 9 px: the chart's own labels scale with it, and below
    // 700 px the line beneath it says the same.
    let tiny = page.eval(
        "[...document.querySelectorAll('svg text')].filter(t => { const b = \
         t.getBoundingClientRect(); return b.width > 0 && b.height < 9; }).map(t => t.textContent)",
    );
    assert_eq!(
        tiny,
        serde_json::json!([]),
        "{name} {size:?}: text too small to read"
    );
    for dark in [false, true] {
        page.dark(dark);
        let scheme = if dark { "dark" } else { "light" };
        page.screenshot(
            &std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("{name}-{}x{}-{scheme}.png", size.0, size.1)),
        );
        assert_eq!(
            page.axe_serious(),
            Vec::<String>::new(),
            "{name} {size:?} {scheme}"
        );
    }
}

/// The drill-down, from the keyboard: Enter on a session in the sessions table shows that
/// session's requests in arrival order with their cache and stages in words; Enter on a
/// request's button shows its record and the text its turn added, markup in it shown as text.
/// At a phone's width and a laptop's, nothing overflows and axe-core finds nothing serious,
/// light and dark; screenshots kept.
#[test]
fn the_session_page_drills_down_from_the_keyboard_to_a_requests_record() {
    let (_mock, pith, sent, stats) = replayed_with_stats();
    let session = stats["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["client"] == "claude-code" && s["session"].is_string())
        .expect("the replay has a Claude Code session")
        .clone();
    let id = session["session"].as_str().unwrap();
    let requests = session["requests"].as_u64().unwrap();
    // The API: the session's requests, oldest first; one of them added text with markup
    // (Claude Code's `<system-reminder>`) to the history.
    let encoded = url_encoded(id);
    let (status, _, body) = get(&pith, &format!("/pith/api/session?id={encoded}"), &[]);
    assert_eq!(status, 200, "{body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    let rows = page["requests"].as_array().unwrap();
    assert_eq!(rows.len() as u64, requests);
    let arrivals: Vec<i64> = rows
        .iter()
        .map(|r| r["arrival_us"].as_i64().unwrap())
        .collect();
    assert!(arrivals.is_sorted(), "arrival order: {arrivals:?}");
    let marked = rows
        .iter()
        .position(|r| {
            let (_, _, body) = get(&pith, &format!("/pith/api/request?id={}", r["id"]), &[]);
            let x: Value = serde_json::from_str(&body).unwrap();
            x["turn"].as_array().is_some_and(|t| {
                t.iter()
                    .any(|m| m["text"].as_str().unwrap().contains("<system-reminder>"))
            })
        })
        .expect("a request whose turn text holds markup");
    // Bad questions get answers that say what to ask instead.
    for (path, want) in [
        ("/pith/api/session", 400),
        ("/pith/api/session?id=no-such-session", 404),
        ("/pith/api/session?id=x&limit=0", 400),
        ("/pith/api/request?id=abc", 400),
        ("/pith/api/request?id=999999", 404),
    ] {
        let (status, _, body) = get(&pith, path, &[]);
        assert_eq!(status, want, "{path}: {body}");
        assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_string());
    }

    let url = format!("{}/?poll", pith.url());
    for size in [(390, 844), (1280, 800)] {
        let mut page = crate::browser::Page::open(&url, size);
        page.until(
            &format!("document.querySelectorAll('#requests tbody tr').length === {sent}"),
            10_000,
        );
        // Enter on the session's link, from the keyboard.
        page.eval(&format!(
            "document.querySelector('#sessions a[href=\"#session=' + encodeURIComponent({}) + '\"]').focus()",
            Value::from(id)
        ));
        // A live update rebuilds the table: the link keeps the keyboard's focus.
        let href = format!("#session={id}");
        assert_eq!(
            page.eval("refresh().then(() => document.activeElement.getAttribute('href'))"),
            Value::from(href.as_str())
        );
        page.press("Enter");
        page.until(
            &format!(
                "!document.getElementById('session-view').hidden && \
                 document.getElementById('overview').hidden && \
                 document.querySelectorAll('#session-requests tbody tr').length === {requests}"
            ),
            10_000,
        );
        assert_eq!(
            page.eval("document.activeElement.id"),
            "session-title",
            "the focus moves to the session's heading"
        );
        // Each request says how the cache went and what pith did, in words.
        let cells = page.eval(
            "[...document.querySelectorAll('#session-requests tbody tr')].map(r => \
             [r.cells[9].textContent, r.cells[10].textContent])",
        );
        let mut named = 0;
        for pair in cells.as_array().unwrap() {
            let [cache, did] = [&pair[0], &pair[1]].map(|v| v.as_str().unwrap().to_owned());
            assert!(
                cache.starts_with("no bust")
                    || cache == "not compared"
                    || cache.starts_with("cache bust by "),
                "cache: {cache}"
            );
            // A bust names the part of the prompt that changed, not a segment number.
            if cache.starts_with("cache bust by ") {
                assert!(!cache.contains("segment"), "cache: {cache}");
                named += 1;
            }
            assert!(!did.contains('_') && !did.contains('='), "codes: {did}");
        }
        // Claude Code's own prompts bust the cache once in this replay.
        assert_eq!(named, 1, "{cells}");
        // Enter on that request's button: its record and its turn's text, markup as text.
        let request = rows[marked]["id"].as_i64().unwrap();
        open_record(&mut page, request);
        let record = page.eval(&format!(
            "(() => {{ const box = document.getElementById('record-{request}'); return {{ \
             text: box.textContent, elements: box.querySelectorAll('system-reminder').length, \
             expanded: document.querySelector('[aria-controls=\"record-{request}\"]').getAttribute('aria-expanded') }}; }})()"
        ));
        assert!(
            record["text"]
                .as_str()
                .unwrap()
                .contains("<system-reminder>"),
            "{record}"
        );
        assert_eq!(record["elements"], 0, "markup in the turn became elements");
        assert_eq!(record["expanded"], "true");
        fits_and_axe_finds_nothing_serious(&mut page, size, "session");
        // Back to every session.
        page.eval("location.hash = ''");
        page.until("!document.getElementById('overview').hidden", 10_000);
    }
}

/// The text a person reads in `dom` (Chromium's dump): no script, no style, no tag or
/// attribute (a tooltip's code is for the curious).
fn visible_text(dom: &str) -> String {
    let mut kept = dom.to_owned();
    for (open, close) in [("<script", "</script>"), ("<style", "</style>")] {
        while let Some(at) = kept.find(open) {
            let end = kept[at..]
                .find(close)
                .map_or(kept.len(), |i| at + i + close.len());
            kept.replace_range(at..end, "");
        }
    }
    let mut out = String::new();
    let mut in_tag = false;
    for c in kept.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&amp;", "&")
}

/// The page says in words what the report gives as codes: no stage, reason, fact or rate code
/// with an underscore, and no `name=value` fact, is in the text a person reads; the words for
/// each reason the report holds are.
fn words_not_codes(dom: &str, stats: &Value) {
    let text = visible_text(dom);
    let words = &stats["words"];
    let mut codes: Vec<String> = Vec::new();
    let mut said: Vec<String> = Vec::new();
    for (stage, t) in stats["transforms"].as_object().unwrap() {
        codes.push(stage.clone());
        for (reason, n) in t["unchanged"].as_object().unwrap() {
            codes.push(reason.clone());
            let phrase = words["reasons"][stage][reason]
                .as_str()
                .or(words["reasons"]["*"][reason].as_str())
                .unwrap_or_else(|| panic!("no words for {stage} {reason}"));
            let requests = if n.as_u64() == Some(1) {
                "request"
            } else {
                "requests"
            };
            said.push(format!("{n} {requests}: {phrase}"));
        }
        for (fact, n) in t["facts"].as_object().unwrap() {
            // Every fact has words (a fact without them would show as `name=n`).
            let has_words = words["facts"][stage]
                .as_array()
                .is_some_and(|f| f.iter().any(|pair| pair[0] == fact.as_str()));
            assert!(has_words, "no words for {stage}'s fact {fact}");
            codes.push(format!("{fact}={n}"));
        }
        // What the model came back for, in the stage's words.
        if let (Some(back), Some(spec)) = (t.get("came_back"), words["came_back"].get(stage)) {
            let phrase = |key: &str, n: &Value| {
                let n = n.as_u64().unwrap();
                spec[key]
                    .as_str()
                    .unwrap()
                    .replace("{n}", &n.to_string())
                    .replace("{s}", if n == 1 { "" } else { "s" })
            };
            said.push(format!(
                "{}, {}",
                phrase("times", &back["times"]),
                phrase("of_words", &back["of"])
            ));
        }
        for band in t["estimated_saved_tokens"]
            .as_object()
            .into_iter()
            .flat_map(|b| b.keys())
        {
            codes.push(band.clone());
        }
    }
    codes.extend(["cache_discount_usd", "bust_charged_usd"].map(String::from));
    for code in codes.iter().filter(|c| c.contains('_') || c.contains('=')) {
        assert!(
            !text.contains(code.as_str()),
            "the page shows the code {code}:\n{text}"
        );
    }
    assert!(!said.is_empty(), "the replay leaves some request unchanged");
    assert!(
        stats["transforms"]["defer"]["came_back"].is_object(),
        "the replay defers: {}",
        stats["transforms"]
    );
    for sentence in &said {
        assert!(
            text.contains(sentence.as_str()),
            "not said: {sentence}\n{text}"
        );
    }
}

/// A plain HTTP/1.1 client's `GET /pith/api/events`: the status line it got, and the rest of
/// the answer to read as it comes.
fn open_events(pith: &PithProxy) -> (String, std::io::BufReader<std::net::TcpStream>) {
    use std::io::{BufRead, Write};
    let mut stream = std::net::TcpStream::connect(pith.addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "GET /pith/api/events HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut reader = std::io::BufReader::new(stream);
    let mut head = String::new();
    reader.read_line(&mut head).unwrap();
    (head, reader)
}

#[test]
fn the_live_stream_sends_each_new_request_as_an_event() {
    use std::io::BufRead;
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let sent = replay(&pith);
    pith.wait_rows(sent);
    // A plain HTTP/1.1 client reading the stream as it comes.
    let (head, mut reader) = open_events(&pith);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut headers = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        headers.push_str(&line.to_ascii_lowercase());
    }
    assert!(
        headers.contains("content-type: text/event-stream"),
        "{headers}"
    );
    // From now on: one more request through pith becomes one event.
    let c = captures()
        .unwrap()
        .into_iter()
        .find(|c| c.client_folder.starts_with("claude-code"))
        .unwrap();
    let rt = runtime();
    let client = client();
    rt.block_on(async {
        read_all(
            send(
                &client,
                request(
                    "POST",
                    &format!("{}{}", pith.url(), c.path),
                    &capture_headers(&c),
                    c.body.clone(),
                ),
            )
            .await,
        )
        .await
    });
    let mut event = String::new();
    while !event.contains("event: request") {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("the stream ended: {event}");
        }
        event.push_str(&line);
    }
    let mut data = String::new();
    reader.read_line(&mut data).unwrap();
    // A chunked body: the event's data line may follow a chunk-size line.
    while !data.starts_with("data: ") {
        data.clear();
        reader.read_line(&mut data).unwrap();
    }
    let row: Value = serde_json::from_str(data.trim_start_matches("data: ").trim()).unwrap();
    assert_eq!(row["client"], "claude-code");
    assert_eq!(
        row["id"].as_i64(),
        Some(sent as i64 + 1),
        "only the new request"
    );
}

/// An open dashboard tab held every SIGTERM for the whole grace period (5 s), the proxy
/// logging "grace period over; closing remaining connections": a stopping proxy ends its live
/// streams (the browser's `EventSource` reconnects to the next proxy).
#[test]
fn a_stopping_proxy_ends_its_live_streams_at_once() {
    use std::io::Read;
    let mock = MockUpstream::start().unwrap();
    let mut pith = PithProxy::start(&mock.url(), &[]);
    let (head, mut reader) = open_events(&pith);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let started = std::time::Instant::now();
    let status = pith.stop();
    let took = started.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took < std::time::Duration::from_secs(3),
        "stopped after {took:?} (the grace period is 5 s)"
    );
    // The stream ended (not cut): what remains reads to its end.
    let mut rest = String::new();
    reader.read_to_string(&mut rest).unwrap();
    assert!(
        !pith.stderr().contains("grace period over"),
        "{}",
        pith.stderr()
    );
}

/// `pith statusline` with `payload` on stdin.
fn statusline(pith: &PithProxy, payload: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(pith_bin())
        .arg("statusline")
        .env("PITH_HOME", pith.home.path())
        .env_remove("PITH_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn the_status_line_sums_the_session_from_the_ledger() {
    let (_mock, pith, _, stats) = replayed_with_stats();
    let session = stats["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["client"] == "opencode")
        .unwrap();
    let id = session["session"].as_str().unwrap();
    // Claude Code's payload carries more; the session id is what pith reads.
    let payload = serde_json::json!({"session_id": id, "model": {"display_name": "Opus"},
        "workspace": {"current_dir": "/p"}})
    .to_string();
    let (ok, line) = statusline(&pith, &payload);
    assert!(ok);
    assert!(
        line.starts_with(&format!("pith · {} req · ", session["requests"])),
        "{line}"
    );
    assert!(line.contains("% cached"), "{line}");
    // The savings are the session's, priced as `pith stats` prices them.
    let saved = session["estimated_saved_usd"].as_f64().unwrap();
    assert!(saved > 0.0, "{session}");
    assert!(
        line.ends_with(&format!(" saved (~${saved:.2})\n")),
        "{line} {saved}"
    );
    assert_eq!(line.lines().count(), 1);
    // Nothing usable: still one line, still success.
    for bad in ["", "not json", r#"{"session_id": 5}"#] {
        let (ok, line) = statusline(&pith, bad);
        assert!(ok, "{bad:?}");
        assert_eq!(line, "pith\n", "{bad:?}");
    }
    let (_, line) = statusline(&pith, r#"{"session_id": "nobody"}"#);
    assert_eq!(line, "pith · no requests yet in this session\n");
    // A config file it cannot read does not make the status line an error: defaults apply.
    std::fs::write(pith.home.path().join("config.toml"), "[proxy\nlisten = 5\n").unwrap();
    let (ok, line) = statusline(&pith, &payload);
    assert!(ok, "{line}");
    assert!(
        line.starts_with(&format!("pith · {} req · ", session["requests"])),
        "{line}"
    );
}

/// Live views are capped: past `MAX_VIEWERS` (16) a new one is a 503 that says why, while the
/// proxy's own pages and its traffic go on; a view that closes frees its place.
#[test]
fn live_views_are_capped_and_a_closed_one_frees_its_place() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let sent = replay(&pith);
    pith.wait_rows(sent);
    let open = open_events;
    let mut views = Vec::new();
    for _ in 0..16 {
        let (head, reader) = open(&pith);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        views.push(reader);
    }
    let (head, mut refused) = open(&pith);
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut refused, &mut rest);
    assert!(
        rest.contains("live views of this proxy are open already"),
        "{rest}"
    );
    let rt = runtime();
    let health = rt.block_on(async {
        let resp = send(
            &client(),
            request("GET", &format!("{}/pith/health", pith.url()), &[], ""),
        )
        .await;
        read_all(resp).await.0
    });
    assert_eq!(health, 200);
    // One view closes: its place is free within a poll of its thread.
    drop(views.pop());
    let reader =
        pith_testkit::wait::wait_for("a place freed", std::time::Duration::from_secs(10), || {
            let (head, reader) = open(&pith);
            if head.starts_with("HTTP/1.1 200") {
                Ok(reader)
            } else {
                Err(head)
            }
        });
    views.push(reader);
}

/// pith's own paths answer GET only and, without an access token, only to loopback host names
/// (a page on another site that resolves its name to 127.0.0.1 sends that name): any other
/// method or name is refused by pith, never forwarded, never recorded. Every answer carries
/// `nosniff` and no-framing headers; the page its script-hash policy.
#[test]
fn own_paths_answer_only_get_and_only_to_loopback_names() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let rt = runtime();
    let c = client();
    let call = |method: &str, path: &str, host: Option<&str>| {
        let headers: Vec<(String, String)> = host
            .map(|h| vec![("host".to_owned(), h.to_owned())])
            .unwrap_or_default();
        rt.block_on(async {
            let resp = send(
                &c,
                request(method, &format!("{}{path}", pith.url()), &headers, ""),
            )
            .await;
            read_all(resp).await
        })
    };
    for method in ["POST", "HEAD", "OPTIONS", "PUT", "DELETE"] {
        for path in ["/pith/api/stats", "/", "/metrics", "/pith/health"] {
            let (status, headers, _) = call(method, path, None);
            assert_eq!(status, 405, "{method} {path}");
            assert_eq!(headers["allow"], "GET", "{method} {path}");
        }
    }
    let (status, _, body) = call("GET", "/pith/api/stats", Some("attacker.example"));
    assert_eq!(status, 403);
    assert!(
        String::from_utf8_lossy(&concat(&body)).contains("loopback host names only"),
        "{:?}",
        concat(&body)
    );
    let (status, _, _) = call(
        "GET",
        "/",
        Some(&format!("attacker.example:{}", pith.addr.port())),
    );
    assert_eq!(status, 403);
    let (status, headers, _) = call("GET", "/pith/health", Some("localhost"));
    assert_eq!(status, 200);
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["x-frame-options"], "DENY");
    let (status, headers, _) = call("GET", "/", None);
    assert_eq!(status, 200);
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'sha256-") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(mock.request_count(), 0, "nothing reached the provider");
    assert!(crate::support::rows(&pith.ledger_path()).is_empty());
}
