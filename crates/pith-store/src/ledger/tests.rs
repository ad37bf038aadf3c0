//! The ledger's unit tests: migrations, writes and the totals kept on write.

use super::*;

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

#[test]
fn counters_accumulate() {
    let mut l = Ledger::open_in_memory().unwrap();
    assert_eq!(l.counter(DROPPED_ROWS).unwrap(), 0);
    l.add_counter(DROPPED_ROWS, 3).unwrap();
    l.add_counter(DROPPED_ROWS, 4).unwrap();
    assert_eq!(l.counter(DROPPED_ROWS).unwrap(), 7);
}

#[test]
fn outcomes_round_trip_by_name_and_name_who_caused_them() {
    for o in RequestOutcome::ALL {
        assert_eq!(RequestOutcome::parse(o.as_str()), o);
    }
    assert_eq!(
        RequestOutcome::parse("from_a_newer_pith"),
        RequestOutcome::PithError
    );
    assert_eq!(
        RequestOutcome::UpstreamBroken.caused_by(),
        Some(Party::Upstream)
    );
    assert_eq!(RequestOutcome::ClientError.caused_by(), Some(Party::Client));
    assert_eq!(RequestOutcome::Local.caused_by(), None);
}

/// Defer's rows from before schema 4 get savings priced at the cache state of the tools'
/// place in their prompt; the one-hour split they never had reads as none.
#[test]
fn schema_three_defer_rows_get_their_savings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let old = sqlite::open(&path, &MIGRATIONS[..3]).unwrap();
    let insert = "INSERT INTO requests (id, ts_ms, client, session, wire, provider, model,
            method, path, outcome, bytes_client, bytes_upstream, bytes_response, tools_bytes,
            system_bytes, messages_bytes, other_bytes, input_tokens, output_tokens,
            cache_write_tokens, cache_read_tokens, total_ms)
        VALUES (?1, ?1, 'c', 's', ?2, 'p', 'm', 'POST', '/', 'ok', 0, 0, 0, ?3, ?4, ?5, 0, ?6, 1,
            ?7, ?8, 1.0)";
    let fact =
        "INSERT INTO transform_facts VALUES (?1, 'defer', 1, 'chars', 'chars_kept_out', 4000)";
    let result = "INSERT INTO transform_results VALUES (?1, 'defer', 0, 'applied', NULL)";
    // (wire, tools, system, messages bytes; input, cache write, cache read tokens)
    let requests = [
        ("anthropic", 100, 100, 800, 10, 0, 5000), // a warm cache: the tools were read
        ("anthropic", 100, 100, 800, 10, 700, 0),  // a cold one: they were written
        ("responses", 100, 800, 100, 900, 0, 100), // after long instructions, uncached
    ];
    for (i, (wire, t, sy, m, input, w, r)) in requests.into_iter().enumerate() {
        let id = i as i64 + 1;
        old.execute(insert, params![id, wire, t, sy, m, input, w, r])
            .unwrap();
        old.execute(fact, params![id]).unwrap();
        old.execute(result, params![id]).unwrap();
    }
    drop(old);
    let l = Ledger::open(&path).unwrap();
    let bands: Vec<(String, i64)> = l
        .rows()
        .unwrap()
        .into_iter()
        .flat_map(|r| r.savings)
        .map(|s| (s.band, s.tokens))
        .collect();
    assert_eq!(
        bands,
        [
            ("cache_read".to_owned(), 1000),
            ("cache_write_5m".to_owned(), 1000),
            ("input".to_owned(), 1000)
        ]
    );
    let totals = l.savings(&Filter::default()).unwrap();
    assert_eq!(totals.iter().map(|t| t.tokens).sum::<i64>(), 3000);
    // A row written after the upgrade adds to the same (session, model) totals the
    // migration made, as a scan sees it.
    let mut l = l;
    l.insert(&[Row {
        ts_ms: 10,
        session: Some("s".into()),
        model: Some("m".into()),
        usage: Some(Usage {
            input: 1,
            cache_write: 50,
            cache_write_1h: 20,
            ..Usage::default()
        }),
        savings: vec![Saving {
            stage: "defer".into(),
            band: "cache_read".into(),
            tokens: 7,
        }],
        ..Row::default()
    }])
    .unwrap();
    let scanned = Filter {
        since_ms: Some(0),
        ..Filter::default()
    };
    let kept = l.savings(&Filter::default()).unwrap();
    assert_eq!(kept, l.savings(&scanned).unwrap());
    assert_eq!(kept.len(), 3, "{kept:?}");
    assert_eq!(kept[0].tokens, 1007, "{kept:?}");
    assert_eq!(l.groups(&scanned).unwrap()[0].usage.cache_write_1h, 20);
    // The latency histograms the migration made from the old rows, plus the new row.
    let (kept, scan) = (
        l.latency(&Filter::default()).unwrap(),
        l.latency(&scanned).unwrap(),
    );
    assert_eq!(kept, scan);
    assert_eq!(kept.total_ms.count, 4);
}

