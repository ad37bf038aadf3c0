//! Token usage from provider responses, normalized to disjoint counters.
//!
//! Anthropic reports `input_tokens` *excluding* cache reads and writes; OpenAI reports
//! `cached_tokens` as *part of* `prompt_tokens`/`input_tokens`. [`Usage`] always holds disjoint
//! counters (Anthropic's convention), so the prompt total is `input + cache_write + cache_read`
//! on every wire.

use std::iter::Sum;
use std::ops::{Add, AddAssign};

use serde::Deserialize;
use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::Wire;
use crate::sse::{Event, SseDecoder};

/// Billed tokens of one response, or of many summed (`+`, `+=`, `.sum()`): the one type every
/// place that holds or adds token counts uses (the ledger's rows and totals, `pith stats`, the
/// dashboard, prices). All four counters are disjoint.
///
/// It serializes as the reports print it: `input_tokens`, `cache_write_tokens`,
/// `cache_write_1h_tokens`, `cache_read_tokens`, `output_tokens` (flattened into the report's
/// own object where it is a field).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Usage {
    /// Uncached prompt tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Prompt tokens written to the cache.
    pub cache_write: u64,
    /// The part of `cache_write` written with the one-hour lifetime (Anthropic's
    /// `cache_creation.ephemeral_1h_input_tokens`), billed at a higher rate than the default
    /// five-minute writes; the rest of `cache_write` is five-minute writes.
    pub cache_write_1h: u64,
    /// Prompt tokens read from the cache.
    pub cache_read: u64,
}

impl Usage {
    /// Every prompt token, cached or not.
    pub fn prompt_total(&self) -> u64 {
        self.input + self.cache_write + self.cache_read
    }

    /// Prompt plus output: OpenAI's `total_tokens`.
    pub fn total(&self) -> u64 {
        self.prompt_total() + self.output
    }

    /// The rate the prompt token at `position` (0 is the first) was billed at. The provider
    /// reads the cached prefix first, then writes what it caches anew (one-hour entries before
    /// five-minute ones: Anthropic requires longer lifetimes to come first), and the rest is
    /// uncached input. A position at or past the end is billed like the last token.
    pub fn band_at(&self, position: u64) -> Band {
        let last = self.prompt_total().saturating_sub(1);
        let p = position.min(last);
        let write_5m = self.cache_write - self.cache_write_1h.min(self.cache_write);
        if p < self.cache_read {
            Band::CacheRead
        } else if p < self.cache_read + self.cache_write_1h {
            Band::CacheWrite1h
        } else if p < self.cache_read + self.cache_write_1h + write_5m {
            Band::CacheWrite5m
        } else {
            Band::Input
        }
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cache_write += other.cache_write;
        self.cache_write_1h += other.cache_write_1h;
        self.cache_read += other.cache_read;
    }
}

impl Add for Usage {
    type Output = Usage;

    fn add(mut self, other: Usage) -> Usage {
        self += other;
        self
    }
}

impl Sum for Usage {
    fn sum<I: Iterator<Item = Usage>>(iter: I) -> Usage {
        iter.fold(Usage::default(), Add::add)
    }
}

impl<'a> Sum<&'a Usage> for Usage {
    fn sum<I: Iterator<Item = &'a Usage>>(iter: I) -> Usage {
        iter.copied().sum()
    }
}

impl Serialize for Usage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Usage", 5)?;
        s.serialize_field("input_tokens", &self.input)?;
        s.serialize_field("cache_write_tokens", &self.cache_write)?;
        s.serialize_field("cache_write_1h_tokens", &self.cache_write_1h)?;
        s.serialize_field("cache_read_tokens", &self.cache_read)?;
        s.serialize_field("output_tokens", &self.output)?;
        s.end()
    }
}

/// The rate a prompt token is billed at, by its cache state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Band {
    /// Read from the prompt cache.
    CacheRead,
    /// Written to the cache with the default five-minute lifetime.
    CacheWrite5m,
    /// Written to the cache with the one-hour lifetime.
    CacheWrite1h,
    /// Not cached.
    Input,
}

impl Band {
    /// Every band, in prompt order.
    pub const ALL: [Band; 4] = [
        Band::CacheRead,
        Band::CacheWrite1h,
        Band::CacheWrite5m,
        Band::Input,
    ];

    /// The stable name stored in the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            Band::CacheRead => "cache_read",
            Band::CacheWrite5m => "cache_write_5m",
            Band::CacheWrite1h => "cache_write_1h",
            Band::Input => "input",
        }
    }

    /// The rate it stands for, as people read it: "at the cache-read rate".
    pub fn words(self) -> &'static str {
        match self {
            Band::CacheRead => "at the cache-read rate",
            Band::CacheWrite5m => "at the 5-minute cache-write rate",
            Band::CacheWrite1h => "at the 1-hour cache-write rate",
            Band::Input => "at the uncached input rate",
        }
    }

    /// The band named by [`Band::as_str`].
    pub fn parse(name: &str) -> Option<Band> {
        Band::ALL.into_iter().find(|b| b.as_str() == name)
    }
}

