//! Evidence: fingerprinting the files a memory depends on, and telling whether they changed.
//!
//! Files are hashed streaming, one buffer whatever their size (a line range stops reading after
//! its last line), to the same hashes whole-file reads recorded, so memories saved before still
//! verify fresh. Fresh, stale or unverified is derived on read, never stored.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::model::{Evidence, Freshness, LineRange};
use crate::workspace::{PathError, Workspace};

/// Evidence as a caller names it: `path`, `path:12` or `path:12-40` (1-based, inclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceSpec {
    /// The path as given, not yet resolved against the workspace.
    pub path: String,
    /// Only these lines; `None` for the whole file.
    pub lines: Option<LineRange>,
}

impl EvidenceSpec {
    /// Parse `path[:start[-end]]`. A suffix that is not a line range is part of the path.
    pub fn parse(spec: &str) -> Result<EvidenceSpec, String> {
        let spec = spec.trim();
        if let Some((path, range)) = spec.rsplit_once(':')
            && !range.is_empty()
            && range.chars().all(|c| c.is_ascii_digit() || c == '-')
        {
            let (start, end) = match range.split_once('-') {
                Some((a, b)) => (a, b),
                None => (range, range),
            };
            let parse = |n: &str| n.parse::<u32>().ok().filter(|n| *n > 0);
            let (Some(start), Some(end)) = (parse(start), parse(end)) else {
                return Err(format!(
                    "{spec}: line range must be START or START-END with lines counted from 1"
                ));
            };
            if end < start {
                return Err(format!("{spec}: line range ends before it starts"));
            }
            return Ok(EvidenceSpec {
                path: path.to_owned(),
                lines: Some(LineRange { start, end }),
            });
        }
        Ok(EvidenceSpec {
            path: spec.to_owned(),
            lines: None,
        })
    }
}

impl std::fmt::Display for EvidenceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.path)?;
        if let Some(l) = self.lines {
            write_range(f, l)?;
        }
        Ok(())
    }
}

/// `:12` or `:12-40`.
pub(crate) fn write_range(f: &mut impl std::fmt::Write, l: LineRange) -> std::fmt::Result {
    if l.start == l.end {
        write!(f, ":{}", l.start)
    } else {
        write!(f, ":{}-{}", l.start, l.end)
    }
}

