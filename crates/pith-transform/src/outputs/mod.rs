//! Tool output that rides every later turn (issue 48): a long output the client sends back in
//! the transcript reaches the provider whole in the request that carries it first (the model
//! decides its next step on everything the tool said), and from the next request on as a
//! ranked excerpt ([`excerpt`]) under a header that says it was shortened, how, and how to get
//! the whole output back (run the call again: a repeat of a call is never shortened).
//!
//! Each excerpt is a pure function of the transcript as of the request that first shortened
//! it: the output, its call's input, and the model's next message (its text and tool inputs,
//! an Edit's `old_string` first of all). A conversation only grows at its end, so every later
//! request of the session computes the same excerpt and sends identical bytes (the provider's
//! cache holds), across restarts and across instances behind a load balancer; each is ranked
//! once per call and output (the memo) and reused.
//!
//! The request that carries a long result whole moves the client's cache marker from after it
//! to before it ([`breakpoint`]): the whole output is never written to a cache no later request
//! reads. What it keeps out is priced at the history's place in the prompt (`Site::History`).
//! Off by default (`PITH_TRIM_OUTPUTS`, `[proxy] trim_outputs`).
//!
//! Built so far: Anthropic Messages. Still to come (issue 48): Chat Completions and Responses
//! (and Codex's WebSocket), the original kept for `pith mcp`, reading only what is new since
//! the session's last request.

mod breakpoint;
pub mod excerpt;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use pith_wire::Wire;
use serde::Deserialize;
use serde_json::value::RawValue;
use twox_hash::XxHash3_128;

use crate::splice::{quote, span_of};
use crate::stage::{Edit, Fact, Outcome, Request, Site, Splice, Stage, StageError};
use excerpt::{Excerpt, Query, kind_of_call, strings_of};

/// The stage's name in `pith-transforms` and the ledger.
pub const NAME: &str = "outputs";

/// Why the stage left a request as it was.
pub mod reason {
    /// Not a wire the stage reads yet.
    pub const NOT_APPLICABLE: &str = "not_applicable";
    /// No output long enough with a later turn after it.
    pub const NONE_LONG: &str = "none_long";
    /// Not the shape of a Messages request.
    pub const UNREADABLE: &str = "unreadable";

    /// Every reason, for the words' test.
    pub const ALL: &[&str] = &[NOT_APPLICABLE, NONE_LONG, UNREADABLE];
}

/// What the stage, its facts and its reasons are called for people.
pub const WORDS: crate::stage::StageWords = crate::stage::StageWords {
    stage: NAME,
    name: "tool output excerpts",
    facts: &[
        ("outputs", "shortened {n} tool output{s}"),
        ("asked_again", "{n} call{s} repeated for a whole output"),
        (
            "marker_moved",
            "kept {n} long output{s} out of the cache write",
        ),
        ("chars", ""),
    ],
    reasons: &[
        (reason::NOT_APPLICABLE, "a wire it does not read yet"),
        (
            reason::NONE_LONG,
            "no long tool output before the last turn",
        ),
        (reason::UNREADABLE, "the body was not the JSON it expects"),
    ],
};

/// What the stage shortens.
#[derive(Debug, Clone)]
pub struct OutputsOptions {
    /// Outputs shorter than this many characters ride whole.
    pub min_chars: usize,
    /// Tools whose outputs ride whole, by the name the client calls them.
    pub excluded_tools: Vec<String>,
}

impl Default for OutputsOptions {
    fn default() -> Self {
        OutputsOptions {
            min_chars: 4_000,
            excluded_tools: Vec::new(),
        }
    }
}

/// Excerpts remembered (per call, output and next message), at most.
const MEMO_MAX: usize = 4_096;

/// The stage.
pub struct OutputsStage {
    options: OutputsOptions,
    /// The replacement for each (call id, output, next message) ranked so far; `None`: left
    /// whole.
    memo: Mutex<HashMap<u128, Option<Arc<str>>>>,
}

impl OutputsStage {
    /// A stage with `options` and nothing ranked yet.
    pub fn new(options: OutputsOptions) -> OutputsStage {
        OutputsStage {
            options,
            memo: Mutex::new(HashMap::new()),
        }
    }
}

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow)]
    messages: Vec<Message<'a>>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow)]
    content: &'a RawValue,
}

/// The members of a content block the stage reads.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_use_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(default)]
    is_error: Option<bool>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

/// A message's blocks, each with its raw bytes; none for a content that is a string.
fn blocks_of<'a>(
    content: &'a RawValue,
) -> Result<Vec<(&'a RawValue, Block<'a>)>, serde_json::Error> {
    if content.get().starts_with('"') {
        return Ok(Vec::new());
    }
    let raws: Vec<&'a RawValue> = serde_json::from_str(content.get())?;
    raws.into_iter()
        .map(|raw| Ok((raw, serde_json::from_str(raw.get())?)))
        .collect()
}

