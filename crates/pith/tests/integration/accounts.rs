//! A shared gateway: one `pith proxy` in front of several developers, on a real PostgreSQL,
//! mapping each request to an account by the key in its `pith-account-key` header. Each
//! client sends it the way the README says: the real Claude Code alice's
//! (`ANTHROPIC_CUSTOM_HEADERS`), the real OpenCode carol's (the provider's `options.headers`),
//! the real Codex dave's (`model_providers.<id>.env_http_headers`), the official Anthropic SDK
//! bob's (`default_headers`; his key is configured by its SHA-256 only). A missing and an
//! unknown key are refused in each wire's error shape, as the SDKs parse it.

use pith_testkit::wait::wait_for;
use std::process::Command;
use std::time::Duration;

use pith_testkit::fixtures::{self, Usage};
use pith_testkit::postgres::PgServer;
use pith_testkit::{MockUpstream, Reply};
use serde_json::Value;

use crate::clients::{
    LIMIT, Launch, claude_code_with, codex_with, has, opencode_with_options, project,
    write_codex_config,
};
use crate::support::*;

const ALICE_KEY: &str = "alice-7f3c9e2b41d8a6f0";
const BOB_KEY: &str = "bob-0c81d5e9a2f47b36";
const CAROL_KEY: &str = "carol-93be07c4d1a5f268";
const DAVE_KEY: &str = "dave-4a6f1c0e8b2d9735";
/// A key of the right shape that the gateway does not know.
const STRANGER_KEY: &str = "mallory-5d2e8f1a9c3b7604";

const ALICE_USAGE: Usage = Usage {
    input: 120,
    output: 6,
    cache_write: 0,
    cache_write_1h: 0,
    cache_read: 0,
};
const BOB_USAGE: Usage = Usage {
    input: 40,
    output: 9,
    cache_write: 0,
    cache_write_1h: 0,
    cache_read: 300,
};

