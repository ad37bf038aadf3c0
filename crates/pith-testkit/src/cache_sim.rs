//! A model of Anthropic's prompt cache for cache-weighted cost: the prompt of a Messages body
//! as cacheable segments in prefix order (loaded tools, system, messages; a tool search result
//! carries the definitions it expands to), and a cache that writes at breakpoints and reads
//! the longest written prefix. Shared by the defer stage's tests and savings example, and by
//! the integration tests whose mock answers with the usage this model gives.

use std::collections::HashSet;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::Value;

/// Characters per estimated token (a heuristic; see BENCHMARKS.md).
pub const CHARS_PER_TOKEN: f64 = 4.0;
/// What the cost model assumes where the provider documents nothing.
#[derive(Debug, Clone, Copy)]
pub struct CostModel {
    /// Hidden instructions that come with the tool search tool, in tokens.
    pub search_tool_overhead: f64,
    /// Whether the continuation after a server-side search bills the prompt again as a cache
    /// read (0.1x) on top of the search blocks themselves (1x).
    pub continuation_rereads_prompt: bool,
}

impl CostModel {
    /// Every undocumented cost assumed to be there.
    pub const CONSERVATIVE: CostModel = CostModel {
        search_tool_overhead: 500.0,
        continuation_rereads_prompt: true,
    };
    /// Only what is documented: definitions bill as input where they appear.
    pub const DOCUMENTED: CostModel = CostModel {
        search_tool_overhead: 0.0,
        continuation_rereads_prompt: false,
    };
}
/// Minimum cacheable prefix of Claude Sonnet 4.5 (the model in the captures).
pub const MIN_CACHEABLE_TOKENS: f64 = 1024.0;
/// How many blocks the API walks back from a breakpoint looking for an earlier write.
pub const LOOKBACK_BLOCKS: usize = 20;

/// One cacheable block of the rendered prompt, in prefix order (tools, system, messages).
#[derive(Debug, Clone)]
pub struct Segment {
    /// Content hash, without any `cache_control` marker (markers are not prompt content).
    pub key: u64,
    /// Estimated tokens ([`CHARS_PER_TOKEN`]).
    pub tokens: f64,
    /// Carries a `cache_control` marker.
    pub breakpoint: bool,
    /// A tool search result the API expanded (its definitions are part of `tokens`).
    pub search: bool,
}

fn tokens_of(chars: usize) -> f64 {
    chars as f64 / CHARS_PER_TOKEN
}

fn key_of(value: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    value.to_string().hash(&mut h);
    h.finish()
}

/// A block without its `cache_control` marker, and whether it had one.
fn unmarked(block: &Value) -> (Value, bool) {
    let mut block = block.clone();
    let marked = block
        .as_object_mut()
        .and_then(|o| o.remove("cache_control"))
        .is_some_and(|cc| !cc.is_null());
    (block, marked)
}

/// The prompt of an Anthropic body as the model sees it: loaded tools (deferred ones are not
/// in context; the search tool carries its assumed overhead), system blocks, message blocks
/// (a tool search result also carries the definitions it expands to).
pub fn prompt_segments(body: &[u8], model: CostModel) -> Result<Vec<Segment>, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let empty = Vec::new();
    let tools = value["tools"].as_array().unwrap_or(&empty);
    let mut segments = Vec::new();
    for tool in tools {
        if tool["defer_loading"] == Value::Bool(true) {
            continue;
        }
        let (plain, breakpoint) = unmarked(tool);
        let is_search = tool["type"]
            .as_str()
            .is_some_and(|t| t.starts_with("tool_search_tool_"));
        let tokens = tokens_of(plain.to_string().len())
            + if is_search {
                model.search_tool_overhead
            } else {
                0.0
            };
        segments.push(Segment {
            key: key_of(&plain),
            tokens,
            breakpoint,
            search: false,
        });
    }
    match &value["system"] {
        Value::String(s) => segments.push(text_segment(s, false)),
        Value::Array(blocks) => {
            for block in blocks {
                segments.push(block_segment(block, tools));
            }
        }
        _ => {}
    }
    for message in value["messages"].as_array().unwrap_or(&empty) {
        match &message["content"] {
            Value::String(s) => segments.push(text_segment(s, false)),
            Value::Array(blocks) => {
                for block in blocks {
                    segments.push(block_segment(block, tools));
                }
            }
            _ => {}
        }
    }
    Ok(segments)
}

fn text_segment(text: &str, breakpoint: bool) -> Segment {
    Segment {
        key: key_of(&Value::String(text.to_owned())),
        tokens: tokens_of(text.len()),
        breakpoint,
        search: false,
    }
}

