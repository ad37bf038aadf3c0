//! The writers over a real ledger file: nothing lost while the ledger is blocked, memory
//! bounded by the spool, the limit counted, rows in order, the rescue writer, a restart.

use super::*;

/// Writers whose idle writer never runs: a machine too busy for it, or a process killed
/// before it wrote.
fn starved_writers(path: &std::path::Path, spool: &SpoolConfig) -> LedgerSink {
    LedgerSink::start_writers(
        Ledger::open(path).unwrap(),
        spool,
        None,
        false,
        None,
        Clock::system(),
    )
    .unwrap()
}

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
    let submitted = 10;
    for i in 0..submitted {
        let mut r = record(i);
        // Bodies of different conversations: none is written as another's with edits.
        r.request_body = bytes::Bytes::from(vec![b'a' + i as u8; 1 << 20]);
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
    let stuck = starved_writers(&path, &spool);
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
    let sink = starved_writers(&path, &spool);
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
    let sink = starved_writers(&path, &spool);
    sink.shared.spool.pause_clock();
    let mut r = record(2);
    r.request_body = bytes::Bytes::from(vec![b'x'; RESCUE_BACKLOG_BYTES as usize]);
    sink.submit(r);
    assert_eq!(sink.wait_written(1, Duration::from_secs(10)), 1);
    sink.shutdown(Duration::from_secs(5));
    assert_eq!(Ledger::open(&path).unwrap().rows().unwrap().len(), 2);
}

/// A Claude Code turn's record: the capture's body as sent, in session `s`, arriving at `i`,
/// with an answer that read `cache_read` tokens from the cache.
fn turn_record(i: usize, body: &bytes::Bytes, cache_read: u64) -> Record {
    let answer = format!(
        r#"{{"id":"msg_{i}","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"done {i}"}}],"stop_reason":"end_turn","usage":{{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":{cache_read}}}}}"#
    );
    Record {
        ts_ms: i as i64,
        arrival_us: i as i64,
        client: "claude-code".into(),
        header_session: Some("s".into()),
        wire: Some(pith_wire::Wire::AnthropicMessages),
        provider: Some(pith_wire::Provider::Anthropic),
        method: "POST".into(),
        path: "/v1/messages".into(),
        status: Some(200),
        request_body: body.clone(),
        response_bytes: answer.len() as u64,
        response_chunks: vec![bytes::Bytes::from(answer)],
        ..Record::default()
    }
}

fn history_sink(dir: &std::path::Path) -> crate::history::HistorySink {
    crate::history::HistorySink::new(
        pith_store::history::History::open(&dir.join("history.db")).unwrap(),
        std::collections::HashMap::new(),
    )
}

/// Writers over the ledger, spool and history in `dir`.
fn writers_in(dir: &std::path::Path) -> LedgerSink {
    LedgerSink::start_with_history(
        Ledger::open(&dir.join("ledger.db")).unwrap(),
        &spool_in(dir, 1 << 30),
        Some(history_sink(dir)),
        None,
        Clock::system(),
    )
    .unwrap()
}

/// Writers in `dir` holding derivations back, and the rows of turns 1 to `turns` of one
/// session (Claude Code's req002 each time) written; and that body.
fn turns_with_derivations_held(dir: &std::path::Path, turns: usize) -> (LedgerSink, bytes::Bytes) {
    let body = bytes::Bytes::from(pith_testkit::bench::capture_body(
        "claude-code-2.1.328/fix-calc/req002",
    ));
    let sink = writers_in(dir);
    sink.shared.hold_derivations.store(true, Ordering::SeqCst);
    for i in 1..=turns {
        sink.submit(turn_record(i, &body, 0));
    }
    assert_eq!(
        sink.wait_written(turns as u64, Duration::from_secs(30)),
        turns as u64
    );
    (sink, body)
}

