//! A request's prompt as a compact fingerprint, for finding prompt-cache busts without keeping
//! bodies: one 64-bit hash per prompt segment in the order the provider caches them (the model;
//! then Anthropic: each tool, each system block, each message content block; Chat: each tool,
//! each message; Responses: the instructions, each tool, each input item), and where the cache
//! breakpoints were. Each segment is hashed as parsed JSON with its `cache_control` member
//! left out: the provider renders the prompt from the parsed request, so whitespace and key
//! order do not change it, and breakpoints move from turn to turn without changing the prompt.
//!
//! The hash is taken as the segment is parsed ([`Structure`]: each value reduced to 64 bits,
//! an object's members in key order), never writing a `serde_json::Value` back to text: the
//! ledger's writers compute two fingerprints of every edited request, and that round trip cost
//! 2.5 full parses of a 54 KB body (BENCHMARKS.md). When the writer has parsed the conversation
//! into a `Value` for the history anyway, [`Fingerprint::of_parsed`] takes the same hash over
//! that value instead of parsing it again; and when a stage changed only the tools of what
//! was sent (deferral), [`Fingerprint::with_tools_of`] takes the sent body's from the
//! client's, hashing the sent tools alone. The stored form says which
//! hashing it holds; a fingerprint of an older one reads as none, so no bust is counted
//! between hashes of two kinds.

use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::Wire;

/// What a bust check needs of one request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fingerprint {
    /// One hash per segment, in prompt order.
    pub segments: Vec<u64>,
    /// Indices of the segments that carry a cache breakpoint, ascending (Anthropic only).
    pub breakpoints: Vec<u32>,
    /// Whether the provider caches automatically up to the end of the prompt (OpenAI) rather
    /// than up to explicit breakpoints (Anthropic).
    pub automatic: bool,
    /// Where the tools, the system prompt and the conversation start among the segments, so a
    /// segment can be named in words ([`Fingerprint::segment`]); `None` in a fingerprint stored
    /// before it was kept.
    pub layout: Option<Layout>,
}

/// The first segment of each part of a prompt after the model (and Responses' instructions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Layout {
    /// The first tool's segment.
    pub tools_at: u32,
    /// The first system block's segment (Anthropic; elsewhere the same as `conversation_at`).
    pub system_at: u32,
    /// The first segment of the conversation (Anthropic's message content blocks, Chat's
    /// messages, Responses' input items).
    pub conversation_at: u32,
}

/// The part of a prompt a segment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Segment 0.
    Model,
    /// Responses' `instructions`, segment 1.
    Instructions,
    /// One tool definition.
    Tool,
    /// One block of Anthropic's `system`.
    System,
    /// One segment of the conversation.
    Conversation,
}

impl Part {
    /// Its name in the ledger's JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Model => "model",
            Part::Instructions => "instructions",
            Part::Tool => "tool",
            Part::System => "system",
            Part::Conversation => "conversation",
        }
    }
}

/// One segment named: its part, and its place in that part (from 1) of how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// The part.
    pub part: Part,
    /// Its place in the part, from 1.
    pub index: usize,
    /// The part's segments.
    pub of: usize,
}

impl Segment {
    /// The segment in words, as `wire` calls the part ("tool 3 of 40", "conversation block 7 of
    /// 12" on Anthropic's Messages, where each content block is a segment).
    pub fn words(&self, wire: Wire) -> String {
        let item = match (self.part, wire) {
            (Part::Model, _) => return "the model".to_owned(),
            (Part::Instructions, _) => return "the instructions".to_owned(),
            (Part::Tool, _) => "tool definition",
            (Part::System, _) => "system prompt block",
            (Part::Conversation, Wire::AnthropicMessages) => "conversation block",
            (Part::Conversation, Wire::ChatCompletions) => "message",
            (Part::Conversation, Wire::Responses) => "input item",
        };
        format!("{item} {} of {}", self.index, self.of)
    }
}

/// A prompt-cache bust: the next request's prompt differs from the previous one's at
/// `at`, at or before the segment the previous one was cached up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bust {
    /// The first segment that differs.
    pub at: usize,
    /// The last segment the previous request's cache covered.
    pub cached_through: usize,
}

/// Who changed the prompt where a bust happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The client's own prompts bust there too.
    Client,
    /// The client's prompts kept their prefix; what pith sent did not.
    Pith,
}

/// The bust between two consecutive requests of a session, if any, and who caused it. Each
/// request comes as (what was sent, what the client sent when pith changed it).
pub fn attribute(
    previous: (&Fingerprint, Option<&Fingerprint>),
    next: (&Fingerprint, Option<&Fingerprint>),
) -> Option<(Bust, Cause)> {
    let bust = previous.0.bust(next.0)?;
    let client_before = previous.1.unwrap_or(previous.0);
    let client_after = next.1.unwrap_or(next.0);
    let cause = if client_before.bust(client_after).is_some() {
        Cause::Client
    } else {
        Cause::Pith
    };
    Some((bust, cause))
}

#[derive(Deserialize)]
struct Top<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tools: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
    #[serde(borrow, default)]
    instructions: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

/// What comes before the conversation in a prompt, as raw JSON text (`None`: absent or
/// `null`): the same for both ways of reading a body.
struct Head<'a> {
    model: Option<&'a str>,
    tools: Vec<&'a RawValue>,
    system: Option<&'a str>,
    instructions: Option<&'a str>,
}

