//! What recall already said in a host session, kept on disk because every hook call is a fresh
//! process: `<workspace>/.pith/session/<session>.claims`, one file per host session (its name a
//! hash of the session id), one line per note said (a hash of the note's key).
//!
//! A note is claimed under the file's lock (`flock`): read the lines, add the new ones, write
//! them with one append; holding the claim is the right to say the note, so of any number of
//! concurrent hook processes exactly one speaks. A claim that cannot be written means silence (a
//! note that cannot be recorded would repeat on every call); a process killed in the middle of
//! its append leaves a line without its end, which the next claim ends before writing its own.
//! A host session costs one file, made at its first note: a file created per note (the first
//! design) cost a new inode each, 0.1 to 0.2 ms apiece on ext4, and a Read naming 12 memories
//! made 13 of them.
//!
//! A session holds at most [`MAX_MARKERS`] claims; sessions untouched for [`MAX_AGE`] are
//! removed, and at most [`MAX_SESSIONS`] are kept, whenever a new session starts. Nothing is
//! created unless the brain's `.pith/` already exists.
//!
//! The project is a stranger's (DESIGN principle 13): `.pith/` and `.pith/session/` are reached
//! without following a link ([`OwnDir`]), every file is opened through the session directory's
//! descriptor with `O_NOFOLLOW`, and pruning removes only regular files named as this module
//! names them (a hash, then `.claims`, `.capture` or a capture's temporary name), never a
//! directory. Kept in the project rather than in `$PITH_HOME`: a session's notes are about this
//! project, deleting the clone takes them along, and the hook's cost is the same either way
//! (a claim is one `openat` more than before).
//!
//! The opt-in fix capture keeps a small state file per session (`<session>.capture`: failed
//! verdict commands and the files edited since), read and replaced under the same lock, written
//! to a temporary file and renamed.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use pith_paths::own::{Access, EntryKind, OwnDir};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::BRAIN_DIR;

/// Notes one session may record; past it, the session is silent.
pub const MAX_MARKERS: usize = 512;
/// Sessions kept; past this, the least recently used are removed down to three quarters of it.
pub const MAX_SESSIONS: usize = 64;
/// A session untouched this long is removed.
pub const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Longest wait for a session's lock (another hook process of the same session holds it for a
/// read and an append).
const LOCK_WAIT: Duration = Duration::from_millis(200);
/// Failed commands remembered per session for capture.
const MAX_FAILURES: usize = 8;
/// Edited files remembered per failure.
const MAX_EDITED: usize = 32;
/// The claims file's extension; the session's other files share its stem.
const CLAIMS: &str = "claims";
/// The capture state's extension.
const CAPTURE: &str = "capture";
/// The largest capture state read (it holds at most [`MAX_FAILURES`] bounded entries).
const MAX_CAPTURE_BYTES: u64 = 1024 * 1024;
/// The directory in `.pith/` that holds the sessions.
const SESSIONS: &str = "session";
/// The prune stamp's name in it.
const STAMP: &str = ".pruned";

/// One host session's record: its claims file, open for appending.
#[derive(Debug)]
pub struct Session {
    /// `.pith/session/`, reached without following a link.
    dir: OwnDir,
    /// The session's hash: `<stem>.claims`, `<stem>.capture`.
    stem: String,
    file: File,
}

