//! The spool: where every record waits, on disk, until a writer has turned it into a row.
//!
//! The request path appends each finished [`Record`] to the current segment file
//! (`$PITH_HOME/ledger-spool/<generation>.spool`) and returns: a `write` into the page cache,
//! no parsing, no `fsync`. The writers read the segments in order, twice: once for the rows,
//! committing each batch with the spool position they reached (ledger counters
//! `spool_generation` and `spool_offset`) in the same transaction, and once, up to there, for
//! the rows' derivations ([`DERIVED_GENERATION`], [`DERIVED_OFFSET`]), so after a crash or a
//! `kill -9` the next proxy carries on from exactly there: every record is written once, none
//! twice, in the order the request path appended them, and its segment is kept until both
//! reads are past it. Memory stays bounded however far the writers fall behind; the
//! disk holds the backlog, up to [`SpoolConfig::limit`]. A record that does not fit (the
//! limit reached, the file system full or failing) is counted as lost, logged, and shown by
//! `pith stats` and `/metrics`: never dropped silently.
//!
//! An entry is `magic, payload length, CRC-32 of the payload, payload` (little-endian u32s).
//! A segment is never appended to by a later process: each start opens a new generation, so
//! a torn last entry (the process killed mid-write) can only be at the end of a segment that
//! is already complete, where the reader skips it and counts it.
//!
//! Generations are a run: each segment is the one before plus one, from the ledger's
//! position on, and pith never skips one. A file that has a segment's name but lies beyond a
//! gap in that run (or is not a plain file) was not written by pith: it is set aside
//! (renamed `*.not-pith`, named in the log) and never read, counted or numbered after, so a
//! stray `18446744073709551615.spool` cannot make the next generation wrap.
//!
//! The spool's directory, lock and segments are pith's own files (`pith_paths::private`:
//! 0700/0600, no link followed). Flags in an entry's kind byte say which optional fields
//! follow (the conversation body, the request's content-encoding, a local turn's prompt
//! facts), so entries an older pith spooled still read. A compressed body is spooled as the
//! client sent it, and decoded by the writer; a record the writer will decode weighs a whole
//! read batch, so two such decodes never share one.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use pith_outcome::RequestOutcome;
use pith_transform::{FactKind, Site};
use pith_wire::request::{Anatomy, RequestFacts};
use pith_wire::{Provider, Wire};

use super::record::{ProviderCount, Record, Report, ReportFact, ReportResult};
use crate::bases::{BaseCache, Bases, OnBase};
use crate::edits::{EDIT_BYTES, Edit, edits_of, rebuild};

/// Ledger counter: the generation of the segment the writers have read into.
pub const SPOOL_GENERATION: &str = "spool_generation";
/// Ledger counter: how far into that segment, in bytes.
pub const SPOOL_OFFSET: &str = "spool_offset";
/// Ledger counter: the generation of the segment the derivations have been written through
/// (never past [`SPOOL_GENERATION`]/[`SPOOL_OFFSET`]: a row comes before its derivations).
pub const DERIVED_GENERATION: &str = "spool_derived_generation";
/// Ledger counter: how far into that segment, in bytes.
pub const DERIVED_OFFSET: &str = "spool_derived_offset";

const MAGIC: u32 = 0x5053_5031; // "PSP1"
const HEADER: usize = 12;
/// The payload's first byte: a finished request's whole record (this format's version 1).
const FINISHED: u8 = 1;
/// ... or the announcement that a request's answer has started: its record without bodies,
/// appended when the response headers go to the client, so a request cut by `kill -9`
/// mid-answer still gets its row.
pub(super) const OPENED: u8 = 2;
/// A finished request whose client body is an earlier entry's of the segment with edits
/// ([`crate::bases`]); read back as [`FINISHED`].
const FINISHED_ON_BASE: u8 = 3;
/// A segment this large is closed and the next one started (by the request path, about once
/// per 140 Claude Code requests), so space is given back as the writers finish each one; at
/// most this much that the writers have read stays on disk.
const SEGMENT_BYTES: u64 = 8 << 20;
/// [`Spool::published`] packs a generation above this many bits of length.
const LEN_BITS: u32 = 40;
/// The highest generation [`Spool::published`] can hold (about 16.7 million segments: 128 TiB
/// of rotations, or a start a minute for 31 years).
const MAX_GENERATION: u64 = (1 << (64 - LEN_BITS)) - 1;
/// The digits of a segment's name (`{generation:016}.spool`): the only names pith reads.
const NAME_DIGITS: usize = 16;
/// What a file set aside as not pith's own gets appended to its name.
const NOT_PITH: &str = ".not-pith";

/// The spool directory of the ledger at `ledger`: beside it, named after it
/// (`ledger.db-spool`, as SQLite names its `-wal`).
pub fn dir_beside(ledger: &Path) -> std::path::PathBuf {
    let mut name = ledger.as_os_str().to_owned();
    name.push("-spool");
    std::path::PathBuf::from(name)
}

/// Where the spool lives and how much it may hold.
#[derive(Debug, Clone)]
pub struct SpoolConfig {
    /// The directory of the segment files (made 0700).
    pub dir: PathBuf,
    /// Bytes of records not yet written as rows the spool may hold; a record past it is lost
    /// (counted and logged).
    pub limit: u64,
}

/// The default [`SpoolConfig::limit`]: 1 GiB, about 18,000 requests of a 56 KB Claude Code
/// body waiting at once.
pub const DEFAULT_LIMIT: u64 = 1 << 30;

/// A position in the spool: a segment and a byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Position {
    pub generation: u64,
    pub offset: u64,
}

/// Why the spool could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// Its directory or files.
    #[error("cannot open the ledger spool in {dir}")]
    Io {
        /// The spool's directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Its generations reached what a position can hold (only a planted segment near the
    /// limit can bring that about).
    #[error(
        "the ledger spool in {dir} has reached segment number {generation}, the last pith can \
         count to: stop pith, move the *.spool files there aside, and start it again"
    )]
    Exhausted {
        /// The spool's directory.
        dir: PathBuf,
        /// The last generation found.
        generation: u64,
    },
    /// Another process holds it.
    #[error(
        "another pith proxy is writing the ledger through {dir}: give each proxy its own \
         PITH_HOME (or [ledger] path), or start this one with --no-ledger"
    )]
    Busy {
        /// The spool's directory.
        dir: PathBuf,
    },
}

/// Why a record was not kept.
#[derive(Debug)]
pub(crate) enum NotKept {
    /// The spool holds [`SpoolConfig::limit`] bytes already.
    Full,
    /// The file system refused the write (full, read-only, failing).
    Io(std::io::Error),
}

/// The appending end, behind the request path's lock.
struct Appender {
    file: File,
    generation: u64,
    len: u64,
    buf: Vec<u8>,
    /// Bodies of this segment written whole, for the next ones to be written on.
    bases: Bases,
}

/// The spool, shared by the request path (appending) and the writers (reading).
pub(crate) struct Spool {
    /// Held (an exclusive lock) for the process's life.
    _lock: File,
    dir: PathBuf,
    limit: u64,
    appender: Mutex<Appender>,
    /// Bytes appended whose rows or derivations are not committed yet (what the spool must
    /// keep: its limit counts these).
    backlog: AtomicU64,
    /// Entries appended whose rows or derivations are not committed yet.
    pending: AtomicU64,
    /// The segment appended to and how much of it is written, packed (generation above
    /// [`LEN_BITS`]): what a writer may read, without taking the request path's lock (a writer
    /// at idle priority preempted while holding it would stall the request path).
    published: AtomicU64,
    /// When the oldest entry the writers have not taken yet was appended: milliseconds since
    /// `epoch`, plus one; 0 when there is none.
    oldest: AtomicU64,
    epoch: Instant,
    /// Tests: the milliseconds since `epoch` the spool's clock reads instead of the real ones
    /// (`u64::MAX`: the real clock), so the age rules are tested without waiting for them.
    paused_at_ms: AtomicU64,
    /// Segments below this generation have been removed.
    removed_below: AtomicU64,
    /// The readers' last bases.
    base_cache: BaseCache,
}

fn pack(generation: u64, len: u64) -> u64 {
    (generation << LEN_BITS) | (len & ((1 << LEN_BITS) - 1))
}

fn segment_name(generation: u64) -> String {
    format!("{generation:016}.spool")
}

/// The files in `dir` named as pith names its segments (`{generation:016}.spool`, a
/// generation a position can hold), oldest first, and whether each is a plain file (a link or
/// anything else is not pith's). Other names are not looked at.
fn segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf, bool)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(generation) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".spool"))
            .filter(|n| n.len() == NAME_DIGITS && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|&g| g <= MAX_GENERATION)
        else {
            continue;
        };
        // `file_type` does not follow a link.
        let plain = entry.file_type().is_ok_and(|t| t.is_file());
        found.push((generation, entry.path(), plain));
    }
    found.sort();
    Ok(found)
}

