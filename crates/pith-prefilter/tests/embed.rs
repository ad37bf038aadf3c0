//! Semantic tool ranking against a mock model server (both APIs): cosine scores on success, `None` (BM25) on
//! every failure, and one decision per (model, task, tools) that survives restarts and outages.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use pith_prefilter::{Api, EmbedConfig, EmbedError, EmbedRanker, HttpError};
use pith_testkit::ollama::{EMBED_DIMENSIONS, EmbedReply, MockOllama, closed_port_url};
use pith_transform::{
    DeferOptions, DeferStage, Outcome, Request, Stage, ToolRanker, ToolText, apply_splices,
};
use pith_wire::Wire;
use serde_json::{Value, json};

const MODEL: &str = "nomic-embed-text";

/// Words the mock embeds as the same concept, so "related" is under the test's control.
const ALIASES: &[(&str, &str)] = &[
    ("compiler", "build"),
    ("compile", "build"),
    ("tickets", "issue"),
    ("bug", "issue"),
    ("mail", "email"),
];

/// (name, description): BM25 finds nothing of "fix the build" here; the aliases make
/// `cargo_check` the semantic match.
const TOOLS: &[(&str, &str)] = &[
    ("read_file", "Read a file from disk"),
    ("jira_search", "Search Jira tickets"),
    ("send_email", "Send a mail message"),
    ("list_dir", "List a directory"),
    ("cargo_check", "Run the compiler over the workspace"),
];

fn definitions() -> Vec<String> {
    TOOLS
        .iter()
        .map(|(name, description)| {
            json!({"name": name, "description": description,
                   "input_schema": {"type": "object"}})
            .to_string()
        })
        .collect()
}

fn texts(definitions: &[String]) -> Vec<ToolText<'_>> {
    TOOLS
        .iter()
        .zip(definitions)
        .map(|((name, description), definition)| ToolText {
            name,
            description,
            arguments: "",
            definition,
        })
        .collect()
}

fn ranker(url: String, cache: &Path) -> EmbedRanker {
    ranker_on(Api::Ollama, url, cache)
}

#[expect(
    clippy::expect_used,
    reason = "test helper: a failure should fail the test"
)]
fn ranker_on(api: Api, url: String, cache: &Path) -> EmbedRanker {
    EmbedRanker::new(EmbedConfig {
        api,
        url,
        model: MODEL.to_owned(),
        timeout: Duration::from_millis(500),
        cache_dir: cache.to_path_buf(),
    })
    .expect("plain http URL")
}

#[expect(
    clippy::expect_used,
    reason = "test helper: a failure should fail the test"
)]
fn mock() -> MockOllama {
    let mock = MockOllama::start(&[MODEL], pith_testkit::ollama::ChatReply::last(1, 1))
        .expect("mock starts");
    mock.set_embed_reply(EmbedReply::with_aliases(ALIASES));
    mock
}

#[expect(
    clippy::expect_used,
    reason = "test helper: a failure should fail the test"
)]
fn best(scores: &[f64]) -> usize {
    (0..scores.len())
        .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
        .expect("scores")
}

fn files_in(dir: &Path) -> Vec<std::path::PathBuf> {
    fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default()
}

#[test]
fn scores_are_cosine_similarities_and_favour_related_tools_on_both_apis() {
    for api in [Api::Ollama, Api::OpenAi] {
        scores_on(api);
    }
}