impl Fingerprint {
    /// The fingerprint of `body` on `wire`; `None` when it is not JSON of that shape.
    pub fn of(wire: Wire, body: &[u8]) -> Option<Fingerprint> {
        let top: Top<'_> = serde_json::from_slice(body).ok()?;
        let mut fp = Fingerprint::begin(
            wire,
            &Head {
                model: top.model.map(RawValue::get),
                tools: top.tools.unwrap_or_default(),
                system: top.system.map(RawValue::get),
                instructions: top.instructions.map(RawValue::get),
            },
        )?;
        match wire {
            Wire::AnthropicMessages => {
                for message in top.messages.unwrap_or_default() {
                    #[derive(Deserialize)]
                    struct Message<'a> {
                        #[serde(default)]
                        role: Option<String>,
                        #[serde(borrow, default)]
                        content: Option<&'a RawValue>,
                    }
                    let m: Message<'_> = serde_json::from_str(message.get()).ok()?;
                    let role = m.role.unwrap_or_default();
                    fp.push_content(m.content.map_or("null", |c| c.get()), &role)?;
                }
            }
            Wire::ChatCompletions => {
                for message in top.messages.unwrap_or_default() {
                    fp.push(message.get())?;
                }
            }
            Wire::Responses => match top.input {
                Some(input) if input.get().starts_with('[') => {
                    let items: Vec<&RawValue> = serde_json::from_str(input.get()).ok()?;
                    for item in items {
                        fp.push(item.get())?;
                    }
                }
                Some(input) => fp.push(input.get())?,
                None => {}
            },
        }
        Some(fp)
    }

    /// The fingerprint of `body` on `wire` when its conversation (Anthropic's and Chat's
    /// `messages`, Responses' `input`) is already parsed: `conversation` is that member's value
    /// (`None` when the body has none). The members before it are hashed from their text, the
    /// conversation from the value, with the same hash [`Fingerprint::of`] takes as it parses,
    /// so the two agree and a writer that parsed the conversation for the history reads the
    /// body once. `None` when the body is not JSON of the wire's shape. They can differ only on
    /// bodies no client sends: a key repeated inside a message or a block (the value keeps the
    /// last, the text's hash both), a message written as an array.
    pub fn of_parsed(wire: Wire, body: &[u8], conversation: Option<&Value>) -> Option<Fingerprint> {
        let members = crate::skim::object_members(body)?;
        // A member the whole parse reads twice is an error there: here too, so both ways agree.
        const READ: [&[u8]; 6] = [
            b"model",
            b"tools",
            b"system",
            b"instructions",
            b"messages",
            b"input",
        ];
        for key in READ {
            if members
                .iter()
                .filter(|m| &body[m.key.clone()] == key)
                .count()
                > 1
            {
                return None;
            }
        }
        // A member that is `null` counts as absent, as `Option` reads it in [`Top`].
        let present = |key: &[u8]| {
            members
                .iter()
                .find(|m| &body[m.key.clone()] == key)
                .and_then(|m| std::str::from_utf8(&body[m.value.clone()]).ok())
                .filter(|raw| *raw != "null")
        };
        let tools = match present(b"tools") {
            Some(raw) => serde_json::from_str(raw).ok()?,
            None => Vec::new(),
        };
        let mut fp = Fingerprint::begin(
            wire,
            &Head {
                model: present(b"model"),
                tools,
                system: present(b"system"),
                instructions: present(b"instructions"),
            },
        )?;
        let conversation = conversation.filter(|v| !v.is_null());
        let items = || conversation.map_or(Some(&[][..]), |v| v.as_array().map(Vec::as_slice));
        match wire {
            Wire::AnthropicMessages => {
                for message in items()? {
                    let message = message.as_object()?;
                    let role = match message.get("role") {
                        None | Some(Value::Null) => "",
                        Some(Value::String(role)) => role,
                        Some(_) => return None,
                    };
                    fp.push_content_value(message.get("content").unwrap_or(&Value::Null), role)?;
                }
            }
            Wire::ChatCompletions => {
                for message in items()? {
                    fp.push_value(message)?;
                }
            }
            Wire::Responses => match conversation {
                Some(Value::Array(items)) => {
                    for item in items {
                        fp.push_value(item)?;
                    }
                }
                Some(input) => fp.push_value(input)?,
                None => {}
            },
        }
        Some(fp)
    }

    /// The fingerprint of `sent` from this one, the fingerprint of `client`, when `sent` is
    /// `client` with bytes changed only inside its `tools` array (deferral's edit, made to every
    /// request of a session it defers in): the sent tools hashed, every other segment taken as
    /// it is, so the conversation is not read a second time. `None` when the change reaches
    /// outside the tools array or the sent array does not read: the caller reads `sent` whole
    /// ([`Fingerprint::of`]), which this always equals when it answers.
    pub fn with_tools_of(&self, client: &[u8], sent: &[u8]) -> Option<Fingerprint> {
        let layout = self.layout?;
        let prefix = crate::skim::common_prefix(client, sent);
        let suffix = crate::skim::common_suffix(&client[prefix..], &sent[prefix..]);
        let tools = crate::skim::member_forward(client, b"tools")?.value;
        // Strictly inside the array's brackets: the sent array starts where the client's did.
        if prefix <= tools.start || client.len() - suffix >= tools.end {
            return None;
        }
        let sent_end = (tools.end + sent.len()).checked_sub(client.len())?;
        let sent_tools: Vec<&RawValue> =
            serde_json::from_slice(sent.get(tools.start..sent_end)?).ok()?;
        let [tools_at, system_at, conversation_at] =
            [layout.tools_at, layout.system_at, layout.conversation_at].map(|b| b as usize);
        let (head, after) = (
            self.segments.get(..tools_at)?,
            self.segments.get(system_at..)?,
        );
        let mut fp = Fingerprint {
            segments: Vec::with_capacity(head.len() + sent_tools.len() + after.len()),
            automatic: self.automatic,
            ..Fingerprint::default()
        };
        fp.segments.extend_from_slice(head);
        let before_tools = self
            .breakpoints
            .iter()
            .filter(|b| (**b as usize) < tools_at);
        fp.breakpoints.extend(before_tools);
        for tool in &sent_tools {
            fp.push(tool.get())?;
        }
        let new_system_at = fp.segments.len();
        for b in self
            .breakpoints
            .iter()
            .filter(|b| (**b as usize) >= system_at)
        {
            let moved = *b as usize - system_at + new_system_at;
            fp.breakpoints.push(u32::try_from(moved).ok()?);
        }
        fp.segments.extend_from_slice(after);
        let here = |at: usize| u32::try_from(at).ok();
        fp.layout = Some(Layout {
            tools_at: layout.tools_at,
            system_at: here(new_system_at)?,
            conversation_at: here(conversation_at - system_at + new_system_at)?,
        });
        Some(fp)
    }

    /// A fingerprint of `wire`'s prompt up to its conversation: the model, then the segments
    /// before the conversation in the order the provider caches them (Anthropic: each tool,
    /// each system block; Chat: each tool; Responses: the instructions, each tool).
    fn begin(wire: Wire, head: &Head<'_>) -> Option<Fingerprint> {
        let mut fp = Fingerprint {
            automatic: wire != Wire::AnthropicMessages,
            ..Fingerprint::default()
        };
        fp.push(head.model.unwrap_or("null"))?;
        if wire == Wire::Responses {
            fp.push(head.instructions.unwrap_or("null"))?;
        }
        let here = |fp: &Fingerprint| u32::try_from(fp.segments.len()).ok();
        let tools_at = here(&fp)?;
        for tool in &head.tools {
            fp.push(tool.get())?;
        }
        let system_at = here(&fp)?;
        if let (Wire::AnthropicMessages, Some(system)) = (wire, head.system) {
            fp.push_content(system, "system")?;
        }
        fp.layout = Some(Layout {
            tools_at,
            system_at,
            conversation_at: here(&fp)?,
        });
        Some(fp)
    }

    /// One segment already parsed: its hash, and a breakpoint when it carries `cache_control`.
    fn push_value(&mut self, value: &Value) -> Option<()> {
        let (hash, marked) = value_hash(value, true);
        self.record(hash, marked)
    }

    /// [`Fingerprint::push_content`] over a parsed content value.
    fn push_content_value(&mut self, content: &Value, role: &str) -> Option<()> {
        let mut tagged = |block: &Value| -> Option<()> {
            let (hash, marked) = value_hash(block, true);
            let mut h = Fnv::new(b'r');
            h.write_str(role);
            h.write_u64(hash);
            self.record(h.finish(), marked)
        };
        match content {
            Value::Array(blocks) => blocks.iter().try_for_each(tagged),
            other => tagged(other),
        }
    }

    /// One segment: its hash, and a breakpoint when it carries `cache_control`.
    fn push(&mut self, raw: &str) -> Option<()> {
        let (hash, marked) = segment(raw)?;
        self.record(hash, marked)
    }

    fn record(&mut self, hash: u64, marked: bool) -> Option<()> {
        if marked {
            self.breakpoints
                .push(u32::try_from(self.segments.len()).ok()?);
        }
        self.segments.push(hash);
        Some(())
    }

    /// A content value (string or block list) as one segment per block, each tagged with the
    /// message's role so a block moving between roles counts as a change.
    fn push_content(&mut self, raw: &str, role: &str) -> Option<()> {
        let tagged = |block: &str| -> Option<(u64, bool)> {
            let (hash, marked) = segment(block)?;
            let mut h = Fnv::new(b'r');
            h.write_str(role);
            h.write_u64(hash);
            Some((h.finish(), marked))
        };
        if raw.starts_with('[') {
            let blocks: Vec<&RawValue> = serde_json::from_str(raw).ok()?;
            for block in blocks {
                let (hash, marked) = tagged(block.get())?;
                self.record(hash, marked)?;
            }
            Some(())
        } else {
            let (hash, marked) = tagged(raw)?;
            self.record(hash, marked)
        }
    }

    /// The last segment a provider cache holds after this request: the last breakpoint
    /// (Anthropic), the whole prompt (OpenAI); `None` when nothing is cached.
    pub fn cached_through(&self) -> Option<usize> {
        if self.automatic {
            self.segments.len().checked_sub(1)
        } else {
            self.breakpoints.last().map(|b| *b as usize)
        }
    }

    /// The first segment where `next` differs from `self` (`self.segments.len()` when `self`
    /// is a prefix of `next`).
    pub fn first_difference(&self, next: &Fingerprint) -> usize {
        self.segments
            .iter()
            .zip(&next.segments)
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| self.segments.len().min(next.segments.len()))
    }

    /// Segment `at` named by its part (`None` when this fingerprint keeps no layout, or has no
    /// such segment).
    pub fn segment(&self, at: usize) -> Option<Segment> {
        let layout = self.layout?;
        if at >= self.segments.len() {
            return None;
        }
        let [tools, system, conversation] =
            [layout.tools_at, layout.system_at, layout.conversation_at].map(|b| b as usize);
        let (part, first, end) = if at < tools {
            (
                if at == 0 {
                    Part::Model
                } else {
                    Part::Instructions
                },
                at,
                at + 1,
            )
        } else if at < system {
            (Part::Tool, tools, system)
        } else if at < conversation {
            (Part::System, system, conversation)
        } else {
            (Part::Conversation, conversation, self.segments.len())
        };
        Some(Segment {
            part,
            index: at - first + 1,
            of: end - first,
        })
    }

    /// Where `next`, sent after `self`, first differs from it (segment `at`), in words as
    /// `wire` calls the part: the part both prompts have there ("tool definition 3 of 40"), or,
    /// when a part grew or shrank so that the two name segment `at` differently (a tool
    /// dropped: the later prompt has a system block where the earlier had its last tool), the
    /// part whose count changed ("tool definitions: 40, then 39"). `None` when either prompt
    /// keeps no layout.
    pub fn change_words(&self, next: &Fingerprint, at: usize, wire: Wire) -> Option<String> {
        let (before, after) = (self.layout?, next.layout?);
        match (self.segment(at), next.segment(at)) {
            (Some(a), Some(b)) if a.part == b.part && a.of == b.of => return Some(b.words(wire)),
            _ => {}
        }
        let counts = |l: Layout, len: usize| {
            [
                (Part::Tool, l.system_at.saturating_sub(l.tools_at)),
                (Part::System, l.conversation_at.saturating_sub(l.system_at)),
                (
                    Part::Conversation,
                    u32::try_from(len)
                        .unwrap_or(u32::MAX)
                        .saturating_sub(l.conversation_at),
                ),
            ]
        };
        let changed = counts(before, self.segments.len())
            .into_iter()
            .zip(counts(after, next.segments.len()))
            .find(|((_, a), (_, b))| a != b);
        match changed {
            Some(((part, a), (_, b))) if part != Part::Conversation => {
                let plural = match part {
                    Part::Tool => "tool definitions",
                    _ => "system prompt blocks",
                };
                Some(format!("{plural}: {a}, then {b}"))
            }
            // The conversation alone changed length: the segment is the later prompt's, or the
            // earlier's when the later ends before it.
            _ => next
                .segment(at)
                .or_else(|| self.segment(at))
                .map(|s| s.words(wire)),
        }
    }

    /// Whether `next`, sent after `self` in one session, misses the cache `self` left.
    pub fn bust(&self, next: &Fingerprint) -> Option<Bust> {
        let cached_through = self.cached_through()?;
        let at = self.first_difference(next);
        (at <= cached_through).then_some(Bust { at, cached_through })
    }

    /// The fingerprint as bytes, to store: segments (8 bytes each, little endian), then the
    /// breakpoints (4 bytes each), then the layout when there is one (3 times 4 bytes), then
    /// one flag byte; preceded by the two counts.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(21 + self.segments.len() * 8 + self.breakpoints.len() * 4);
        out.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.breakpoints.len() as u32).to_le_bytes());
        for s in &self.segments {
            out.extend_from_slice(&s.to_le_bytes());
        }
        for b in &self.breakpoints {
            out.extend_from_slice(&b.to_le_bytes());
        }
        let mut flags = u8::from(self.automatic) | FORMAT_STRUCTURE | FORMAT_WORDS;
        if let Some(l) = self.layout {
            for at in [l.tools_at, l.system_at, l.conversation_at] {
                out.extend_from_slice(&at.to_le_bytes());
            }
            flags |= FORMAT_LAYOUT;
        }
        out.push(flags);
        out
    }

    /// The fingerprint [`Fingerprint::to_bytes`] wrote; `None` for anything else.
    pub fn from_bytes(bytes: &[u8]) -> Option<Fingerprint> {
        let count = |at: usize| -> Option<usize> {
            let b: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
            usize::try_from(u32::from_le_bytes(b)).ok()
        };
        let (n, m) = (count(0)?, count(4)?);
        let flags = *bytes.last()?;
        let layout_bytes = if flags & FORMAT_LAYOUT != 0 { 12 } else { 0 };
        let expected = 8usize
            .checked_add(n.checked_mul(8)?)?
            .checked_add(m.checked_mul(4)?)?;
        if bytes.len() != expected + layout_bytes + 1 {
            return None;
        }
        let mut fp = Fingerprint::default();
        for i in 0..n {
            let b: [u8; 8] = bytes.get(8 + i * 8..16 + i * 8)?.try_into().ok()?;
            fp.segments.push(u64::from_le_bytes(b));
        }
        let base = 8 + n * 8;
        for i in 0..m {
            let b: [u8; 4] = bytes.get(base + i * 4..base + 4 + i * 4)?.try_into().ok()?;
            fp.breakpoints.push(u32::from_le_bytes(b));
        }
        if layout_bytes > 0 {
            let at = |i: usize| -> Option<u32> { count(expected + i * 4)?.try_into().ok() };
            let layout = Layout {
                tools_at: at(0)?,
                system_at: at(1)?,
                conversation_at: at(2)?,
            };
            // The parts follow the model in order and end within the prompt.
            let in_order = 1 <= layout.tools_at
                && layout.tools_at <= layout.system_at
                && layout.system_at <= layout.conversation_at
                && layout.conversation_at as usize <= n;
            if !in_order {
                return None;
            }
            fp.layout = Some(layout);
        }
        if flags & (FORMAT_STRUCTURE | FORMAT_WORDS) != FORMAT_STRUCTURE | FORMAT_WORDS {
            // Hashed another way (before `Structure`, or a byte a step): not comparable with
            // today's.
            return None;
        }
        fp.automatic = flags & 1 == 1;
        Some(fp)
    }
}

