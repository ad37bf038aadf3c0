//! The splices: command lines and command turns out, the pin block in at the tail, cache
//! markers kept where a removed block had them.

use std::collections::BTreeSet;
use std::ops::Range;

use pith_wire::Wire;

use super::fold::{Folded, Turn, answered, final_turn, turns};
use super::rawstr::{RawLine, quote};
use super::render;
use super::transcript::{Block, Content, Role, Source, Transcript};
use crate::splice::array_removals;
use crate::stage::Splice;

/// The last message cannot take the pin block (an assistant prefill, a content shape pith does
/// not edit): the request is left as it is.
#[derive(Debug)]
pub(super) struct NowhereToLand;

/// What the stage sends upstream instead.
#[derive(Debug, Default)]
pub(super) struct Plan {
    pub splices: Vec<Splice>,
    /// Command lines that do not go upstream.
    pub lines_cut: usize,
    /// Command turns dropped together with pith's answer.
    pub turns_dropped: usize,
}

/// What is removed, before it becomes splices.
#[derive(Default)]
struct Removals {
    /// Whole messages.
    messages: BTreeSet<usize>,
    /// Blocks: (message, `None` for the system prompt; block index).
    blocks: BTreeSet<(Option<usize>, usize)>,
}

pub(super) fn plan(
    wire: Wire,
    body: &str,
    transcript: &Transcript<'_>,
    folded: &Folded,
) -> Result<Plan, NowhereToLand> {
    let mut plan = Plan::default();
    let mut removed = Removals::default();
    let last = final_turn(transcript);
    for turn in turns(transcript) {
        if Some(&turn) != last.as_ref() {
            drop_answered_turn(transcript, folded, &turn, &mut removed, &mut plan);
        }
    }
    // A final turn of nothing but commands goes up as sent (pith answers such turns before
    // the pipeline; one that gets here is e.g. a `count_tokens` call).
    let keep = last.filter(|t| folded.command_only(transcript, t));
    let cut = cut_lines(transcript, folded, keep.as_ref(), &mut removed, &mut plan);
    plan.lines_cut = folded
        .scanned
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            cut.contains(i)
                || s.message.is_some_and(|m| {
                    removed.messages.contains(&m)
                        || transcript.messages[m].parts[s.part]
                            .block
                            .is_some_and(|b| removed.blocks.contains(&(Some(m), b)))
                })
                || (s.message.is_none()
                    && transcript.system[s.part]
                        .block
                        .is_some_and(|b| removed.blocks.contains(&(None, b))))
        })
        .map(|(_, s)| s.commands.iter().filter(|c| **c).count())
        .sum();
    // Blocks given a moved cache marker, by where they start: one marker each at most.
    let mut given = BTreeSet::new();
    block_removals(transcript, &removed, &mut given, &mut plan.splices);
    message_removals(transcript, &removed, &mut given, &mut plan.splices);
    if !folded.pins.is_empty() {
        let tail = tail(wire, transcript, &render::block(&folded.pins))?;
        let splice = tail.into_splice(body, &mut plan.splices);
        plan.splices.push(splice);
    }
    Ok(plan)
}

/// A command-only turn followed by pith's answer: both go. The turn's typed blocks go; a
/// message left with nothing else goes whole; the harness's blocks and system messages stay.
fn drop_answered_turn(
    transcript: &Transcript<'_>,
    folded: &Folded,
    turn: &Turn,
    removed: &mut Removals,
    plan: &mut Plan,
) {
    if !answered(transcript, turn) || !folded.command_only(transcript, turn) {
        return;
    }
    for m in turn.start..turn.end {
        let message = &transcript.messages[m];
        if message.role != Role::User {
            continue;
        }
        let typed: Vec<Option<usize>> = message
            .parts
            .iter()
            .filter(|p| p.source == Source::Typed)
            .map(|p| p.block)
            .collect();
        let all_typed = typed.len() == message.parts.len();
        if all_typed {
            removed.messages.insert(m);
        } else {
            for block in typed.into_iter().flatten() {
                removed.blocks.insert((Some(m), block));
            }
        }
    }
    removed.messages.insert(turn.end);
    plan.turns_dropped += 1;
}