/// The segments pith wrote from generation `from` on, and the files it did not: the run
/// starts at the first segment at or after `from` (the ledger's own, or the first after it
/// when the ledger is new) and goes on while each is the one before plus one; a segment
/// beyond a gap, and any that is not a plain file, is not pith's.
fn own_run(found: Vec<(u64, PathBuf, bool)>, from: u64) -> (Vec<(u64, PathBuf)>, Vec<PathBuf>) {
    let (mut own, mut stray) = (Vec::<(u64, PathBuf)>::new(), Vec::new());
    for (generation, path, plain) in found {
        let follows = own.last().is_none_or(|(last, _)| generation == last + 1);
        if generation >= from && plain && follows && stray.is_empty() {
            own.push((generation, path));
        } else if generation >= from || !plain {
            stray.push(path);
        }
    }
    (own, stray)
}

fn segment_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(segment_name(generation))
}

fn create_segment(dir: &Path, generation: u64) -> std::io::Result<File> {
    if generation > MAX_GENERATION {
        return Err(std::io::Error::other(format!(
            "the ledger spool has reached segment number {MAX_GENERATION}, the last pith can \
             count to: restart pith after moving the *.spool files in {dir:?} aside"
        )));
    }
    pith_paths::private::create_new(&segment_path(dir, generation))
}

/// Open segment `generation` for reading (never through a link).
fn open_segment(dir: &Path, generation: u64) -> std::io::Result<File> {
    pith_paths::private::open(
        &segment_path(dir, generation),
        OpenOptions::new().read(true),
    )
}

/// What the spool holds beyond `from`: entries and bytes, counted by walking the entries'
/// headers (for `pith stats`, from another process; nothing is changed).
pub fn backlog(dir: &Path, from: Position) -> std::io::Result<(u64, u64)> {
    let mut entries = 0;
    let mut bytes = 0;
    let list = match segments(dir) {
        Ok(list) => list,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(e) => return Err(e),
    };
    for (generation, path) in own_run(list, from.generation).0 {
        let start = if generation == from.generation {
            from.offset
        } else {
            0
        };
        let (n, size) = backlog_of(&path, start)?;
        entries += n;
        bytes += size;
    }
    Ok((entries, bytes))
}