/// Rows from before schema 6 name no account (they are the ledger's own); the totals per
/// account the migration made are theirs, and rows written since add to them as a scan
/// sees it.
#[test]
fn schema_five_rows_are_the_ledgers_own_accounts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let at_five = Ledger {
        conn: sqlite::open(&path, &MIGRATIONS[..5]).unwrap(),
    };
    // Written as schema 5 wrote rows: the insert then had no account column.
    at_five
        .conn
        .execute_batch(
            "INSERT INTO requests (id, ts_ms, client, session, provider, model, method, path,
                outcome, bytes_client, bytes_upstream, bytes_response, tools_bytes,
                system_bytes, messages_bytes, other_bytes, input_tokens, output_tokens,
                total_ms)
             VALUES (1, 1, 'c', 's', 'anthropic', 'm', 'POST', '/', 'ok', 0, 0, 0, 0, 0, 0, 0,
                10, 1, 1.0),
                    (2, 2, 'c', 's', 'anthropic', 'm', 'POST', '/', 'ok', 0, 0, 0, 0, 0, 0, 0,
                20, 2, 1.0);
             INSERT INTO savings VALUES (1, 'defer', 'input', 5);",
        )
        .unwrap();
    drop(at_five);
    let mut l = Ledger::open(&path).unwrap();
    let accounts: Vec<Option<String>> = l.rows().unwrap().into_iter().map(|r| r.account).collect();
    assert_eq!(accounts, [None, None]);
    let groups = l.account_groups(&Filter::default()).unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(
        (
            groups[0].account.as_deref(),
            groups[0].totals.requests,
            groups[0].totals.usage.input
        ),
        (None, 2, 30)
    );
    l.insert(&[Row {
        ts_ms: 3,
        model: Some("m".into()),
        account: Some("alice".into()),
        usage: Some(Usage {
            input: 7,
            ..Usage::default()
        }),
        savings: vec![Saving {
            stage: "defer".into(),
            band: "input".into(),
            tokens: 3,
        }],
        ..Row::default()
    }])
    .unwrap();
    let scanned = Filter {
        since_ms: Some(0),
        ..Filter::default()
    };
    let kept = l.account_groups(&Filter::default()).unwrap();
    assert_eq!(kept, l.account_groups(&scanned).unwrap());
    let by: Vec<(Option<&str>, u64)> = kept
        .iter()
        .map(|g| (g.account.as_deref(), g.totals.usage.input))
        .collect();
    assert_eq!(by, [(None, 30), (Some("alice"), 7)]);
    let saved = l.account_savings(&Filter::default()).unwrap();
    assert_eq!(saved, l.account_savings(&scanned).unwrap());
    let saved: Vec<(Option<&str>, i64)> =
        saved.iter().map(|s| (s.key.as_deref(), s.tokens)).collect();
    assert_eq!(saved, [(None, 5), (Some("alice"), 3)]);
}