/// Cut each remaining command line out of its string; a block left blank goes whole (a blank
/// text block is refused by the API), unless it is its message's only content.
fn cut_lines(
    transcript: &Transcript<'_>,
    folded: &Folded,
    keep: Option<&Turn>,
    removed: &mut Removals,
    plan: &mut Plan,
) -> BTreeSet<usize> {
    let mut cut = BTreeSet::new();
    for (index, scanned) in folded.scanned.iter().enumerate() {
        let (part, blocks) = match scanned.message {
            None => (
                &transcript.system[scanned.part],
                Some(transcript.system_blocks.as_slice()),
            ),
            Some(m) => {
                if removed.messages.contains(&m) {
                    continue;
                }
                if folded.is_ignored(m) || keep.is_some_and(|t| (t.start..t.end).contains(&m)) {
                    continue;
                }
                let message = &transcript.messages[m];
                let blocks = match &message.content {
                    Content::Array { blocks, .. } => Some(blocks.as_slice()),
                    _ => None,
                };
                (&message.parts[scanned.part], blocks)
            }
        };
        if part
            .block
            .is_some_and(|b| removed.blocks.contains(&(scanned.message, b)))
        {
            continue;
        }
        if scanned.only_commands() {
            let kept_elsewhere = match (part.block, blocks) {
                (Some(b), Some(blocks)) => (0..blocks.len())
                    .any(|i| i != b && !removed.blocks.contains(&(scanned.message, i))),
                _ => false,
            };
            if let (Some(b), true) = (part.block, kept_elsewhere) {
                removed.blocks.insert((scanned.message, b));
            } else if let Some(m) = scanned.message
                && alone_in_its_turn(transcript, m, removed)
            {
                // A user message of nothing but commands, beside other user messages of the
                // same turn (queued input): it goes whole, the turn keeps its other words.
                removed.messages.insert(m);
            }
            // Else (a system string of nothing but commands): left as it is.
            continue;
        }
        for range in line_cuts(&scanned.lines, &scanned.commands) {
            plan.splices.push(Splice {
                range: part.span.start + range.start..part.span.start + range.end,
                replacement: String::new(),
            });
        }
        cut.insert(index);
    }
    cut
}

/// Whether user message `m` has another user message beside it in its turn, so it can go
/// whole without leaving the turn empty.
fn alone_in_its_turn(transcript: &Transcript<'_>, m: usize, removed: &Removals) -> bool {
    if transcript.messages[m].role != Role::User {
        return false;
    }
    let Some(turn) = turns(transcript)
        .into_iter()
        .find(|t| (t.start..t.end).contains(&m))
    else {
        return false;
    };
    (turn.start..turn.end).any(|o| {
        o != m && transcript.messages[o].role == Role::User && !removed.messages.contains(&o)
    })
}

/// Byte ranges (relative to the literal) that remove the marked lines with their terminators.
fn line_cuts(lines: &[RawLine], cut: &[bool]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !cut[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i + 1 < lines.len() && cut[i + 1] {
            i += 1;
        }
        let end = i;
        let has_terminator = lines[end].next > lines[end].raw.end;
        if has_terminator {
            out.push(lines[start].raw.start..lines[end].next);
        } else if start > 0 {
            // The last line: take the terminator before it instead.
            out.push(lines[start - 1].raw.end..lines[end].raw.end);
        } else {
            out.push(lines[start].raw.start..lines[end].raw.end);
        }
        i += 1;
    }
    out
}

/// Removed blocks, each array on its own; a removed block's `cache_control` moves to the
/// nearest kept block of the same array (before it, else after), so the cached prefix keeps
/// its end.
fn block_removals(
    transcript: &Transcript<'_>,
    removed: &Removals,
    given: &mut BTreeSet<usize>,
    splices: &mut Vec<Splice>,
) {
    let mut arrays: BTreeSet<Option<usize>> = BTreeSet::new();
    for (m, _) in &removed.blocks {
        if m.is_none_or(|m| !removed.messages.contains(&m)) {
            arrays.insert(*m);
        }
    }
    for m in arrays {
        let blocks: &[Block<'_>] = match m {
            None => &transcript.system_blocks,
            Some(m) => match &transcript.messages[m].content {
                Content::Array { blocks, .. } => blocks,
                _ => continue,
            },
        };
        let mask: Vec<bool> = (0..blocks.len())
            .map(|i| removed.blocks.contains(&(m, i)))
            .collect();
        let spans: Vec<Range<usize>> = blocks.iter().map(|b| b.span.clone()).collect();
        for range in array_removals(&spans, &mask) {
            splices.push(Splice {
                range,
                replacement: String::new(),
            });
        }
        for (i, block) in blocks.iter().enumerate() {
            let Some(marker) = block.cache_control.filter(|_| mask[i]) else {
                continue;
            };
            let neighbour = (0..i)
                .rev()
                .find(|&j| !mask[j])
                .or_else(|| (i + 1..blocks.len()).find(|&j| !mask[j]));
            if let Some(j) = neighbour
                && blocks[j].cache_control.is_none()
                && given.insert(blocks[j].span.start)
            {
                splices.push(give_marker(&blocks[j], marker));
            }
        }
    }
}

