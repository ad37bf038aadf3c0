//! The writers over a real ledger file: nothing lost while the ledger is blocked, memory
//! bounded by the spool, the limit counted, rows in order, the rescue writer, a restart.

use super::*;

fn record(i: usize) -> Record {
    Record {
        ts_ms: i as i64,
        arrival_us: i as i64,
        client: "test".into(),
        method: "POST".into(),
        path: "/v1/messages".into(),
        ..Record::default()
    }
}

fn spool_in(dir: &std::path::Path, limit: u64) -> SpoolConfig {
    SpoolConfig {
        dir: dir.join("ledger-spool"),
        limit,
    }
}

/// A new ledger in `dir` and a connection holding its write lock (as another process would),
/// until `COMMIT` is run on it.
fn blocked_ledger(dir: &std::path::Path) -> (std::path::PathBuf, rusqlite::Connection) {
    let path = dir.join("ledger.db");
    drop(Ledger::open(&path).unwrap());
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    (path, blocker)
}

/// Another process holds the ledger's write lock: every record submitted meanwhile waits in
/// the spool (none dropped, submitting never waits), and all are written, in order, once
/// the lock is gone.
#[test]
fn a_blocked_ledger_loses_nothing_and_keeps_the_order() {
    let dir = tempfile::tempdir().unwrap();
    let (path, blocker) = blocked_ledger(dir.path());
    let sink =
        LedgerSink::start(Ledger::open(&path).unwrap(), &spool_in(dir.path(), 1 << 30)).unwrap();
    let submitted = 1000;
    for i in 0..submitted {
        sink.submit(record(i));
    }
    let stats = sink.stats();
    assert_eq!(stats.lost, 0, "{stats:?}");
    assert!(stats.backlog > 0, "{stats:?}");
    blocker.execute_batch("COMMIT").unwrap();
    sink.shutdown(Duration::from_secs(30));
    let stats = sink.stats();
    assert_eq!(stats.written, submitted as u64, "{stats:?}");
    assert_eq!(stats.backlog, 0, "{stats:?}");
    let ledger = Ledger::open(&path).unwrap();
    let order: Vec<i64> = ledger.rows().unwrap().iter().map(|r| r.ts_ms).collect();
    assert_eq!(order, (0..submitted as i64).collect::<Vec<_>>());
    assert_eq!(ledger.counter(DROPPED_ROWS).unwrap(), 0);
}

/// The spool's limit bounds what waits: past it records are lost, counted in the stats and
/// persisted in the ledger's counter; what was kept is written.
#[test]
fn past_the_spool_limit_records_are_counted_as_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (path, blocker) = blocked_ledger(dir.path());
    // Room for three bodies of 1 MiB.
    let sink = LedgerSink::start(
        Ledger::open(&path).unwrap(),
        &spool_in(dir.path(), 3_500_000),
    )
    .unwrap();
    let body = bytes::Bytes::from(vec![b'x'; 1 << 20]);
    let submitted = 10;
    for i in 0..submitted {
        let mut r = record(i);
        r.request_body = body.clone();
        sink.submit(r);
    }
    let stats = sink.stats();
    assert_eq!(stats.lost, 7, "{stats:?}");
    assert_eq!(stats.backlog, 3, "{stats:?}");
    blocker.execute_batch("COMMIT").unwrap();
    sink.shutdown(Duration::from_secs(30));
    let stats = sink.stats();
    assert_eq!(stats.written, 3, "{stats:?}");
    let ledger = Ledger::open(&path).unwrap();
    assert_eq!(ledger.counter(DROPPED_ROWS).unwrap(), 7);
    assert_eq!(ledger.rows().unwrap().len(), 3);
}

/// What a process left in the spool (killed before its writers got to it) is written by the
/// next one, once: the position committed with the rows says where to resume.
#[test]
fn the_next_start_writes_what_the_last_left_in_the_spool_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let spool = spool_in(dir.path(), 1 << 30);
    let sink = LedgerSink::start(Ledger::open(&path).unwrap(), &spool).unwrap();
    for i in 0..5 {
        sink.submit(record(i));
    }
    sink.shutdown(Duration::from_secs(30));
    assert_eq!(sink.stats().written, 5);
    // The spool is one process's at a time: this one lets it go.
    drop(sink);
    // A writer that never runs stands in for a process killed before writing.
    let stuck =
        LedgerSink::start_writers(Ledger::open(&path).unwrap(), &spool, None, false, None).unwrap();
    for i in 5..8 {
        stuck.submit(record(i));
    }
    stuck.abandon();
    assert_eq!(stuck.stats().written, 0);
    drop(stuck);
    let sink = LedgerSink::start(Ledger::open(&path).unwrap(), &spool).unwrap();
    sink.submit(record(8));
    sink.shutdown(Duration::from_secs(30));
    let order: Vec<i64> = Ledger::open(&path)
        .unwrap()
        .rows()
        .unwrap()
        .iter()
        .map(|r| r.ts_ms)
        .collect();
    assert_eq!(order, (0..9).collect::<Vec<_>>());
}

#[cfg(target_os = "linux")]
#[test]
fn the_writer_asks_for_idle_priority() {
    use thread_priority::unix::{
        NormalThreadSchedulePolicy, ThreadSchedulePolicy, thread_schedule_policy,
    };
    let policy = std::thread::spawn(|| {
        lower_priority();
        thread_schedule_policy().unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(
        policy,
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle)
    );
}

#[test]
fn the_rescue_writer_writes_what_a_starved_idle_writer_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let spool = spool_in(dir.path(), 1 << 30);
    let sink =
        LedgerSink::start_writers(Ledger::open(&path).unwrap(), &spool, None, false, None).unwrap();
    // The spool's clock stands still: a record grows old only when the test says so.
    sink.shared.spool.pause_clock();
    // A small backlog: only the record's age can bring the rescue writer in, and with the
    // clock still it stays young through two rescue checks.
    sink.submit(record(1));
    assert_eq!(sink.wait_written(1, RESCUE_CHECK * 2), 0);
    // MAX_WAIT old: written at the next rescue check.
    sink.shared.spool.advance_clock(MAX_WAIT);
    assert_eq!(sink.wait_written(1, Duration::from_secs(10)), 1);
    sink.shutdown(Duration::from_secs(5));
    drop(sink);

    // A large backlog wakes the rescue writer at once, the clock still standing: the request
    // that makes it so.
    let sink =
        LedgerSink::start_writers(Ledger::open(&path).unwrap(), &spool, None, false, None).unwrap();
    sink.shared.spool.pause_clock();
    let mut r = record(2);
    r.request_body = bytes::Bytes::from(vec![b'x'; RESCUE_BACKLOG_BYTES as usize]);
    sink.submit(r);
    assert_eq!(sink.wait_written(1, Duration::from_secs(10)), 1);
    sink.shutdown(Duration::from_secs(5));
    assert_eq!(Ledger::open(&path).unwrap().rows().unwrap().len(), 2);
}
