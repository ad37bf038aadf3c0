//! The cache model used by the savings analysis behaves like Anthropic's prompt cache.

use super::sim::{CacheSim, MIN_CACHEABLE_TOKENS, Segment, TurnCost};

fn seg(key: u64, tokens: f64, breakpoint: bool) -> Segment {
    Segment {
        key,
        tokens,
        breakpoint,
        search: false,
    }
}

#[test]
fn first_sight_writes_then_later_turns_read_the_shared_prefix() {
    let mut sim = CacheSim::default();
    let turn1 = [
        seg(1, 2000.0, true),
        seg(2, 100.0, true),
        seg(3, 50.0, false),
    ];
    assert_eq!(
        sim.turn(&turn1),
        TurnCost {
            uncached: 50.0,
            write: 2100.0,
            read: 0.0
        }
    );
    // Same prefix, the breakpoint moved to the new last block (the marker is not content).
    let turn2 = [
        seg(1, 2000.0, true),
        seg(2, 100.0, false),
        seg(3, 50.0, false),
        seg(4, 70.0, true),
    ];
    assert_eq!(
        sim.turn(&turn2),
        TurnCost {
            uncached: 0.0,
            write: 120.0,
            read: 2100.0
        }
    );
    // A changed first block busts everything after it.
    let turn3 = [seg(9, 2000.0, true), seg(2, 100.0, true)];
    assert_eq!(sim.turn(&turn3).read, 0.0);
}

#[test]
fn short_prefixes_are_not_cached_and_weights_are_the_billing_ratios() {
    let mut sim = CacheSim::default();
    let small = [seg(1, MIN_CACHEABLE_TOKENS - 1.0, true)];
    assert_eq!(sim.turn(&small).write, 0.0);
    assert_eq!(sim.turn(&small).read, 0.0);
    let cost = TurnCost {
        uncached: 10.0,
        write: 100.0,
        read: 1000.0,
    };
    assert_eq!(cost.weighted(), 10.0 + 125.0 + 100.0);
    assert_eq!(cost.total(), 1110.0);
}

#[test]
fn lookback_finds_a_write_at_most_twenty_blocks_back() {
    let mut sim = CacheSim::default();
    let first = [seg(1, 2000.0, true)];
    sim.turn(&first);
    let near: Vec<Segment> = std::iter::once(seg(1, 2000.0, false))
        .chain((2..21).map(|k| seg(k, 1.0, false)))
        .chain(std::iter::once(seg(21, 1.0, true)))
        .collect();
    assert_eq!(sim.turn(&near).read, 2000.0);
    let mut sim = CacheSim::default();
    sim.turn(&first);
    let far: Vec<Segment> = std::iter::once(seg(1, 2000.0, false))
        .chain((2..30).map(|k| seg(k, 1.0, false)))
        .chain(std::iter::once(seg(30, 1.0, true)))
        .collect();
    assert_eq!(sim.turn(&far).read, 0.0);
}
