//! The brain's rules over its real SQLite store: ids, validation, crediting, staleness, trash,
//! and the `.pith/` directory. (An integration test because the store depends on this crate.)

use pith_brain::render::error_chain;
use pith_brain::{
    BRAIN_DIR, Brain, BrainError, EvidenceSpec, EvidenceState, Freshness, Kind, ListFilter,
    NewMemory, Workspace,
};
use pith_store::brain::{open_existing_workspace_brain, open_workspace_brain};

#[expect(
    clippy::unwrap_used,
    reason = "test setup: a failure should fail the test"
)]
fn brain() -> (tempfile::TempDir, Brain) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/ledger.rs"), "fn write() {}\n").unwrap();
    std::fs::write(dir.path().join("src/other.rs"), "fn other() {}\n").unwrap();
    let brain = open_workspace_brain(Workspace::new(dir.path()).unwrap()).unwrap();
    (dir, brain)
}

#[expect(
    clippy::unwrap_used,
    reason = "test setup: a failure should fail the test"
)]
fn fix(title: &str, evidence: &[&str]) -> NewMemory {
    NewMemory {
        kind: Kind::Fix,
        title: title.into(),
        body: "Set a busy timeout on every connection.".into(),
        tags: vec!["SQLite, Ledger".into(), "#ledger".into()],
        headline: Some("database is locked".into()),
        evidence: evidence
            .iter()
            .map(|s| EvidenceSpec::parse(s).unwrap())
            .collect(),
    }
}

#[test]
fn save_then_get_credits_and_derives_status() {
    let (_dir, mut brain) = brain();
    let saved = brain
        .save(fix("Retry on busy", &["src/ledger.rs"]))
        .unwrap();
    assert!(saved.memory.id.starts_with("m-"));
    assert_eq!(saved.memory.tags, ["sqlite", "ledger"]);
    assert_eq!(saved.status.freshness, Freshness::Fresh);
    assert_eq!(saved.memory.evidence[0].hash.as_ref().unwrap().len(), 64);

    let got = brain.get(&saved.memory.id.to_uppercase()).unwrap();
    assert_eq!(got.memory.hits, 1);
    assert_eq!(brain.get(&saved.memory.id).unwrap().memory.hits, 2);
}

#[test]
fn search_credits_only_what_it_returns_and_list_credits_nothing() {
    let (_dir, mut brain) = brain();
    let a = brain.save(fix("Ledger busy retry", &[])).unwrap().memory.id;
    let b = brain.save(fix("Ledger queue size", &[])).unwrap().memory.id;
    let found = brain.search("ledger busy", None, 1).unwrap();
    assert_eq!(found.total, 2);
    assert_eq!(found.hits.len(), 1);
    assert_eq!(found.hits[0].checked.memory.id, a);
    brain.list(&ListFilter::default()).unwrap();
    brain.pointers("src/ledger.rs").unwrap();
    let all = brain.list(&ListFilter::default()).unwrap();
    let hits = |id: &str| all.iter().find(|c| c.memory.id == id).unwrap().memory.hits;
    assert_eq!((hits(&a), hits(&b)), (1, 0));
}

#[test]
fn verify_reports_edits_and_deletions_and_accept_refreshes() {
    let (dir, mut brain) = brain();
    let id = brain
        .save(fix("Two files", &["src/ledger.rs", "src/other.rs:1"]))
        .unwrap()
        .memory
        .id;
    let v = brain.verify(&id, false).unwrap();
    assert_eq!(v.before, None);
    assert_eq!(v.status.freshness, Freshness::Fresh);

    std::fs::write(dir.path().join("src/ledger.rs"), "fn write2() {}\n").unwrap();
    std::fs::remove_file(dir.path().join("src/other.rs")).unwrap();
    let v = brain.verify(&id, false).unwrap();
    assert_eq!(v.before, Some(Freshness::Fresh));
    assert_eq!(v.status.freshness, Freshness::Stale);
    let problems: Vec<_> = v
        .status
        .problems()
        .map(|c| (c.recorded.path.as_str(), c.state.clone()))
        .collect();
    assert_eq!(
        problems,
        [
            ("src/ledger.rs", EvidenceState::Changed),
            ("src/other.rs", EvidenceState::Gone)
        ]
    );
    assert_eq!(brain.get(&id).unwrap().status.freshness, Freshness::Stale);

    let v = brain.verify(&id, true).unwrap();
    assert_eq!(v.status.freshness, Freshness::Fresh);
    assert!(v.accepted.is_some());
    let m = brain.get(&id).unwrap();
    assert_eq!(m.status.freshness, Freshness::Fresh);
    assert_eq!(m.memory.evidence.len(), 1);
}

