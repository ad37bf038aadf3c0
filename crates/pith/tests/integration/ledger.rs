//! Every request in the ledger exactly once, against the real binary: while the dashboard and
//! an outside `sqlite3` read and write the file, after `kill -9` with rows still waiting, and
//! with the spool on a file system that fills up.

use pith_testkit::wait::wait_for;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use pith_testkit::MockUpstream;
use pith_testkit::fixtures as captures;

use crate::support::*;

/// Claude Code's 54 KB fix-calc request, unstreamed (the mock answers it with JSON).
fn claude_body() -> Bytes {
    let capture = captures::captures()
        .unwrap()
        .into_iter()
        .find(|c| c.id() == "claude-code-2.1.328/fix-calc/req002")
        .unwrap();
    let text = std::str::from_utf8(&capture.body).unwrap();
    Bytes::from(text.replace("\"stream\":true", "\"stream\":false"))
}

/// Send `n` requests of Claude Code's body, `concurrency` at a time, each in its own session
/// `tag-i`; returns the sessions whose whole answer came back 200.
fn burst(pith: &PithProxy, tag: &str, n: usize, concurrency: usize) -> Vec<String> {
    let body = claude_body();
    burst_of(pith, tag, n, concurrency, |_| body.clone())
}

/// [`burst`] with request `i`'s body `body(i)`.
fn burst_of(
    pith: &PithProxy,
    tag: &str,
    n: usize,
    concurrency: usize,
    body: impl Fn(usize) -> Bytes,
) -> Vec<String> {
    let url = format!("{}/v1/messages", pith.url());
    runtime().block_on(async {
        let c = client();
        let mut done = Vec::new();
        let mut next = 0;
        while next < n {
            let wave: Vec<_> = (next..(next + concurrency).min(n))
                .map(|i| {
                    let session = format!("{tag}-{i}");
                    let req = request(
                        "POST",
                        &url,
                        &headers(&[
                            ("anthropic-version", "2023-06-01"),
                            ("content-type", "application/json"),
                            ("x-claude-code-session-id", &session),
                        ]),
                        body(i),
                    );
                    let c = c.clone();
                    async move {
                        let resp = c.request(req).await.ok()?;
                        let (status, _, _) = read_all(resp).await;
                        (status == 200).then_some(session)
                    }
                })
                .collect();
            next += wave.len();
            done.extend(
                futures_util::future::join_all(wave)
                    .await
                    .into_iter()
                    .flatten(),
            );
        }
        done
    })
}

/// Run `sql` with Python's `sqlite3` (another process, SQLite's own locking), returning the
/// first column of each row.
fn outside_sqlite(db: &std::path::Path, sql: &str) -> Vec<String> {
    let out = Command::new(python())
        .args([
            "-c",
            "import sqlite3, sys\n\
             c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
             for row in c.execute(sys.argv[2]):\n    print(row[0])\n\
             c.close()",
        ])
        .arg(db)
        .arg(sql)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sqlite3 {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A Python process holding the ledger's write lock (`BEGIN EXCLUSIVE`) until dropped: the
/// proxy's writers cannot write a row meanwhile.
struct WriteLock {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl WriteLock {
    fn take(db: &std::path::Path) -> WriteLock {
        let mut child = Command::new(python())
            .args([
                "-c",
                "import sqlite3, sys\n\
                 c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
                 c.execute('BEGIN EXCLUSIVE')\n\
                 print('locked', flush=True)\n\
                 sys.stdin.readline()\n\
                 c.execute('COMMIT')\n\
                 c.close()",
            ])
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked");
        let stdin = child.stdin.take();
        WriteLock { child, stdin }
    }
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin);
        }
        let _ = self.child.wait();
    }
}

fn get(pith: &PithProxy, path: &str) -> (u16, String) {
    runtime().block_on(async {
        let resp = send(
            &client(),
            request("GET", &format!("{}{path}", pith.url()), &[], Bytes::new()),
        )
        .await;
        let (status, _, frames) = read_all(resp).await;
        (
            status.as_u16(),
            String::from_utf8_lossy(&concat(&frames)).into_owned(),
        )
    })
}

