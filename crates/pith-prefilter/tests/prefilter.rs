//! The local prefilter against a mock Ollama: every failure mode shows the full unranked list
//! with nothing withheld; success shows the ranked prefix, the disclosure and the withheld count.

use std::fs;
use std::path::Path;
use std::time::Duration;

use pith_prefilter::{
    HttpError, OllamaRanker, PrefilterConfig, RankError, reset_availability_cache,
};
use pith_search::{Ranker, Ranking, SearchReport, SearchRequest, search_workspace};
use pith_testkit::ollama::{ChatReply, MockOllama, closed_port_url};

/// 9 files x 5 matching lines = 45 matches: above the default threshold (40), within one page.
const MATCHES: usize = 45;

#[expect(
    clippy::unwrap_used,
    reason = "test setup: a failure should fail the test"
)]
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in 0..9 {
        let body: String = (0..5)
            .map(|line| format!("fn handler_{file}_{line}() {{ dispatch(); }}\n"))
            .collect();
        let path = dir.path().join(format!("src/mod_{file}.rs"));
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, body).unwrap();
    }
    dir
}

fn config(url: String, model: &str) -> PrefilterConfig {
    PrefilterConfig {
        enabled: true,
        url,
        model: model.to_owned(),
        timeout: Duration::from_millis(500),
        ..PrefilterConfig::default()
    }
}

#[expect(clippy::unwrap_used, reason = "test helper")]
fn run(root: &Path, config: &PrefilterConfig, req: &SearchRequest) -> SearchReport {
    let ranker = OllamaRanker::from_config(config).unwrap();
    search_workspace(root, req, Some(&ranker), config.threshold).unwrap()
}

#[expect(clippy::unwrap_used, reason = "test helper")]
fn unranked(root: &Path) -> SearchReport {
    search_workspace(root, &SearchRequest::new("dispatch"), None, 40).unwrap()
}

/// The report must be exactly the plain one: every match, path order, nothing withheld.
fn assert_failed_open(report: &SearchReport, root: &Path, model: &str) {
    let plain = unranked(root);
    assert_eq!(plain.matches.len(), MATCHES);
    assert_eq!(plain.withheld, 0);
    assert_eq!(
        report.ranking,
        Ranking::FailedOpen {
            by: format!("{model} (Ollama)")
        }
    );
    assert_eq!(report.matches, plain.matches);
    assert_eq!(report.withheld, 0);
    assert_eq!(report.render(), plain.render());
    assert!(!report.render().contains("ranked"));
}

#[test]
fn success_shows_the_ranked_prefix_disclosure_and_withheld_count() {
    let dir = tree();
    let model = "ranker-ok:1b";
    let mock = MockOllama::start(&[model], ChatReply::reversed(MATCHES)).unwrap();
    let report = run(
        dir.path(),
        &config(mock.url(), model),
        &SearchRequest::new("dispatch"),
    );

    assert_eq!(
        report.ranking,
        Ranking::Ranked {
            by: "ranker-ok:1b (Ollama)".into()
        }
    );
    assert_eq!(report.matches.len(), 40);
    assert_eq!(report.withheld, 5);
    assert_eq!(report.total_matches, MATCHES as u64);
    let plain = unranked(dir.path());
    let expected: Vec<_> = plain.matches.iter().rev().take(40).cloned().collect();
    assert_eq!(report.matches, expected);
    let text = report.render();
    let first_lines: Vec<&str> = text.lines().take(2).collect();
    assert_eq!(
        first_lines,
        [
            "pith: ranked by local model ranker-ok:1b (Ollama): the 40 most relevant of 45 \
             matches in 9 files, most relevant first; 5 withheld. Pass all=true to list every \
             match in path order.",
            "src/mod_8.rs:5: fn handler_8_4() { dispatch(); }",
        ]
    );
    assert_eq!(text.lines().count(), 41);

    let chats = mock.chat_requests();
    assert_eq!(chats.len(), 1);
    let body = &chats[0].body;
    assert_eq!(body["model"], model);
    assert_eq!(body["stream"], false);
    let num_ctx = body["options"]["num_ctx"].as_u64().unwrap();
    assert!(num_ctx >= 2048, "num_ctx {num_ctx}");
    let user = body["messages"][1]["content"].as_str().unwrap();
    assert!(user.starts_with("Query: dispatch\n"), "{user}");
    assert!(user.contains("\n0. src/mod_0.rs:1: fn handler_0_0() { dispatch(); }\n"));
    assert!(user.contains("\n44. src/mod_8.rs:5: fn handler_8_4() { dispatch(); }\n"));
    assert_eq!(body["format"]["required"][0], "order");
}

