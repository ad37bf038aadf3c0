//! BM25 over the history's own postings (`postings`: a term's count in each message,
//! `messages.length`, `index_totals`), scored here in Rust so every backend ranks alike. A
//! conversation scores as its best message; its snippet is cut from that message around the
//! first query term.

use std::collections::HashMap;

use pith_history::terms;
use rusqlite::{Connection, OptionalExtension, params};

use crate::sqlite::StoreError;

/// BM25's term-frequency saturation.
const K1: f64 = 1.2;
/// BM25's length normalisation.
const B: f64 = 0.75;
/// Query terms used at most (the rest of a pasted paragraph adds cost, not precision).
const MAX_QUERY_TERMS: usize = 16;
/// Characters of snippet around the match.
const SNIPPET_CHARS: usize = 200;

/// A conversation a search found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hit {
    /// The conversation.
    pub id: String,
    /// Its session id.
    pub session_id: String,
    /// Its client.
    pub client: String,
    /// When it started.
    pub started_ms: i64,
    /// Its BM25 score (its best message's).
    pub score: f64,
    /// Where in it the best message is.
    pub position: u64,
    /// That message's role.
    pub role: String,
    /// Text of that message around the first query term.
    pub snippet: String,
}

/// A message that matched, with the conversation it is in.
struct Scored {
    conversation: String,
    score: f64,
}

pub(super) fn search(
    conn: &Connection,
    account: &str,
    query: &str,
    limit: usize,
) -> Result<Vec<Hit>, StoreError> {
    let mut query_terms = terms::query(query);
    query_terms.truncate(MAX_QUERY_TERMS);
    let totals: Option<(f64, f64)> = conn
        .query_row(
            "SELECT documents, total_length FROM index_totals WHERE account = ?1",
            params![account],
            |r| Ok((r.get::<_, i64>(0)? as f64, r.get::<_, i64>(1)? as f64)),
        )
        .optional()?;
    let Some((documents, total_length)) = totals.filter(|(n, _)| *n > 0.0) else {
        return Ok(Vec::new());
    };
    let average_length = (total_length / documents).max(1.0);
    let mut messages: HashMap<i64, Scored> = HashMap::new();
    let mut postings = conn.prepare_cached(
        "SELECT p.message_id, p.tf, m.length, m.conversation_id
         FROM postings p
         JOIN messages m ON m.id = p.message_id
         JOIN conversations c ON c.id = m.conversation_id
         WHERE p.term = ?1 AND c.account = ?2 AND c.trashed_ms IS NULL",
    )?;
    for term in &query_terms {
        let rows: Vec<(i64, f64, f64, String)> = postings
            .query_map(params![term, account], |r| {
                Ok((
                    r.get(0)?,
                    f64::from(r.get::<_, u32>(1)?),
                    f64::from(r.get::<_, u32>(2)?),
                    r.get(3)?,
                ))
            })?
            .collect::<Result<_, _>>()?;
        let df = rows.len() as f64;
        let idf = (1.0 + (documents - df + 0.5).max(0.0) / (df + 0.5)).ln();
        for (message, tf, length, conversation) in rows {
            let norm = K1 * (1.0 - B + B * length / average_length);
            let score = idf * tf * (K1 + 1.0) / (tf + norm);
            messages
                .entry(message)
                .or_insert(Scored {
                    conversation,
                    score: 0.0,
                })
                .score += score;
        }
    }
    // Each conversation's best message.
    let mut best: HashMap<String, (f64, i64)> = HashMap::new();
    for (message, scored) in messages {
        let entry = best
            .entry(scored.conversation)
            .or_insert((f64::MIN, message));
        if scored.score > entry.0 || (scored.score == entry.0 && message < entry.1) {
            *entry = (scored.score, message);
        }
    }
    let mut ranked: Vec<(String, f64, i64)> =
        best.into_iter().map(|(c, (s, m))| (c, s, m)).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(limit);
    let mut detail = conn.prepare_cached(
        "SELECT c.session_id, c.client, c.started_ms, m.position, m.role, m.body
         FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE m.id = ?1",
    )?;
    let mut hits = Vec::with_capacity(ranked.len());
    for (id, score, message) in ranked {
        let (session_id, client, started_ms, position, role, body): (
            String,
            String,
            i64,
            u64,
            String,
            String,
        ) = detail.query_row(params![message], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                super::count(r, 3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?;
        hits.push(Hit {
            id,
            session_id,
            client,
            started_ms,
            score,
            position,
            role,
            snippet: snippet(&body, &query_terms),
        });
    }
    Ok(hits)
}

/// About [`SNIPPET_CHARS`] characters of `body` around the first query term, on one line.
fn snippet(body: &str, query_terms: &[String]) -> String {
    let lower = body.to_lowercase();
    // Lowercasing can change byte lengths; find the term's character offset instead.
    let at_char = query_terms
        .iter()
        .filter_map(|t| lower.find(t.as_str()).map(|b| lower[..b].chars().count()))
        .min()
        .unwrap_or(0);
    let start = at_char.saturating_sub(SNIPPET_CHARS / 4);
    let chars: Vec<char> = body.chars().collect();
    let end = (start + SNIPPET_CHARS).min(chars.len());
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.extend(
        chars[start.min(chars.len())..end]
            .iter()
            .map(|c| if c.is_control() { ' ' } else { *c }),
    );
    if end < chars.len() {
        out.push('…');
    }
    out
}