/// The rows once the spool is empty (`pith stats` says no request waits), all of them: each
/// round waits on the proxy's flush barrier first.
fn settled_rows(pith: &PithProxy) -> Vec<pith_store::ledger::Row> {
    wait_for("the spool emptied", Duration::from_secs(60), || {
        pith.flush();
        let report: serde_json::Value =
            serde_json::from_slice(&pith_stats(pith, &["--json"]).stdout).unwrap_or_default();
        if report["ledger_backlog"]["requests"] == 0 {
            return Ok(crate::support::rows(&pith.ledger_path()));
        }
        Err(report)
    })
}

/// Each session appears exactly once among the rows.
fn assert_once_each(rows: &[pith_store::ledger::Row], sessions: &[String]) {
    let mut seen = std::collections::HashMap::<&str, usize>::new();
    for r in rows {
        if let Some(s) = &r.session {
            *seen.entry(s.as_str()).or_default() += 1;
        }
    }
    for s in sessions {
        assert_eq!(seen.get(s.as_str()), Some(&1), "session {s}: {seen:?}");
    }
    assert!(seen.values().all(|&n| n == 1), "a row twice: {seen:?}");
}

/// Issue 33's reproduction: a dashboard page view inside the proxy used to close a descriptor
/// of the ledger and so drop the writer's POSIX locks; an outside `sqlite3` read then deleted
/// the `-wal` under the writer, and `kill -9` lost the rows in it. Now every reader shares
/// connections opened once, and outside readers and writers change nothing of what the proxy
/// has written.
#[test]
fn a_page_view_and_an_outside_sqlite3_lose_no_row_through_kill_9() {
    let mock = MockUpstream::start().unwrap();
    let mut pith = PithProxy::start(&mock.url(), &[]);
    let db = pith.ledger_path();
    // Read only through another process's SQLite, so the test reads any ledger schema (and so
    // can be run against an older pith binary with PITH_TEST_BIN).
    let count = || outside_sqlite(&db, "SELECT count(*) FROM requests")[0].clone();
    let wait_count = |n: &str| {
        wait_for(
            &format!("the ledger reached {n} rows"),
            Duration::from_secs(20),
            || count() == n,
        )
    };
    let first = burst(&pith, "a", 2, 1);
    assert_eq!(first.len(), 2);
    wait_count("2");
    for page in [
        "/pith/api/requests",
        "/pith/api/stats",
        "/metrics",
        "/pith/api/timeline",
    ] {
        assert_eq!(get(&pith, page).0, 200, "{page}");
    }
    assert_eq!(count(), "2");
    // An outside writer too (a counter of its own), while the proxy writes.
    outside_sqlite(
        &db,
        "INSERT INTO counters (name, value) VALUES ('outside', 1) \
         ON CONFLICT (name) DO UPDATE SET value = value + 1",
    );
    let stats = pith_stats(&pith, &["--json"]);
    assert!(stats.status.success());
    let more = burst(&pith, "b", 3, 1);
    assert_eq!(more.len(), 3);
    wait_count("5");
    assert_eq!(get(&pith, "/pith/api/requests").0, 200);
    assert_eq!(count(), "5");
    pith.kill_9();
    assert_eq!(outside_sqlite(&db, "PRAGMA integrity_check"), ["ok"]);
    assert_eq!(count(), "5", "rows lost with the -wal");
    let mut sessions = outside_sqlite(&db, "SELECT session FROM requests ORDER BY session");
    let mut expected = [first, more].concat();
    sessions.sort();
    expected.sort();
    assert_eq!(sessions, expected);
}

