//! Taking the blocks pith's tool search caused out of an Anthropic answer: a streamed one event
//! by event ([`StreamHider`]: a hidden block's events are dropped, later blocks' `index`
//! renumbered, nothing else held back), a JSON one whole ([`hide_in_message`]). What was taken
//! out is returned as runs of raw blocks, each keyed by the `tool_use` that followed it.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::is_search_block;
use crate::splice::span_of;

/// The ledger's name for the proxy's hiding half (its report: the searches it hid).
pub const NAME: &str = "search_hide";

/// Its fact: tool searches hid from an answer, each one the model searching for a tool pith
/// deferred.
pub const SEARCHES: &str = "searches";

/// What the client receives in place of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The event as it came.
    Keep,
    /// Nothing.
    Drop,
    /// These bytes (the event with its block index renumbered).
    Replace(Vec<u8>),
}

/// Blocks taken out, to be put back where they were, in the message of the `tool_use` that
/// followed them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hidden {
    /// The `tool_use` block's id.
    pub tool_use_id: String,
    /// What to keep ([`super::Kept`]'s encoding): each block, raw, with the number of visible
    /// blocks before it in the answer, and the `tool_use`'s own visible index.
    pub kept: String,
    /// How many searches (`server_tool_use` blocks) they hold.
    pub searches: usize,
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    index: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content_block: Option<&'a RawValue>,
    #[serde(borrow, default)]
    delta: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct BlockHead<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    partial_json: Option<Cow<'a, str>>,
}

/// A hidden block being streamed: its start event's block, and its input so far.
struct Open {
    block: String,
    /// The span of the start block's `input` (to put the streamed input in its place).
    input: Option<Range<usize>>,
    streamed_input: String,
    search: bool,
}

/// One streamed answer's hider.
#[derive(Default)]
pub struct StreamHider {
    /// Upstream indices of hidden blocks.
    hidden: BTreeSet<u64>,
    open: BTreeMap<u64, Open>,
    /// Finished hidden blocks waiting for the next `tool_use`, each with the number of
    /// visible blocks before it.
    run: Vec<(usize, String)>,
    /// Visible blocks started so far.
    visible: usize,
    run_searches: usize,
    /// Runs keyed by their `tool_use`, not yet taken.
    done: Vec<Hidden>,
    /// Searches hidden in this answer (with or without a `tool_use` after them).
    searches: usize,
}

impl StreamHider {
    /// A hider for one answer.
    pub fn new() -> StreamHider {
        StreamHider::default()
    }

    /// Whether it hid (or is hiding) a block: the events after it are renumbered, so none may
    /// pass unread.
    pub fn renumbers(&self) -> bool {
        !self.hidden.is_empty() || !self.open.is_empty()
    }

    /// What the client receives in place of `raw`, one whole SSE event. Anything it cannot
    /// read passes as it came.
    pub fn event(&mut self, raw: &[u8]) -> Action {
        let Some((offset, data)) = data_of(raw) else {
            return Action::Keep;
        };
        let Ok(event) = serde_json::from_str::<Event<'_>>(data) else {
            return Action::Keep;
        };
        let Some(index_raw) = event.index else {
            return Action::Keep;
        };
        let Ok(index) = index_raw.get().parse::<u64>() else {
            return Action::Keep;
        };
        match event.kind.as_ref() {
            "content_block_start" => {
                let Some(block) = event.content_block else {
                    return self.renumber(raw, offset, data, index_raw, index);
                };
                let head: BlockHead<'_> = match serde_json::from_str(block.get()) {
                    Ok(head) => head,
                    Err(_) => return self.renumber(raw, offset, data, index_raw, index),
                };
                let kind = head.kind.as_deref().unwrap_or("");
                if is_search_block(kind, head.name.as_deref()) {
                    let input = head.input.and_then(|i| span_of(block.get(), i));
                    self.hidden.insert(index);
                    self.open.insert(
                        index,
                        Open {
                            block: block.get().to_owned(),
                            input,
                            streamed_input: String::new(),
                            search: kind == "server_tool_use",
                        },
                    );
                    return Action::Drop;
                }
                if kind == "tool_use"
                    && let Some(id) = head.id.as_deref()
                {
                    self.close_run(id);
                }
                self.visible += 1;
                self.renumber(raw, offset, data, index_raw, index)
            }
            "content_block_delta" if self.hidden.contains(&index) => {
                if let (Some(open), Some(delta)) = (self.open.get_mut(&index), event.delta)
                    && let Ok(delta) = serde_json::from_str::<Delta<'_>>(delta.get())
                    && delta.kind.as_deref() == Some("input_json_delta")
                    && let Some(part) = delta.partial_json
                {
                    open.streamed_input.push_str(&part);
                }
                Action::Drop
            }
            "content_block_stop" if self.hidden.contains(&index) => {
                if let Some(open) = self.open.remove(&index) {
                    self.searches += usize::from(open.search);
                    self.run_searches += usize::from(open.search);
                    let at = self.visible;
                    self.run.push((at, finished(open)));
                }
                Action::Drop
            }
            _ => self.renumber(raw, offset, data, index_raw, index),
        }
    }

    /// Runs of hidden blocks that a `tool_use` followed, since the last call.
    pub fn take_hidden(&mut self) -> Vec<Hidden> {
        std::mem::take(&mut self.done)
    }

    /// Searches hidden in this answer so far.
    pub fn searches(&self) -> usize {
        self.searches
    }

    fn close_run(&mut self, tool_use_id: &str) {
        if self.run.is_empty() {
            return;
        }
        let run = std::mem::take(&mut self.run);
        self.done.push(Hidden {
            tool_use_id: tool_use_id.to_owned(),
            kept: super::Kept::encode(self.visible, &run),
            searches: self.run_searches,
        });
        self.run_searches = 0;
    }

    /// The event with `index` lowered by the hidden blocks before it.
    fn renumber(
        &self,
        raw: &[u8],
        offset: usize,
        data: &str,
        index_raw: &RawValue,
        index: u64,
    ) -> Action {
        let before = self.hidden.range(..index).count() as u64;
        if before == 0 {
            return Action::Keep;
        }
        let Some(span) = span_of(data, index_raw) else {
            return Action::Keep;
        };
        let (start, end) = (offset + span.start, offset + span.end);
        let mut out = Vec::with_capacity(raw.len());
        out.extend_from_slice(&raw[..start]);
        out.extend_from_slice((index - before).to_string().as_bytes());
        out.extend_from_slice(&raw[end..]);
        Action::Replace(out)
    }
}

