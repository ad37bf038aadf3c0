//! What recall already said in a host session, kept on disk because every hook call is a fresh
//! process: `<workspace>/.pith/session/<session>/`, one directory per host session (its name a
//! hash of the session id).
//!
//! Each note is a marker file created with `O_EXCL`: creating it is the right to say the note,
//! so of any number of concurrent hook processes exactly one speaks, and an interrupted process
//! leaves either a marker or none. A session holds at most [`MAX_MARKERS`] markers; sessions
//! untouched for [`MAX_AGE`] are removed, and at most [`MAX_SESSIONS`] are kept, whenever a new
//! session starts. Nothing is created unless the brain's `.pith/` already exists, and any
//! failure to record means silence (a note that cannot be recorded would repeat on every call).
//!
//! The opt-in fix capture keeps a small state file per session (`capture.json`: failed verdict
//! commands and the files edited since), read and replaced under a lock file, written to a
//! temporary file and renamed.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::BRAIN_DIR;

/// Notes one session may record; past it, the session is silent.
pub const MAX_MARKERS: usize = 512;
/// Sessions kept; past this, the least recently used are removed down to three quarters of it.
pub const MAX_SESSIONS: usize = 64;
/// A session untouched this long is removed.
pub const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Longest wait for the capture state's lock.
const LOCK_WAIT: Duration = Duration::from_millis(200);
/// Failed commands remembered per session for capture.
const MAX_FAILURES: usize = 8;
/// Edited files remembered per failure.
const MAX_EDITED: usize = 32;

/// One host session's record.
#[derive(Debug)]
pub struct Session {
    dir: PathBuf,
    /// Entries in `dir`, counted at the first claim and kept up to date by this process.
    entries: std::cell::Cell<Option<usize>>,
}

impl Session {
    /// The record of `session_id` in the workspace at `root`, created if needed. `None` when
    /// the workspace has no `.pith/` or the record cannot be made.
    pub fn open(root: &Path, session_id: &str) -> Option<Session> {
        let base = root.join(BRAIN_DIR);
        if !base.is_dir() {
            return None;
        }
        let sessions = base.join("session");
        let dir = sessions.join(hash_hex(session_id));
        let session = |dir| Session {
            dir,
            entries: std::cell::Cell::new(None),
        };
        if dir.is_dir() {
            return Some(session(dir));
        }
        if !sessions.is_dir() {
            create_private_dir(&sessions).ok()?;
        }
        match create_private_dir(&dir) {
            Ok(()) => prune(&sessions, &dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
        Some(session(dir))
    }

    /// Whether this process is the one to say the note keyed `key` in this session: true once
    /// per key, whatever the number of processes asking at the same time.
    pub fn claim(&self, key: &str) -> bool {
        let entries = self.entries.get().unwrap_or_else(|| {
            std::fs::read_dir(&self.dir)
                .map(|entries| entries.count())
                .unwrap_or(usize::MAX)
        });
        if entries >= MAX_MARKERS {
            return false;
        }
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let claimed = options.open(self.dir.join(hash_hex(key))).is_ok();
        self.entries.set(Some(entries + usize::from(claimed)));
        claimed
    }

    /// Claim memory `id` for this session: true the first time any moment (a read's pointer,
    /// an edit's failed attempt, a failure's recorded fix, a captured fix) names it, so the
    /// model is told each memory's id once per session, whichever moment tells it.
    pub fn claim_memory(&self, id: &str) -> bool {
        self.claim(&format!("memory\0{id}"))
    }

    /// Read the capture state, let `update` change it, and write it back if it did; `None`
    /// (nothing changed) when the lock could not be had in time or the state not read.
    pub fn with_capture<T>(&self, update: impl FnOnce(&mut CaptureState) -> T) -> Option<T> {
        let lock = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join("capture.lock"))
            .ok()?;
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(_) => return None,
            }
        }
        let path = self.dir.join("capture.json");
        let mut state: CaptureState = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_default(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => CaptureState::default(),
            Err(_) => return None,
        };
        let before = state.clone();
        let out = update(&mut state);
        state.bound();
        if state != before {
            let tmp = self
                .dir
                .join(format!("capture.json.{}.tmp", std::process::id()));
            let written = serde_json::to_vec(&state).ok().and_then(|bytes| {
                let mut file = File::create(&tmp).ok()?;
                file.write_all(&bytes).ok()?;
                std::fs::rename(&tmp, &path).ok()
            });
            if written.is_none() {
                let _ = std::fs::remove_file(&tmp);
                return None;
            }
        }
        drop(lock);
        Some(out)
    }
}

/// The fix capture's memory of a session: verdict commands that failed, newest last.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureState {
    /// Failed verdict commands, at most one per command.
    pub failures: Vec<Failure>,
}

/// A verdict command that failed, and what was edited after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The command, whitespace collapsed.
    pub command: String,
    /// Its error headline.
    pub headline: String,
    /// Workspace-relative files edited since it failed.
    pub edited: Vec<String>,
}

impl CaptureState {
    fn bound(&mut self) {
        if self.failures.len() > MAX_FAILURES {
            let extra = self.failures.len() - MAX_FAILURES;
            self.failures.drain(..extra);
        }
        for f in &mut self.failures {
            f.edited.truncate(MAX_EDITED);
        }
    }
}