/// The size of the whole entry at `at`, if a complete header with the magic is there.
fn entry_size(file: &File, at: u64, len: u64) -> Option<u64> {
    let mut header = [0u8; HEADER];
    if at + HEADER as u64 > len || file.read_exact_at(&mut header, at).is_err() {
        return None;
    }
    let (magic, size) = (le32(&header[0..4]), le32(&header[4..8]));
    let total = HEADER as u64 + u64::from(size);
    (magic == MAGIC && at + total <= len).then_some(total)
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

impl Spool {
    /// Open the spool in `config.dir` for a new process: the writers resume at `resume` (the
    /// position the ledger's counters hold), segments before it are removed, and appending
    /// starts a new segment after every one there.
    pub fn open(config: &SpoolConfig, resume: Position) -> Result<(Spool, Position), SpoolError> {
        let error = |source| SpoolError::Io {
            dir: config.dir.clone(),
            source,
        };
        let lock = lock_dir(&config.dir)?;
        let Left {
            backlog,
            pending,
            newest,
            start,
        } = take_stock(&config.dir, resume).map_err(error)?;
        let generation = newest + 1;
        if generation > MAX_GENERATION {
            return Err(SpoolError::Exhausted {
                dir: config.dir.clone(),
                generation: newest,
            });
        }
        let file = create_segment(&config.dir, generation).map_err(error)?;
        // The writers start where the ledger says, or at the first segment after it.
        let read_from = match start {
            Some(g) if g == resume.generation => resume,
            Some(g) => Position {
                generation: g,
                offset: 0,
            },
            None => Position {
                generation,
                offset: 0,
            },
        };
        let spool = Spool {
            _lock: lock,
            dir: config.dir.clone(),
            limit: config.limit,
            appender: Mutex::new(Appender {
                file,
                generation,
                len: 0,
                buf: Vec::new(),
                bases: Bases::default(),
            }),
            backlog: AtomicU64::new(backlog),
            pending: AtomicU64::new(pending),
            published: AtomicU64::new(pack(generation, 0)),
            oldest: AtomicU64::new(u64::from(pending > 0)),
            epoch: Instant::now(),
            paused_at_ms: AtomicU64::new(u64::MAX),
            removed_below: AtomicU64::new(resume.generation),
            base_cache: BaseCache::default(),
        };
        Ok((spool, read_from))
    }

    /// The segment appended to now, and how far it is written.
    fn published(&self) -> (u64, u64) {
        let p = self.published.load(Ordering::SeqCst);
        (p >> LEN_BITS, p & ((1 << LEN_BITS) - 1))
    }

    /// Where the spool ends now: every entry appended so far lies before it.
    pub fn end(&self) -> Position {
        let (generation, offset) = self.published();
        Position { generation, offset }
    }

    /// The segment appended to now.
    pub fn generation(&self) -> u64 {
        self.published().0
    }

    /// Milliseconds since `epoch` by the spool's clock.
    fn now_ms(&self) -> u64 {
        match self.paused_at_ms.load(Ordering::SeqCst) {
            u64::MAX => u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 2),
            paused => paused,
        }
    }

    /// Tests: stop the spool's clock where it is; [`Spool::advance_clock`] moves it.
    #[cfg(test)]
    pub fn pause_clock(&self) {
        let now = self.now_ms();
        self.paused_at_ms.store(now, Ordering::SeqCst);
    }

    /// Tests: move the paused clock on by `by`.
    #[cfg(test)]
    pub fn advance_clock(&self, by: std::time::Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(0);
        self.paused_at_ms.fetch_add(by, Ordering::SeqCst);
    }

    /// Note that an entry waits, unless an older one does already.
    fn mark_waiting(&self) {
        let now = self.now_ms() + 1;
        let _ = self
            .oldest
            .compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst);
    }

    fn appender(&self) -> MutexGuard<'_, Appender> {
        // An append either wrote its entry or not; the lengths are set only after a write.
        self.appender.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Append a finished request's `record`.
    pub fn append(&self, record: &Record) -> Result<(), NotKept> {
        self.append_entry(record, FINISHED)
    }

    /// Append the announcement that `record`'s answer has started (no bodies).
    pub fn append_opened(&self, record: &Record) -> Result<(), NotKept> {
        self.append_entry(record, OPENED)
    }

    fn append_entry(&self, record: &Record, kind: u8) -> Result<(), NotKept> {
        let mut a = self.appender();
        let a = &mut *a;
        // Before a base is chosen: a base is in the segment its entry goes to.
        if a.len >= SEGMENT_BYTES {
            self.rotate(a).map_err(NotKept::Io)?;
        }
        let on_base = (kind == FINISHED)
            .then(|| a.bases.on_base(&record.request_body))
            .flatten();
        a.buf.clear();
        a.buf.extend_from_slice(&[0; HEADER]);
        encode_on(record, kind, on_base.as_ref(), &mut a.buf);
        let payload = a.buf.len() - HEADER;
        let size = u32::try_from(payload).map_err(|_| NotKept::Full)?;
        let crc = crc32fast::hash(&a.buf[HEADER..]);
        a.buf[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        a.buf[4..8].copy_from_slice(&size.to_le_bytes());
        a.buf[8..12].copy_from_slice(&crc.to_le_bytes());
        let total = a.buf.len() as u64;
        if self.backlog.load(Ordering::SeqCst).saturating_add(total) > self.limit {
            return Err(NotKept::Full);
        }
        if let Err(e) = a.file.write_all(&a.buf) {
            // A short write leaves part of an entry: cut it off so the segment stays readable,
            // and start a new segment if even that fails.
            if a.file.set_len(a.len).is_err() {
                let _ = self.rotate(a);
            }
            return Err(NotKept::Io(e));
        }
        if kind == FINISHED && on_base.is_none() {
            a.bases.written_whole(a.len, &record.request_body);
        }
        a.len += total;
        // Big buffers are not kept between appends.
        if a.buf.capacity() > 1 << 20 {
            a.buf = Vec::new();
        }
        self.backlog.fetch_add(total, Ordering::SeqCst);
        self.pending.fetch_add(1, Ordering::SeqCst);
        self.published
            .store(pack(a.generation, a.len), Ordering::SeqCst);
        self.mark_waiting();
        Ok(())
    }

    /// Close the current segment and append to a new one from now on.
    fn rotate(&self, a: &mut Appender) -> std::io::Result<()> {
        let file = create_segment(&self.dir, a.generation.saturating_add(1))?;
        a.file = file;
        a.generation += 1;
        a.len = 0;
        a.bases.clear();
        self.published
            .store(pack(a.generation, 0), Ordering::SeqCst);
        Ok(())
    }

    /// Entries waiting to be written, and their bytes.
    pub fn backlog(&self) -> (u64, u64) {
        (
            self.pending.load(Ordering::SeqCst),
            self.backlog.load(Ordering::SeqCst),
        )
    }

    /// How long the oldest entry not yet taken by a writer has waited.
    pub fn oldest_wait(&self) -> Option<std::time::Duration> {
        match self.oldest.load(Ordering::SeqCst) {
            0 => None,
            at => Some(std::time::Duration::from_millis(
                self.now_ms().saturating_sub(at - 1),
            )),
        }
    }

    /// Read the entries from `from`, up to `max_entries` and about `max_bytes`: the records,
    /// where reading stopped, and entries found unreadable and skipped (a torn or damaged
    /// tail of a finished segment). Reading changes nothing; [`Spool::consumed`] does, once
    /// the rows are committed.
    pub fn read(&self, from: Position, max_entries: usize, max_bytes: u64) -> ReadBatch {
        self.read_until(from, None, max_entries, max_bytes)
    }

    /// [`Spool::read`], reading no entry at or past `until` when one is given (the
    /// derivations read only what the rows were written for).
    pub fn read_until(
        &self,
        from: Position,
        until: Option<Position>,
        max_entries: usize,
        max_bytes: u64,
    ) -> ReadBatch {
        let mut batch = ReadBatch {
            records: Vec::new(),
            opened: Vec::new(),
            ends: Vec::new(),
            end: from,
            skipped: 0,
            bytes: 0,
            weight: 0,
            entries: 0,
        };
        // Entries appended from here on are newer than anything this batch takes.
        self.oldest.store(0, Ordering::SeqCst);
        let (current, current_len) = match (self.published(), until) {
            (published, Some(until)) => published.min((until.generation, until.offset)),
            (published, None) => published,
        };
        let mut at = from;
        while batch.records.len() < max_entries && batch.weight < max_bytes {
            if at.generation > current {
                break;
            }
            let file = match open_segment(&self.dir, at.generation) {
                Ok(f) => f,
                Err(_) if at.generation < current => {
                    at = Position {
                        generation: at.generation + 1,
                        offset: 0,
                    };
                    continue;
                }
                Err(_) => break,
            };
            // The current segment is read only up to what was appended when this read began.
            let len = if at.generation == current {
                current_len
            } else {
                file.metadata().map(|m| m.len()).unwrap_or(0)
            };
            let advanced = read_segment(
                &file,
                &self.base_cache,
                len,
                &mut at,
                current,
                &mut batch,
                (max_entries, max_bytes),
            );
            if at.generation < current && at.offset >= len {
                at = Position {
                    generation: at.generation + 1,
                    offset: 0,
                };
                continue;
            }
            if !advanced {
                break;
            }
        }
        batch.end = at;
        batch
    }

    /// The rows of a batch are committed, their derivations still to come: its entries stay
    /// (in the backlog, on disk) until [`Spool::consumed`], waiting from now.
    pub fn taken(&self) {
        if self.pending.load(Ordering::SeqCst) > 0 {
            self.mark_waiting();
        }
    }

    /// The derivations of `batch` are committed too: forget what it held, and remove the
    /// segments before its end.
    pub fn consumed(&self, batch: &ReadBatch) {
        let through = batch.end;
        self.backlog.fetch_sub(
            batch.bytes.min(self.backlog.load(Ordering::SeqCst)),
            Ordering::SeqCst,
        );
        self.pending.fetch_sub(
            batch.entries.min(self.pending.load(Ordering::SeqCst)),
            Ordering::SeqCst,
        );
        // Only when reading has moved past a segment: listing the directory costs syscalls.
        if self
            .removed_below
            .fetch_max(through.generation, Ordering::SeqCst)
            < through.generation
            && let Ok(list) = segments(&self.dir)
        {
            for (generation, path, plain) in list {
                if generation < through.generation && plain {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
        if self.pending.load(Ordering::SeqCst) > 0 {
            // Entries this batch left for the next: waiting since at least now.
            self.mark_waiting();
        }
    }
}

/// Make the spool's directory and take its lock (held for the process's life).
fn lock_dir(dir: &Path) -> Result<File, SpoolError> {
    let error = |source| SpoolError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    pith_paths::private::create_dir(dir).map_err(error)?;
    // One process per spool: its writers own every segment in it.
    let lock = pith_paths::private::create_or_open(&dir.join("lock")).map_err(error)?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(SpoolError::Busy {
                dir: dir.to_path_buf(),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(error(e)),
    }
    Ok(lock)
}

/// What a previous process left in the spool from `resume` on ([`take_stock`]).
struct Left {
    /// The bytes of the entries still to be written.
    backlog: u64,
    /// Those entries.
    pending: u64,
    /// The newest generation there (`resume`'s when there is none).
    newest: u64,
    /// The first segment pith wrote at or after `resume`, if any.
    start: Option<u64>,
}

/// Remove the segments before `resume` (written through), set aside the files pith did not
/// write, and count what the rest hold from `resume` on.
fn take_stock(dir: &Path, resume: Position) -> std::io::Result<Left> {
    let mut backlog = 0;
    let mut pending = 0;
    let mut newest = resume.generation;
    let mut start = None;
    let found = segments(dir)?;
    for (generation, path, plain) in &found {
        if *generation < resume.generation && *plain {
            std::fs::remove_file(path)?;
        }
    }
    let (own, stray) = own_run(found, resume.generation);
    set_aside(&stray);
    for (generation, path) in own {
        newest = newest.max(generation);
        start.get_or_insert(generation);
        let from = if generation == resume.generation {
            resume.offset
        } else {
            0
        };
        let (n, bytes) = backlog_of(&path, from)?;
        pending += n;
        backlog += bytes;
    }
    Ok(Left {
        backlog,
        pending,
        newest,
        start,
    })
}

/// Rename files that are not pith's segments aside (`*.not-pith`), saying so: never read,
/// never removed (they are someone else's), never in the way of a generation pith numbers.
fn set_aside(stray: &[PathBuf]) {
    for path in stray {
        let mut aside = path.as_os_str().to_owned();
        aside.push(NOT_PITH);
        match std::fs::rename(path, &aside) {
            Ok(()) => tracing::warn!(
                file = ?path,
                "a file in the ledger spool that pith did not write (beyond the segments it \
                 numbered, or not a plain file) was set aside as *.not-pith and not read"
            ),
            Err(e) => tracing::warn!(
                file = ?path,
                error = &e as &dyn std::error::Error,
                "a file in the ledger spool that pith did not write is ignored (it could not \
                 be renamed aside)"
            ),
        }
    }
}

fn backlog_of(path: &Path, from: u64) -> std::io::Result<(u64, u64)> {
    let file = pith_paths::private::open(path, OpenOptions::new().read(true))?;
    let len = file.metadata()?.len();
    let (mut entries, mut bytes, mut at) = (0, 0, from);
    while let Some(size) = entry_size(&file, at, len) {
        entries += 1;
        bytes += size;
        at += size;
    }
    Ok((entries, bytes))
}

impl ReadBatch {
    /// What it weighs against a read's `max_bytes`: each entry's bytes or, more, its bodies as
    /// read, and a whole batch for each body the writer will decode.
    pub fn weight(&self) -> u64 {
        self.weight
    }
}

/// What [`Spool::read`] found.
pub(crate) struct ReadBatch {
    pub records: Vec<Record>,
    /// Requests whose answer started (their records without bodies), in spool order.
    pub opened: Vec<Record>,
    /// Where each record's entry ends (a position to commit with its row alone).
    pub ends: Vec<Position>,
    /// Where the next read starts.
    pub end: Position,
    /// Entries that could not be read back, skipped.
    pub skipped: u64,
    bytes: u64,
    /// What the batch costs the writers in memory, bounded by a read's `max_bytes`: each
    /// entry's bytes or, more, its bodies as read, and a whole batch for each body the writer
    /// will decode.
    weight: u64,
    entries: u64,
}

enum Entry {
    Record(Box<Record>, u64),
    Opened(Box<Record>, u64),
    /// A whole frame whose payload does not decode (or fails its checksum).
    Damaged(u64),
    /// Nothing more yet.
    End,
    /// A partial or damaged frame header.
    Torn,
}

fn read_entry(file: &File, at: u64, len: u64, (generation, bases): (u64, &BaseCache)) -> Entry {
    let (payload, total) = match read_payload(file, at, len) {
        Ok(read) => read,
        Err(entry) => return entry,
    };
    // A base is an entry written whole earlier in the same segment: kept, or read from it.
    let mut base = |offset: u64, base_len: u64| {
        if offset >= at {
            return None;
        }
        let body = bases.get(generation, offset).or_else(|| {
            let (payload, _) = read_payload(file, offset, len).ok()?;
            let (FINISHED, record) = decode(&payload)? else {
                return None;
            };
            // Read once: the conversation's next entries are on it too.
            bases.keep(generation, offset, &record.request_body);
            Some(record.request_body)
        })?;
        (body.len() as u64 == base_len).then_some(body)
    };
    match decode_on(&payload, &mut base) {
        Some((FINISHED, record)) => {
            bases.keep(generation, at, &record.request_body);
            Entry::Record(Box::new(record), total)
        }
        Some((FINISHED_ON_BASE, record)) => Entry::Record(Box::new(record), total),
        Some((_, record)) => Entry::Opened(Box::new(record), total),
        None => Entry::Damaged(total),
    }
}

/// The payload of the entry at `at` and the entry's whole size, its checksum checked; or what
/// the reader makes of it when it cannot be had.
fn read_payload(file: &File, at: u64, len: u64) -> Result<(Vec<u8>, u64), Entry> {
    if at >= len {
        return Err(Entry::End);
    }
    let mut header = [0u8; HEADER];
    if at + HEADER as u64 > len || file.read_exact_at(&mut header, at).is_err() {
        return Err(Entry::Torn);
    }
    let (magic, size, crc) = (
        le32(&header[0..4]),
        le32(&header[4..8]),
        le32(&header[8..12]),
    );
    let total = HEADER as u64 + u64::from(size);
    if magic != MAGIC || at + total > len {
        return Err(Entry::Torn);
    }
    let mut payload = vec![0u8; size as usize];
    if file
        .read_exact_at(&mut payload, at + HEADER as u64)
        .is_err()
    {
        return Err(Entry::Torn);
    }
    if crc32fast::hash(&payload) != crc {
        return Err(Entry::Damaged(total));
    }
    Ok((payload, total))
}

// The payload: fields in a fixed order, integers little-endian, strings and bodies with a
// u64 length, options with a presence byte.

fn put_u8(b: &mut Vec<u8>, v: u8) {
    b.push(v);
}
fn put_u64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn put_i64(b: &mut Vec<u8>, v: i64) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn put_f64(b: &mut Vec<u8>, v: f64) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn put_bytes(b: &mut Vec<u8>, v: &[u8]) {
    put_u64(b, v.len() as u64);
    b.extend_from_slice(v);
}
fn put_opt<T>(b: &mut Vec<u8>, v: Option<T>, put: impl FnOnce(&mut Vec<u8>, T)) {
    match v {
        Some(v) => {
            put_u8(b, 1);
            put(b, v);
        }
        None => put_u8(b, 0),
    }
}

fn wire_code(w: Wire) -> u8 {
    match w {
        Wire::AnthropicMessages => 0,
        Wire::ChatCompletions => 1,
        Wire::Responses => 2,
    }
}
fn wire_of(c: u8) -> Option<Wire> {
    Some(match c {
        0 => Wire::AnthropicMessages,
        1 => Wire::ChatCompletions,
        2 => Wire::Responses,
        _ => return None,
    })
}
fn provider_code(p: Provider) -> u8 {
    match p {
        Provider::Anthropic => 0,
        Provider::OpenAi => 1,
    }
}
fn provider_of(c: u8) -> Option<Provider> {
    Some(match c {
        0 => Provider::Anthropic,
        1 => Provider::OpenAi,
        _ => return None,
    })
}
fn kind_code(k: FactKind) -> u8 {
    match k {
        FactKind::Count => 0,
        FactKind::CharsKeptOut => 1,
        FactKind::Level => 2,
        FactKind::CharsAdded => 3,
    }
}
fn kind_of(c: u8) -> Option<FactKind> {
    Some(match c {
        0 => FactKind::Count,
        1 => FactKind::CharsKeptOut,
        2 => FactKind::Level,
        3 => FactKind::CharsAdded,
        _ => return None,
    })
}
fn site_code(s: Site) -> u8 {
    match s {
        Site::Tools => 0,
        Site::System => 1,
        Site::Tail => 2,
        Site::History => 3,
    }
}
fn site_of(c: u8) -> Option<Site> {
    Some(match c {
        0 => Site::Tools,
        1 => Site::System,
        2 => Site::Tail,
        3 => Site::History,
        _ => return None,
    })
}

/// Set in an entry's kind byte when it ends with the record's `conversation_body` (entries an
/// older pith wrote do not).
const WITH_CONVERSATION: u8 = 0x80;
/// Set in an entry's kind byte when the record's `request_encoding` follows the conversation
/// (entries an older pith wrote do not).
const WITH_REQUEST_ENCODING: u8 = 0x40;
/// Set in an entry's kind byte when the record's `prompt_facts` follow its request encoding
/// (only then: an entry without them reads as an older pith wrote it).
const WITH_PROMPT_FACTS: u8 = 0x20;
/// Set in an entry's kind byte when the record's `provider_count` follows everything else.
const WITH_PROVIDER_COUNT: u8 = 0x10;
/// Set in an entry's kind byte when its upstream body is written as the request body with one
/// span replaced (what a pith before the edits wrote; read still).
const WITH_UPSTREAM_SPAN: u8 = 0x08;
/// Set in an entry's kind byte when its upstream body is written as the request body with the
/// places it changed replaced ([`crate::edits`]).
const WITH_UPSTREAM_EDITS: u8 = 0x04;
/// Every flag an entry's kind byte can carry.
const FLAGS: u8 = WITH_CONVERSATION
    | WITH_REQUEST_ENCODING
    | WITH_PROMPT_FACTS
    | WITH_PROVIDER_COUNT
    | WITH_UPSTREAM_SPAN
    | WITH_UPSTREAM_EDITS;

/// The body a stage sent upstream as the client's with its edits, when that is smaller than
/// the sent body whole: the conversation is written once, not twice (2.6 MB for a 1.3 MB one),
/// and deferral's few insertions in the `tools` array are written without the array.
fn sent_edits<'s>(client: &[u8], sent: &'s [u8]) -> Option<Vec<Edit<'s>>> {
    let edits = edits_of(client, sent);
    // A count, then each edit's two positions and its replacement's length and bytes.
    let size: usize = 8 + edits
        .iter()
        .map(|e| 24 + e.replacement.len())
        .sum::<usize>();
    (size < sent.len()).then_some(edits)
}

/// The entry for `r`: `kind` [`FINISHED`] with its bodies, [`OPENED`] without.
pub(super) fn encode(r: &Record, kind: u8, b: &mut Vec<u8>) {
    encode_on(r, kind, None, b);
}

/// [`encode`], the client's body written as `on_base` says when it says (a finished request's
/// only).
fn encode_on(r: &Record, kind: u8, on_base: Option<&OnBase<'_>>, b: &mut Vec<u8>) {
    let bodies = kind == FINISHED;
    let on_base = on_base.filter(|_| bodies);
    let facts = if r.prompt_facts.is_some() {
        WITH_PROMPT_FACTS
    } else {
        0
    };
    let count = if r.provider_count.is_some() {
        WITH_PROVIDER_COUNT
    } else {
        0
    };
    let sent = r.upstream_body.as_deref().filter(|_| bodies);
    let edits = sent.and_then(|sent| sent_edits(&r.request_body, sent));
    let spanned = if edits.is_some() {
        WITH_UPSTREAM_EDITS
    } else {
        0
    };
    let kind = if on_base.is_some() {
        FINISHED_ON_BASE
    } else {
        kind
    };
    put_u8(
        b,
        kind | WITH_CONVERSATION | WITH_REQUEST_ENCODING | facts | count | spanned,
    );
    put_i64(b, r.ts_ms);
    put_i64(b, r.arrival_us);
    put_bytes(b, r.client.as_bytes());
    put_opt(b, r.header_session.as_deref(), |b, v| {
        put_bytes(b, v.as_bytes())
    });
    put_opt(b, r.agent_type.as_deref(), |b, v| {
        put_bytes(b, v.as_bytes())
    });
    put_bytes(b, r.account.as_bytes());
    put_opt(b, r.wire, |b, w| put_u8(b, wire_code(w)));
    put_opt(b, r.provider, |b, p| put_u8(b, provider_code(p)));
    put_bytes(b, r.method.as_bytes());
    put_bytes(b, r.path.as_bytes());
    put_opt(b, r.status, |b, s| b.extend_from_slice(&s.to_le_bytes()));
    put_bytes(b, r.outcome.as_str().as_bytes());
    put_opt(b, r.error.as_deref(), |b, v| put_bytes(b, v.as_bytes()));
    match on_base {
        Some(on) => {
            put_u64(b, on.offset);
            put_u64(b, on.base_len);
            put_edits(b, &on.edits);
        }
        None => put_bytes(b, if bodies { &r.request_body } else { &[] }),
    }
    match edits {
        Some(edits) => put_opt(b, Some(edits), |b, edits| put_edits(b, &edits)),
        None => put_opt(b, sent, put_bytes),
    }
    put_u64(b, r.bytes_upstream);
    let chunks = if bodies { &r.response_chunks[..] } else { &[] };
    let kept: u64 = chunks.iter().map(|c| c.len() as u64).sum();
    put_u64(b, kept);
    for c in chunks {
        b.extend_from_slice(c);
    }
    put_u64(b, r.response_bytes);
    put_u8(b, u8::from(r.response_truncated));
    put_u8(b, u8::from(r.response_is_sse));
    put_opt(b, r.content_encoding.as_deref(), |b, v| {
        put_bytes(b, v.as_bytes())
    });
    put_opt(b, r.ttfb_ms, put_f64);
    put_f64(b, r.total_ms);
    put_reports(b, &r.transforms);
    // Last (see `decode`).
    put_opt(
        b,
        r.conversation_body.as_deref().filter(|_| bodies),
        put_bytes,
    );
    put_opt(b, r.request_encoding.as_deref(), |b, v| {
        put_bytes(b, v.as_bytes())
    });
    if let Some(f) = &r.prompt_facts {
        put_prompt_facts(b, f);
    }
    if let Some(count) = r.provider_count {
        put_bytes(b, count.as_str().as_bytes());
        put_opt(b, count.tokens(), put_u64);
    }
}

/// Edits of a body (read back by [`read_edits`]).
fn put_edits(b: &mut Vec<u8>, edits: &[Edit<'_>]) {
    put_u64(b, edits.len() as u64);
    for e in edits {
        put_u64(b, e.start as u64);
        put_u64(b, e.end as u64);
        put_bytes(b, e.replacement);
    }
}

/// Edits [`put_edits`] wrote.
fn read_edits<'p>(r: &mut Reader<'p>) -> Option<Vec<Edit<'p>>> {
    let count = usize::try_from(r.u64()?).ok()?;
    // Each edit takes EDIT_BYTES at least: a count past what is left is damage.
    if count > r.rest.len() / EDIT_BYTES {
        return None;
    }
    let mut edits = Vec::with_capacity(count);
    for _ in 0..count {
        let start = usize::try_from(r.u64()?).ok()?;
        let end = usize::try_from(r.u64()?).ok()?;
        let replacement = r.bytes()?;
        edits.push(Edit {
            start,
            end,
            replacement,
        });
    }
    Some(edits)
}

/// The stage reports (read back by [`read_reports`]).
fn put_reports(b: &mut Vec<u8>, transforms: &[Report]) {
    put_u64(b, transforms.len() as u64);
    for t in transforms {
        put_bytes(b, t.stage.as_bytes());
        match &t.result {
            ReportResult::Applied(facts) => {
                put_u8(b, 0);
                put_u64(b, facts.len() as u64);
                for f in facts {
                    put_bytes(b, f.name.as_bytes());
                    put_u64(b, f.value);
                    put_u8(b, kind_code(f.kind));
                    put_opt(b, f.site, |b, s| put_u8(b, site_code(s)));
                }
            }
            ReportResult::Unchanged(reason) => {
                put_u8(b, 1);
                put_bytes(b, reason.as_bytes());
            }
            ReportResult::Failed(error) => {
                put_u8(b, 2);
                put_bytes(b, error.as_bytes());
            }
        }
    }
}

/// A local turn's prompt facts, at the very end (read back by [`read_prompt_facts`]).
fn put_prompt_facts(b: &mut Vec<u8>, f: &RequestFacts) {
    let put_str = |b: &mut Vec<u8>, v: &str| put_bytes(b, v.as_bytes());
    put_opt(b, f.model.as_deref(), put_str);
    let a = &f.anatomy;
    for n in [a.tools, a.system, a.messages, a.other] {
        put_u64(b, n);
    }
    put_opt(b, f.metadata_session.as_deref(), put_str);
    put_opt(b, f.first_user_hash.as_deref(), put_str);
}

/// Reads a payload front to back; every read checks the length left.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u64(&mut self) -> Option<u64> {
        let b = self.take(8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        let b = self.take(8)?;
        Some(i64::from_le_bytes(b.try_into().ok()?))
    }
    fn f64(&mut self) -> Option<f64> {
        let b = self.take(8)?;
        Some(f64::from_le_bytes(b.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u64()?).ok()?;
        self.take(n)
    }
    fn string(&mut self) -> Option<String> {
        Some(String::from_utf8_lossy(self.bytes()?).into_owned())
    }
    fn opt<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.u8()? {
            0 => Some(None),
            1 => read(self).map(Some),
            _ => None,
        }
    }
}

