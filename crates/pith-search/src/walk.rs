//! The search itself: a parallel, ignore-aware walk feeding grep-searcher, keeping only the first
//! N matches in (path, line) order while counting all of them.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, PoisonError};

use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use ignore::overrides::{Override, OverrideBuilder};
use ignore::{DirEntry, WalkBuilder, WalkState};

use crate::text::display_line;
use crate::workspace_path::{Refused, confine};
use crate::{MAX_OFFSET, Match, SearchError, SearchRequest, SearchResults};

/// Searches the workspace at `root` and returns one page of matches in (path, line) order with
/// the exact number of matching lines.
///
/// Walks like `rg`: .gitignore/.ignore rules apply (even outside a git repository), hidden
/// files and directories are skipped, `.git` is never entered, symlinks are not followed, and a
/// file containing a NUL byte is treated as binary and contributes no matches.
pub fn search(root: &Path, req: &SearchRequest) -> Result<SearchResults, SearchError> {
    let max_results = req.effective_max_results();
    let collected = collect(root, req, req.offset.saturating_add(max_results))?;
    Ok(collected.into_page(req.offset, max_results))
}

/// The first `keep` matches in (path, line) order, and totals over all matches.
pub(crate) struct Collected {
    pub(crate) first: Vec<Match>,
    pub(crate) total_matches: u64,
    pub(crate) files_with_matches: u64,
    pub(crate) not_searched: NotSearched,
}

/// Directories the walk left out because an ignore file in them is not a plain file
/// ([`unsafe_ignore_file`]): the first few, and how many in all.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NotSearched {
    /// The first [`NOT_SEARCHED_NAMED`] of them, relative to the workspace root, with why.
    pub dirs: Vec<String>,
    /// How many in all.
    pub total: u64,
}

