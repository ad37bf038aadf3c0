//! Issue 45: what a stray file, a crafted request-target or an ordinary load balancer does to
//! the proxy. A file in the spool pith did not write steers nothing; requests lost to a full
//! spool are counted once, and damaged entries under their own cause; a path with dot
//! segments or a `*` target reaches no upstream; `/pith/health` answers any health check.

use pith_testkit::wait::wait_for;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use pith_store::ledger::RequestOutcome;
use pith_testkit::MockUpstream;
use pith_testkit::haproxy::Haproxy;
use serde_json::Value;

use crate::support::*;

/// Send `n` small Messages requests in sessions `tag-i`; how many came back 200.
fn send_messages(pith: &PithProxy, tag: &str, n: usize, content: &str) -> usize {
    let url = format!("{}/v1/messages", pith.url());
    let body = serde_json::json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": content}],
    })
    .to_string();
    runtime().block_on(async {
        let c = client();
        let mut ok = 0;
        for i in 0..n {
            let session = format!("{tag}-{i}");
            let req = request(
                "POST",
                &url,
                &headers(&[
                    ("anthropic-version", "2023-06-01"),
                    ("content-type", "application/json"),
                    ("x-claude-code-session-id", &session),
                ]),
                Bytes::from(body.clone()),
            );
            let (status, _, _) = read_all(send(&c, req).await).await;
            ok += usize::from(status == 200);
        }
        ok
    })
}

/// `pith stats --json` once every request sent is a row or counted (lost, damaged) and the
/// spool is empty: each round waits on the proxy's flush barrier first.
fn settled_stats(pith: &PithProxy, accounted: impl Fn(&Value) -> bool) -> Value {
    wait_for("the ledger settled", Duration::from_secs(60), || {
        pith.flush();
        let report: Value =
            serde_json::from_slice(&pith_stats(pith, &["--json"]).stdout).unwrap_or_default();
        if report["ledger_backlog"]["requests"] == 0 && accounted(&report) {
            Ok(report)
        } else {
            Err(report)
        }
    })
}

fn spool_dir(home: &std::path::Path) -> std::path::PathBuf {
    home.join("ledger.db-spool")
}

/// Finding 14: a file named as a segment with the largest generation (`u64::MAX`), and one
/// past what a spool position holds, lie in the spool before the proxy starts. Every request
/// is still recorded and nothing counted lost; the files stay, not read.
#[test]
fn a_stray_spool_segment_named_u64_max_loses_nothing() {
    let mock = MockUpstream::start().unwrap();
    let home = tempfile::tempdir().unwrap();
    let spool = spool_dir(home.path());
    std::fs::create_dir(&spool).unwrap();
    let max = spool.join(format!("{}.spool", u64::MAX));
    let beyond = spool.join("0000000099999999.spool");
    std::fs::write(&max, b"").unwrap();
    std::fs::write(&beyond, b"").unwrap();
    let pith = PithProxy::start_in(home, &mock.url(), &mock.url(), &[]);
    let sent = 5;
    assert_eq!(send_messages(&pith, "stray", sent, "hi"), sent);
    let report = settled_stats(&pith, |r| r["total"]["requests"] == sent as u64);
    assert_eq!(report["dropped_rows"], 0, "{report}");
    assert_eq!(rows(&pith.ledger_path()).len(), sent);
    assert!(max.exists(), "a file pith did not write is not removed");
}

/// Finding 15: with the ledger locked and a 1 MiB spool, requests of 400 KB fill it: those
/// not kept are counted as lost, once. Their answers had started (announced in the spool),
/// yet after a restart none comes back as an `interrupted` row.
#[test]
fn requests_lost_to_a_full_spool_are_counted_once_and_not_as_interrupted() {
    let mock = MockUpstream::start().unwrap();
    mock.set_recording(false);
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        "[ledger]\nspool_limit_mb = 1\n",
    )
    .unwrap();
    let mut pith = PithProxy::start_in(home, &mock.url(), &mock.url(), &[]);
    let lock = rusqlite::Connection::open(pith.ledger_path()).unwrap();
    lock.busy_timeout(Duration::from_secs(10)).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let sent = 6;
    // Messages that share nothing: none is spooled as another's with edits.
    for i in 0..sent {
        let big = unrepeated_text(i as u64, 400_000);
        assert_eq!(send_messages(&pith, &format!("full{i}"), 1, &big), 1);
    }
    lock.execute_batch("COMMIT").unwrap();
    drop(lock);
    let report = settled_stats(&pith, |r| {
        r["total"]["requests"].as_u64().unwrap_or(0) + r["dropped_rows"].as_u64().unwrap_or(0)
            == sent as u64
    });
    let lost = report["dropped_rows"].as_u64().unwrap();
    assert!(lost > 0 && lost < sent as u64, "{report}");
    assert!(pith.stop().success());
    let pith = pith.restart(&mock.url(), &mock.url(), &[]);
    assert_eq!(send_messages(&pith, "after", 1, "hi"), 1);
    let report = settled_stats(&pith, |r| {
        r["total"]["requests"].as_u64().unwrap_or(0) + r["dropped_rows"].as_u64().unwrap_or(0)
            > sent as u64
    });
    let rows = rows(&pith.ledger_path());
    let interrupted = rows
        .iter()
        .filter(|r| r.outcome == RequestOutcome::Interrupted)
        .count();
    assert_eq!(
        interrupted, 0,
        "lost requests written as interrupted: {report}"
    );
    assert_eq!(report["dropped_rows"].as_u64(), Some(lost), "{report}");
    assert_eq!(rows.len() as u64 + lost, sent as u64 + 1, "{report}");
}

