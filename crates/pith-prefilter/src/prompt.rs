//! The /api/chat request that asks for an ordering, and the strict reading of its reply.

use pith_search::Candidate;
use serde::Deserialize;
use serde_json::{Value, json};

/// Longest candidate summary put in the prompt (characters); keeps the prompt, and so the
/// context window and the latency, bounded.
const PROMPT_SUMMARY_CHARS: usize = 200;
/// Bytes per token assumed when sizing the context: code and paths tokenize at roughly 3-4
/// bytes per token, so 3 over-estimates slightly, which is the safe side (Ollama truncates a
/// prompt that does not fit, silently dropping candidates).
const BYTES_PER_TOKEN: usize = 3;
/// Tokens for the chat template and the reply's JSON punctuation.
const TOKEN_SLACK: usize = 256;
/// Output tokens per index in the reply (`123,` is two or three tokens).
const TOKENS_PER_INDEX: usize = 4;
/// Smallest context requested (Ollama's own default on small GPUs is 4096).
const MIN_NUM_CTX: usize = 2048;
/// Largest context requested: beyond this a small local model gets slow, and the search is
/// better narrowed than ranked.
pub(crate) const MAX_NUM_CTX: usize = 32768;

const SYSTEM: &str = "You rank code search results by how relevant they are to a query. \
Reply with JSON only, exactly {\"order\": [...]}: every result number exactly once, most relevant \
first. No prose.";

/// The request body, and the context size it asked for.
pub(crate) struct ChatRequest {
    pub(crate) body: Vec<u8>,
    pub(crate) num_ctx: usize,
}

/// Builds the /api/chat body: non-streaming, JSON-schema constrained, deterministic, with
/// `num_ctx` sized to the prompt plus the reply so nothing is truncated. `None` when the prompt
/// would need more than [`MAX_NUM_CTX`].
pub(crate) fn chat_request(
    model: &str,
    query: &str,
    candidates: &[Candidate],
) -> Option<ChatRequest> {
    let mut user = format!(
        "Query: {}\n\nResults:\n",
        one_line(query, PROMPT_SUMMARY_CHARS)
    );
    for candidate in candidates {
        user.push_str(&format!(
            "{}. {}\n",
            candidate.id,
            one_line(&candidate.summary, PROMPT_SUMMARY_CHARS)
        ));
    }
    let last = candidates.len().saturating_sub(1);
    user.push_str(&format!(
        "\nAnswer {{\"order\": [...]}} with all {} numbers 0-{last}, most relevant first.",
        candidates.len()
    ));

    let num_predict = candidates.len() * TOKENS_PER_INDEX + 32;
    let prompt_tokens = (SYSTEM.len() + user.len()).div_ceil(BYTES_PER_TOKEN);
    let needed = prompt_tokens + num_predict + TOKEN_SLACK;
    if needed > MAX_NUM_CTX {
        return None;
    }
    let num_ctx = needed.div_ceil(1024).saturating_mul(1024).max(MIN_NUM_CTX);
    let body = json!({
        "model": model,
        "stream": false,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": user},
        ],
        "format": {
            "type": "object",
            "properties": {"order": {"type": "array", "items": {"type": "integer"}}},
            "required": ["order"],
        },
        "options": {
            "num_ctx": num_ctx,
            "num_predict": num_predict,
            "temperature": 0,
            "seed": 0,
        },
        // Keeps the model loaded between searches of a session: a cold load takes longer than
        // the timeout.
        "keep_alive": "15m",
    });
    Some(ChatRequest {
        body: body.to_string().into_bytes(),
        num_ctx,
    })
}

/// `text` on one line, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect()
}

/// Why a reply is not a definitive ranking.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplyError {
    /// The body is not an Ollama chat reply.
    #[error("not an Ollama chat reply: {0}")]
    Envelope(String),
    /// The reply stopped early (e.g. `done_reason: length`).
    #[error("reply incomplete (done_reason {0:?})")]
    Incomplete(String),
    /// The message is not exactly `{"order": [non-negative integers]}`.
    #[error("message is not {{\"order\": [indices]}}: {0}")]
    NotAnOrdering(String),
    /// An index appears twice.
    #[error("index {0} appears twice")]
    Duplicate(usize),
    /// An index is not a candidate.
    #[error("index {0} is out of range (0-{1})")]
    OutOfRange(usize, usize),
    /// Some candidates are not in the ordering.
    #[error("{0} of {1} candidates missing from the ordering")]
    Missing(usize, usize),
}

#[derive(Deserialize)]
struct ChatReply {
    message: ChatMessage,
    done: bool,
    #[serde(default)]
    done_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChatMessage {
    content: String,
}

/// The only accepted message: one JSON object with one key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Ordering {
    order: Vec<usize>,
}

/// Reads a non-streaming /api/chat reply as an ordering of `count` candidates: every index in
/// `0..count` exactly once, and nothing else in the message (whitespace aside).
pub(crate) fn parse_reply(body: &[u8], count: usize) -> Result<Vec<usize>, ReplyError> {
    let reply: ChatReply =
        serde_json::from_slice(body).map_err(|err| ReplyError::Envelope(err.to_string()))?;
    if !reply.done {
        return Err(ReplyError::Incomplete("not done".to_owned()));
    }
    if let Some(reason) = reply.done_reason.filter(|reason| reason != "stop") {
        return Err(ReplyError::Incomplete(reason));
    }
    let ordering: Ordering = serde_json::from_str(reply.message.content.trim())
        .map_err(|err| ReplyError::NotAnOrdering(err.to_string()))?;
    let mut seen = vec![false; count];
    for &index in &ordering.order {
        match seen.get_mut(index) {
            None => return Err(ReplyError::OutOfRange(index, count.saturating_sub(1))),
            Some(true) => return Err(ReplyError::Duplicate(index)),
            Some(slot) => *slot = true,
        }
    }
    let missing = seen.iter().filter(|&&present| !present).count();
    if missing > 0 {
        return Err(ReplyError::Missing(missing, count));
    }
    Ok(ordering.order)
}