impl NotSearched {
    /// Whether the walk left nothing out.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

/// How many left-out directories a result names (the rest are counted).
pub const NOT_SEARCHED_NAMED: usize = 8;

/// The largest `.gitignore` or `.ignore` the walk reads.
pub const IGNORE_FILE_MAX: u64 = 1 << 20;

/// The longest line a search holds (grep-searcher's heap limit; a file with a longer one is
/// skipped): a file from the workspace is a stranger's, and one line of it could be gigabytes.
const LINE_BYTES_MAX: usize = 16 << 20;

impl Collected {
    pub(crate) fn into_page(self, offset: usize, max_results: usize) -> SearchResults {
        SearchResults {
            matches: self
                .first
                .into_iter()
                .skip(offset)
                .take(max_results)
                .collect(),
            total_matches: self.total_matches,
            files_with_matches: self.files_with_matches,
            offset,
            max_results,
            not_searched: self.not_searched,
        }
    }
}

/// Runs the search, keeping the text of only the first `keep` matches in order (memory stays
/// bounded however broad the pattern) while counting every matching line.
pub(crate) fn collect(
    root: &Path,
    req: &SearchRequest,
    keep: usize,
) -> Result<Collected, SearchError> {
    if req.pattern.is_empty() {
        return Err(SearchError::EmptyPattern);
    }
    if req.offset > MAX_OFFSET {
        return Err(SearchError::OffsetTooLarge { offset: req.offset });
    }
    let root = root.canonicalize().map_err(|source| SearchError::Root {
        root: root.to_path_buf(),
        source,
    })?;
    let start = resolve_start(&root, req.path.as_deref())?;
    // The walk reads the ignore files of the start and of every directory above it, up to the
    // file system's root: each must be a plain file.
    for dir in start.ancestors() {
        if let Some(why) = unsafe_ignore_file(dir, &root) {
            let path = match dir.strip_prefix(&root) {
                Ok(inside) if inside.as_os_str().is_empty() => "the workspace root".to_owned(),
                Ok(_) => format!("{:?}", relative_path(&root, dir)),
                Err(_) => format!("{:?} (above the workspace)", relative_path(&root, dir)),
            };
            return Err(SearchError::UnsafeIgnoreFile { path, why });
        }
    }
    let matcher = build_matcher(req)?;
    let overrides = build_overrides(&root, &req.globs)?;

    let shared = Shared {
        keep,
        total_matches: AtomicU64::new(0),
        files_with_matches: AtomicU64::new(0),
        best: Mutex::new(BinaryHeap::new()),
    };
    let not_searched = Arc::new(Mutex::new(NotSearched::default()));
    let mut walker = WalkBuilder::new(&start);
    let left_out = Arc::clone(&not_searched);
    let walk_root = root.clone();
    walker
        // A workspace that is not (yet) a git repository still means its .gitignore.
        .require_git(false)
        // `.git/info/exclude` is not read: to find it the walker follows a `.git` file's
        // `gitdir:` to wherever it points, outside the workspace too.
        .git_exclude(false)
        .overrides(overrides)
        .filter_entry(move |entry| {
            if entry.file_name() == ".git" {
                return false;
            }
            // The walker reads a directory's ignore files as it enters it, following links,
            // whole: one that is a link (to `/dev/zero`, a terminal) or huge leaves it out.
            if entry.file_type().is_some_and(|kind| kind.is_dir())
                && let Some(why) = unsafe_ignore_file(entry.path(), &walk_root)
            {
                let mut left = left_out.lock().unwrap_or_else(PoisonError::into_inner);
                if left.dirs.len() < NOT_SEARCHED_NAMED {
                    let dir = relative_path(&walk_root, entry.path());
                    left.dirs.push(format!("{dir} ({why})"));
                }
                left.total += 1;
                return false;
            }
            true
        });
    walker.build_parallel().run(|| {
        let mut worker = Worker {
            root: &root,
            matcher: matcher.clone(),
            searcher: SearcherBuilder::new()
                .line_number(true)
                .binary_detection(BinaryDetection::quit(b'\x00'))
                .heap_limit(Some(LINE_BYTES_MAX))
                .build(),
            shared: &shared,
        };
        Box::new(move |entry| {
            worker.visit(entry);
            WalkState::Continue
        })
    });

    let best = shared
        .best
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    Ok(Collected {
        first: best
            .into_sorted_vec()
            .into_iter()
            .map(|kept| Match {
                path: kept.path.to_string(),
                line: kept.line,
                text: kept.text,
                truncated: kept.truncated,
            })
            .collect(),
        total_matches: shared.total_matches.into_inner(),
        files_with_matches: shared.files_with_matches.into_inner(),
        not_searched: std::mem::take(
            &mut not_searched.lock().unwrap_or_else(PoisonError::into_inner),
        ),
    })
}

/// Why a directory's `.gitignore` or `.ignore` cannot be read as a plain file, if one cannot:
/// a device or FIFO, larger than [`IGNORE_FILE_MAX`], or (inside the workspace `root`) a link
/// that leads out of it or to anything but such a file. The walker opens them itself,
/// following links and reading them whole. Above the workspace the directories are the
/// user's (a dotfile manager's link is fine there).
fn unsafe_ignore_file(dir: &Path, root: &Path) -> Option<String> {
    let inside = dir.starts_with(root);
    for name in [".gitignore", ".ignore"] {
        let file = dir.join(name);
        // The file as the walker will read it: a link followed, unless it leads out of the
        // workspace from inside it.
        let read = match std::fs::symlink_metadata(&file) {
            // None there, or the search's start is a file.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                continue;
            }
            Err(_) => Err("cannot be looked at"),
            Ok(meta) if meta.file_type().is_symlink() => match file.canonicalize() {
                Ok(target) if inside && !target.starts_with(root) => {
                    Err("is a link out of the workspace")
                }
                _ => std::fs::metadata(&file).map_err(|_| "is a link to nothing readable"),
            },
            Ok(meta) => Ok(meta),
        };
        let why = match read {
            Err(why) => why,
            Ok(meta) if !meta.is_file() => "is not a regular file",
            Ok(meta) if meta.len() > IGNORE_FILE_MAX => "is larger than 1 MiB",
            Ok(_) => continue,
        };
        return Some(format!("its {name} {why}"));
    }
    None
}

/// The search start: the root, or `path` inside it. Refuses anything that resolves (also
/// through a symlink) outside the root.
fn resolve_start(root: &Path, path: Option<&str>) -> Result<PathBuf, SearchError> {
    let Some(given) = path.filter(|p| !p.trim().is_empty()) else {
        return Ok(root.to_path_buf());
    };
    confine(root, Path::new(given)).map_err(|refused| match refused {
        Refused::Outside => SearchError::OutsideWorkspace {
            path: given.to_owned(),
        },
        Refused::Unresolved(_) => SearchError::PathNotFound {
            path: given.to_owned(),
        },
    })
}

fn build_matcher(req: &SearchRequest) -> Result<RegexMatcher, SearchError> {
    RegexMatcherBuilder::new()
        .case_insensitive(req.case_insensitive)
        .fixed_strings(req.literal)
        // Lets the matcher use line-oriented literal optimizations, as rg does.
        .line_terminator(Some(b'\n'))
        .build(&req.pattern)
        .map_err(|err| SearchError::InvalidPattern {
            pattern: req.pattern.clone(),
            message: err.to_string(),
        })
}