/// Read entries of one segment (`len` bytes of it) from `at` into `batch`, within its limits;
/// whether any was taken.
fn read_segment(
    file: &File,
    bases: &BaseCache,
    len: u64,
    at: &mut Position,
    current: u64,
    batch: &mut ReadBatch,
    (max_entries, max_bytes): (usize, u64),
) -> bool {
    let mut advanced = false;
    while batch.records.len() < max_entries && batch.weight < max_bytes {
        match read_entry(file, at.offset, len, (at.generation, bases)) {
            Entry::Opened(record, size) => {
                batch.opened.push(*record);
                at.offset += size;
                batch.bytes += size;
                batch.weight += size;
                batch.entries += 1;
                advanced = true;
            }
            Entry::Record(record, size) => {
                // A batch is held whole while its derivations are read, so it weighs what it
                // holds: a body written as an edit of its conversation's last is a few bytes
                // on disk and the whole body once read (50 MiB of rebuilt 1.3 MB bodies in
                // one batch of a 4 MiB limit, before this counted them). A body the writer
                // decodes may decode to the body limit: it weighs a whole batch.
                let held = if record.request_encoding.is_some() {
                    max_bytes
                } else {
                    record.body_bytes() as u64
                };
                batch.weight += size.max(held);
                batch.records.push(*record);
                at.offset += size;
                batch.ends.push(*at);
                batch.bytes += size;
                batch.entries += 1;
                advanced = true;
            }
            Entry::Damaged(size) => {
                // A readable frame whose payload does not decode: skip just it.
                at.offset += size;
                batch.bytes += size;
                batch.weight += size;
                batch.entries += 1;
                batch.skipped += 1;
                advanced = true;
            }
            Entry::End => break,
            Entry::Torn => {
                // Nothing after a torn entry can be trusted; only a finished segment
                // can end so (each process starts a segment of its own).
                if at.generation < current {
                    batch.skipped += 1;
                    at.offset = len;
                }
                break;
            }
        }
    }
    advanced
}

