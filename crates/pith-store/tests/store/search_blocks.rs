//! The tool search round trip's blocks shared through the team store: what one instance keeps,
//! another finds; a store that does not answer is waited for no longer than the bound, and
//! says so.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use pith_store::postgres::StoreUrl;
use pith_store::search_blocks::postgres::TeamSearchBlocks;
use pith_store::search_blocks::{Fetch, Limits, SearchBlocks, Shared};
use pith_testkit::postgres::PgServer;

const BOUND: Duration = Duration::from_millis(500);

fn instance(url: &str) -> SearchBlocks {
    let blocks = SearchBlocks::in_memory(Limits::default());
    blocks.share_with(TeamSearchBlocks::new(&StoreUrl::new(url)).unwrap(), BOUND);
    blocks
}

#[tokio::test]
async fn what_one_instance_keeps_the_other_finds_and_nothing_is_asked_twice() {
    let url = PgServer::shared().database().unwrap();
    let (a, b) = (instance(&url), instance(&url));
    let sharing = a
        .put("s1", "toolu_1", r#"{"tool_use_at":0,"blocks":[]}"#)
        .unwrap();
    assert_eq!(sharing.await, Shared::Written);
    assert!(!b.has_session("s1"));
    // toolu_2 has no blocks: asked once, then known to have none.
    let fetched = b.fetch("s1", &["toolu_1", "toolu_2"], 2).await;
    assert_eq!(fetched, Fetch::Fetched { asked: 2, found: 1 });
    assert_eq!(
        b.get("s1", "toolu_1").as_deref(),
        Some(r#"{"tool_use_at":0,"blocks":[]}"#)
    );
    assert_eq!(
        b.fetch("s1", &["toolu_1", "toolu_2"], 2).await,
        Fetch::Known
    );
    // A's own blocks are known to A without asking.
    assert_eq!(a.fetch("s1", &["toolu_1"], 1).await, Fetch::Known);
    // Another session's id is not this session's.
    assert_eq!(
        b.fetch("s2", &["toolu_1"], 1).await,
        Fetch::Fetched { asked: 1, found: 0 }
    );
    let stats = b.team_stats();
    assert_eq!(
        (stats.fetched, stats.fetch_slow, stats.fetch_failed),
        (1, 0, 0)
    );
    assert_eq!(a.team_stats().written, 1);
}

#[tokio::test]
async fn a_store_that_does_not_answer_is_waited_for_only_the_bound() {
    // Accepts connections and never says a word: a PostgreSQL that hangs.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "postgres://pith@{}/pith?connect_timeout=30",
        silent.local_addr().unwrap()
    );
    let blocks = instance(&url);
    let start = Instant::now();
    let sharing = blocks.put("s1", "toolu_9", "{}").unwrap();
    assert_eq!(sharing.await, Shared::Slow);
    assert!(start.elapsed() < BOUND * 2, "waited {:?}", start.elapsed());
    // Slow just now: the next requests do not wait for it (for a few seconds), and a slow
    // store is never taken for "nothing there".
    let start = Instant::now();
    assert_eq!(blocks.fetch("s1", &["toolu_1"], 1).await, Fetch::Resting);
    assert_eq!(blocks.fetch("s1", &["toolu_1"], 1).await, Fetch::Resting);
    let sharing = blocks.put("s1", "toolu_8", "{}").unwrap();
    assert_eq!(sharing.await, Shared::Resting);
    assert!(start.elapsed() < BOUND / 2, "waited {:?}", start.elapsed());
    // What it kept is still kept here.
    assert!(blocks.get("s1", "toolu_9").is_some());
    let stats = blocks.team_stats();
    assert_eq!((stats.fetch_slow, stats.write_slow), (0, 1));
    // A read that finds it slow: the same bound.
    let other = instance(&url);
    let start = Instant::now();
    assert_eq!(other.fetch("s1", &["toolu_1"], 1).await, Fetch::Slow);
    assert!(start.elapsed() < BOUND * 2, "waited {:?}", start.elapsed());
    drop(silent);
}

#[tokio::test]
async fn a_store_that_refuses_fails_at_once() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let blocks = instance(&format!("postgres://pith@{addr}/pith"));
    let start = Instant::now();
    assert!(matches!(
        blocks.fetch("s1", &["toolu_1"], 1).await,
        Fetch::Failed(_)
    ));
    let other = instance(&format!("postgres://pith@{addr}/pith"));
    assert_eq!(
        other.put("s1", "toolu_1", "{}").unwrap().await,
        Shared::Failed
    );
    assert!(start.elapsed() < BOUND, "waited {:?}", start.elapsed());
    // Failed just now: not asked again for a few seconds.
    assert_eq!(blocks.fetch("s1", &["toolu_2"], 1).await, Fetch::Resting);
    assert_eq!(other.fetch("s1", &["toolu_2"], 1).await, Fetch::Resting);
}
