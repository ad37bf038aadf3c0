//! The histories read on earlier turns, so a turn reads only the messages it adds.
//!
//! A client sends its whole conversation on every turn, and the conversation grows at its end:
//! a turn of a 1.3 MB Claude Code session adds a few kilobytes. Reading every message again was
//! 15% of pith's event loop on such a body, and parsing the whole body (history, system, tools)
//! the largest part of the stage on a 56 KB one (BENCHMARKS.md, issue 46).
//!
//! So each read keeps marks: the history as of the end of some messages (the first, and the
//! last [`LAST_MARKS`]), each with an xxh3-128 hash of the body up to there. A later body that
//! hashes the same up to a mark is read from there on. The last few are kept, not only the
//! end, because clients rewrite their last messages on the next turn: Claude Code moves its
//! cache breakpoint off the previous last message, OpenCode off the previous last two (the
//! captures of both: a turn repeats all but the last one or two messages of the one before).
//!
//! A turn read from a mark is checked as strictly as one read whole: its bytes up to the mark
//! are those of a body serde validated whole (the same hash), each message after the mark is
//! parsed by serde, and everything after the history (system, tools, settings: the same on
//! every turn in the captures of all three clients) must hash the same as that body's, so the
//! tools' span found there is the one serde found. Anything else is read whole: a first turn,
//! a conversation compacted or edited, a changed tool list, a stranger's body.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use pith_wire::{Wire, skim};
use twox_hash::XxHash3_128;

use super::history::History;
use super::view::Top;
use crate::splice::span_of;

/// Conversations kept (the sessions a proxy serves at once, with room; the least recently read
/// goes). Each holds a few small histories (a task and tool names) and hashes, not the body.
const KEPT: usize = 64;

/// Marks kept at the ends of a history's last messages, beside the one after its first.
const LAST_MARKS: usize = 4;

/// What one body's history said, with where the stage's other inputs sit in the body.
#[derive(Debug, PartialEq)]
pub(super) struct Read {
    pub history: History,
    /// The span of the top-level `tools` value (`null` included), when the body has one.
    pub tools: Option<Range<usize>>,
    /// The span of the top-level `tool_choice` value, when the body has one.
    pub tool_choice: Option<Range<usize>>,
}

/// The body up to `at` (the end of one message) hashed to `hash`, and what the history said
/// up to there.
#[derive(Clone)]
struct Mark {
    at: usize,
    hash: u128,
    history: History,
}

/// One conversation's last read.
struct Kept {
    wire: Wire,
    /// In body order; the first is at the end of the first message (the key a turn is found
    /// by: it holds the conversation's opening, which differs between conversations).
    marks: Vec<Mark>,
    /// What follows the history array's `]`: its length and hash, and the spans of `tools`
    /// and `tool_choice` within it.
    tail_len: usize,
    tail_hash: u128,
    tools: Option<Range<usize>>,
    tool_choice: Option<Range<usize>>,
}

/// The conversations read recently, the most recent first.
#[derive(Default)]
pub(super) struct Conversations {
    kept: Mutex<VecDeque<Kept>>,
    /// Bodies read whole, for the tests that show a turn was not.
    whole_reads: AtomicU64,
}

impl Conversations {
    /// What `body`'s history says and where its tools are; `None` when the body is not the
    /// JSON the stage reads. Read from the longest mark an earlier turn of the same
    /// conversation left, else whole.
    pub(super) fn read(&self, wire: Wire, body: &str) -> Option<Read> {
        if let Some(read) = self.read_from_mark(wire, body) {
            return read;
        }
        self.read_whole(wire, body)
    }

