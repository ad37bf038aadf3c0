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
//! The three wires are read into one shape of turns ([`transcript`]); Codex's WebSocket runs
//! the pipeline over the whole conversation the socket holds, so it is read as Responses. The
//! cache marker moves on Anthropic only (OpenAI's prompt cache is an automatic prefix with no
//! write premium). A request reads only the turns after those its conversation's last request
//! decided ([`remembered`], [`walk`]). With history recorded, each output the stage may shorten
//! is kept whole there, and an excerpt names `pith mcp`'s `tool_output` when the client has it.

mod breakpoint;
pub mod excerpt;
mod memo;
mod remembered;
pub(crate) mod transcript;
mod walk;

use std::ops::Range;
use std::sync::Arc;

use pith_wire::skim;
use serde_json::value::RawValue;
use twox_hash::XxHash3_128;

use crate::splice::{quote, span_of};
use crate::stage::{Outcome, Request, Splice, Stage, StageError};
use excerpt::{Excerpt, Query, kind_of_call};
use memo::Memo;
use remembered::{Remembered, session_key};
use transcript::{Call, Output, Turn};
use walk::Walk;

/// The stage's name in `pith-transforms` and the ledger.
pub const NAME: &str = "outputs";

/// Why the stage left a request as it was.
pub mod reason {
    /// No output long enough with a later turn after it.
    pub const NONE_LONG: &str = "none_long";
    /// Not the shape of a Messages request.
    pub const UNREADABLE: &str = "unreadable";

    /// Every reason, for the words' test.
    pub const ALL: &[&str] = &[NONE_LONG, UNREADABLE];
}

/// What the stage, its facts and its reasons are called for people.
pub const WORDS: crate::stage::StageWords = crate::stage::StageWords {
    stage: NAME,
    name: "tool output excerpts",
    facts: &[
        // "New" and "sent" apart: a window of a session's later requests sends excerpts made
        // before it ("0 new outputs shortened, 4 excerpts sent", not "shortened 0, sent 4").
        ("first", "{n} new tool output{s} shortened"),
        ("outputs", "{n} excerpt{s} sent in place of whole outputs"),
        (
            "asked_again",
            "{n} whole output{s} asked for again (the call repeated, or pith's tool_output)",
        ),
        (
            "marker_moved",
            "kept {n} long output{s} out of the cache write",
        ),
        ("chars", ""),
    ],
    reasons: &[
        (
            reason::NONE_LONG,
            "no long tool output before the last turn",
        ),
        (reason::UNREADABLE, "the body was not the JSON it expects"),
    ],
    came_back: Some(crate::stage::CameBack {
        stage: NAME,
        fact: "asked_again",
        of: Some("first"),
        times: "{n} whole output{s} asked for again",
        of_words: "of {n} shortened",
    }),
};

/// What the stage shortens.
#[derive(Debug, Clone)]
pub struct OutputsOptions {
    /// Outputs shorter than this many characters ride whole.
    pub min_chars: usize,
    /// Tools whose outputs ride whole, by the name the client calls them.
    pub excluded_tools: Vec<String>,
    /// The proxy keeps each output it may shorten whole in the history, where `pith mcp`'s
    /// `tool_output` returns it: an excerpt names that tool when the request offers it.
    pub originals_kept: bool,
}

impl Default for OutputsOptions {
    fn default() -> Self {
        OutputsOptions {
            min_chars: 4_000,
            excluded_tools: Vec::new(),
            originals_kept: false,
        }
    }
}

/// The stage.
pub struct OutputsStage {
    options: OutputsOptions,
    /// The replacement for each (call id, output, next message) ranked so far.
    memo: Memo,
    /// Per conversation (by its first history element), what its turns up to its last model
    /// turn decided: the next request reads only the turns after them.
    sessions: Remembered,
    /// History elements read so far (the tests' view of what reading only the new turns saves).
    #[cfg(test)]
    elements_read: std::sync::atomic::AtomicUsize,
}