/// `kill -9` with every answered request still waiting to be written (an outside process
/// holds the ledger's write lock through the burst): the next start writes each one exactly
/// once. Then a second burst with the writers free, killed as it ends.
#[test]
fn kill_9_mid_burst_loses_no_answered_request_and_writes_none_twice() {
    let mock = MockUpstream::start().unwrap();
    mock.set_recording(false);
    let mut pith = PithProxy::start(&mock.url(), &[]);
    let db = pith.ledger_path();
    // The ledger exists once the proxy has started.
    let lock = WriteLock::take(&db);
    let answered = burst(&pith, "locked", 200, 50);
    assert_eq!(
        answered.len(),
        200,
        "every request answered while the ledger is locked"
    );
    let stats = pith_stats(&pith, &["--json"]);
    let report: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert!(
        report["ledger_backlog"]["requests"].as_u64().unwrap() > 0,
        "{report}"
    );
    pith.kill_9();
    drop(lock);
    let mut pith = pith.restart(&mock.url(), &mock.url(), &[]);
    pith.wait_rows(200);
    let rows = settled_rows(&pith);
    assert_eq!(rows.len(), 200);
    assert_once_each(&rows, &answered);

    // Free writers this time: killed right as the burst ends, rows still being written.
    let second = burst(&pith, "free", 300, 100);
    pith.kill_9();
    let pith = pith.restart(&mock.url(), &mock.url(), &[]);
    pith.wait_rows(200 + second.len());
    let rows = settled_rows(&pith);
    assert_eq!(rows.len(), 200 + second.len());
    assert_once_each(&rows, &[answered, second].concat());
    let report: serde_json::Value =
        serde_json::from_slice(&pith_stats(&pith, &["--json"]).stdout).unwrap();
    assert_eq!(report["dropped_rows"], 0, "{report}");
}