/// The stage reports at the end of an entry.
fn read_reports(r: &mut Reader<'_>) -> Option<Vec<Report>> {
    let n = r.u64()?;
    let mut transforms = Vec::new();
    for _ in 0..n {
        let stage = r.string()?;
        let result = match r.u8()? {
            0 => {
                let facts = r.u64()?;
                let mut out = Vec::new();
                for _ in 0..facts {
                    out.push(ReportFact {
                        name: r.string()?,
                        value: r.u64()?,
                        kind: kind_of(r.u8()?)?,
                        site: r.opt(|r| site_of(r.u8()?))?,
                    });
                }
                ReportResult::Applied(out)
            }
            1 => ReportResult::Unchanged(r.string()?),
            2 => ReportResult::Failed(r.string()?),
            _ => return None,
        };
        transforms.push(Report { stage, result });
    }
    Some(transforms)
}

/// The fields an entry ends with: the conversation body, the request's content-encoding and
/// the prompt facts, each read only when `tagged` (the kind byte) says it is there.
fn read_trailer(
    r: &mut Reader<'_>,
    tagged: u8,
) -> Option<(Option<Bytes>, Option<String>, Option<RequestFacts>)> {
    // Last; an entry an older pith spooled has none (its kind says so) and still reads.
    let conversation_body = if tagged & WITH_CONVERSATION != 0 {
        r.opt(|r| r.bytes().map(Bytes::copy_from_slice))?
    } else {
        None
    };
    let request_encoding = if tagged & WITH_REQUEST_ENCODING != 0 {
        r.opt(Reader::string)?
    } else {
        None
    };
    let prompt_facts = if tagged & WITH_PROMPT_FACTS != 0 {
        Some(read_prompt_facts(r)?)
    } else {
        None
    };
    Some((conversation_body, request_encoding, prompt_facts))
}