    /// `None` when no mark fits (read whole); `Some(None)` when a message after the mark is not
    /// JSON (the body is not, either).
    fn read_from_mark(&self, wire: Wire, body: &str) -> Option<Option<Read>> {
        let bytes = body.as_bytes();
        let open = skim::member_value_start(bytes, wire.history_member().as_bytes())?;
        if bytes.get(open) != Some(&b'[') {
            return None;
        }
        // Only the first message is skimmed here: the rest is read from the mark on.
        let first = skim::first_element(bytes, open)?;
        let mut hasher = XxHash3_128::new();
        hasher.write(&bytes[..first.end]);
        let opening = hasher.finish_128();
        let kept = {
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            let at = kept.iter().position(|k| {
                k.wire == wire && k.marks[0].at == first.end && k.marks[0].hash == opening
            })?;
            kept.remove(at)?
        };
        // The longest mark this body repeats, and the hash state there.
        let mut from = 0;
        let mut state = hasher.clone();
        let mut hashed = first.end;
        for (i, mark) in kept.marks.iter().enumerate().skip(1) {
            let Some(more) = bytes.get(hashed..mark.at) else {
                break;
            };
            hasher.write(more);
            hashed = mark.at;
            if hasher.finish_128() != mark.hash {
                break;
            }
            from = i;
            state = hasher.clone();
        }
        let mark = kept.marks[from].clone();
        let (added, close) = skim::elements_after(bytes, mark.at, false)?;
        let tail = &bytes[close + 1..];
        if tail.len() != kept.tail_len || XxHash3_128::oneshot(tail) != kept.tail_hash {
            return None;
        }
        let mut marks = kept.marks;
        marks.truncate(from + 1);
        let mut walk = Walk {
            wire,
            bytes,
            hasher: state,
            hashed: mark.at,
            history: mark.history,
            marks,
        };
        if walk.read(&added).is_none() {
            return Some(None);
        }
        let shift = |span: &Range<usize>| span.start + close + 1..span.end + close + 1;
        let read = Read {
            history: walk.history.clone(),
            tools: kept.tools.as_ref().map(shift),
            tool_choice: kept.tool_choice.as_ref().map(shift),
        };
        self.keep(Kept {
            marks: walk.marks,
            ..kept
        });
        Some(Some(read))
    }

    /// The body parsed whole by serde (which validates all of it), its history read message
    /// by message, and marks kept for the next turn.
    fn read_whole(&self, wire: Wire, body: &str) -> Option<Read> {
        self.whole_reads.fetch_add(1, Ordering::Relaxed);
        let top: Top<'_> = serde_json::from_str(body).ok()?;
        let tools = top.tools.and_then(|t| span_of(body, t));
        let tool_choice = top.tool_choice.and_then(|t| span_of(body, t));
        let history = match wire {
            Wire::AnthropicMessages | Wire::ChatCompletions => top.messages,
            Wire::Responses => top.input,
        };
        let Some(history) = history.filter(|h| h.get() != "null") else {
            return Some(Read {
                history: History::default(),
                tools,
                tool_choice,
            });
        };
        if wire == Wire::Responses && history.get().starts_with('"') {
            return Some(Read {
                history: History::of_prompt(history.get()).ok()?,
                tools,
                tool_choice,
            });
        }
        let array = span_of(body, history)?;
        let bytes = body.as_bytes();
        if bytes[array.start] != b'[' {
            return None;
        }
        let (elements, close) = skim::elements_after(bytes, array.start + 1, true)?;
        let mut walk = Walk {
            wire,
            bytes,
            hasher: XxHash3_128::new(),
            hashed: 0,
            history: History::default(),
            marks: Vec::new(),
        };
        walk.read(&elements)?;
        let read = Read {
            history: walk.history.clone(),
            tools: tools.clone(),
            tool_choice: tool_choice.clone(),
        };
        if !walk.marks.is_empty() {
            let tail = close + 1..bytes.len();
            let relative = |span: Range<usize>| span.start - tail.start..span.end - tail.start;
            self.keep(Kept {
                wire,
                marks: walk.marks,
                tail_len: tail.len(),
                tail_hash: XxHash3_128::oneshot(&bytes[tail.clone()]),
                tools: tools.map(relative),
                tool_choice: tool_choice.map(relative),
            });
        }
        Some(read)
    }

