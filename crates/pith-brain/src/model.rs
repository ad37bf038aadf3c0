//! What a memory is: the types the brain's rules, its storage and its renderers share.

use serde::{Deserialize, Serialize};

/// What a memory records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Something worth knowing about the project.
    Note,
    /// A fix for an error (carries the error's headline).
    Fix,
    /// An attempt that did not work, so nobody tries it again.
    Failed,
    /// A decision and its reason.
    Decision,
}

impl Kind {
    /// Every kind, in declaration order.
    pub const ALL: [Kind; 4] = [Kind::Note, Kind::Fix, Kind::Failed, Kind::Decision];

    /// The lowercase name, as stored, shown and serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Note => "note",
            Kind::Fix => "fix",
            Kind::Failed => "failed",
            Kind::Decision => "decision",
        }
    }

    /// Parse a kind name as users and agents write it (case-insensitive).
    pub fn parse(name: &str) -> Option<Kind> {
        let name = name.trim();
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(name))
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a memory's evidence still matches the files it was recorded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Freshness {
    /// Every evidence file is unchanged since it was recorded.
    Fresh,
    /// An evidence file changed or is gone.
    Stale,
    /// Nothing to check against (no evidence with a recorded hash).
    Unverified,
}

impl Freshness {
    /// The lowercase name, as stored, shown and serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Freshness::Fresh => "fresh",
            Freshness::Stale => "stale",
            Freshness::Unverified => "unverified",
        }
    }

    /// Parse a name as [`Freshness::as_str`] writes it (how backends store it).
    pub fn parse(s: &str) -> Option<Freshness> {
        [Freshness::Fresh, Freshness::Stale, Freshness::Unverified]
            .into_iter()
            .find(|f| f.as_str() == s)
    }
}

impl std::fmt::Display for Freshness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Inclusive 1-based line range of an evidence file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineRange {
    /// First line, counted from 1.
    pub start: u32,
    /// Last line, included; never before `start`.
    pub end: u32,
}

/// A workspace file a memory depends on, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// Path relative to the workspace root, `/`-separated.
    pub path: String,
    /// Only these lines were hashed, when set.
    pub lines: Option<LineRange>,
    /// SHA-256 (hex) of the content when recorded.
    pub hash: Option<String>,
    /// File size and modification time when last hashed: a cheap "unchanged" test that lets
    /// reads skip rehashing files nobody touched.
    pub size: Option<u64>,
    /// Modification time in nanoseconds since the Unix epoch; `None` where the file system
    /// gives none.
    pub mtime_ns: Option<i64>,
}

/// The outcome of the last explicit verification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastCheck {
    /// What the verification found.
    pub status: Freshness,
    /// Unix seconds.
    pub at: i64,
}

/// One memory as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// Short id such as `m-7f3a`, unique within the brain.
    pub id: String,
    /// What the memory records.
    pub kind: Kind,
    /// One line that names the memory in lists and pointers.
    pub title: String,
    /// The full text; may be empty.
    pub body: String,
    /// Lowercase tags without `#`, each once, in the order given.
    pub tags: Vec<String>,
    /// For a fix: the error headline it fixes.
    pub headline: Option<String>,
    /// The files the memory depends on, each once, in the order given.
    pub evidence: Vec<Evidence>,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds of the last change to the memory itself (hits and verifications leave it
    /// alone).
    pub updated_at: i64,
    /// Times a search or get returned this memory to a caller.
    pub hits: u64,
    /// Unix seconds of the latest hit; `None` if it was never returned.
    pub last_hit_at: Option<i64>,
    /// The last explicit verification; `None` if it was never verified.
    pub last_check: Option<LastCheck>,
    /// Set while the memory is in the trash.
    pub trashed_at: Option<i64>,
}

/// A memory named without its body (pointers on file reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryRef {
    /// The id to fetch the whole memory by.
    pub id: String,
    /// What the memory records.
    pub kind: Kind,
    /// The title, which stands in for the body.
    pub title: String,
}