/// Finding 15: an entry torn in the spool (as a kill mid-write leaves it) is skipped at the
/// next start and reported as damaged, under its own counter and doctor check, never as
/// "the spool was at its limit or the disk refused it".
#[test]
fn a_damaged_spool_entry_is_reported_as_damaged_not_as_a_full_spool() {
    let mock = MockUpstream::start().unwrap();
    let mut pith = PithProxy::start(&mock.url(), &[]);
    assert_eq!(send_messages(&pith, "before", 2, "hi"), 2);
    settled_stats(&pith, |r| r["total"]["requests"] == 2);
    assert!(pith.stop().success());
    // The last segment that process wrote gets a torn entry after what was read of it.
    let spool = spool_dir(pith.home.path());
    let newest = std::fs::read_dir(&spool)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "spool"))
        .max()
        .unwrap();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&newest)
        .unwrap();
    file.write_all(&[0xAB; 20]).unwrap();
    drop(file);
    let pith = pith.restart(&mock.url(), &mock.url(), &[]);
    assert_eq!(send_messages(&pith, "after", 1, "hi"), 1);
    let report = settled_stats(&pith, |r| r["total"]["requests"] == 3);
    assert_eq!(report["dropped_rows"], 0, "{report}");
    assert_eq!(report["damaged_spool_entries"], 1, "{report}");
    let out = Command::new(pith_bin())
        .args(["doctor", "--json"])
        .env("PITH_HOME", pith.home.path())
        .env_remove("PITH_CONFIG")
        .output()
        .unwrap();
    let doctor: Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = doctor["checks"].as_array().unwrap();
    let said = serde_json::to_string(checks).unwrap();
    assert!(!said.contains("the spool was at its limit"), "{said}");
    let damage = checks
        .iter()
        .find(|c| c["check"] == "ledger spool damage")
        .unwrap_or_else(|| panic!("{said}"));
    assert_eq!(damage["status"], "warn", "{damage}");
}

/// A raw HTTP/1.1 request on a fresh connection: the status line and the body.
fn raw(addr: SocketAddr, head: &str, body: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "{head}\r\n\r\n{body}").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.lines().next().unwrap_or_default().to_owned();
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Finding 18: `/chatgpt/../v1/responses` would reach the ChatGPT origin as
/// `/backend-api/codex/../v1/responses`, out of the prefix; `POST *` has no path to forward;
/// an absolute URL to another host asks for a forward proxy. Each is refused with a 400 that
/// says why, and no upstream sees a request.
#[test]
fn a_dot_segment_or_a_star_target_reaches_no_upstream() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_CHATGPT_UPSTREAM", &mock.url())]);
    let body = r#"{"model":"gpt-5","input":"hi"}"#;
    let post = |target: &str, host: &str| {
        raw(
            pith.addr,
            &format!(
                "POST {target} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
                 authorization: Bearer k\r\ncontent-length: {}\r\nconnection: close",
                body.len()
            ),
            body,
        )
    };
    let host = pith.addr.to_string();
    for target in [
        "/chatgpt/../v1/responses",
        "/chatgpt/%2e%2e/v1/responses",
        "/chatgpt/./responses",
        "*",
        "http://attacker.example/v1/responses",
    ] {
        let (status, said) = post(target, &host);
        assert!(status.contains(" 400 "), "{target}: {status} {said}");
        assert!(said.contains("pith:"), "{target}: {said}");
    }
    assert_eq!(
        mock.request_count(),
        0,
        "a refused target reached an upstream"
    );
    // What pith routes still goes through.
    let (status, said) = post("/chatgpt/responses", &host);
    assert!(status.contains(" 200 "), "{status} {said}");
    assert_eq!(mock.request_count(), 1);
    let (status, _) = raw(
        pith.addr,
        &format!("OPTIONS * HTTP/1.1\r\nhost: {host}\r\nconnection: close"),
        "",
    );
    assert!(status.contains(" 204 "), "{status}");
    assert_eq!(mock.request_count(), 1);
}

