//! The ledger's behaviour, the same on every backend: what is written reads back, totals kept
//! as rows are written agree with a scan of the rows, busts are decided in write order, stage
//! results sum per stage.

use pith_store::ledger::{
    Fact, Filter, Group, RequestOutcome, Row, Saving, StageTotals, Transform, TransformResult,
    Usage,
};

use crate::backend::{BACKENDS, Backend, Subject};

/// Run `test` on every backend, saying which one a failure was on.
fn each_backend(test: fn(Backend)) {
    for backend in BACKENDS {
        eprintln!("backend: {backend:?}");
        test(backend);
    }
}

#[test]
fn totals_kept_on_write_equal_a_scan_of_the_rows() {
    each_backend(totals_kept_on_write_equal_a_scan_of_the_rows_on);
}

fn totals_kept_on_write_equal_a_scan_of_the_rows_on(backend: Backend) {
    use pith_wire::fingerprint::Fingerprint;
    let mut ledger = Subject::new(backend);
    let outcomes = [
        RequestOutcome::Ok,
        RequestOutcome::Local,
        RequestOutcome::UpstreamError,
        RequestOutcome::ClientClosed,
    ];
    let mut rows = Vec::new();
    for i in 0..200u64 {
        let transforms = match i % 3 {
            0 => vec![Transform {
                stage: "defer".into(),
                result: TransformResult::Applied(vec![Fact {
                    name: "tools".into(),
                    kind: "count".into(),
                    value: i,
                }]),
            }],
            1 => vec![Transform {
                stage: "defer".into(),
                result: TransformResult::Unchanged(format!("reason_{}", i % 2)),
            }],
            _ => vec![Transform {
                stage: "pins".into(),
                result: TransformResult::Failed("boom".into()),
            }],
        };
        let fp = Fingerprint {
            segments: (0..(3 + i % 4)).map(|k| k * (1 + (i / 10) % 3)).collect(),
            breakpoints: vec![1],
            automatic: false,
            layout: None,
        };
        rows.push(Row {
            ts_ms: 1_000 + (i as i64 * 7919) % 1000,
            client: ["a", "b"][(i % 2) as usize].into(),
            session: (i % 7 != 0).then(|| format!("s{}", i % 5)),
            model: (i % 11 != 0).then(|| format!("m{}", i % 2)),
            path: "/v1/messages".into(),
            outcome: outcomes[(i % 4) as usize],
            total_ms: (i * 977 % 40_000) as f64 + 0.25,
            ttfb_ms: (i % 4 != 0).then_some((i * 131 % 3_000) as f64 + 0.5),
            usage: (i % 3 != 2).then_some(Usage {
                input: i,
                output: 2 * i,
                cache_write: i % 10,
                cache_write_1h: i % 4,
                cache_read: 100 + i,
            }),
            savings: match i % 3 {
                0 => vec![Saving {
                    stage: "defer".into(),
                    band: ["cache_read", "input"][(i % 2) as usize].into(),
                    tokens: i as i64 - 50,
                }],
                _ => Vec::new(),
            },
            transforms,
            fingerprint: Some(fp.to_bytes()),
            ..Row::default()
        });
    }
    for chunk in rows.chunks(17) {
        ledger.insert(chunk);
    }
    let ledger = ledger.read();
    // A filter with a start time is computed from the rows themselves: the totals kept on
    // write must agree with it.
    let all = Filter::default();
    let scanned = Filter {
        since_ms: Some(0),
        ..Filter::default()
    };
    assert_eq!(
        ledger.groups(&all).unwrap(),
        ledger.groups(&scanned).unwrap()
    );
    let one = Filter {
        session: Some("s3".into()),
        ..Filter::default()
    };
    let one_scanned = Filter {
        since_ms: Some(0),
        ..one.clone()
    };
    assert_eq!(
        ledger.groups(&one).unwrap(),
        ledger.groups(&one_scanned).unwrap()
    );
    assert_eq!(
        ledger.stage_totals(&all).unwrap(),
        ledger.stage_totals(&scanned).unwrap()
    );
    let busts = ledger.cache_busts(&all).unwrap();
    assert_eq!(busts, ledger.cache_busts(&scanned).unwrap());
    assert!(busts.pairs > 0 && busts.by_client > 0, "{busts:?}");
    // Latency: the same counts; the sums added in another order agree to rounding.
    let (kept, scan) = (
        ledger.latency(&all).unwrap(),
        ledger.latency(&scanned).unwrap(),
    );
    for (k, s) in [
        (&kept.total_ms, &scan.total_ms),
        (&kept.ttfb_ms, &scan.ttfb_ms),
    ] {
        assert_eq!((&k.cumulative, k.count), (&s.cumulative, s.count));
        assert!(
            (k.sum_ms - s.sum_ms).abs() < 1e-6,
            "{} {}",
            k.sum_ms,
            s.sum_ms
        );
    }
    assert!(
        kept.total_ms.count == 200 && kept.ttfb_ms.count > 0,
        "{kept:?}"
    );
    assert!(
        kept.total_ms.cumulative.windows(2).any(|w| w[0] < w[1]),
        "{kept:?}"
    );
    // A timeline holds every row once, whatever the bucket width.
    let groups = ledger.groups(&all).unwrap();
    for width in [1, 100, 1_000_000] {
        let timeline = ledger.timeline(&all, width).unwrap();
        assert_eq!(timeline.iter().map(|b| b.requests).sum::<u64>(), 200);
        assert_eq!(
            timeline.iter().map(|b| b.usage).sum::<Usage>(),
            groups.iter().map(|g| g.usage).sum::<Usage>()
        );
        assert!(timeline.iter().all(|b| b.start_ms % width == 0));
    }
    let (first, last) = (
        rows.iter().map(|r| r.ts_ms).min(),
        rows.iter().map(|r| r.ts_ms).max(),
    );
    assert_eq!(ledger.span(&all).unwrap(), first.zip(last));
    let savings = ledger.savings(&all).unwrap();
    assert_eq!(savings, ledger.savings(&scanned).unwrap());
    // Negative savings are summed as they are, not floored.
    assert!(savings.iter().any(|s| s.tokens < 0), "{savings:?}");
    let by_session = Filter {
        session: Some("s3".into()),
        ..Filter::default()
    };
    let s3 = ledger.savings(&by_session).unwrap();
    assert!(!s3.is_empty() && s3.iter().all(|s| s.key.as_deref() == Some("s3")));
    assert_eq!(
        s3,
        ledger
            .savings(&Filter {
                since_ms: Some(0),
                ..by_session
            })
            .unwrap()
    );
    // And each row's usage and savings read back as written, in arrival order (these rows
    // say none: they arrived at their ts_ms).
    let read: Vec<_> = ledger
        .rows()
        .unwrap()
        .into_iter()
        .map(|r| (r.usage, r.savings))
        .collect();
    rows.sort_by_key(|r| r.ts_ms);
    let written: Vec<_> = rows.into_iter().map(|r| (r.usage, r.savings)).collect();
    assert_eq!(read, written);
}

