//! Shared by the defer tests and the `defer_savings` example (`pith-prefilter/examples`): loading the real captures,
//! replaying a captured session as it would have looked under deferral; the model of
//! Anthropic's prompt cache for cache-weighted cost is `pith_testkit::cache_sim`, re-exported.
//!
//! No unwrap/expect here: the example is not test code.

use std::collections::HashSet;

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

/// Every capture and recorded session, as `client/scenario` folder names with their requests
/// in order.
fn all_folders() -> Result<Vec<(String, Vec<Capture>)>, String> {
    let mut out: Vec<(String, Vec<Capture>)> = Vec::new();
    let mut captures = pith_testkit::fixtures::captures().map_err(|e| e.to_string())?;
    captures.extend(pith_testkit::fixtures::recorded().map_err(|e| e.to_string())?);
    for capture in captures {
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

/// Folders of captures and recorded sessions that hold `reqNNN.json` files, relative names
/// (captures first, each set sorted).
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

pub use pith_testkit::cache_sim::*;

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