/// A ledger written by schema 1 (transforms as header text) reads back as structured data.
#[test]
fn schema_one_rows_are_carried_over() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let old = sqlite::open(&path, &MIGRATIONS[..1]).unwrap();
    let insert = "INSERT INTO requests (ts_ms, client, provider, method, path, outcome,
            bytes_client, bytes_upstream, bytes_response, tools_bytes, system_bytes,
            messages_bytes, other_bytes, total_ms, transforms, transform_skips,
            transform_failures, local)
        VALUES (?1, 'c', 'anthropic', 'POST', '/v1/messages', 'ok', 0, 0, 0, 0, 0, 0, 0, 1.0,
            ?2, ?3, ?4, 0)";
    old.execute(
        insert,
        params![1, "defer;tools=48;chars=41707", None::<String>, 0],
    )
    .unwrap();
    old.execute(
        insert,
        params![2, None::<String>, "defer:already_deferring", 1],
    )
    .unwrap();
    old.execute(insert, params![3, None::<String>, None::<String>, 0])
        .unwrap();
    drop(old);

    // A reader does not upgrade it; it says what does.
    let err = Ledger::open_read_only(&path).err().unwrap().to_string();
    assert!(
        err.contains("written by an older pith")
            && err.ends_with("run `pith proxy` once to upgrade it"),
        "{err}"
    );
    let l = Ledger::open(&path).unwrap();
    let rows = l.rows().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(Ledger::open_read_only(&path).unwrap().rows().unwrap(), rows);
    assert_eq!(
        rows[0].transforms,
        vec![applied(
            "defer",
            &[("tools", "count", 48), ("chars", "chars_kept_out", 41707)]
        )]
    );
    assert_eq!(
        rows[1].transform("defer"),
        Some(&TransformResult::Unchanged("already_deferring".into()))
    );
    assert!(matches!(
        rows[1].transform("unknown"),
        Some(TransformResult::Failed(_))
    ));
    assert!(rows[2].transforms.is_empty());
    let groups = l.groups(&Filter::default()).unwrap();
    assert_eq!(
        (groups[0].transformed, groups[0].transform_failures),
        (1, 1)
    );
}

/// A session's requests are paired for busts in arrival order: a row written after one that
/// arrived later (two writers, a long stream) is paired with what came before it, and the
/// later one is paired again with it; totals kept on write still equal a scan.
/// An Anthropic prompt fingerprint of `segments`, cached through the last one.
fn cached_through_last(segments: &[u64]) -> Vec<u8> {
    pith_wire::fingerprint::Fingerprint {
        segments: segments.to_vec(),
        breakpoints: vec![(segments.len() - 1) as u32],
        automatic: false,
        layout: None,
    }
    .to_bytes()
}

/// `busts` with each bust's row id cleared: ledgers written in another order number their rows
/// otherwise.
fn without_ids(mut busts: CacheBusts) -> CacheBusts {
    for b in &mut busts.busts {
        b.id = 0;
    }
    busts
}

#[test]
fn busts_pair_in_arrival_order_whatever_the_write_order() {
    let fp = cached_through_last;
    let row = |arrival: i64, segments: &[u64]| Row {
        ts_ms: arrival / 1000,
        arrival_us: Some(arrival),
        session: Some("s".into()),
        model: Some("m".into()),
        path: "/v1/messages".into(),
        fingerprint: Some(fp(segments)),
        ..Row::default()
    };
    // Arrival order: a, then b appends to it (no bust), then c changes segment 1 (a bust).
    let (a, b, c) = (
        row(1_000, &[1, 2, 3]),
        row(2_000, &[1, 2, 3, 4]),
        row(3_000, &[1, 9, 7]),
    );
    let mut in_order = Ledger::open_in_memory().unwrap();
    in_order.insert(&[a.clone(), b.clone(), c.clone()]).unwrap();
    let mut out_of_order = Ledger::open_in_memory().unwrap();
    out_of_order.insert(std::slice::from_ref(&a)).unwrap();
    out_of_order.insert(std::slice::from_ref(&c)).unwrap();
    out_of_order.insert(std::slice::from_ref(&b)).unwrap();
    let all = Filter::default();
    let scanned = Filter {
        since_ms: Some(0),
        ..Filter::default()
    };
    let expected = without_ids(in_order.cache_busts(&all).unwrap());
    assert_eq!((expected.pairs, expected.by_client), (2, 1));
    assert_eq!(
        without_ids(out_of_order.cache_busts(&all).unwrap()),
        expected
    );
    assert_eq!(
        out_of_order.groups(&all).unwrap(),
        out_of_order.groups(&scanned).unwrap()
    );
    assert_eq!(
        out_of_order.groups(&all).unwrap(),
        in_order.groups(&all).unwrap()
    );
    // Rows read back in arrival order, not write order.
    let order: Vec<i64> = out_of_order
        .rows()
        .unwrap()
        .iter()
        .filter_map(|r| r.arrival_us)
        .collect();
    assert_eq!(order, [1_000, 2_000, 3_000]);
}

