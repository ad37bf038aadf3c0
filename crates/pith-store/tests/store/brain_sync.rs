//! The team brain: memories shared between clones through one PostgreSQL, by the stated rule
//! (the newest change wins; a tie keeps the copy there; a different memory under the same id is
//! left apart).

use pith_brain::{Evidence, Kind, LineRange, Memory};
use pith_store::brain::SqliteBrain;
use pith_store::brain::postgres::TeamBrain;
use pith_store::postgres::StoreUrl;
use pith_testkit::postgres::PgServer;

fn memory(id: &str, title: &str, created_at: i64) -> Memory {
    Memory {
        id: id.to_owned(),
        kind: Kind::Fix,
        title: title.to_owned(),
        body: "the body".to_owned(),
        tags: vec!["sqlite".to_owned()],
        headline: Some("FAILED test_x - assert 1 == 2".to_owned()),
        evidence: vec![Evidence {
            path: "src/lib.rs".to_owned(),
            lines: Some(LineRange { start: 3, end: 9 }),
            hash: Some("ab".repeat(32)),
            size: Some(120),
            mtime_ns: Some(1),
        }],
        created_at,
        updated_at: created_at,
        hits: 0,
        last_hit_at: None,
        last_check: None,
        trashed_at: None,
    }
}

fn team() -> TeamBrain {
    TeamBrain::open(&StoreUrl::new(PgServer::shared().database().unwrap())).unwrap()
}

const REPO: &str = "git:0123abcd";

#[test]
fn a_memory_saved_in_one_clone_reaches_the_other_and_changes_travel_back() {
    let team = team();
    let (mut a, mut b) = (
        SqliteBrain::in_memory().unwrap(),
        SqliteBrain::in_memory().unwrap(),
    );
    a.insert(&memory("m-0001", "retry on SQLITE_BUSY", 100))
        .unwrap();
    a.credit(&["m-0001"], 500).unwrap();
    let first = team.sync(REPO, &mut a).unwrap();
    assert_eq!((first.pushed, first.accepted), (1, 1));
    let got = team.sync(REPO, &mut b).unwrap();
    assert_eq!((got.new, got.pushed), (1, 0));
    let there = b.get("m-0001").unwrap().unwrap();
    assert_eq!(there.title, "retry on SQLITE_BUSY");
    assert_eq!(
        there.headline.as_deref(),
        Some("FAILED test_x - assert 1 == 2")
    );
    // Hits are each machine's own; evidence comes without the saving machine's file times.
    assert_eq!(there.hits, 0);
    assert_eq!(there.evidence[0].hash, Some("ab".repeat(32)));
    assert_eq!(there.evidence[0].mtime_ns, None);
    // A second sync with nothing new does nothing.
    let idle = team.sync(REPO, &mut b).unwrap();
    assert_eq!((idle.pushed, idle.new, idle.updated), (0, 0, 0));

    // Trashed in b: the trash reaches a.
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert!(b.set_trashed("m-0001", Some(900)).unwrap());
    let back = team.sync(REPO, &mut b).unwrap();
    assert_eq!((back.pushed, back.accepted), (1, 1));
    let mine = team.sync(REPO, &mut a).unwrap();
    assert_eq!(mine.updated, 1);
    assert_eq!(a.get("m-0001").unwrap().unwrap().trashed_at, Some(900));
    assert_eq!(
        a.get("m-0001").unwrap().unwrap().hits,
        1,
        "a's own hits stay"
    );
    // Another repository shares nothing with this one.
    let mut c = SqliteBrain::in_memory().unwrap();
    assert_eq!(team.sync("git:other", &mut c).unwrap().new, 0);
}

#[test]
fn the_newest_change_wins_and_a_different_memory_under_the_same_id_is_left_apart() {
    let team = team();
    let (mut a, mut b) = (
        SqliteBrain::in_memory().unwrap(),
        SqliteBrain::in_memory().unwrap(),
    );
    a.insert(&memory("m-0002", "shared", 100)).unwrap();
    team.sync(REPO, &mut a).unwrap();
    team.sync(REPO, &mut b).unwrap();
    // Both change it; b's change is the later one.
    assert!(a.set_trashed("m-0002", Some(1)).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(b.set_trashed("m-0002", Some(2)).unwrap());
    team.sync(REPO, &mut a).unwrap();
    let b_sync = team.sync(REPO, &mut b).unwrap();
    assert_eq!(b_sync.accepted, 1, "b's newer change replaces a's");
    team.sync(REPO, &mut a).unwrap();
    for brain in [&mut a, &mut b] {
        assert_eq!(brain.get("m-0002").unwrap().unwrap().trashed_at, Some(2));
    }

    // Two different memories drew one id: each clone keeps its own, and says so.
    let mut c = SqliteBrain::in_memory().unwrap();
    c.insert(&memory("m-0002", "another memory", 777)).unwrap();
    let clash = team.sync(REPO, &mut c).unwrap();
    assert!(clash.collisions >= 1, "{clash:?}");
    assert_eq!(c.get("m-0002").unwrap().unwrap().title, "another memory");
    team.sync(REPO, &mut a).unwrap();
    assert_eq!(a.get("m-0002").unwrap().unwrap().title, "shared");
}

/// Stop 65's review: a repository unpacked from an archive keeps its `.git/config`, and `git
/// rev-list` in a partial clone fetches a missing object from the promisor remote, running its
/// `uploadpack` command: any command, on every team sync of `pith mcp`. Nothing is fetched.
#[test]
fn naming_a_repository_runs_nothing_its_git_config_names() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("r");
    let marker = dir.path().join("ran");
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(args)
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    };
    std::fs::create_dir(&root).unwrap();
    git(&["init", "-q", "-b", "main"]);
    git(&[
        "-c",
        "user.email=a@b",
        "-c",
        "user.name=a",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
    ]);
    git(&["config", "extensions.partialClone", "origin"]);
    git(&["config", "remote.origin.promisor", "true"]);
    git(&["config", "remote.origin.url", root.to_str().unwrap()]);
    let command = format!("touch {}; false", marker.display());
    git(&["config", "remote.origin.uploadpack", &command]);
    // HEAD names a commit the repository does not have: git would fetch it.
    std::fs::write(
        root.join(".git/refs/heads/main"),
        "1234567890123456789012345678901234567890\n",
    )
    .unwrap();
    assert_eq!(pith_store::brain::postgres::repository_of(&root), None);
    assert!(!marker.exists(), "the repository's uploadpack command ran");
}

/// A FIFO where git reads (here `HEAD`) blocked git, and with it the sync, for ever.
#[test]
fn naming_a_repository_whose_head_is_a_fifo_ends() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("r");
    std::fs::create_dir(&root).unwrap();
    let ok = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(&root)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let head = root.join(".git/HEAD");
    std::fs::remove_file(&head).unwrap();
    let ok = std::process::Command::new("mkfifo")
        .arg(&head)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(pith_store::brain::postgres::repository_of(&root)));
    let named = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("still waiting for git");
    assert_eq!(named, None);
}