fn block_segment(block: &Value, tools: &[Value]) -> Segment {
    let (plain, breakpoint) = unmarked(block);
    if let Some(text) = plain["text"].as_str().filter(|_| plain["type"] == "text") {
        let mut segment = text_segment(text, breakpoint);
        segment.key = key_of(&plain);
        return segment;
    }
    let mut tokens = tokens_of(plain.to_string().len());
    let search = plain["type"] == "tool_search_tool_result";
    if search {
        for reference in plain["content"]["tool_references"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
        {
            let name = reference["tool_name"].as_str().unwrap_or("");
            if let Some(def) = tools.iter().find(|t| t["name"] == name) {
                tokens += tokens_of(unmarked(def).0.to_string().len());
            }
        }
    }
    Segment {
        key: key_of(&plain),
        tokens,
        breakpoint,
        search,
    }
}

/// Prompt tokens of one request by how they are billed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TurnCost {
    /// Billed as input, not cached.
    pub uncached: f64,
    /// Written to the cache.
    pub write: f64,
    /// Read from the cache.
    pub read: f64,
}

impl TurnCost {
    /// All prompt tokens.
    pub fn total(&self) -> f64 {
        self.uncached + self.write + self.read
    }

    /// 1x uncached, 1.25x 5-minute cache write, 0.1x cache read.
    pub fn weighted(&self) -> f64 {
        self.uncached + 1.25 * self.write + 0.1 * self.read
    }
}

/// Anthropic's prompt cache, turn by turn: a prefix is written at each breakpoint it is not
/// yet cached for (if at least [`MIN_CACHEABLE_TOKENS`] long); a later request reads the
/// longest written prefix it shares, found within [`LOOKBACK_BLOCKS`] blocks before one of its
/// breakpoints. TTLs are ignored (a session's turns are seconds apart).
#[derive(Default)]
pub struct CacheSim {
    written: HashSet<u64>,
}

impl CacheSim {
    /// The cost of one request with `segments`, and what it leaves written.
    pub fn turn(&mut self, segments: &[Segment]) -> TurnCost {
        let mut prefix = Vec::with_capacity(segments.len());
        let mut cumulative = Vec::with_capacity(segments.len());
        let (mut h, mut sum) = (0u64, 0.0);
        for s in segments {
            let mut hasher = DefaultHasher::new();
            (h, s.key).hash(&mut hasher);
            h = hasher.finish();
            sum += s.tokens;
            prefix.push(h);
            cumulative.push(sum);
        }
        let total = sum;
        let breakpoints: Vec<usize> = (0..segments.len())
            .filter(|&i| segments[i].breakpoint)
            .collect();
        let read = breakpoints
            .iter()
            .flat_map(|&j| (j.saturating_sub(LOOKBACK_BLOCKS)..=j).rev())
            .filter(|&p| self.written.contains(&prefix[p]))
            .map(|p| cumulative[p])
            .fold(0.0, f64::max);
        let mut write = 0.0;
        let mut cached_end = read;
        if let Some(&last) = breakpoints.last() {
            if cumulative[last] >= MIN_CACHEABLE_TOKENS && cumulative[last] > read {
                write = cumulative[last] - read;
                cached_end = cumulative[last];
            }
            for &j in &breakpoints {
                if cumulative[j] >= MIN_CACHEABLE_TOKENS {
                    self.written.insert(prefix[j]);
                }
            }
        }
        TurnCost {
            uncached: total - cached_end,
            write,
            read,
        }
    }
}

/// Cache-weighted cost of one request of a session.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestCost {
    /// The request's own prompt.
    pub prompt: TurnCost,
    /// When this request's response ran a tool search, the API continues the same response
    /// after expanding the found definitions: the search blocks bill uncached (1x), plus the
    /// prompt again as a cache read (0.1x) if the model says so.
    pub search_continuation: f64,
}

impl RequestCost {
    /// Its weighted tokens, the search continuation included.
    pub fn weighted(&self) -> f64 {
        self.prompt.weighted() + self.search_continuation
    }
}