/// Finding 19: HAProxy's plain check (`option httpchk GET /pith/health`: HTTP/1.0, no Host
/// header), as the shipped gateway config now sends it, finds the instance up, and so does a
/// Kubernetes probe naming the pod's IP, with or without a token on the proxy: they get only
/// whether it is up. The details (version, upstreams) stay behind the page rules.
#[test]
fn haproxys_default_check_and_a_pod_ip_probe_find_pith_up() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let (status, body) = raw(pith.addr, "GET /pith/health HTTP/1.0", "");
    assert!(status.contains(" 200 "), "{status} {body}");
    let health: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health, serde_json::json!({"status": "ok"}));
    let (status, body) = raw(
        pith.addr,
        "GET /pith/health HTTP/1.1\r\nhost: 10.1.2.3:8787\r\nuser-agent: kube-probe/1.31\r\n\
         connection: close",
        "",
    );
    assert!(status.contains(" 200 "), "{status} {body}");
    assert!(!body.contains("anthropic"), "details to a probe: {body}");
    // A loopback name still gets the details `pith run` and `pith doctor` read.
    let (status, body) = raw(
        pith.addr,
        "GET /pith/health HTTP/1.1\r\nhost: localhost\r\nconnection: close",
        "",
    );
    assert!(status.contains(" 200 "), "{status}");
    let health: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["pith"], env!("CARGO_PKG_VERSION"), "{health}");
    // Other pages stay behind the rules.
    let (status, _) = raw(
        pith.addr,
        "GET /pith/api/stats HTTP/1.1\r\nhost: 10.1.2.3:8787\r\nconnection: close",
        "",
    );
    assert!(status.contains(" 403 "), "{status}");

    // A proxy with a token: the probe has none, and still learns only that it is up.
    let guarded = PithProxy::start(&mock.url(), &[("PITH_PROXY_TOKEN", "s3cret")]);
    let (status, body) = raw(
        guarded.addr,
        "GET /pith/health HTTP/1.1\r\nhost: 10.1.2.3:8787\r\nconnection: close",
        "",
    );
    assert!(status.contains(" 200 "), "{status} {body}");
    assert!(!body.contains("pid"), "{body}");
    let (status, _) = raw(
        guarded.addr,
        "GET /pith/api/stats HTTP/1.1\r\nhost: localhost\r\nconnection: close",
        "",
    );
    assert!(status.contains(" 401 "), "{status}");

    // The shipped gateway config, HAProxy's plain check: both instances taken in.
    let haproxy = Haproxy::start(&[pith.addr, guarded.addr], Duration::from_millis(100)).unwrap();
    for name in ["pith1", "pith2"] {
        assert!(
            haproxy.wait_for(name, "UP", Duration::from_secs(10)),
            "{name} not taken in: {:?}",
            haproxy.servers()
        );
    }
    assert_eq!(mock.request_count(), 0);
}

/// Finding 10 (the spool): `ledger.db-spool` as a link is refused at start, naming it, and
/// nothing is created where it points; a real spool's directory is 0700 and its lock file
/// 0600 whatever the umask (the test's own: 022 or 002).
#[test]
fn the_spool_is_opened_through_no_link_and_its_lock_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), spool_dir(home.path())).unwrap();
    let mut child = Command::new(pith_bin())
        .args(["proxy", "--listen", "127.0.0.1:0"])
        .env("PITH_HOME", home.path())
        .env_remove("PITH_CONFIG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    // Killed if it is still running then: an old pith that starts through the link.
    let status = exit_within(child, Duration::from_secs(20));
    let said = reader.join().unwrap();
    assert!(
        status.is_some_and(|s| !s.success()),
        "pith started through a link: {said}"
    );
    assert!(said.contains("symbolic link"), "{said}");
    assert!(said.contains("ledger.db-spool"), "{said}");
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).unwrap().count(),
        0,
        "pith wrote where the link points"
    );

    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let spool = spool_dir(pith.home.path());
    assert_eq!(mode(&spool), 0o700);
    assert_eq!(mode(&spool.join("lock")), 0o600, "the spool's lock");
}
