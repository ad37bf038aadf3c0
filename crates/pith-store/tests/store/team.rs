//! The team ledger: several proxies, one database; shipping from the local ledger that survives
//! the database going away; schema versions; credentials.

use std::time::{Duration, Instant};

use pith_history::{AgentType, NewMessage};
use pith_store::history::{History, Turn};
use pith_store::ledger::postgres::{PushState, TeamLedger};
use pith_store::ledger::{Filter, Ledger, Row};
use pith_store::postgres::StoreUrl;
use pith_store::postgres::ship::{self, Shipper};
use pith_testkit::postgres::PgServer;

fn request(i: u64) -> Row {
    Row {
        ts_ms: 1_000 + i as i64,
        client: "claude-code".into(),
        session: Some(format!("s{}", i % 3)),
        provider: "anthropic".into(),
        model: Some("claude-x".into()),
        method: "POST".into(),
        path: "/v1/messages".into(),
        status: Some(200),
        total_ms: 2.0,
        ..Row::default()
    }
}

/// The `i`th turn of one of three sessions: the session so far and a reply, as the proxy's
/// history recorder hands it over.
fn turn(i: u64) -> Turn {
    let session = i % 3;
    let round = i / 3;
    let message = |role: &str, text: String| NewMessage {
        role: role.into(),
        real_user: role == "user",
        text,
        typed: String::new(),
        ts_ms: 1_000 + i as i64,
        outputs: Vec::new(),
    };
    let mut messages = Vec::new();
    for r in 0..=round {
        messages.push(message(
            "user",
            format!("step {r} of session {session}: fix calc"),
        ));
        if r < round {
            messages.push(message("assistant", format!("done step {r} of {session}")));
        }
    }
    Turn {
        account: "local".into(),
        client: "claude-code".into(),
        session_id: format!("s{session}"),
        agent_type: AgentType::Public,
        ts_ms: 1_000 + i as i64,
        messages,
        reply: Some(message(
            "assistant",
            format!("done step {round} of {session}"),
        )),
        excerpts: Vec::new(),
    }
}

fn database_of(url: &str) -> &str {
    url.rsplit('/').next().unwrap()
}

fn count(pg: &PgServer, db: &str, sql: &str) -> u64 {
    pg.psql(db, sql).unwrap().trim().parse().unwrap()
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn pushing_a_batch_again_adds_nothing_and_two_instances_aggregate() {
    let pg = PgServer::shared();
    let url = pg.database().unwrap();
    let team = TeamLedger::open(&StoreUrl::new(&url)).unwrap();
    let rows: Vec<(i64, Row)> = (1..=10).map(|i| (i as i64, request(i))).collect();
    let state = PushState::default();
    assert_eq!(team.push(1, &rows, &state).unwrap(), 10);
    // The same rows again (a shipper that crashed before recording its push): nothing new.
    assert_eq!(team.push(1, &rows, &state).unwrap(), 0);
    assert_eq!(team.push(1, &rows[3..7], &state).unwrap(), 0);
    // Another proxy's rows with the same local ids are other rows.
    assert_eq!(team.push(2, &rows[..4], &state).unwrap(), 4);

    let mut replica = Ledger::open_in_memory().unwrap();
    assert_eq!(team.sync_replica(&mut replica).unwrap(), 14);
    assert_eq!(team.sync_replica(&mut replica).unwrap(), 0, "pulled once");
    let groups = replica.groups(&Filter::default()).unwrap();
    assert_eq!(groups.iter().map(|g| g.requests).sum::<u64>(), 14);
    assert_eq!(
        count(pg, database_of(&url), "SELECT count(*) FROM requests"),
        14
    );
}

#[test]
fn a_newer_schema_is_refused_naming_both_versions_and_never_the_password() {
    let pg = PgServer::shared();
    let url = pg.database().unwrap();
    drop(TeamLedger::open(&StoreUrl::new(&url)).unwrap());
    pg.psql(
        database_of(&url),
        "UPDATE pith_schema SET version = 9 WHERE component = 'ledger'",
    )
    .unwrap();
    // Trust authentication takes any password: the point is where it shows.
    let with_password = url.replacen("pith@", "pith:hunter2@", 1);
    let err = TeamLedger::open(&StoreUrl::new(&with_password))
        .err()
        .unwrap();
    let text = pith_testkit::errors::chain(&err);
    assert!(
        text.contains("ledger schema") && text.contains("version 9") && text.contains("(4)"),
        "{text}"
    );
    assert!(text.contains("pith:***@127.0.0.1"), "{text}");
    assert!(!text.contains("hunter2") && !format!("{err:?}").contains("hunter2"));
}

#[test]
fn an_unreachable_database_is_named_without_its_password() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = StoreUrl::new(format!("postgres://team:hunter2@127.0.0.1:{port}/pith"));
    let err = TeamLedger::open(&url).err().unwrap();
    let text = pith_testkit::errors::chain(&err);
    assert!(
        text.contains(&format!(
            "cannot connect to postgres://team:***@127.0.0.1:{port}/pith"
        )),
        "{text}"
    );
    assert!(!text.contains("hunter2") && !format!("{err:?}").contains("hunter2"));
}

