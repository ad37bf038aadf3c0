use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pith_history::token::DEFAULT_TTL_MS;
use proptest::prelude::*;

use pith_testkit::postgres::PgServer;

use super::ship::{Backlog, ShipReport};
use super::*;

#[derive(Debug, Clone, Copy)]
enum Backend {
    Sqlite,
    Postgres,
}

/// A new, empty history: in memory, or in a fresh database of the test PostgreSQL.
fn fresh(backend: Backend) -> History {
    match backend {
        Backend::Sqlite => History::open_in_memory().unwrap(),
        Backend::Postgres => {
            let url = StoreUrl::new(PgServer::shared().database().unwrap());
            History::open_team(&url).unwrap()
        }
    }
}

/// Run `test` on a fresh history of each backend, saying which one a failure was on.
fn each_backend(test: impl Fn(History)) {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        eprintln!("backend: {backend:?}");
        test(fresh(backend));
    }
}

const NOW: i64 = 1_800_000_000_000;

fn key() -> TokenKey {
    TokenKey::from_hex(&"5a".repeat(32)).unwrap()
}

fn message(role: &str, text: &str) -> NewMessage {
    NewMessage {
        role: role.into(),
        real_user: role == "user",
        text: text.into(),
        typed: String::new(),
        ts_ms: NOW,
        outputs: Vec::new(),
    }
}

/// Import a conversation with `roles` as its messages; its id.
fn conversation(history: &mut History, account: &str, session: &str, roles: &[&str]) -> String {
    conversation_of(history, account, AgentType::Public, session, roles)
}

/// One message of each role in `roles`, saying something in `session`.
fn said_in(session: &str, roles: &[&str]) -> Vec<NewMessage> {
    roles
        .iter()
        .map(|r| message(r, &format!("{r} said something in {session}")))
        .collect()
}

fn conversation_of(
    history: &mut History,
    account: &str,
    agent_type: AgentType,
    session: &str,
    roles: &[&str],
) -> String {
    let imported = Imported {
        session_id: session.into(),
        client: "claude-code",
        started_ms: NOW,
        messages: said_in(session, roles),
    };
    history.import(account, agent_type, &imported).unwrap();
    conversation_id(account, Source::Import, "claude-code", session)
}

/// The same conversation as the proxy records it (its messages as one request's prompt), then
/// a side call in its session (another first message: a title request), which adds nothing to
/// a conversation that holds a message.
fn recorded_with_a_side_call(
    history: &mut History,
    account: &str,
    agent_type: AgentType,
    session: &str,
    roles: &[&str],
) -> String {
    let turn = |messages: Vec<NewMessage>| Turn {
        account: account.into(),
        client: "claude-code".into(),
        session_id: session.into(),
        agent_type,
        ts_ms: NOW,
        messages,
        reply: None,
        excerpts: Vec::new(),
    };
    history.record(&[turn(said_in(session, roles))]).unwrap();
    let id = conversation_id(account, Source::Proxy, "claude-code", session);
    let before = history.show(account, &id).unwrap().map(|(c, _)| c.messages);
    let side = vec![message(
        "user",
        "Generate a title for this conversation: fix calc",
    )];
    history.record(&[turn(side)]).unwrap();
    let after = history.show(account, &id).unwrap().map(|(c, _)| c.messages);
    // With no message held the store cannot tell a side call from a first turn (the proxy's
    // client rules keep side calls out before they reach it); with one, it adds nothing.
    if before.is_some_and(|n| n > 0) {
        assert_eq!(before, after, "a side call changed the conversation");
    }
    id
}

fn trashed(history: &History, account: &str) -> Vec<String> {
    let mut ids: Vec<String> = history
        .list(account, true, 1000)
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort();
    ids
}

fn find(history: &History, account: &str, filter: Filter, dry_run: bool) -> Candidates {
    history
        .find_candidates(
            &key(),
            account,
            filter,
            None,
            50,
            dry_run,
            NOW,
            DEFAULT_TTL_MS,
        )
        .unwrap()
}