/// A local turn's prompt facts, at the very end of an entry whose kind says they are there.
fn read_prompt_facts(r: &mut Reader<'_>) -> Option<RequestFacts> {
    Some(RequestFacts {
        model: r.opt(Reader::string)?,
        anatomy: Anatomy {
            tools: r.u64()?,
            system: r.u64()?,
            messages: r.u64()?,
            other: r.u64()?,
        },
        metadata_session: r.opt(Reader::string)?,
        first_user_hash: r.opt(Reader::string)?,
    })
}

/// An entry's kind and record.
pub(super) fn decode(payload: &[u8]) -> Option<(u8, Record)> {
    decode_on(payload, &mut |_, _| None)
}

/// [`decode`], with the body of the entry at an offset of the same segment, of a length, from
/// `base` (for a [`FINISHED_ON_BASE`] entry, whose kind is returned as such).
fn decode_on(
    payload: &[u8],
    base: &mut dyn FnMut(u64, u64) -> Option<Bytes>,
) -> Option<(u8, Record)> {
    let mut r = Reader { rest: payload };
    let tagged = r.u8()?;
    let kind = tagged & !FLAGS;
    if kind != FINISHED && kind != OPENED && kind != FINISHED_ON_BASE {
        return None;
    }
    let ts_ms = r.i64()?;
    let arrival_us = r.i64()?;
    let client = r.string()?;
    let header_session = r.opt(Reader::string)?;
    let agent_type = r.opt(Reader::string)?;
    let account = r.string()?;
    let wire = r.opt(|r| wire_of(r.u8()?))?;
    let provider = r.opt(|r| provider_of(r.u8()?))?;
    let method = r.string()?;
    let path = r.string()?;
    let status = r.opt(|r| {
        let b = r.take(2)?;
        Some(u16::from_le_bytes([b[0], b[1]]))
    })?;
    let outcome = RequestOutcome::parse(&r.string()?);
    let error = r.opt(Reader::string)?;
    let request_body = if kind == FINISHED_ON_BASE {
        let (offset, base_len) = (r.u64()?, r.u64()?);
        let edits = read_edits(&mut r)?;
        Bytes::from(rebuild(&base(offset, base_len)?, &edits)?)
    } else {
        Bytes::copy_from_slice(r.bytes()?)
    };
    let upstream_body = if tagged & WITH_UPSTREAM_EDITS != 0 {
        r.opt(|r| {
            let edits = read_edits(r)?;
            rebuild(&request_body, &edits).map(Bytes::from)
        })?
    } else if tagged & WITH_UPSTREAM_SPAN != 0 {
        // One span, as a pith before the edits wrote it.
        r.opt(|r| {
            let prefix = usize::try_from(r.u64()?).ok()?;
            let suffix = usize::try_from(r.u64()?).ok()?;
            let replacement = r.bytes()?;
            let end = request_body.len().checked_sub(suffix)?;
            let span = Edit {
                start: prefix,
                end,
                replacement,
            };
            rebuild(&request_body, &[span]).map(Bytes::from)
        })?
    } else {
        r.opt(|r| r.bytes().map(Bytes::copy_from_slice))?
    };
    let bytes_upstream = r.u64()?;
    let response = r.bytes()?;
    let response_chunks = if response.is_empty() {
        Vec::new()
    } else {
        vec![Bytes::copy_from_slice(response)]
    };
    let response_bytes = r.u64()?;
    let response_truncated = r.u8()? != 0;
    let response_is_sse = r.u8()? != 0;
    let content_encoding = r.opt(Reader::string)?;
    let ttfb_ms = r.opt(Reader::f64)?;
    let total_ms = r.f64()?;
    let transforms = read_reports(&mut r)?;
    let (conversation_body, request_encoding, prompt_facts) = read_trailer(&mut r, tagged)?;
    let provider_count = if tagged & WITH_PROVIDER_COUNT != 0 {
        let outcome = r.string()?;
        ProviderCount::parse(&outcome, r.opt(Reader::u64)?)
    } else {
        None
    };
    if !r.rest.is_empty() {
        return None;
    }
    Some((
        kind,
        Record {
            ts_ms,
            arrival_us,
            client,
            header_session,
            agent_type,
            account,
            wire,
            provider,
            method,
            path,
            status,
            outcome,
            error,
            request_body,
            upstream_body,
            conversation_body,
            request_encoding,
            prompt_facts,
            bytes_upstream,
            response_chunks,
            response_bytes,
            response_truncated,
            response_is_sse,
            content_encoding,
            ttfb_ms,
            total_ms,
            transforms,
            provider_count,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_record(i: i64) -> Record {
        Record {
            ts_ms: 1_700_000_000_000 + i,
            arrival_us: 1_700_000_000_000_000 + i,
            client: "claude-code".into(),
            header_session: Some(format!("ses-{i}")),
            agent_type: Some("admin".into()),
            account: "alice".into(),
            wire: Some(Wire::Responses),
            provider: Some(Provider::OpenAi),
            method: "POST".into(),
            path: "/v1/responses".into(),
            status: Some(429),
            outcome: RequestOutcome::UpstreamBroken,
            error: Some("reset \u{1b}[31m".into()),
            request_body: Bytes::from(vec![b'{'; 1000 + i as usize]),
            upstream_body: Some(Bytes::from_static(b"{\"x\":1}")),
            conversation_body: Some(Bytes::from_static(b"{\"input\":[]}")),
            request_encoding: None,
            prompt_facts: None,
            bytes_upstream: 7,
            response_chunks: vec![Bytes::from_static(b"data: a\n\n"), Bytes::from_static(b"b")],
            response_bytes: 10,
            response_truncated: true,
            response_is_sse: true,
            content_encoding: Some("gzip".into()),
            ttfb_ms: Some(1.5),
            total_ms: 20.25,
            transforms: vec![
                Report {
                    stage: "defer".into(),
                    result: ReportResult::Applied(vec![ReportFact {
                        name: "chars".into(),
                        value: 42,
                        kind: FactKind::CharsKeptOut,
                        site: Some(Site::Tools),
                    }]),
                },
                Report {
                    stage: "pins".into(),
                    result: ReportResult::Unchanged("no_pin_commands".into()),
                },
                Report {
                    stage: "x".into(),
                    result: ReportResult::Failed("boom".into()),
                },
            ],
            provider_count: None,
        }
    }

    /// A record read back equals the one appended, field for field (the response's chunks
    /// come back as one).
    #[test]
    fn an_upstream_body_is_written_as_the_places_a_stage_changed() {
        let conversation = "{\"role\":\"user\",\"content\":\"é read src/lib.rs\"},".repeat(2_000);
        let client = format!(
            "{{\"messages\":[{conversation}],\"tools\":[{{\"name\":\"Read\"}},{{\"name\":\"Glob\"}}],\"stream\":true}}"
        );
        let sent = client.replace("{\"name\":\"Glob\"}", "{\"name\":\"tool_search\"}");
        let record = Record {
            request_body: Bytes::from(client.clone()),
            upstream_body: Some(Bytes::from(sent.clone())),
            ..full_record(5)
        };
        let mut whole = Vec::new();
        encode(
            &Record {
                request_body: Bytes::new(),
                ..record.clone()
            },
            FINISHED,
            &mut whole,
        );
        let mut spanned = Vec::new();
        encode(&record, FINISHED, &mut spanned);
        // `whole` lacks the client's body; with it, it would hold the conversation twice.
        assert!(
            spanned.len() + conversation.len() <= whole.len() + client.len(),
            "the conversation is written once: {} bytes against {}",
            spanned.len(),
            whole.len() + client.len()
        );
        let (_, back) = decode(&spanned).unwrap();
        assert_eq!(back.upstream_body.as_deref(), Some(sent.as_bytes()));
        assert_eq!(back.request_body, record.request_body);
        for cut in 0..spanned.len() {
            assert!(decode(&spanned[..cut]).is_none(), "cut at {cut}");
        }
    }

    /// An entry a pith before the edits wrote (the sent body as one span of the client's)
    /// reads back as it was.
    #[test]
    fn an_upstream_body_written_as_one_span_still_reads_back() {
        let client = "{\"messages\":[1,2,3],\"tools\":[{\"name\":\"Glob\"}],\"stream\":true}";
        let sent = client.replace("Glob", "tool_search");
        let record = Record {
            request_body: Bytes::from(client),
            upstream_body: None,
            ..full_record(5)
        };
        let mut entry = Vec::new();
        encode(&record, FINISHED, &mut entry);
        // Where the sent body goes: right after the client's, an option's "none".
        let at = memchr::memmem::find(&entry, client.as_bytes()).unwrap() + client.len();
        assert_eq!(entry[at], 0);
        let prefix = client.find("Glob").unwrap();
        let suffix = client.len() - prefix - "Glob".len();
        let mut span = vec![1];
        put_u64(&mut span, prefix as u64);
        put_u64(&mut span, suffix as u64);
        put_bytes(&mut span, b"tool_search");
        entry.splice(at..at + 1, span);
        entry[0] |= WITH_UPSTREAM_SPAN;
        let (_, back) = decode(&entry).unwrap();
        assert_eq!(back.upstream_body.as_deref(), Some(sent.as_bytes()));
    }

    /// Bodies alike at either end, at both, at neither, one inside the other, empty, equal:
    /// the sent body reads back as it was, whichever way it was written.
    #[test]
    fn every_sent_body_reads_back_as_it_was() {
        let bodies: [&[u8]; 9] = [
            b"",
            b"a",
            b"abc",
            b"abcabc",
            b"abXbc",
            b"{\"x\":1}",
            b"{\"messages\":[1,2,3],\"tools\":[4,5]}",
            b"{\"messages\":[1,2,3],\"tools\":[]}",
            b"{\"messages\":[1,2,3,1,2,3],\"tools\":[4,5]}",
        ];
        let long = |b: &[u8]| [&[b'x'; 5_000][..], b, &[b'y'; 5_000][..]].concat();
        for client in bodies {
            for sent in bodies {
                for (client, sent) in [
                    (client.to_vec(), sent.to_vec()),
                    (long(client), long(sent)),
                    (long(client), sent.to_vec()),
                ] {
                    let record = Record {
                        request_body: Bytes::from(client.clone()),
                        upstream_body: Some(Bytes::from(sent.clone())),
                        ..full_record(6)
                    };
                    let mut buf = Vec::new();
                    encode(&record, FINISHED, &mut buf);
                    let (_, back) = decode(&buf).unwrap();
                    assert_eq!(back.upstream_body.as_deref(), Some(&sent[..]));
                    assert_eq!(back.request_body, record.request_body);
                }
            }
        }
    }

    #[test]
    fn a_record_round_trips() {
        let record = Record {
            request_encoding: Some("zstd".into()),
            prompt_facts: Some(RequestFacts {
                model: Some("gpt-5.5".into()),
                anatomy: Anatomy {
                    tools: 1,
                    system: 2,
                    messages: 3 << 20,
                    other: 4,
                },
                metadata_session: None,
                first_user_hash: Some("h-0123456789abcdef".into()),
            }),
            provider_count: Some(ProviderCount::Counted(48_213)),
            ..full_record(3)
        };
        let mut buf = Vec::new();
        encode(&record, FINISHED, &mut buf);
        let (kind, back) = decode(&buf).unwrap();
        assert_eq!(kind, FINISHED);
        let mut expected = record.clone();
        expected.response_chunks = vec![Bytes::from_static(b"data: a\n\nb")];
        assert_eq!(back, expected);
        // Every cut of the payload is refused, never misread.
        for cut in 0..buf.len() {
            assert!(decode(&buf[..cut]).is_none(), "cut at {cut}");
        }
        for count in [
            ProviderCount::RateLimited,
            ProviderCount::Failed,
            ProviderCount::Paused,
        ] {
            let counted = Record {
                provider_count: Some(count),
                ..full_record(4)
            };
            buf.clear();
            encode(&counted, FINISHED, &mut buf);
            assert_eq!(decode(&buf).unwrap().1.provider_count, Some(count));
        }
        let minimal = Record::default();
        buf.clear();
        encode(&minimal, FINISHED, &mut buf);
        assert_eq!(decode(&buf).unwrap(), (FINISHED, minimal.clone()));
        // An entry an older pith spooled: no request encoding at its end, then no conversation.
        buf[0] &= !WITH_REQUEST_ENCODING;
        assert_eq!(buf.pop(), Some(0), "the absent request encoding's marker");
        assert_eq!(decode(&buf).unwrap(), (FINISHED, minimal.clone()));
        buf[0] &= !WITH_CONVERSATION;
        assert_eq!(buf.pop(), Some(0), "the absent conversation's marker");
        assert_eq!(decode(&buf).unwrap(), (FINISHED, minimal));
        // An announcement carries everything but the bodies.
        buf.clear();
        encode(&record, OPENED, &mut buf);
        let (kind, opened) = decode(&buf).unwrap();
        assert_eq!(kind, OPENED);
        let mut expected = record.clone();
        expected.request_body = Bytes::new();
        expected.upstream_body = None;
        expected.conversation_body = None;
        expected.response_chunks = Vec::new();
        assert_eq!(opened, expected);
    }

    fn config(dir: &Path, limit: u64) -> SpoolConfig {
        SpoolConfig {
            dir: dir.to_owned(),
            limit,
        }
    }

    /// Entries come back in the order they went in, across segments and a reopen that resumes
    /// from the committed position; nothing twice.
    #[test]
    fn entries_are_read_in_order_and_resumed_where_committed() {
        let dir = tempfile::tempdir().unwrap();
        let spool_dir = dir.path().join("spool");
        let (spool, start) =
            Spool::open(&config(&spool_dir, 1 << 30), Position::default()).unwrap();
        for i in 0..10 {
            spool.append(&full_record(i)).unwrap();
        }
        assert_eq!(spool.backlog().0, 10);
        let batch = spool.read(start, 4, u64::MAX);
        let got: Vec<i64> = batch.records.iter().map(|r| r.ts_ms % 1000).collect();
        assert_eq!(got, [0, 1, 2, 3]);
        spool.consumed(&batch);
        assert_eq!(spool.backlog().0, 6);
        let committed = batch.end;
        drop(spool);
        // A new process: resumes at the committed position, appends to a segment of its own.
        let (spool, start) = Spool::open(&config(&spool_dir, 1 << 30), committed).unwrap();
        assert_eq!(start, committed);
        // A second process on the same spool is refused while this one holds it.
        let second = Spool::open(&config(&spool_dir, 1 << 30), committed);
        assert!(matches!(second, Err(SpoolError::Busy { .. })));
        assert_eq!(spool.backlog().0, 6);
        spool.append(&full_record(10)).unwrap();
        let batch = spool.read(start, 100, u64::MAX);
        let got: Vec<i64> = batch.records.iter().map(|r| r.ts_ms % 1000).collect();
        assert_eq!(got, [4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(batch.skipped, 0);
        spool.consumed(&batch);
        assert_eq!(spool.backlog(), (0, 0));
        // The finished segment is gone.
        assert_eq!(segments(&spool_dir).unwrap().len(), 1);
    }

    /// A torn last entry (the process killed mid-write) is skipped and counted; the entries
    /// before it and the next process's come back.
    #[test]
    fn a_torn_tail_is_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let spool_dir = dir.path().join("spool");
        let (spool, start) =
            Spool::open(&config(&spool_dir, 1 << 30), Position::default()).unwrap();
        spool.append(&full_record(1)).unwrap();
        spool.append(&full_record(2)).unwrap();
        drop(spool);
        let (_, path, _) = segments(&spool_dir).unwrap().pop().unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 5)
            .unwrap();
        let (spool, from) = Spool::open(&config(&spool_dir, 1 << 30), start).unwrap();
        spool.append(&full_record(3)).unwrap();
        let batch = spool.read(from, 100, u64::MAX);
        let got: Vec<i64> = batch.records.iter().map(|r| r.ts_ms % 1000).collect();
        assert_eq!(got, [1, 3]);
        assert_eq!(batch.skipped, 1);
    }

    /// Files named as segments that pith did not write (beyond a gap in its run, past what a
    /// position holds, or a link) are set aside or ignored: the next generation follows pith's
    /// own, and every record appended is read back.
    #[test]
    fn segments_pith_did_not_write_steer_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let spool_dir = dir.path().join("spool");
        let (spool, start) =
            Spool::open(&config(&spool_dir, 1 << 30), Position::default()).unwrap();
        spool.append(&full_record(1)).unwrap();
        let own = spool.generation();
        drop(spool);
        let beyond_gap = spool_dir.join(segment_name(own + 5));
        std::fs::write(&beyond_gap, b"not pith's").unwrap();
        std::fs::write(spool_dir.join(format!("{}.spool", u64::MAX)), b"").unwrap();
        std::fs::write(spool_dir.join(segment_name(MAX_GENERATION + 1)), b"").unwrap();
        std::os::unix::fs::symlink("/dev/null", spool_dir.join(segment_name(own + 1))).unwrap();
        let (spool, from) = Spool::open(&config(&spool_dir, 1 << 30), start).unwrap();
        assert!(!beyond_gap.exists(), "set aside");
        let mut aside = beyond_gap.into_os_string();
        aside.push(NOT_PITH);
        assert!(Path::new(&aside).exists());
        assert_eq!(spool.generation(), own + 1);
        spool.append(&full_record(2)).unwrap();
        let batch = spool.read(from, 100, u64::MAX);
        let got: Vec<i64> = batch.records.iter().map(|r| r.ts_ms % 1000).collect();
        assert_eq!(got, [1, 2]);
        assert_eq!(batch.skipped, 0);
    }

    /// A conversation's body with `turns` turns of about a kilobyte and its tools after them.
    fn conversation(turns: usize, word: &str) -> String {
        let messages: Vec<String> = (0..turns)
            .map(|k| {
                format!(
                    "{{\"role\":\"user\",\"content\":\"{word} {k}: {}\"}}",
                    "y".repeat(1000)
                )
            })
            .collect();
        format!(
            "{{\"messages\":[{}],\"tools\":[{}],\"stream\":true}}",
            messages.join(","),
            "{\"name\":\"Glob\"},".repeat(600) + "{\"name\":\"Read\"}"
        )
    }

    /// The segment files in `dir`, oldest first.
    fn segment_files(dir: &Path) -> Vec<PathBuf> {
        segments(dir)
            .unwrap()
            .into_iter()
            .map(|(_, p, _)| p)
            .collect()
    }

    /// A session's next request is spooled as its last body with what is new, and reads back
    /// whole, also by a reader that has not seen the base (after a restart).
    #[test]
    fn a_conversations_next_request_is_written_as_its_last_with_what_is_new() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, start) =
            Spool::open(&config(dir.path(), 1 << 30), Position::default()).unwrap();
        let records: Vec<Record> = (0..6)
            .map(|k| {
                let client = conversation(20 + k, "turn");
                // Every other request sent as a stage changed it.
                let sent = (k % 2 == 1).then(|| client.replace("\"Read\"", "\"tool_search\""));
                Record {
                    request_body: Bytes::from(client),
                    upstream_body: sent.map(Bytes::from),
                    ..full_record(k as i64)
                }
            })
            .collect();
        for r in &records {
            spool.append(r).unwrap();
        }
        let whole: usize = records.iter().map(|r| r.request_body.len()).sum();
        let written = std::fs::metadata(&segment_files(dir.path())[0])
            .unwrap()
            .len() as usize;
        assert!(
            written < whole / 3,
            "{written} bytes written for {whole} bytes of bodies"
        );
        let batch = spool.read(start, 100, u64::MAX);
        assert_eq!(batch.skipped, 0);
        let back = |batch: &ReadBatch| -> Vec<(Bytes, Option<Bytes>)> {
            batch
                .records
                .iter()
                .map(|r| (r.request_body.clone(), r.upstream_body.clone()))
                .collect()
        };
        let sent: Vec<(Bytes, Option<Bytes>)> = records
            .iter()
            .map(|r| (r.request_body.clone(), r.upstream_body.clone()))
            .collect();
        assert_eq!(back(&batch), sent);
        // A reader with no base kept reads the base from the segment.
        spool.base_cache.clear();
        let later = spool.read(batch.ends[1], 100, u64::MAX);
        assert_eq!(later.skipped, 0);
        assert_eq!(back(&later), sent[2..]);
    }

    /// A base is in the segment its entries are: the first entry of a new segment is written
    /// whole, though the one before it in the last segment is its conversation's.
    #[test]
    fn a_new_segments_first_entry_is_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, start) =
            Spool::open(&config(dir.path(), 1 << 30), Position::default()).unwrap();
        let first = Record {
            request_body: Bytes::from(conversation(20, "turn")),
            ..full_record(1)
        };
        let filler = Record {
            request_body: Bytes::from(vec![b'z'; SEGMENT_BYTES as usize]),
            ..full_record(2)
        };
        let next = Record {
            request_body: Bytes::from(conversation(21, "turn")),
            ..full_record(3)
        };
        for r in [&first, &filler, &next] {
            spool.append(r).unwrap();
        }
        let files = segment_files(dir.path());
        assert_eq!(files.len(), 2, "{files:?}");
        let second = std::fs::read(&files[1]).unwrap();
        assert_eq!(second[HEADER] & !FLAGS, FINISHED, "written whole");
        let batch = spool.read(start, 100, u64::MAX);
        assert_eq!(batch.records.len(), 3);
        assert_eq!(batch.records[2].request_body, next.request_body);
    }

    /// An entry whose base cannot be read is skipped and counted, as a damaged one is.
    #[test]
    fn an_entry_on_a_damaged_base_is_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, start) =
            Spool::open(&config(dir.path(), 1 << 30), Position::default()).unwrap();
        for k in 0..2 {
            spool
                .append(&Record {
                    request_body: Bytes::from(conversation(20 + k, "turn")),
                    ..full_record(k as i64)
                })
                .unwrap();
        }
        let file = &segment_files(dir.path())[0];
        let mut bytes = std::fs::read(file).unwrap();
        bytes[HEADER + 100] ^= 1;
        std::fs::write(file, &bytes).unwrap();
        let batch = spool.read(start, 100, u64::MAX);
        assert!(batch.records.is_empty());
        assert_eq!(batch.skipped, 2);
    }

    /// A compressed body is decoded by the writer: it ends its batch, so one batch never
    /// holds more than one decoded body.
    #[test]
    fn a_body_the_writer_decodes_is_read_in_a_batch_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, start) =
            Spool::open(&config(dir.path(), 1 << 30), Position::default()).unwrap();
        for i in 0..4 {
            let record = Record {
                request_encoding: (i == 1).then(|| "zstd".to_owned()),
                ..full_record(i)
            };
            spool.append(&record).unwrap();
        }
        let sizes: Vec<usize> = std::iter::successors(Some(spool.read(start, 100, 1 << 20)), |b| {
            (!b.records.is_empty()).then(|| spool.read(b.end, 100, 1 << 20))
        })
        .map(|b| b.records.len())
        .take_while(|n| *n > 0)
        .collect();
        // The plain record before it shares its batch; the compressed one ends it.
        assert_eq!(sizes, [2, 2]);
    }

    /// A batch's limit bounds the bodies it holds once read, not their bytes on disk: a
    /// conversation's requests are written as edits of the one before, a few bytes each, and
    /// each reads back whole.
    #[test]
    fn a_batch_weighs_its_bodies_as_read() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, start) =
            Spool::open(&config(dir.path(), 1 << 30), Position::default()).unwrap();
        let records: Vec<Record> = (0..40)
            .map(|k| Record {
                request_body: Bytes::from(conversation(200 + k, "turn")),
                ..full_record(k as i64)
            })
            .collect();
        for r in &records {
            spool.append(r).unwrap();
        }
        let written = std::fs::metadata(&segment_files(dir.path())[0])
            .unwrap()
            .len();
        let limit: u64 = 1 << 20;
        assert!(written < limit, "all 40 fit the limit on disk: {written}");
        let largest = records.iter().map(Record::body_bytes).max().unwrap() as u64;
        let mut at = start;
        let mut read = 0;
        loop {
            let batch = spool.read(at, 100, limit);
            if batch.records.is_empty() {
                break;
            }
            let held: u64 = batch.records.iter().map(|r| r.body_bytes() as u64).sum();
            assert!(
                held < limit + largest,
                "{held} bytes of bodies held in a batch of {} records",
                batch.records.len()
            );
            read += batch.records.len();
            at = batch.end;
        }
        assert_eq!(read, records.len());
    }

    /// Past its limit the spool refuses a record instead of growing.
    #[test]
    fn the_limit_refuses_without_writing() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, start) =
            Spool::open(&config(&dir.path().join("s"), 5_000), Position::default()).unwrap();
        let mut kept = 0u64;
        let mut refused = 0;
        for i in 0..10 {
            match spool.append(&full_record(i)) {
                Ok(()) => kept += 1,
                Err(NotKept::Full) => refused += 1,
                Err(NotKept::Io(e)) => panic!("{e}"),
            }
        }
        assert!(kept > 0 && refused > 0, "{kept} kept, {refused} refused");
        let (entries, bytes) = spool.backlog();
        assert_eq!(entries, kept);
        assert!(bytes <= 5_000, "{bytes}");
        // The next record is one more than the limit allows; once written out, it fits again.
        let batch = spool.read(start, 100, u64::MAX);
        assert_eq!(batch.records.len() as u64, kept);
        spool.consumed(&batch);
        spool.append(&full_record(0)).unwrap();
    }
}