/// The proxy's ledger writer (and its history recorder) keep writing while PostgreSQL is
/// killed and started again: every row reaches the team ledger exactly once, every history
/// message the team history exactly once (its index counting each once), and the backlogs
/// show while it is down.
#[test]
fn killing_postgresql_mid_load_loses_nothing_and_doubles_nothing() {
    // A server of its own: the shared one serves other tests meanwhile.
    let pg = PgServer::start().unwrap();
    let url = pg.database().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let history_path = dir.path().join("history.db");
    let mut writer = Ledger::open(&path).unwrap();
    let mut recorder = History::open(&history_path).unwrap();
    let shipper = Shipper::start(
        path.clone(),
        Some(history_path.clone()),
        StoreUrl::new(&url),
        "local".into(),
    )
    .unwrap();

    let mut written = 0u64;
    let mut turns = 0u64;
    let mut write = |n: u64, writer: &mut Ledger, recorder: &mut History| {
        for _ in 0..n {
            let batch: Vec<Row> = (0..20).map(|k| request(written + k)).collect();
            writer.insert(&batch).unwrap();
            written += 20;
            recorder.record(&[turn(turns)]).unwrap();
            turns += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    write(20, &mut writer, &mut recorder);
    pg.kill().unwrap();
    let down = Instant::now();
    write(40, &mut writer, &mut recorder);
    assert!(
        down.elapsed() < Duration::from_secs(5),
        "the writer never waited on PostgreSQL"
    );
    // While it is down, the rows wait locally and say so, and the shipper's next attempt
    // fails (a backlog can show before that attempt: it waits for it, not just the backlog).
    wait_until(
        "a backlog and a failed shipment while PostgreSQL is down",
        Duration::from_secs(10),
        || {
            let stats = shipper.stats();
            stats.backlog > 0 && stats.history_backlog > 0 && stats.failures > 0
        },
    );
    assert!(recorder.backlog().unwrap().messages > 0);
    let reader = Ledger::open_read_only(&path).unwrap();
    assert!(ship::backlog(&reader).unwrap() > 0);
    pg.start_again().unwrap();
    write(20, &mut writer, &mut recorder);
    let total = written;
    wait_until("every row shipped", Duration::from_secs(30), || {
        ship::backlog(&reader).unwrap() == 0 && recorder.backlog().unwrap().messages == 0
    });
    let stats = shipper.stop();
    assert_eq!((stats.backlog, stats.history_backlog), (0, 0));
    // The history: 80 turns of three sessions, every message once, the index counting once.
    let team = History::open_team(&StoreUrl::new(&url)).unwrap();
    let local = recorder.contents().unwrap();
    assert_eq!(
        local.messages.len(),
        160,
        "80 turns: a user message and a reply each"
    );
    assert_eq!(team.contents().unwrap(), local);
    // A push PostgreSQL committed as it was killed is sent again and found there (added 0):
    // the count of messages new to it can fall short of 160, never exceed it.
    assert!(stats.history_shipped <= 160, "{stats:?}");
    let db = database_of(&url);
    assert_eq!(count(&pg, db, "SELECT count(*) FROM requests"), total);
    assert_eq!(
        count(
            &pg,
            db,
            "SELECT count(DISTINCT (instance, local_id)) FROM requests"
        ),
        total
    );
    assert_eq!(
        count(&pg, db, "SELECT count(DISTINCT instance) FROM requests"),
        1
    );
    // And shipping again from the start (a lost cursor) adds nothing.
    let mut again = Ledger::open(&path).unwrap();
    again.set_counter(ship::SHIPPED_THROUGH, 0).unwrap();
    recorder.forget_shipped().unwrap();
    assert_eq!(recorder.backlog().unwrap().messages, 160);
    let shipper = Shipper::start(
        path.clone(),
        Some(history_path.clone()),
        StoreUrl::new(&url),
        "local".into(),
    )
    .unwrap();
    wait_until("the second pass", Duration::from_secs(30), || {
        ship::backlog(&reader).unwrap() == 0 && recorder.backlog().unwrap().messages == 0
    });
    let stats = shipper.stop();
    assert_eq!((stats.shipped, stats.history_shipped), (0, 0));
    assert_eq!(count(&pg, db, "SELECT count(*) FROM requests"), total);
    assert_eq!(team.contents().unwrap(), local);
}

/// With `sslmode` and `sslrootcert` the team database is reached over TLS with its certificate
/// verified: against the CA the URL names it works (and the server sees an encrypted
/// connection); without that CA it is refused, saying why; without `sslmode` it stays plain.
#[test]
fn tls_verifies_the_server_against_the_ca_the_url_names() {
    let pg = PgServer::start().unwrap();
    let ca = pg.enable_tls().unwrap();
    let url = pg.database().unwrap();
    let db = database_of(&url).to_owned();
    let encrypted = |pg: &PgServer| {
        count(
            pg,
            &db,
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
             WHERE a.application_name = 'pith' AND s.ssl",
        )
    };

    let verified = StoreUrl::new(format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        ca.display()
    ));
    let team = TeamLedger::open(&verified).unwrap();
    let pushed = team
        .push(7, &[(1, request(1))], &PushState::default())
        .unwrap();
    assert_eq!(pushed, 1);
    assert!(encrypted(&pg) >= 1, "the pool's connection is encrypted");
    // The history goes the same way.
    let mut history = History::open_team(&verified).unwrap();
    history.record(&[turn(0)]).unwrap();
    assert_eq!(history.contents().unwrap().messages.len(), 2);

    // A certificate no trusted root signed: refused, and the reason is in the error.
    let untrusted = StoreUrl::new(format!("{url}?sslmode=require"));
    let err = TeamLedger::open(&untrusted).err().unwrap();
    let text = pith_testkit::errors::chain(&err);
    assert!(text.contains("certificate"), "{text}");
    // A CA file that is not there: named.
    let missing = StoreUrl::new(format!(
        "{url}?sslmode=require&sslrootcert=/nonexistent/ca.pem"
    ));
    let err = TeamLedger::open(&missing).err().unwrap();
    assert!(
        pith_testkit::errors::chain(&err).contains("/nonexistent/ca.pem"),
        "{err}"
    );
    // No sslmode: plain, as before TLS was supported.
    drop(team);
    drop(history);
    let plain = TeamLedger::open(&StoreUrl::new(&url)).unwrap();
    assert_eq!(plain.pull(0, 10).unwrap().len(), 1);
}