impl OutputsStage {
    /// A stage with `options` and nothing ranked yet.
    pub fn new(options: OutputsOptions) -> OutputsStage {
        OutputsStage {
            options,
            memo: Memo::default(),
            sessions: Remembered::default(),
            #[cfg(test)]
            elements_read: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// A stage whose memo and remembered conversations each hold at most `bytes_max` bytes.
    #[cfg(test)]
    fn with_bytes_max(options: OutputsOptions, bytes_max: usize) -> OutputsStage {
        OutputsStage {
            memo: Memo::with_bytes_max(bytes_max),
            sessions: Remembered::with_bytes_max(bytes_max),
            ..OutputsStage::new(options)
        }
    }
}

impl Stage for OutputsStage {
    fn name(&self) -> &'static str {
        NAME
    }

    fn apply(&self, request: &Request<'_>) -> Result<Outcome, StageError> {
        let Ok(body) = std::str::from_utf8(request.body) else {
            return Ok(Outcome::Unchanged(reason::UNREADABLE));
        };
        if body.len() < self.options.min_chars {
            return Ok(Outcome::Unchanged(reason::NONE_LONG));
        }
        let bytes = body.as_bytes();
        let key = request.wire.history_member().as_bytes();
        let Some(open) = skim::member_value_start(bytes, key) else {
            return Ok(Outcome::Unchanged(unless_invalid(body, reason::NONE_LONG)));
        };
        if bytes.get(open) != Some(&b'[') {
            return Ok(Outcome::Unchanged(unless_invalid(body, reason::NONE_LONG)));
        }
        let Some(first) = skim::first_element(bytes, open) else {
            return Ok(Outcome::Unchanged(unless_invalid(body, reason::NONE_LONG)));
        };
        let fetchable = self.options.originals_kept && offers_pith_tool_output(body);
        let session = session_key(request.wire, fetchable, &bytes[first]);
        let (decided, hasher) = self.sessions.find(session, bytes, open);
        let Some((elements, close)) = skim::elements_after(bytes, open + decided.len.max(1), true)
        else {
            return Ok(Outcome::Unchanged(reason::UNREADABLE));
        };
        // The history's span, its `]` found by the read of its new elements.
        let history = open..close + 1;
        #[cfg(test)]
        self.elements_read
            .fetch_add(elements.len(), std::sync::atomic::Ordering::Relaxed);
        let Ok(turns) = transcript::turns(request.wire, body, &elements) else {
            return Ok(Outcome::Unchanged(reason::UNREADABLE));
        };
        let mut walk = Walk::new(&decided, body, open, fetchable, hasher);
        let last_model = turns.iter().rposition(|t| t.model);
        if last_model == Some(0) && decided.len > 0 {
            // The newest model turn is the remembered one (a request sent again): the outputs
            // it shortened first lie among the remembered turns.
            walk.first = decided.first;
        }
        for (i, turn) in turns.iter().enumerate() {
            if Some(i) == last_model {
                let now = walk.decided(turn.start..turn.end);
                self.sessions.keep(session, &decided, now);
            }
            if turn.model {
                walk.register(&turn.calls, Some(i) == last_model);
                continue;
            }
            let Some(at) = turns[i + 1..].iter().position(|t| t.model) else {
                // The turn that carries these outputs is the last with any: they ride whole,
                // and the cache marker after a long one moves before it (the first such turn
                // decides: what follows it carries no outputs of its own).
                if walk.marker.is_empty() {
                    walk.marker = self.marker_before_first_long(body, &turns, i, &walk);
                }
                continue;
            };
            let next = &turns[i + 1 + at];
            // Shortened for the first time: the model's answer to it is this request's newest.
            let first = Some(i + 1 + at) == last_model;
            for output in &turn.outputs {
                let Some((call, repeat)) = walk.answer(output.call_id.as_ref()) else {
                    continue;
                };
                if !repeat && self.shorten(&call, output, next, &mut walk)? && first {
                    walk.first += 1;
                }
            }
        }
        let outcome = walk.into_outcome(history.clone());
        if matches!(outcome, Outcome::Edited(_)) && invalid_outside(body, &history) {
            return Ok(Outcome::Unchanged(reason::UNREADABLE));
        }
        Ok(outcome)
    }
}

/// `reason`, or `unreadable` when the body is not JSON.
fn unless_invalid(body: &str, reason: &'static str) -> &'static str {
    match serde_json::from_str::<serde::de::IgnoredAny>(body) {
        Ok(_) => reason,
        Err(_) => reason::UNREADABLE,
    }
}

/// Whether the body's bytes around its history array are not JSON (the array's elements were
/// each read, and its separators walked, already).
fn invalid_outside(body: &str, history: &Range<usize>) -> bool {
    let mut around = String::with_capacity(body.len() - history.len() + 2);
    around.push_str(&body[..history.start]);
    around.push_str("[]");
    around.push_str(&body[history.end..]);
    serde_json::from_str::<serde::de::IgnoredAny>(&around).is_err()
}

impl OutputsStage {
    /// Anthropic's last outputs: the splices that move the client's cache marker from after
    /// the first long one to the block before it, if there is one to move.
    fn marker_before_first_long(
        &self,
        body: &str,
        turns: &[Turn<'_>],
        at: usize,
        walk: &Walk<'_, '_>,
    ) -> Vec<Splice> {
        let last = &turns[at];
        let first_long = last.outputs.iter().find(|o| {
            walk.call(o.call_id.as_ref())
                .is_some_and(|(call, repeat)| !repeat && self.may_shorten(&call, o))
        });
        let (Some(first_long), Some(previous)) = (first_long, at.checked_sub(1)) else {
            return Vec::new();
        };
        if last.blocks.is_empty() {
            return Vec::new();
        }
        // The client's marker may sit after the outputs' turn: Claude Code 2.1.328 ends some
        // requests with a `system`-role message of its own ("The user hasn't heard from you
        // in a while…") and marks that.
        let mut from_last = blocks(last);
        for later in &turns[at + 1..] {
            from_last.extend(blocks(later));
        }
        let moved = breakpoint::move_marker(
            body,
            &blocks(&turns[previous]),
            &from_last,
            first_long.block,
        );
        moved.unwrap_or_default()
    }
}

/// A turn's blocks with their types, as the marker's move reads them.
fn blocks<'t>(turn: &'t Turn<'_>) -> Vec<(&'t RawValue, &'t str)> {
    turn.blocks.iter().map(|(r, k)| (*r, k.as_ref())).collect()
}

impl OutputsStage {
    /// Whether an output may be shortened in a later turn: not an error, its tool not
    /// excluded, a text long enough.
    fn may_shorten(&self, call: &Call<'_>, output: &Output<'_>) -> bool {
        self.candidate(call, output)
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
            .is_some_and(|text| self.long_enough(&text))
    }

    /// The JSON string of an output that may be long enough to shorten, read without decoding
    /// it: not an error, its tool not excluded, its escaped text at least `min_chars` long.
    fn candidate<'a>(&self, call: &Call<'_>, output: &Output<'a>) -> Option<&'a RawValue> {
        if output.is_error || self.options.excluded_tools.iter().any(|t| *t == call.name) {
            return None;
        }
        output.text.filter(|raw| {
            raw.get().len() >= self.options.min_chars && !raw.get()[1..].starts_with(HEADER_START)
        })
    }

    fn long_enough(&self, text: &str) -> bool {
        text.len() >= self.options.min_chars && text.split('\n').count() >= excerpt::MIN_LINES
    }

    /// Shortens one output when it is long, its tool is not excluded and ranking finds it
    /// worth it (whether it did): the text's JSON string replaced by the header and excerpt.
    /// Ranked once per call, output and next turn (the memo): a later request decodes nothing.
    fn shorten(
        &self,
        call: &Call<'_>,
        output: &Output<'_>,
        next: &Turn<'_>,
        edit: &mut Walk<'_, '_>,
    ) -> Result<bool, StageError> {
        let Some(raw) = self.candidate(call, output) else {
            return Ok(false);
        };
        let Some(span) = span_of(edit.body, raw) else {
            return Ok(false);
        };
        let key = memo_key(&call.id, raw.get(), next, edit.fetchable);
        let replacement = match self.memo.get(key) {
            Some(r) => r,
            None => {
                // Text that does not decode (a lone surrogate's escape) is left whole.
                let made = serde_json::from_str::<String>(raw.get())
                    .ok()
                    .filter(|text| self.long_enough(text))
                    .and_then(|text| replacement(call, &text, next, edit.fetchable));
                self.memo.insert(key, made.clone());
                made
            }
        };
        let Some(replacement) = replacement else {
            return Ok(false);
        };
        edit.kept_out += raw.get().len().saturating_sub(replacement.len());
        edit.splices.push((span, replacement));
        Ok(true)
    }
}

/// The memo's key: the call, the output's bytes and the next turn's.
fn memo_key(id: &str, output: &str, next: &Turn<'_>, fetchable: bool) -> u128 {
    let mut hasher = XxHash3_128::new();
    hasher.write(&[u8::from(fetchable)]);
    for part in [id, "\0", output] {
        hasher.write(part.as_bytes());
    }
    for t in &next.texts {
        hasher.write(b"\0t");
        hasher.write(t.get().as_bytes());
    }
    for c in &next.calls {
        hasher.write(b"\0c");
        hasher.write(c.input.raw().as_bytes());
    }
    hasher.finish_128()
}

/// The JSON string that takes an output's place, or `None` when ranking leaves it whole (or
/// the call's input or the next turn does not decode: then nothing says what to keep).
fn replacement(call: &Call<'_>, text: &str, next: &Turn<'_>, fetchable: bool) -> Option<Arc<str>> {
    let input = call.input.value().ok()?;
    let later_text: Vec<String> = next
        .texts
        .iter()
        .map(|t| serde_json::from_str(t.get()))
        .collect::<Result<_, _>>()
        .ok()?;
    let later: Vec<serde_json::Value> = next
        .calls
        .iter()
        .map(|c| c.input.value())
        .collect::<Result<_, _>>()
        .ok()?;
    let mut query = Query::of_call(&input);
    query.later_text = later_text.iter().map(String::as_str).collect();
    later.iter().for_each(|v| query.add_later_input(v));
    let excerpt = excerpt::excerpt(text, kind_of_call(&call.name, &input), &query)?;
    let fetch = fetchable.then_some(call.id.as_ref());
    let shown = format!("{}\n{}", header(&excerpt, fetch), excerpt.text);
    Some(Arc::from(quote(&shown)))
}

/// The excerpt's first line: that pith shortened the output, how much it shows, how the lines
/// were chosen and how to get the whole back: pith's `tool_output` by the call's id when the
/// client has it, and running the call again. A file is read again by the lines wanted:
/// Claude Code answers a repeated Read of an unchanged file with a note pointing back at the
/// earlier result ("File unchanged since last read", in its 2.1.328 binary), which here is the
/// excerpt.
fn header(e: &Excerpt, fetch: Option<&str>) -> String {
    let tool = match fetch {
        Some(id) => format!("pith's tool_output with callId {}; or ", quote(id)),
        None => String::new(),
    };
    format!(
        "{HEADER_START}{} of {} lines shown, chosen by the call's input and \
         what was done next; errors and quoted lines kept. The whole output: {tool}run the call \
         again (a file: read the lines you need).]",
        e.shown, e.total
    )
}

/// How an excerpt begins: an output that begins so is pith's own, never shortened again.
const HEADER_START: &str = "[pith shortened this tool output: ";

/// Whether a tool output's text is an excerpt this stage sent in its place (what the history
/// keeps beside the whole output, for the dashboard).
pub fn is_excerpt(text: &str) -> bool {
    text.starts_with(HEADER_START)
}

/// pith's `tool_output` as the clients name an MCP server's tools: the end of
/// `mcp__pith__tool_output` (Claude Code, Codex), and OpenCode's `pith_tool_output`.
const TOOL_OUTPUT_SUFFIX: &str = "pith__tool_output";
const TOOL_OUTPUT_OPENCODE: &str = "pith_tool_output";

/// Whether a call is pith's `tool_output`.
fn is_pith_tool_output(name: &str) -> bool {
    name.ends_with(TOOL_OUTPUT_SUFFIX) || name == TOOL_OUTPUT_OPENCODE
}

/// Whether the request's `tools` offer pith's `tool_output`. Only that member is searched (it
/// follows the history in the clients' bodies, and a conversation may mention the name).
fn offers_pith_tool_output(body: &str) -> bool {
    let bytes = body.as_bytes();
    let Some(tools) = skim::members_rev(bytes).find(|m| &bytes[m.key.clone()] == b"tools") else {
        return false;
    };
    let tools = &bytes[tools.value];
    [
        format!("{TOOL_OUTPUT_SUFFIX}\""),
        format!("\"{TOOL_OUTPUT_OPENCODE}\""),
    ]
    .iter()
    .any(|name| memchr::memmem::find(tools, name.as_bytes()).is_some())
}

#[cfg(test)]
mod tests;