/// The spool on a file system that fills up (a 2 MiB tmpfs, the ledger's writers locked out):
/// every request is still answered; what could not be kept is counted in `pith stats` and
/// `/metrics` and said in the log; what was kept is written once the lock is gone.
#[test]
fn a_full_disk_under_the_spool_keeps_serving_and_counts_what_it_lost() {
    let mock = MockUpstream::start().unwrap();
    mock.set_recording(false);
    let home = tempfile::tempdir().unwrap();
    // The tmpfs is mounted where the spool lives (pith opens its own files through no link).
    let small = home.path().join("ledger.db-spool");
    std::fs::create_dir(&small).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs"])
        .arg(&small)
        .status()
        .unwrap();
    assert!(
        mounted.success(),
        "this test mounts a tmpfs (run the suite as root, as CI does)"
    );
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(small.clone());
    let pith = PithProxy::start_in(home, &mock.url(), &mock.url(), &[]);
    let db = pith.ledger_path();
    let lock = WriteLock::take(&db);
    let sent = 80;
    // Bodies of 54 KB that share nothing: none is spooled as another's with edits.
    let answered = burst_of(&pith, "full", sent, 10, |i| {
        let body = serde_json::json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": unrepeated_text(i as u64, 54_000)}],
        });
        Bytes::from(body.to_string())
    });
    assert_eq!(
        answered.len(),
        sent,
        "every request answered with the disk full"
    );
    drop(lock);
    let report = wait_for(
        "every request a row or counted lost",
        Duration::from_secs(30),
        || {
            pith.flush();
            let report: serde_json::Value =
                serde_json::from_slice(&pith_stats(&pith, &["--json"]).stdout).unwrap();
            let rows = report["total"]["requests"].as_u64().unwrap_or(0);
            let lost = report["dropped_rows"].as_u64().unwrap_or(0);
            if rows + lost == sent as u64 && report["ledger_backlog"]["requests"] == 0 {
                Ok(report)
            } else {
                Err(report)
            }
        },
    );
    let lost = report["dropped_rows"].as_u64().unwrap();
    // 2 MiB holds about 36 bodies of 54 KB: some kept, the rest lost and counted.
    assert!(lost > 0 && lost < sent as u64, "{report}");
    let (status, metrics) = get(&pith, "/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains(&format!("pith_ledger_dropped_rows_total {lost}")),
        "{metrics}"
    );
    assert!(
        pith.stderr().contains("cannot write the ledger spool"),
        "{}",
        pith.stderr()
    );
    let text = String::from_utf8(pith_stats(&pith, &[]).stdout).unwrap();
    assert!(
        text.contains(&format!("requests lost to the ledger: {lost}")),
        "{text}"
    );
    // And `pith doctor` says so, with what to look at.
    let out = Command::new(pith_bin())
        .args(["doctor", "--json"])
        .env("PITH_HOME", pith.home.path())
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    let doctor: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = |name: &str| {
        doctor["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == name)
            .cloned()
            .unwrap_or_default()
    };
    let losses = check("ledger losses");
    assert_eq!(losses["status"], "warn", "{doctor}");
    assert!(
        losses["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("{lost} requests were served but not kept")),
        "{losses}"
    );
    assert_eq!(check("ledger spool")["status"], "ok", "{doctor}");
}

/// `kill -9` while answers stream: each request whose response headers the client had is in
/// the ledger after the restart, once, as `interrupted` (written from what the proxy recorded
/// when the answer began), next to the requests that completed.
#[test]
fn kill_9_mid_answer_leaves_each_started_answer_in_the_ledger_as_interrupted() {
    use http_body_util::BodyExt;
    use pith_store::ledger::RequestOutcome;
    use pith_testkit::fixtures;
    use pith_testkit::upstream::Reply;
    let mock = MockUpstream::start().unwrap();
    let sse = fixtures::anthropic::stream(&["one", " two"], fixtures::DEFAULT_USAGE);
    // The first event at once, the rest a minute later: the answers are open at the kill.
    let open = 3;
    for _ in 0..open {
        mock.push(Reply::stream(fixtures::split_at_events(
            &sse,
            Duration::from_secs(60),
        )));
    }
    let mut pith = PithProxy::start(&mock.url(), &[]);
    let rt = runtime();
    let url = format!("{}/v1/messages", pith.url());
    let streams = rt.block_on(async {
        let c = client();
        let mut bodies = Vec::new();
        for i in 0..open {
            let session = format!("open-{i}");
            let resp = send(
                &c,
                request(
                    "POST",
                    &url,
                    &headers(&[
                        ("anthropic-version", "2023-06-01"),
                        ("x-claude-code-session-id", &session),
                    ]),
                    r#"{"model":"m","stream":true,"max_tokens":5,"messages":[]}"#,
                ),
            )
            .await;
            assert_eq!(resp.status(), 200);
            let mut body = resp.into_body();
            // The client has the headers and the first event.
            body.frame().await.unwrap().unwrap();
            bodies.push(body);
        }
        bodies
    });
    let done = burst(&pith, "done", 5, 5);
    assert_eq!(done.len(), 5);
    pith.kill_9();
    drop(streams);
    let pith = pith.restart(&mock.url(), &mock.url(), &[]);
    pith.wait_rows(open + done.len());
    let rows = settled_rows(&pith);
    let interrupted: Vec<&str> = rows
        .iter()
        .filter(|r| r.outcome == RequestOutcome::Interrupted)
        .filter_map(|r| r.session.as_deref())
        .collect();
    assert_eq!(interrupted, ["open-0", "open-1", "open-2"], "{rows:?}");
    assert_eq!(rows.len(), open + done.len());
    let opened: Vec<String> = (0..open).map(|i| format!("open-{i}")).collect();
    assert_once_each(&rows, &[opened, done].concat());
    let row = rows
        .iter()
        .find(|r| r.session.as_deref() == Some("open-0"))
        .unwrap();
    assert_eq!((row.status, row.path.as_str()), (Some(200), "/v1/messages"));
    // A second restart writes none of them again.
    let pith = pith.restart(&mock.url(), &mock.url(), &[]);
    assert_eq!(settled_rows(&pith).len(), open + 5);
}