/// The requests of one session (Anthropic bodies, in order) through one prompt cache.
pub fn session_costs(bodies: &[Vec<u8>], model: CostModel) -> Result<Vec<RequestCost>, String> {
    let prompts = bodies
        .iter()
        .map(|b| prompt_segments(b, model))
        .collect::<Result<Vec<_>, _>>()?;
    let mut sim = CacheSim::default();
    let mut costs = Vec::with_capacity(prompts.len());
    for (k, segments) in prompts.iter().enumerate() {
        let prompt = sim.turn(segments);
        let seen: HashSet<u64> = segments
            .iter()
            .filter(|s| s.search)
            .map(|s| s.key)
            .collect();
        let new_search: f64 = prompts
            .get(k + 1)
            .map(|next| {
                next.iter()
                    .filter(|s| s.search && !seen.contains(&s.key))
                    .map(|s| s.tokens)
                    .sum()
            })
            .unwrap_or(0.0);
        let search_continuation = match (new_search > 0.0, model.continuation_rereads_prompt) {
            (false, _) => 0.0,
            (true, true) => 0.1 * prompt.total() + new_search,
            (true, false) => new_search,
        };
        costs.push(RequestCost {
            prompt,
            search_continuation,
        });
    }
    Ok(costs)
}

/// OpenAI's prompt caching, for a session of Responses bodies (in order). As OpenAI documents
/// it ("Prompt Caching 201", for models before GPT-5.6): automatic, no markers and no fee to
/// write; a prompt of at least [`MIN_CACHEABLE_TOKENS`] reads from the cache the longest
/// prefix it shares with an earlier request, in steps of [`OPENAI_CACHE_STEP`] tokens, and
/// cached input costs up to 90% less (the GPT-5 family's 0.1x, what [`TurnCost::weighted`]
/// charges a read). The prompt as the model sees it: the instructions, the tools, then the
/// input items, in order. Assumes every request reaches the machine that holds its prefix.
pub fn responses_session_costs(bodies: &[Vec<u8>]) -> Result<Vec<TurnCost>, String> {
    let prompts = bodies
        .iter()
        .map(|b| responses_prompt(b))
        .collect::<Result<Vec<_>, _>>()?;
    let mut costs = Vec::with_capacity(prompts.len());
    for (k, prompt) in prompts.iter().enumerate() {
        let shared = prompts[..k]
            .iter()
            .map(|earlier| common_prefix_chars(earlier, prompt))
            .max()
            .unwrap_or(0);
        let total = tokens_of(prompt.chars().count());
        let shared = tokens_of(shared);
        let read = if total >= MIN_CACHEABLE_TOKENS && shared >= MIN_CACHEABLE_TOKENS {
            MIN_CACHEABLE_TOKENS
                + ((shared - MIN_CACHEABLE_TOKENS) / OPENAI_CACHE_STEP).floor() * OPENAI_CACHE_STEP
        } else {
            0.0
        };
        costs.push(TurnCost {
            uncached: total - read,
            write: 0.0,
            read,
        });
    }
    Ok(costs)
}

/// The granularity of OpenAI's cache hits past the first [`MIN_CACHEABLE_TOKENS`].
pub const OPENAI_CACHE_STEP: f64 = 128.0;

/// A Responses body's prompt in the order the model reads it: instructions, tools, input.
fn responses_prompt(body: &[u8]) -> Result<String, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let mut prompt = value["instructions"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    prompt.push_str(&value["tools"].to_string());
    match &value["input"] {
        Value::Array(items) => items.iter().for_each(|i| prompt.push_str(&i.to_string())),
        other => prompt.push_str(&other.to_string()),
    }
    Ok(prompt)
}

/// Characters `a` and `b` share from their start.
fn common_prefix_chars(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(instructions: &str, items: &[&str]) -> Vec<u8> {
        let input: Vec<Value> = items
            .iter()
            .map(|t| serde_json::json!({"type": "message", "role": "user", "content": t}))
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "instructions": instructions, "tools": [], "input": input,
        }))
        .unwrap()
    }

    #[test]
    fn openai_reads_the_longest_earlier_prefix_in_steps_past_the_minimum() {
        let long = "x".repeat(8_000); // 2,000 tokens of instructions
        let first = body(&long, &["read the file"]);
        let next = body(&long, &["read the file", &"y".repeat(4_000)]);
        let changed = body(&format!("z{long}"), &["read the file"]);
        let costs = responses_session_costs(&[first, next, changed]).unwrap();
        assert_eq!(
            (costs[0].read, costs[0].write),
            (0.0, 0.0),
            "nothing earlier"
        );
        // The second shares the first's prompt up to the end of its last item's text.
        let read = costs[1].read;
        assert!((MIN_CACHEABLE_TOKENS..=2_010.0).contains(&read), "{read}");
        assert_eq!((read - MIN_CACHEABLE_TOKENS) % OPENAI_CACHE_STEP, 0.0);
        assert!((costs[1].total() - (2_000.0 + 1_000.0 + 20.0)).abs() < 25.0);
        assert_eq!(
            costs[2].read, 0.0,
            "a changed first character shares nothing"
        );
        assert!(costs[2].weighted() > costs[1].weighted());
    }
}