impl Session {
    /// The record of `session_id` in the workspace at `root` (canonical), created if needed.
    /// `None` when the workspace has no `.pith/` (a real directory, not a link) or the record
    /// cannot be made.
    pub fn open(root: &Path, session_id: &str) -> Option<Session> {
        let stem = hash_hex(session_id);
        let claims = format!("{stem}.{CLAIMS}");
        let base = OwnDir::open(root, &[BRAIN_DIR], false).ok()?;
        let dir = base.subdir(SESSIONS, true).ok()?;
        // A session's every call after its first: one `openat`.
        let file = match dir.file(&claims, Access::Append) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match dir.file(&claims, Access::CreateNew) {
                    Ok(file) => {
                        prune(&dir, &stem);
                        file
                    }
                    // Another process of this session made it first.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        dir.file(&claims, Access::Append).ok()?
                    }
                    Err(_) => return None,
                }
            }
            Err(_) => return None,
        };
        Some(Session { dir, stem, file })
    }

    /// The session's claims, locked until the returned [`Claims`] is committed or dropped;
    /// `None` when the lock could not be had within [`LOCK_WAIT`] or the claims not read.
    pub fn claims(&self) -> Option<Claims<'_>> {
        lock(&self.file)?;
        // In use: a session is pruned by its file's age, and a quiet one (nothing new to say)
        // is as alive as a talkative one.
        let _ = self.file.set_modified(SystemTime::now());
        let mut locked = Claims {
            file: &self.file,
            held: HashSet::new(),
            lines: String::new(),
        };
        let mut text = String::new();
        (&self.file).seek(SeekFrom::Start(0)).ok()?;
        (&self.file).read_to_string(&mut text).ok()?;
        // A line a killed process left unended is ended before the new ones.
        if !text.is_empty() && !text.ends_with('\n') {
            locked.lines.push('\n');
        }
        locked.held = text.lines().map(str::to_owned).collect();
        Some(locked)
    }

    /// Read the capture state, let `update` change it, and write it back if it did; `None`
    /// (nothing changed) when the lock could not be had in time or the state not read.
    pub fn with_capture<T>(&self, update: impl FnOnce(&mut CaptureState) -> T) -> Option<T> {
        lock(&self.file)?;
        let out = self.update_capture(update);
        let _ = self.file.unlock();
        out
    }

    fn update_capture<T>(&self, update: impl FnOnce(&mut CaptureState) -> T) -> Option<T> {
        let name = format!("{}.{CAPTURE}", self.stem);
        let mut state: CaptureState = match self.dir.file(&name, Access::Read) {
            Ok(file) => {
                let mut bytes = Vec::new();
                file.take(MAX_CAPTURE_BYTES).read_to_end(&mut bytes).ok()?;
                serde_json::from_slice(&bytes).unwrap_or_default()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => CaptureState::default(),
            Err(_) => return None,
        };
        let before = state.clone();
        let out = update(&mut state);
        state.bound();
        if state != before {
            let tmp = format!("{name}.{}.tmp", std::process::id());
            let written = serde_json::to_vec(&state).ok().and_then(|bytes| {
                let mut file = self.dir.file(&tmp, Access::Replace).ok()?;
                file.write_all(&bytes).ok()?;
                self.dir.rename(&tmp, &name).ok()
            });
            if written.is_none() {
                let _ = self.dir.remove_file(&tmp);
                return None;
            }
        }
        Some(out)
    }
}

/// A session's claims under its lock: [`Claims::claim`] answers from what was read and what this
/// process added, [`Claims::commit`] writes the additions in one append. Dropped uncommitted,
/// nothing is recorded (and nothing may be said).
#[derive(Debug)]
pub struct Claims<'a> {
    file: &'a File,
    /// The hashes of the keys claimed before, one per line of the file.
    held: HashSet<String>,
    /// What this process claimed, as lines to append.
    lines: String,
}

