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
    pub const ALL: [Kind; 4] = [Kind::Note, Kind::Fix, Kind::Failed, Kind::Decision];

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
    pub start: u32,
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
    pub mtime_ns: Option<i64>,
}

/// The outcome of the last explicit verification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastCheck {
    pub status: Freshness,
    /// Unix seconds.
    pub at: i64,
}

/// One memory as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    pub id: String,
    pub kind: Kind,
    pub title: String,
    pub body: String,
    pub tags: Vec<String>,
    /// For a fix: the error headline it fixes.
    pub headline: Option<String>,
    pub evidence: Vec<Evidence>,
    /// Unix seconds.
    pub created_at: i64,
    pub updated_at: i64,
    /// Times a search or get returned this memory to a caller.
    pub hits: u64,
    pub last_hit_at: Option<i64>,
    pub last_check: Option<LastCheck>,
    /// Set while the memory is in the trash.
    pub trashed_at: Option<i64>,
}

/// A memory named without its body (pointers on file reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryRef {
    pub id: String,
    pub kind: Kind,
    pub title: String,
}
