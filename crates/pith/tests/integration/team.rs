//! Team mode: proxies on several machines (here: several PITH_HOMEs) ship their ledgers and
//! conversation histories to one real PostgreSQL; `pith stats` and the dashboard report the
//! team; history and its deletion stay in each account; the database going away never slows a
//! request, and every row and message arrives once when it is back.

use pith_testkit::wait::wait_for;
use std::process::Command;
use std::time::{Duration, Instant};

use pith_testkit::fixtures::{self, Usage};
use pith_testkit::postgres::PgServer;
use pith_testkit::{MockUpstream, Reply};
use serde_json::Value;

use crate::support::*;

const USAGE: Usage = Usage {
    input: 100,
    output: 20,
    cache_write: 0,
    cache_write_1h: 0,
    cache_read: 400,
};

/// Each of `bodies` as a JSON request of session `session` through `pith`, each answered by
/// the mock; the slowest one's time.
fn send_bodies(
    mock: &MockUpstream,
    pith: &PithProxy,
    session: &str,
    bodies: impl IntoIterator<Item = String>,
) -> Duration {
    let rt = runtime();
    let client = client();
    let mut slowest = Duration::ZERO;
    for body in bodies {
        mock.push(Reply::json(fixtures::anthropic::message("ok", USAGE)));
        let start = Instant::now();
        let (status, _, _) = rt.block_on(async {
            read_all(
                send(
                    &client,
                    request(
                        "POST",
                        &format!("{}/v1/messages", pith.url()),
                        &headers(&[("x-session-id", session)]),
                        body,
                    ),
                )
                .await,
            )
            .await
        });
        slowest = slowest.max(start.elapsed());
        assert_eq!(status, 200);
    }
    slowest
}

/// `n` JSON requests with no messages, of session `session`, through `pith`.
fn send_requests(mock: &MockUpstream, pith: &PithProxy, session: &str, n: usize) -> Duration {
    let body = r#"{"model":"claude-haiku-4-5","messages":[]}"#;
    send_bodies(mock, pith, session, (0..n).map(|_| body.to_owned()))
}

/// `turns` turns of one conversation (session `session`) through `pith`: turn k carries the
/// k user messages so far with the mock's replies between them, so each adds two messages to
/// the history (the new user message and the reply).
fn send_conversation(
    mock: &MockUpstream,
    pith: &PithProxy,
    session: &str,
    turns: std::ops::Range<usize>,
) -> Duration {
    let bodies = turns.map(|k| {
        let mut messages = Vec::new();
        for j in 0..=k {
            messages.push(
                serde_json::json!({"role": "user", "content": format!("step {j}: fix calc")}),
            );
            if j < k {
                messages.push(serde_json::json!({"role": "assistant", "content": "ok"}));
            }
        }
        serde_json::json!({"model": "claude-haiku-4-5", "max_tokens": 64, "messages": messages})
            .to_string()
    });
    send_bodies(mock, pith, session, bodies)
}

/// `pith history ARGS` with `home` as PITH_HOME, `url` as the team store and `account` as the
/// account: (success, stdout, stderr).
fn history(
    home: &std::path::Path,
    url: &str,
    account: &str,
    args: &[&str],
) -> (bool, String, String) {
    let out = Command::new(pith_bin())
        .arg("history")
        .args(args)
        .env("PITH_HOME", home)
        .env("PITH_STORE_URL", url)
        .env("PITH_ACCOUNT", account)
        .env("PITH_HISTORY_TOKEN_KEY", TEAM_KEY)
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The team's token key: every machine signs and verifies deletion tokens with it.
const TEAM_KEY: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";

/// `pith history list --json` (the trash with `trash`): conversation ids and message counts.
fn conversations(
    home: &std::path::Path,
    url: &str,
    account: &str,
    trash: bool,
) -> Vec<(String, u64)> {
    let args: &[&str] = if trash {
        &["trash", "list", "--json"]
    } else {
        &["list", "--json"]
    };
    let (ok, out, err) = history(home, url, account, args);
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let mut found: Vec<(String, u64)> = listed["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["account"], account, "{c}");
            (
                c["id"].as_str().unwrap().to_owned(),
                c["messages"].as_u64().unwrap(),
            )
        })
        .collect();
    found.sort();
    found
}

