//! Conversation history on SQLite: conversations and their messages (recorded by the proxy or
//! imported from session files), search over them (BM25 on this module's own postings), the
//! candidate filters, deletion only through a signed filter token, the trash and its purge.
//!
//! The rules that decide what a message is and what a token says are `pith-history`'s; this
//! module runs the queries. Every query is scoped by account: an account never sees or selects
//! another's conversations.

mod schema;
mod search;

use std::path::Path;

use pith_history::import::Imported;
use pith_history::token::{Claims, TokenError, TokenKey, VERSION};
use pith_history::{AgentType, Filter, NewMessage, preview, terms};
use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

pub use search::Hit;

use crate::sqlite::{self, StoreError};

/// Bytes of a message's text kept and indexed (a huge tool output is kept by its start).
pub const MAX_BODY: usize = 16 << 10;
/// Candidates a selection returns (and signs) at most.
pub const MAX_CANDIDATES: usize = 500;
/// Candidates a selection returns unless asked for fewer or more.
pub const DEFAULT_CANDIDATES: usize = 50;

/// A history operation that failed: the store, or a refused token.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The filter token was refused; nothing was changed.
    #[error(transparent)]
    Token(#[from] TokenError),
}

impl From<rusqlite::Error> for HistoryError {
    fn from(e: rusqlite::Error) -> Self {
        HistoryError::Store(StoreError::Sql(e))
    }
}

/// Where a conversation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Recorded by the proxy as the session's requests passed.
    Proxy,
    /// Read from a client's session file.
    Import,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Proxy => "proxy",
            Source::Import => "import",
        }
    }
}

/// One proxied exchange, as the proxy hands it to history: the conversation a request carried
/// and the reply it got.
#[derive(Debug, Clone)]
pub struct Turn {
    /// The account (a local install: `local`).
    pub account: String,
    /// The client, by the ledger's name for it.
    pub client: String,
    /// The session id the ledger derived.
    pub session_id: String,
    /// Which kind of agent it is.
    pub agent_type: AgentType,
    /// When the request arrived.
    pub ts_ms: i64,
    /// The request's messages, in order (system and developer messages left out).
    pub messages: Vec<NewMessage>,
    /// The assistant's reply, when one was read.
    pub reply: Option<NewMessage>,
}

/// A conversation as listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Conversation {
    /// Its id (`c-` and 16 hex digits).
    pub id: String,
    /// Its account.
    pub account: String,
    /// Which kind of agent produced it.
    pub agent_type: String,
    /// `proxy` or `import`.
    pub source: String,
    /// The client.
    pub client: String,
    /// The client's session id.
    pub session_id: String,
    /// When it started (ms since the epoch).
    pub started_ms: i64,
    /// When it was trashed, if it is in the trash.
    pub trashed_ms: Option<i64>,
    /// Messages it holds.
    pub messages: u64,
    /// Of those, the assistant's.
    pub assistant_messages: u64,
    /// Of those, typed by a person.
    pub real_user_messages: u64,
    /// The first real user message's preview.
    pub first_user_preview: Option<String>,
}

/// A message as shown.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Its place in the conversation, from 0.
    pub position: u64,
    /// `user`, `assistant` or `tool`.
    pub role: String,
    /// Typed by a person.
    pub real_user: bool,
    /// Its first characters.
    pub preview: String,
    /// When it was said.
    pub ts_ms: i64,
}

/// One candidate of a selection.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// The conversation.
    pub id: String,
    /// Its session id.
    pub session_id: String,
    /// Its assistant messages.
    pub assistant_msg_count: u64,
    /// Its messages typed by a person.
    pub real_user_msg_count: u64,
    /// Its first real user message's preview.
    pub first_user_msg_preview: Option<String>,
    /// When it was trashed (candidates are never in the trash: always `None`).
    pub trashed_at: Option<i64>,
}

/// What a selection found, and the token that lets exactly these be deleted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidates {
    /// The filter run.
    pub filter: Filter,
    /// The agent type it was narrowed to.
    pub agent_type: Option<AgentType>,
    /// Conversations matching, in all.
    pub matched: u64,
    /// Of those, returned here (and signed into the token).
    pub sampled: u64,
    /// The returned ones, oldest first.
    pub items: Vec<Candidate>,
    /// The signed token for `memory_delete`.
    pub filter_token: String,
    /// A dry run's token never deletes.
    pub dry_run: bool,
}

