//! Team mode's two throughput figures, on a real PostgreSQL the test kit starts (loopback, a
//! temporary directory):
//! - ledger shipping: a local ledger holding N rows (the proxy's writer put them there), shipped
//!   by the real `Shipper` thread; rows per second from its start until the backlog is 0. The
//!   goal is 2,000 requests/s; the local SQLite insert of the same rows is the baseline, timed
//!   in the same run.
//! - brain sync: M memories pushed by one clone, then pulled into an empty brain (a fresh
//!   clone's replica); the goal is 10,000 in under 2 s.
//! - history shipping: T proxied turns recorded into a local history (as the proxy's writer
//!   does: the baseline, messages per second), then shipped by the real `Shipper` thread
//!   (messages per second until the history's backlog is 0). No goal in the issue: it must keep
//!   up with recording.
//!
//! Run: `cargo bench -p pith-store --bench team` (env: TEAM_BENCH_ROWS, default 20,000;
//! TEAM_BENCH_MEMORIES, default 10,000; TEAM_BENCH_TURNS, default 2,000; TEAM_BENCH_RUNS,
//! default 3).
#![expect(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a bench stops loudly on a broken setup and reports by printing"
)]

use std::time::{Duration, Instant};

use pith_brain::{Evidence, Kind, LineRange, Memory};
use pith_history::{AgentType, NewMessage};
use pith_store::brain::SqliteBrain;
use pith_store::brain::postgres::TeamBrain;
use pith_store::history::{History, Turn};
use pith_store::ledger::{Fact, Ledger, RequestOutcome, Row, Transform, TransformResult, Usage};
use pith_store::postgres::StoreUrl;
use pith_store::postgres::ship::{self, Shipper};
use pith_testkit::bench::env_usize;
use pith_testkit::postgres::PgServer;

/// A row like the proxy writes for a deferred Claude Code request.
fn row(i: usize) -> Row {
    Row {
        ts_ms: 1_700_000_000_000 + i as i64,
        client: "claude-code".into(),
        session: Some(format!("session-{}", i % 50)),
        wire: Some("anthropic".into()),
        provider: "anthropic".into(),
        model: Some("claude-sonnet-4-5".into()),
        method: "POST".into(),
        path: "/v1/messages".into(),
        status: Some(200),
        outcome: RequestOutcome::Ok,
        bytes_client: 54_672,
        bytes_upstream: 21_000,
        bytes_response: 3_000,
        tools_bytes: 40_000,
        system_bytes: 10_000,
        messages_bytes: 4_000,
        other_bytes: 672,
        usage: Some(Usage {
            input: 10,
            output: 200,
            cache_write: 1_000,
            cache_write_1h: 0,
            cache_read: 20_000,
        }),
        ttfb_ms: Some(400.0),
        total_ms: 2_000.0,
        transforms: vec![Transform {
            stage: "defer".into(),
            result: TransformResult::Applied(vec![
                Fact {
                    name: "tools".into(),
                    kind: "count".into(),
                    value: 40,
                },
                Fact {
                    name: "chars".into(),
                    kind: "chars_kept_out".into(),
                    value: 30_000,
                },
            ]),
        }],
        fingerprint: Some(vec![7; 120]),
        // As a gateway writes them: each request its developer's account.
        account: Some(format!("developer-{}", i % 8)),
        ..Row::default()
    }
}

fn memory(i: usize) -> Memory {
    Memory {
        id: format!("m-{i:08x}"),
        kind: Kind::Fix,
        title: format!("retry the ledger write {i} on SQLITE_BUSY"),
        body: "The writer thread saw SQLITE_BUSY under load; a busy timeout fixes it. ".repeat(4),
        tags: vec!["sqlite".into(), "ledger".into()],
        headline: Some(format!(
            "FAILED tests/ledger.rs::busy_{i} - database is locked"
        )),
        evidence: vec![Evidence {
            path: format!("src/module_{}.rs", i % 200),
            lines: Some(LineRange { start: 10, end: 40 }),
            hash: Some("ab".repeat(32)),
            size: Some(4_000),
            mtime_ns: Some(1),
        }],
        created_at: 1_700_000_000 + i as i64,
        updated_at: 1_700_000_000 + i as i64,
        hits: 0,
        last_hit_at: None,
        last_check: None,
        trashed_at: None,
    }
}

fn ship_once(pg: &PgServer, rows: usize) -> (f64, f64) {
    let url = pg.database().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let mut ledger = Ledger::open(&path).unwrap();
    let batch: Vec<Row> = (0..rows).map(row).collect();
    let start = Instant::now();
    for chunk in batch.chunks(64) {
        ledger.insert(chunk).unwrap();
    }
    let local = rows as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    let shipper = Shipper::start(path.clone(), None, StoreUrl::new(&url), "local".into()).unwrap();
    let reader = Ledger::open_read_only(&path).unwrap();
    while ship::backlog(&reader).unwrap() > 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let shipped = rows as f64 / start.elapsed().as_secs_f64();
    assert_eq!(shipper.stop().shipped, rows as u64);
    (local, shipped)
}

