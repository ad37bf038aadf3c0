//! BERT's WordPiece tokenizer, read from a Hugging Face `tokenizer.json`: the normalizer
//! (`BertNormalizer`: clean the text, space out CJK ideographs, lower-case, strip accents), the
//! pre-tokenizer (`BertPreTokenizer`: split at white space and around each punctuation mark),
//! then greedy longest-match WordPiece with `##` continuations, framed as `[CLS] … [SEP]`.
//!
//! Written here rather than taken from the `tokenizers` crate: this is the whole of what the one
//! model pith runs needs (a few hundred lines against a large dependency tree), and its ids are
//! checked against the reference implementation's in `tests/wordpiece.rs`.

use std::collections::HashMap;

use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

/// Why a `tokenizer.json` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// Not JSON, or not the shape of a tokenizer file.
    #[error("not a tokenizer file: {0}")]
    Parse(#[from] serde_json::Error),
    /// A tokenizer, but not the BERT WordPiece kind pith reads.
    #[error("unsupported tokenizer: {0}")]
    Unsupported(String),
    /// A special token the model needs is not in the vocabulary.
    #[error("the vocabulary has no {0} token")]
    MissingToken(&'static str),
}

/// A BERT WordPiece tokenizer.
#[derive(Debug, Clone)]
pub struct WordPiece {
    vocab: HashMap<String, i64>,
    unk: i64,
    cls: i64,
    sep: i64,
    continuing: String,
    /// Words longer than this (in characters) are `[UNK]`.
    max_word_chars: usize,
    lowercase: bool,
    strip_accents: bool,
}

#[derive(serde::Deserialize)]
struct File {
    normalizer: Option<Normalizer>,
    model: Model,
}

#[derive(serde::Deserialize)]
struct Normalizer {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default = "yes")]
    lowercase: bool,
    strip_accents: Option<bool>,
}

fn yes() -> bool {
    true
}

#[derive(serde::Deserialize)]
struct Model {
    #[serde(rename = "type")]
    kind: String,
    unk_token: String,
    #[serde(default = "default_prefix")]
    continuing_subword_prefix: String,
    #[serde(default = "default_max_chars")]
    max_input_chars_per_word: usize,
    vocab: HashMap<String, i64>,
}

fn default_prefix() -> String {
    "##".to_owned()
}

fn default_max_chars() -> usize {
    100
}

impl WordPiece {
    /// The tokenizer described by the text of a `tokenizer.json`.
    pub fn from_json(text: &str) -> Result<WordPiece, TokenizerError> {
        let file: File = serde_json::from_str(text)?;
        if file.model.kind != "WordPiece" {
            return Err(TokenizerError::Unsupported(format!(
                "model type {:?}, not WordPiece",
                file.model.kind
            )));
        }
        let (lowercase, strip_accents) = match &file.normalizer {
            Some(n) if n.kind == "BertNormalizer" => {
                // As the reference does: accents are stripped when asked, and by default
                // whenever the text is lower-cased.
                (n.lowercase, n.strip_accents.unwrap_or(n.lowercase))
            }
            Some(n) => {
                return Err(TokenizerError::Unsupported(format!(
                    "normalizer {:?}, not BertNormalizer",
                    n.kind
                )));
            }
            None => (false, false),
        };
        let vocab = file.model.vocab;
        let id = |token: &'static str| {
            vocab
                .get(token)
                .copied()
                .ok_or(TokenizerError::MissingToken(token))
        };
        let unk = vocab
            .get(&file.model.unk_token)
            .copied()
            .ok_or(TokenizerError::MissingToken("[UNK]"))?;
        Ok(WordPiece {
            cls: id("[CLS]")?,
            sep: id("[SEP]")?,
            unk,
            vocab,
            continuing: file.model.continuing_subword_prefix,
            max_word_chars: file.model.max_input_chars_per_word,
            lowercase,
            strip_accents,
        })
    }

    /// The ids of `text` framed as `[CLS] … [SEP]`, at most `max_len` in all (the text's pieces
    /// past that are cut).
    pub fn encode(&self, text: &str, max_len: usize) -> Vec<i64> {
        let room = max_len.saturating_sub(2);
        let mut ids = Vec::with_capacity(room.min(64) + 2);
        ids.push(self.cls);
        'words: for word in pre_tokenize(&self.normalize(text)) {
            for id in self.pieces(&word) {
                if ids.len() > room {
                    break 'words;
                }
                ids.push(id);
            }
        }
        ids.push(self.sep);
        ids
    }

    /// `BertNormalizer`: control characters dropped, white space made a space, CJK ideographs
    /// spaced out, then lower case and accents stripped as configured.
    fn normalize(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        for c in text.chars() {
            if c == '\0' || c == '\u{fffd}' || is_control(c) {
                continue;
            }
            if is_whitespace(c) {
                out.push(' ');
            } else if is_cjk(c) {
                out.push(' ');
                out.push(c);
                out.push(' ');
            } else {
                out.push(c);
            }
        }
        if self.strip_accents {
            out = out
                .nfd()
                .filter(|c| {
                    c.general_category() != unicode_properties::GeneralCategory::NonspacingMark
                })
                .collect();
        }
        if self.lowercase {
            out = out.to_lowercase();
        }
        out
    }

    /// One word's WordPiece ids: the longest vocabulary entry from the start, then the longest
    /// `##` continuation, and so on; a word that cannot be covered is one `[UNK]`.
    fn pieces(&self, word: &str) -> Vec<i64> {
        if word.chars().count() > self.max_word_chars {
            return vec![self.unk];
        }
        let mut ids = Vec::new();
        let mut start = 0;
        let mut candidate = String::new();
        while start < word.len() {
            let mut end = word.len();
            let mut found = None;
            while start < end {
                candidate.clear();
                if start > 0 {
                    candidate.push_str(&self.continuing);
                }
                candidate.push_str(&word[start..end]);
                if let Some(&id) = self.vocab.get(&candidate) {
                    found = Some(id);
                    break;
                }
                // One character shorter.
                end = word[..end]
                    .char_indices()
                    .next_back()
                    .map_or(start, |(i, _)| i);
            }
            match found {
                Some(id) => {
                    ids.push(id);
                    start = end;
                }
                None => return vec![self.unk],
            }
        }
        ids
    }
}

