//! Waiting in tests for what no barrier announces: a row another process writes, a socket the
//! proxy closes after its idle timeout, a model loading in the background. One loop for every
//! test, so each wait says what it waited for and what it saw last when time runs out.
//!
//! Where a barrier exists, the check waits on it itself (the proxy's flush, a channel): then
//! the pause between looks only spaces out the rounds.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// The pause between two looks.
const PAUSE: Duration = Duration::from_millis(20);

/// What a look found: `true`, `Some` or `Ok` ends the wait (with the value inside); `false`,
/// `None` or `Err` looks again (an `Err` says what it saw, for the message at the limit).
pub trait Look {
    /// What the wait gives back.
    type Found;
    /// The value, or what was seen instead.
    fn found(self) -> Result<Self::Found, String>;
}

impl Look for bool {
    type Found = ();
    fn found(self) -> Result<(), String> {
        if self { Ok(()) } else { Err(String::new()) }
    }
}

impl<T> Look for Option<T> {
    type Found = T;
    fn found(self) -> Result<T, String> {
        self.ok_or_else(String::new)
    }
}

impl<T, E: Display> Look for Result<T, E> {
    type Found = T;
    fn found(self) -> Result<T, String> {
        self.map_err(|e| e.to_string())
    }
}

/// Look with `check` until it finds what it looks for, at most `limit`; past that, panic
/// naming `what` and what the last look saw.
pub fn wait_for<L: Look>(what: &str, limit: Duration, mut check: impl FnMut() -> L) -> L::Found {
    let start = Instant::now();
    loop {
        match check().found() {
            Ok(found) => return found,
            Err(seen) if start.elapsed() >= limit => {
                let seen = if seen.is_empty() {
                    String::new()
                } else {
                    format!(" (last seen: {seen})")
                };
                panic!("not within {limit:?}: {what}{seen}")
            }
            Err(_) => std::thread::sleep(PAUSE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_gives_what_it_found_and_at_the_limit_says_what_it_saw_last() {
        let mut looks = 0;
        let found = wait_for("the third look", Duration::from_secs(10), || {
            looks += 1;
            if looks == 3 {
                Ok(looks)
            } else {
                Err(format!("look {looks}"))
            }
        });
        assert_eq!(found, 3);
        wait_for("true", Duration::ZERO, || true);
        assert_eq!(wait_for("some", Duration::ZERO, || Some(7)), 7);
        let late = std::panic::catch_unwind(|| {
            wait_for("what never comes", Duration::ZERO, || {
                Err::<(), _>("still 0 rows")
            })
        })
        .unwrap_err();
        let said = late.downcast_ref::<String>().unwrap();
        assert_eq!(
            said,
            "not within 0ns: what never comes (last seen: still 0 rows)"
        );
    }
}