fn sync_once(pg: &PgServer, memories: usize) -> (Duration, Duration) {
    let url = StoreUrl::new(pg.database().unwrap());
    let team = TeamBrain::open(&url).unwrap();
    let mut origin = SqliteBrain::in_memory().unwrap();
    for i in 0..memories {
        origin.insert(&memory(i)).unwrap();
    }
    let start = Instant::now();
    let pushed = team.sync("git:bench", &mut origin).unwrap();
    let push = start.elapsed();
    assert_eq!(pushed.accepted, memories as u64);
    let dir = tempfile::tempdir().unwrap();
    let mut replica = SqliteBrain::open(&dir.path().join("brain.db")).unwrap();
    let start = Instant::now();
    let pulled = team.sync("git:bench", &mut replica).unwrap();
    let pull = start.elapsed();
    assert_eq!(pulled.new, memories as u64);
    assert_eq!(replica.count().unwrap(), memories as u64);
    (push, pull)
}

/// The `i`th turn of one of 50 sessions: a user message of about 60 words and a reply of about
/// 120 (tool-output-like text, as real turns carry).
fn turn(i: usize, held: &mut [Vec<NewMessage>]) -> Turn {
    let session = i % held.len();
    let words = |n: usize, seed: usize| -> String {
        (0..n)
            .map(|k| format!("w{}", (seed * 31 + k * 17) % 5_000))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let message = |role: &str, text: String| NewMessage {
        role: role.into(),
        real_user: role == "user",
        text,
        typed: String::new(),
        ts_ms: 1_700_000_000_000 + i as i64,
        outputs: Vec::new(),
    };
    let so_far = &mut held[session];
    so_far.push(message("user", words(60, i)));
    let reply = message("assistant", words(120, i + 7));
    let turn = Turn {
        account: "local".into(),
        client: "claude-code".into(),
        session_id: format!("session-{session}"),
        agent_type: AgentType::Public,
        ts_ms: 1_700_000_000_000 + i as i64,
        messages: so_far.clone(),
        reply: Some(reply.clone()),
        excerpts: Vec::new(),
    };
    so_far.push(reply);
    turn
}

/// (recorded, shipped by the idle-priority shipper thread, pushed directly at normal
/// priority), in messages per second.
fn ship_history_once(pg: &PgServer, turns: usize) -> (f64, f64, f64) {
    let url = pg.database().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ledger_path = dir.path().join("ledger.db");
    Ledger::open(&ledger_path).unwrap();
    let path = dir.path().join("history.db");
    let mut history = History::open(&path).unwrap();
    let mut held = vec![Vec::new(); 50];
    let all: Vec<Turn> = (0..turns).map(|i| turn(i, &mut held)).collect();
    let start = Instant::now();
    for chunk in all.chunks(16) {
        history.record(chunk).unwrap();
    }
    let messages = history.backlog().unwrap().messages;
    assert_eq!(messages, 2 * turns as u64);
    let local = messages as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    let shipper = Shipper::start(
        ledger_path,
        Some(path.clone()),
        StoreUrl::new(&url),
        "local".into(),
    )
    .unwrap();
    while history.backlog().unwrap().messages > 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let shipped = messages as f64 / start.elapsed().as_secs_f64();
    assert_eq!(shipper.stop().history_shipped, messages);
    // The same batches again into a fresh database, on this thread at normal priority: what a
    // push costs when the scheduler does not make the shipper wait for idle CPU.
    history.forget_shipped().unwrap();
    let mut team = History::open_team(&StoreUrl::new(pg.database().unwrap())).unwrap();
    let start = Instant::now();
    let report = history.ship_all(&mut team).unwrap();
    let direct = messages as f64 / start.elapsed().as_secs_f64();
    assert_eq!(report.added, messages);
    (local, shipped, direct)
}

fn main() {
    let rows = env_usize("TEAM_BENCH_ROWS", 20_000);
    let memories = env_usize("TEAM_BENCH_MEMORIES", 10_000);
    let runs = env_usize("TEAM_BENCH_RUNS", 3);
    let pg = PgServer::start().unwrap();
    println!("ledger shipping, {rows} rows per run (rows/s):");
    println!("| run | local SQLite insert (baseline) | shipped to PostgreSQL | shipped / local |");
    println!("|---|---|---|---|");
    for run in 1..=runs {
        let (local, shipped) = ship_once(&pg, rows);
        println!(
            "| {run} | {local:.0} | {shipped:.0} | {:.2} |",
            shipped / local
        );
    }
    println!();
    println!("brain sync, {memories} memories per run:");
    println!("| run | push from one clone | pull into an empty brain |");
    println!("|---|---|---|");
    for run in 1..=runs {
        let (push, pull) = sync_once(&pg, memories);
        println!(
            "| {run} | {:.0} ms | {:.0} ms |",
            push.as_secs_f64() * 1e3,
            pull.as_secs_f64() * 1e3
        );
    }
    let turns = env_usize("TEAM_BENCH_TURNS", 2_000);
    println!();
    println!(
        "history shipping, {turns} turns per run ({} messages; messages/s):",
        2 * turns
    );
    println!(
        "| run | recorded into the local history (baseline) | shipped by the shipper thread (idle priority) | pushed at normal priority | pushed / recorded |"
    );
    println!("|---|---|---|---|---|");
    for run in 1..=runs {
        let (local, shipped, direct) = ship_history_once(&pg, turns);
        println!(
            "| {run} | {local:.0} | {shipped:.0} | {direct:.0} | {:.2} |",
            direct / local
        );
    }
}
