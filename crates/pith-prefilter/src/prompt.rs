//! What the model is asked (pick the most relevant results) and the strict reading of its
//! answer; the same on both APIs (`api.rs` wraps them).

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
/// Output tokens per index in the reply (`123, ` is two to four tokens).
const TOKENS_PER_INDEX: usize = 4;
/// Smallest context requested (Ollama's own default on small GPUs is 4096).
const MIN_NUM_CTX: usize = 2048;
/// Largest context requested: beyond this a small local model gets slow, and the search is
/// better narrowed than ranked.
pub(crate) const MAX_NUM_CTX: usize = 32768;

const SYSTEM: &str = "You pick the code search results that best answer a query. Reply with \
JSON only, exactly {\"top\": [...]}: the requested number of distinct result numbers, most \
relevant first. No prose.";

/// What to send: the two messages, the answer's schema, and the sizes asked for.
pub(crate) struct Prompt {
    pub(crate) system: &'static str,
    pub(crate) user: String,
    pub(crate) schema: Value,
    pub(crate) num_ctx: usize,
    pub(crate) num_predict: usize,
}

/// The prompt asking for the `want` best of `candidates`, with a JSON schema that constrains
/// the answer to `want` result numbers in range (servers turn it into a grammar; distinctness
/// is checked on reading). `None` when the prompt would need more than [`MAX_NUM_CTX`].
pub(crate) fn prompt(query: &str, candidates: &[Candidate], want: usize) -> Option<Prompt> {
    let want = want.min(candidates.len());
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
        "\nQuery: {}\nAnswer {{\"top\": [...]}} with the {want} result numbers (0-{last}) that \
         best answer the query, most relevant first.",
        one_line(query, PROMPT_SUMMARY_CHARS)
    ));

    let num_predict = want * TOKENS_PER_INDEX + 32;
    let prompt_tokens = (SYSTEM.len() + user.len()).div_ceil(BYTES_PER_TOKEN);
    let needed = prompt_tokens + num_predict + TOKEN_SLACK;
    if needed > MAX_NUM_CTX {
        return None;
    }
    let num_ctx = needed.div_ceil(1024).saturating_mul(1024).max(MIN_NUM_CTX);
    let schema = json!({
        "type": "object",
        "properties": {
            "top": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": last},
                "minItems": want,
                "maxItems": want,
            },
        },
        "required": ["top"],
        "additionalProperties": false,
    });
    Some(Prompt {
        system: SYSTEM,
        user,
        schema,
        num_ctx,
        num_predict,
    })
}

/// `text` on one line, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect()
}

/// Why an answer is not a definitive pick.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplyError {
    /// The message is not exactly `{"top": [non-negative integers]}`.
    #[error("answer is not {{\"top\": [result numbers]}}: {0}")]
    NotAPick(String),
    /// A result number appears twice.
    #[error("result {0} appears twice")]
    Duplicate(usize),
    /// A number is not a result.
    #[error("result {0} is out of range (0-{1})")]
    OutOfRange(usize, usize),
    /// Not as many results as asked for.
    #[error("{got} results picked, {want} asked for")]
    WrongCount {
        /// Distinct results in the answer.
        got: usize,
        /// Results asked for.
        want: usize,
    },
}

/// The only accepted message: one JSON object with one key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Pick {
    top: Vec<usize>,
}

