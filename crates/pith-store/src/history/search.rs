//! BM25 over the history's own postings (`postings`: a term's count in each conversation,
//! `conversations.length`, `index_totals`), scored here in Rust so every backend ranks alike.
//! A conversation is the document: a common word is one posting per conversation, not one per
//! message, which keeps a search over 10,000 conversations to a few index ranges. The snippet
//! is cut from the first message holding the conversation's most selective matching term.

use pith_history::terms;

use super::db::{Db, values};
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

/// A conversation's score so far, and its most selective (highest idf) matching term, for the
/// snippet.
struct Scored {
    score: f64,
    best_term: usize,
    best_idf: f64,
    best_tf: f64,
}

pub(super) fn search(
    db: &Db,
    account: &str,
    query: &str,
    limit: usize,
) -> Result<Vec<Hit>, StoreError> {
    let mut query_terms = terms::query(query);
    query_terms.truncate(MAX_QUERY_TERMS);
    let totals = db.row(
        "SELECT documents, total_length FROM index_totals WHERE account = ?1",
        values![account],
        |r| Ok((r.int(0)? as f64, r.int(1)? as f64)),
    )?;
    let Some((documents, total_length)) = totals.filter(|(n, _)| *n > 0.0) else {
        return Ok(Vec::new());
    };
    if query_terms.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let average_length = (total_length / documents).max(1.0);
    let lengths = searchable_lengths(db, account)?;
    let corpus = Corpus {
        lengths: &lengths,
        documents,
        average_length,
    };
    let scores = score(db, account, &query_terms, &corpus)?;
    let ranked = best(scores, limit);
    let mut hits = Vec::with_capacity(ranked.len());
    for (seq, scored) in ranked {
        if let Some(hit) = hit(db, seq, scored, &query_terms)? {
            hits.push(hit);
        }
    }
    Ok(hits)
}

/// What BM25 needs of the account's conversations besides the postings.
struct Corpus<'a> {
    /// Each conversation's length by document number (0.0: not searchable).
    lengths: &'a [f64],
    documents: f64,
    average_length: f64,
}

/// The account's searchable conversations' lengths, indexed by document number.
fn searchable_lengths(db: &Db, account: &str) -> Result<Vec<f64>, StoreError> {
    // The account's searchable conversations (not in the trash) and their lengths, by document
    // number: `seq` is dense from 1 (SQLite's rowid; on PostgreSQL an identity a conversation
    // takes only when it is created), so arrays indexed by it replace maps (a common term
    // touches every conversation; hashing each posting cost more than reading it).
    let max_seq = db
        .row(
            "SELECT coalesce(max(seq), 0) FROM conversations",
            &[],
            |r| r.int(0),
        )?
        .unwrap_or(0);
    let slots = usize::try_from(max_seq).unwrap_or(0).saturating_add(1);
    // 0.0: not searchable (another account's, trashed, or empty).
    let mut lengths: Vec<f64> = vec![0.0; slots];
    db.each(
        "SELECT seq, length FROM conversations
         WHERE account = ?1 AND trashed_ms IS NULL AND length > 0",
        values![account],
        |row| {
            if let Some(slot) = usize::try_from(row.int(0)?)
                .ok()
                .and_then(|i| lengths.get_mut(i))
            {
                *slot = row.int(1)? as f64;
            }
            Ok(())
        },
    )?;
    Ok(lengths)
}

/// Each conversation's BM25 score over the query terms, by document number (`None`: no match).
fn score(
    db: &Db,
    account: &str,
    query_terms: &[String],
    corpus: &Corpus<'_>,
) -> Result<Vec<Option<Scored>>, StoreError> {
    let mut scores: Vec<Option<Scored>> = Vec::new();
    scores.resize_with(corpus.lengths.len(), || None);
    let mut matched: Vec<(usize, f64)> = Vec::new();
    for (t, term) in query_terms.iter().enumerate() {
        matched.clear();
        db.each(
            "SELECT conversation_seq, tf FROM postings WHERE account = ?1 AND term = ?2",
            values![account, term.as_str()],
            |row| {
                let seq = usize::try_from(row.int(0)?).unwrap_or(usize::MAX);
                matched.push((seq, row.int(1)? as f64));
                Ok(())
            },
        )?;
        let df = matched.len() as f64;
        let idf = (1.0 + (corpus.documents - df + 0.5).max(0.0) / (df + 0.5)).ln();
        for &(seq, tf) in &matched {
            let Some(&length) = corpus.lengths.get(seq).filter(|l| **l > 0.0) else {
                continue;
            };
            let norm = K1 * (1.0 - B + B * length / corpus.average_length);
            let part = idf * tf * (K1 + 1.0) / (tf + norm);
            let entry = scores[seq].get_or_insert(Scored {
                score: 0.0,
                best_term: t,
                best_idf: f64::MIN,
                best_tf: f64::MAX,
            });
            entry.score += part;
            // Ties go to the term the conversation holds fewer times: the more specific.
            if idf > entry.best_idf || (idf == entry.best_idf && tf < entry.best_tf) {
                entry.best_idf = idf;
                entry.best_tf = tf;
                entry.best_term = t;
            }
        }
    }
    Ok(scores)
}

/// The `limit` best-scored conversations, best first (ties by document number).
fn best(scores: Vec<Option<Scored>>, limit: usize) -> Vec<(i64, Scored)> {
    let mut ranked: Vec<(i64, Scored)> = scores
        .into_iter()
        .enumerate()
        .filter_map(|(seq, s)| Some((i64::try_from(seq).ok()?, s?)))
        .collect();
    let order = |a: &(i64, Scored), b: &(i64, Scored)| {
        b.1.score.total_cmp(&a.1.score).then_with(|| a.0.cmp(&b.0))
    };
    // The best `limit` first, then only those sorted.
    if ranked.len() > limit {
        ranked.select_nth_unstable_by(limit, order);
        ranked.truncate(limit);
    }
    ranked.sort_by(order);
    ranked
}

/// The hit for conversation `seq`, with its snippet; `None` if the conversation is gone.
fn hit(
    db: &Db,
    seq: i64,
    scored: Scored,
    query_terms: &[String],
) -> Result<Option<Hit>, StoreError> {
    let Some((id, session_id, client, started_ms)) = db.row(
        "SELECT id, session_id, client, started_ms FROM conversations WHERE seq = ?1",
        values![seq],
        |r| Ok((r.text(0)?, r.text(1)?, r.text(2)?, r.int(3)?)),
    )?
    else {
        return Ok(None);
    };
    // Terms are letters and digits only, so the pattern holds no wildcard of its own.
    let pattern = format!("%{}%", query_terms[scored.best_term]);
    let (position, role, body) = db
        .row(
            "SELECT position, role, body FROM messages
                 WHERE conversation_id = ?1 AND LOWER(body) LIKE ?2 ORDER BY position LIMIT 1",
            values![&id, &pattern],
            |r| Ok((r.count(0)?, r.text(1)?, r.text(2)?)),
        )?
        .unwrap_or_default();
    Ok(Some(Hit {
        id,
        session_id,
        client,
        started_ms,
        score: scored.score,
        position,
        role,
        snippet: snippet(&body, query_terms),
    }))
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