/// How often the ages of the sessions are looked at (a stamp file records the last time).
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Remove sessions older than [`MAX_AGE`], then the oldest beyond [`MAX_SESSIONS`]; never
/// `keep`. Ages are looked at when there are too many sessions or an hour after the last look
/// (a new session is the first note of a host session: it should cost a directory listing,
/// not a `stat` of every session). Failures are ignored: a session another process is
/// removing is gone either way.
fn prune(sessions: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(sessions) else {
        return;
    };
    let entries: Vec<std::fs::DirEntry> = entries.flatten().collect();
    let stamp = sessions.join(".pruned");
    let due = std::fs::metadata(&stamp)
        .and_then(|m| m.modified())
        .map_or(true, |at| {
            SystemTime::now().duration_since(at).unwrap_or_default() > PRUNE_EVERY
        });
    // The stamp is one of the entries.
    if !due && entries.len() <= MAX_SESSIONS + 1 {
        return;
    }
    let _ = File::create(&stamp);
    let now = SystemTime::now();
    let mut live: Vec<(SystemTime, PathBuf)> = Vec::new();
    for entry in entries {
        let path = entry.path();
        if path == keep || path == stamp {
            continue;
        }
        let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else {
            continue;
        };
        if now.duration_since(modified).unwrap_or_default() > MAX_AGE {
            let _ = std::fs::remove_dir_all(&path);
        } else {
            live.push((modified, path));
        }
    }
    // Down to three quarters, so that the next many new sessions find no work.
    if live.len() + 1 > MAX_SESSIONS {
        live.sort();
        let keep = MAX_SESSIONS * 3 / 4;
        for (_, path) in live.iter().take(live.len() + 1 - keep) {
            let _ = std::fs::remove_dir_all(path);
        }
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// The first 16 hex digits of the SHA-256 of `text`: a file name whatever the text holds.
fn hash_hex(text: &str) -> String {
    use std::fmt::Write;
    Sha256::digest(text.as_bytes())
        .iter()
        .take(8)
        .fold(String::with_capacity(16), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(BRAIN_DIR)).unwrap();
        dir
    }

    #[test]
    fn a_key_is_claimed_once_per_session_and_a_session_holds_a_bounded_number() {
        let ws = workspace();
        let a = Session::open(ws.path(), "session a").unwrap();
        assert!(a.claim("k1"));
        assert!(!a.claim("k1"));
        assert!(!Session::open(ws.path(), "session a").unwrap().claim("k1"));
        assert!(Session::open(ws.path(), "session b").unwrap().claim("k1"));
        for i in 2..MAX_MARKERS + 10 {
            a.claim(&format!("k{i}"));
        }
        let held = std::fs::read_dir(&a.dir).unwrap().count();
        assert_eq!(held, MAX_MARKERS);
        assert!(
            !Session::open(ws.path(), "session a")
                .unwrap()
                .claim("one more")
        );
        // No `.pith/`, no record (and none is made).
        let bare = tempfile::tempdir().unwrap();
        assert!(Session::open(bare.path(), "s").is_none());
        assert!(!bare.path().join(BRAIN_DIR).exists());
    }

    #[test]
    fn a_new_session_removes_old_ones_and_keeps_at_most_the_newest() {
        let ws = workspace();
        let sessions = ws.path().join(BRAIN_DIR).join("session");
        let old = Session::open(ws.path(), "old").unwrap();
        assert!(old.claim("k"));
        let long_ago = SystemTime::now() - MAX_AGE - Duration::from_secs(60);
        File::open(&old.dir)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        let dirs = || {
            std::fs::read_dir(&sessions)
                .unwrap()
                .filter(|e| e.as_ref().unwrap().path().is_dir())
                .count()
        };
        for i in 0..MAX_SESSIONS * 2 {
            Session::open(ws.path(), &format!("s{i}")).unwrap();
            assert!(dirs() <= MAX_SESSIONS, "never more than the bound");
        }
        assert!(!old.dir.exists(), "the old session is gone");
        assert!(dirs() >= MAX_SESSIONS * 3 / 4, "{}", dirs());
        // The newest are the ones kept.
        let newest = format!("s{}", MAX_SESSIONS * 2 - 1);
        assert!(sessions.join(hash_hex(&newest)).is_dir());
        assert!(!sessions.join(hash_hex("s0")).exists());
    }

    #[test]
    fn the_capture_state_is_replaced_whole_and_bounded() {
        let ws = workspace();
        let s = Session::open(ws.path(), "cap").unwrap();
        for i in 0..MAX_FAILURES + 3 {
            s.with_capture(|state| {
                state.failures.push(Failure {
                    command: format!("pytest {i}"),
                    headline: "h".into(),
                    edited: (0..MAX_EDITED + 5).map(|f| format!("f{f}")).collect(),
                });
            })
            .unwrap();
        }
        let state = s.with_capture(|state| state.clone()).unwrap();
        assert_eq!(state.failures.len(), MAX_FAILURES);
        assert_eq!(state.failures[0].command, "pytest 3", "the oldest go first");
        assert!(state.failures.iter().all(|f| f.edited.len() == MAX_EDITED));
        // Nothing temporary is left beside it.
        let names: Vec<String> = std::fs::read_dir(&s.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }
}