/// The stored flag byte's bit saying the segments were hashed by [`Structure`] (bit 0 is
/// `automatic`). Fingerprints stored without it hashed each segment's re-serialised `Value`.
const FORMAT_STRUCTURE: u8 = 2;
/// ... and this one that [`Fnv`] took 8 bytes a step. One stored with [`FORMAT_STRUCTURE`]
/// alone hashed a byte a step: it reads as none (the first request of each session after the
/// upgrade is not compared with the one before it).
const FORMAT_WORDS: u8 = 4;
/// ... and this one that a [`Layout`] follows the breakpoints. The hashes are the same with or
/// without it: fingerprints stored before it compare with today's (their segments are not named).
/// A pith from before it reads one stored with it as none (after a downgrade, the first request
/// of each session is not compared with the one before it).
const FORMAT_LAYOUT: u8 = 8;

/// A segment's hash with its own `cache_control` member left out, and whether it had a non-null
/// one (a breakpoint); `None` when it is not JSON.
fn segment(raw: &str) -> Option<(u64, bool)> {
    let mut de = serde_json::Deserializer::from_str(raw);
    let (hash, marked) = Structure { strip_marker: true }.deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some((hash, marked))
}

/// A 64-bit hash taking 8 bytes a step (xor, a multiply by an odd constant, a xor-shift: each
/// step a bijection of the state, so two inputs that differ in one word never meet there), and
/// FNV-1a's byte step for the last few bytes: stable across builds and machines, so stored
/// fingerprints compare. Byte-at-a-time FNV-1a (the hashing before [`FORMAT_WORDS`]) was 43% of
/// a fingerprint's CPU time on Claude Code's 54 KB body (BENCHMARKS.md, issue 33).
struct Fnv(u64);

