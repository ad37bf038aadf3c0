//! What a stage sees and what it may return.
//!
//! A stage reads a [`Request`] and returns an [`Outcome`]: unchanged with a reason, or an
//! [`Edit`] of splices, header edits and [`Fact`]s. Each fact has a [`FactKind`], so the ledger
//! and its readers treat every stage's numbers alike without knowing the stage, and characters
//! kept out or added carry the [`Site`] of the prompt they sit in, which is what prices them
//! (a part read from the cache is billed at a fraction of the input rate).

use std::ops::Range;

use http::{HeaderMap, HeaderName, HeaderValue};
use pith_wire::Wire;

/// A client request as a stage sees it. `body` is the exact bytes from the client (or from the
/// previous stage's splices); stages must not assume it is valid JSON.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The wire the request speaks.
    pub wire: Wire,
    /// Path without the query string, e.g. `/v1/messages`.
    pub path: &'a str,
    /// The client's headers as it sent them (earlier stages' header edits are not applied).
    pub headers: &'a HeaderMap,
    /// The body's bytes, as the client or the previous stage left them; maybe not valid JSON.
    pub body: &'a [u8],
}

/// Replace `range` of the body with `replacement` (an empty range inserts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splice {
    /// Byte range of the body to replace.
    pub range: Range<usize>,
    /// The text that takes its place.
    pub replacement: String,
}

/// A change to the request headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderEdit {
    /// Add `value` to the comma-separated list header `name` (e.g. `anthropic-beta`), creating
    /// it if absent. Never replaces what the client sent and never adds a value twice.
    AppendListValue {
        /// The header to append to.
        name: HeaderName,
        /// The entry to append.
        value: String,
    },
}

impl HeaderEdit {
    /// Apply this edit to `headers`. An edit whose result is not a valid header value is
    /// skipped and reported as `false`.
    pub fn apply(&self, headers: &mut HeaderMap) -> bool {
        match self {
            HeaderEdit::AppendListValue { name, value } => append_list_value(headers, name, value),
        }
    }
}

/// Append `value` to the comma-separated header `name`, unless one of its entries already
/// equals it. Returns whether the header map now holds a valid value with `value` in it.
pub fn append_list_value(headers: &mut HeaderMap, name: &HeaderName, value: &str) -> bool {
    let existing: Vec<String> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_owned)
        .collect();
    if existing
        .iter()
        .flat_map(|v| v.split(','))
        .any(|entry| entry.trim() == value)
    {
        return true;
    }
    let joined = match existing.last() {
        Some(last) if !last.trim().is_empty() => format!("{last},{value}"),
        _ => value.to_owned(),
    };
    let Ok(new_value) = HeaderValue::from_str(&joined) else {
        return false;
    };
    // Replace only the last occurrence's value so earlier duplicates stay as the client sent them.
    let mut all: Vec<HeaderValue> = headers.get_all(name).iter().cloned().collect();
    all.pop();
    all.push(new_value);
    headers.remove(name);
    for v in all {
        headers.append(name.clone(), v);
    }
    true
}

/// What a number a stage reports measures, so that readers (the ledger, `pith stats`, the
/// dashboard) can treat facts of every stage alike without knowing the stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FactKind {
    /// A count of things, e.g. tools deferred.
    Count,
    /// Characters of prompt the edit kept out of the model's context; readers estimate the
    /// tokens they stand for.
    CharsKeptOut,
    /// A number that describes the request (e.g. the pins in force), not an amount: readers
    /// show it per request and never add it up across requests.
    Level,
    /// Characters of prompt the edit added (e.g. the search tool defer puts in place of the
    /// tools it takes out): what the edit costs, set against what it kept out.
    CharsAdded,
}

/// Where in the prompt, in the order the provider caches it, a fact's characters sit: what
/// they would have cost depends on whether that part of the prompt was read from the cache,
/// written to it, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Site {
    /// The tool definitions.
    Tools,
    /// The system prompt (Anthropic `system`, Responses `instructions`).
    System,
    /// The end of the prompt: the newest message.
    Tail,
    /// The conversation's earlier messages (a tool output from an earlier turn): priced from
    /// the start of the messages, which a session's later requests read from the cache.
    History,
}

impl FactKind {
    /// Stable name, stored in the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            FactKind::Count => "count",
            FactKind::CharsKeptOut => "chars_kept_out",
            FactKind::Level => "level",
            FactKind::CharsAdded => "chars_added",
        }
    }

    /// The kind named by [`FactKind::as_str`].
    pub fn parse(name: &str) -> Option<FactKind> {
        [
            FactKind::Count,
            FactKind::CharsKeptOut,
            FactKind::Level,
            FactKind::CharsAdded,
        ]
        .into_iter()
        .find(|k| k.as_str() == name)
    }
}

/// Estimated prompt tokens of `chars` characters kept out of context (a
/// [`FactKind::CharsKeptOut`] fact): one token per 4 characters, rounded up. A heuristic, not a
/// tokenizer: JSON schemas run close to 4 characters per token on Claude and GPT tokenizers, so
/// treat it as an estimate.
pub fn estimated_tokens(chars: usize) -> usize {
    chars.div_ceil(4)
}

/// One number a stage reports about its edit, e.g. `tools = 48` (a count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fact {
    /// Short stable name, shown as `name=value` in the `pith-transforms` header.
    pub name: &'static str,
    /// The number, in what `kind` says it measures.
    pub value: u64,
    /// What the number measures.
    pub kind: FactKind,
    /// Where the characters sit, for the kinds that count characters of prompt.
    pub site: Option<Site>,
}