/// The chart's buckets of whole hours come from the totals kept on write and equal a scan of
/// the rows, with and without a `since` inside an hour, and for buckets of several hours.
#[test]
fn timeline_from_hourly_totals_equals_a_scan() {
    let mut ledger = Ledger::open_in_memory().unwrap();
    let mut rows = Vec::new();
    for i in 0..500i64 {
        rows.push(Row {
            ts_ms: 1_700_000_000_000 + i * 97_000,
            model: (i % 3 != 0).then(|| format!("m{}", i % 2)),
            session: Some(format!("s{}", i % 7)),
            path: "/v1/messages".into(),
            usage: (i % 5 != 0).then_some(Usage {
                input: i as u64,
                output: 2,
                cache_write: 3 * i as u64,
                cache_write_1h: i as u64,
                cache_read: 7,
            }),
            ..Row::default()
        });
    }
    ledger.insert(&rows).unwrap();
    let hour = 3_600_000;
    for since in [
        None,
        Some(1_700_000_000_000 + 5_000_000),
        Some(1_700_002_800_000),
    ] {
        for width in [hour, 3 * hour, 24 * hour] {
            let filter = Filter {
                since_ms: since,
                ..Filter::default()
            };
            let kept = ledger.timeline(&filter, width).unwrap();
            let scanned = ledger.timeline_scan(&filter, width, None).unwrap();
            assert_eq!(kept, scanned, "since {since:?}, width {width}");
            assert!(!kept.is_empty());
        }
    }
}