impl Fnv {
    /// A hash of one kind of value (`tag` keeps a string from colliding with a number, etc.).
    fn new(tag: u8) -> Fnv {
        let mut h = Fnv(0xcbf2_9ce4_8422_2325);
        h.write(&[tag]);
        h
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut word = [0u8; 8];
            word.copy_from_slice(w);
            self.0 = (self.0 ^ u64::from_le_bytes(word)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            self.0 ^= self.0 >> 32;
        }
        for b in words.remainder() {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.write(&v.to_le_bytes());
    }

    /// Length first, so `["ab","c"]` and `["a","bc"]` differ.
    fn write_str(&mut self, s: &str) {
        self.write_u64(s.len() as u64);
        self.write(s.as_bytes());
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A JSON value hashed as it is parsed: scalars by kind and value, arrays in order, objects by
/// their members sorted by key (so member order and whitespace do not count); with
/// `strip_marker`, the value's own `cache_control` member (not a nested one) is left out and
/// reported.
#[derive(Clone, Copy)]
struct Structure {
    strip_marker: bool,
}

impl<'de> DeserializeSeed<'de> for Structure {
    type Value = (u64, bool);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// A nested value: hashed, never stripped.
struct Nested(u64);

impl<'de> Deserialize<'de> for Nested {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Structure {
            strip_marker: false,
        }
        .deserialize(d)
        .map(|(hash, _)| Nested(hash))
    }
}

/// An object key, borrowed from the body when it has no escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

fn scalar(tag: u8, bytes: &[u8]) -> (u64, bool) {
    let mut h = Fnv::new(tag);
    h.write(bytes);
    (h.finish(), false)
}

/// A parsed value's hash: the one [`Structure`] takes of its text (objects by their members
/// sorted by key; with `strip_marker`, the value's own `cache_control` left out and reported).
fn value_hash(value: &Value, strip_marker: bool) -> (u64, bool) {
    match value {
        Value::Null => scalar(b'n', &[]),
        Value::Bool(b) => scalar(b'b', &[u8::from(*b)]),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => scalar(b'u', &u.to_le_bytes()),
            (None, Some(i)) => scalar(b'i', &i.to_le_bytes()),
            (None, None) => scalar(b'f', &n.as_f64().unwrap_or(0.0).to_bits().to_le_bytes()),
        },
        Value::String(s) => {
            let mut h = Fnv::new(b's');
            h.write_str(s);
            (h.finish(), false)
        }
        Value::Array(items) => {
            let mut h = Fnv::new(b'a');
            for item in items {
                h.write_u64(value_hash(item, false).0);
            }
            h.write_u64(items.len() as u64);
            (h.finish(), false)
        }
        Value::Object(map) => {
            let mut marked = false;
            let mut members: Vec<(&str, u64)> = Vec::with_capacity(map.len());
            for (key, value) in map {
                if strip_marker && key == "cache_control" {
                    marked = !value.is_null();
                    continue;
                }
                members.push((key, value_hash(value, false).0));
            }
            // A map keeps its keys sorted unless serde_json's `preserve_order` is on somewhere
            // in the build: sort, as the text's hash does.
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let mut h = Fnv::new(b'o');
            for (key, value) in &members {
                h.write_str(key);
                h.write_u64(*value);
            }
            h.write_u64(members.len() as u64);
            (h.finish(), marked)
        }
    }
}

impl<'de> Visitor<'de> for Structure {
    type Value = (u64, bool);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(scalar(b'n', &[]))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(scalar(b'b', &[u8::from(v)]))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(scalar(b'i', &v.to_le_bytes()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(scalar(b'u', &v.to_le_bytes()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(scalar(b'f', &v.to_bits().to_le_bytes()))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        let mut h = Fnv::new(b's');
        h.write_str(v);
        Ok((h.finish(), false))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut h = Fnv::new(b'a');
        let mut n = 0u64;
        while let Some(Nested(item)) = seq.next_element()? {
            h.write_u64(item);
            n += 1;
        }
        h.write_u64(n);
        Ok((h.finish(), false))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members: Vec<(Key<'de>, u64)> = Vec::new();
        let mut marked = false;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if self.strip_marker && key.0 == "cache_control" {
                marked = map.next_value::<Option<IgnoredAny>>()?.is_some();
                continue;
            }
            let Nested(value) = map.next_value()?;
            members.push((key, value));
        }
        members.sort_unstable_by(|a, b| a.0.0.cmp(&b.0.0));
        let mut h = Fnv::new(b'o');
        for (key, value) in &members {
            h.write_str(&key.0);
            h.write_u64(*value);
        }
        h.write_u64(members.len() as u64);
        Ok((h.finish(), marked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn fp(v: &Value) -> Fingerprint {
        Fingerprint::of(Wire::AnthropicMessages, v.to_string().as_bytes()).unwrap()
    }

    fn turn(messages: Value, tools: Value) -> Value {
        json!({"model": "m", "system": [{"type": "text", "text": "s"}], "tools": tools,
               "messages": messages})
    }

    /// Every capture with tools, each wire: a change inside its tools array (one tool dropped,
    /// a tool added with a cache marker, every tool but one replaced, the array emptied) gives
    /// the sent body's fingerprint from the client's exactly as a read of the sent body does;
    /// a change reaching outside the array gives none.
    #[test]
    fn a_change_of_the_tools_alone_is_spliced_into_the_clients_fingerprint() {
        let captures = pith_testkit::fixtures::captures().unwrap();
        let (mut spliced, mut refused) = (0, 0);
        for capture in &captures {
            let path = capture.path.split('?').next().unwrap_or_default();
            let Some(wire) = Wire::from_path(path) else {
                continue;
            };
            let client = &capture.body[..];
            let (Some(fp), Some(tools)) = (
                Fingerprint::of(wire, client),
                crate::skim::member_forward(client, b"tools"),
            ) else {
                continue;
            };
            let Ok(listed) = serde_json::from_slice::<Vec<Value>>(&client[tools.value.clone()])
            else {
                continue;
            };
            let added = json!({"name": "tool_search", "description": "find a deferred tool",
                               "input_schema": {"type": "object"},
                               "cache_control": {"type": "ephemeral"}});
            let edits: [Vec<Value>; 4] = [
                listed.iter().skip(1).cloned().collect(),
                listed.iter().cloned().chain([added.clone()]).collect(),
                listed.iter().take(1).cloned().chain([added]).collect(),
                Vec::new(),
            ];
            let with_tools = |tools_json: &[u8]| -> Vec<u8> {
                let range = tools.value.clone();
                [&client[..range.start], tools_json, &client[range.end..]].concat()
            };
            for edit in edits {
                let sent = with_tools(&serde_json::to_vec(&edit).unwrap());
                let whole = Fingerprint::of(wire, &sent);
                match fp.with_tools_of(client, &sent) {
                    Some(spliced_fp) => {
                        assert_eq!(Some(spliced_fp), whole, "{}", capture.id());
                        spliced += 1;
                    }
                    // Only when the edit's bytes reach the array's brackets (`[]` from `[`…).
                    None => assert!(edit.is_empty() || listed.is_empty(), "{}", capture.id()),
                }
            }
            // The model changed too (a letter of its name, so every place after it stays
            // where it was): outside the tools, refused.
            let mut sent = with_tools(b"[]");
            let model = crate::skim::member_forward(&sent, b"model").map(|m| m.value);
            if let Some(model) = model.filter(|m| m.start < tools.value.start && m.len() > 2) {
                let letter = &mut sent[model.start + 1];
                *letter = if *letter == b'x' { b'y' } else { b'x' };
                assert_eq!(fp.with_tools_of(client, &sent), None, "{}", capture.id());
                refused += 1;
            }
        }
        assert!(
            spliced > 40 && refused > 5,
            "{spliced} spliced, {refused} refused"
        );
    }

    #[test]
    fn a_change_before_the_breakpoint_busts_and_one_after_does_not() {
        let tools = json!([{"name": "a"}]);
        let cc = json!({"type": "ephemeral"});
        let one = turn(
            json!([{"role": "user", "content": [{"type": "text", "text": "q", "cache_control": cc}]}]),
            tools.clone(),
        );
        // The next turn moves the breakpoint and appends: no bust.
        let two = turn(
            json!([{"role": "user", "content": [{"type": "text", "text": "q"}]},
                   {"role": "assistant", "content": "a"},
                   {"role": "user", "content": [{"type": "text", "text": "q2", "cache_control": cc}]}]),
            tools.clone(),
        );
        assert_eq!(fp(&one).bust(&fp(&two)), None);
        // A changed first message: a bust at it.
        let edited = turn(
            json!([{"role": "user", "content": [{"type": "text", "text": "Q"}]},
                   {"role": "assistant", "content": "a"}]),
            tools.clone(),
        );
        let b = fp(&one).bust(&fp(&edited)).unwrap();
        assert_eq!(b.at, 3, "model, tool, system, then the first block");
        // A changed tools list busts everything after it.
        let retooled = turn(
            json!([{"role": "user", "content": [{"type": "text", "text": "q"}]}]),
            json!([{"name": "b"}]),
        );
        assert_eq!(fp(&one).bust(&fp(&retooled)).unwrap().at, 1);
        // Whitespace and key order are not changes.
        let reordered = r#"{"messages":[{"content":[{"cache_control":{"type":"ephemeral"},"text":"q","type":"text"}],"role":"user"}],"tools":[{"name":"a"}],"system":[{"text":"s","type":"text"}],"model":"m"}"#;
        let reordered = Fingerprint::of(Wire::AnthropicMessages, reordered.as_bytes()).unwrap();
        assert_eq!(fp(&one), reordered);
        // A change after the last breakpoint only: no bust.
        let cached_tools = turn(
            json!([{"role": "user", "content": "q"}]),
            json!([{"name": "a", "cache_control": cc}]),
        );
        let later = turn(
            json!([{"role": "user", "content": "other"}]),
            json!([{"name": "a"}]),
        );
        assert_eq!(fp(&cached_tools).bust(&fp(&later)), None);
    }

    #[test]
    fn a_bust_is_pith_s_when_the_client_kept_its_prefix() {
        let cc = json!({"type": "ephemeral"});
        let one = fp(&turn(
            json!([{"role": "user", "content": [{"type": "text", "text": "q", "cache_control": cc}]}]),
            json!([{"name": "a"}]),
        ));
        let two_client = fp(&turn(
            json!([{"role": "user", "content": [{"type": "text", "text": "q"}]}, {"role": "assistant", "content": "a"}]),
            json!([{"name": "a"}]),
        ));
        // pith sent a different tools list on the second turn only.
        let two_sent = fp(&turn(
            json!([{"role": "user", "content": [{"type": "text", "text": "q"}]}, {"role": "assistant", "content": "a"}]),
            json!([{"name": "b"}]),
        ));
        let (bust, cause) = attribute((&one, None), (&two_sent, Some(&two_client))).unwrap();
        assert_eq!((bust.at, cause), (1, Cause::Pith));
        let (_, cause) = attribute((&one, None), (&two_sent, None)).unwrap();
        assert_eq!(cause, Cause::Client);
        assert_eq!(attribute((&one, None), (&two_client, None)), None);
    }

    #[test]
    fn openai_caches_the_whole_previous_prompt() {
        let a = json!({"model": "g", "messages": [{"role": "user", "content": "q"}]});
        let b = json!({"model": "g", "messages": [{"role": "user", "content": "q"},
                       {"role": "assistant", "content": "a"}]});
        let c = json!({"model": "g", "messages": [{"role": "user", "content": "Q"}]});
        let of =
            |v: &Value| Fingerprint::of(Wire::ChatCompletions, v.to_string().as_bytes()).unwrap();
        assert_eq!(of(&a).bust(&of(&b)), None);
        assert_eq!(
            of(&a).bust(&of(&c)),
            Some(Bust {
                at: 1,
                cached_through: 1
            })
        );
    }

    #[test]
    fn bytes_round_trip_and_garbage_is_refused() {
        let v = turn(
            json!([{"role": "user", "content": [{"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}]}]),
            json!([]),
        );
        let f = fp(&v);
        assert_eq!(Fingerprint::from_bytes(&f.to_bytes()), Some(f.clone()));
        assert_eq!(Fingerprint::from_bytes(&f.to_bytes()[1..]), None);
        assert_eq!(Fingerprint::from_bytes(b""), None);
        // One stored before `Structure` (its flag byte without the format bit) reads as none,
        // so no bust is counted between hashes of the two kinds.
        for format in [FORMAT_STRUCTURE, FORMAT_WORDS] {
            let mut older = f.to_bytes();
            if let Some(flags) = older.last_mut() {
                *flags &= !format;
            }
            assert_eq!(Fingerprint::from_bytes(&older), None);
        }
        assert_eq!(Fingerprint::of(Wire::AnthropicMessages, b"not json"), None);
    }

    /// The layout is kept with the hashes, and a fingerprint stored before it (no layout, no
    /// layout flag) still reads and compares: only its segments go unnamed.
    #[test]
    fn the_layout_round_trips_and_one_stored_without_it_still_compares() {
        let f = fp(&turn(
            json!([{"role": "user", "content": [{"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}]}]),
            json!([{"name": "a"}, {"name": "b"}]),
        ));
        assert_eq!(
            f.layout,
            Some(Layout {
                tools_at: 1,
                system_at: 3,
                conversation_at: 4
            })
        );
        assert_eq!(Fingerprint::from_bytes(&f.to_bytes()), Some(f.clone()));
        let without = Fingerprint {
            layout: None,
            ..f.clone()
        };
        let stored = without.to_bytes();
        assert_eq!(stored.len() + 12, f.to_bytes().len());
        let read = Fingerprint::from_bytes(&stored).unwrap();
        assert_eq!(read, without);
        assert_eq!(read.segment(1), None, "no layout, no names");
        assert_eq!(
            read.first_difference(&f),
            f.segments.len(),
            "the same hashes"
        );
        // A layout out of order, or past the prompt's end, is garbage too.
        for bad in [[0, 1, 2], [2, 1, 3], [1, 2, 99]] {
            let mut bytes = without.to_bytes();
            let flags = bytes.pop().unwrap();
            for at in bad {
                bytes.extend_from_slice(&(at as u32).to_le_bytes());
            }
            bytes.push(flags | FORMAT_LAYOUT);
            assert_eq!(Fingerprint::from_bytes(&bytes), None, "{bad:?}");
        }
        // A layout flag with its bytes missing is garbage.
        let mut torn = stored;
        if let Some(flags) = torn.last_mut() {
            *flags |= FORMAT_LAYOUT;
        }
        assert_eq!(Fingerprint::from_bytes(&torn), None);
    }

    /// A change is named from both prompts: where a part shrank or grew so that the two call
    /// the first differing segment by different parts, the part whose count changed.
    #[test]
    fn a_change_is_named_by_the_part_that_changed_in_either_prompt() {
        let body = |tools: Value, messages: Value| {
            fp(&json!({"model": "m", "tools": tools,
                "system": [{"type": "text", "text": "s"}], "messages": messages}))
        };
        let q = json!([{"role": "user", "content": "q"}]);
        let three = body(
            json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]),
            q.clone(),
        );
        let two = body(json!([{"name": "a"}, {"name": "b"}]), q.clone());
        let at = three.first_difference(&two);
        assert_eq!(at, 3, "the model, then tools a and b alike");
        let wire = Wire::AnthropicMessages;
        assert_eq!(
            two.segment(at).map(|s| s.words(wire)).as_deref(),
            Some("system prompt block 1 of 1"),
            "the later prompt alone would blame the system prompt"
        );
        assert_eq!(
            three.change_words(&two, at, wire).as_deref(),
            Some("tool definitions: 3, then 2")
        );
        assert_eq!(
            two.change_words(&three, at, wire).as_deref(),
            Some("tool definitions: 2, then 3")
        );
        // The same parts: the segment itself.
        let changed = body(
            json!([{"name": "a"}, {"name": "B"}, {"name": "c"}]),
            q.clone(),
        );
        assert_eq!(
            three.change_words(&changed, 2, wire).as_deref(),
            Some("tool definition 2 of 3")
        );
        // The conversation rewound: named from the earlier prompt, past the later's end.
        let longer = body(
            json!([{"name": "a"}]),
            json!([{"role": "user", "content": "q"}, {"role": "assistant", "content": "r"}]),
        );
        let shorter = body(json!([{"name": "a"}]), json!([]));
        let at = longer.first_difference(&shorter);
        assert_eq!(
            longer.change_words(&shorter, at, wire).as_deref(),
            Some("conversation block 1 of 2")
        );
    }

    /// Each wire's parts, named as the provider's request calls them.
    #[test]
    fn a_segment_is_named_by_its_part_on_each_wire() {
        let named = |wire: Wire, body: Value, at: usize| {
            let f = Fingerprint::of(wire, body.to_string().as_bytes()).unwrap();
            let of_parsed = Fingerprint::of_parsed(
                wire,
                body.to_string().as_bytes(),
                body.get(if wire == Wire::Responses {
                    "input"
                } else {
                    "messages"
                }),
            )
            .unwrap();
            assert_eq!(f.layout, of_parsed.layout, "both ways agree");
            f.segment(at).map(|s| s.words(wire))
        };
        let anthropic = json!({"model": "m", "tools": [{"name": "a"}, {"name": "b"}],
            "system": [{"type": "text", "text": "s1"}, {"type": "text", "text": "s2"}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "q"},
                                                       {"type": "text", "text": "r"}]}]});
        let words: Vec<_> = (0..8)
            .map(|at| named(Wire::AnthropicMessages, anthropic.clone(), at))
            .collect();
        assert_eq!(
            words,
            [
                Some("the model"),
                Some("tool definition 1 of 2"),
                Some("tool definition 2 of 2"),
                Some("system prompt block 1 of 2"),
                Some("system prompt block 2 of 2"),
                Some("conversation block 1 of 2"),
                Some("conversation block 2 of 2"),
                None,
            ]
            .map(|w| w.map(str::to_owned))
        );
        let chat = json!({"model": "m", "tools": [{"type": "function"}],
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]});
        assert_eq!(
            named(Wire::ChatCompletions, chat.clone(), 1).as_deref(),
            Some("tool definition 1 of 1")
        );
        assert_eq!(
            named(Wire::ChatCompletions, chat, 3).as_deref(),
            Some("message 2 of 2")
        );
        let responses = json!({"model": "m", "instructions": "be brief", "tools": [],
            "input": [{"role": "user", "content": "q"}]});
        assert_eq!(
            named(Wire::Responses, responses.clone(), 1).as_deref(),
            Some("the instructions")
        );
        assert_eq!(
            named(Wire::Responses, responses, 2).as_deref(),
            Some("input item 1 of 1")
        );
    }
}