#[test]
fn intent_is_the_ranking_query_when_given() {
    let dir = tree();
    let model = "ranker-intent:1b";
    let mock = MockOllama::start(&[model], ChatReply::reversed(MATCHES)).unwrap();
    let req = SearchRequest {
        intent: Some("where requests are routed".into()),
        ..SearchRequest::new("dispatch")
    };
    run(dir.path(), &config(mock.url(), model), &req);
    let user = mock.chat_requests()[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(user.starts_with("Query: where requests are routed\n"));
}

#[test]
fn threshold_all_and_paging_bypass_the_model() {
    let dir = tree();
    let model = "ranker-threshold:1b";
    let mock = MockOllama::start(&[model], ChatReply::reversed(MATCHES)).unwrap();
    let at_threshold = PrefilterConfig {
        threshold: MATCHES,
        ..config(mock.url(), model)
    };
    let report = run(dir.path(), &at_threshold, &SearchRequest::new("dispatch"));
    assert_eq!(report.ranking, Ranking::NotApplied);
    assert_eq!(report.matches, unranked(dir.path()).matches);

    let all = SearchRequest {
        all: true,
        ..SearchRequest::new("dispatch")
    };
    let report = run(dir.path(), &config(mock.url(), model), &all);
    assert_eq!(report.ranking, Ranking::NotApplied);
    assert_eq!(report.withheld, 0);
    assert!(mock.chat_requests().is_empty());

    // A lower threshold ranks, and shows at most that many.
    let low = PrefilterConfig {
        threshold: 10,
        ..config(mock.url(), model)
    };
    let report = run(dir.path(), &low, &SearchRequest::new("dispatch"));
    assert!(matches!(report.ranking, Ranking::Ranked { .. }));
    assert_eq!(report.matches.len(), 10);
    assert_eq!(report.withheld, 35);
    assert_eq!(mock.chat_requests().len(), 1);
}

#[test]
fn no_server_fails_open() {
    let dir = tree();
    let model = "ranker-refused:1b";
    let cfg = config(closed_port_url().unwrap(), model);
    let report = run(dir.path(), &cfg, &SearchRequest::new("dispatch"));
    assert_failed_open(&report, dir.path(), model);
}

#[test]
fn model_not_pulled_fails_open_without_asking() {
    let dir = tree();
    let model = "ranker-missing:1b";
    let mock = MockOllama::start(&["some-other-model:7b"], ChatReply::reversed(MATCHES)).unwrap();
    let report = run(
        dir.path(),
        &config(mock.url(), model),
        &SearchRequest::new("dispatch"),
    );
    assert_failed_open(&report, dir.path(), model);
    assert!(mock.chat_requests().is_empty());
    assert_eq!(mock.requests().len(), 1, "only the /api/tags probe");
}

#[test]
fn timeout_fails_open() {
    let dir = tree();
    let model = "ranker-slow:1b";
    let mock =
        MockOllama::start(&[model], ChatReply::slow(MATCHES, Duration::from_secs(10))).unwrap();
    let cfg = PrefilterConfig {
        timeout: Duration::from_millis(200),
        ..config(mock.url(), model)
    };
    let report = run(dir.path(), &cfg, &SearchRequest::new("dispatch"));
    assert_failed_open(&report, dir.path(), model);
    assert_eq!(mock.chat_requests().len(), 1);
}

/// Each bad reply from a server that has the model: nothing ranked, nothing withheld.
#[test]
fn every_bad_reply_fails_open() {
    let dir = tree();
    let replies = [
        ("prose", ChatReply::prose(MATCHES)),
        ("duplicate", ChatReply::duplicate_index(MATCHES)),
        ("missing", ChatReply::missing_index(MATCHES)),
        ("invented", ChatReply::invented_index(MATCHES)),
        ("negative", ChatReply::Order((-1..44).collect())),
        ("not json", ChatReply::Content("the second one".into())),
        ("empty", ChatReply::Content(String::new())),
        ("http 500", ChatReply::server_error()),
        ("http 503", ChatReply::Error(503, "server busy".into())),
    ];
    for (label, reply) in replies {
        let model = format!("ranker-bad-{}:1b", label.replace(' ', "-"));
        let mock = MockOllama::start(&[&model], reply).unwrap();
        let report = run(
            dir.path(),
            &config(mock.url(), &model),
            &SearchRequest::new("dispatch"),
        );
        assert_failed_open(&report, dir.path(), &model);
        assert_eq!(mock.chat_requests().len(), 1, "{label}");
    }
}

#[test]
fn failure_reasons_are_specific() {
    let model = "ranker-reasons:1b";
    let mock = MockOllama::start(&[model], ChatReply::duplicate_index(3)).unwrap();
    let ranker = OllamaRanker::from_config(&config(mock.url(), model)).unwrap();
    let candidates: Vec<pith_search::Candidate> = (0..3)
        .map(|id| pith_search::Candidate {
            id,
            summary: format!("a.rs:{id}: x"),
        })
        .collect();
    let err = ranker.try_rank("x", &candidates).unwrap_err();
    assert!(matches!(err, RankError::Reply(_)), "{err}");
    // The reason is the error's cause, not repeated in its own message.
    let cause = std::error::Error::source(&err).unwrap().to_string();
    assert!(cause.contains("appears twice"), "{err}: {cause}");
    assert!(!err.to_string().contains(&cause), "{err}");

    mock.set_reply(ChatReply::server_error());
    let err = ranker.try_rank("x", &candidates).unwrap_err();
    assert!(
        matches!(err, RankError::Http(HttpError::Status { status: 500, .. })),
        "{err}"
    );

    mock.set_reply(ChatReply::Order(vec![1, 2, 0]));
    assert_eq!(ranker.try_rank("x", &candidates).unwrap(), [1, 2, 0]);
    assert_eq!(ranker.rank("x", &candidates), Some(vec![1, 2, 0]));

    let refused =
        OllamaRanker::from_config(&config(closed_port_url().unwrap(), "refused-reasons:1b"))
            .unwrap();
    assert!(matches!(
        refused.try_rank("x", &candidates).unwrap_err(),
        RankError::Unavailable { .. }
    ));
}

#[test]
fn availability_probe_is_cached_until_reset() {
    let model = "ranker-probe:1b";
    let mock = MockOllama::start(&[model], ChatReply::reversed(2)).unwrap();
    let ranker = OllamaRanker::from_config(&config(mock.url(), model)).unwrap();
    assert!(ranker.is_available());
    assert!(ranker.is_available());
    let candidates: Vec<pith_search::Candidate> = (0..2)
        .map(|id| pith_search::Candidate {
            id,
            summary: format!("a.rs:{id}: x"),
        })
        .collect();
    assert_eq!(ranker.rank("x", &candidates), Some(vec![1, 0]));
    let probes = |mock: &MockOllama| {
        mock.requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path == "/api/tags")
            .count()
    };
    assert_eq!(probes(&mock), 1);
    reset_availability_cache();
    assert!(ranker.is_available());
    assert!(probes(&mock) >= 2);
}