impl Claims<'_> {
    /// Whether this process is the one to say the note keyed `key` in this session: true once
    /// per key, whatever the number of processes asking at the same time (once committed).
    pub fn claim(&mut self, key: &str) -> bool {
        if self.held.len() >= MAX_MARKERS {
            return false;
        }
        let hash = hash_hex(key);
        if !self.held.insert(hash.clone()) {
            return false;
        }
        self.lines.push_str(&hash);
        self.lines.push('\n');
        true
    }

    /// Claim memory `id` for this session: true the first time any moment (a read's pointer,
    /// an edit's failed attempt, a failure's recorded fix, a captured fix) names it, so the
    /// model is told each memory's id once per session, whichever moment tells it.
    pub fn claim_memory(&mut self, id: &str) -> bool {
        self.claim(&format!("memory\0{id}"))
    }

    /// Record this process's claims (one append) and let the session go: false when they could
    /// not be written, and then none of them may be said.
    pub fn commit(self) -> bool {
        if self.lines.trim_start_matches('\n').is_empty() {
            return true;
        }
        let mut file = self.file;
        file.write_all(self.lines.as_bytes()).is_ok()
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// Take `file`'s lock within [`LOCK_WAIT`]; `None` when another process holds it longer.
fn lock(file: &File) -> Option<()> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Some(()),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(500));
            }
            Err(_) => return None,
        }
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

/// The entries of `.pith/session/` pruning reads at most (pith keeps [`MAX_SESSIONS`] sessions
/// of at most three files each).
const PRUNE_ENTRIES_MAX: usize = MAX_SESSIONS * 8;

/// How often the ages of the sessions are looked at (a stamp file records the last time).
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Remove sessions older than [`MAX_AGE`], then the oldest beyond [`MAX_SESSIONS`]; never
/// `keep`'s. A session is every regular file named by its stem ([`session_stem`]:
/// `<hash>.claims`, `<hash>.capture`, a capture's temporary file), last used when the newest of
/// them was changed; anything else in the directory (a link, a directory, another name) is no
/// session's and is left alone. Ages are looked at when there are too many sessions or an hour
/// after the last look (a new session is the first note of a host session: it should cost a
/// directory listing, not a `stat` of every session). Failures are ignored: a session another
/// process is removing is gone either way.
fn prune(dir: &OwnDir, keep: &str) {
    // A directory that came with a clone may hold any number of entries: a bounded read is
    // enough to find what is old among pith's own.
    let Ok(entries) = dir.entries_at_most(PRUNE_ENTRIES_MAX) else {
        return;
    };
    let mut by_stem: std::collections::HashMap<String, Vec<(String, SystemTime)>> =
        std::collections::HashMap::new();
    let mut stamped = None;
    for entry in entries {
        // Only pith's own files: one a clone brought (0644, named as pith names them) is the
        // project's, and never deleted.
        if entry.kind != EntryKind::File || !entry.private {
            continue;
        }
        if entry.name == STAMP {
            stamped = Some(entry.modified);
            continue;
        }
        if let Some(stem) = session_stem(&entry.name).filter(|stem| *stem != keep) {
            by_stem
                .entry(stem.to_owned())
                .or_default()
                .push((entry.name, entry.modified));
        }
    }
    let now = SystemTime::now();
    let due = stamped.is_none_or(|at| now.duration_since(at).unwrap_or_default() > PRUNE_EVERY);
    if !due && by_stem.len() < MAX_SESSIONS {
        return;
    }
    let _ = dir.touch(STAMP);
    let remove = |files: &[(String, SystemTime)]| {
        for (name, _) in files {
            let _ = dir.remove_file(name);
        }
    };
    let mut live: Vec<(SystemTime, Vec<(String, SystemTime)>)> = Vec::new();
    for files in by_stem.into_values() {
        let used = files.iter().map(|(_, at)| *at).max();
        match used {
            Some(at) if now.duration_since(at).unwrap_or_default() <= MAX_AGE => {
                live.push((at, files));
            }
            _ => remove(&files),
        }
    }
    // Down to three quarters, so that the next many new sessions find no work.
    if live.len() + 1 > MAX_SESSIONS {
        live.sort_by_key(|(at, _)| *at);
        let keep = MAX_SESSIONS * 3 / 4;
        for (_, files) in live.iter().take(live.len() + 1 - keep) {
            remove(files);
        }
    }
}

