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
/// Sessions kept; the least recently used beyond this are removed.
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
        if dir.is_dir() {
            return Some(Session { dir });
        }
        if !sessions.is_dir() {
            create_private_dir(&sessions).ok()?;
        }
        match create_private_dir(&dir) {
            Ok(()) => prune(&sessions, &dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
        Some(Session { dir })
    }

    /// Whether this process is the one to say the note keyed `key` in this session: true once
    /// per key, whatever the number of processes asking at the same time.
    pub fn claim(&self, key: &str) -> bool {
        let markers = std::fs::read_dir(&self.dir)
            .map(|entries| entries.count())
            .unwrap_or(usize::MAX);
        if markers >= MAX_MARKERS {
            return false;
        }
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options.open(self.dir.join(hash_hex(key))).is_ok()
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

/// Remove sessions older than [`MAX_AGE`], then the oldest beyond [`MAX_SESSIONS`]; never
/// `keep`. Failures are ignored: a session another process is removing is gone either way.
fn prune(sessions: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(sessions) else {
        return;
    };
    let now = SystemTime::now();
    let mut live: Vec<(SystemTime, PathBuf)> = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path == keep {
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
    if live.len() + 1 > MAX_SESSIONS {
        live.sort();
        for (_, path) in live.iter().take(live.len() + 1 - MAX_SESSIONS) {
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