    fn keep(&self, read: Kept) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.push_front(read);
        kept.truncate(KEPT);
    }
}

/// Reading a history array's elements in order, hashing the body as it goes and marking the
/// first element's end and the last [`LAST_MARKS`] ends.
struct Walk<'a> {
    wire: Wire,
    bytes: &'a [u8],
    hasher: XxHash3_128,
    /// How far into `bytes` the hasher has read.
    hashed: usize,
    history: History,
    marks: Vec<Mark>,
}

impl Walk<'_> {
    /// Reads `elements` (spans in body order, after `hashed`); `None` when one is not JSON.
    fn read(&mut self, elements: &[Range<usize>]) -> Option<()> {
        let marked_from = elements.len().saturating_sub(LAST_MARKS);
        for (i, element) in elements.iter().enumerate() {
            let text = std::str::from_utf8(&self.bytes[element.clone()]).ok()?;
            self.history.read(self.wire, text).ok()?;
            if self.marks.is_empty() || i >= marked_from {
                self.hasher.write(&self.bytes[self.hashed..element.end]);
                self.hashed = element.end;
                self.marks.push(Mark {
                    at: element.end,
                    hash: self.hasher.finish_128(),
                    history: self.history.clone(),
                });
            }
        }
        // The first mark stays; of the others, the last few.
        let others = self.marks.len().saturating_sub(1);
        if others > LAST_MARKS {
            self.marks.drain(1..1 + others - LAST_MARKS);
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(messages: &[&str], tools: &str) -> String {
        format!(
            r#"{{"model":"m","messages":[{}],"system":"s","tools":{tools},"stream":true}}"#,
            messages.join(",")
        )
    }

    fn user(text: &str) -> String {
        format!(r#"{{"role":"user","content":[{{"type":"text","text":"{text}"}}]}}"#)
    }

    fn call(name: &str) -> String {
        format!(
            r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"t","name":"{name}","input":{{}}}}]}}"#
        )
    }

    /// What a read gives when no earlier turn is kept: the reference every other read equals.
    fn fresh(wire: Wire, body: &str) -> Option<Read> {
        Conversations::default().read(wire, body)
    }

    #[test]
    fn a_turn_that_repeats_the_last_ones_reads_from_a_mark_and_agrees_with_a_whole_read() {
        let conversations = Conversations::default();
        let mut messages = vec![user("fix calc"), call("Read")];
        for turn in 0..12 {
            let texts: Vec<&str> = messages.iter().map(String::as_str).collect();
            let body = body(&texts, r#"[{"name":"Read"}]"#);
            let read = conversations.read(Wire::AnthropicMessages, &body).unwrap();
            assert_eq!(Some(&read), fresh(Wire::AnthropicMessages, &body).as_ref());
            assert_eq!(&body[read.tools.clone().unwrap()], r#"[{"name":"Read"}]"#);
            let kept = conversations.kept.lock().unwrap();
            assert_eq!(kept.len(), 1, "turn {turn}: one conversation, kept once");
            assert!(kept[0].marks.len() <= LAST_MARKS + 1);
            drop(kept);
            // The next turn rewrites the last message (a moved breakpoint) and adds two.
            let last = messages.len() - 1;
            messages[last] = call(&format!("Tool{turn}"));
            messages.push(user(&format!("result {turn}")));
            messages.push(call("Edit"));
        }
        assert_eq!(
            conversations.whole_reads.load(Ordering::Relaxed),
            1,
            "only the first turn was read whole"
        );
        let kept = conversations.kept.lock().unwrap();
        let last = kept[0].marks.last().unwrap();
        assert!(last.history.called.contains("Tool10"));
        assert_eq!(last.history.task.as_deref(), Some("fix calc"));
    }

    #[test]
    fn a_retried_or_extended_turn_is_read_from_a_mark_not_whole() {
        let conversations = Conversations::default();
        let first = body(&[&user("fix calc"), &call("Read")], "[]");
        conversations.read(Wire::AnthropicMessages, &first).unwrap();
        let retried = conversations.read(Wire::AnthropicMessages, &first).unwrap();
        let next = body(&[&user("fix calc"), &call("Read"), &call("Bash")], "[]");
        let read = conversations.read(Wire::AnthropicMessages, &next).unwrap();
        assert_eq!(retried.history.called.len(), 1);
        assert_eq!(read.history.called.len(), 2);
        assert_eq!(conversations.whole_reads.load(Ordering::Relaxed), 1);
        let kept = conversations.kept.lock().unwrap();
        let ends: Vec<usize> = kept[0].marks.iter().map(|m| m.at).collect();
        let element_ends: Vec<usize> = next.match_indices("}]}").map(|(at, _)| at + 3).collect();
        assert_eq!(
            ends, element_ends,
            "a mark at the end of every message, the first included"
        );
    }

    #[test]
    fn what_differs_before_the_marks_or_after_the_history_is_read_whole() {
        let conversations = Conversations::default();
        let start = body(&[&user("fix calc"), &call("Read")], r#"[{"name":"Read"}]"#);
        conversations.read(Wire::AnthropicMessages, &start).unwrap();
        // Another tool list: read whole, and kept in the place of the turn before.
        let tools = body(
            &[&user("fix calc"), &call("Read"), &call("Bash")],
            r#"[{"name":"Read"},{"name":"Bash"}]"#,
        );
        let read = conversations.read(Wire::AnthropicMessages, &tools).unwrap();
        assert_eq!(Some(read), fresh(Wire::AnthropicMessages, &tools));
        // A compacted history (the first message changed): read whole, a second conversation.
        let compacted = body(&[&user("summary"), &call("Grep")], r#"[{"name":"Read"}]"#);
        let read = conversations
            .read(Wire::AnthropicMessages, &compacted)
            .unwrap();
        assert_eq!(read.history.task.as_deref(), Some("summary"));
        assert_eq!(Some(read), fresh(Wire::AnthropicMessages, &compacted));
        assert_eq!(conversations.kept.lock().unwrap().len(), 2);
        assert_eq!(conversations.whole_reads.load(Ordering::Relaxed), 3);
        // A message after a mark that is not JSON: not parseable, as a whole read says.
        let broken = body(
            &[
                &user("fix calc"),
                &call("Read"),
                r#"{"role":"user","content":[}"#,
            ],
            r#"[{"name":"Read"}]"#,
        );
        assert_eq!(conversations.read(Wire::AnthropicMessages, &broken), None);
        assert_eq!(fresh(Wire::AnthropicMessages, &broken), None);
        // The same opening on the other wire is another conversation.
        assert!(conversations.read(Wire::Responses, &start).is_some());
    }

    #[test]
    fn a_responses_input_is_read_by_items_and_a_string_input_is_its_prompt() {
        let conversations = Conversations::default();
        let items = |n: usize| {
            let mut items = vec![
                r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"fix calc"}]}"#.to_owned(),
            ];
            items.extend((0..n).map(|i| {
                format!(r#"{{"type":"function_call","call_id":"c{i}","name":"exec{i}","arguments":"{{}}"}}"#)
            }));
            format!(
                r#"{{"model":"m","input":[{}],"tools":[],"tool_choice":"auto"}}"#,
                items.join(",")
            )
        };
        for n in 1..8 {
            let body = items(n);
            let read = conversations.read(Wire::Responses, &body).unwrap();
            assert_eq!(Some(&read), fresh(Wire::Responses, &body).as_ref());
            assert_eq!(read.history.called.len(), n);
            assert_eq!(&body[read.tool_choice.unwrap()], r#""auto""#);
        }
        let prompt = r#"{"model":"m","input":"fix calc","tools":[]}"#;
        let read = conversations.read(Wire::Responses, prompt).unwrap();
        assert_eq!(read.history.task.as_deref(), Some("fix calc"));
    }
}