#[test]
fn candidates_are_the_filters_matches_and_delete_trashes_exactly_them() {
    each_backend(|mut h| {
        let empty = conversation(&mut h, "local", "s-empty", &[]);
        let single = conversation(&mut h, "local", "s-single", &["assistant"]);
        conversation(&mut h, "local", "s-user", &["user"]);
        conversation(&mut h, "local", "s-real", &["user", "assistant"]);
        conversation(&mut h, "team-b", "s-other-empty", &[]);

        let found = find(&h, "local", Filter::Empty, false);
        assert_eq!((found.matched, found.sampled), (1, 1));
        assert_eq!(found.items[0].id, empty);
        let found_single = find(&h, "local", Filter::SingleAssistant, false);
        assert_eq!(found_single.items.len(), 1);
        assert_eq!(found_single.items[0].id, single);
        assert_eq!(found_single.items[0].assistant_msg_count, 1);

        let done = h
            .delete(&key(), "local", &found.filter_token, None, NOW + 1)
            .unwrap();
        assert_eq!(done.changed, std::slice::from_ref(&empty));
        assert_eq!(trashed(&h, "local"), std::slice::from_ref(&empty));
        assert!(trashed(&h, "team-b").is_empty());

        // The same token again: it deleted once, so it is refused.
        let again = h.delete(&key(), "local", &found.filter_token, None, NOW + 2);
        assert!(
            matches!(again, Err(HistoryError::Token(TokenError::Used))),
            "{again:?}"
        );

        let restored = h.restore("local", std::slice::from_ref(&empty)).unwrap();
        assert_eq!(restored.changed, [empty]);
        assert!(trashed(&h, "local").is_empty());
    });
}

#[test]
fn refused_tokens_change_nothing() {
    each_backend(|mut h| {
        conversation(&mut h, "local", "e1", &[]);
        conversation(&mut h, "local", "e2", &[]);
        let real = find(&h, "local", Filter::Empty, false);
        let token = real.filter_token.clone();

        let mut refused = Vec::new();
        // Every byte changed, one at a time.
        for i in 0..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            refused.push(String::from_utf8(bytes).unwrap());
        }
        // The claims rewritten for another filter (or more ids) without the key.
        let (payload, signature) = token.split_once('.').unwrap();
        let claims = URL_SAFE_NO_PAD.decode(payload).unwrap();
        let other_filter = String::from_utf8(claims)
            .unwrap()
            .replace("\"empty\"", "\"single-assistant\"");
        refused.push(format!(
            "{}.{signature}",
            URL_SAFE_NO_PAD.encode(other_filter.as_bytes())
        ));
        for bad in &refused {
            let err = h.delete(&key(), "local", bad, None, NOW + 1).unwrap_err();
            assert!(matches!(err, HistoryError::Token(_)), "{bad}: {err}");
        }
        // Expired, another account's, a dry run's.
        let expired = h.delete(&key(), "local", &token, None, NOW + DEFAULT_TTL_MS);
        assert!(matches!(
            expired,
            Err(HistoryError::Token(TokenError::Expired { .. }))
        ));
        let other_account = h.delete(&key(), "team-b", &token, None, NOW + 1);
        assert!(matches!(
            other_account,
            Err(HistoryError::Token(TokenError::WrongAccount))
        ));
        let dry = find(&h, "local", Filter::Empty, true);
        let dry_run = h.delete(&key(), "local", &dry.filter_token, None, NOW + 1);
        assert!(matches!(
            dry_run,
            Err(HistoryError::Token(TokenError::DryRun))
        ));
        // Another key's token.
        let other_key = TokenKey::from_hex(&"a5".repeat(32)).unwrap();
        let foreign = h
            .find_candidates(
                &other_key,
                "local",
                Filter::Empty,
                None,
                50,
                false,
                NOW,
                DEFAULT_TTL_MS,
            )
            .unwrap();
        let foreign = h.delete(&key(), "local", &foreign.filter_token, None, NOW + 1);
        assert!(matches!(
            foreign,
            Err(HistoryError::Token(TokenError::BadSignature))
        ));

        assert!(trashed(&h, "local").is_empty(), "nothing was trashed");
    });
}

#[test]
fn a_token_for_another_filter_trashes_nothing_its_filter_does_not_match() {
    each_backend(|mut h| {
        let empty = conversation(&mut h, "local", "e", &[]);
        // A genuine token for single-assistant that names the empty conversation.
        let claims = Claims {
            v: VERSION,
            account: "local".into(),
            filter: Filter::SingleAssistant,
            agent_type: None,
            ids: vec![empty.clone()],
            iat: NOW,
            exp: NOW + DEFAULT_TTL_MS,
            dry_run: false,
        };
        let token = key().sign(&claims);
        let done = h.delete(&key(), "local", &token, None, NOW + 1).unwrap();
        assert!(done.changed.is_empty());
        assert_eq!(
            done.skipped[0].reason,
            "no longer matches filter single-assistant (it has 0 messages now)"
        );
        assert!(trashed(&h, "local").is_empty());
    });
}