#[expect(
    clippy::unwrap_used,
    reason = "test helper: a failure should fail the test"
)]
fn scores_on(api: Api) {
    let mock = mock();
    let cache = tempfile::tempdir().unwrap();
    let ranker = ranker_on(api, mock.url(), cache.path());
    let defs = definitions();
    let tools = texts(&defs);

    let scores = ranker.scores("fix the build", &tools).unwrap();
    assert_eq!(scores.len(), TOOLS.len());
    assert_eq!(TOOLS[best(&scores)].0, "cargo_check", "{scores:?}");
    assert!(scores.iter().all(|s| (-1.0..=1.0 + 1e-12).contains(s)));
    let scores = ranker.scores("bug report", &tools).unwrap();
    assert_eq!(TOOLS[best(&scores)].0, "jira_search", "{scores:?}");

    assert_eq!(
        mock.embed_requests()[0].path,
        match api {
            Api::Ollama => "/api/embed",
            Api::OpenAi => "/v1/embeddings",
        }
    );
    let sent = &mock.embed_requests()[0].body;
    assert_eq!(sent["model"], MODEL);
    assert_eq!(sent["input"][0], "fix the build");
    assert_eq!(sent["input"][1], "read_file: Read a file from disk");
    assert_eq!(sent["input"].as_array().unwrap().len(), 1 + TOOLS.len());
    // The second task reused the cached tool vectors: only the task was embedded.
    assert_eq!(
        mock.embed_requests()[1].body["input"],
        json!(["bug report"])
    );

    // The score is the cosine of the mock's (unit-length) vectors.
    let aliases: Vec<(String, String)> = ALIASES
        .iter()
        .map(|(w, c)| ((*w).to_owned(), (*c).to_owned()))
        .collect();
    let task = EmbedReply::embed(&aliases, "bug report");
    let tool = EmbedReply::embed(&aliases, "jira_search: Search Jira tickets");
    assert_eq!(task.len(), EMBED_DIMENSIONS);
    let dot: f64 = task.iter().zip(&tool).map(|(a, b)| a * b).sum();
    assert!((scores[1] - dot).abs() < 1e-12, "{} vs {dot}", scores[1]);
}

/// A name, the mock's reply (`None`: nothing listening) and the error expected.
type FailureCase = (&'static str, Option<EmbedReply>, fn(&EmbedError) -> bool);

#[test]
fn every_failure_falls_back_to_bm25_and_is_recorded_on_both_apis() {
    for api in [Api::Ollama, Api::OpenAi] {
        failures_on(api);
    }
}

#[expect(
    clippy::unwrap_used,
    reason = "test helper: a failure should fail the test"
)]
fn failures_on(api: Api) {
    let mock = mock();
    let defs = definitions();
    let tools = texts(&defs);
    let zero = vec![0.0; 8];
    let one = vec![1.0; 8];
    let n = TOOLS.len() + 1;
    let cases: Vec<FailureCase> = vec![
        ("refused", None, |e| matches!(e, EmbedError::Http(_))),
        (
            "server error",
            Some(EmbedReply::Error(500, "boom".into())),
            |e| matches!(e, EmbedError::Http(HttpError::Status { status: 500, .. })),
        ),
        (
            "slow",
            Some(EmbedReply::Delayed(
                Duration::from_secs(3),
                Box::new(EmbedReply::bag_of_words()),
            )),
            |e| matches!(e, EmbedError::Http(HttpError::Timeout(_))),
        ),
        (
            "no embeddings field",
            Some(EmbedReply::Error(200, "odd".into())),
            |e| matches!(e, EmbedError::Malformed(_)),
        ),
        (
            "wrong count",
            Some(EmbedReply::Fixed(vec![one.clone(); n - 1])),
            |e| matches!(e, EmbedError::WrongCount { .. }),
        ),
        (
            "ragged dimensions",
            Some(EmbedReply::Fixed(
                std::iter::once(vec![1.0; 4])
                    .chain(std::iter::repeat_n(one.clone(), n - 1))
                    .collect(),
            )),
            |e| matches!(e, EmbedError::WrongDimensions(4, 8)),
        ),
        (
            "zero vector (cosine would be NaN)",
            Some(EmbedReply::Fixed(
                std::iter::once(zero)
                    .chain(std::iter::repeat_n(one, n - 1))
                    .collect(),
            )),
            |e| matches!(e, EmbedError::Degenerate),
        ),
    ];
    for (name, reply, expected) in cases {
        let url = match &reply {
            None => closed_port_url().unwrap(),
            Some(reply) => {
                mock.set_embed_reply(reply.clone());
                mock.url()
            }
        };
        let cache = tempfile::tempdir().unwrap();
        let ranker = ranker_on(api, url, cache.path());
        let err = ranker.try_scores("fix the build", &tools).unwrap_err();
        assert!(expected(&err), "{name}: {err}");
        assert_eq!(ranker.scores("fix the build", &tools), None, "{name}");
        let decisions = files_in(&cache.path().join("decisions"));
        assert_eq!(decisions.len(), 1, "{name}");
        let stored: Value = serde_json::from_slice(&fs::read(&decisions[0]).unwrap()).unwrap();
        assert_eq!(stored, json!({"decision": "bm25"}), "{name}");
        assert!(files_in(&cache.path().join("vectors")).is_empty(), "{name}");
    }

    // A model that is not pulled: the server answers 404.
    let cache = tempfile::tempdir().unwrap();
    let missing = EmbedRanker::new(EmbedConfig {
        model: "not-pulled".into(),
        ..ranker_on(api, mock.url(), cache.path()).config().clone()
    })
    .unwrap();
    assert!(matches!(
        missing.try_scores("fix the build", &tools),
        Err(EmbedError::Http(HttpError::Status { status: 404, .. }))
    ));
    assert!(matches!(
        EmbedRanker::new(EmbedConfig {
            url: "ftp://127.0.0.1:11434".into(),
            ..missing.config().clone()
        }),
        Err(EmbedError::BadUrl(_))
    ));
}