/// A bust pith caused is charged to the stage that caused it: the tokens the previous request
/// left cached that the next did not read, negative at the rate they were billed at and
/// positive at the read rate; written in any order the charge is the same, a client's own bust
/// is charged to no one, and rows read back (what a replica is sent) carry no charge.
#[test]
fn a_bust_pith_caused_is_charged_to_its_stage_in_any_write_order() {
    let fp = cached_through_last;
    let usage = |cache_write: u64, cache_read: u64| Usage {
        input: 10,
        output: 5,
        cache_write,
        cache_write_1h: 0,
        cache_read,
    };
    let defer = |applied: bool| Transform {
        stage: "defer".into(),
        result: if applied {
            TransformResult::Applied(vec![Fact {
                name: "tools".into(),
                kind: "count".into(),
                value: 3,
            }])
        } else {
            TransformResult::Unchanged("too_little_to_defer".into())
        },
    };
    let row = |arrival: i64, sent: &[u64], client: Option<&[u64]>, u: Usage, applied| Row {
        ts_ms: arrival / 1000,
        arrival_us: Some(arrival),
        session: Some("s".into()),
        model: Some("m".into()),
        wire: Some("anthropic".into()),
        path: "/v1/messages".into(),
        fingerprint: Some(fp(sent)),
        client_fingerprint: client.map(fp),
        usage: Some(u),
        transforms: vec![defer(applied)],
        ..Row::default()
    };
    // a cached 30,000 tokens; b (pith changed the tools, the client did not) read only 2,000
    // and wrote 29,000: 28,000 billed again at the 5-minute write rate. c is the client's own
    // change: a bust no one is charged for.
    let a = row(1_000, &[1, 2, 3], None, usage(30_000, 0), false);
    let b = row(
        2_000,
        &[1, 8, 3, 4],
        Some(&[1, 2, 3, 4]),
        usage(29_000, 2_000),
        true,
    );
    let c = row(3_000, &[1, 5, 6], None, usage(31_000, 500), false);
    let charges = |ledger: &Ledger| -> Vec<(String, String, i64)> {
        let mut v: Vec<_> = ledger
            .savings(&Filter::default())
            .unwrap()
            .into_iter()
            .map(|s| (s.stage, s.band, s.tokens))
            .collect();
        v.sort();
        v
    };
    let expected = vec![
        ("bust:defer".to_owned(), "cache_read".to_owned(), 28_000),
        (
            "bust:defer".to_owned(),
            "cache_write_5m".to_owned(),
            -28_000,
        ),
    ];
    let mut in_order = Ledger::open_in_memory().unwrap();
    in_order.insert(&[a.clone(), b.clone(), c.clone()]).unwrap();
    assert_eq!(charges(&in_order), expected);
    let busts = in_order.cache_busts(&Filter::default()).unwrap();
    assert_eq!((busts.pairs, busts.by_client), (2, 1));
    // b written first (paired with nothing), then c, then a: a's arrival re-pairs b.
    let mut out_of_order = Ledger::open_in_memory().unwrap();
    for r in [&b, &c, &a] {
        out_of_order.insert(std::slice::from_ref(r)).unwrap();
    }
    assert_eq!(charges(&out_of_order), expected);
    // ... and the totals kept on write equal a scan of the rows.
    let scanned = Filter {
        since_ms: Some(0),
        ..Filter::default()
    };
    let mut by_scan: Vec<_> = out_of_order
        .savings(&scanned)
        .unwrap()
        .into_iter()
        .map(|s| (s.stage, s.band, s.tokens))
        .collect();
    by_scan.sort();
    assert_eq!(by_scan, expected);
    // A request pith changed that busted nothing is charged nothing; after a re-pairing that
    // clears the bust, the charge is taken back (a row that arrived between a and b, the same
    // prompt as b as sent: b then busts nothing).
    let between = row(
        1_500,
        &[1, 8, 3],
        Some(&[1, 2, 3]),
        usage(25_000, 5_000),
        true,
    );
    out_of_order.insert(std::slice::from_ref(&between)).unwrap();
    let after: Vec<_> = charges(&out_of_order)
        .into_iter()
        .filter(|(_, _, t)| *t != 0)
        .collect();
    assert_eq!(
        after,
        vec![
            ("bust:defer".to_owned(), "cache_read".to_owned(), 25_000),
            (
                "bust:defer".to_owned(),
                "cache_write_5m".to_owned(),
                -25_000
            ),
        ],
        "the charge moved from b to the row between (a left 30,000 cached, it read 5,000)"
    );
    // Rows read back carry no charge: a replica pairs them again itself.
    assert!(
        out_of_order
            .rows()
            .unwrap()
            .iter()
            .all(|r| r.savings.iter().all(|s| !s.stage.starts_with(BUST_CHARGE)))
    );
}