/// What pith learns from a response body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseFacts {
    /// The response's usage; `None` when no usage object was found.
    pub usage: Option<Usage>,
    /// The model that answered, when the response names it.
    pub model: Option<String>,
    /// An error the provider reported inside a 200 stream (`error` event / error object).
    pub stream_error: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AnthropicUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation: Option<CacheCreation>,
}

/// Anthropic's split of `cache_creation_input_tokens` by cache lifetime.
#[derive(Deserialize, Default)]
#[serde(default)]
struct CacheCreation {
    ephemeral_1h_input_tokens: Option<u64>,
}

impl AnthropicUsage {
    /// Overlay the fields this report carries onto `usage` (`message_delta` counts are cumulative
    /// and may repeat or omit input fields).
    fn apply(&self, usage: &mut Usage) {
        if let Some(v) = self.input_tokens {
            usage.input = v;
        }
        if let Some(v) = self.output_tokens {
            usage.output = v;
        }
        if let Some(v) = self.cache_creation_input_tokens {
            usage.cache_write = v;
        }
        if let Some(v) = self.cache_read_input_tokens {
            usage.cache_read = v;
        }
        if let Some(v) = self
            .cache_creation
            .as_ref()
            .and_then(|c| c.ephemeral_1h_input_tokens)
        {
            usage.cache_write_1h = v;
        }
        // Never more one-hour writes than writes, whatever a report says.
        usage.cache_write_1h = usage.cache_write_1h.min(usage.cache_write);
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PromptDetails {
    cached_tokens: Option<u64>,
    cache_write_tokens: Option<u64>,
}

/// Chat Completions (`prompt_tokens`) and Responses (`input_tokens`) usage in one shape.
#[derive(Deserialize, Default)]
#[serde(default)]
struct OpenAiUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptDetails>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    input_tokens_details: Option<PromptDetails>,
}

impl OpenAiUsage {
    fn normalize(&self) -> Usage {
        let prompt = self.prompt_tokens.or(self.input_tokens).unwrap_or(0);
        let output = self.completion_tokens.or(self.output_tokens).unwrap_or(0);
        let details = self
            .prompt_tokens_details
            .as_ref()
            .or(self.input_tokens_details.as_ref());
        let cache_read = details.and_then(|d| d.cached_tokens).unwrap_or(0);
        let cache_write = details.and_then(|d| d.cache_write_tokens).unwrap_or(0);
        Usage {
            input: prompt.saturating_sub(cache_read + cache_write),
            output,
            cache_write,
            cache_write_1h: 0,
            cache_read,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorBody {
    message: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Body {
    model: Option<String>,
    usage: Option<serde_json::Value>,
    /// Anthropic `message_start.message`, Responses `response.*.response`.
    message: Option<Box<Body>>,
    response: Option<Box<Body>>,
    error: Option<serde_json::Value>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

fn error_text(v: &serde_json::Value) -> String {
    match serde_json::from_value::<ErrorBody>(v.clone()) {
        Ok(ErrorBody {
            message: Some(m),
            kind,
        }) => match kind {
            Some(k) => format!("{k}: {m}"),
            None => m,
        },
        _ => v.to_string(),
    }
}

fn parse_usage(wire: Wire, value: &serde_json::Value, usage: &mut Usage) {
    match wire {
        Wire::AnthropicMessages => {
            if let Ok(u) = AnthropicUsage::deserialize(value) {
                u.apply(usage);
            }
        }
        Wire::ChatCompletions | Wire::Responses => {
            if let Ok(u) = OpenAiUsage::deserialize(value) {
                *usage = u.normalize();
            }
        }
    }
}

/// Facts from a complete (non-streamed) JSON response body.
pub fn from_json(wire: Wire, body: &[u8]) -> ResponseFacts {
    let Ok(parsed) = serde_json::from_slice::<Body>(body) else {
        return ResponseFacts::default();
    };
    let mut facts = ResponseFacts {
        model: parsed.model.clone(),
        ..ResponseFacts::default()
    };
    if let Some(u) = parsed.usage.as_ref().filter(|u| u.is_object()) {
        let mut usage = Usage::default();
        parse_usage(wire, u, &mut usage);
        facts.usage = Some(usage);
    }
    facts
}

/// Accumulates facts from SSE events as they pass.
#[derive(Debug)]
pub struct StreamFacts {
    wire: Wire,
    decoder: SseDecoder,
    facts: ResponseFacts,
}

impl StreamFacts {
    /// An accumulator for a streamed response on `wire`, with nothing seen yet.
    pub fn new(wire: Wire) -> Self {
        Self {
            wire,
            decoder: SseDecoder::new(),
            facts: ResponseFacts::default(),
        }
    }

    /// Take the next chunk of the stream (chunks may split anywhere).
    pub fn feed(&mut self, chunk: &[u8]) {
        let wire = self.wire;
        let facts = &mut self.facts;
        self.decoder.feed(chunk, |e| on_event(wire, facts, &e));
    }

    /// End of stream: the facts of every event, the last one included even without its
    /// closing blank line.
    pub fn finish(mut self) -> ResponseFacts {
        if let Some(e) = self.decoder.finish() {
            on_event(self.wire, &mut self.facts, &e);
        }
        self.facts
    }
}

/// Facts from a whole SSE body.
pub fn from_sse(wire: Wire, body: &[u8]) -> ResponseFacts {
    let mut s = StreamFacts::new(wire);
    s.feed(body);
    s.finish()
}

/// Only events that can carry usage, a model or an error are parsed; the rest (text deltas, the
/// bulk of a stream) are skipped by name or by a substring check.
fn on_event(wire: Wire, facts: &mut ResponseFacts, e: &Event) {
    let interesting = match wire {
        Wire::AnthropicMessages => matches!(
            e.event.as_str(),
            "message_start" | "message_delta" | "error" | ""
        ),
        Wire::ChatCompletions => e.data.contains("\"usage\"") || e.data.contains("\"error\""),
        Wire::Responses => {
            e.event.is_empty()
                || e.event == "error"
                || e.event == "response.created"
                || e.event == "response.completed"
                || e.event == "response.incomplete"
                || e.event == "response.failed"
        }
    };
    if !interesting || e.data == "[DONE]" {
        return;
    }
    let Ok(body) = serde_json::from_str::<Body>(&e.data) else {
        return;
    };
    if let Some(err) = body.error.as_ref().filter(|e| !e.is_null()) {
        facts.stream_error = Some(error_text(err));
    }
    if wire == Wire::Responses && body.kind.as_deref() == Some("error") {
        facts.stream_error = Some(e.data.clone());
    }
    let inner = body.message.as_deref().or(body.response.as_deref());
    if let Some(model) = inner.and_then(|b| b.model.clone()).or(body.model.clone()) {
        facts.model = Some(model);
    }
    let usage_value = inner
        .and_then(|b| b.usage.as_ref())
        .or(body.usage.as_ref())
        .filter(|u| u.is_object());
    if let Some(u) = usage_value {
        let usage = facts.usage.get_or_insert_with(Usage::default);
        parse_usage(wire, u, usage);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usages_add_counter_by_counter_and_serialize_as_the_reports_name_them() {
        let a = Usage {
            input: 1,
            output: 2,
            cache_write: 30,
            cache_write_1h: 10,
            cache_read: 400,
        };
        let b = Usage {
            input: 5,
            output: 6,
            cache_write: 7,
            cache_write_1h: 0,
            cache_read: 8,
        };
        let total = Usage {
            input: 6,
            output: 8,
            cache_write: 37,
            cache_write_1h: 10,
            cache_read: 408,
        };
        assert_eq!(a + b, total);
        assert_eq!([a, b].iter().sum::<Usage>(), total);
        assert_eq!([a, b].into_iter().sum::<Usage>(), total);
        let mut c = a;
        c += b;
        assert_eq!(c, total);
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"{"input_tokens":1,"cache_write_tokens":30,"cache_write_1h_tokens":10,"cache_read_tokens":400,"output_tokens":2}"#
        );
    }

    #[test]
    fn anthropic_json() {
        let body = br#"{"id":"msg_1","type":"message","model":"claude-sonnet-4-6","content":[],"usage":{"input_tokens":21,"cache_creation_input_tokens":7,"cache_read_input_tokens":5120,"output_tokens":48}}"#;
        let f = from_json(Wire::AnthropicMessages, body);
        assert_eq!(f.model.as_deref(), Some("claude-sonnet-4-6"));
        assert_eq!(
            f.usage,
            Some(Usage {
                input: 21,
                output: 48,
                cache_write: 7,
                cache_write_1h: 0,
                cache_read: 5120
            })
        );
    }

    #[test]
    fn anthropic_stream_delta_is_cumulative() {
        let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":40,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":9000,\"output_tokens\":1}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"\\\"usage\\\"\"}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":37}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let f = from_sse(Wire::AnthropicMessages, body.as_bytes());
        assert_eq!(
            f.usage,
            Some(Usage {
                input: 40,
                output: 37,
                cache_write: 0,
                cache_write_1h: 0,
                cache_read: 9000
            })
        );
        assert_eq!(f.model.as_deref(), Some("m"));
    }

    #[test]
    fn anthropic_one_hour_writes_are_kept_apart() {
        let body = br#"{"model":"m","usage":{"input_tokens":3,"cache_creation_input_tokens":1000,"cache_read_input_tokens":0,"output_tokens":5,"cache_creation":{"ephemeral_1h_input_tokens":600,"ephemeral_5m_input_tokens":400}}}"#;
        let u = from_json(Wire::AnthropicMessages, body).usage;
        assert_eq!(
            u.map(|u| (u.cache_write, u.cache_write_1h)),
            Some((1000, 600))
        );
        // A report claiming more one-hour writes than writes is capped at the writes.
        let odd = br#"{"usage":{"cache_creation_input_tokens":10,"cache_creation":{"ephemeral_1h_input_tokens":99}}}"#;
        let u = from_json(Wire::AnthropicMessages, odd).usage;
        assert_eq!(u.map(|u| u.cache_write_1h), Some(10));
    }

    #[test]
    fn bands_follow_the_order_the_provider_bills_a_prompt_in() {
        let u = Usage {
            input: 10,
            output: 0,
            cache_write: 30,
            cache_write_1h: 20,
            cache_read: 100,
        };
        let at = |p| u.band_at(p);
        assert_eq!((at(0), at(99)), (Band::CacheRead, Band::CacheRead));
        assert_eq!((at(100), at(119)), (Band::CacheWrite1h, Band::CacheWrite1h));
        assert_eq!((at(120), at(129)), (Band::CacheWrite5m, Band::CacheWrite5m));
        assert_eq!(
            (at(130), at(139), at(10_000)),
            (Band::Input, Band::Input, Band::Input)
        );
        let cold = Usage {
            cache_write: 50,
            ..Usage::default()
        };
        assert_eq!(
            (cold.band_at(0), cold.band_at(70)),
            (Band::CacheWrite5m, Band::CacheWrite5m)
        );
        assert_eq!(Usage::default().band_at(0), Band::Input);
        for b in Band::ALL {
            assert_eq!(Band::parse(b.as_str()), Some(b));
        }
    }

    #[test]
    fn openai_cached_tokens_are_inside_prompt_tokens() {
        let chat = br#"{"model":"gpt","usage":{"prompt_tokens":1200,"completion_tokens":80,"prompt_tokens_details":{"cached_tokens":1024}}}"#;
        let f = from_json(Wire::ChatCompletions, chat);
        assert_eq!(
            f.usage,
            Some(Usage {
                input: 176,
                output: 80,
                cache_write: 0,
                cache_write_1h: 0,
                cache_read: 1024
            })
        );
        let resp = br#"{"model":"gpt","usage":{"input_tokens":1500,"input_tokens_details":{"cached_tokens":1280},"output_tokens":220}}"#;
        let f = from_json(Wire::Responses, resp);
        assert_eq!(
            f.usage.map(|u| (u.input, u.cache_read, u.output)),
            Some((220, 1280, 220))
        );
    }

    #[test]
    fn chat_stream_usage_chunk_and_done() {
        let body = "data: {\"model\":\"g\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\ndata: {\"model\":\"g\",\"choices\":[],\"usage\":{\"prompt_tokens\":90,\"completion_tokens\":12}}\n\ndata: [DONE]\n\n";
        let f = from_sse(Wire::ChatCompletions, body.as_bytes());
        assert_eq!(f.usage.map(|u| (u.input, u.output)), Some((90, 12)));
        let no_usage = "data: {\"model\":\"g\",\"choices\":[],\"usage\":null}\n\ndata: [DONE]\n\n";
        assert_eq!(
            from_sse(Wire::ChatCompletions, no_usage.as_bytes()).usage,
            None
        );
    }

    #[test]
    fn responses_stream_completed() {
        let body = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-5.5\",\"usage\":null}}\n\nevent: response.output_text.delta\ndata: {\"delta\":\"x\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-5.5\",\"usage\":{\"input_tokens\":12,\"input_tokens_details\":{\"cached_tokens\":2},\"output_tokens\":2}}}\n\n";
        let f = from_sse(Wire::Responses, body.as_bytes());
        assert_eq!(
            f.usage.map(|u| (u.input, u.cache_read, u.output)),
            Some((10, 2, 2))
        );
        assert_eq!(f.model.as_deref(), Some("gpt-5.5"));
    }

    #[test]
    fn stream_errors_are_reported() {
        let body = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        let f = from_sse(Wire::AnthropicMessages, body.as_bytes());
        assert_eq!(
            f.stream_error.as_deref(),
            Some("overloaded_error: Overloaded")
        );
    }
}