#[test]
fn a_decision_is_reused_from_memory_and_from_disk() {
    let mock = mock();
    let cache = tempfile::tempdir().unwrap();
    let defs = definitions();
    let tools = texts(&defs);
    let first = ranker(mock.url(), cache.path());
    let scores = first.scores("fix the build", &tools).unwrap();
    assert_eq!(first.scores("fix the build", &tools).unwrap(), scores);
    assert_eq!(mock.embed_requests().len(), 1, "second turn hit the server");

    // A restarted proxy: same cache directory, new instance, same bits, no request.
    let restarted = ranker(mock.url(), cache.path());
    let again = restarted.scores("fix the build", &tools).unwrap();
    assert_eq!(
        again.iter().map(|s| s.to_bits()).collect::<Vec<_>>(),
        scores.iter().map(|s| s.to_bits()).collect::<Vec<_>>()
    );
    assert_eq!(mock.embed_requests().len(), 1);

    // Reordering the tools is another decision, but every tool vector comes from disk.
    let mut reordered = tools.clone();
    reordered.reverse();
    let reversed = restarted.scores("fix the build", &reordered).unwrap();
    assert_eq!(mock.embed_requests().len(), 2);
    assert_eq!(
        mock.embed_requests()[1].body["input"],
        json!(["fix the build"])
    );
    let mut forward = reversed.clone();
    forward.reverse();
    assert_eq!(forward, scores);

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        for dir in ["decisions", "vectors"] {
            for file in files_in(&cache.path().join(dir)) {
                let mode = fs::metadata(&file).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{}", file.display());
            }
        }
    }
}

#[test]
fn a_failed_first_decision_sticks_when_the_server_comes_back() {
    let mock = mock();
    let defs = definitions();
    let tools = texts(&defs);

    // Across a restart: down on the first turn, up afterwards.
    let cache = tempfile::tempdir().unwrap();
    let down = ranker(closed_port_url().unwrap(), cache.path());
    assert_eq!(down.scores("fix the build", &tools), None);
    let up = ranker(mock.url(), cache.path());
    assert_eq!(up.scores("fix the build", &tools), None);
    assert!(mock.embed_requests().is_empty());
    // A new session (another task) tries again.
    assert!(up.scores("bug report", &tools).is_some());

    // Within one process: an error, then the server recovers.
    let cache = tempfile::tempdir().unwrap();
    let ranker = ranker(mock.url(), cache.path());
    mock.set_embed_reply(EmbedReply::Error(503, "server busy".into()));
    assert_eq!(ranker.scores("fix the build", &tools), None);
    mock.set_embed_reply(EmbedReply::with_aliases(ALIASES));
    assert_eq!(ranker.scores("fix the build", &tools), None);
    assert_eq!(mock.embed_requests().len(), 2);
}

