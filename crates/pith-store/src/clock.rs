//! The clock every stored timestamp is read from: milliseconds since the Unix epoch, 0 before
//! it, saturating far after; and a request's arrival, in microseconds, strictly increasing.
//!
//! A [`Clock`] is the system's, or one a test sets by hand: what the proxy stamps a record
//! with (its time and arrival) comes from the ledger's clock, so a test can put requests at an
//! hour's edge or a day apart without waiting, and the writers read "a previous process's
//! request" from the same clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Now, in microseconds since the Unix epoch.
fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The last arrival the system clock handed out in this process, so two requests in one
/// microsecond still get two.
static LAST_SYSTEM_ARRIVAL: AtomicI64 = AtomicI64::new(0);

/// Where stored times come from: the system's clock (the default), or one set by hand.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    hand: Option<Arc<Hand>>,
}

/// A clock set by hand: its time, and the last arrival it handed out.
#[derive(Debug)]
struct Hand {
    now_us: AtomicI64,
    last_arrival: AtomicI64,
}

impl Clock {
    /// The system's clock.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock that reads `now_ms` until it is set or advanced (its clones move with it).
    pub fn by_hand(now_ms: i64) -> Clock {
        Clock {
            hand: Some(Arc::new(Hand {
                now_us: AtomicI64::new(now_ms.saturating_mul(1000)),
                last_arrival: AtomicI64::new(0),
            })),
        }
    }

    /// Set a clock set by hand to `now_ms`; the system's clock is not set by anyone.
    pub fn set_ms(&self, now_ms: i64) {
        if let Some(hand) = &self.hand {
            hand.now_us
                .store(now_ms.saturating_mul(1000), Ordering::SeqCst);
        }
    }

    /// Move a clock set by hand on by `by`.
    pub fn advance(&self, by: Duration) {
        if let Some(hand) = &self.hand {
            let by = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
            hand.now_us.fetch_add(by, Ordering::SeqCst);
        }
    }

    /// Now, in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        match &self.hand {
            None => now_ms(),
            Some(hand) => hand.now_us.load(Ordering::SeqCst).div_euclid(1000),
        }
    }

    /// Now in microseconds since the epoch, strictly greater than any arrival this clock (the
    /// system's: in this process) handed out before: the order a session's requests are paired
    /// in for cache busts.
    pub fn arrival_us(&self) -> i64 {
        let (now, last) = match &self.hand {
            None => (now_us(), &LAST_SYSTEM_ARRIVAL),
            Some(hand) => (hand.now_us.load(Ordering::SeqCst), &hand.last_arrival),
        };
        let mut seen = last.load(Ordering::Relaxed);
        loop {
            let next = now.max(seen.saturating_add(1));
            match last.compare_exchange_weak(seen, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return next,
                Err(newer) => seen = newer,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_only_grow() {
        for clock in [Clock::system(), Clock::by_hand(1_000)] {
            let mut last = clock.arrival_us();
            for _ in 0..10_000 {
                let next = clock.arrival_us();
                assert!(next > last, "{next} after {last}");
                last = next;
            }
        }
    }

    #[test]
    fn a_clock_by_hand_reads_what_it_was_set_to_and_its_clones_move_with_it() {
        let clock = Clock::by_hand(1_700_000_000_000);
        let clone = clock.clone();
        assert_eq!(clone.now_ms(), 1_700_000_000_000);
        assert_eq!(clone.arrival_us(), 1_700_000_000_000_000);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clone.now_ms(), 1_700_000_001_500);
        clock.set_ms(5);
        assert_eq!(clone.now_ms(), 5);
        // Set back, arrivals still grow.
        assert_eq!(clone.arrival_us(), 1_700_000_000_000_001);
    }
}
