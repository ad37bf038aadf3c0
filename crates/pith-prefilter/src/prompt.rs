//! What the model is asked and the strict reading of its answer; the same on both APIs
//! (`api.rs` wraps them).
//!
//! The model picks files, not lines: the candidates are grouped by file (a few of each file's
//! matching lines shown as evidence) and the model answers `{"files": [...]}` with the numbers
//! of the files that best answer the query. A small model chooses among a few dozen files far
//! better than among two hundred lines, the prompt is shorter (each path is written once), and
//! a file is what an agent opens next. The picked files' matching lines are then shown, in the
//! order the files were picked, up to the number of lines asked for.

use pith_search::Candidate;
use serde::Deserialize;
use serde_json::{Value, json};

/// Longest matched-line text put in the prompt (characters).
const PROMPT_LINE_CHARS: usize = 100;
/// Longest query put in the prompt (characters).
const PROMPT_QUERY_CHARS: usize = 300;
/// Matching lines shown per file in the prompt (the file's match count says how many more).
const PROMPT_LINES_PER_FILE: usize = 2;
/// Bytes per token assumed when sizing the context: code and paths tokenize at roughly 3-4
/// bytes per token, so 3 over-estimates slightly, which is the safe side (Ollama truncates a
/// prompt that does not fit, silently dropping candidates).
const BYTES_PER_TOKEN: usize = 3;
/// Tokens for the chat template and the reply's JSON punctuation.
const TOKEN_SLACK: usize = 256;
/// Output tokens per number in the reply (`12, ` is two to four tokens).
const TOKENS_PER_INDEX: usize = 4;
/// Smallest context requested (Ollama's own default on small GPUs is 4096).
const MIN_NUM_CTX: usize = 2048;
/// Largest context requested: beyond this a small local model gets slow, and the search is
/// better narrowed than ranked.
pub(crate) const MAX_NUM_CTX: usize = 32768;

const SYSTEM: &str = "You help a programmer find code. Given a question and the files whose \
lines match a search, pick the files that best answer the question. Reply with JSON only, \
exactly {\"files\": [...]}: the requested number of distinct file numbers, best first. No prose.";

/// What to send (the two messages, the answer's schema, the sizes asked for) and what is
/// needed to read the answer.
pub(crate) struct Prompt {
    pub(crate) system: &'static str,
    pub(crate) user: String,
    pub(crate) schema: Value,
    pub(crate) num_ctx: usize,
    pub(crate) num_predict: usize,
    /// Candidate ids per file, in the order the files are numbered in the prompt.
    files: Vec<Vec<usize>>,
    /// Files to pick.
    pick: usize,
    /// Lines to show at most.
    want: usize,
}

/// The prompt asking for the files that best answer `query`, as many as fill `want` lines at the
/// search's mean lines per file, with a JSON schema that constrains the answer to that many file numbers in range
/// (servers turn it into a grammar; distinctness is checked on reading). `None` when there is
/// nothing to pick or the prompt would need more than [`MAX_NUM_CTX`].
pub(crate) fn prompt(query: &str, candidates: &[Candidate], want: usize) -> Option<Prompt> {
    let mut files: Vec<Vec<usize>> = Vec::new();
    let mut paths: Vec<&str> = Vec::new();
    for (index, candidate) in candidates.iter().enumerate() {
        if paths.last() != Some(&candidate.path.as_str()) {
            paths.push(&candidate.path);
            files.push(Vec::new());
        }
        if let Some(lines) = files.last_mut() {
            lines.push(index);
        }
    }
    if files.is_empty() || want == 0 {
        return None;
    }
    // As many files as, at this search's lines per file, fill the lines to show.
    let pick = (want * files.len())
        .div_ceil(candidates.len())
        .clamp(1, files.len());
    let user = user_message(query, candidates, &paths, &files, pick);
    let last = files.len() - 1;
    let num_predict = pick * TOKENS_PER_INDEX + 32;
    let prompt_tokens = (SYSTEM.len() + user.len()).div_ceil(BYTES_PER_TOKEN);
    let needed = prompt_tokens + num_predict + TOKEN_SLACK;
    if needed > MAX_NUM_CTX {
        return None;
    }
    let num_ctx = needed.div_ceil(1024).saturating_mul(1024).max(MIN_NUM_CTX);
    let schema = json!({
        "type": "object",
        "properties": {
            "files": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": last},
                "minItems": pick,
                "maxItems": pick,
            },
        },
        "required": ["files"],
        "additionalProperties": false,
    });
    Some(Prompt {
        system: SYSTEM,
        user,
        schema,
        num_ctx,
        num_predict,
        files,
        pick,
        want,
    })
}