#[test]
fn a_conversation_that_gained_a_message_is_skipped_with_a_reason() {
    each_backend(|mut h| {
        let growing = conversation(&mut h, "local", "grows", &[]);
        let stays = conversation(&mut h, "local", "stays", &[]);
        let found = find(&h, "local", Filter::Empty, false);
        assert_eq!(found.sampled, 2);
        conversation(&mut h, "local", "grows", &["user"]);
        let done = h
            .delete(&key(), "local", &found.filter_token, None, NOW + 1)
            .unwrap();
        assert_eq!(done.changed, [stays]);
        assert_eq!(done.skipped.len(), 1);
        assert_eq!(done.skipped[0].id, growing);
        assert_eq!(
            done.skipped[0].reason,
            "no longer matches filter empty (it has 1 messages now)"
        );
    });
}

#[test]
fn ids_narrow_the_token_and_never_extend_it() {
    each_backend(|mut h| {
        let a = conversation(&mut h, "local", "a", &[]);
        let b = conversation(&mut h, "local", "b", &[]);
        let found = find(&h, "local", Filter::Empty, false);
        let late = conversation(&mut h, "local", "late", &[]);
        let ids = vec![b.clone(), late.clone()];
        let done = h
            .delete(&key(), "local", &found.filter_token, Some(&ids), NOW + 1)
            .unwrap();
        assert_eq!(done.changed, std::slice::from_ref(&b));
        assert_eq!(done.skipped[0].id, late);
        assert_eq!(trashed(&h, "local"), [b]);
        assert!(!trashed(&h, "local").contains(&a));
    });
}

#[test]
fn search_ranks_by_bm25_within_the_account_and_leaves_the_trash_out() {
    each_backend(|mut h| {
        let mut add = |account: &str, session: &str, text: &str| {
            let imported = Imported {
                session_id: session.into(),
                client: "codex",
                started_ms: NOW,
                messages: vec![message("user", text), message("assistant", "ok, done")],
            };
            h.import(account, AgentType::Public, &imported).unwrap();
            conversation_id(account, Source::Import, "codex", session)
        };
        let twice = add(
            "local",
            "twice",
            "the calc test fails: calc adds wrong, fix calc",
        );
        let once = add(
            "local",
            "once",
            "a long message about many things and calc once among them all",
        );
        add("local", "none", "nothing relevant here");
        add("team-b", "theirs", "calc calc calc calc");
        let hits = h.search("local", "calc", 10).unwrap();
        let ids: Vec<&str> = hits.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids, [twice.as_str(), once.as_str()]);
        assert!(hits[0].snippet.contains("calc"));
        // Trash one (40 days ago): it is no longer found; purge it: its text leaves the index.
        h.db.execute(
            "UPDATE conversations SET trashed_ms = ?2 WHERE id = ?1",
            values![&twice, NOW - 40 * 86_400_000],
        )
        .unwrap();
        let ids: Vec<String> = h
            .search("local", "calc", 10)
            .unwrap()
            .into_iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(ids, std::slice::from_ref(&once));
        let before = h.index_rows_for("fails").unwrap();
        assert_eq!(before, 1);
        let purged = h.purge("local", NOW - 30 * 86_400_000).unwrap();
        assert_eq!(
            purged,
            Purged {
                conversations: 1,
                messages: 2,
                index_rows: purged.index_rows
            }
        );
        assert!(purged.index_rows >= 8);
        assert_eq!(h.index_rows_for("fails").unwrap(), 0);
        assert!(h.show("local", &twice).unwrap().is_none());
        // The other account's conversation is untouched and unseen.
        assert_eq!(h.search("team-b", "calc", 10).unwrap().len(), 1);
    });
}

