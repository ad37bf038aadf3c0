//! Shared by the defer tests and the `defer_savings` example (`pith-prefilter/examples`): loading the real captures,
//! replaying a captured session as it would have looked under deferral, and a model of
//! Anthropic's prompt cache for cache-weighted cost.
//!
//! No unwrap/expect here: the example is not test code.

use std::collections::HashSet;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use http::{HeaderMap, HeaderName, HeaderValue};
use pith_transform::{Outcome, Request, Splice, Stage, StageError, apply_splices, span_of};
use pith_wire::Wire;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// One recorded request.
pub struct Capture {
    pub file: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Capture {
    pub fn wire(&self) -> Option<Wire> {
        Wire::from_path(self.path.split('?').next().unwrap_or(""))
    }

    pub fn body_str(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap_or("")
    }

    pub fn with_body(&self, body: Vec<u8>) -> Capture {
        Capture {
            file: self.file.clone(),
            path: self.path.clone(),
            headers: self.headers.clone(),
            body,
        }
    }

    pub fn run(&self, stage: &dyn Stage) -> Result<Outcome, StageError> {
        let wire = self
            .wire()
            .ok_or_else(|| StageError(format!("{}: no wire for {}", self.file, self.path)))?;
        let path = self.path.split('?').next().unwrap_or("");
        stage.apply(&Request {
            wire,
            path,
            headers: &self.headers,
            body: &self.body,
        })
    }
}

/// Every capture, as `client/scenario` folder names with their requests in order.
fn all_folders() -> Result<Vec<(String, Vec<Capture>)>, String> {
    let mut out: Vec<(String, Vec<Capture>)> = Vec::new();
    for capture in pith_testkit::fixtures::captures().map_err(|e| e.to_string())? {
        let folder = format!("{}/{}", capture.client_folder, capture.scenario);
        let mut headers = HeaderMap::new();
        for (name, value) in &capture.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.append(name, value);
            }
        }
        let request = Capture {
            file: format!("{}.json", capture.name),
            path: capture.path,
            headers,
            body: capture.body.to_vec(),
        };
        match out.last_mut() {
            Some((last, requests)) if *last == folder => requests.push(request),
            _ => out.push((folder, vec![request])),
        }
    }
    Ok(out)
}

/// Folders under `captures/` that hold `reqNNN.json` files, relative names sorted.
pub fn capture_folders() -> Result<Vec<String>, String> {
    Ok(all_folders()?
        .into_iter()
        .map(|(folder, _)| folder)
        .collect())
}

/// The requests of one capture folder (e.g. `opencode-1.18.33/anthropic-agentsmd-mcp40`),
/// in order.
pub fn load_folder(folder: &str) -> Result<Vec<Capture>, String> {
    all_folders()?
        .into_iter()
        .find(|(name, _)| name == folder)
        .map(|(_, requests)| requests)
        .ok_or_else(|| format!("no reqNNN.json in capture folder {folder}"))
}

