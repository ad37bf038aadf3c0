//! The local prefilter against a mock model server, on both APIs: every failure mode shows the
//! full unranked page with nothing withheld and one line saying why; success shows the ranked
//! prefix, the disclosure and the withheld count; a cold model is warmed in the background and
//! searches meanwhile are told it is loading.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use pith_prefilter::{Api, HttpError, ModelRanker, PrefilterConfig, RankError};
use pith_search::{RankPolicy, Ranker, Ranking, SearchReport, SearchRequest, search_workspace};
use pith_testkit::ollama::{ChatReply, MockOllama, closed_port_url};

/// 11 files x 5 matching lines = 55 matches: above the default threshold (50, the page size).
const MATCHES: usize = 55;
/// Files the matches are in (5 lines each).
const FILES: usize = 11;
/// The first page, unranked.
const PAGE: usize = pith_search::DEFAULT_MAX_RESULTS;
/// Lines shown at most when ranked (the default).
const SHOWN: usize = pith_search::DEFAULT_RANK_SHOWN;
/// Files the model is asked for: as many as fill `SHOWN` lines at 5 lines per file.
const PICK: usize = SHOWN / 5;

const APIS: [Api; 2] = [Api::Ollama, Api::OpenAi];

#[expect(
    clippy::unwrap_used,
    reason = "test setup: a failure should fail the test"
)]
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in 0..FILES {
        let body: String = (0..5)
            .map(|line| format!("fn handler_{file}_{line}() {{ dispatch(); }}\n"))
            .collect();
        let path = dir.path().join(format!("src/mod_{file:02}.rs"));
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, body).unwrap();
    }
    dir
}

fn config(api: Api, url: String, model: &str) -> PrefilterConfig {
    PrefilterConfig {
        enabled: true,
        api,
        url: Some(url),
        model: model.to_owned(),
        timeout: Duration::from_millis(500),
        ..PrefilterConfig::default()
    }
}

#[expect(clippy::unwrap_used, reason = "test helper")]
fn run(root: &Path, config: &PrefilterConfig, req: &SearchRequest) -> SearchReport {
    let ranker = ModelRanker::from_config(config).unwrap();
    search_workspace(root, req, Some(&ranker), config.policy).unwrap()
}

#[expect(clippy::unwrap_used, reason = "test helper")]
fn unranked(root: &Path) -> SearchReport {
    search_workspace(
        root,
        &SearchRequest::new("dispatch"),
        None,
        RankPolicy::default(),
    )
    .unwrap()
}

fn label(api: Api) -> &'static str {
    api.label()
}

/// The report must be the plain one (the first page in path order, nothing withheld beyond
/// it) under one line that names the model and says why; returns that reason.
#[expect(clippy::unwrap_used, reason = "test helper")]
fn assert_failed_open(report: &SearchReport, root: &Path, api: Api, model: &str) -> String {
    let plain = unranked(root);
    assert_eq!(plain.matches.len(), PAGE);
    assert_eq!(plain.withheld, (MATCHES - PAGE) as u64);
    let Ranking::FailedOpen { by, reason } = &report.ranking else {
        panic!("not failed open: {:?}", report.ranking);
    };
    assert_eq!(by, &format!("local model {model} ({})", label(api)));
    assert_eq!(report.matches, plain.matches);
    assert_eq!(report.withheld, plain.withheld);
    let text = report.render();
    let (first, rest) = text.split_once('\n').unwrap();
    assert_eq!(
        first,
        format!("pith: not ranked by {by} ({reason}); matches in path order.")
    );
    assert_eq!(rest, plain.render());
    reason.clone()
}