/// A tool call: its name and input.
struct Call<'a> {
    name: Cow<'a, str>,
    input: &'a RawValue,
}

impl Stage for OutputsStage {
    fn name(&self) -> &'static str {
        NAME
    }

    fn apply(&self, request: &Request<'_>) -> Result<Outcome, StageError> {
        if request.wire != Wire::AnthropicMessages {
            return Ok(Outcome::Unchanged(reason::NOT_APPLICABLE));
        }
        let Ok(body) = std::str::from_utf8(request.body) else {
            return Ok(Outcome::Unchanged(reason::UNREADABLE));
        };
        let Ok(parsed) = serde_json::from_str::<Body<'_>>(body) else {
            return Ok(Outcome::Unchanged(reason::UNREADABLE));
        };
        let mut messages = Vec::with_capacity(parsed.messages.len());
        for m in &parsed.messages {
            messages.push((m.role.as_ref(), blocks_of(m.content)?));
        }
        let mut edit = Shortening::default();
        let mut calls: HashMap<&str, Call<'_>> = HashMap::new();
        let mut seen: HashSet<(&str, &str)> = HashSet::new();
        let mut repeats: HashSet<&str> = HashSet::new();
        for (i, (role, blocks)) in messages.iter().enumerate() {
            if *role == "assistant" {
                for (_, b) in blocks.iter().filter(|(_, b)| b.kind == "tool_use") {
                    let (Some(id), Some(name), Some(input)) = (&b.id, &b.name, b.input) else {
                        continue;
                    };
                    if !seen.insert((name.as_ref(), input.get())) {
                        repeats.insert(id.as_ref());
                    }
                    let name = name.clone();
                    calls.insert(id.as_ref(), Call { name, input });
                }
                continue;
            }
            let Some(next) = messages[i + 1..].iter().find(|(r, _)| *r == "assistant") else {
                // The turn that carries these results is the last: they ride whole, and the
                // cache marker after a long one moves before it.
                let long = blocks.iter().position(|(_, b)| {
                    b.kind == "tool_result"
                        && b.tool_use_id.as_deref().is_some_and(|id| {
                            !repeats.contains(id)
                                && calls.get(id).is_some_and(|call| self.may_shorten(call, b))
                        })
                });
                if let (Some(first_long), Some(previous)) = (long, i.checked_sub(1)) {
                    let previous: Vec<(&RawValue, &str)> = messages[previous]
                        .1
                        .iter()
                        .map(|(r, b)| (*r, b.kind.as_ref()))
                        .collect();
                    let last: Vec<(&RawValue, &str)> =
                        blocks.iter().map(|(r, b)| (*r, b.kind.as_ref())).collect();
                    if let Some(moved) = breakpoint::move_marker(body, &previous, &last, first_long)
                    {
                        edit.marker = moved;
                    }
                }
                break;
            };
            let next: Vec<&Block<'_>> = next.1.iter().map(|(_, b)| b).collect();
            for (_, b) in blocks.iter().filter(|(_, b)| b.kind == "tool_result") {
                let Some(id) = b.tool_use_id.as_deref() else {
                    continue;
                };
                if repeats.contains(id) {
                    edit.asked_again += 1;
                    continue;
                }
                let Some(call) = calls.get(id) else { continue };
                self.shorten(body, id, call, b, &next, &mut edit)?;
            }
        }
        Ok(edit.into_outcome())
    }
}

/// The splices so far, and what they did.
#[derive(Default)]
struct Shortening {
    splices: Vec<Splice>,
    /// The cache marker moved before the last message's first long result.
    marker: Vec<Splice>,
    kept_out: usize,
    asked_again: usize,
}

impl Shortening {
    fn into_outcome(mut self) -> Outcome {
        if self.splices.is_empty() && self.marker.is_empty() {
            return Outcome::Unchanged(reason::NONE_LONG);
        }
        let mut facts = vec![Fact::count("outputs", self.splices.len())];
        if !self.marker.is_empty() {
            facts.push(Fact::count("marker_moved", 1));
        }
        self.splices.append(&mut self.marker);
        if self.asked_again > 0 {
            facts.push(Fact::count("asked_again", self.asked_again));
        }
        facts.push(Fact::chars_kept_out("chars", self.kept_out, Site::History));
        Outcome::Edited(Edit {
            splices: self.splices,
            facts,
            ..Edit::default()
        })
    }
}

impl OutputsStage {
    /// Whether a result may be shortened in a later turn: not an error, its tool not
    /// excluded, a text long enough.
    fn may_shorten(&self, call: &Call<'_>, result: &Block<'_>) -> bool {
        self.candidate(call, result)
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
            .is_some_and(|text| self.long_enough(&text))
    }