/// `pith stats --json ARGS` with `home` as PITH_HOME and `url` as the team store.
pub(crate) fn team_stats(home: &std::path::Path, url: &str, args: &[&str]) -> Value {
    let out = Command::new(pith_bin())
        .args(["stats", "--json"])
        .args(args)
        .env("PITH_HOME", home)
        .env("PITH_STORE_URL", url)
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `pith doctor --json`'s checks by name: (status, detail).
fn doctor(
    home: &std::path::Path,
    url: &str,
) -> std::collections::HashMap<String, (String, String)> {
    let out = Command::new(pith_bin())
        .args(["doctor", "--json"])
        .env("PITH_HOME", home)
        .env("PITH_STORE_URL", url)
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["check"].as_str().unwrap().to_owned(),
                (
                    c["status"].as_str().unwrap().to_owned(),
                    c["detail"].as_str().unwrap().to_owned(),
                ),
            )
        })
        .collect()
}

/// The team report, once it holds `requests` rows and this machine has nothing left to ship.
fn team_report_with(home: &std::path::Path, url: &str, requests: u64) -> Value {
    let mut report = Value::Null;
    wait_for(
        "the proxies' rows in the team report",
        SHIPPED_WITHIN,
        || {
            report = team_stats(home, url, &[]);
            // The shipper moves its cursor just after the commit that made the rows visible.
            requests_in(&report) == requests && report["team"]["local_backlog"].as_u64() == Some(0)
        },
    );
    report
}

fn requests_in(report: &Value) -> u64 {
    report["total"]["requests"].as_u64().unwrap()
}

#[test]
fn two_proxies_ship_to_one_database_and_stats_and_the_dashboard_aggregate_both() {
    let pg = PgServer::shared();
    // Trust authentication on loopback takes any password: it is here to be hidden.
    let url = pg
        .database()
        .unwrap()
        .replacen("pith@", "pith:s3cret-pw@", 1);
    let mock = MockUpstream::start().unwrap();
    let a = PithProxy::start(
        &mock.url(),
        &[("PITH_STORE_URL", &url), ("PITH_ACCOUNT", "alice")],
    );
    let b = PithProxy::start(
        &mock.url(),
        &[("PITH_STORE_URL", &url), ("PITH_ACCOUNT", "bob")],
    );
    send_requests(&mock, &a, "ses_a", 3);
    send_requests(&mock, &b, "ses_b", 2);

    let report = team_report_with(a.home.path(), &url, 5);
    let sessions: Vec<&str> = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session"].as_str().unwrap())
        .collect();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    assert!(sessions.contains(&"ses_a") && sessions.contains(&"ses_b"));
    assert_eq!(report["total"]["cache_read_tokens"].as_u64(), Some(2000));
    let team = &report["team"];
    let mut accounts: Vec<&str> = team["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["account"].as_str().unwrap())
        .collect();
    accounts.sort_unstable();
    assert_eq!(
        accounts,
        ["alice", "bob"],
        "each proxy's requests are its account's"
    );
    assert_eq!(team["local_backlog"].as_u64(), Some(0));
    assert_eq!(team["sync_error"], Value::Null);
    assert!(
        team["store"]
            .as_str()
            .unwrap()
            .starts_with("postgres://pith:***@127.0.0.1:"),
        "{team}"
    );
    // --local is this machine's ledger only.
    assert_eq!(
        requests_in(&team_stats(a.home.path(), &url, &["--local"])),
        3
    );
    // The human report says the same.
    let text = Command::new(pith_bin())
        .arg("stats")
        .env("PITH_HOME", b.home.path())
        .env("PITH_STORE_URL", &url)
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("team ledger: postgres://pith:***@"), "{text}");
    assert!(text.contains("(2 proxies ship to it"), "{text}");
    assert!(!text.contains("s3cret-pw"));

    // The dashboard's API on either proxy reports the team.
    let rt = runtime();
    let (status, _, body) = rt.block_on(async {
        read_all(
            send(
                &client(),
                request("GET", &format!("{}/pith/api/stats", b.url()), &[], ""),
            )
            .await,
        )
        .await
    });
    assert_eq!(status, 200);
    let api: Value = serde_json::from_slice(&concat(&body)).unwrap();
    assert_eq!(requests_in(&api), 5);

    for p in [&a, &b] {
        let log = p.stderr();
        assert!(
            log.contains("team      -> postgres://pith:***@127.0.0.1"),
            "{log}"
        );
        assert!(!log.contains("s3cret-pw"), "{log}");
    }
}