/// Removed messages; a `cache_control` they carried moves to the last block of the nearest
/// kept message before them.
fn message_removals(
    transcript: &Transcript<'_>,
    removed: &Removals,
    given: &mut BTreeSet<usize>,
    splices: &mut Vec<Splice>,
) {
    if removed.messages.is_empty() {
        return;
    }
    let messages = &transcript.messages;
    let mask: Vec<bool> = (0..messages.len())
        .map(|i| removed.messages.contains(&i))
        .collect();
    let spans: Vec<Range<usize>> = messages.iter().map(|m| m.span.clone()).collect();
    for range in array_removals(&spans, &mask) {
        splices.push(Splice {
            range,
            replacement: String::new(),
        });
    }
    for (i, message) in messages.iter().enumerate() {
        if !mask[i] {
            continue;
        }
        let Content::Array { blocks, .. } = &message.content else {
            continue;
        };
        let Some(marker) = blocks.iter().rev().find_map(|b| b.cache_control) else {
            continue;
        };
        let Some(j) = (0..i).rev().find(|&j| !mask[j]) else {
            continue;
        };
        if let Content::Array { blocks, .. } = &messages[j].content
            && let Some(b) = blocks.len().checked_sub(1)
            && blocks[b].cache_control.is_none()
            && !removed.blocks.contains(&(Some(j), b))
            && given.insert(blocks[b].span.start)
        {
            splices.push(give_marker(&blocks[b], marker));
        }
    }
}

/// Insert `"cache_control": marker` as the last member of `block` (an object).
fn give_marker(block: &Block<'_>, marker: &str) -> Splice {
    let at = block.span.end.saturating_sub(1);
    Splice {
        range: at..at,
        replacement: format!(",\"cache_control\":{marker}"),
    }
}

/// Where the pin block goes: `range` of the body becomes `before`, then the client's bytes
/// `keep` (a content string wrapped into a list to take the block), then `after`.
struct Tail {
    range: Range<usize>,
    before: String,
    keep: Option<Range<usize>>,
    after: String,
}

impl Tail {
    fn insert(at: usize, text: String) -> Tail {
        Tail {
            range: at..at,
            before: String::new(),
            keep: None,
            after: text,
        }
    }

    /// The splice, with the edits already planned inside the kept bytes folded into it.
    fn into_splice(self, body: &str, splices: &mut Vec<Splice>) -> Splice {
        let Some(keep) = self.keep else {
            return Splice {
                range: self.range,
                replacement: self.after,
            };
        };
        let (inner, outer): (Vec<Splice>, Vec<Splice>) = std::mem::take(splices)
            .into_iter()
            .partition(|s| s.range.start >= keep.start && s.range.end <= keep.end);
        *splices = outer;
        let shifted: Vec<Splice> = inner
            .into_iter()
            .map(|s| Splice {
                range: s.range.start - keep.start..s.range.end - keep.start,
                replacement: s.replacement,
            })
            .collect();
        let kept = &body[keep.clone()];
        let edited = crate::apply_splices(kept.as_bytes(), &shifted)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .unwrap_or_else(|| kept.to_owned());
        Splice {
            range: self.range,
            replacement: format!("{}{edited}{}", self.before, self.after),
        }
    }
}

/// The pin block at the tail: Anthropic, a text block appended to the last message (user, or
/// a client's own system message), after every breakpoint; Chat, a user message after the
/// last; Responses, a developer message after the last item.
fn tail(wire: Wire, transcript: &Transcript<'_>, text: &str) -> Result<Tail, NowhereToLand> {
    let text = quote(text);
    let Some(last) = transcript.messages.last() else {
        return Err(NowhereToLand);
    };
    match wire {
        Wire::AnthropicMessages => {
            if !matches!(last.role, Role::User | Role::System) {
                return Err(NowhereToLand);
            }
            let block = format!("{{\"type\":\"text\",\"text\":{text}}}");
            match &last.content {
                Content::Array { span, blocks } => {
                    let comma = if blocks.is_empty() { "" } else { "," };
                    Ok(Tail::insert(span.end - 1, format!("{comma}{block}")))
                }
                Content::String(span) => Ok(Tail {
                    range: span.clone(),
                    before: "[{\"type\":\"text\",\"text\":".to_owned(),
                    keep: Some(span.clone()),
                    after: format!("}},{block}]"),
                }),
                Content::Other => Err(NowhereToLand),
            }
        }
        Wire::ChatCompletions => {
            if last.role == Role::Assistant {
                return Err(NowhereToLand);
            }
            Ok(Tail::insert(
                last.span.end,
                format!(",{{\"role\":\"user\",\"content\":{text}}}"),
            ))
        }
        Wire::Responses => {
            let item = format!(
                "{{\"type\":\"message\",\"role\":\"developer\",\"content\":[{{\"type\":\"input_text\",\"text\":{text}}}]}}"
            );
            if transcript.input_string {
                return Ok(Tail {
                    range: transcript.history.clone(),
                    before: "[{\"type\":\"message\",\"role\":\"user\",\"content\":".to_owned(),
                    keep: Some(transcript.history.clone()),
                    after: format!("}},{item}]"),
                });
            }
            if last.role == Role::Assistant {
                return Err(NowhereToLand);
            }
            Ok(Tail::insert(last.span.end, format!(",{item}")))
        }
    }
}