/// The bust's cost: Anthropic's cached prefix is what the previous request read and wrote;
/// OpenAI caches a whole prompt; capped at the next prompt; nothing when all of it was read.
#[test]
fn a_bust_costs_the_cached_prefix_the_next_request_did_not_read() {
    use pith_wire::usage::{Band, Usage};
    let u = |input, cache_write, cache_write_1h, cache_read| Usage {
        input,
        output: 0,
        cache_write,
        cache_write_1h,
        cache_read,
    };
    // (OpenAI's automatic cache, the previous request's usage, this one's, what it cost)
    let cases = [
        (
            false,
            u(5, 1_000, 0, 9_000),
            u(5, 9_500, 0, 500),
            Some((Band::CacheWrite5m, 9_500)),
        ),
        (
            false,
            u(5, 1_000, 1_000, 9_000),
            u(5, 9_500, 9_500, 500),
            Some((Band::CacheWrite1h, 9_500)),
        ),
        // The next prompt is shorter than what was cached: capped at it.
        (
            false,
            u(0, 10_000, 0, 0),
            u(0, 4_000, 0, 1_000),
            Some((Band::CacheWrite5m, 4_000)),
        ),
        // It wrote nothing: billed again as input.
        (
            false,
            u(0, 10_000, 0, 0),
            u(10_000, 0, 0, 0),
            Some((Band::Input, 10_000)),
        ),
        (
            true,
            u(8_000, 0, 0, 4_000),
            u(11_000, 0, 0, 2_000),
            Some((Band::Input, 10_000)),
        ),
        (false, u(0, 5_000, 0, 0), u(0, 100, 0, 5_000), None),
    ];
    for (automatic, previous, next, cost) in cases {
        assert_eq!(
            super::write::bust_cost(automatic, &previous, &next),
            cost,
            "{previous:?} then {next:?}"
        );
    }
}

/// Rows written first and derived after, in any order of their derivations, end up as rows
/// written whole: the same busts, totals, charges and prompts; a derivation whose row is not
/// waiting changes nothing; rows still waiting are not shipped.
#[test]
fn derivations_written_after_their_rows_equal_rows_written_whole() {
    let fp = cached_through_last;
    let row = |arrival: i64, sent: &[u64], client: Option<&[u64]>, cache_read: u64| Row {
        ts_ms: arrival / 1000,
        arrival_us: Some(arrival),
        session: Some("s".into()),
        model: Some("m".into()),
        wire: Some("anthropic".into()),
        path: "/v1/messages".into(),
        fingerprint: Some(fp(sent)),
        client_fingerprint: client.map(fp),
        usage: Some(Usage {
            input: 10,
            output: 5,
            cache_write: 20_000,
            cache_write_1h: 0,
            cache_read,
        }),
        transforms: vec![Transform {
            stage: "defer".into(),
            result: TransformResult::Applied(Vec::new()),
        }],
        ..Row::default()
    };
    let rows = [
        row(1_000, &[1, 2, 3], None, 0),
        row(2_000, &[1, 8, 3, 4], Some(&[1, 2, 3, 4]), 1_000),
        row(3_000, &[1, 5, 6], None, 500),
        row(4_000, &[1, 5, 6, 7], None, 20_000),
    ];
    let mut whole = Ledger::open_in_memory().unwrap();
    whole.insert(&rows).unwrap();
    let all = Filter::default();
    let summary = |l: &Ledger| {
        let mut savings: Vec<_> = l
            .savings(&all)
            .unwrap()
            .into_iter()
            .map(|s| (s.stage, s.band, s.tokens))
            .filter(|s| s.2 != 0)
            .collect();
        savings.sort();
        (
            without_ids(l.cache_busts(&all).unwrap()),
            l.groups(&all).unwrap(),
            savings,
        )
    };
    let expected = summary(&whole);
    assert_eq!((expected.0.pairs, expected.0.by_pith), (3, 1));
    for order in [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]] {
        let mut split = Ledger::open_in_memory().unwrap();
        let pending: Vec<Row> = rows
            .iter()
            .map(|r| Row {
                fingerprint: None,
                client_fingerprint: None,
                derivations_pending: true,
                ..r.clone()
            })
            .collect();
        split.insert(&pending).unwrap();
        assert_eq!(split.derivations_pending().unwrap(), 4);
        assert!(split.rows_after(0, 10).unwrap().is_empty());
        for i in order {
            let d = Derivation {
                arrival_us: rows[i].arrival_us.unwrap(),
                fingerprint: rows[i].fingerprint.clone(),
                client_fingerprint: rows[i].client_fingerprint.clone(),
            };
            split
                .write_derived(std::slice::from_ref(&d), &[("c", 1)])
                .unwrap();
            // Twice: the second finds no row waiting.
            split.write_derived(&[d], &[]).unwrap();
        }
        assert_eq!(summary(&split), expected, "order {order:?}");
        assert_eq!(split.derivations_pending().unwrap(), 0);
        assert_eq!(split.counter("c").unwrap(), 1);
        assert_eq!(split.rows_after(0, 10).unwrap().len(), 4);
        assert_eq!(
            split.rows().unwrap(),
            whole.rows().unwrap(),
            "order {order:?}"
        );
    }
}