#[test]
fn damaged_cache_files_are_ignored_and_rewritten() {
    let mock = mock();
    let cache = tempfile::tempdir().unwrap();
    let defs = definitions();
    let tools = texts(&defs);
    let scores = ranker(mock.url(), cache.path())
        .scores("fix the build", &tools)
        .unwrap();
    let mut damaged = 0;
    for dir in ["decisions", "vectors"] {
        for (i, file) in files_in(&cache.path().join(dir)).into_iter().enumerate() {
            let junk: &[u8] = match i % 3 {
                0 => b"{not json",
                1 => b"",
                _ => b"[0, 0, 0]",
            };
            fs::write(&file, junk).unwrap();
            damaged += 1;
        }
    }
    assert_eq!(damaged, 1 + TOOLS.len());

    let fresh = ranker(mock.url(), cache.path());
    assert_eq!(fresh.scores("fix the build", &tools).unwrap(), scores);
    assert_eq!(mock.embed_requests().len(), 2);
    assert_eq!(
        mock.embed_requests()[1].body["input"]
            .as_array()
            .unwrap()
            .len(),
        1 + TOOLS.len()
    );
    for dir in ["decisions", "vectors"] {
        for file in files_in(&cache.path().join(dir)) {
            let parsed: Result<Value, _> = serde_json::from_slice(&fs::read(&file).unwrap());
            assert!(parsed.is_ok(), "{} not rewritten", file.display());
        }
    }
    // Now whole again: a third instance answers from disk.
    let third = ranker(mock.url(), cache.path());
    assert_eq!(third.scores("fix the build", &tools).unwrap(), scores);
    assert_eq!(mock.embed_requests().len(), 2);
}

/// The names of the tools the stage leaves loaded for `body`.
#[expect(
    clippy::unwrap_used,
    reason = "test helper: a failure should fail the test"
)]
fn loaded(stage: &DeferStage, body: &str) -> Vec<String> {
    let headers = HeaderMap::new();
    let outcome = stage
        .apply(&Request {
            wire: Wire::AnthropicMessages,
            path: "/v1/messages",
            headers: &headers,
            body: body.as_bytes(),
        })
        .unwrap();
    let Outcome::Edited(edit) = outcome else {
        panic!("not deferred: {outcome:?}");
    };
    let out: Value =
        serde_json::from_slice(&apply_splices(body.as_bytes(), &edit.splices).unwrap()).unwrap();
    out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t.get("defer_loading").is_none() && t.get("type").is_none())
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_defer_stage_loads_what_the_embeddings_favour() {
    let mock = mock();
    let cache = tempfile::tempdir().unwrap();
    let tools: Vec<Value> = definitions()
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let body = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "fix the build"}],
        "tools": tools,
    })
    .to_string();
    let options = DeferOptions {
        keep_relevant: 1,
        // Deferral at any size: these definitions are tiny.
        min_deferred_chars: 0,
        ..DeferOptions::default()
    };
    let bm25 = DeferStage::new(options.clone());
    assert_eq!(loaded(&bm25, &body), ["read_file"], "BM25 finds nothing");

    let semantic =
        DeferStage::new(options.clone()).with_ranker(Arc::new(ranker(mock.url(), cache.path())));
    assert_eq!(loaded(&semantic, &body), ["cargo_check"]);
    assert_eq!(loaded(&semantic, &body), ["cargo_check"]);
    assert_eq!(mock.embed_requests().len(), 1);

    // The server down from the start: the stage ranks with BM25.
    let down = DeferStage::new(options).with_ranker(Arc::new(ranker(
        closed_port_url().unwrap(),
        tempfile::tempdir().unwrap().path(),
    )));
    assert_eq!(loaded(&down, &body), ["read_file"]);
}