#[test]
fn a_bust_is_decided_when_its_row_is_written() {
    each_backend(a_bust_is_decided_when_its_row_is_written_on);
}

fn a_bust_is_decided_when_its_row_is_written_on(backend: Backend) {
    use pith_wire::fingerprint::Fingerprint;
    let fp = |segments: &[u64]| {
        Fingerprint {
            segments: segments.to_vec(),
            breakpoints: vec![(segments.len() - 1) as u32],
            automatic: false,
            layout: None,
        }
        .to_bytes()
    };
    let row = |sent: Vec<u8>, client: Option<Vec<u8>>| Row {
        session: Some("s".into()),
        model: Some("m".into()),
        path: "/v1/messages".into(),
        fingerprint: Some(sent),
        client_fingerprint: client,
        ..Row::default()
    };
    let mut ledger = Subject::new(backend);
    ledger.insert(&[row(fp(&[1, 2, 3]), None)]);
    // The client appended: no bust.
    ledger.insert(&[row(fp(&[1, 2, 3, 4]), None)]);
    // pith changed segment 1 though the client kept it: pith's bust.
    ledger.insert(&[row(fp(&[1, 9, 3, 4, 5]), Some(fp(&[1, 2, 3, 4, 5])))]);
    // The client changed segment 2 itself.
    ledger.insert(&[row(fp(&[1, 9, 7]), None)]);
    let busts = ledger.read().cache_busts(&Filter::default()).unwrap();
    assert_eq!((busts.pairs, busts.by_pith, busts.by_client), (3, 1, 1));
    let causes: Vec<(&str, u64)> = busts
        .busts
        .iter()
        .map(|b| (b.cause.as_str(), b.segment))
        .collect();
    assert_eq!(causes, [("client", 2), ("pith", 1)], "newest first");
}