/// Rows come first, their derivations after: with the derivations held back every row is in
/// the ledger (time, model, usage, outcome) and marked as waiting, none shipped, no history
/// turn yet; once let go, the fingerprints, busts and turns are exactly what a writer that
/// parsed everything at once would have written.
#[test]
fn rows_are_written_before_their_derivations_and_end_up_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let (sink, body) = turns_with_derivations_held(dir.path(), 4);
    {
        let ledger = Ledger::open(&path).unwrap();
        let rows = ledger.rows().unwrap();
        assert_eq!(rows.len(), 4);
        for row in &rows {
            assert_eq!(
                row.model.as_deref(),
                Some("claude-opus-5-5"),
                "the request's model"
            );
            assert_eq!(row.usage.map(|u| u.cache_write), Some(100));
            assert_eq!(row.fingerprint, None, "derived before it was let");
        }
        assert_eq!(ledger.derivations_pending().unwrap(), 4);
        assert!(
            ledger.rows_after(0, 100).unwrap().is_empty(),
            "shipped half"
        );
    }
    assert!(
        !sink.flush(Duration::from_millis(50)),
        "a flush waits for derivations"
    );
    sink.shared.hold_derivations.store(false, Ordering::SeqCst);
    assert!(sink.flush(Duration::from_secs(30)));
    sink.shutdown(Duration::from_secs(30));
    let ledger = Ledger::open(&path).unwrap();
    assert_eq!(ledger.derivations_pending().unwrap(), 0);
    let got = ledger.rows().unwrap();
    assert_eq!(ledger.rows_after(0, 100).unwrap().len(), 4);
    // The same records written whole, in one go.
    let labels = history_sink(tempfile::tempdir().unwrap().path())
        .into_parts()
        .1;
    let whole: Vec<Row> = (1..=4)
        .map(|i| row::to_row(turn_record(i, &body, 0), Some(&labels)).0)
        .collect();
    for (got, whole) in got.iter().zip(&whole) {
        assert_eq!(got.fingerprint, whole.fingerprint);
        assert!(got.fingerprint.is_some());
        assert_eq!(got.client_fingerprint, whole.client_fingerprint);
    }
    let busts = ledger
        .cache_busts(&pith_store::ledger::Filter::default())
        .unwrap();
    assert_eq!(busts.pairs, 3, "each turn paired with the one before");
    let history = pith_store::history::History::open(&dir.path().join("history.db")).unwrap();
    let contents = history.contents().unwrap();
    assert_eq!(contents.conversations.len(), 1);
    assert!(contents.messages.iter().any(|m| m.3.contains("done 1")));
}

/// Killed between a batch of rows and its derivations: the next start writes the derivations
/// once (a bust pair each, one history turn each) and no row twice.
#[test]
fn derivations_a_killed_process_left_are_written_once_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let (sink, body) = turns_with_derivations_held(dir.path(), 3);
    sink.abandon();
    drop(sink);
    assert_eq!(
        Ledger::open(&path).unwrap().derivations_pending().unwrap(),
        3
    );
    let sink = writers_in(dir.path());
    sink.submit(turn_record(4, &body, 0));
    assert!(sink.flush(Duration::from_secs(30)));
    sink.shutdown(Duration::from_secs(30));
    // The same four records through writers never stopped.
    let reference = tempfile::tempdir().unwrap();
    let clean = writers_in(reference.path());
    for i in 1..=4 {
        clean.submit(turn_record(i, &body, 0));
    }
    assert!(clean.flush(Duration::from_secs(30)));
    clean.shutdown(Duration::from_secs(30));
    let ledger = Ledger::open(&path).unwrap();
    let clean_ledger = Ledger::open(&reference.path().join("ledger.db")).unwrap();
    assert_eq!(ledger.rows().unwrap().len(), 4);
    assert_eq!(ledger.derivations_pending().unwrap(), 0);
    let all = pith_store::ledger::Filter::default();
    assert_eq!(ledger.cache_busts(&all).unwrap().pairs, 3);
    assert_eq!(
        ledger.groups(&all).unwrap(),
        clean_ledger.groups(&all).unwrap()
    );
    let contents = |dir: &std::path::Path| {
        pith_store::history::History::open(&dir.join("history.db"))
            .unwrap()
            .contents()
            .unwrap()
    };
    assert_eq!(contents(dir.path()), contents(reference.path()));
}

/// A row a previous process left waiting for derivations no record will bring (its spool
/// entry gone) is kept without them once the writers have caught up with this process's
/// records: it would otherwise hold the team shipper back for ever.
#[test]
fn a_row_left_waiting_with_no_record_is_let_go_once_caught_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    Ledger::open(&path)
        .unwrap()
        .insert(&[Row {
            arrival_us: Some(1),
            path: "/v1/messages".into(),
            derivations_pending: true,
            ..Row::default()
        }])
        .unwrap();
    let sink = writers_in(dir.path());
    for i in 10..40 {
        sink.submit(record(i));
    }
    assert!(sink.flush(Duration::from_secs(30)));
    sink.shutdown(Duration::from_secs(30));
    let ledger = Ledger::open(&path).unwrap();
    assert_eq!(ledger.rows().unwrap().len(), 31);
    assert_eq!(ledger.derivations_pending().unwrap(), 0);
    assert_eq!(ledger.rows_after(0, 100).unwrap().len(), 31);
}