/// The held-out share across a team (issue 49): two proxies in front of one PostgreSQL, each
/// conversation's turns through both. A held-out one reaches the provider byte for byte from
/// either and all its turns are in the held-out arm of the team's comparison; the other's are
/// all transformed.
#[test]
fn two_proxies_on_one_database_keep_a_conversation_in_one_arm() {
    let pg = PgServer::shared();
    let url = pg.database().unwrap();
    let mock = MockUpstream::start().unwrap();
    let env = |account| {
        [
            ("PITH_STORE_URL", url.clone()),
            ("PITH_ACCOUNT", account),
            ("PITH_HOLDOUT", "0.5".to_owned()),
            ("PITH_TRIM_OUTPUTS", "1".to_owned()),
        ]
    };
    let start = |account: &str| {
        let env = env(account.to_owned());
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        PithProxy::start(&mock.url(), &env)
    };
    let (a, b) = (start("alice"), start("bob"));
    let (held, rest) = crate::holdout::tags("team", 0.5, 1);
    for (tag, kept) in [(&held[0], true), (&rest[0], false)] {
        for pith in [&a, &b] {
            let sent = crate::holdout::send(pith, tag);
            let received = mock.received().last().unwrap().body.clone();
            assert_eq!(received == sent, kept, "{tag}: held out {kept}");
        }
    }
    let report = team_report_with(a.home.path(), &url, 4);
    let group = &report["holdout"]["groups"][0];
    for arm in ["held_out", "transformed"] {
        assert_eq!(group[arm]["conversations"], 1, "{arm}: {group}");
        assert_eq!(
            group[arm]["requests"], 2,
            "{arm}: both turns in one arm: {group}"
        );
    }
}