/// A conversation a delete or restore left alone, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// The conversation.
    pub id: String,
    /// Why it was left alone.
    pub reason: String,
}

/// What a delete or restore changed: the rows actually changed, and the rest with reasons.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Changed {
    /// Conversations changed (trashed, or restored).
    pub changed: Vec<String>,
    /// Conversations left alone.
    pub skipped: Vec<Skipped>,
}

/// What a purge removed, per kind of row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Purged {
    /// Conversations deleted.
    pub conversations: u64,
    /// Messages deleted.
    pub messages: u64,
    /// Search index rows deleted.
    pub index_rows: u64,
}

/// What an import did to one session file's conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportOutcome {
    /// The conversation was new.
    pub created: bool,
    /// Messages added (0 on a re-import of an unchanged file).
    pub added: usize,
}

/// The history database.
pub struct History {
    conn: Connection,
}

/// The SQL of each filter's predicate over a conversation `c`: the canonical query, run when
/// candidates are found and again for each id when they are deleted. It counts the messages
/// themselves, not a counter kept beside them.
fn predicate(filter: Filter) -> &'static str {
    match filter {
        Filter::Empty => "(SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) = 0",
        Filter::SingleAssistant => {
            "(SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) = 1
             AND (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id
                  AND m.role = 'assistant') = 1"
        }
    }
}

/// The columns of [`Conversation`] over `c`, in [`conversation_row`]'s order.
const CONVERSATION_COLUMNS: &str = "c.id, c.account, c.agent_type, c.source, c.client,
    c.session_id, c.started_ms, c.trashed_ms,
    (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id),
    (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id AND m.role = 'assistant'),
    (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id AND m.real_user = 1),
    (SELECT m.preview FROM messages m WHERE m.conversation_id = c.id AND m.real_user = 1
     ORDER BY m.position LIMIT 1)";

fn conversation_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Conversation> {
    Ok(Conversation {
        id: row.get(0)?,
        account: row.get(1)?,
        agent_type: row.get(2)?,
        source: row.get(3)?,
        client: row.get(4)?,
        session_id: row.get(5)?,
        started_ms: row.get(6)?,
        trashed_ms: row.get(7)?,
        messages: count(row, 8)?,
        assistant_messages: count(row, 9)?,
        real_user_messages: count(row, 10)?,
        first_user_preview: row.get(11)?,
    })
}

/// A conversation's id: the same session of the same client and source in the same account
/// always gets the same id, so recording and importing are idempotent.
fn conversation_id(account: &str, source: Source, client: &str, session_id: &str) -> String {
    let mut hash = Sha256::new();
    for part in [account, source.as_str(), client, session_id] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let digest = hash.finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("c-{hex}")
}