/// A hidden block as it belongs in the history: its start block, with the streamed input in
/// place of the start's empty one.
fn finished(open: Open) -> String {
    let streamed = open.streamed_input.trim();
    match open.input {
        Some(span)
            if !streamed.is_empty() && serde_json::from_str::<&RawValue>(streamed).is_ok() =>
        {
            format!(
                "{}{streamed}{}",
                &open.block[..span.start],
                &open.block[span.end..]
            )
        }
        _ => open.block,
    }
}

/// The JSON text of an event's one `data:` line, with its offset in the event.
fn data_of(raw: &[u8]) -> Option<(usize, &str)> {
    let text = std::str::from_utf8(raw).ok()?;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("data:") {
            let lead = 5 + (rest.len() - rest.trim_start_matches(' ').len());
            let data = rest.trim_start_matches(' ').trim_end_matches(['\n', '\r']);
            return Some((offset + lead, data));
        }
        offset += line.len();
    }
    None
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    content: Vec<&'a RawValue>,
}

/// A JSON answer with the search blocks taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HiddenMessage {
    /// The body the client receives.
    pub body: Vec<u8>,
    /// The runs that a `tool_use` followed.
    pub hidden: Vec<Hidden>,
    /// Searches taken out.
    pub searches: usize,
}

/// `body` (an Anthropic message) without its search blocks; `None` when it has none or is not
/// a message pith can read.
pub fn hide_in_message(body: &[u8]) -> Option<HiddenMessage> {
    let text = std::str::from_utf8(body).ok()?;
    let message: Message<'_> = serde_json::from_str(text).ok()?;
    let mut mask = Vec::with_capacity(message.content.len());
    let mut spans = Vec::with_capacity(message.content.len());
    let mut hider = StreamHider::new();
    for block in &message.content {
        spans.push(span_of(text, block)?);
        let head: Option<BlockHead<'_>> = serde_json::from_str(block.get()).ok();
        let kind = head.as_ref().and_then(|h| h.kind.as_deref()).unwrap_or("");
        let name = head.as_ref().and_then(|h| h.name.as_deref());
        let hide = is_search_block(kind, name);
        mask.push(hide);
        if hide {
            hider.searches += usize::from(kind == "server_tool_use");
            hider.run_searches += usize::from(kind == "server_tool_use");
            let at = hider.visible;
            hider.run.push((at, block.get().to_owned()));
        } else {
            if kind == "tool_use"
                && let Some(id) = head.as_ref().and_then(|h| h.id.as_deref())
            {
                hider.close_run(id);
            }
            hider.visible += 1;
        }
    }
    if !mask.iter().any(|m| *m) {
        return None;
    }
    let splices: Vec<crate::Splice> = crate::splice::array_removals(&spans, &mask)
        .into_iter()
        .map(|range| crate::Splice {
            range,
            replacement: String::new(),
        })
        .collect();
    let body = crate::apply_splices(body, &splices).ok()?;
    Some(HiddenMessage {
        body,
        searches: hider.searches,
        hidden: hider.take_hidden(),
    })
}