impl Fact {
    /// A count of things named `name`.
    pub fn count(name: &'static str, value: usize) -> Fact {
        Fact {
            name,
            value: value as u64,
            kind: FactKind::Count,
            site: None,
        }
    }

    /// A level named `name` (see [`FactKind::Level`]).
    pub fn level(name: &'static str, value: usize) -> Fact {
        Fact {
            name,
            value: value as u64,
            kind: FactKind::Level,
            site: None,
        }
    }

    /// `value` characters of prompt kept out of context at `site`, named `name`.
    pub fn chars_kept_out(name: &'static str, value: usize, site: Site) -> Fact {
        Fact {
            name,
            value: value as u64,
            kind: FactKind::CharsKeptOut,
            site: Some(site),
        }
    }

    /// `value` characters of prompt the edit added at `site`, named `name`.
    pub fn chars_added(name: &'static str, value: usize, site: Site) -> Fact {
        Fact {
            name,
            value: value as u64,
            kind: FactKind::CharsAdded,
            site: Some(site),
        }
    }
}

/// A stage's change to one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edit {
    /// Splices into the body as the stage received it; none leaves the body as it is.
    pub splices: Vec<Splice>,
    /// Changes to the request headers.
    pub headers: Vec<HeaderEdit>,
    /// What the edit did, for the `pith-transforms` header and the ledger, in header order.
    pub facts: Vec<Fact>,
    /// The span of one whole JSON value of the body (e.g. the `tools` array) that every splice
    /// lies inside, when the stage knows it: the pipeline then checks that this value is still
    /// one JSON value after the edit, not the whole body (a value replaced by a value leaves a
    /// document valid; a whole-body check costs a parse of the conversation on every request).
    /// `None`: the whole edited body is checked.
    pub within: Option<std::ops::Range<usize>>,
}

impl Edit {
    /// The same edit for a body where what it edits starts `offset` bytes later (an edit made
    /// on one part of the body, e.g. the `tools` array's text alone, placed in the whole).
    pub fn moved_to(mut self, offset: usize) -> Edit {
        for splice in &mut self.splices {
            splice.range = splice.range.start + offset..splice.range.end + offset;
        }
        self.within = self.within.map(|w| w.start + offset..w.end + offset);
        self
    }
}

/// What a stage decided for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Leave the request as it is; the reason is recorded (e.g. `"already_deferring"`).
    Unchanged(&'static str),
    /// Change the request by this edit.
    Edited(Edit),
}

/// A stage's error: the pipeline leaves the request unchanged and counts it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StageError(pub String);

impl From<serde_json::Error> for StageError {
    fn from(e: serde_json::Error) -> Self {
        StageError(format!("json: {e}"))
    }
}

impl From<crate::SpliceError> for StageError {
    fn from(e: crate::SpliceError) -> Self {
        StageError(format!("splice: {e}"))
    }
}

/// One transform. Must be a deterministic, pure function of the request so that turn N+1 of
/// a session is rewritten exactly as turn N was (cache safety).
pub trait Stage: Send + Sync {
    /// Short stable name used in `pith-transforms` and the ledger, e.g. `defer`.
    fn name(&self) -> &'static str;
    /// Decide for `request`: leave it unchanged (with a reason) or edit it. An error drops the
    /// stage for this request only; the request goes on without its edit.
    fn apply(&self, request: &Request<'_>) -> Result<Outcome, StageError>;
}

/// A stage's words.
#[derive(Debug, Clone, Copy)]
pub struct StageWords {
    /// The stage's code: its name in the ledger.
    pub stage: &'static str,
    /// What the stage is called.
    pub name: &'static str,
    /// Its facts: the code, and a phrase with `{n}` where the number goes and `{s}` where a
    /// plural's `s` goes (none for one). An empty phrase is
    /// a fact shown another way (characters kept out are shown as the tokens they stand for).
    pub facts: &'static [(&'static str, &'static str)],
    /// Why it left requests unchanged: the code, and what follows "N requests: ".
    pub reasons: &'static [(&'static str, &'static str)],
    /// How the model comes back for what the stage withheld, when it can: what a saving may
    /// cost in turns.
    pub came_back: Option<CameBack>,
}

/// Where the ledger counts the model coming back for what a stage withheld (a deferred tool
/// searched for, a shortened output asked for again), and what against.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct CameBack {
    /// The stage whose fact counts it (a deferral's searches are counted by the tool search's
    /// hiding, which sees them in the answers).
    pub stage: &'static str,
    /// That fact.
    pub fact: &'static str,
    /// This stage's fact it is counted against; `None`: the requests the stage changed.
    pub of: Option<&'static str>,
    /// The times in words, with `{n}` and `{s}` as a fact's phrase.
    pub times: &'static str,
    /// What it is counted against, in words, likewise.
    pub of_words: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_list_value_appends_once() {
        let name = HeaderName::from_static("anthropic-beta");
        let mut headers = HeaderMap::new();
        assert!(append_list_value(&mut headers, &name, "x-1"));
        assert_eq!(headers[&name], "x-1");
        headers.insert(&name, HeaderValue::from_static("a-1, b-2"));
        assert!(append_list_value(&mut headers, &name, "x-1"));
        assert_eq!(headers[&name], "a-1, b-2,x-1");
        assert!(append_list_value(&mut headers, &name, "b-2"));
        assert_eq!(headers[&name], "a-1, b-2,x-1");
    }
}