#[test]
fn recording_appends_new_messages_and_ignores_retries_and_side_calls() {
    each_backend(|mut h| {
        let turn = |messages: Vec<NewMessage>, reply: Option<&str>| Turn {
            account: "local".into(),
            client: "claude-code".into(),
            session_id: "s".into(),
            agent_type: AgentType::Public,
            ts_ms: NOW,
            messages,
            reply: reply.map(|r| message("assistant", r)),
            excerpts: Vec::new(),
        };
        let first = message("user", "fix calc");
        assert_eq!(
            h.record(&[turn(vec![first.clone()], Some("looking"))])
                .unwrap(),
            2
        );
        // A retry of the same request adds nothing.
        assert_eq!(
            h.record(&[turn(vec![first.clone()], Some("looking"))])
                .unwrap(),
            0
        );
        // A side call in the same session (another first message) adds nothing.
        let side = turn(vec![message("user", "write a title")], Some("Calc fix"));
        assert_eq!(h.record(&[side]).unwrap(), 0);
        let next = vec![
            first,
            message("assistant", "looking"),
            message("user", "tool output"),
        ];
        assert_eq!(h.record(&[turn(next, Some("fixed"))]).unwrap(), 2);
        let id = conversation_id("local", Source::Proxy, "claude-code", "s");
        let (conversation, messages) = h.show("local", &id).unwrap().unwrap();
        let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
        assert_eq!(conversation.messages, 4);
    });
}