/// The question, each file with its first matching lines, and what to answer.
fn user_message(
    query: &str,
    candidates: &[Candidate],
    paths: &[&str],
    files: &[Vec<usize>],
    pick: usize,
) -> String {
    let query = one_line(query, PROMPT_QUERY_CHARS);
    let mut user = format!("Question: {query}\n\nFiles with matching lines:\n");
    for (number, (path, lines)) in paths.iter().zip(files).enumerate() {
        let count = lines.len();
        let matches = if count == 1 { "match" } else { "matches" };
        user.push_str(&format!(
            "[{number}] {} ({count} {matches})\n",
            one_line(path, 200)
        ));
        for &index in lines.iter().take(PROMPT_LINES_PER_FILE) {
            let candidate = &candidates[index];
            // `path:line: text` without the path, which heads the group.
            let rest = candidate
                .summary
                .strip_prefix(candidate.path.as_str())
                .and_then(|rest| rest.strip_prefix(':'))
                .unwrap_or(&candidate.summary);
            user.push_str(&format!("    {}\n", one_line(rest, PROMPT_LINE_CHARS)));
        }
    }
    let last = files.len() - 1;
    let what = if pick == 1 {
        "the number of the file".to_owned()
    } else {
        format!("the {pick} file numbers")
    };
    user.push_str(&format!(
        "\nQuestion: {query}\nAnswer {{\"files\": [...]}} with {what} (0-{last}) that best \
         answer the question, best first."
    ));
    user
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
    /// The message is not exactly `{"files": [non-negative integers]}`.
    #[error("answer is not {{\"files\": [file numbers]}}: {0}")]
    NotAPick(String),
    /// A file number appears twice.
    #[error("file {0} appears twice")]
    Duplicate(usize),
    /// A number is not a file.
    #[error("file {0} is out of range (0-{1})")]
    OutOfRange(usize, usize),
    /// Not as many files as asked for.
    #[error("{got} files picked, {want} asked for")]
    WrongCount {
        /// Files in the answer.
        got: usize,
        /// Files asked for.
        want: usize,
    },
}

/// The only accepted message: one JSON object with one key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Pick {
    files: Vec<usize>,
}

impl Prompt {
    /// Reads the model's message as a pick of exactly the asked number of distinct files, and
    /// nothing else in the message (whitespace aside); returns the candidate ids to show.
    pub(crate) fn parse(&self, content: &str) -> Result<Vec<usize>, ReplyError> {
        let pick: Pick = serde_json::from_str(content.trim())
            .map_err(|err| ReplyError::NotAPick(err.to_string()))?;
        let count = self.files.len();
        let mut seen = vec![false; count];
        for &file in &pick.files {
            match seen.get_mut(file) {
                None => return Err(ReplyError::OutOfRange(file, count.saturating_sub(1))),
                Some(true) => return Err(ReplyError::Duplicate(file)),
                Some(slot) => *slot = true,
            }
        }
        if pick.files.len() != self.pick {
            return Err(ReplyError::WrongCount {
                got: pick.files.len(),
                want: self.pick,
            });
        }
        Ok(self.lines_of(&pick.files))
    }