    /// The JSON string of a result that may be long enough to shorten, read without decoding
    /// it: not an error, its tool not excluded, its escaped text at least `min_chars` long.
    fn candidate<'a>(&self, call: &Call<'_>, result: &Block<'a>) -> Option<&'a RawValue> {
        if result.is_error == Some(true)
            || self.options.excluded_tools.iter().any(|t| *t == call.name)
        {
            return None;
        }
        result_text(result).filter(|raw| raw.get().len() >= self.options.min_chars)
    }

    fn long_enough(&self, text: &str) -> bool {
        text.len() >= self.options.min_chars && text.split('\n').count() >= excerpt::MIN_LINES
    }

    /// Shortens one result when it is long, its tool is not excluded and ranking finds it
    /// worth it: the text's JSON string replaced by the header and excerpt. Ranked once per
    /// call, output and next message (the memo): a later request decodes nothing.
    fn shorten(
        &self,
        body: &str,
        id: &str,
        call: &Call<'_>,
        result: &Block<'_>,
        next: &[&Block<'_>],
        edit: &mut Shortening,
    ) -> Result<(), StageError> {
        let Some(raw) = self.candidate(call, result) else {
            return Ok(());
        };
        let Some(span) = span_of(body, raw) else {
            return Ok(());
        };
        let key = memo_key(id, raw.get(), next);
        let remembered = self
            .memo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        let replacement = match remembered {
            Some(r) => r,
            None => {
                let text: String = serde_json::from_str(raw.get())?;
                let made = if self.long_enough(&text) {
                    replacement(&call.name, call.input, &text, next)?
                } else {
                    None
                };
                let mut memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
                if memo.len() >= MEMO_MAX {
                    memo.clear();
                }
                memo.insert(key, made.clone());
                made
            }
        };
        if let Some(replacement) = replacement {
            edit.kept_out += raw.get().len().saturating_sub(replacement.len());
            edit.splices.push(Splice {
                range: span,
                replacement: replacement.to_string(),
            });
        }
        Ok(())
    }
}

/// The JSON string that holds a result's text: a string content, or the `text` of a content
/// of one text block. Anything else (images, several blocks) rides whole.
fn result_text<'a>(result: &Block<'a>) -> Option<&'a RawValue> {
    let content = result.content?;
    if content.get().starts_with('"') {
        return Some(content);
    }
    #[derive(Deserialize)]
    struct TextBlock<'a> {
        #[serde(rename = "type", borrow)]
        kind: Cow<'a, str>,
        #[serde(borrow)]
        text: &'a RawValue,
    }
    match serde_json::from_str::<Vec<TextBlock<'a>>>(content.get())
        .ok()?
        .as_slice()
    {
        [only] if only.kind == "text" => Some(only.text),
        _ => None,
    }
}

/// The memo's key: the call, the output's bytes and the next message's.
fn memo_key(id: &str, output: &str, next: &[&Block<'_>]) -> u128 {
    let mut hasher = XxHash3_128::new();
    for part in [id, "\0", output] {
        hasher.write(part.as_bytes());
    }
    for b in next {
        hasher.write(b"\0");
        hasher.write(b.kind.as_bytes());
        if let Some(t) = &b.text {
            hasher.write(t.as_bytes());
        }
        if let Some(i) = b.input {
            hasher.write(i.get().as_bytes());
        }
    }
    hasher.finish_128()
}

/// The JSON string that takes an output's place, or `None` when ranking leaves it whole.
fn replacement(
    tool: &str,
    input: &RawValue,
    text: &str,
    next: &[&Block<'_>],
) -> Result<Option<Arc<str>>, StageError> {
    let input: serde_json::Value = serde_json::from_str(input.get())?;
    let mut call = Vec::new();
    strings_of(&input, &mut call);
    let later_text: Vec<&str> = next
        .iter()
        .filter(|b| b.kind == "text")
        .filter_map(|b| b.text.as_deref())
        .collect();
    let later: Vec<serde_json::Value> = next
        .iter()
        .filter(|b| b.kind == "tool_use")
        .filter_map(|b| b.input)
        .map(|i| serde_json::from_str(i.get()))
        .collect::<Result<_, _>>()?;
    let mut later_inputs = Vec::new();
    for v in &later {
        strings_of(v, &mut later_inputs);
    }
    let query = Query {
        call,
        later_text,
        later_inputs,
    };
    let Some(excerpt) = excerpt::excerpt(text, kind_of_call(tool, &input), &query) else {
        return Ok(None);
    };
    let shown = format!("{}\n{}", header(&excerpt), excerpt.text);
    Ok(Some(Arc::from(quote(&shown))))
}

/// The excerpt's first line: that pith shortened the output, how much it shows, how the lines
/// were chosen and how to get the whole back.
fn header(e: &Excerpt) -> String {
    format!(
        "[pith shortened this tool output: {} of {} lines shown, chosen by the call's input and \
         what was done next; errors and quoted lines kept. The whole output: make the same call \
         again.]",
        e.shown, e.total
    )
}

#[cfg(test)]
mod tests;