#[derive(Debug, Clone)]
struct Spec {
    account: bool,
    admin: bool,
    roles: Vec<bool>,
    trashed: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(any::<bool>(), 0..3),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(account, admin, roles, trashed)| Spec {
            account,
            admin,
            roles,
            trashed,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    // About a quarter of the cases run on PostgreSQL (each makes a database).

    /// Whatever the store holds (imported conversations, and recorded ones with side calls in
    /// their sessions) and however it changes between find and delete, a delete trashes only
    /// conversations of its account, in the token's set, that match the filter (and agent
    /// type) at delete time.
    #[test]
    fn a_delete_trashes_only_what_matches_in_the_tokens_set_and_account(
        specs in prop::collection::vec(spec(), 1..12),
        single in any::<bool>(),
        narrow_admin in prop::option::of(any::<bool>()),
        grow in prop::collection::vec(any::<bool>(), 12),
        late in prop::collection::vec(spec(), 0..4),
        narrow in prop::option::of(prop::collection::vec(any::<bool>(), 16)),
        on_postgres in prop::bool::weighted(0.25),
        proxied in prop::collection::vec(any::<bool>(), 1..12),
    ) {
        let filter = if single { Filter::SingleAssistant } else { Filter::Empty };
        let agent_type = narrow_admin.map(|a| if a { AgentType::Admin } else { AgentType::Public });
        let mut h = fresh(if on_postgres { Backend::Postgres } else { Backend::Sqlite });
        let account = |s: &Spec| if s.account { "local" } else { "team-b" };
        let agent = |s: &Spec| if s.admin { AgentType::Admin } else { AgentType::Public };
        let mut all = Vec::new();
        // Some conversations recorded by the proxy, each with a side call in its session.
        let converse = |h: &mut History, i: usize, s: &Spec, session: &str, roles: &[&str]| {
            if proxied[i % proxied.len()] {
                recorded_with_a_side_call(h, account(s), agent(s), session, roles)
            } else {
                conversation_of(h, account(s), agent(s), session, roles)
            }
        };
        for (i, s) in specs.iter().enumerate() {
            let roles: Vec<&str> = s.roles.iter().map(|a| if *a { "assistant" } else { "user" }).collect();
            let id = converse(&mut h, i, s, &format!("s{i}"), &roles);
            if s.trashed {
                h.db.execute("UPDATE conversations SET trashed_ms = 1 WHERE id = ?1", values![&id]).unwrap();
            }
            all.push((id, account(s), s.clone()));
        }
        let found = h
            .find_candidates(&key(), "local", filter, agent_type, 50, false, NOW, DEFAULT_TTL_MS)
            .unwrap();
        // Between find and delete: conversations gain messages, new ones arrive.
        for (i, ((_, acct, s), g)) in all.iter().zip(&grow).enumerate() {
            if *g {
                let session = format!("s{i}");
                let mut roles: Vec<&str> = s.roles.iter().map(|a| if *a { "assistant" } else { "user" }).collect();
                roles.push("assistant");
                let _ = acct;
                converse(&mut h, i, s, &session, &roles);
            }
        }
        for (i, s) in late.iter().enumerate() {
            let roles: Vec<&str> = s.roles.iter().map(|a| if *a { "assistant" } else { "user" }).collect();
            let id = conversation_of(&mut h, account(s), agent(s), &format!("late{i}"), &roles);
            all.push((id, account(s), s.clone()));
        }
        let ids: Option<Vec<String>> = narrow.map(|pick| {
            all.iter().zip(pick).filter(|(_, p)| *p).map(|((id, ..), _)| id.clone()).collect()
        });
        let before = trashed(&h, "local");
        let done = h.delete(&key(), "local", &found.filter_token, ids.as_deref(), NOW + 1).unwrap();
        let after = trashed(&h, "local");
        prop_assert!(trashed(&h, "team-b").iter().all(|id| all.iter().any(|(x, a, s)| x == id && *a == "team-b" && s.trashed)));
        for id in &after {
            if before.contains(id) {
                continue;
            }
            prop_assert!(done.changed.contains(id));
            prop_assert!(found.items.iter().any(|c| &c.id == id), "outside the token's set");
            let (c, _) = h.show("local", id).unwrap().unwrap();
            prop_assert!(filter.matches(c.messages, c.assistant_messages), "does not match at delete time");
            if let Some(a) = agent_type {
                prop_assert_eq!(c.agent_type.as_str(), a.as_str());
            }
            if let Some(ids) = &ids {
                prop_assert!(ids.contains(id));
            }
        }
        prop_assert_eq!(after.len() - before.len(), done.changed.len());
    }
}

fn proxy_turn(account: &str, session: &str, messages: Vec<NewMessage>, reply: &str) -> Turn {
    Turn {
        account: account.into(),
        client: "claude-code".into(),
        session_id: session.into(),
        agent_type: AgentType::Public,
        ts_ms: NOW,
        messages,
        reply: Some(message("assistant", reply)),
        excerpts: Vec::new(),
    }
}

#[test]
fn shipping_sends_each_message_once_and_the_team_history_equals_the_local() {
    let mut local = History::open_in_memory().unwrap();
    let mut team = fresh(Backend::Postgres);
    let first = message("user", "fix calc: the \0 test fails");
    local
        .record(&[proxy_turn(
            "alice",
            "s1",
            vec![first.clone()],
            "looking at calc",
        )])
        .unwrap();
    local
        .record(&[proxy_turn(
            "alice",
            "s1",
            vec![
                first,
                message("assistant", "looking at calc"),
                message("user", "ok"),
            ],
            "fixed calc",
        )])
        .unwrap();
    conversation(&mut local, "alice", "empty-session", &[]);
    conversation(&mut local, "bob", "bobs", &["user", "assistant"]);
    assert_eq!(
        local.backlog().unwrap(),
        Backlog {
            conversations: 3,
            messages: 6
        }
    );

    let report = local.ship_all(&mut team).unwrap();
    assert_eq!(report, ShipReport { sent: 6, added: 6 });
    assert_eq!(local.backlog().unwrap(), Backlog::default());
    assert_eq!(team.contents().unwrap(), local.contents().unwrap());
    assert_eq!(
        team.search("alice", "calc", 10).unwrap(),
        local.search("alice", "calc", 10).unwrap()
    );
    // The empty conversation went too: it is what the `empty` filter finds.
    assert_eq!(find(&team, "alice", Filter::Empty, true).matched, 1);

    // A crash between the push and the cursor's move sends the batch again: nothing is added,
    // and the index counts each message once.
    local.db.execute("DELETE FROM counters", &[]).unwrap();
    let again = local.ship_all(&mut team).unwrap();
    assert_eq!(again, ShipReport { sent: 6, added: 0 });
    assert_eq!(team.contents().unwrap(), local.contents().unwrap());

    // Later turns ship alone.
    local
        .record(&[proxy_turn(
            "bob",
            "b2",
            vec![message("user", "hello")],
            "hi",
        )])
        .unwrap();
    assert_eq!(
        local.ship_all(&mut team).unwrap(),
        ShipReport { sent: 2, added: 2 }
    );
    assert_eq!(team.contents().unwrap(), local.contents().unwrap());
}

#[test]
fn two_machines_recording_one_session_ship_one_conversation() {
    // A shared gateway behind a load balancer: one instance saw the first turn, the other the
    // second (which carries the first again).
    let mut team = fresh(Backend::Postgres);
    let mut one = History::open_in_memory().unwrap();
    let mut two = History::open_in_memory().unwrap();
    let first = message("user", "fix calc");
    one.record(&[proxy_turn("alice", "s", vec![first.clone()], "looking")])
        .unwrap();
    two.record(&[proxy_turn(
        "alice",
        "s",
        vec![
            first,
            message("assistant", "looking"),
            message("user", "go on"),
        ],
        "fixed",
    )])
    .unwrap();
    assert_eq!(
        one.ship_all(&mut team).unwrap(),
        ShipReport { sent: 2, added: 2 }
    );
    assert_eq!(
        two.ship_all(&mut team).unwrap(),
        ShipReport { sent: 4, added: 2 }
    );
    // The second instance holds the whole conversation: the team's equals it.
    assert_eq!(team.contents().unwrap(), two.contents().unwrap());
    let id = conversation_id("alice", Source::Proxy, "claude-code", "s");
    let (conversation, _) = team.show("alice", &id).unwrap().unwrap();
    assert_eq!(conversation.messages, 4);
}

/// A request's turn: the messages it was the first to carry and its reply, by the times the
/// proxy gave them; nothing of another session's, and nothing once the conversation is in the
/// trash.
#[test]
fn a_requests_turn_is_what_it_added_and_its_reply() {
    each_backend(|mut h| {
        let at = |ms: i64, role: &str, text: &str| NewMessage {
            ts_ms: ms,
            ..message(role, text)
        };
        let turn = |session: &str, ts: i64, messages: Vec<NewMessage>, reply: NewMessage| Turn {
            ts_ms: ts,
            reply: Some(reply),
            excerpts: Vec::new(),
            ..proxy_turn("local", session, messages, "")
        };
        let first = at(NOW, "user", "fix <b>calc</b>");
        h.record(&[
            turn(
                "s",
                NOW,
                vec![first.clone()],
                at(NOW + 500, "assistant", "a1"),
            ),
            turn(
                "s",
                NOW + 1_000,
                vec![
                    at(NOW + 1_000, "user", "fix <b>calc</b>"),
                    at(NOW + 1_000, "assistant", "a1"),
                    at(NOW + 1_000, "user", "and the tests"),
                ],
                at(NOW + 1_700, "assistant", "a2"),
            ),
            turn(
                "other",
                NOW + 1_000,
                vec![],
                at(NOW + 1_700, "assistant", "x"),
            ),
        ])
        .unwrap();
        let texts = |h: &History, ts: i64, reply: i64, session: &str| {
            h.turn("local", "claude-code", session, ts, reply)
                .unwrap()
                .into_iter()
                .map(|m| (m.position, m.role, m.text))
                .collect::<Vec<(u64, String, String)>>()
        };
        assert_eq!(
            texts(&h, NOW, NOW + 500, "s"),
            [
                (0, "user".into(), "fix <b>calc</b>".into()),
                (1, "assistant".into(), "a1".into())
            ]
        );
        assert_eq!(
            texts(&h, NOW + 1_000, NOW + 1_700, "s"),
            [
                (2, "user".into(), "and the tests".into()),
                (3, "assistant".into(), "a2".into())
            ]
        );
        assert!(
            h.turn("bob", "claude-code", "s", NOW, NOW + 500)
                .unwrap()
                .is_empty()
        );
        // The other session's one reply is a single-assistant conversation: trash it.
        assert_eq!(texts(&h, NOW + 1_000, NOW + 1_700, "other").len(), 1);
        let found = find(&h, "local", Filter::SingleAssistant, false);
        h.delete(&key(), "local", &found.filter_token, None, NOW + 2)
            .unwrap();
        assert!(texts(&h, NOW + 1_000, NOW + 1_700, "other").is_empty());
    });
}

/// A user message carrying one kept tool output.
fn with_output(call_id: &str, text: &str) -> NewMessage {
    NewMessage {
        outputs: vec![pith_history::KeptOutput {
            call_id: call_id.into(),
            text: text.into(),
        }],
        ..message("user", "")
    }
}

/// A proxied message's kept tool outputs: found by call id in the account's conversations (not
/// another account's, not once trashed), kept once when later requests carry the message
/// again, shipped to the team history with their message, and gone with a purge.
#[test]
fn kept_tool_outputs_are_found_by_call_id_shipped_and_purged_with_their_conversation() {
    let long = "a line of the output\n".repeat(300);
    let conversation = vec![
        message("user", "read calc.py"),
        with_output("toolu_1", &long),
    ];
    each_backend(|mut h| {
        h.record(&[proxy_turn("alice", "s1", conversation.clone(), "read")])
            .unwrap();
        // The next request carries the message again (and a different text under its id):
        // the first is kept.
        let mut again = conversation.clone();
        again[1] = with_output("toolu_1", "changed");
        again.extend([message("assistant", "read"), message("user", "go on")]);
        h.record(&[proxy_turn("alice", "s1", again, "done")])
            .unwrap();
        h.record(&[proxy_turn(
            "bob",
            "s2",
            vec![with_output("toolu_9", "bob's")],
            "x",
        )])
        .unwrap();
        assert_eq!(
            h.tool_output("alice", "toolu_1").unwrap().as_deref(),
            Some(long.as_str())
        );
        assert_eq!(
            h.tool_output("alice", "toolu_9").unwrap(),
            None,
            "another account's"
        );
        assert_eq!(h.tool_output("alice", "toolu_2").unwrap(), None);
        h.db.execute(
            "UPDATE conversations SET trashed_ms = ?2 WHERE account = ?1",
            values!["alice", NOW - 40 * 86_400_000],
        )
        .unwrap();
        assert_eq!(h.tool_output("alice", "toolu_1").unwrap(), None, "trashed");
        h.purge("alice", NOW - 30 * 86_400_000).unwrap();
        let left =
            h.db.row("SELECT COUNT(*) FROM tool_outputs", &[], |r| r.count(0))
                .unwrap();
        assert_eq!(left, Some(1), "bob's only");
    });

    let mut local = History::open_in_memory().unwrap();
    let mut team = fresh(Backend::Postgres);
    local
        .record(&[proxy_turn("alice", "s1", conversation, "read")])
        .unwrap();
    local.ship_all(&mut team).unwrap();
    assert_eq!(
        team.tool_output("alice", "toolu_1").unwrap().as_deref(),
        Some(long.as_str())
    );
    // Shipped again (the cursors forgotten): nothing twice.
    local.forget_shipped().unwrap();
    local.ship_all(&mut team).unwrap();
    let rows = team
        .db
        .row("SELECT COUNT(*) FROM tool_outputs", &[], |r| r.count(0))
        .unwrap();
    assert_eq!(rows, Some(1));
}

/// The excerpt pith sent in place of a kept output is kept beside it the first time a request
/// sends it: the request that did is the one it is shown under (its session, its arrival),
/// a later request sending it again changes nothing, and an output never sent as an excerpt,
/// or another session's, is not shown.
#[test]
fn an_excerpt_is_kept_beside_its_output_under_the_request_that_first_sent_it() {
    let long = "a line of the output\n".repeat(300);
    let conversation = vec![
        message("user", "read calc.py"),
        with_output("toolu_1", &long),
        message("assistant", "read"),
        with_output("toolu_2", &long),
    ];
    let excerpt = |call_id: &str, text: &str| SentExcerpt {
        call_id: call_id.into(),
        text: text.into(),
    };
    // Each request carries the same messages (no reply recorded, so none grows the
    // conversation past them).
    let at = |ts_ms: i64, excerpts: Vec<SentExcerpt>| Turn {
        ts_ms,
        excerpts,
        reply: None,
        ..proxy_turn("alice", "s1", conversation.clone(), "ok")
    };
    each_backend(|mut h| {
        h.record(&[at(NOW, Vec::new())]).unwrap();
        h.record(&[at(
            NOW + 10,
            vec![excerpt("toolu_1", "[pith shortened… first]")],
        )])
        .unwrap();
        h.record(&[at(
            NOW + 20,
            vec![
                excerpt("toolu_1", "[pith shortened… again]"),
                excerpt("toolu_9", "[pith shortened… of nothing kept]"),
            ],
        )])
        .unwrap();
        let shown =
            |ts: i64, session: &str| h.shortened_by("alice", "claude-code", session, ts).unwrap();
        assert_eq!(
            shown(NOW + 10, "s1"),
            [ShortenedOutput {
                call_id: "toolu_1".into(),
                chars: long.chars().count() as u64,
                excerpt_chars: "[pith shortened… first]".chars().count() as u64,
                excerpt: "[pith shortened… first]".into(),
            }]
        );
        assert!(shown(NOW + 20, "s1").is_empty(), "sent again: kept once");
        assert!(shown(NOW, "s1").is_empty());
        assert!(shown(NOW + 10, "s2").is_empty(), "another session's");
        assert!(
            h.shortened_by("bob", "claude-code", "s1", NOW + 10)
                .unwrap()
                .is_empty(),
            "another account's"
        );
    });
}