/// The session a file of this module's naming belongs to: `<16 hex>.claims`,
/// `<16 hex>.capture` or `<16 hex>.capture.<pid>.tmp`; `None` for any other name.
fn session_stem(name: &str) -> Option<&str> {
    let (stem, rest) = name.split_once('.')?;
    if stem.len() != 16 || !stem.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let ours = rest == CLAIMS
        || rest == CAPTURE
        || rest
            .strip_prefix(CAPTURE)
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|r| r.strip_suffix(".tmp"))
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()));
    ours.then_some(stem)
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
    use std::fs::OpenOptions;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    impl Session {
        /// The claims file's path.
        fn path(&self) -> PathBuf {
            self.dir.path().join(format!("{}.{CLAIMS}", self.stem))
        }
    }

    fn workspace() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(BRAIN_DIR)).unwrap();
        dir
    }

    /// Claim `key` alone and commit: what a hook call that names one memory does.
    fn claim(session: &Session, key: &str) -> bool {
        let mut claims = session.claims().unwrap();
        let claimed = claims.claim(key);
        claims.commit() && claimed
    }

    fn lines(session: &Session) -> Vec<String> {
        std::fs::read_to_string(session.path())
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn a_key_is_claimed_once_per_session_and_a_session_holds_a_bounded_number() {
        let ws = workspace();
        let a = Session::open(ws.path(), "session a").unwrap();
        assert!(claim(&a, "k1"));
        assert!(!claim(&a, "k1"));
        assert!(!claim(
            &Session::open(ws.path(), "session a").unwrap(),
            "k1"
        ));
        assert!(claim(&Session::open(ws.path(), "session b").unwrap(), "k1"));
        // Several in one lock: each once, and all of them written by the one commit.
        let mut claims = a.claims().unwrap();
        assert_eq!(
            ["k2", "k3", "k2", "k1"].map(|k| claims.claim(k)),
            [true, true, false, false]
        );
        assert!(claims.commit());
        assert_eq!(lines(&a).len(), 3);
        // Claims dropped without a commit record nothing.
        let mut claims = a.claims().unwrap();
        assert!(claims.claim("k4"));
        drop(claims);
        assert!(claim(&a, "k4"), "an uncommitted claim was never made");
        for i in 5..MAX_MARKERS + 10 {
            claim(&a, &format!("k{i}"));
        }
        assert_eq!(lines(&a).len(), MAX_MARKERS);
        assert!(!claim(
            &Session::open(ws.path(), "session a").unwrap(),
            "one more"
        ));
        // No `.pith/`, no record (and none is made).
        let bare = tempfile::tempdir().unwrap();
        assert!(Session::open(bare.path(), "s").is_none());
        assert!(!bare.path().join(BRAIN_DIR).exists());
    }

    #[test]
    fn of_threads_claiming_one_key_at_once_exactly_one_has_it() {
        let ws = workspace();
        for round in 0..5 {
            let start = std::sync::Barrier::new(8);
            let won: Vec<Option<usize>> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..8)
                    .map(|_| {
                        scope.spawn(|| {
                            // Each its own open file, as each hook process has (the first
                            // round also makes `.pith/session/` from eight threads at once).
                            let session = Session::open(ws.path(), &format!("burst {round}"));
                            start.wait();
                            session.map(|s| usize::from(claim(&s, "the note")))
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(
                won.iter().flatten().count(),
                8,
                "round {round}: each opened it"
            );
            assert_eq!(
                won.iter().flatten().sum::<usize>(),
                1,
                "round {round}: {won:?}"
            );
        }
    }

    #[test]
    fn a_line_a_killed_process_left_unended_is_ended_before_the_next_claim() {
        let ws = workspace();
        let s = Session::open(ws.path(), "torn").unwrap();
        assert!(claim(&s, "k1"));
        let k1 = lines(&s)[0].clone();
        // Half of a second claim's line, as a process killed in its append leaves it.
        let mut file = OpenOptions::new().append(true).open(s.path()).unwrap();
        file.write_all(&k1.as_bytes()[..7]).unwrap();
        assert!(claim(&s, "k2"));
        assert!(!claim(&s, "k1") && !claim(&s, "k2"));
        let held = lines(&s);
        assert_eq!(held.len(), 3, "{held:?}");
        assert_eq!((held[0].len(), held[1].len(), held[2].len()), (16, 7, 16));
    }

    #[test]
    fn a_new_session_removes_old_ones_and_keeps_at_most_the_newest() {
        let ws = workspace();
        let sessions = ws.path().join(BRAIN_DIR).join("session");
        let old = Session::open(ws.path(), "old").unwrap();
        assert!(claim(&old, "k"));
        old.with_capture(|state| state.failures.push(failure(0, 1)))
            .unwrap();
        // An earlier version's session: a directory of marker files.
        let earlier = sessions.join(hash_hex("earlier"));
        std::fs::create_dir(&earlier).unwrap();
        std::fs::write(earlier.join(hash_hex("k")), "").unwrap();
        let cloned = sessions.join(format!("{}.{CLAIMS}", hash_hex("cloned")));
        std::fs::write(&cloned, "").unwrap();
        std::fs::set_permissions(&cloned, std::fs::Permissions::from_mode(0o644)).unwrap();
        let long_ago = SystemTime::now() - MAX_AGE - Duration::from_secs(60);
        for path in [
            old.path(),
            old.path().with_extension(CAPTURE),
            earlier.clone(),
            cloned.clone(),
        ] {
            File::open(&path).unwrap().set_modified(long_ago).unwrap();
        }
        let held = || {
            let names: HashSet<String> = std::fs::read_dir(&sessions)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".claims") || n.contains(".capture"))
                .map(|n| n.split('.').next().unwrap().to_owned())
                .filter(|stem| *stem != hash_hex("cloned"))
                .collect();
            names.len()
        };
        for i in 0..MAX_SESSIONS * 2 {
            Session::open(ws.path(), &format!("s{i}")).unwrap();
            assert!(held() <= MAX_SESSIONS, "never more than the bound");
        }
        assert!(!old.path().exists(), "the old session is gone");
        assert!(
            !old.path().with_extension(CAPTURE).exists(),
            "with its capture"
        );
        // A directory is never removed (an earlier version's session, or anyone's).
        assert!(earlier.join(hash_hex("k")).exists());
        // Nor a file named as pith names them that a clone brought (git checks out 0644).
        assert!(cloned.exists(), "a clone's file was deleted");
        assert!(held() >= MAX_SESSIONS * 3 / 4, "{}", held());
        // The newest are the ones kept.
        let claims = |name: &str| sessions.join(format!("{}.{CLAIMS}", hash_hex(name)));
        assert!(claims(&format!("s{}", MAX_SESSIONS * 2 - 1)).is_file());
        assert!(!claims("s0").exists());
    }

    fn failure(i: usize, edited: usize) -> Failure {
        Failure {
            command: format!("pytest {i}"),
            headline: "h".into(),
            edited: (0..edited).map(|f| format!("f{f}")).collect(),
        }
    }

    #[test]
    fn the_capture_state_is_replaced_whole_and_bounded() {
        let ws = workspace();
        let s = Session::open(ws.path(), "cap").unwrap();
        for i in 0..MAX_FAILURES + 3 {
            s.with_capture(|state| state.failures.push(failure(i, MAX_EDITED + 5)))
                .unwrap();
        }
        let state = s.with_capture(|state| state.clone()).unwrap();
        assert_eq!(state.failures.len(), MAX_FAILURES);
        assert_eq!(state.failures[0].command, "pytest 3", "the oldest go first");
        assert!(state.failures.iter().all(|f| f.edited.len() == MAX_EDITED));
        // Nothing temporary is left beside it, and the claims are untouched.
        let names: Vec<String> = std::fs::read_dir(s.path().parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        assert!(lines(&s).is_empty());
        // The capture's lock is let go: claims still work.
        assert!(claim(&s, "k"));
    }
}