/// Why a piece of evidence cannot be recorded.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// The path is empty, leads outside the workspace or does not exist.
    #[error(transparent)]
    Path(#[from] PathError),
    /// The path names a directory or another non-file.
    #[error("{path} is not a regular file")]
    NotAFile {
        /// Workspace-relative path.
        path: String,
    },
    /// The line range starts after the file's last line.
    #[error("{path} has {lines} lines; the range {start}-{end} is past its end")]
    PastEnd {
        /// Workspace-relative path.
        path: String,
        /// Lines the file has.
        lines: usize,
        /// First line asked for.
        start: u32,
        /// Last line asked for.
        end: u32,
    },
    /// The file's metadata or content could not be read.
    #[error("cannot read {path}")]
    Read {
        /// Workspace-relative path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Record a file as evidence: resolve it inside the workspace and fingerprint it now.
pub fn record(ws: &Workspace, spec: &EvidenceSpec) -> Result<Evidence, EvidenceError> {
    let resolved = ws.resolve(&spec.path)?;
    let Fingerprint {
        hash,
        size,
        mtime_ns,
        line_count,
    } = fingerprint(&resolved.abs, &resolved.rel, spec.lines)?;
    if let Some(l) = spec.lines
        && usize::try_from(l.start).unwrap_or(usize::MAX) > line_count
    {
        return Err(EvidenceError::PastEnd {
            path: resolved.rel,
            lines: line_count,
            start: l.start,
            end: l.end,
        });
    }
    Ok(Evidence {
        path: resolved.rel,
        lines: spec.lines,
        hash: Some(hash),
        size: Some(size),
        mtime_ns,
    })
}

struct Fingerprint {
    hash: String,
    size: u64,
    mtime_ns: Option<i64>,
    line_count: usize,
}

/// SHA-256 of the file, or of just the given lines (so edits elsewhere in the file leave a
/// line-scoped memory fresh). The file is streamed: memory stays at one buffer whatever its size.
fn fingerprint(
    abs: &Path,
    rel: &str,
    lines: Option<LineRange>,
) -> Result<Fingerprint, EvidenceError> {
    let read_error = |source| EvidenceError::Read {
        path: rel.to_owned(),
        source,
    };
    let meta = std::fs::metadata(abs).map_err(read_error)?;
    if !meta.is_file() {
        return Err(EvidenceError::NotAFile {
            path: rel.to_owned(),
        });
    }
    let file = File::open(abs).map_err(read_error)?;
    let (hash, line_count) =
        hash_content(BufReader::with_capacity(CHUNK, file), lines).map_err(read_error)?;
    Ok(Fingerprint {
        hash,
        size: meta.len(),
        mtime_ns: mtime_ns(&meta),
        line_count,
    })
}

/// Bytes read from an evidence file at a time.
const CHUNK: usize = 64 * 1024;

/// The hex SHA-256 of everything `src` holds, or of the bytes of `lines` (each with its `\n`),
/// and the lines counted: all of them for a whole file; for a range, reading stops after its
/// last line, so the count is exact only when the file ends first (which is when it matters:
/// the range is past the end).
fn hash_content(
    mut src: impl BufRead,
    lines: Option<LineRange>,
) -> std::io::Result<(String, usize)> {
    let mut hasher = Sha256::new();
    let (first, last) = match lines {
        None => (1, usize::MAX),
        Some(l) => (
            usize::try_from(l.start).unwrap_or(usize::MAX),
            usize::try_from(l.end).unwrap_or(usize::MAX),
        ),
    };
    // The line the next byte belongs to, and whether it has begun.
    let mut line_no: usize = 1;
    let mut in_line = false;
    while line_no <= last {
        let buf = src.fill_buf()?;
        let Some(&end_byte) = buf.last() else { break };
        let len = buf.len();
        if lines.is_none() {
            hasher.update(buf);
            line_no += memchr::memchr_iter(b'\n', buf).count();
        } else {
            let mut pos = 0;
            while pos < len {
                let line_end = memchr::memchr(b'\n', &buf[pos..]).map(|i| pos + i + 1);
                let to = line_end.unwrap_or(len);
                if (first..=last).contains(&line_no) {
                    hasher.update(&buf[pos..to]);
                }
                if line_end.is_some() {
                    line_no += 1;
                }
                pos = to;
            }
        }
        in_line = end_byte != b'\n';
        src.consume(len);
    }
    let counted = if in_line { line_no } else { line_no - 1 };
    Ok((hex(&hasher.finalize()), counted))
}

fn mtime_ns(meta: &std::fs::Metadata) -> Option<i64> {
    let since = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    i64::try_from(since.as_nanos()).ok()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// What became of one evidence file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvidenceState {
    /// Same content as recorded.
    Unchanged,
    /// The content (or the recorded lines) differ.
    Changed,
    /// The file no longer exists.
    Gone,
    /// No hash was recorded, so nothing to compare.
    Unrecorded,
    /// The path can no longer be checked (now a directory, unreadable, or leads outside).
    Unreadable {
        /// Why, in words.
        reason: String,
    },
}

impl EvidenceState {
    fn is_problem(&self) -> bool {
        matches!(
            self,
            EvidenceState::Changed | EvidenceState::Gone | EvidenceState::Unreadable { .. }
        )
    }
}

/// One evidence file checked against the workspace.
#[derive(Debug, Clone)]
pub struct EvidenceCheck {
    /// The evidence as the memory holds it.
    pub recorded: Evidence,
    /// How the file compares with it now.
    pub state: EvidenceState,
    /// The file's fingerprint now, when it could be taken (used to refresh the record).
    current: Option<Evidence>,
}

/// A memory's derived status and what it was derived from.
#[derive(Debug, Clone)]
pub struct Status {
    /// Stale if any evidence is a problem, else fresh if any is unchanged, else unverified.
    pub freshness: Freshness,
    /// One check per evidence file, in the memory's order.
    pub evidence: Vec<EvidenceCheck>,
}

impl Status {
    /// Evidence that changed, vanished or can no longer be read.
    pub fn problems(&self) -> impl Iterator<Item = &EvidenceCheck> {
        self.evidence.iter().filter(|c| c.state.is_problem())
    }

    /// The evidence to store after this check: refreshed size/mtime for unchanged files (so the
    /// next quick check is cheap), with `accept`, current content for changed files and no entry
    /// for files that are gone.
    pub(crate) fn evidence_to_store(&self, accept: bool) -> Vec<Evidence> {
        self.evidence
            .iter()
            .filter_map(|c| match (&c.state, &c.current) {
                (EvidenceState::Unchanged, Some(now)) => Some(now.clone()),
                (EvidenceState::Changed, Some(now)) if accept => Some(now.clone()),
                (EvidenceState::Gone, _) if accept => None,
                _ => Some(c.recorded.clone()),
            })
            .collect()
    }
}

/// How hard to look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckMode {
    /// Trust an unchanged size and modification time; rehash only files that moved. For reads
    /// and searches.
    Quick,
    /// Rehash everything. For explicit verification.
    Full,
}

/// Derive a memory's status from its evidence and the files as they are now.
pub fn check(ws: &Workspace, evidence: &[Evidence], mode: CheckMode) -> Status {
    let checks: Vec<EvidenceCheck> = evidence.iter().map(|e| check_one(ws, e, mode)).collect();
    let freshness = if checks.iter().any(|c| c.state.is_problem()) {
        Freshness::Stale
    } else if checks.iter().any(|c| c.state == EvidenceState::Unchanged) {
        Freshness::Fresh
    } else {
        Freshness::Unverified
    };
    Status {
        freshness,
        evidence: checks,
    }
}

fn check_one(ws: &Workspace, recorded: &Evidence, mode: CheckMode) -> EvidenceCheck {
    let done = |state, current| EvidenceCheck {
        recorded: recorded.clone(),
        state,
        current,
    };
    let resolved = match ws.resolve(&recorded.path) {
        Ok(r) => r,
        Err(PathError::NotFound { .. }) => return done(EvidenceState::Gone, None),
        Err(e) => {
            let reason = crate::chain::error_chain(&e);
            return done(EvidenceState::Unreadable { reason }, None);
        }
    };
    let Some(recorded_hash) = &recorded.hash else {
        return done(EvidenceState::Unrecorded, None);
    };
    if mode == CheckMode::Quick
        && let Ok(meta) = std::fs::metadata(&resolved.abs)
        && meta.is_file()
        && recorded.size == Some(meta.len())
        && recorded.mtime_ns.is_some()
        && recorded.mtime_ns == mtime_ns(&meta)
    {
        return done(EvidenceState::Unchanged, None);
    }
    match fingerprint(&resolved.abs, &resolved.rel, recorded.lines) {
        Ok(now) => {
            let state = if &now.hash == recorded_hash {
                EvidenceState::Unchanged
            } else {
                EvidenceState::Changed
            };
            let current = Evidence {
                path: recorded.path.clone(),
                lines: recorded.lines,
                hash: Some(now.hash),
                size: Some(now.size),
                mtime_ns: now.mtime_ns,
            };
            done(state, Some(current))
        }
        Err(e) => {
            let reason = crate::chain::error_chain(&e);
            done(EvidenceState::Unreadable { reason }, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws_with(files: &[(&str, &str)]) -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn parses_specs() {
        let p = |s| EvidenceSpec::parse(s).unwrap();
        assert_eq!(p("src/a.rs").lines, None);
        assert_eq!(p("src/a.rs:7").lines, Some(LineRange { start: 7, end: 7 }));
        let r = p("src/a.rs:3-9");
        assert_eq!(r.path, "src/a.rs");
        assert_eq!(r.lines, Some(LineRange { start: 3, end: 9 }));
        assert_eq!(p("weird:name.rs").path, "weird:name.rs");
        assert!(EvidenceSpec::parse("a.rs:9-3").is_err());
        assert!(EvidenceSpec::parse("a.rs:0").is_err());
        assert!(EvidenceSpec::parse("a.rs:1-").is_err());
        assert_eq!(r.to_string(), "src/a.rs:3-9");
    }

    #[test]
    fn fresh_then_stale_when_edited_or_deleted() {
        let (dir, ws) = ws_with(&[("a.rs", "one\ntwo\n"), ("b.rs", "x\n")]);
        let specs = ["a.rs", "b.rs"].map(|s| EvidenceSpec::parse(s).unwrap());
        let ev: Vec<_> = specs.iter().map(|s| record(&ws, s).unwrap()).collect();
        assert_eq!(check(&ws, &ev, CheckMode::Full).freshness, Freshness::Fresh);
        assert_eq!(
            check(&ws, &ev, CheckMode::Quick).freshness,
            Freshness::Fresh
        );

        std::fs::write(dir.path().join("a.rs"), "one\nTWO and more\n").unwrap();
        std::fs::remove_file(dir.path().join("b.rs")).unwrap();
        for mode in [CheckMode::Quick, CheckMode::Full] {
            let status = check(&ws, &ev, mode);
            assert_eq!(status.freshness, Freshness::Stale);
            let states: Vec<_> = status.evidence.iter().map(|c| c.state.clone()).collect();
            assert_eq!(states, [EvidenceState::Changed, EvidenceState::Gone]);
        }
    }

    #[test]
    fn line_ranges_ignore_edits_elsewhere() {
        let (dir, ws) = ws_with(&[("a.rs", "1\n2\n3\n4\n")]);
        let ev = record(&ws, &EvidenceSpec::parse("a.rs:2-3").unwrap()).unwrap();
        std::fs::write(dir.path().join("a.rs"), "1\n2\n3\n4 changed\n").unwrap();
        let status = check(&ws, std::slice::from_ref(&ev), CheckMode::Full);
        assert_eq!(status.freshness, Freshness::Fresh);
        std::fs::write(dir.path().join("a.rs"), "1\n2 changed\n3\n4\n").unwrap();
        let status = check(&ws, &[ev], CheckMode::Full);
        assert_eq!(status.freshness, Freshness::Stale);
    }

    #[test]
    fn refuses_ranges_past_the_end_and_directories() {
        let (_dir, ws) = ws_with(&[("a.rs", "1\n2\n"), ("d/x", "")]);
        let err = record(&ws, &EvidenceSpec::parse("a.rs:5-6").unwrap()).unwrap_err();
        assert!(err.to_string().contains("has 2 lines"), "{err}");
        let err = record(&ws, &EvidenceSpec::parse("d").unwrap()).unwrap_err();
        assert!(matches!(err, EvidenceError::NotAFile { .. }), "{err}");
    }

    /// The hash and line count as they were taken when the whole file was read into memory:
    /// evidence recorded then must still verify.
    fn whole_file_fingerprint(bytes: &[u8], lines: Option<LineRange>) -> (String, usize) {
        let line_count = bytes.split_inclusive(|b| *b == b'\n').count();
        let mut hasher = Sha256::new();
        match lines {
            None => hasher.update(bytes),
            Some(l) => {
                let skip = usize::try_from(l.start.saturating_sub(1)).unwrap();
                let take = usize::try_from(l.end - l.start + 1).unwrap();
                for line in bytes.split_inclusive(|b| *b == b'\n').skip(skip).take(take) {
                    hasher.update(line);
                }
            }
        }
        (hex(&hasher.finalize()), line_count)
    }

    #[test]
    fn streamed_hashes_are_the_hashes_recorded_before() {
        let files: [&[u8]; 6] = [
            b"",
            b"\n",
            b"one\ntwo\nthree\n",
            b"one\ntwo\nthree",
            b"\r\n\n\xff\xe2\x82\nlast",
            &[b'x'; 200],
        ];
        let ranges = [(1, 1), (1, 2), (2, 3), (3, 3), (2, 9), (4, 4), (7, 9)];
        for bytes in files {
            for chunk in [1, 2, 3, 7, CHUNK] {
                let src = || BufReader::with_capacity(chunk, bytes);
                assert_eq!(
                    hash_content(src(), None).unwrap(),
                    whole_file_fingerprint(bytes, None),
                    "{bytes:?} chunk {chunk}"
                );
                for (start, end) in ranges {
                    let range = Some(LineRange { start, end });
                    let (hash, counted) = hash_content(src(), range).unwrap();
                    let (want, lines) = whole_file_fingerprint(bytes, range);
                    assert_eq!(hash, want, "{bytes:?} {start}-{end} chunk {chunk}");
                    // Counting may stop after the range; it is exact when the range runs past
                    // the end, the one case that reads it.
                    assert!(counted <= lines && (counted >= end as usize || counted == lines));
                }
            }
        }
    }

    #[test]
    fn line_evidence_in_a_huge_sparse_file_is_recorded_without_reading_it_whole() {
        let (dir, ws) = ws_with(&[("huge.log", "one\ntwo\n")]);
        // 1 TiB, almost all of it a hole: no disk, and more memory than any machine would give.
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("huge.log"))
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let ev = record(&ws, &EvidenceSpec::parse("huge.log:1-2").unwrap()).unwrap();
        assert_eq!(ev.size, Some(1 << 40));
        let status = check(&ws, &[ev], CheckMode::Full);
        assert_eq!(status.freshness, Freshness::Fresh);
    }

    #[test]
    fn no_evidence_is_unverified() {
        let (_dir, ws) = ws_with(&[]);
        assert_eq!(
            check(&ws, &[], CheckMode::Full).freshness,
            Freshness::Unverified
        );
    }
}