#[test]
fn success_shows_the_ranked_prefix_disclosure_and_withheld_count_on_both_apis() {
    for api in APIS {
        let dir = tree();
        let model = "ranker-ok:1b";
        let mock = MockOllama::start(&[model], ChatReply::last(FILES, PICK)).unwrap();
        let report = run(
            dir.path(),
            &config(api, mock.url(), model),
            &SearchRequest::new("dispatch"),
        );

        let by = format!("local model ranker-ok:1b ({})", label(api));
        assert_eq!(report.ranking, Ranking::Ranked { by: by.clone() });
        assert_eq!(report.matches.len(), SHOWN);
        assert_eq!(report.withheld, (MATCHES - SHOWN) as u64);
        assert_eq!(report.total_matches, MATCHES as u64);
        // The picked files (the last two, last first), each with its lines in order.
        let every = search_workspace(
            dir.path(),
            &SearchRequest {
                all: true,
                max_results: 100,
                ..SearchRequest::new("dispatch")
            },
            None,
            RankPolicy::default(),
        )
        .unwrap();
        let expected: Vec<_> = (FILES - PICK..FILES)
            .rev()
            .flat_map(|file| every.matches[file * 5..file * 5 + 5].iter().cloned())
            .collect();
        assert_eq!(report.matches, expected);
        let text = report.render();
        let first_lines: Vec<&str> = text.lines().take(2).collect();
        assert_eq!(
            first_lines,
            [
                format!(
                    "pith: ranked by {by}: the {SHOWN} most relevant of {MATCHES} \
                     matches in {FILES} files, most relevant first; {} withheld. Pass all=true \
                     to list every match in path order.",
                    MATCHES - SHOWN
                )
                .as_str(),
                "src/mod_10.rs:1: fn handler_10_0() { dispatch(); }",
            ]
        );
        assert_eq!(text.lines().count(), SHOWN + 1);

        let chats = mock.chat_requests();
        assert_eq!(chats.len(), 1, "{api:?}");
        let body = &chats[0].body;
        assert_eq!(body["model"], model);
        assert_eq!(body["stream"], false);
        let user = body["messages"][1]["content"].as_str().unwrap();
        assert!(user.starts_with("Question: dispatch\n"), "{user}");
        assert!(user.contains(
            "\n[0] src/mod_00.rs (5 matches)\n    1: fn handler_0_0() { dispatch(); }\n"
        ));
        assert!(
            user.contains("\n[10] src/mod_10.rs (5 matches)\n"),
            "{user}"
        );
        let schema = match api {
            Api::Ollama => {
                let num_ctx = body["options"]["num_ctx"].as_u64().unwrap();
                assert!(num_ctx >= 2048, "num_ctx {num_ctx}");
                assert_eq!(chats[0].path, "/api/chat");
                &body["format"]
            }
            Api::OpenAi => {
                assert_eq!(chats[0].path, "/v1/chat/completions");
                assert_eq!(body["response_format"]["type"], "json_schema");
                &body["response_format"]["json_schema"]["schema"]
            }
        };
        assert_eq!(schema["required"][0], "files");
        assert_eq!(schema["properties"]["files"]["maxItems"], PICK);
        assert_eq!(schema["properties"]["files"]["items"]["maximum"], FILES - 1);
        // The probe went to the API's own model list.
        let probes = mock.probe_requests();
        assert_eq!(probes.len(), 1);
        assert_eq!(
            probes[0].path,
            match api {
                Api::Ollama => "/api/tags",
                Api::OpenAi => "/v1/models",
            }
        );
    }
}

#[test]
fn an_openai_base_url_may_end_in_v1() {
    let dir = tree();
    let model = "ranker-v1";
    let mock = MockOllama::start(&[model], ChatReply::last(FILES, PICK)).unwrap();
    let report = run(
        dir.path(),
        &config(Api::OpenAi, format!("{}/v1/", mock.url()), model),
        &SearchRequest::new("dispatch"),
    );
    assert!(matches!(report.ranking, Ranking::Ranked { .. }));
    assert_eq!(mock.chat_requests()[0].path, "/v1/chat/completions");
}