/// Globs are matched relative to the workspace root whatever `path` is, like rg run from the
/// root.
fn build_overrides(root: &Path, globs: &[String]) -> Result<Override, SearchError> {
    let mut builder = OverrideBuilder::new(root);
    for glob in globs.iter().map(|g| g.trim()).filter(|g| !g.is_empty()) {
        builder.add(glob).map_err(|err| SearchError::InvalidGlob {
            glob: glob.to_owned(),
            message: err.to_string(),
        })?;
    }
    builder.build().map_err(|err| SearchError::InvalidGlob {
        glob: globs.join(" "),
        message: err.to_string(),
    })
}

/// State shared by the walker threads.
struct Shared {
    keep: usize,
    total_matches: AtomicU64,
    files_with_matches: AtomicU64,
    /// Max-heap of the `keep` smallest (path, line) matches seen so far.
    best: Mutex<BinaryHeap<Kept>>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, BinaryHeap<Kept>> {
        self.best.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a file at `path` could contribute kept matches; if not, its lines are only
    /// counted and no text is built for them.
    fn may_keep(&self, path: &str) -> bool {
        let best = self.lock();
        best.len() < self.keep || best.peek().is_some_and(|worst| path < &*worst.path)
    }

    /// Offers a file's first matches (in line order) for the kept set.
    fn offer(&self, path: &Arc<str>, hits: Vec<Hit>) {
        let mut best = self.lock();
        for hit in hits {
            let candidate = Kept {
                path: Arc::clone(path),
                line: hit.line,
                text: hit.text,
                truncated: hit.truncated,
            };
            if best.len() < self.keep {
                best.push(candidate);
            } else if best.peek().is_some_and(|worst| candidate < *worst) {
                best.pop();
                best.push(candidate);
            } else {
                // Later lines of this file sort after this one: none can be kept either.
                break;
            }
        }
    }
}

/// A kept match; ordered by (path, line), the order results are listed and paged in.
struct Kept {
    path: Arc<str>,
    line: u64,
    text: String,
    truncated: bool,
}

impl Kept {
    fn key(&self) -> (&str, u64) {
        (&self.path, self.line)
    }
}

impl PartialEq for Kept {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Kept {}

impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kept {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// One walker thread's matcher and searcher (neither is shared between threads).
struct Worker<'s> {
    root: &'s Path,
    matcher: RegexMatcher,
    searcher: Searcher,
    shared: &'s Shared,
}

impl Worker<'_> {
    fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) {
        let entry = match entry {
            Ok(entry) => entry,
            Err(err) => {
                tracing::debug!(%err, "search: skipped an unreadable entry");
                return;
            }
        };
        if !entry.file_type().is_some_and(|kind| kind.is_file()) {
            return;
        }
        let path = relative_path(self.root, entry.path());
        let keep_text = if self.shared.may_keep(&path) {
            self.shared.keep
        } else {
            0
        };
        let mut sink = FileSink {
            matcher: &self.matcher,
            keep_text,
            hits: Vec::new(),
            count: 0,
            binary: false,
        };
        if let Err(err) = self
            .searcher
            .search_path(&self.matcher, entry.path(), &mut sink)
        {
            tracing::debug!(%err, path = %path, "search: skipped an unreadable file");
            return;
        }
        if sink.binary || sink.count == 0 {
            return;
        }
        self.shared
            .total_matches
            .fetch_add(sink.count, AtomicOrdering::Relaxed);
        self.shared
            .files_with_matches
            .fetch_add(1, AtomicOrdering::Relaxed);
        if !sink.hits.is_empty() {
            self.shared.offer(&Arc::from(path), sink.hits);
        }
    }
}

/// `path` relative to `root`, `/`-separated on every platform, as shown: a control character
/// in a name (a file a stranger named `a\nsrc/x.rs:1: ...` would add a line to the listing the
/// model reads), a bidirectional override or a line separator is escaped.
fn relative_path(root: &Path, path: &Path) -> String {
    let relative = path.strip_prefix(root).unwrap_or(path);
    let mut out = String::new();
    for component in relative.components() {
        if !out.is_empty() {
            out.push('/');
        }
        for c in component.as_os_str().to_string_lossy().chars() {
            if pith_paths::shown::needs_escape(c) {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
    }
    out
}

struct Hit {
    line: u64,
    text: String,
    truncated: bool,
}

/// Collects one file's matches; a file found to be binary is dropped whole.
struct FileSink<'m> {
    matcher: &'m RegexMatcher,
    keep_text: usize,
    hits: Vec<Hit>,
    count: u64,
    binary: bool,
}

impl Sink for FileSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _searcher: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        self.count += 1;
        if self.hits.len() < self.keep_text {
            let line = mat.bytes();
            let match_start = self.matcher.find(line).ok().flatten().map(|m| m.start());
            let (text, truncated) = display_line(line, match_start);
            self.hits.push(Hit {
                line: mat.line_number().unwrap_or(0),
                text,
                truncated,
            });
        }
        Ok(true)
    }

    fn binary_data(&mut self, _searcher: &Searcher, _offset: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}