fn message_hash(message: &NewMessage) -> String {
    let mut hash = Sha256::new();
    hash.update(message.role.as_bytes());
    hash.update([0]);
    hash.update(bounded(message.gist()).as_bytes());
    let digest = hash.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// `text` cut to [`MAX_BODY`] bytes on a character boundary.
fn bounded(text: &str) -> &str {
    if text.len() <= MAX_BODY {
        return text;
    }
    let mut end = MAX_BODY;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl History {
    /// Open (creating if needed, 0600 in a 0700 directory) the history at `path`.
    pub fn open(path: &Path) -> Result<History, StoreError> {
        Ok(History {
            conn: sqlite::open(path, schema::MIGRATIONS)?,
        })
    }

    /// Open the history at `path` to read it, changing nothing.
    pub fn open_read_only(path: &Path) -> Result<History, StoreError> {
        Ok(History {
            conn: sqlite::open_read_only(
                path,
                schema::MIGRATIONS,
                "run any `pith history` command that writes (import) to upgrade it",
            )?,
        })
    }

    /// A new, empty history in memory (tests, benchmarks).
    pub fn open_in_memory() -> Result<History, StoreError> {
        Ok(History {
            conn: sqlite::open_in_memory(schema::MIGRATIONS)?,
        })
    }

    /// Record proxied exchanges in one transaction. A turn appends the request's messages the
    /// conversation does not hold yet, then the reply; a request that carries fewer messages
    /// than the conversation holds (a retry, a rewind) or starts with another first message
    /// (a side call in the same session) adds nothing. Returns the messages added.
    pub fn record(&mut self, turns: &[Turn]) -> Result<usize, StoreError> {
        let tx = self.conn.transaction()?;
        let mut added = 0;
        for turn in turns {
            let id = ensure_conversation(
                &tx,
                &turn.account,
                Source::Proxy,
                &turn.client,
                &turn.session_id,
                turn.agent_type,
                turn.ts_ms,
            )?;
            let (held, first_hash): (u64, Option<String>) = tx.query_row(
                "SELECT (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id),
                        c.first_hash
                 FROM conversations c WHERE c.id = ?1",
                params![id],
                |r| Ok((count(r, 0)?, r.get(1)?)),
            )?;
            if let (Some(first), Some(held_first)) = (turn.messages.first(), &first_hash)
                && message_hash(first) != *held_first
            {
                continue;
            }
            let held = usize::try_from(held).unwrap_or(usize::MAX);
            if turn.messages.len() < held {
                continue;
            }
            let new = turn.messages[held..].iter().chain(turn.reply.iter());
            for (position, message) in (held..).zip(new) {
                insert_message(&tx, &turn.account, &id, position, message)?;
                added += 1;
            }
            if first_hash.is_none()
                && let Some(first) = turn.messages.first().or(turn.reply.as_ref())
            {
                tx.execute(
                    "UPDATE conversations SET first_hash = ?2 WHERE id = ?1",
                    params![id, message_hash(first)],
                )?;
            }
            tx.execute(
                "UPDATE conversations SET updated_ms = ?2 WHERE id = ?1",
                params![id, turn.ts_ms],
            )?;
        }
        tx.commit()?;
        Ok(added)
    }

    /// Import one session file's conversation: created on first import (even with no
    /// messages), and on a later one given the messages the file gained since. Re-importing
    /// an unchanged file adds nothing.
    pub fn import(
        &mut self,
        account: &str,
        agent_type: AgentType,
        imported: &Imported,
    ) -> Result<ImportOutcome, StoreError> {
        let tx = self.conn.transaction()?;
        let id = conversation_id(
            account,
            Source::Import,
            imported.client,
            &imported.session_id,
        );
        let existed: bool = tx
            .query_row(
                "SELECT 1 FROM conversations WHERE id = ?1",
                params![id],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        ensure_conversation(
            &tx,
            account,
            Source::Import,
            imported.client,
            &imported.session_id,
            agent_type,
            imported.started_ms,
        )?;
        let held: u64 = tx.query_row(
            "SELECT COUNT(*) FROM messages WHERE conversation_id = ?1",
            params![id],
            |r| count(r, 0),
        )?;
        let held = usize::try_from(held).unwrap_or(usize::MAX);
        let mut added = 0;
        for (position, message) in imported.messages.iter().enumerate().skip(held) {
            insert_message(&tx, account, &id, position, message)?;
            added += 1;
        }
        tx.commit()?;
        Ok(ImportOutcome {
            created: !existed,
            added,
        })
    }

    /// The account's conversations, newest first: those in the trash when `trashed`, else
    /// the others.
    pub fn list(
        &self,
        account: &str,
        trashed: bool,
        limit: usize,
    ) -> Result<Vec<Conversation>, StoreError> {
        let sql = format!(
            "SELECT {CONVERSATION_COLUMNS} FROM conversations c
             WHERE c.account = ?1 AND (c.trashed_ms IS NOT NULL) = ?2
             ORDER BY c.started_ms DESC, c.id LIMIT ?3"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(
            params![account, trashed, limit_sql(limit)],
            conversation_row,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One of the account's conversations and its messages (`None`: no such id here).
    pub fn show(
        &self,
        account: &str,
        id: &str,
    ) -> Result<Option<(Conversation, Vec<Message>)>, StoreError> {
        let sql = format!(
            "SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE c.account = ?1 AND c.id = ?2"
        );
        let Some(conversation) = self
            .conn
            .query_row(&sql, params![account, id], conversation_row)
            .optional()?
        else {
            return Ok(None);
        };
        let mut stmt = self.conn.prepare_cached(
            "SELECT position, role, real_user, preview, ts_ms FROM messages
             WHERE conversation_id = ?1 ORDER BY position",
        )?;
        let messages = stmt
            .query_map(params![id], |r| {
                Ok(Message {
                    position: count(r, 0)?,
                    role: r.get(1)?,
                    real_user: r.get(2)?,
                    preview: r.get(3)?,
                    ts_ms: r.get(4)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(Some((conversation, messages)))
    }

    /// Select candidates with `filter` (and `agent_type`, when given) among the account's
    /// conversations not in the trash, oldest first, at most `limit`; and sign a token over
    /// exactly the returned ids, good for `ttl_ms`.
    #[expect(
        clippy::too_many_arguments,
        reason = "each is one field of the selection and its token"
    )]
    pub fn find_candidates(
        &self,
        key: &TokenKey,
        account: &str,
        filter: Filter,
        agent_type: Option<AgentType>,
        limit: usize,
        dry_run: bool,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Candidates, StoreError> {
        let limit = limit.clamp(1, MAX_CANDIDATES);
        let agent = agent_type.map(AgentType::as_str);
        let scope = format!(
            "c.account = ?1 AND c.trashed_ms IS NULL AND (?2 IS NULL OR c.agent_type = ?2)
             AND {}",
            predicate(filter)
        );
        let matched: u64 = self.conn.query_row(
            &format!("SELECT COUNT(*) FROM conversations c WHERE {scope}"),
            params![account, agent],
            |r| count(r, 0),
        )?;
        let sql = format!(
            "SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE {scope}
             ORDER BY c.started_ms, c.id LIMIT ?3"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let items: Vec<Candidate> = stmt
            .query_map(params![account, agent, limit_sql(limit)], conversation_row)?
            .map(|r| {
                r.map(|c| Candidate {
                    id: c.id,
                    session_id: c.session_id,
                    assistant_msg_count: c.assistant_messages,
                    real_user_msg_count: c.real_user_messages,
                    first_user_msg_preview: c.first_user_preview,
                    trashed_at: c.trashed_ms,
                })
            })
            .collect::<Result<_, _>>()?;
        let claims = Claims {
            v: VERSION,
            account: account.to_owned(),
            filter,
            agent_type,
            ids: items.iter().map(|c| c.id.clone()).collect(),
            iat: now_ms,
            exp: now_ms.saturating_add(ttl_ms),
            dry_run,
        };
        Ok(Candidates {
            filter,
            agent_type,
            matched,
            sampled: items.len() as u64,
            items,
            filter_token: key.sign(&claims),
            dry_run,
        })
    }

    /// Trash the conversations a filter token selected (narrowed to `ids` when given: ids
    /// outside the token are skipped, never added). The token's signature, expiry, account and
    /// dry-run flag are checked first; then, inside one transaction, each id's filter predicate
    /// is run again and only those that still match are trashed.
    pub fn delete(
        &mut self,
        key: &TokenKey,
        account: &str,
        token: &str,
        ids: Option<&[String]>,
        now_ms: i64,
    ) -> Result<Changed, HistoryError> {
        let claims = key.verify_for_delete(token, account, now_ms)?;
        let mut outcome = Changed::default();
        let chosen: Vec<String> = match ids {
            None => claims.ids.clone(),
            Some(ids) => {
                let mut chosen = Vec::new();
                for id in ids {
                    if !claims.ids.contains(id) {
                        outcome.skipped.push(Skipped {
                            id: id.clone(),
                            reason:
                                "not in the token's selection (ids may narrow it, never extend it)"
                                    .into(),
                        });
                    } else if !chosen.contains(id) {
                        chosen.push(id.clone());
                    }
                }
                chosen
            }
        };
        let agent = claims.agent_type.map(AgentType::as_str);
        let tx = self.conn.transaction()?;
        {
            let check = format!(
                "SELECT c.trashed_ms, c.agent_type,
                        (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id),
                        {} AS matches
                 FROM conversations c WHERE c.id = ?1 AND c.account = ?2",
                predicate_value(claims.filter)
            );
            let mut check = tx.prepare(&check)?;
            let mut trash = tx.prepare(&format!(
                "UPDATE conversations SET trashed_ms = ?3
                 WHERE id = ?1 AND account = ?2 AND trashed_ms IS NULL
                   AND (?4 IS NULL OR agent_type = ?4)
                   AND id IN (SELECT c.id FROM conversations c WHERE c.id = ?1 AND {})",
                predicate(claims.filter)
            ))?;
            for id in chosen {
                let state: Option<(Option<i64>, String, u64, bool)> = check
                    .query_row(params![id, account], |r| {
                        Ok((r.get(0)?, r.get(1)?, count(r, 2)?, r.get(3)?))
                    })
                    .optional()?;
                let reason = match state {
                    None => Some("no such conversation in this account".to_owned()),
                    Some((Some(_), ..)) => Some("already in the trash".to_owned()),
                    Some((None, agent_type, _, _)) if agent.is_some_and(|a| a != agent_type) => {
                        Some(format!("its agent type is now {agent_type}"))
                    }
                    Some((None, _, messages, false)) => Some(format!(
                        "no longer matches filter {} (it has {messages} messages now)",
                        claims.filter
                    )),
                    Some((None, _, _, true)) => None,
                };
                if let Some(reason) = reason {
                    outcome.skipped.push(Skipped { id, reason });
                    continue;
                }
                if trash.execute(params![id, account, now_ms, agent])? == 1 {
                    outcome.changed.push(id);
                } else {
                    outcome.skipped.push(Skipped {
                        id,
                        reason: "changed while it was being trashed".into(),
                    });
                }
            }
        }
        tx.commit()?;
        Ok(outcome)
    }

    /// Take the account's conversations `ids` out of the trash.
    pub fn restore(&mut self, account: &str, ids: &[String]) -> Result<Changed, StoreError> {
        let tx = self.conn.transaction()?;
        let mut outcome = Changed::default();
        for id in ids {
            let trashed: Option<Option<i64>> = tx
                .query_row(
                    "SELECT trashed_ms FROM conversations WHERE id = ?1 AND account = ?2",
                    params![id, account],
                    |r| r.get(0),
                )
                .optional()?;
            let reason = match trashed {
                None => "no such conversation in this account",
                Some(None) => "not in the trash",
                Some(Some(_)) => {
                    tx.execute(
                        "UPDATE conversations SET trashed_ms = NULL WHERE id = ?1 AND account = ?2",
                        params![id, account],
                    )?;
                    outcome.changed.push(id.clone());
                    continue;
                }
            };
            outcome.skipped.push(Skipped {
                id: id.clone(),
                reason: reason.into(),
            });
        }
        tx.commit()?;
        Ok(outcome)
    }

    /// The account's conversations trashed before `cutoff_ms`: what a purge would delete.
    pub fn purgeable(
        &self,
        account: &str,
        cutoff_ms: i64,
    ) -> Result<Vec<Conversation>, StoreError> {
        let sql = format!(
            "SELECT {CONVERSATION_COLUMNS} FROM conversations c
             WHERE c.account = ?1 AND c.trashed_ms IS NOT NULL AND c.trashed_ms < ?2
             ORDER BY c.trashed_ms, c.id"
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(params![account, cutoff_ms], conversation_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Delete for good the account's conversations trashed before `cutoff_ms`, with their
    /// messages and their search index rows, in one transaction. The only hard delete.
    pub fn purge(&mut self, account: &str, cutoff_ms: i64) -> Result<Purged, StoreError> {
        let tx = self.conn.transaction()?;
        let doomed = "SELECT id FROM conversations
                      WHERE account = ?1 AND trashed_ms IS NOT NULL AND trashed_ms < ?2";
        let (documents, length): (i64, i64) = tx.query_row(
            "SELECT COUNT(*), COALESCE(SUM(length), 0) FROM conversations
             WHERE account = ?1 AND trashed_ms IS NOT NULL AND trashed_ms < ?2",
            params![account, cutoff_ms],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
        )?;
        let index_rows = tx.execute(
            "DELETE FROM postings WHERE conversation_seq IN
             (SELECT seq FROM conversations
              WHERE account = ?1 AND trashed_ms IS NOT NULL AND trashed_ms < ?2)",
            params![account, cutoff_ms],
        )?;
        let messages = tx.execute(
            &format!("DELETE FROM messages WHERE conversation_id IN ({doomed})"),
            params![account, cutoff_ms],
        )?;
        let conversations = tx.execute(
            "DELETE FROM conversations
             WHERE account = ?1 AND trashed_ms IS NOT NULL AND trashed_ms < ?2",
            params![account, cutoff_ms],
        )?;
        tx.execute(
            "UPDATE index_totals SET documents = documents - ?2, total_length = total_length - ?3
             WHERE account = ?1",
            params![account, documents, length],
        )?;
        tx.commit()?;
        Ok(Purged {
            conversations: conversations as u64,
            messages: messages as u64,
            index_rows: index_rows as u64,
        })
    }

    /// Search the account's conversations not in the trash: BM25 over message text, the best
    /// `limit` conversations, each with a snippet of its best message.
    pub fn search(&self, account: &str, query: &str, limit: usize) -> Result<Vec<Hit>, StoreError> {
        search::search(&self.conn, account, query, limit)
    }

    /// Search index rows holding `term` (tests: a purge leaves none behind).
    pub fn index_rows_for(&self, term: &str) -> Result<u64, StoreError> {
        Ok(self.conn.query_row(
            "SELECT COUNT(*) FROM postings WHERE term = ?1",
            params![term.to_lowercase()],
            |r| count(r, 0),
        )?)
    }
}

/// The predicate as a 0/1 value over `c` (what [`predicate`] says, as a column).
fn predicate_value(filter: Filter) -> String {
    format!("CASE WHEN {} THEN 1 ELSE 0 END", predicate(filter))
}

/// A count column (never negative) as a `u64`.
fn count(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<u64> {
    Ok(u64::try_from(row.get::<_, i64>(index)?).unwrap_or(0))
}

fn limit_sql(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The conversation's id, creating it when new.
fn ensure_conversation(
    tx: &rusqlite::Transaction<'_>,
    account: &str,
    source: Source,
    client: &str,
    session_id: &str,
    agent_type: AgentType,
    started_ms: i64,
) -> Result<String, StoreError> {
    let id = conversation_id(account, source, client, session_id);
    let created = tx.execute(
        "INSERT INTO conversations
            (id, account, agent_type, source, client, session_id, started_ms, updated_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)
         ON CONFLICT (id) DO NOTHING",
        params![
            id,
            account,
            agent_type.as_str(),
            source.as_str(),
            client,
            session_id,
            started_ms
        ],
    )?;
    if created == 1 {
        tx.execute(
            "INSERT INTO index_totals (account, documents, total_length) VALUES (?1, 1, 0)
             ON CONFLICT (account) DO UPDATE SET documents = index_totals.documents + 1",
            params![account],
        )?;
    }
    Ok(id)
}

fn insert_message(
    tx: &rusqlite::Transaction<'_>,
    account: &str,
    conversation: &str,
    position: usize,
    message: &NewMessage,
) -> Result<(), StoreError> {
    let body = bounded(&message.text);
    let (counts, length) = terms::count(body);
    tx.prepare_cached(
        "INSERT INTO messages
            (conversation_id, position, role, real_user, preview, body, ts_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        conversation,
        i64::try_from(position).unwrap_or(i64::MAX),
        message.role,
        message.real_user,
        preview(bounded(message.gist())),
        body,
        message.ts_ms
    ])?;
    let seq: i64 = tx
        .prepare_cached(
            "UPDATE conversations SET length = length + ?2 WHERE id = ?1 RETURNING seq",
        )?
        .query_row(params![conversation, length], |r| r.get(0))?;
    let mut posting = tx.prepare_cached(
        "INSERT INTO postings (account, term, conversation_seq, tf) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (account, term, conversation_seq) DO UPDATE SET tf = postings.tf + ?4",
    )?;
    for (term, tf) in &counts {
        posting.execute(params![account, term, seq, tf])?;
    }
    tx.prepare_cached(
        "UPDATE index_totals SET total_length = total_length + ?2 WHERE account = ?1",
    )?
    .execute(params![account, length])?;
    Ok(())
}

#[cfg(test)]
mod tests;