fn sha256_hex(text: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One request through `base` with the official SDK `sdk` (`anthropic` or `openai`), sending
/// `key` as the account key when given: what the SDK parsed (`tests/python/account_key.py`).
fn sdk_request(base: &str, sdk: &str, key: Option<&str>) -> Value {
    let mut cmd = Command::new(python());
    cmd.arg(python_script("account_key.py"))
        .args(["--base-url", base, "--sdk", sdk]);
    if let Some(key) = key {
        cmd.args(["--key", key]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "account_key.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `pith ARGS` with the gateway's home and config and `env`.
fn pith_cmd(
    home: &std::path::Path,
    config: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Value {
    let mut cmd = Command::new(pith_bin());
    cmd.args(args)
        .env("PITH_HOME", home)
        .env("PITH_CONFIG", config)
        .env_remove("PITH_ACCOUNT")
        .env_remove("PITH_STORE_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "pith {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_gateway_maps_each_request_to_its_keys_account_and_refuses_the_rest() {
    let pg = PgServer::shared();
    let url = pg.database().unwrap();
    let mock = MockUpstream::start().unwrap();
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[account]\nid = \"gateway\"\n[account.keys]\nalice = \"{ALICE_KEY}\"\nbob = \"sha256:{}\"\n\
             carol = \"{CAROL_KEY}\"\ndave = \"{DAVE_KEY}\"\n\
             [prices.\"claude-opus-5-5\"]\ninput = 5.0\noutput = 25.0\n",
            sha256_hex(BOB_KEY)
        ),
    )
    .unwrap();
    let config_text = config.to_str().unwrap();
    let gateway = PithProxy::start(
        &mock.url(),
        &[("PITH_STORE_URL", &url), ("PITH_CONFIG", config_text)],
    );
    wait_for(
        "the startup line about keys",
        Duration::from_secs(5),
        || {
            gateway.stderr().contains(
                "accounts  -> 4 keys; clients must send theirs in the pith-account-key header",
            )
        },
    );

    // Alice: the real Claude Code, the key in ANTHROPIC_CUSTOM_HEADERS ("Name: value" lines).
    const PROMPT: &str = "say hi to alice";
    mock.push_when(
        |body| has(body, PROMPT),
        Reply::sse(fixtures::anthropic::stream(&["Hi", " alice."], ALICE_USAGE)),
    );
    let (work, home) = project();
    let header = format!("pith-account-key: {ALICE_KEY}");
    let run = claude_code_with(
        work.path(),
        home.path(),
        &gateway.url(),
        &[],
        PROMPT,
        LIMIT,
        &[("ANTHROPIC_CUSTOM_HEADERS", std::ffi::OsStr::new(&header))],
    );
    run.assert_ok(&format!("pith:\n{}", gateway.stderr()));
    assert_eq!(run.stdout, "Hi alice.\n", "{}", run.stderr);

    // Bob: the official Anthropic SDK with his key in its default headers.
    mock.push(Reply::json(fixtures::anthropic::message(
        "Hi bob.", BOB_USAGE,
    )));
    let bob = sdk_request(&gateway.url(), "anthropic", Some(BOB_KEY));
    assert_eq!(bob, serde_json::json!({"text": "Hi bob."}));

    // Carol: the real OpenCode, the key in its Anthropic provider's options.headers (its main
    // loop and its title call both carry it).
    const CAROL_PROMPT: &str = "say hi to carol";
    mock.push_when(
        |body| has(body, CAROL_PROMPT) && has(body, "\"tools\":["),
        Reply::sse(fixtures::anthropic::stream(&["Hi", " carol."], ALICE_USAGE)),
    );
    let (work, home) = project();
    let run = opencode_with_options(
        Launch::Direct,
        work.path(),
        home.path(),
        &format!("{}/v1", gateway.url()),
        &serde_json::json!({"headers": {"pith-account-key": CAROL_KEY}}),
        &[],
        CAROL_PROMPT,
        LIMIT,
    );
    run.assert_ok(&format!(
        "pith:
{}",
        gateway.stderr()
    ));
    assert!(run.stdout.contains("Hi carol."), "{}", run.stdout);

    // Dave: the real Codex, the key from an environment variable its provider's
    // env_http_headers names.
    const DAVE_PROMPT: &str = "say hi to dave";
    mock.push_when(
        |body| has(body, DAVE_PROMPT),
        Reply::sse(fixtures::responses::stream(&["Hi", " dave."], ALICE_USAGE)),
    );
    let (work, home) = project();
    let codex_home = write_codex_config(home.path(), &format!("{}/v1", gateway.url()));
    let codex_config = codex_home.join("config.toml");
    let mut text = std::fs::read_to_string(&codex_config).unwrap();
    text.push_str("env_http_headers = { \"pith-account-key\" = \"DAVE_PITH_KEY\" }\n");
    std::fs::write(&codex_config, text).unwrap();
    let run = codex_with(
        work.path(),
        home.path(),
        &[],
        DAVE_PROMPT,
        LIMIT,
        &[("DAVE_PITH_KEY", std::ffi::OsStr::new(DAVE_KEY))],
    );
    run.assert_ok(&format!(
        "pith:
{}",
        gateway.stderr()
    ));
    assert_eq!(run.stdout, "Hi dave.\n", "{}", run.stderr);

    // No key: refused in the Messages API's error shape, saying what to send and where keys
    // are configured.
    let missing = sdk_request(&gateway.url(), "anthropic", None);
    let error = &missing["error"];
    assert_eq!(error["class"], "AuthenticationError", "{missing}");
    assert_eq!(error["status"], 401);
    assert_eq!(error["type"], "authentication_error");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("send yours in the pith-account-key header")
            && message.contains("[account.keys]")
            && message.contains("PITH_ACCOUNT_KEYS"),
        "{message}"
    );
    // A key the gateway does not know: refused in the Chat Completions error shape.
    let unknown = sdk_request(&gateway.url(), "openai", Some(STRANGER_KEY));
    let error = &unknown["error"];
    assert_eq!(error["class"], "AuthenticationError", "{unknown}");
    assert_eq!(error["status"], 401);
    assert_eq!(error["type"], "authentication_error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("is not one of this gateway's account keys"),
        "{unknown}"
    );
    // Codex's WebSocket upgrade needs a key too.
    let rt = runtime();
    let (status, _, _) = rt.block_on(async {
        read_all(
            send(
                &client(),
                request(
                    "GET",
                    &format!("{}/v1/responses", gateway.url()),
                    &headers(&[
                        ("connection", "Upgrade"),
                        ("upgrade", "websocket"),
                        ("sec-websocket-version", "13"),
                        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
                        ("pith-account-key", STRANGER_KEY),
                    ]),
                    "",
                ),
            )
            .await,
        )
        .await
    });
    assert_eq!(status, 401);
    // pith's own pages are not traffic: the dashboard's API needs no key.
    let (status, _, _) = rt.block_on(async {
        read_all(
            send(
                &client(),
                request("GET", &format!("{}/pith/health", gateway.url()), &[], ""),
            )
            .await,
        )
        .await
    });
    assert_eq!(status, 200);

    // The upstream got the two answered requests, and never the header.
    let received = mock.received();
    // Claude Code 1, the SDK 1, OpenCode 2 (its title call), Codex 1.
    assert_eq!(received.len(), 5, "refused requests never go upstream");
    for r in &received {
        assert_eq!(r.header("pith-account-key"), None, "{:?}", r.headers);
        for (name, value) in &r.headers {
            let value = value.to_str().unwrap_or("");
            assert!(
                [ALICE_KEY, BOB_KEY, CAROL_KEY, DAVE_KEY]
                    .iter()
                    .all(|key| !value.contains(key)),
                "{name}: a key reached the upstream"
            );
        }
    }

    // Each ledger row is its key's account; the refusals are counted by reason, not rows.
    let rows = gateway.wait_rows(5);
    let mut accounts: Vec<(String, Option<u16>)> = rows
        .iter()
        .map(|r| (r.account.clone().unwrap_or_default(), r.status))
        .collect();
    accounts.sort();
    assert_eq!(
        accounts,
        [
            ("alice".to_owned(), Some(200)),
            ("bob".to_owned(), Some(200)),
            ("carol".to_owned(), Some(200)),
            ("carol".to_owned(), Some(200)),
            ("dave".to_owned(), Some(200)),
        ],
        "{rows:?}"
    );
    let ledger = pith_store::ledger::Ledger::open_read_only(&gateway.ledger_path()).unwrap();
    let refused = |reason: pith_outcome::Refusal| ledger.counter(&reason.counter()).unwrap();
    assert_eq!(refused(pith_outcome::Refusal::AccountKeyMissing), 1);
    // The SDK's request and the WebSocket upgrade.
    assert_eq!(refused(pith_outcome::Refusal::AccountKeyUnknown), 2);

    // The team's stats attribute each request to its account.
    let mut report = Value::Null;
    wait_for(
        "the gateway's rows in the team ledger",
        SHIPPED_WITHIN,
        || {
            report = pith_cmd(
                gateway.home.path(),
                &config,
                &["stats", "--json"],
                &[("PITH_STORE_URL", &url)],
            );
            report["total"]["requests"] == 5 && report["team"]["local_backlog"] == 0
        },
    );
    let by_account: Vec<(&str, u64, u64)> = report["by_account"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let n = |k: &str| a[k].as_u64().unwrap();
            (a["account"].as_str().unwrap(), n("requests"), n("errors"))
        })
        .collect();
    assert_eq!(
        by_account,
        [
            ("alice", 1, 0),
            ("bob", 1, 0),
            ("carol", 2, 0),
            ("dave", 1, 0),
        ],
        "{report}"
    );
    let tokens = |i: usize| {
        let a = &report["by_account"][i];
        (a["input_tokens"].as_u64(), a["cache_read_tokens"].as_u64())
    };
    assert_eq!(
        (tokens(0), tokens(1)),
        ((Some(120), Some(0)), (Some(40), Some(300)))
    );
    // Priced per model: alice's Claude Code turn at the config's price, bob's at the list's.
    let cost = |i: usize| report["by_account"][i]["cost_usd"].as_f64().unwrap();
    assert!(
        (cost(0) - (120.0 * 5.0 + 6.0 * 25.0) / 1e6).abs() < 1e-12,
        "{report}"
    );
    assert!(
        (cost(1) - (40.0 * 3.0 + 9.0 * 15.0 + 300.0 * 0.3) / 1e6).abs() < 1e-12,
        "{report}"
    );

    // The human report has a table per account.
    let text = Command::new(pith_bin())
        .arg("stats")
        .env("PITH_HOME", gateway.home.path())
        .env("PITH_CONFIG", &config)
        .env("PITH_STORE_URL", &url)
        .env_remove("PITH_ACCOUNT")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let table: Vec<(&str, &str)> = text
        .lines()
        .skip_while(|l| !l.starts_with("ACCOUNT "))
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            let mut cells = l.split_whitespace();
            Some((cells.next()?, cells.next()?))
        })
        .collect();
    assert_eq!(
        table,
        [
            ("ACCOUNT", "REQS"),
            ("alice", "1"),
            ("bob", "1"),
            ("carol", "2"),
            ("dave", "1"),
        ],
        "{text}"
    );

    // The gateway's dashboard API and /metrics say the same per account.
    let get = |path: &str| -> String {
        let (status, _, body) = rt.block_on(async {
            read_all(
                send(
                    &client(),
                    request("GET", &format!("{}{path}", gateway.url()), &[], ""),
                )
                .await,
            )
            .await
        });
        assert_eq!(status, 200, "{path}");
        String::from_utf8(concat(&body)).unwrap()
    };
    wait_for("the dashboard's replica", SHIPPED_WITHIN, || {
        let api: Value = serde_json::from_str(&get("/pith/api/stats")).unwrap();
        api["by_account"] == report["by_account"]
    });
    // Every account's client holds the pages' way in: a request's record shows no
    // conversation text, which the history keeps per account.
    let latest: Value = serde_json::from_str(&get("/pith/api/requests?limit=1")).unwrap();
    let id = &latest["requests"][0]["id"];
    let record: Value = serde_json::from_str(&get(&format!("/pith/api/request?id={id}"))).unwrap();
    assert_eq!(record["request"]["id"], *id, "{record}");
    assert!(record["turn"].is_null(), "{record}");
    assert!(
        record["turn_missing"]
            .as_str()
            .is_some_and(|why| why.contains("several accounts")),
        "{record}"
    );
    let metrics = get("/metrics");
    assert!(
        metrics.contains("pith_account_requests_total{account=\"carol\"} 2")
            && !metrics.contains("pith_account_requests_total{account=\"gateway\"}"),
        "{metrics}"
    );

    // The dashboard's page, in a real browser, lists the accounts.
    let (dom, log) = crate::dashboard::headless(
        &format!("{}/?poll", gateway.url()),
        &["--virtual-time-budget=8000", "--dump-dom"],
    );
    assert!(!log.contains("Uncaught"), "a script error:\n{log}");
    assert!(dom.contains(r#"<section id="accounts-section">"#), "{dom}");
    for (account, requests) in [("alice", 1), ("bob", 1), ("carol", 2), ("dave", 1)] {
        assert!(
            dom.contains(&format!("<td>{account}</td><td>{requests}</td>")),
            "{account} missing:\n{dom}"
        );
    }

    // History: each developer sees their own conversations only; a refusal records none.
    let conversations = |account: &str| -> Vec<Value> {
        let listed = pith_cmd(
            gateway.home.path(),
            &config,
            &["history", "list", "--json"],
            &[("PITH_ACCOUNT", account)],
        );
        listed["conversations"].as_array().unwrap().clone()
    };
    let mut alice = conversations("alice");
    wait_for("both turns in the history", Duration::from_secs(10), || {
        alice = conversations("alice");
        !alice.is_empty()
            && !conversations("bob").is_empty()
            && !conversations("carol").is_empty()
            && !conversations("dave").is_empty()
    });
    assert_eq!(alice.len(), 1, "{alice:?}");
    assert_eq!(alice[0]["account"], "alice");
    assert_eq!(alice[0]["client"], "claude-code");
    let bob = conversations("bob");
    assert_eq!(bob.len(), 1, "{bob:?}");
    assert_eq!(bob[0]["account"], "bob");
    assert_ne!(bob[0]["client"], "claude-code");
    for (account, client) in [("carol", "opencode"), ("dave", "codex")] {
        let listed = conversations(account);
        assert!(
            !listed.is_empty()
                && listed
                    .iter()
                    .all(|c| c["account"] == account && c["client"] == client),
            "{account}: {listed:?}"
        );
    }
    assert_eq!(conversations("gateway"), Vec::<Value>::new());

    // No key is written anywhere pith keeps things, nor logged.
    let log = gateway.stderr();
    for key in [ALICE_KEY, BOB_KEY, CAROL_KEY, DAVE_KEY, STRANGER_KEY] {
        assert!(!log.contains(key), "a key in pith's log:\n{log}");
        for file in ["ledger.db", "history.db", "team-ledger.db"] {
            let path = gateway.home.path().join(file);
            if let Ok(bytes) = std::fs::read(&path) {
                assert!(!has(&bytes, key), "a key in {}", path.display());
            }
        }
    }
}

#[test]
fn a_proxy_without_keys_ignores_the_header_and_strips_it() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_ACCOUNT", "carol")]);
    mock.push(Reply::json(fixtures::anthropic::message("Hi.", BOB_USAGE)));
    let answered = sdk_request(&pith.url(), "anthropic", Some(STRANGER_KEY));
    assert_eq!(answered, serde_json::json!({"text": "Hi."}));
    let received = mock.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].header("pith-account-key"), None);
    let rows = pith.wait_rows(1);
    assert_eq!(rows[0].account.as_deref(), Some("carol"));
}

#[test]
fn bad_account_keys_are_refused_at_start_naming_the_account_and_never_the_key() {
    let short = proxy_start_error(Some("[account.keys]\nalice = \"tooshort-4321\"\n"), &[]);
    assert!(
        short.contains("account.keys: the key of account alice: the key is 13 characters long")
            && !short.contains("tooshort-4321"),
        "{short}"
    );
    let twice = proxy_start_error(
        Some(&format!(
            "[account.keys]\nalice = \"{ALICE_KEY}\"\nbob = \"sha256:{}\"\n",
            sha256_hex(ALICE_KEY)
        )),
        &[],
    );
    assert!(
        twice.contains("the key of account bob: the key is also account \"alice\"'s")
            && !twice.contains(ALICE_KEY),
        "{twice}"
    );
    // PITH_ACCOUNT_KEYS names a file of the same lines, used instead of the config's.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.toml");
    std::fs::write(&file, "\"not an id\" = \"alice-7f3c9e2b41d8a6f0\"\n").unwrap();
    let file_text = file.to_str().unwrap();
    let bad_id = proxy_start_error(
        Some(&format!("[account.keys]\nalice = \"{ALICE_KEY}\"\n")),
        &[("PITH_ACCOUNT_KEYS", file_text)],
    );
    assert!(
        bad_id.contains(&format!(
            "{file_text} (PITH_ACCOUNT_KEYS): \"not an id\" is not an account id"
        )) && !bad_id.contains(ALICE_KEY),
        "{bad_id}"
    );
    // pith doctor says the same, as a failed check.
    let doctor = Command::new(pith_bin())
        .args(["doctor", "--json"])
        .env("PITH_HOME", dir.path())
        .env("PITH_ACCOUNT_KEYS", file_text)
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    let checks: Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let check = checks["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "account keys")
        .unwrap_or_else(|| panic!("no account keys check: {checks}"));
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("\"not an id\" is not an account id"),
        "{check}"
    );
    let missing = proxy_start_error(None, &[("PITH_ACCOUNT_KEYS", "/nonexistent/keys.toml")]);
    assert!(
        missing.contains(
            "cannot read the account keys file /nonexistent/keys.toml (named by PITH_ACCOUNT_KEYS)"
        ),
        "{missing}"
    );
}