/// Names of the tools that carry `"defer_loading": true` in an Anthropic or Responses body.
pub fn deferred_names(body: &[u8]) -> Result<Vec<String>, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    Ok(value["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter(|t| t["defer_loading"] == Value::Bool(true))
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

#[derive(Deserialize)]
struct Top<'a> {
    #[serde(borrow)]
    tools: Option<&'a RawValue>,
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    content: &'a RawValue,
}

#[derive(Deserialize)]
struct BlockHead {
    #[serde(rename = "type")]
    kind: Option<String>,
    id: Option<String>,
    name: Option<String>,
}

/// How many tool references one simulated search returns (the API's default `limit`).
pub const SEARCH_RESULTS: usize = 5;

/// The Anthropic session `captures` as it would have gone with the tools in `deferred`
/// deferred: before the first call of each deferred tool, the model searches for it by name
/// (regex tool) and the API answers with up to [`SEARCH_RESULTS`] references: the deferred
/// tools whose definition mentions that name, in tool order, the wanted one always included.
/// Everything else stays byte-identical. The captures were recorded without deferral, so
/// without this the history calls tools the model could not have seen.
pub fn as_deferred_session(
    captures: &[Capture],
    deferred: &[String],
) -> Result<Vec<Capture>, String> {
    captures
        .iter()
        .map(|c| {
            let body = with_searches(c.body_str(), deferred)?;
            Ok(c.with_body(body))
        })
        .collect()
}

fn with_searches(body: &str, deferred: &[String]) -> Result<Vec<u8>, String> {
    let top: Top<'_> = serde_json::from_str(body).map_err(|e| e.to_string())?;
    let (Some(tools), Some(messages)) = (top.tools, top.messages) else {
        return Ok(body.as_bytes().to_vec());
    };
    let tools: Vec<Value> = serde_json::from_str(tools.get()).map_err(|e| e.to_string())?;
    let messages: Vec<Message<'_>> =
        serde_json::from_str(messages.get()).map_err(|e| e.to_string())?;
    let mut searched: HashSet<String> = HashSet::new();
    let mut splices = Vec::new();
    for message in messages {
        if !message.content.get().starts_with('[') {
            continue;
        }
        let blocks: Vec<&RawValue> =
            serde_json::from_str(message.content.get()).map_err(|e| e.to_string())?;
        for block in blocks {
            let head: BlockHead = serde_json::from_str(block.get()).map_err(|e| e.to_string())?;
            let (Some("tool_use"), Some(id), Some(name)) =
                (head.kind.as_deref(), head.id, head.name)
            else {
                continue;
            };
            if !deferred.contains(&name) || !searched.insert(name.clone()) {
                continue;
            }
            let refs = search_results(&tools, deferred, &name);
            let search_id = format!("srvtoolu_{}", id.trim_start_matches("toolu_"));
            let references: Vec<Value> = refs
                .iter()
                .map(|r| serde_json::json!({"type": "tool_reference", "tool_name": r}))
                .collect();
            let call = serde_json::json!({"type": "server_tool_use", "id": search_id,
                "name": "tool_search_tool_regex", "input": {"pattern": name}});
            let result = serde_json::json!({"type": "tool_search_tool_result",
                "tool_use_id": search_id, "content": {"type": "tool_search_tool_search_result",
                "tool_references": references}});
            let at = span_of(body, block)
                .ok_or("block not borrowed from body")?
                .start;
            splices.push(Splice {
                range: at..at,
                replacement: format!("{call},{result},"),
            });
        }
    }
    apply_splices(body.as_bytes(), &splices).map_err(|e| e.to_string())
}

fn search_results(tools: &[Value], deferred: &[String], wanted: &str) -> Vec<String> {
    let needle = wanted.to_lowercase();
    let mut hits: Vec<String> = tools
        .iter()
        .filter_map(|t| {
            let name = t["name"].as_str()?;
            (deferred.iter().any(|d| d == name) && t.to_string().to_lowercase().contains(&needle))
                .then(|| name.to_owned())
        })
        .take(SEARCH_RESULTS)
        .collect();
    if !hits.iter().any(|h| h == wanted) {
        hits.truncate(SEARCH_RESULTS - 1);
        hits.push(wanted.to_owned());
    }
    hits
}

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
    pub tokens: f64,
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
    pub uncached: f64,
    pub write: f64,
    pub read: f64,
}

impl TurnCost {
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
    pub prompt: TurnCost,
    /// When this request's response ran a tool search, the API continues the same response
    /// after expanding the found definitions: the search blocks bill uncached (1x), plus the
    /// prompt again as a cache read (0.1x) if the model says so.
    pub search_continuation: f64,
}

impl RequestCost {
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

/// Into `memory`, what pith would have hidden from the answers of `capture`'s session: every
/// run of search blocks before a `tool_use` in its history, as raw bytes, keyed like the proxy
/// keys them (the session header, the `tool_use` id).
pub fn remember_searches(
    capture: &Capture,
    memory: &dyn pith_transform::search_trip::SearchMemory,
) -> Result<(), String> {
    let body = capture.body_str();
    let session = pith_transform::search_trip::session_key(&capture.headers);
    let top: Top<'_> = serde_json::from_str(body).map_err(|e| e.to_string())?;
    let Some(messages) = top.messages else {
        return Ok(());
    };
    let messages: Vec<Message<'_>> =
        serde_json::from_str(messages.get()).map_err(|e| e.to_string())?;
    for message in messages {
        if !message.content.get().starts_with('[') {
            continue;
        }
        let blocks: Vec<&RawValue> =
            serde_json::from_str(message.content.get()).map_err(|e| e.to_string())?;
        let mut run: Vec<(usize, String)> = Vec::new();
        let mut visible = 0;
        for block in blocks {
            let head: BlockHead = serde_json::from_str(block.get()).map_err(|e| e.to_string())?;
            match (head.kind.as_deref(), head.id) {
                (Some("server_tool_use" | "tool_search_tool_result"), _) => {
                    run.push((visible, block.get().to_owned()));
                }
                (Some("tool_use"), Some(id)) => {
                    if !run.is_empty() {
                        let kept = pith_transform::search_trip::Kept::encode(visible, &run);
                        memory.remember(&session, &id, &kept);
                        run.clear();
                    }
                    visible += 1;
                }
                _ => visible += 1,
            }
        }
    }
    Ok(())
}