    /// The lines to show for the picked files: each file gets an even share of `want` first
    /// (in pick order), then what is left goes to the files with more lines, in pick order;
    /// shown grouped by file in pick order, each file's lines in line order.
    fn lines_of(&self, picked: &[usize]) -> Vec<usize> {
        let share = self.want.div_ceil(picked.len().max(1));
        let mut taken: Vec<usize> = picked
            .iter()
            .map(|&file| self.files[file].len().min(share))
            .collect();
        let mut left = self.want.saturating_sub(taken.iter().sum());
        for (slot, &file) in taken.iter_mut().zip(picked) {
            let more = (self.files[file].len() - *slot).min(left);
            *slot += more;
            left -= more;
        }
        let mut shown: Vec<usize> = picked
            .iter()
            .zip(&taken)
            .flat_map(|(&file, &n)| self.files[file].iter().take(n).copied())
            .collect();
        shown.truncate(self.want);
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` candidates in `files` files, in path order.
    fn candidates(n: usize, files: usize) -> Vec<Candidate> {
        let per_file = n.div_ceil(files);
        (0..n)
            .map(|id| {
                let path = format!("src/file_{}.rs", id / per_file);
                Candidate {
                    id,
                    summary: format!("{path}:{id}: let value_{id} = compute();"),
                    path,
                }
            })
            .collect()
    }

    #[test]
    fn the_prompt_groups_lines_by_file_and_constrains_the_answer() {
        let prompt = prompt("value", &candidates(150, 30), 20).unwrap();
        assert_eq!(prompt.num_ctx % 1024, 0);
        assert!(
            prompt.num_ctx * BYTES_PER_TOKEN >= prompt.system.len() + prompt.user.len(),
            "{} for {} bytes",
            prompt.num_ctx,
            prompt.user.len()
        );
        assert!(prompt.user.starts_with(
            "Question: value\n\nFiles with matching lines:\n[0] src/file_0.rs (5 matches)\n    \
             0: let value_0 = compute();\n    1: let value_1 = compute();\n[1] src/file_1.rs"
        ));
        assert!(
            !prompt.user.contains("2: let value_2"),
            "two lines per file"
        );
        assert!(prompt.user.contains("\n[29] src/file_29.rs (5 matches)\n"));
        assert!(prompt.user.ends_with(
            "Answer {\"files\": [...]} with the 4 file numbers (0-29) that best answer the \
             question, best first."
        ));
        let files = &prompt.schema["properties"]["files"];
        assert_eq!(files["minItems"], 4);
        assert_eq!(files["maxItems"], 4);
        assert_eq!(files["items"]["maximum"], 29);
        assert_eq!(prompt.num_predict, 4 * TOKENS_PER_INDEX + 32);
        let one = super::prompt("q", &candidates(2, 1), 40).unwrap();
        assert_eq!(one.num_ctx, MIN_NUM_CTX);
        assert_eq!(one.schema["properties"]["files"]["maxItems"], 1);
        assert!(one.user.contains("with the number of the file (0-0)"));
        // The ranker's largest list with long lines fits, above Ollama's small default.
        let long: Vec<Candidate> = (0..200)
            .map(|id| Candidate {
                id,
                path: format!("{}/f{id}.rs", "d".repeat(150)),
                summary: format!("{}/f{id}.rs:1: {}", "d".repeat(150), "y".repeat(200)),
            })
            .collect();
        let prompt = super::prompt("q", &long, 40).unwrap();
        assert!(
            prompt.num_ctx > 8192 && prompt.num_ctx <= MAX_NUM_CTX,
            "{}",
            prompt.num_ctx
        );
        assert!(super::prompt("q", &[], 40).is_none());
    }

    #[test]
    fn a_prompt_too_large_for_any_context_is_refused() {
        let huge: Vec<Candidate> = (0..2000)
            .map(|id| Candidate {
                id,
                path: format!("{}{id}", "p".repeat(200)),
                summary: "x".repeat(200),
            })
            .collect();
        assert!(prompt("q", &huge, 40).is_none());
    }

    #[test]
    fn strict_parse_accepts_only_distinct_files_as_many_as_asked() {
        // 12 candidates in 4 files of 3 lines; 6 lines wanted: 2 files picked.
        let prompt = prompt("q", &candidates(12, 4), 6).unwrap();
        assert_eq!(
            prompt.parse("{\"files\":[2,0]}"),
            Ok(vec![6, 7, 8, 0, 1, 2])
        );
        assert_eq!(
            prompt.parse("\n {\"files\": [3, 1]} \n"),
            Ok(vec![9, 10, 11, 3, 4, 5])
        );
        assert_eq!(
            prompt.parse("{\"files\":[2,2]}"),
            Err(ReplyError::Duplicate(2))
        );
        assert_eq!(
            prompt.parse("{\"files\":[2]}"),
            Err(ReplyError::WrongCount { got: 1, want: 2 })
        );
        assert_eq!(
            prompt.parse("{\"files\":[2,0,1]}"),
            Err(ReplyError::WrongCount { got: 3, want: 2 })
        );
        assert_eq!(
            prompt.parse("{\"files\":[4,0]}"),
            Err(ReplyError::OutOfRange(4, 3))
        );
        for bad in [
            "Here you go: {\"files\":[0,1]}",
            "{\"files\":[0,1]} hope this helps",
            "```json\n{\"files\":[0,1]}\n```",
            "[0,1]",
            "{\"top\":[0,1]}",
            "{\"files\":[0,1],\"why\":\"x\"}",
            "{\"files\":[0,-1]}",
            "{\"files\":[0,1.5]}",
            "{\"files\":\"0,1\"}",
            "",
        ] {
            assert!(
                matches!(prompt.parse(bad), Err(ReplyError::NotAPick(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn picked_files_share_the_lines_shown() {
        // Files of 8, 1 and 6 lines; 10 lines wanted, 2 files picked.
        let mut all = Vec::new();
        for (file, n) in [(0, 8), (1, 1), (2, 6)] {
            for line in 0..n {
                let id = all.len();
                let path = format!("f{file}.rs");
                all.push(Candidate {
                    id,
                    summary: format!("{path}:{line}: x"),
                    path,
                });
            }
        }
        let prompt = prompt("q", &all, 10).unwrap();
        // Five each, in pick order.
        assert_eq!(
            prompt.parse("{\"files\":[2,0]}").unwrap(),
            vec![9, 10, 11, 12, 13, 0, 1, 2, 3, 4]
        );
        // The one-line file leaves its share to the other.
        assert_eq!(
            prompt.parse("{\"files\":[1,0]}").unwrap(),
            vec![8, 0, 1, 2, 3, 4, 5, 6, 7]
        );
    }
}