/// `BertPreTokenizer`: words split at white space, each punctuation mark a word of its own.
fn pre_tokenize(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if is_whitespace(c) {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
        } else if is_punctuation(c) {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            words.push(c.to_string());
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

fn is_whitespace(c: char) -> bool {
    c.is_whitespace()
}

fn is_control(c: char) -> bool {
    if matches!(c, '\t' | '\n' | '\r') {
        return false;
    }
    matches!(
        c.general_category(),
        unicode_properties::GeneralCategory::Control
            | unicode_properties::GeneralCategory::Format
            | unicode_properties::GeneralCategory::PrivateUse
            | unicode_properties::GeneralCategory::Surrogate
            | unicode_properties::GeneralCategory::Unassigned
    )
}

/// ASCII's punctuation and symbols (BERT counts `$`, `+`, `^` and the like), and every Unicode
/// punctuation mark.
fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation() || c.general_category_group() == GeneralCategoryGroup::Punctuation
}

/// The CJK Unified Ideographs blocks BERT spaces out.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B820..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> WordPiece {
        let vocab: Vec<(&str, i64)> = vec![
            ("[PAD]", 0),
            ("[UNK]", 1),
            ("[CLS]", 2),
            ("[SEP]", 3),
            ("time", 4),
            ("##out", 5),
            ("(", 6),
            (")", 7),
            ("cafe", 8),
            ("_", 9),
            ("ms", 10),
        ];
        let vocab: serde_json::Map<String, serde_json::Value> = vocab
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.into()))
            .collect();
        let json = serde_json::json!({
            "normalizer": {"type": "BertNormalizer", "lowercase": true, "strip_accents": null},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": vocab},
        });
        WordPiece::from_json(&json.to_string()).unwrap()
    }

    #[test]
    fn words_split_at_punctuation_and_into_the_longest_pieces() {
        let t = tiny();
        assert_eq!(
            t.encode("Timeout(timeout_ms)", 64),
            [2, 4, 5, 6, 4, 5, 9, 10, 7, 3]
        );
        // Accents stripped with lower case; an uncovered word is one [UNK].
        assert_eq!(t.encode("CAFÉ zzz", 64), [2, 8, 1, 3]);
        // Cut to the length asked, still framed.
        assert_eq!(t.encode("timeout timeout", 4), [2, 4, 5, 3]);
        assert_eq!(t.encode("", 4), [2, 3]);
    }

    #[test]
    fn other_tokenizers_are_refused_by_name() {
        let err = WordPiece::from_json(
            r#"{"normalizer":null,"model":{"type":"BPE","unk_token":"x","vocab":{}}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("BPE"), "{err}");
    }
}