/// Reads the model's message as a pick of `want` of `count` candidates: distinct numbers in
/// `0..count`, exactly `min(want, count)` of them, and nothing else in the message (whitespace
/// aside).
pub(crate) fn parse_pick(
    content: &str,
    count: usize,
    want: usize,
) -> Result<Vec<usize>, ReplyError> {
    let pick: Pick = serde_json::from_str(content.trim())
        .map_err(|err| ReplyError::NotAPick(err.to_string()))?;
    let mut seen = vec![false; count];
    for &index in &pick.top {
        match seen.get_mut(index) {
            None => return Err(ReplyError::OutOfRange(index, count.saturating_sub(1))),
            Some(true) => return Err(ReplyError::Duplicate(index)),
            Some(slot) => *slot = true,
        }
    }
    let want = want.min(count);
    if pick.top.len() != want {
        return Err(ReplyError::WrongCount {
            got: pick.top.len(),
            want,
        });
    }
    Ok(pick.top)
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

    #[test]
    fn the_prompt_fits_its_context_and_constrains_the_answer() {
        let prompt = prompt("value", &candidates(150), 20).unwrap();
        assert_eq!(prompt.num_ctx % 1024, 0);
        assert!(
            prompt.num_ctx * BYTES_PER_TOKEN >= prompt.system.len() + prompt.user.len(),
            "{} for {} bytes",
            prompt.num_ctx,
            prompt.user.len()
        );
        assert!(
            prompt
                .user
                .starts_with("Query: value\n\nResults:\n0. src/file_0.rs:0:")
        );
        assert!(
            prompt
                .user
                .contains("149. src/file_149.rs:149: let value_149 = compute();\n")
        );
        assert!(prompt.user.ends_with(
            "Answer {\"top\": [...]} with the 20 result numbers (0-149) that best answer the \
             query, most relevant first."
        ));
        let top = &prompt.schema["properties"]["top"];
        assert_eq!(top["minItems"], 20);
        assert_eq!(top["maxItems"], 20);
        assert_eq!(top["items"]["maximum"], 149);
        assert_eq!(prompt.num_predict, 20 * TOKENS_PER_INDEX + 32);
        assert_eq!(
            super::prompt("q", &candidates(2), 40).unwrap().num_ctx,
            MIN_NUM_CTX
        );
        assert_eq!(
            super::prompt("q", &candidates(2), 40).unwrap().schema["properties"]["top"]["maxItems"],
            2
        );
        // The ranker's largest list with full-length lines fits, above Ollama's small default.
        let long: Vec<Candidate> = (0..200)
            .map(|id| Candidate {
                id,
                summary: "y".repeat(260),
            })
            .collect();
        let prompt = super::prompt("q", &long, 40).unwrap();
        assert!(
            prompt.num_ctx > 8192 && prompt.num_ctx <= MAX_NUM_CTX,
            "{}",
            prompt.num_ctx
        );
    }

    #[test]
    fn a_prompt_too_large_for_any_context_is_refused() {
        let huge: Vec<Candidate> = (0..2000)
            .map(|id| Candidate {
                id,
                summary: "x".repeat(200),
            })
            .collect();
        assert!(prompt("q", &huge, 40).is_none());
    }

    #[test]
    fn strict_parse_accepts_only_distinct_results_as_many_as_asked() {
        assert_eq!(parse_pick("{\"top\":[2,0,1]}", 3, 3), Ok(vec![2, 0, 1]));
        assert_eq!(parse_pick("\n {\"top\": [4, 0]} \n", 5, 2), Ok(vec![4, 0]));
        assert_eq!(parse_pick("{\"top\":[1,0]}", 2, 40), Ok(vec![1, 0]));
        assert_eq!(
            parse_pick("{\"top\":[2,0,0]}", 3, 3),
            Err(ReplyError::Duplicate(0))
        );
        assert_eq!(
            parse_pick("{\"top\":[2,0]}", 3, 3),
            Err(ReplyError::WrongCount { got: 2, want: 3 })
        );
        assert_eq!(
            parse_pick("{\"top\":[2,0,1]}", 5, 2),
            Err(ReplyError::WrongCount { got: 3, want: 2 })
        );
        assert_eq!(
            parse_pick("{\"top\":[3,0,1]}", 3, 3),
            Err(ReplyError::OutOfRange(3, 2))
        );
        for bad in [
            "Here you go: {\"top\":[0,1]}",
            "{\"top\":[0,1]} hope this helps",
            "```json\n{\"top\":[0,1]}\n```",
            "[0,1]",
            "{\"order\":[0,1]}",
            "{\"top\":[0,1],\"why\":\"x\"}",
            "{\"top\":[0,-1]}",
            "{\"top\":[0,1.5]}",
            "{\"top\":\"0,1\"}",
            "",
        ] {
            assert!(
                matches!(parse_pick(bad, 2, 2), Err(ReplyError::NotAPick(_))),
                "{bad:?}"
            );
        }
    }
}