/// Whether /api/tags lists `model` (a name without a tag means `:latest`, as in Ollama).
pub(crate) fn tags_list_model(body: &[u8], model: &str) -> bool {
    let Ok(tags) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    let wanted = with_tag(model);
    tags.get("models")
        .and_then(Value::as_array)
        .is_some_and(|models| {
            models.iter().any(|entry| {
                ["name", "model"].iter().any(|key| {
                    entry
                        .get(key)
                        .and_then(Value::as_str)
                        .is_some_and(|name| with_tag(name) == wanted)
                })
            })
        })
}

fn with_tag(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.contains(':') {
        name.to_owned()
    } else {
        format!("{name}:latest")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates(n: usize) -> Vec<Candidate> {
        (0..n)
            .map(|id| Candidate {
                id,
                summary: format!("src/file_{id}.rs:{id}: let value_{id} = compute();"),
            })
            .collect()
    }

    fn reply(content: &str) -> Vec<u8> {
        json!({
            "model": "m", "created_at": "2026-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": content},
            "done": true, "done_reason": "stop",
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn request_sets_num_ctx_to_fit_the_prompt() {
        let request = chat_request("m", "value", &candidates(150)).unwrap();
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let num_ctx = body["options"]["num_ctx"].as_u64().unwrap() as usize;
        assert_eq!(num_ctx, request.num_ctx);
        assert_eq!(num_ctx % 1024, 0);
        let prompt: usize = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap().len())
            .sum();
        assert!(
            num_ctx * BYTES_PER_TOKEN >= prompt,
            "{num_ctx} for {prompt} bytes"
        );
        assert_eq!(body["stream"], false);
        assert_eq!(body["options"]["temperature"], 0);
        assert!(
            body["messages"][1]["content"]
                .as_str()
                .unwrap()
                .contains("149. src/file_149.rs:149: let value_149 = compute();\n")
        );
        assert_eq!(
            chat_request("m", "q", &candidates(2)).unwrap().num_ctx,
            MIN_NUM_CTX
        );
        // The ranker's largest list with full-length lines fits, above Ollama's small default.
        let long: Vec<Candidate> = (0..200)
            .map(|id| Candidate {
                id,
                summary: "y".repeat(260),
            })
            .collect();
        let request = chat_request("m", "q", &long).unwrap();
        assert!(
            request.num_ctx > 8192 && request.num_ctx <= MAX_NUM_CTX,
            "{}",
            request.num_ctx
        );
    }

    #[test]
    fn request_too_large_for_any_context_is_refused() {
        let huge: Vec<Candidate> = (0..2000)
            .map(|id| Candidate {
                id,
                summary: "x".repeat(200),
            })
            .collect();
        assert!(chat_request("m", "q", &huge).is_none());
    }

    #[test]
    fn strict_parse_accepts_only_a_permutation() {
        assert_eq!(
            parse_reply(&reply("{\"order\":[2,0,1]}"), 3),
            Ok(vec![2, 0, 1])
        );
        assert_eq!(
            parse_reply(&reply("\n {\"order\": [1, 0]} \n"), 2),
            Ok(vec![1, 0])
        );
        assert_eq!(
            parse_reply(&reply("{\"order\":[2,0,0]}"), 3),
            Err(ReplyError::Duplicate(0))
        );
        assert_eq!(
            parse_reply(&reply("{\"order\":[2,0]}"), 3),
            Err(ReplyError::Missing(1, 3))
        );
        assert_eq!(
            parse_reply(&reply("{\"order\":[3,0,1]}"), 3),
            Err(ReplyError::OutOfRange(3, 2))
        );
        for bad in [
            "Here you go: {\"order\":[0,1]}",
            "{\"order\":[0,1]} hope this helps",
            "```json\n{\"order\":[0,1]}\n```",
            "[0,1]",
            "{\"order\":[0,1],\"why\":\"x\"}",
            "{\"order\":[0,-1]}",
            "{\"order\":[0,1.5]}",
            "{\"order\":\"0,1\"}",
            "",
        ] {
            assert!(
                matches!(
                    parse_reply(&reply(bad), 2),
                    Err(ReplyError::NotAnOrdering(_))
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse_reply(b"not json", 2),
            Err(ReplyError::Envelope(_))
        ));
        let truncated = json!({"message": {"role": "assistant", "content": "{\"order\":[0,1]}"},
            "done": true, "done_reason": "length"});
        assert!(matches!(
            parse_reply(truncated.to_string().as_bytes(), 2),
            Err(ReplyError::Incomplete(_))
        ));
    }

    #[test]
    fn tags_match_with_implicit_latest() {
        let tags = br#"{"models":[{"name":"qwen2.5-coder:1.5b","model":"qwen2.5-coder:1.5b"},
            {"name":"llama3.2:latest","model":"llama3.2:latest"}]}"#;
        assert!(tags_list_model(tags, "qwen2.5-coder:1.5b"));
        assert!(tags_list_model(tags, "llama3.2"));
        assert!(!tags_list_model(tags, "qwen2.5-coder"));
        assert!(!tags_list_model(tags, "mistral"));
        assert!(!tags_list_model(b"<html>", "llama3.2"));
    }
}