/// A session's page: its requests in arrival order (whatever the write order), none of
/// another session's, each with every stage's entry and its savings, and a bust pith caused
/// with the segment named from the busting request's layout and the stage charged for it.
#[test]
fn a_sessions_requests_come_in_arrival_order_with_the_bust_named() {
    use pith_wire::Wire;
    use pith_wire::fingerprint::Fingerprint;
    let body = |tools: serde_json::Value, text: &str| {
        serde_json::json!({"model": "m", "tools": tools,
            "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": text}]})
        .to_string()
    };
    let fp = |b: &str| {
        Fingerprint::of(Wire::AnthropicMessages, b.as_bytes())
            .unwrap()
            .to_bytes()
    };
    let tools = serde_json::json!([{"name": "a"}, {"name": "b"}]);
    let row = |session: &str, arrival: i64, sent: &str, client: Option<&str>| Row {
        ts_ms: arrival / 1000,
        arrival_us: Some(arrival),
        session: Some(session.into()),
        model: Some("m".into()),
        wire: Some("anthropic".into()),
        method: "POST".into(),
        path: "/v1/messages".into(),
        fingerprint: Some(fp(sent)),
        client_fingerprint: client.map(fp),
        usage: Some(Usage {
            input: 10,
            cache_read: 100,
            cache_write: 50,
            ..Usage::default()
        }),
        transforms: if client.is_some() {
            vec![applied("defer", &[("tools", "count", 1)])]
        } else {
            vec![Transform {
                stage: "defer".into(),
                result: TransformResult::Unchanged("too_little_to_defer".into()),
            }]
        },
        ..Row::default()
    };
    let first = body(tools.clone(), "q");
    // The client sent the same tools again; pith sent the second one changed.
    let client = body(tools.clone(), "q");
    let sent = body(serde_json::json!([{"name": "a"}, {"name": "b2"}]), "q");
    let (a, other, b) = (
        row("s", 1_000, &first, None),
        row("t", 1_500, &first, None),
        row("s", 2_000, &sent, Some(&client)),
    );
    let mut l = Ledger::open_in_memory().unwrap();
    l.insert(std::slice::from_ref(&b)).unwrap();
    l.insert(&[other, a]).unwrap();
    let page = l.session_requests("s", 100).unwrap().unwrap();
    assert_eq!(page.total, 2);
    let arrivals: Vec<_> = page.requests.iter().map(|r| r.arrival_us).collect();
    assert_eq!(arrivals, [Some(1_000), Some(2_000)], "arrival order");
    let (first, second) = (&page.requests[0], &page.requests[1]);
    assert!(first.bust.is_none());
    assert_eq!(
        first.stages,
        [StageEntry {
            stage: "defer".into(),
            result: "unchanged".into(),
            facts: Vec::new(),
            detail: Some("too_little_to_defer".into()),
        }]
    );
    assert!(second.compared);
    assert_eq!(second.stages[0].facts, [("tools".to_owned(), 1)]);
    assert_eq!(second.request.transforms, ["defer"]);
    let bust = second.bust.as_ref().unwrap();
    assert_eq!((bust.cause.as_str(), bust.segment), ("pith", 2));
    assert_eq!(
        bust.segment_words.as_deref(),
        Some("tool definition 2 of 2")
    );
    assert_eq!(bust.stage.as_deref(), Some("defer"));
    assert!(
        second
            .savings
            .iter()
            .any(|s| s.stage == "bust:defer" && s.tokens < 0),
        "the bust's charge is listed: {:?}",
        second.savings
    );
    // One request alone reads the same; a session or id the ledger lacks is none.
    assert_eq!(
        l.session_request(second.request.id).unwrap().as_ref(),
        Some(second)
    );
    assert_eq!(l.session_request(9_999).unwrap(), None);
    // The report's list of busts names them the same way.
    let listed = l.cache_busts(&Filter::default()).unwrap().busts;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].id,
            listed[0].segment_words.as_deref(),
            listed[0].stage.as_deref()
        ),
        (
            second.request.id,
            Some("tool definition 2 of 2"),
            Some("defer")
        )
    );
    assert_eq!(l.session_requests("nope", 100).unwrap(), None);
    // A limit keeps the newest, still oldest first.
    let newest = l.session_requests("s", 1).unwrap().unwrap();
    assert_eq!(
        (
            newest.total,
            newest.requests.len(),
            newest.requests[0].arrival_us
        ),
        (2, 1, Some(2_000))
    );
    // pith drops the second tool: the later prompt has its system block where the earlier
    // had that tool, and the bust is named by the part that shrank, from both prompts.
    let dropped = body(serde_json::json!([{"name": "a"}]), "q");
    l.insert(&[row("s", 3_000, &dropped, Some(&client))])
        .unwrap();
    let page = l.session_requests("s", 100).unwrap().unwrap();
    let bust = page.requests[2].bust.as_ref().unwrap();
    assert_eq!(
        (bust.cause.as_str(), bust.segment_words.as_deref()),
        ("pith", Some("tool definitions: 2, then 1"))
    );
}