#[test]
fn intent_is_the_ranking_query_when_given() {
    let dir = tree();
    let model = "ranker-intent:1b";
    let mock = MockOllama::start(&[model], ChatReply::last(FILES, PICK)).unwrap();
    let req = SearchRequest {
        intent: Some("where requests are routed".into()),
        ..SearchRequest::new("dispatch")
    };
    run(dir.path(), &config(Api::Ollama, mock.url(), model), &req);
    let user = mock.chat_requests()[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(user.starts_with("Question: where requests are routed\n"));
}

#[test]
fn threshold_shown_all_and_paging_decide_whether_the_model_is_asked() {
    let dir = tree();
    let model = "ranker-threshold:1b";
    let mock = MockOllama::start(&[model], ChatReply::last(FILES, 2)).unwrap();
    let at_threshold = PrefilterConfig {
        policy: RankPolicy {
            threshold: MATCHES,
            shown: 10,
        },
        ..config(Api::Ollama, mock.url(), model)
    };
    let report = run(dir.path(), &at_threshold, &SearchRequest::new("dispatch"));
    assert_eq!(report.ranking, Ranking::NotApplied);
    assert_eq!(report.matches, unranked(dir.path()).matches);

    let all = SearchRequest {
        all: true,
        max_results: 100,
        ..SearchRequest::new("dispatch")
    };
    let report = run(dir.path(), &config(Api::Ollama, mock.url(), model), &all);
    assert_eq!(report.ranking, Ranking::NotApplied);
    assert_eq!(report.withheld, 0);
    assert!(mock.chat_requests().is_empty());

    // A lower threshold ranks, and the shown prefix is its own setting.
    let low = PrefilterConfig {
        policy: RankPolicy {
            threshold: 10,
            shown: 10,
        },
        ..config(Api::Ollama, mock.url(), model)
    };
    let report = run(dir.path(), &low, &SearchRequest::new("dispatch"));
    assert!(matches!(report.ranking, Ranking::Ranked { .. }));
    assert_eq!(report.matches.len(), 10);
    assert_eq!(report.withheld, 45);
    assert_eq!(mock.chat_requests().len(), 1);
    assert_eq!(
        mock.chat_requests()[0].body["format"]["properties"]["files"]["minItems"],
        2
    );
}

#[test]
fn no_server_fails_open_on_both_apis() {
    for api in APIS {
        let dir = tree();
        let model = "ranker-refused:1b";
        let cfg = config(api, closed_port_url().unwrap(), model);
        let report = run(dir.path(), &cfg, &SearchRequest::new("dispatch"));
        let reason = assert_failed_open(&report, dir.path(), api, model);
        assert!(
            reason.starts_with("the model server is unavailable: request failed: cannot reach"),
            "{reason}"
        );
    }
}

#[test]
fn a_model_the_server_does_not_list_fails_open_without_asking() {
    for api in APIS {
        let dir = tree();
        let model = "ranker-missing:1b";
        let mock =
            MockOllama::start(&["some-other-model:7b"], ChatReply::last(FILES, PICK)).unwrap();
        let report = run(
            dir.path(),
            &config(api, mock.url(), model),
            &SearchRequest::new("dispatch"),
        );
        let reason = assert_failed_open(&report, dir.path(), api, model);
        assert_eq!(
            reason,
            format!(
                "the model server is unavailable: {} at {} does not list model {model}",
                label(api),
                mock.url()
            )
        );
        assert!(mock.chat_requests().is_empty());
        assert_eq!(mock.requests().len(), 1, "only the model-list probe");
    }
}

#[test]
fn a_timeout_fails_open_and_says_so_on_both_apis() {
    for api in APIS {
        let dir = tree();
        let model = "ranker-slow:1b";
        let mock = MockOllama::start(
            &[model],
            ChatReply::slow(FILES, PICK, Duration::from_secs(10)),
        )
        .unwrap();
        let cfg = PrefilterConfig {
            timeout: Duration::from_millis(200),
            ..config(api, mock.url(), model)
        };
        let started = Instant::now();
        let report = run(dir.path(), &cfg, &SearchRequest::new("dispatch"));
        assert!(started.elapsed() < Duration::from_secs(5));
        let reason = assert_failed_open(&report, dir.path(), api, model);
        assert_eq!(reason, "request failed: timed out after 200 ms");
        assert_eq!(mock.chat_requests().len(), 1);
    }
}

/// Each bad reply from a server that has the model: nothing ranked, nothing withheld, and the
/// reason on the first line.
#[test]
fn every_bad_reply_fails_open_on_both_apis() {
    let dir = tree();
    let replies = [
        (
            "prose",
            ChatReply::prose(FILES, PICK),
            "answer rejected: answer is not",
        ),
        (
            "duplicate",
            ChatReply::duplicate_index(PICK),
            "answer rejected: file 0 appears twice",
        ),
        (
            "too few",
            ChatReply::too_few(PICK),
            "answer rejected: 1 files picked, 2 asked for",
        ),
        (
            "invented",
            ChatReply::invented_index(FILES, PICK),
            "answer rejected: file 11 is out of range (0-10)",
        ),
        (
            "negative",
            ChatReply::Pick(vec![-1, 0]),
            "answer rejected: answer is not",
        ),
        (
            "not json",
            ChatReply::Content("the second one".into()),
            "answer rejected: answer is not",
        ),
        (
            "empty",
            ChatReply::Content(String::new()),
            "answer rejected",
        ),
        (
            "http 500",
            ChatReply::server_error(),
            "request failed: answered HTTP 500: ",
        ),
        (
            "http 503",
            ChatReply::Error(503, "server busy".into()),
            "request failed: answered HTTP 503: ",
        ),
    ];
    for api in APIS {
        for (name, reply, expected) in &replies {
            let model = format!("ranker-bad-{}:1b", name.replace(' ', "-"));
            let mock = MockOllama::start(&[&model], reply.clone()).unwrap();
            let report = run(
                dir.path(),
                &config(api, mock.url(), &model),
                &SearchRequest::new("dispatch"),
            );
            let reason = assert_failed_open(&report, dir.path(), api, &model);
            assert!(reason.starts_with(expected), "{api:?} {name}: {reason}");
            assert_eq!(mock.chat_requests().len(), 1, "{name}");
        }
    }
}

#[test]
fn failure_reasons_are_typed_and_name_each_cause_once() {
    let model = "ranker-reasons:1b";
    let mock = MockOllama::start(&[model], ChatReply::duplicate_index(3)).unwrap();
    let ranker = ModelRanker::from_config(&config(Api::Ollama, mock.url(), model)).unwrap();
    // Three files of one line: three lines wanted is three files asked for.
    let candidates: Vec<pith_search::Candidate> = (0..3)
        .map(|id| pith_search::Candidate {
            id,
            path: format!("{id}.rs"),
            summary: format!("{id}.rs:1: x"),
        })
        .collect();
    let err = ranker.try_rank("x", &candidates, 3).unwrap_err();
    assert!(matches!(err, RankError::Reply(_)), "{err}");
    pith_testkit::errors::assert_causes_said_once(&err);

    mock.set_reply(ChatReply::server_error());
    let err = ranker.try_rank("x", &candidates, 3).unwrap_err();
    assert!(
        matches!(err, RankError::Http(HttpError::Status { status: 500, .. })),
        "{err}"
    );

    mock.set_reply(ChatReply::Pick(vec![1, 2]));
    assert_eq!(ranker.try_rank("x", &candidates, 2).unwrap(), [1, 2]);
    assert_eq!(ranker.rank("x", &candidates, 2), Ok(vec![1, 2]));

    let refused = ModelRanker::from_config(&config(
        Api::OpenAi,
        closed_port_url().unwrap(),
        "refused-reasons:1b",
    ))
    .unwrap();
    let err = refused.try_rank("x", &candidates, 2).unwrap_err();
    assert!(matches!(err, RankError::Unavailable(_)), "{err}");
    pith_testkit::errors::assert_causes_said_once(&err);
}

#[test]
fn the_probe_is_made_once_and_an_unreachable_server_is_not_asked_again_at_once() {
    let model = "ranker-probe:1b";
    let mock = MockOllama::start(&[model], ChatReply::last(2, 2)).unwrap();
    let ranker = ModelRanker::from_config(&config(Api::Ollama, mock.url(), model)).unwrap();
    let candidates: Vec<pith_search::Candidate> = (0..2)
        .map(|id| pith_search::Candidate {
            id,
            path: format!("{id}.rs"),
            summary: format!("{id}.rs:1: x"),
        })
        .collect();
    assert_eq!(ranker.rank("x", &candidates, 2), Ok(vec![1, 0]));
    assert_eq!(ranker.rank("x", &candidates, 2), Ok(vec![1, 0]));
    assert_eq!(mock.probe_requests().len(), 1);
    // A clone shares what the first learned.
    assert_eq!(ranker.clone().rank("x", &candidates, 2), Ok(vec![1, 0]));
    assert_eq!(mock.probe_requests().len(), 1);

    let url = closed_port_url().unwrap();
    let refused = ModelRanker::from_config(&config(Api::Ollama, url, "refused:1b")).unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        let err = refused.rank("x", &candidates, 2).unwrap_err();
        assert!(err.starts_with("the model server is unavailable"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}

/// A cold model: the warm-up loads it in the background; a search meanwhile is answered at
/// once, unranked, saying so; once loaded, searches are ranked without another load.
#[test]
fn a_cold_model_is_warmed_in_the_background_and_searches_meanwhile_say_so() {
    for api in APIS {
        let dir = tree();
        let model = "ranker-cold:1b";
        let mock = MockOllama::start(&[model], ChatReply::last(FILES, PICK)).unwrap();
        mock.set_load_time(Duration::from_millis(1500));
        let cfg = PrefilterConfig {
            timeout: Duration::from_millis(400),
            ..config(api, mock.url(), model)
        };
        let ranker = ModelRanker::from_config(&cfg).unwrap();
        ranker.warm_up();
        ranker.warm_up(); // a second call while loading starts nothing

        let started = Instant::now();
        let report = search_workspace(
            dir.path(),
            &SearchRequest::new("dispatch"),
            Some(&ranker),
            cfg.policy,
        )
        .unwrap();
        assert!(started.elapsed() < Duration::from_millis(300), "it waited");
        let reason = assert_failed_open(&report, dir.path(), api, model);
        assert_eq!(reason, "the model is still loading");
        assert!(mock.chat_requests().is_empty());

        let deadline = Instant::now() + Duration::from_secs(10);
        let ranked = loop {
            let report = search_workspace(
                dir.path(),
                &SearchRequest::new("dispatch"),
                Some(&ranker),
                cfg.policy,
            )
            .unwrap();
            if matches!(report.ranking, Ranking::Ranked { .. }) || Instant::now() > deadline {
                break report;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(
            matches!(ranked.ranking, Ranking::Ranked { .. }),
            "{api:?}: {:?}",
            ranked.ranking
        );
        assert_eq!(mock.warm_up_requests().len(), 1, "{api:?}");
        assert_eq!(mock.chat_requests().len(), 1);
        assert_eq!(mock.probe_requests().len(), 1);
        if api == Api::Ollama {
            assert_eq!(
                mock.warm_up_requests()[0].body["messages"],
                serde_json::json!([])
            );
        }
    }
}

/// A warm-up that cannot reach the server leaves searches unranked with the reason, without
/// waiting; a ranking that times out starts a new warm-up.
#[test]
fn a_failed_warm_up_and_a_timed_out_ranking_fail_open_without_waiting_again() {
    let dir = tree();
    let cfg = config(Api::Ollama, closed_port_url().unwrap(), "ranker-gone:1b");
    let ranker = ModelRanker::from_config(&cfg).unwrap();
    assert!(ranker.load().is_err());
    let report = search_workspace(
        dir.path(),
        &SearchRequest::new("dispatch"),
        Some(&ranker),
        cfg.policy,
    )
    .unwrap();
    let reason = assert_failed_open(&report, dir.path(), Api::Ollama, "ranker-gone:1b");
    assert!(
        reason.starts_with("the model server is unavailable"),
        "{reason}"
    );

    let model = "ranker-unloaded:1b";
    let mock = MockOllama::start(
        &[model],
        ChatReply::slow(FILES, PICK, Duration::from_secs(5)),
    )
    .unwrap();
    let cfg = PrefilterConfig {
        timeout: Duration::from_millis(200),
        ..config(Api::Ollama, mock.url(), model)
    };
    let ranker = ModelRanker::from_config(&cfg).unwrap();
    assert!(ranker.load().is_ok());
    assert_eq!(mock.warm_up_requests().len(), 1);
    let report = search_workspace(
        dir.path(),
        &SearchRequest::new("dispatch"),
        Some(&ranker),
        cfg.policy,
    )
    .unwrap();
    assert_eq!(
        assert_failed_open(&report, dir.path(), Api::Ollama, model),
        "request failed: timed out after 200 ms"
    );
    pith_testkit::wait::wait_for("two warm-up requests", Duration::from_secs(5), || {
        mock.warm_up_requests().len() >= 2
    });
    assert_eq!(
        mock.warm_up_requests().len(),
        2,
        "the timeout started a warm-up"
    );
}

/// llama-cpp-python's server refuses OpenAI's `json_schema` response format (a 500) and takes
/// `json_object` with a `schema`: the warm-up finds that out, and rankings use it.
#[test]
fn the_warm_up_finds_the_response_format_the_server_takes() {
    let dir = tree();
    let model = "ranker-format";
    let mock = MockOllama::start(&[model], ChatReply::last(FILES, PICK)).unwrap();
    mock.refuse_json_schema();
    let cfg = config(Api::OpenAi, mock.url(), model);
    let ranker = ModelRanker::from_config(&cfg).unwrap();
    ranker.load().unwrap();
    let warm_ups = mock.warm_up_requests();
    let formats: Vec<&str> = warm_ups
        .iter()
        .map(|r| r.body["response_format"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(formats, ["json_schema", "json_object"]);
    let report = search_workspace(
        dir.path(),
        &SearchRequest::new("dispatch"),
        Some(&ranker),
        cfg.policy,
    )
    .unwrap();
    assert!(
        matches!(report.ranking, Ranking::Ranked { .. }),
        "{:?}",
        report.ranking
    );
    let format = &mock.chat_requests()[0].body["response_format"];
    assert_eq!(format["type"], "json_object");
    assert_eq!(format["schema"]["properties"]["files"]["maxItems"], PICK);
}