#[test]
fn round_trip_and_groups() {
    each_backend(round_trip_and_groups_on);
}

fn round_trip_and_groups_on(backend: Backend) {
    let mut l = Subject::new(backend);
    let u = Usage {
        input: 10,
        output: 5,
        cache_write: 100,
        cache_write_1h: 40,
        cache_read: 1000,
    };
    let rows = vec![
        row("s1", "m1", 1, Some(u)),
        row("s1", "m1", 2, Some(u)),
        row("s1", "m2", 3, None),
        row("s2", "m1", 4, Some(u)),
    ];
    l.insert(&rows);
    let l = l.read();
    assert_eq!(l.rows().unwrap(), rows);
    let all = l.groups(&Filter::default()).unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(
        (all[0].requests, all[0].usage.input, all[0].usage.cache_read),
        (2, 20, 2000)
    );
    assert_eq!((all[1].requests, all[1].with_usage), (1, 0));
    let s2 = l
        .groups(&Filter {
            session: Some("s2".into()),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(s2.len(), 1);
    let recent = l
        .groups(&Filter {
            since_ms: Some(3),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(recent.iter().map(|g| g.requests).sum::<u64>(), 2);
}

#[test]
fn transform_entries_round_trip_in_pipeline_order_and_sum_per_stage() {
    each_backend(transform_entries_round_trip_in_pipeline_order_and_sum_per_stage_on);
}

fn transform_entries_round_trip_in_pipeline_order_and_sum_per_stage_on(backend: Backend) {
    let mut l = Subject::new(backend);
    let mut a = row("s1", "m1", 1, None);
    // "zeta" runs before "defer": the order read back is the pipeline's, not the names'.
    a.transforms = vec![
        unchanged("zeta", "no_match"),
        applied(
            "defer",
            &[("tools", "count", 48), ("chars", "chars_kept_out", 41707)],
        ),
    ];
    let mut b = row("s1", "m1", 2, None);
    b.transforms = vec![
        applied(
            "defer",
            &[("tools", "count", 2), ("chars", "chars_kept_out", 3)],
        ),
        Transform {
            stage: "zeta".into(),
            result: TransformResult::Failed("panicked: boom".into()),
        },
    ];
    let mut c = row("s2", "m1", 3, None);
    c.transforms = vec![unchanged("defer", "already_deferring")];
    c.outcome = RequestOutcome::Local;
    let rows = vec![a, b, c];
    l.insert(&rows);
    let l = l.read();
    assert_eq!(l.rows().unwrap(), rows);
    assert_eq!(
        rows[0].transform("zeta"),
        Some(&TransformResult::Unchanged("no_match".into()))
    );

    let totals = l.stage_totals(&Filter::default()).unwrap();
    assert_eq!(
        totals,
        vec![
            StageTotals {
                stage: "defer".into(),
                applied: 2,
                failed: 0,
                unchanged: vec![("already_deferring".into(), 1)],
                facts: vec![
                    ("chars".into(), "chars_kept_out".into(), 41710),
                    ("tools".into(), "count".into(), 50),
                ],
            },
            StageTotals {
                stage: "zeta".into(),
                applied: 0,
                failed: 1,
                unchanged: vec![("no_match".into(), 1)],
                facts: vec![],
            },
        ]
    );
    let s2 = l
        .stage_totals(&Filter {
            session: Some("s2".into()),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(s2.len(), 1);
    assert_eq!((s2[0].applied, s2[0].unchanged.len()), (0, 1));

    let groups = l.groups(&Filter::default()).unwrap();
    assert_eq!(
        (groups[0].transformed, groups[0].transform_failures),
        (2, 1)
    );
    assert_eq!((groups[1].local, groups[1].errors), (1, 0));
}
#[test]
fn each_request_keeps_its_account_and_totals_per_account_equal_a_scan() {
    each_backend(each_request_keeps_its_account_and_totals_per_account_equal_a_scan_on);
}

fn each_request_keeps_its_account_and_totals_per_account_equal_a_scan_on(backend: Backend) {
    let mut ledger = Subject::new(backend);
    let accounts = [Some("alice"), Some("bob"), None];
    let rows: Vec<Row> = (0..60u64)
        .map(|i| Row {
            account: accounts[(i % 3) as usize].map(str::to_owned),
            ts_ms: i as i64,
            session: Some(format!("s{}", i % 4)),
            model: Some(format!("m{}", i % 2)),
            outcome: [RequestOutcome::Ok, RequestOutcome::UpstreamError][(i % 5 == 0) as usize],
            usage: (i % 7 != 0).then_some(Usage {
                input: i,
                output: 1,
                cache_write: i % 3,
                cache_write_1h: i % 2,
                cache_read: 10,
            }),
            savings: vec![Saving {
                stage: "defer".into(),
                band: "input".into(),
                tokens: i as i64 - 20,
            }],
            total_ms: 1.0,
            ..row("s", "m", i as i64, None)
        })
        .collect();
    // Two batches: on PostgreSQL from two proxies, whose own accounts fill the rows naming none.
    ledger.insert(&rows[..30]);
    ledger.insert(&rows[30..]);
    let backend = ledger.backend();
    let read = ledger.read();
    let expected: Vec<Option<String>> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| match (&r.account, backend) {
            (Some(a), _) => Some(a.clone()),
            (None, Backend::Sqlite) => None,
            (None, Backend::Postgres) => Some(format!("proxy-{}", [11, 22][i / 30])),
        })
        .collect();
    let got: Vec<Option<String>> = read
        .rows()
        .unwrap()
        .into_iter()
        .map(|r| r.account)
        .collect();
    assert_eq!(got, expected);

    let all = Filter::default();
    let scanned = Filter {
        since_ms: Some(0),
        ..Filter::default()
    };
    let kept = read.account_groups(&all).unwrap();
    assert_eq!(kept, read.account_groups(&scanned).unwrap());
    let alice: Vec<_> = kept
        .iter()
        .filter(|g| g.account.as_deref() == Some("alice"))
        .collect();
    assert_eq!(alice.iter().map(|g| g.totals.requests).sum::<u64>(), 20);
    let alice_usage: Usage = rows
        .iter()
        .filter(|r| r.account.as_deref() == Some("alice"))
        .filter_map(|r| r.usage)
        .sum();
    assert_eq!(
        alice.iter().map(|g| g.totals.usage).sum::<Usage>(),
        alice_usage
    );
    // Every row is in exactly one account's totals, and they add up to the sessions' totals.
    let sessions = read.groups(&all).unwrap();
    let fields: [fn(&Group) -> u64; 3] = [|g| g.requests, |g| g.usage.input, |g| g.errors];
    for field in fields {
        assert_eq!(
            kept.iter().map(|g| field(&g.totals)).sum::<u64>(),
            sessions.iter().map(field).sum::<u64>()
        );
    }
    let saved = read.account_savings(&all).unwrap();
    assert_eq!(saved, read.account_savings(&scanned).unwrap());
    assert_eq!(
        saved.iter().map(|s| s.tokens).sum::<i64>(),
        rows.iter()
            .flat_map(|r| &r.savings)
            .map(|s| s.tokens)
            .sum::<i64>()
    );
    // A session filter is answered from the rows of that session only.
    let s1 = Filter {
        session: Some("s1".into()),
        ..Filter::default()
    };
    assert_eq!(
        read.account_groups(&s1)
            .unwrap()
            .iter()
            .map(|g| g.totals.requests)
            .sum::<u64>(),
        15
    );
}

#[test]
fn each_request_names_the_instance_that_served_it_and_totals_per_instance_equal_a_scan() {
    each_backend(
        each_request_names_the_instance_that_served_it_and_totals_per_instance_equal_a_scan_on,
    );
}

fn each_request_names_the_instance_that_served_it_and_totals_per_instance_equal_a_scan_on(
    backend: Backend,
) {
    let mut ledger = Subject::new(backend);
    let instances = [Some("gw-1"), Some("gw-2"), None];
    let rows: Vec<Row> = (0..30u64)
        .map(|i| Row {
            instance: instances[(i % 3) as usize].map(str::to_owned),
            outcome: [RequestOutcome::Ok, RequestOutcome::UpstreamError][(i % 5 == 0) as usize],
            ..row(&format!("s{}", i % 4), "m", i as i64, None)
        })
        .collect();
    ledger.insert(&rows[..15]);
    ledger.insert(&rows[15..]);
    let read = ledger.read();
    let got: Vec<Option<String>> = read
        .rows()
        .unwrap()
        .into_iter()
        .map(|r| r.instance)
        .collect();
    let want: Vec<Option<String>> = rows.iter().map(|r| r.instance.clone()).collect();
    assert_eq!(got, want);
    let kept = read.instance_totals(&Filter::default()).unwrap();
    let scanned = read
        .instance_totals(&Filter {
            since_ms: Some(0),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(kept, scanned);
    assert_eq!(kept.len(), 3);
    assert_eq!(kept.iter().map(|i| i.requests).sum::<u64>(), 30);
    let gw1 = kept
        .iter()
        .find(|i| i.instance.as_deref() == Some("gw-1"))
        .unwrap();
    assert_eq!(
        (gw1.requests, gw1.errors, gw1.first_ms, gw1.last_ms),
        (10, 2, 0, 27)
    );
    // Since a time: only the rows from then on.
    let late = read
        .instance_totals(&Filter {
            since_ms: Some(20),
            ..Filter::default()
        })
        .unwrap();
    assert_eq!(late.iter().map(|i| i.requests).sum::<u64>(), 10);
}

fn row(session: &str, model: &str, ts: i64, usage: Option<Usage>) -> Row {
    Row {
        account: Some("alice".into()),
        ts_ms: ts,
        client: "claude-code".into(),
        session: Some(session.into()),
        wire: Some("anthropic".into()),
        provider: "anthropic".into(),
        model: Some(model.into()),
        method: "POST".into(),
        path: "/v1/messages".into(),
        status: Some(200),
        outcome: RequestOutcome::Ok,
        usage,
        total_ms: 1.5,
        ..Row::default()
    }
}

fn applied(stage: &str, facts: &[(&str, &str, u64)]) -> Transform {
    Transform {
        stage: stage.into(),
        result: TransformResult::Applied(
            facts
                .iter()
                .map(|(name, kind, value)| Fact {
                    name: (*name).into(),
                    kind: (*kind).into(),
                    value: *value,
                })
                .collect(),
        ),
    }
}

fn unchanged(stage: &str, reason: &str) -> Transform {
    Transform {
        stage: stage.into(),
        result: TransformResult::Unchanged(reason.into()),
    }
}