/// The sampled rows summed: each outcome counted, and only counted rows with usage compared
/// (the count less the prompt billed; the savings of the same rows, bust charges aside, 0 for
/// a changed row with none); a row not sampled is in none of it.
#[test]
fn provider_counts_sum_the_sampled_rows_and_compare_those_with_usage() {
    let mut l = Ledger::open_in_memory().unwrap();
    let row = |outcome: Option<&str>,
               counted: Option<u64>,
               input: Option<u64>,
               saved: &[(&str, i64)]| Row {
        ts_ms: 1,
        provider_count_outcome: outcome.map(str::to_owned),
        provider_count_tokens: counted,
        usage: input.map(|input| Usage {
            input,
            cache_write: 100,
            cache_read: 1_000,
            ..Usage::default()
        }),
        savings: saved
            .iter()
            .map(|(stage, tokens)| Saving {
                stage: (*stage).into(),
                band: "cache_read".into(),
                tokens: *tokens,
            })
            .collect(),
        ..Row::default()
    };
    l.insert(&[
        row(
            Some("counted"),
            Some(5_000),
            Some(900),
            &[("defer", 2_500), ("outputs", 600)],
        ),
        // A charge for a bust the stage caused is not what it kept out.
        row(
            Some("counted"),
            Some(3_000),
            Some(400),
            &[("defer", 1_000), ("bust:defer", -700)],
        ),
        // Counted, but no usage: not compared.
        row(Some("counted"), Some(9_000), None, &[]),
        // Counted, with usage, and no saving row: compared, estimated 0.
        row(Some("counted"), Some(2_000), Some(800), &[]),
        row(Some("rate_limited"), None, Some(10), &[("defer", 50)]),
        row(Some("paused"), None, Some(10), &[("defer", 50)]),
        row(Some("failed"), None, Some(10), &[("defer", 50)]),
        row(None, None, Some(10), &[("defer", 50)]),
    ])
    .unwrap();
    let sums = l.provider_counts(&Filter::default()).unwrap();
    assert_eq!(
        sums,
        ProviderCountSums {
            sampled: 7,
            counted: 4,
            rate_limited: 1,
            paused: 1,
            failed: 1,
            compared: 3,
            // (5000 - 2000) + (3000 - 1500) + (2000 - 1900)
            counted_kept_out: 3_000 + 1_500 + 100,
            estimated_kept_out: 3_100 + 1_000,
        }
    );
}
