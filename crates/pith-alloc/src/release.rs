//! Memory handed back after large bodies, not only after bursts of connections: a request of
//! megabytes leaves its pages with the allocator once it is freed (five WebSocket creates of
//! 60 MiB left 834 MB resident while the proxy sat idle). Each place that frees a request's
//! bodies says how large they were; once large ones add up ([`crate::freed`]), the
//! allocator's free pages go back to the OS when no large body has been freed for [`QUIET`]
//! (what a request frees is freed in several places, on several threads: the request path,
//! then the ledger's writers), on a thread of its own (the call walks and locks every arena).

use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long after the last large body was freed memory is handed back.
const QUIET: Duration = Duration::from_millis(500);

/// The longest a due release waits for large bodies to stop being freed.
const AT_MOST: Duration = Duration::from_secs(10);

/// `bytes` of one request's bodies were just freed: when large ones add up, hand the
/// allocator's free pages back once things are quiet.
pub fn freed(bytes: usize) {
    if bytes < crate::LARGE {
        return;
    }
    let due = crate::freed(bytes);
    match releaser() {
        Some(releaser) => releaser.noted(due),
        None if due => drop(crate::release_free_memory()),
        None => {}
    }
}

/// The thread that hands memory back, started at the first large body.
struct Releaser {
    state: Mutex<Due>,
    wake: Condvar,
}

struct Due {
    /// A release is due since then.
    since: Option<Instant>,
    /// When the last large body was freed.
    last: Instant,
}

fn releaser() -> Option<&'static Releaser> {
    static RELEASER: OnceLock<Option<&'static Releaser>> = OnceLock::new();
    *RELEASER.get_or_init(|| {
        let releaser: &'static Releaser = Box::leak(Box::new(Releaser {
            state: Mutex::new(Due {
                since: None,
                last: Instant::now(),
            }),
            wake: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("pith-release".into())
            .spawn(move || releaser.run())
            .ok()
            .map(|_| releaser)
    })
}

impl Releaser {
    fn lock(&self) -> std::sync::MutexGuard<'_, Due> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn noted(&self, due: bool) {
        let mut state = self.lock();
        let now = Instant::now();
        state.last = now;
        if due && state.since.is_none() {
            state.since = Some(now);
            self.wake.notify_one();
        }
    }

    fn run(&self) {
        loop {
            let mut state = self.lock();
            while state.since.is_none() {
                state = self
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            // Quiet for a moment, or due for long enough.
            while let Some(since) = state.since {
                let at = (state.last + QUIET).min(since + AT_MOST);
                let now = Instant::now();
                if now >= at {
                    break;
                }
                state = self
                    .wake
                    .wait_timeout(state, at - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            state.since = None;
            drop(state);
            crate::release_free_memory();
        }
    }
}

/// Says how large each of the records it noted was ([`freed`]) when it is dropped: declared
/// before the records, it is dropped after them, on every way out of a function.
#[derive(Default)]
pub struct FreedAfter(Vec<usize>);

impl FreedAfter {
    /// Note the sizes of what will be freed (each record's `body_bytes`).
    pub fn note(&mut self, sizes: impl IntoIterator<Item = usize>) {
        self.0.extend(sizes);
    }
}

impl Drop for FreedAfter {
    fn drop(&mut self) {
        for size in self.0.drain(..) {
            freed(size);
        }
    }
}