#[test]
fn history_and_its_deletion_stay_in_each_account_across_machines() {
    let url = PgServer::shared().database().unwrap();
    let mock = MockUpstream::start().unwrap();
    let proxy = |account: &str| {
        PithProxy::start(
            &mock.url(),
            &[
                ("PITH_STORE_URL", &url),
                ("PITH_ACCOUNT", account),
                ("PITH_HISTORY_TOKEN_KEY", TEAM_KEY),
            ],
        )
    };
    let a = proxy("alice");
    let b = proxy("bob");
    // Each: a real conversation of two turns, and one whose only message is the assistant's
    // (a request with no messages): what the `single-assistant` filter selects.
    send_conversation(&mock, &a, "a-real", 0..2);
    send_requests(&mock, &a, "a-single", 1);
    send_conversation(&mock, &b, "b-real", 0..2);
    send_requests(&mock, &b, "b-single", 1);

    // Another machine of alice's (a home of its own, no proxy) sees what her proxy recorded.
    let elsewhere = tempfile::tempdir().unwrap();
    let mut alices = Vec::new();
    wait_for("alice's history shipped", SHIPPED_WITHIN, || {
        alices = conversations(elsewhere.path(), &url, "alice", false);
        alices.len() == 2
    });
    let mut bobs = Vec::new();
    wait_for("bob's history shipped", SHIPPED_WITHIN, || {
        bobs = conversations(b.home.path(), &url, "bob", false);
        bobs.len() == 2
    });
    let counts: Vec<u64> = alices.iter().map(|(_, n)| *n).collect();
    assert!(counts.contains(&4) && counts.contains(&1), "{alices:?}");
    assert!(alices.iter().all(|a| !bobs.contains(a)));
    // Search is the account's too.
    let (ok, out, err) = history(
        elsewhere.path(),
        &url,
        "alice",
        &["search", "--json", "calc"],
    );
    assert!(ok, "{err}");
    let hits: Value = serde_json::from_str(&out).unwrap();
    let hit_ids: Vec<&str> = hits["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert_eq!(hit_ids.len(), 1, "{hits}");
    assert!(alices.iter().any(|(id, _)| id == hit_ids[0]));

    // Alice selects her single-assistant conversation (bob's is not among the candidates).
    let (ok, out, err) = history(
        a.home.path(),
        &url,
        "alice",
        &["candidates", "--filter", "single-assistant", "--json"],
    );
    assert!(ok, "{err}");
    let found: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(found["matched"], 1, "{found}");
    let token = found["filterToken"].as_str().unwrap().to_owned();
    let target = found["items"][0]["id"].as_str().unwrap().to_owned();
    assert!(alices.iter().any(|(id, _)| *id == target));

    // Bob, on his machine, with the same team key, cannot use alice's token.
    let (ok, _, err) = history(b.home.path(), &url, "bob", &["delete", "--token", &token]);
    assert!(!ok, "bob used alice's token");
    assert!(
        err.contains("nothing was deleted") && err.contains("account"),
        "{err}"
    );
    assert!(conversations(b.home.path(), &url, "bob", true).is_empty());
    assert!(conversations(a.home.path(), &url, "alice", true).is_empty());

    // Alice, on another machine, can: one conversation trashed, and only hers.
    let (ok, out, err) = history(
        elsewhere.path(),
        &url,
        "alice",
        &["delete", "--token", &token, "--json"],
    );
    assert!(ok, "{err}");
    let done: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(done["trashed"], serde_json::json!([target]), "{done}");
    assert_eq!(
        conversations(a.home.path(), &url, "alice", true)
            .into_iter()
            .map(|(id, _)| id)
            .collect::<Vec<_>>(),
        [target]
    );
    assert_eq!(conversations(b.home.path(), &url, "bob", false), bobs);
    assert!(conversations(b.home.path(), &url, "bob", true).is_empty());
    // This machine's own file (the outbox) still has what it recorded.
    let (ok, out, err) = history(a.home.path(), &url, "alice", &["--local", "list", "--json"]);
    assert!(ok, "{err}");
    let local: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(local["conversations"].as_array().unwrap().len(), 2);

    // An agent's MCP tools on a third machine, which never recorded anything itself, work on
    // bob's conversations in the team database, and refuse alice's token.
    let ws = tempfile::tempdir().unwrap();
    let mut mcp = crate::mcp::RawClient::start(
        ws.path(),
        &[
            ("PITH_STORE_URL", &url),
            ("PITH_ACCOUNT", "bob"),
            ("PITH_HISTORY_TOKEN_KEY", TEAM_KEY),
        ],
    );
    let (text, is_error) = mcp.call("search_history", serde_json::json!({"query": "calc"}));
    assert!(!is_error, "{text}");
    let hits: Value = serde_json::from_str(&text).unwrap();
    let hit_ids: Vec<&str> = hits["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert_eq!(hit_ids.len(), 1, "{text}");
    assert!(bobs.iter().any(|(id, _)| id == hit_ids[0]), "{text}");
    let (text, is_error) = mcp.call("memory_delete", serde_json::json!({"filterToken": token}));
    assert!(is_error && text.contains("account"), "{text}");
    let (text, is_error) = mcp.call(
        "memory_find_candidates",
        serde_json::json!({"accountId": "bob", "filter": "single-assistant"}),
    );
    assert!(!is_error, "{text}");
    let found: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(found["matched"], 1, "{text}");
    let bobs_single = found["items"][0]["id"].as_str().unwrap().to_owned();
    let (text, is_error) = mcp.call(
        "memory_delete",
        serde_json::json!({"filterToken": found["filterToken"]}),
    );
    assert!(!is_error, "{text}");
    let done: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(done["trashed"], serde_json::json!([bobs_single]), "{text}");
    assert_eq!(
        conversations(b.home.path(), &url, "bob", true)
            .into_iter()
            .map(|(id, _)| id)
            .collect::<Vec<_>>(),
        [bobs_single]
    );
    // Alice's trash still holds only her own.
    assert_eq!(conversations(a.home.path(), &url, "alice", true).len(), 1);
    assert!(
        !ws.path().join(".pith-home/history.db").exists(),
        "the MCP server made a local file"
    );
}

#[test]
fn with_postgresql_killed_requests_stay_fast_and_every_row_arrives_once_after() {
    // A server of its own, since it is killed.
    let pg = PgServer::start().unwrap();
    let url = pg
        .database()
        .unwrap()
        .replacen("pith@", "pith:s3cret-pw@", 1);
    let mock = MockUpstream::start().unwrap();
    let mut pith = PithProxy::start(&mock.url(), &[("PITH_STORE_URL", &url)]);
    send_conversation(&mock, &pith, "ses_k", 0..5);
    wait_for("the first rows shipped", SHIPPED_WITHIN, || {
        // The team history holding the five turns' ten messages (written after their rows).
        requests_in(&team_stats(pith.home.path(), &url, &[])) == 5
            && conversations(pith.home.path(), &url, "local", false)
                .first()
                .is_some_and(|(_, n)| *n == 10)
    });

    pg.kill().unwrap();
    let slowest = send_conversation(&mock, &pith, "ses_k", 5..35);
    // The shipper's connection attempts and backoff are on its own thread: no request waits
    // for them (the connect timeout alone is 5 s).
    assert!(
        slowest < Duration::from_secs(1),
        "a request took {slowest:?}"
    );
    pith.wait_rows(35);
    let mut down = Value::Null;
    wait_for(
        "the backlog in stats while PostgreSQL is down",
        SHIPPED_WITHIN,
        || {
            down = team_stats(pith.home.path(), &url, &[]);
            down["team"]["local_backlog"].as_u64() == Some(30)
        },
    );
    let error = down["team"]["sync_error"].as_str().unwrap();
    assert!(
        error.contains("cannot connect to postgres://pith:***@"),
        "{error}"
    );
    // The replica as last synced.
    assert_eq!(requests_in(&down), 5);
    // pith doctor says the same, changing nothing.
    let checks = doctor(pith.home.path(), &url);
    assert_eq!(checks["team"].0, "warn", "{checks:?}");
    assert!(
        checks["team"]
            .1
            .contains("cannot reach postgres://pith:***@"),
        "{checks:?}"
    );
    assert_eq!(
        checks["team backlog"],
        ("warn".to_owned(), "30 ledger rows wait to ship".to_owned())
    );
    // The history recorded meanwhile waits too: 30 turns, two messages each.
    assert_eq!(
        checks["history backlog"],
        (
            "warn".to_owned(),
            "60 history messages wait to ship".to_owned()
        )
    );
    assert_eq!(down["team"]["local_history_backlog"].as_u64(), Some(60));
    assert!(!format!("{checks:?}").contains("s3cret-pw"));

    pg.start_again().unwrap();
    send_conversation(&mock, &pith, "ses_k", 35..40);
    wait_for("every row in the team report", SHIPPED_WITHIN, || {
        let r = team_stats(pith.home.path(), &url, &[]);
        requests_in(&r) == 40
            && r["team"]["local_backlog"].as_u64() == Some(0)
            && r["team"]["local_history_backlog"].as_u64() == Some(0)
    });
    let checks = doctor(pith.home.path(), &url);
    assert_eq!(checks["team"].0, "ok", "{checks:?}");
    assert!(
        checks["team"]
            .1
            .contains("schema versions: history 4, ledger 4, search_blocks 1"),
        "{checks:?}"
    );
    assert_eq!(checks["team backlog"].0, "ok", "{checks:?}");
    let db = url.rsplit('/').next().unwrap();
    let count = |sql: &str| -> u64 { pg.psql(db, sql).unwrap().trim().parse().unwrap() };
    assert_eq!(count("SELECT count(*) FROM requests"), 40);
    assert_eq!(
        count("SELECT count(DISTINCT (instance, local_id)) FROM requests"),
        40
    );
    // Every history message once: 40 turns of one conversation, a user message and a reply
    // each, at positions 0..80, and the search index counting each message once.
    assert_eq!(count("SELECT count(*) FROM messages"), 80);
    assert_eq!(
        count("SELECT count(DISTINCT (conversation_id, position)) FROM messages"),
        80
    );
    assert_eq!(count("SELECT max(position) + 1 FROM messages"), 80);
    assert_eq!(
        count("SELECT tf FROM postings WHERE term = 'calc'"),
        40,
        "each user message says calc once"
    );
    assert_eq!(
        conversations(pith.home.path(), &url, "local", false)
            .iter()
            .map(|(_, n)| *n)
            .collect::<Vec<_>>(),
        [80]
    );
    pith.stop();
    let log = pith.stderr();
    assert!(log.contains("cannot ship to the team database"), "{log}");
    assert!(log.contains("reachable again"), "{log}");
    assert!(!log.contains("s3cret-pw"), "{log}");
}

#[test]
fn a_store_url_that_is_not_postgres_is_refused_saying_what_is_accepted() {
    let err = proxy_start_error(None, &[("PITH_STORE_URL", "mysql://team:pw@db/pith")]);
    assert!(
        err.contains("PITH_STORE_URL = mysql://team:***@db/pith is not a PostgreSQL URL"),
        "{err}"
    );
    assert!(
        err.contains("postgres://user:password@host:port/database"),
        "{err}"
    );
    assert!(!err.contains(":pw@"), "{err}");
    let err = proxy_start_error(Some("[store]\nurl = \"sqlite:x\"\nurls = 1\n"), &[]);
    assert!(err.contains("urls"), "{err}");
    let err = proxy_start_error(
        None,
        &[
            ("PITH_STORE_URL", "postgres://127.0.0.1:1/pith"),
            ("PITH_ACCOUNT", "alice smith"),
        ],
    );
    assert!(
        err.contains("PITH_ACCOUNT = \"alice smith\" is not an account id: use letters"),
        "{err}"
    );
}

/// `pith memory sync --json` in `root` with `url` as the team store.
fn memory_sync(root: &std::path::Path, url: &str) -> Value {
    let out = memory_sync_output(root, url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `pith memory sync --json` in `root`, as it ended; the brains the hook tests make are this
/// test process's user's own (`hook::test_home`).
fn memory_sync_output(root: &std::path::Path, url: &str) -> std::process::Output {
    Command::new(pith_bin())
        .args(["memory", "sync", "--json", "--workspace"])
        .arg(root)
        .env("PITH_STORE_URL", url)
        .env("PITH_HOME", crate::hook::test_home())
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap()
}

/// A clone of `origin` at another path.
fn clone_of(origin: &std::path::Path) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap().join("elsewhere");
    let ok = Command::new("git")
        .args(["clone", "-q"])
        .arg(origin)
        .arg(&root)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    (dir, root)
}

fn evidence_state(root: &std::path::Path, id: &str) -> String {
    let out = Command::new(pith_bin())
        .args(["memory", "show", id, "--json", "--workspace"])
        .arg(root)
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_STORE_URL")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    shown["status"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_fix_saved_in_one_clone_is_noted_by_the_other_clones_hook_after_a_sync() {
    use crate::hook::{claude_payload, hook, note, seeded};
    let url = PgServer::shared().database().unwrap();
    // Clone one: a brain with a fix for the failing test, a failed attempt and a note.
    let a = seeded();
    let (_b_dir, b) = clone_of(&a.root);
    let failure = claude_payload(1, &b, "session-b");
    assert_eq!(
        note(&hook(failure.as_bytes(), &[]).0, &failure),
        None,
        "nothing known yet"
    );

    let sent = memory_sync(&a.root, &url);
    assert_eq!(
        (sent["pushed"].as_u64(), sent["accepted"].as_u64()),
        (Some(3), Some(3))
    );
    let got = memory_sync(&b, &url);
    assert_eq!(got["new"].as_u64(), Some(3), "{got}");
    // The hook reads the local brain only (it is given the store URL and still needs none).
    let (out, _) = hook(failure.as_bytes(), &[("PITH_STORE_URL", &url)]);
    let said = note(&out, &failure).expect("the other clone's fix is noted");
    assert!(said.contains(&a.fix) && said.contains("[fresh]"), "{said}");

    // Evidence is checked against each checkout: changed here, stale here and fresh there.
    std::fs::write(b.join("calc.py"), "def add(a, b):\n    return a + b\n").unwrap();
    assert_eq!(evidence_state(&b, &a.fix), "stale");
    assert_eq!(evidence_state(&a.root, &a.fix), "fresh");
}

/// Stop 65's review: a brain committed to a repository (a fork the team's clones share a
/// first commit with) was pushed to the team brain whole, its memories winning every conflict
/// with the times they claimed, and pulled into every teammate's brain as the team's own.
#[test]
fn a_brain_that_came_with_the_project_is_not_synced() {
    use crate::hook::seeded;
    let url = PgServer::shared().database().unwrap();
    let a = seeded();
    // The same brain as a clone brings it: a file this user's pith did not make.
    let db = a.root.join(".pith/brain.db");
    let copy = a.root.join(".pith/brain.db.copy");
    std::fs::copy(&db, &copy).unwrap();
    std::fs::rename(&copy, &db).unwrap();
    let out = memory_sync_output(&a.root, &url);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pith has no record of making it") && err.contains("pith memory trust"),
        "{err}"
    );
    // Nothing reached the team brain: a clone that syncs gets nothing.
    let (_b_dir, b) = clone_of(&a.root);
    let got = memory_sync(&b, &url);
    assert_eq!(got["new"].as_u64(), Some(0), "{got}");
}

#[test]
fn pith_mcp_keeps_its_workspaces_brain_synced_in_the_background() {
    use crate::hook::{claude_payload, hook, note, seeded};
    let url = PgServer::shared().database().unwrap();
    let a = seeded();
    let (_b_dir, b) = clone_of(&a.root);
    memory_sync(&a.root, &url);
    // The MCP server of clone b, waiting for its client on stdin: its sync runs meanwhile.
    let mut mcp = Command::new(pith_bin())
        .args(["mcp", "--workspace"])
        .arg(&b)
        .env("PITH_STORE_URL", &url)
        .env("PITH_HOME", crate::hook::test_home())
        .env_remove("PITH_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let failure = claude_payload(1, &b, "session-mcp");
    let mut said = None;
    wait_for(
        "the fix in clone b's brain",
        Duration::from_secs(20),
        || {
            said = note(&hook(failure.as_bytes(), &[]).0, &failure);
            said.is_some()
        },
    );
    let _ = mcp.kill();
    let _ = mcp.wait();
    assert!(said.unwrap().contains(&a.fix));
}

#[test]
fn memory_sync_without_team_mode_or_outside_git_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(pith_bin())
        .args(["memory", "sync", "--workspace"])
        .arg(dir.path())
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_STORE_URL")
        .env("PITH_HOME", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("team mode is off: set [store] url"), "{err}");
    let url = PgServer::shared().database().unwrap();
    let out = Command::new(pith_bin())
        .args(["memory", "sync", "--workspace"])
        .arg(dir.path())
        .env_remove("PITH_CONFIG")
        .env("PITH_STORE_URL", &url)
        .env("PITH_HOME", dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("is not a git repository with a commit"),
        "{err}"
    );
}

/// `pith history ARGS --json` as `account`, on the history `home` reads (the team's when `url`
/// is given).
fn history_json(home: &std::path::Path, url: Option<&str>, account: &str, args: &[&str]) -> Value {
    let mut cmd = Command::new(pith_bin());
    cmd.arg("history")
        .args(args)
        .arg("--json")
        .env("PITH_HOME", home)
        .env("PITH_ACCOUNT", account)
        .env_remove("PITH_CONFIG")
        .env_remove("PITH_STORE_URL");
    if let Some(url) = url {
        cmd.env("PITH_STORE_URL", url);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The id of the one conversation of `account` there, once it holds `messages` messages.
fn one_conversation_of(
    home: &std::path::Path,
    url: Option<&str>,
    account: &str,
    messages: u64,
) -> String {
    let mut id = None;
    wait_for("the conversation recorded", SHIPPED_WITHIN, || {
        let listed = history_json(home, url, account, &["list"]);
        id = listed["conversations"]
            .as_array()
            .filter(|all| all.len() == 1 && all[0]["messages"] == messages)
            .and_then(|all| all[0]["id"].as_str().map(str::to_owned));
        id.is_some()
    });
    id.unwrap_or_default()
}

/// Each message of conversation `id`: its role, whether a person typed it, its preview.
fn messages_of(
    home: &std::path::Path,
    url: Option<&str>,
    account: &str,
    id: &str,
) -> Vec<(String, bool, String)> {
    history_json(home, url, account, &["show", id])["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                m["realUser"] == true,
                m["preview"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn one_conversation_served_by_two_proxies_is_the_one_a_single_proxy_records() {
    let url = PgServer::shared().database().unwrap();
    let mock = MockUpstream::start().unwrap();
    let team = || {
        PithProxy::start(
            &mock.url(),
            &[
                ("PITH_STORE_URL", &url),
                ("PITH_ACCOUNT", "carol"),
                ("PITH_HISTORY_TOKEN_KEY", TEAM_KEY),
            ],
        )
    };
    let (a, b) = (team(), team());
    let single = PithProxy::start(&mock.url(), &[("PITH_ACCOUNT", "carol")]);
    // Six turns of one session, alternating between the two proxies (a load balancer's
    // round robin); the same six through one proxy.
    for k in 0..6 {
        let via = if k % 2 == 0 { &a } else { &b };
        send_conversation(&mock, via, "spread", k..k + 1);
        send_conversation(&mock, &single, "spread", k..k + 1);
    }
    let id = one_conversation_of(single.home.path(), None, "carol", 12);
    let one = messages_of(single.home.path(), None, "carol", &id);
    assert!(one.iter().all(|(_, _, text)| !text.is_empty()), "{one:?}");
    // Another machine reads the team's: the turns both proxies recorded, as one.
    let elsewhere = tempfile::tempdir().unwrap();
    let team_id = one_conversation_of(elsewhere.path(), Some(&url), "carol", 12);
    assert_eq!(
        team_id, id,
        "one conversation id whichever proxy recorded it"
    );
    let team_has = messages_of(elsewhere.path(), Some(&url), "carol", &team_id);
    assert_eq!(
        team_has, one,
        "the team's conversation is not the single proxy's"
    );
}