#[test]
fn forget_and_restore() {
    let (_dir, mut brain) = brain();
    let id = brain.save(fix("Trash me", &[])).unwrap().memory.id;
    brain.forget(&id).unwrap();
    assert!(matches!(brain.get(&id), Err(BrainError::Trashed { .. })));
    assert!(matches!(brain.forget(&id), Err(BrainError::Trashed { .. })));
    assert_eq!(brain.search("trash", None, 5).unwrap().total, 0);
    brain.restore(&id).unwrap();
    assert!(matches!(
        brain.restore(&id),
        Err(BrainError::NotTrashed { .. })
    ));
    assert_eq!(brain.search("trash", None, 5).unwrap().total, 1);
    assert!(matches!(
        brain.get("m-nope"),
        Err(BrainError::NotFound { .. })
    ));
}

#[test]
fn rejects_bad_input() {
    let (_dir, mut brain) = brain();
    let mut m = fix("two\nlines", &[]);
    assert!(brain.save(m.clone()).is_err());
    m.title = " ".into();
    assert!(brain.save(m.clone()).is_err());
    m.title = "ok".into();
    m.evidence = vec![EvidenceSpec::parse("../etc/passwd").unwrap()];
    let err = error_chain(&brain.save(m.clone()).unwrap_err());
    assert!(err.contains("`..` is not allowed"), "{err}");
    m.evidence = vec![EvidenceSpec::parse("src/missing.rs").unwrap()];
    let err = error_chain(&brain.save(m).unwrap_err());
    assert!(err.contains("does not exist"), "{err}");
    assert!(brain.search("  !! ", None, 5).is_err());
}

#[test]
fn ids_stay_unique_under_many_saves() {
    let (_dir, mut brain) = brain();
    let mut ids = std::collections::HashSet::new();
    for i in 0..300 {
        let m = brain.save(fix(&format!("memory {i}"), &[])).unwrap();
        assert!(ids.insert(m.memory.id));
    }
}

#[test]
fn creates_gitignored_brain_dir_and_open_existing_does_not_create() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(dir.path()).unwrap();
    assert!(open_existing_workspace_brain(ws.clone()).unwrap().is_none());
    assert!(!dir.path().join(BRAIN_DIR).exists());
    open_workspace_brain(ws.clone()).unwrap();
    let ignore = std::fs::read_to_string(dir.path().join(".pith/.gitignore")).unwrap();
    assert_eq!(ignore, "*\n");
    assert!(open_existing_workspace_brain(ws).unwrap().is_some());
}

#[test]
fn errors_name_their_cause_once() {
    let (_dir, mut brain) = brain();
    let err = brain
        .save(fix("Past the end", &["src/ledger.rs:5-6"]))
        .unwrap_err();
    assert!(matches!(err, BrainError::Evidence { .. }), "{err}");
    pith_testkit::errors::assert_causes_said_once(&err);
}

#[test]
fn limits_are_stated_with_what_to_do_and_kept() {
    let (_dir, mut brain) = brain();
    let refused = |brain: &mut Brain, m: NewMemory| match brain.save(m) {
        Err(BrainError::Invalid(message)) => message,
        other => panic!("saved past a limit: {:?}", other.map(|c| c.memory.id)),
    };

    let mut m = fix("Huge body", &[]);
    m.body = "x".repeat(pith_brain::MAX_BODY_BYTES + 1);
    let err = refused(&mut brain, m.clone());
    assert!(
        err.contains("16385 bytes") && err.contains("16384 (16 KiB)") && err.contains("evidence"),
        "{err}"
    );
    m.body.pop();
    brain.save(m).unwrap();

    let mut m = fix(&"t".repeat(pith_brain::MAX_TITLE_CHARS + 1), &[]);
    let err = refused(&mut brain, m.clone());
    assert!(
        err.contains("201 characters") && err.contains("200"),
        "{err}"
    );
    m.title.pop();
    brain.save(m).unwrap();

    let mut m = fix("Huge headline", &[]);
    m.headline = Some("e".repeat(pith_brain::MAX_HEADLINE_CHARS + 1));
    let err = refused(&mut brain, m);
    assert!(err.contains("headline") && err.contains("1000"), "{err}");

    let mut m = fix("Many tags", &[]);
    m.tags = (0..=pith_brain::MAX_TAGS)
        .map(|i| format!("t{i}"))
        .collect();
    let err = refused(&mut brain, m);
    assert!(err.contains("33 tags") && err.contains("32"), "{err}");

    let mut m = fix("Long tag", &[]);
    m.tags = vec!["g".repeat(pith_brain::MAX_TAG_CHARS + 1)];
    let err = refused(&mut brain, m);
    assert!(err.contains("65 characters") && err.contains("64"), "{err}");

    let cited: Vec<String> = (1..=pith_brain::MAX_EVIDENCE + 1)
        .map(|i| format!("src/ledger.rs:{i}"))
        .collect();
    let cited: Vec<&str> = cited.iter().map(String::as_str).collect();
    let err = refused(&mut brain, fix("Much evidence", &cited));
    assert!(
        err.contains("33 pieces of evidence") && err.contains("32"),
        "{err}"
    );
}
