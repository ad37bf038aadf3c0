//! Conversation history on SQLite, or a team's PostgreSQL (both behind [`db`], so every query
//! is written once): conversations and their messages (recorded by the proxy or imported from
//! session files), search over them (BM25 on this module's own postings), the candidate
//! filters, deletion only through a signed filter token, the trash and its purge.
//!
//! The rules that decide what a message is and what a token says are `pith-history`'s; this
//! module runs the queries. Every query is scoped by account: an account never sees or selects
//! another's conversations.
//!
//! A delete rechecks each id inside its transaction (in the token's set, in the account, not
//! trashed, of the token's agent type, matching the filter's predicate now) and skips the rest
//! with a reason; the token's hash is kept (`used_tokens`, until it expires) in the same
//! transaction, so a token deletes once. Recording appends only the messages a conversation
//! does not hold yet: a retry, a rewind or a side call adds nothing. Purge is the only hard
//! delete.

pub(crate) mod db;
mod schema;
mod search;
pub mod ship;

use std::path::Path;

use pith_history::import::Imported;
use pith_history::token::{Claims, TokenError, TokenKey, VERSION};
use pith_history::{AgentType, Filter, NewMessage, preview, terms};
use sha2::{Digest, Sha256};

pub use search::Hit;

use crate::postgres::{Pg, PgError, StoreUrl};
use crate::sqlite::{self, StoreError};
use db::{Db, PgSession, Row, values};

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

    fn parse(s: &str) -> Option<Source> {
        match s {
            "proxy" => Some(Source::Proxy),
            "import" => Some(Source::Import),
            _ => None,
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
    /// The excerpts pith sent in place of kept outputs (by call id) in this request: each is
    /// kept beside its output the first time it is sent.
    pub excerpts: Vec<SentExcerpt>,
}

/// An excerpt pith sent in place of a tool output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentExcerpt {
    /// The call the output answered.
    pub call_id: String,
    /// The excerpt as sent.
    pub text: String,
}

/// A kept tool output a request first sent as an excerpt: what the dashboard's request page
/// shows beside the output's size.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShortenedOutput {
    /// The call the output answered.
    pub call_id: String,
    /// The whole output's length, in characters.
    pub chars: u64,
    /// The excerpt's length, in characters.
    pub excerpt_chars: u64,
    /// The excerpt sent in its place.
    pub excerpt: String,
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

/// One message of a request's turn, with its text (`History::turn`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnMessage {
    /// Its place in the conversation, from 0.
    pub position: u64,
    /// `user`, `assistant` or `tool`.
    pub role: String,
    /// Typed by a person.
    pub real_user: bool,
    /// Its text as kept (tool calls and results included; bounded as the index keeps it).
    pub text: String,
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

/// The history database: this machine's SQLite file, or (team mode) the team's PostgreSQL,
/// where every machine's recorded conversations are shipped ([`ship`]). The same queries run on
/// both.
pub struct History {
    db: Db,
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

fn conversation_row(row: &dyn Row) -> Result<Conversation, StoreError> {
    Ok(Conversation {
        id: row.text(0)?,
        account: row.text(1)?,
        agent_type: row.text(2)?,
        source: row.text(3)?,
        client: row.text(4)?,
        session_id: row.text(5)?,
        started_ms: row.int(6)?,
        trashed_ms: row.opt_int(7)?,
        messages: row.count(8)?,
        assistant_messages: row.count(9)?,
        real_user_messages: row.count(10)?,
        first_user_preview: row.opt_text(11)?,
    })
}

/// A conversation's id: the same session of the same client and source in the same account
/// always gets the same id, so recording and importing are idempotent, and every machine of a
/// team gives a session the same id.
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
    cut(text, MAX_BODY)
}

/// `text` cut to `max` bytes on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Text as both databases store it: PostgreSQL's text holds no NUL character (a tool's
/// output may), so it becomes U+FFFD everywhere.
fn storable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{fffd}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// What a conversation is, apart from its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConversationKey {
    pub(crate) account: String,
    pub(crate) source: Source,
    pub(crate) client: String,
    pub(crate) session_id: String,
    pub(crate) agent_type: AgentType,
    pub(crate) started_ms: i64,
}

/// One stored message, as it is shipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredMessage {
    pub(crate) position: i64,
    pub(crate) role: String,
    pub(crate) real_user: bool,
    pub(crate) preview: String,
    pub(crate) body: String,
    pub(crate) ts_ms: i64,
    /// Its long tool outputs kept whole: (call id, text).
    pub(crate) outputs: Vec<(String, String)>,
}

impl History {
    /// Open (creating if needed, 0600 in a 0700 directory) the history at `path`.
    pub fn open(path: &Path) -> Result<History, StoreError> {
        Ok(History {
            db: Db::Sqlite(sqlite::open(path, schema::MIGRATIONS)?),
        })
    }

    /// Open the history at `path` to read it, changing nothing.
    pub fn open_read_only(path: &Path) -> Result<History, StoreError> {
        Ok(History {
            db: Db::Sqlite(sqlite::open_read_only(
                path,
                schema::MIGRATIONS,
                "run any `pith history` command that writes (import) to upgrade it",
            )?),
        })
    }

    /// A new, empty history in memory (tests, benchmarks).
    pub fn open_in_memory() -> Result<History, StoreError> {
        Ok(History {
            db: Db::Sqlite(sqlite::open_in_memory(schema::MIGRATIONS)?),
        })
    }

    /// The team's history in the PostgreSQL database at `url`, migrated to this pith's schema
    /// (a database a newer pith migrated is refused, naming both versions).
    pub fn open_team(url: &StoreUrl) -> Result<History, PgError> {
        let pg = Pg::new(url)?;
        pg.migrate("history", schema::POSTGRES_MIGRATIONS)?;
        Ok(History {
            db: Db::Postgres(Box::new(PgSession::new(pg))),
        })
    }

    /// Where the team history is (`None`: a local file).
    pub fn team_url(&self) -> Option<&StoreUrl> {
        match &self.db {
            Db::Postgres(session) => Some(session.pg().url()),
            Db::Sqlite(_) => None,
        }
    }

    /// Record proxied exchanges in one transaction. A turn appends the request's messages the
    /// conversation does not hold yet, then the reply; a request that carries fewer messages
    /// than the conversation holds (a retry, a rewind) or starts with another first message
    /// (a side call in the same session) adds nothing. Returns the messages added.
    pub fn record(&mut self, turns: &[Turn]) -> Result<usize, StoreError> {
        self.db.transaction(|db| {
            let mut added = 0;
            for turn in turns {
                let key = ConversationKey {
                    account: turn.account.clone(),
                    source: Source::Proxy,
                    client: turn.client.clone(),
                    session_id: turn.session_id.clone(),
                    agent_type: turn.agent_type,
                    started_ms: turn.ts_ms,
                };
                let (id, _) = ensure_conversation(db, &key)?;
                let (held, first_hash) = db
                    .row(
                        "SELECT (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id),
                            c.first_hash
                         FROM conversations c WHERE c.id = ?1",
                        values![&id],
                        |r| Ok((r.count(0)?, r.opt_text(1)?)),
                    )?
                    .unwrap_or((0, None));
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
                    add_message(
                        db,
                        &turn.account,
                        &id,
                        &StoredMessage::of(position, message),
                    )?;
                    added += 1;
                }
                if first_hash.is_none()
                    && let Some(first) = turn.messages.first().or(turn.reply.as_ref())
                {
                    db.execute(
                        "UPDATE conversations SET first_hash = ?2 WHERE id = ?1",
                        values![&id, &message_hash(first)],
                    )?;
                }
                db.execute(
                    "UPDATE conversations SET updated_ms = ?2 WHERE id = ?1",
                    values![&id, turn.ts_ms],
                )?;
                for excerpt in &turn.excerpts {
                    db.execute(
                        "UPDATE tool_outputs SET excerpt = ?3, excerpt_ms = ?4
                         WHERE conversation_id = ?1 AND call_id = ?2 AND excerpt IS NULL",
                        values![&id, &excerpt.call_id, &excerpt.text, turn.ts_ms],
                    )?;
                }
            }
            Ok(added)
        })
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
        self.db.transaction(|db| {
            let key = ConversationKey {
                account: account.to_owned(),
                source: Source::Import,
                client: imported.client.to_owned(),
                session_id: imported.session_id.clone(),
                agent_type,
                started_ms: imported.started_ms,
            };
            let (id, created) = ensure_conversation(db, &key)?;
            let held = db
                .row(
                    "SELECT COUNT(*) FROM messages WHERE conversation_id = ?1",
                    values![&id],
                    |r| r.count(0),
                )?
                .unwrap_or(0);
            let held = usize::try_from(held).unwrap_or(usize::MAX);
            let mut added = 0;
            for (position, message) in imported.messages.iter().enumerate().skip(held) {
                add_message(db, account, &id, &StoredMessage::of(position, message))?;
                added += 1;
            }
            Ok(ImportOutcome { created, added })
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
             WHERE c.account = ?1 AND (CASE WHEN c.trashed_ms IS NULL THEN 0 ELSE 1 END) = ?2
             ORDER BY c.started_ms DESC, c.id LIMIT ?3"
        );
        self.db.rows(
            &sql,
            values![account, trashed, limit_sql(limit)],
            conversation_row,
        )
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
        let Some(conversation) = self.db.row(&sql, values![account, id], conversation_row)? else {
            return Ok(None);
        };
        let messages = self.db.rows(
            "SELECT position, role, real_user, preview, ts_ms FROM messages
             WHERE conversation_id = ?1 ORDER BY position",
            values![id],
            |r| {
                Ok(Message {
                    position: r.count(0)?,
                    role: r.text(1)?,
                    real_user: r.int(2)? != 0,
                    preview: r.text(3)?,
                    ts_ms: r.int(4)?,
                })
            },
        )?;
        Ok(Some((conversation, messages)))
    }

    /// What one proxied request added to its session's conversation: the messages it was the
    /// first to carry (said at `ts_ms`, when it arrived) and its reply (at `reply_ms`), in
    /// order. Empty when the history holds none of it: not recorded, in the trash, purged, or
    /// a request that added nothing new (a retry, a side call). Matched by those times: a
    /// neighbouring request's message stamped in the same millisecond would show here too.
    pub fn turn(
        &self,
        account: &str,
        client: &str,
        session_id: &str,
        ts_ms: i64,
        reply_ms: i64,
    ) -> Result<Vec<TurnMessage>, StoreError> {
        let id = conversation_id(account, Source::Proxy, client, session_id);
        self.db.rows(
            "SELECT m.position, m.role, m.real_user, m.body, m.ts_ms FROM messages m
             JOIN conversations c ON c.id = m.conversation_id
             WHERE m.conversation_id = ?1 AND c.trashed_ms IS NULL
                AND (m.ts_ms = ?2 OR (m.ts_ms = ?3 AND m.role = 'assistant'))
             ORDER BY m.position",
            values![&id, ts_ms, reply_ms],
            |r| {
                Ok(TurnMessage {
                    position: r.count(0)?,
                    role: r.text(1)?,
                    real_user: r.int(2)? != 0,
                    text: r.text(3)?,
                    ts_ms: r.int(4)?,
                })
            },
        )
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
            "c.account = ?1 AND c.trashed_ms IS NULL
             AND (CAST(?2 AS TEXT) IS NULL OR c.agent_type = ?2)
             AND {}",
            predicate(filter)
        );
        let matched = self
            .db
            .row(
                &format!("SELECT COUNT(*) FROM conversations c WHERE {scope}"),
                values![account, agent],
                |r| r.count(0),
            )?
            .unwrap_or(0);
        let sql = format!(
            "SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE {scope}
             ORDER BY c.started_ms, c.id LIMIT ?3"
        );
        let items: Vec<Candidate> = self
            .db
            .rows(
                &sql,
                values![account, agent, limit_sql(limit)],
                conversation_row,
            )?
            .into_iter()
            .map(|c| Candidate {
                id: c.id,
                session_id: c.session_id,
                assistant_msg_count: c.assistant_messages,
                real_user_msg_count: c.real_user_messages,
                first_user_msg_preview: c.first_user_preview,
                trashed_at: c.trashed_ms,
            })
            .collect();
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
            Some(ids) => narrow_to_token(&claims.ids, ids, &mut outcome),
        };
        let agent = claims.agent_type.map(AgentType::as_str);
        let check = format!(
            "SELECT c.trashed_ms, c.agent_type,
                    (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id),
                    {} AS matches
             FROM conversations c WHERE c.id = ?1 AND c.account = ?2",
            predicate_value(claims.filter)
        );
        let trash = format!(
            "UPDATE conversations SET trashed_ms = ?3
             WHERE id = ?1 AND account = ?2 AND trashed_ms IS NULL
               AND (CAST(?4 AS TEXT) IS NULL OR agent_type = ?4)
               AND id IN (SELECT c.id FROM conversations c WHERE c.id = ?1 AND {})",
            predicate(claims.filter)
        );
        let token_hash = token_hash(token);
        self.db.transaction(|db| {
            refuse_used_token(db, &token_hash, now_ms)?;
            if db.is_postgres() {
                lock_for_delete(db, &chosen, account)?;
            }
            for id in chosen {
                let state = db.row(&check, values![&id, account], |r| {
                    Ok((r.opt_int(0)?, r.text(1)?, r.count(2)?, r.int(3)? != 0))
                })?;
                if let Some(reason) = delete_skip_reason(state, agent, claims.filter) {
                    outcome.skipped.push(Skipped { id, reason });
                    continue;
                }
                if db.execute(&trash, values![&id, account, now_ms, agent])? == 1 {
                    outcome.changed.push(id);
                } else {
                    outcome.skipped.push(Skipped {
                        id,
                        reason: "changed while it was being trashed".into(),
                    });
                }
            }
            if !outcome.changed.is_empty() {
                record_used_token(db, &token_hash, claims.exp)?;
            }
            Ok::<_, HistoryError>(())
        })?;
        Ok(outcome)
    }

    /// Take the account's conversations `ids` out of the trash.
    pub fn restore(&mut self, account: &str, ids: &[String]) -> Result<Changed, StoreError> {
        self.db.transaction(|db| {
            let mut outcome = Changed::default();
            for id in ids {
                let trashed = db.row(
                    "SELECT trashed_ms FROM conversations WHERE id = ?1 AND account = ?2",
                    values![id, account],
                    |r| r.opt_int(0),
                )?;
                let reason = match trashed {
                    None => "no such conversation in this account",
                    Some(None) => "not in the trash",
                    Some(Some(_)) => {
                        db.execute(
                            "UPDATE conversations SET trashed_ms = NULL
                             WHERE id = ?1 AND account = ?2",
                            values![id, account],
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
            Ok(outcome)
        })
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
        self.db
            .rows(&sql, values![account, cutoff_ms], conversation_row)
    }

    /// Delete for good the account's conversations trashed before `cutoff_ms`, with their
    /// messages and their search index rows, in one transaction. The only hard delete.
    pub fn purge(&mut self, account: &str, cutoff_ms: i64) -> Result<Purged, StoreError> {
        self.db.transaction(|db| {
            let doomed = "SELECT id FROM conversations
                          WHERE account = ?1 AND trashed_ms IS NOT NULL AND trashed_ms < ?2";
            let (documents, length) = db
                .row(
                    "SELECT COUNT(*), CAST(COALESCE(SUM(length), 0) AS BIGINT) FROM conversations
                     WHERE account = ?1 AND trashed_ms IS NOT NULL AND trashed_ms < ?2",
                    values![account, cutoff_ms],
                    |r| Ok((r.int(0)?, r.int(1)?)),
                )?
                .unwrap_or((0, 0));
            let index_rows = db.execute(
                "DELETE FROM postings WHERE conversation_seq IN
                 (SELECT seq FROM conversations
                  WHERE account = ?1 AND trashed_ms IS NOT NULL AND trashed_ms < ?2)",
                values![account, cutoff_ms],
            )?;
            db.execute(
                &format!("DELETE FROM tool_outputs WHERE conversation_id IN ({doomed})"),
                values![account, cutoff_ms],
            )?;
            let messages = db.execute(
                &format!("DELETE FROM messages WHERE conversation_id IN ({doomed})"),
                values![account, cutoff_ms],
            )?;
            let conversations = db.execute(
                "DELETE FROM conversations
                 WHERE account = ?1 AND trashed_ms IS NOT NULL AND trashed_ms < ?2",
                values![account, cutoff_ms],
            )?;
            db.execute(
                "UPDATE index_totals
                 SET documents = documents - ?2, total_length = total_length - ?3
                 WHERE account = ?1",
                values![account, documents, length],
            )?;
            Ok(Purged {
                conversations,
                messages,
                index_rows,
            })
        })
    }

    /// A tool output kept whole (see [`pith_history::NewMessage::keep_outputs`]) by its call
    /// id, from the account's conversations not in the trash.
    pub fn tool_output(&self, account: &str, call_id: &str) -> Result<Option<String>, StoreError> {
        self.db.row(
            "SELECT o.text FROM tool_outputs o JOIN conversations c ON c.id = o.conversation_id
             WHERE o.call_id = ?1 AND c.account = ?2 AND c.trashed_ms IS NULL
             ORDER BY c.updated_ms DESC LIMIT 1",
            values![call_id, account],
            |r| r.text(0),
        )
    }

    /// The kept tool outputs that the request of `client`'s session `session` arriving at
    /// `ts_ms` first sent as excerpts, in the order their outputs came.
    pub fn shortened_by(
        &self,
        account: &str,
        client: &str,
        session: &str,
        ts_ms: i64,
    ) -> Result<Vec<ShortenedOutput>, StoreError> {
        self.db.rows(
            "SELECT o.call_id, LENGTH(o.text), o.excerpt FROM tool_outputs o
             JOIN conversations c ON c.id = o.conversation_id
             WHERE c.account = ?1 AND c.client = ?2 AND c.session_id = ?3
               AND c.trashed_ms IS NULL AND o.excerpt_ms = ?4 AND o.excerpt IS NOT NULL
             ORDER BY o.position, o.call_id",
            values![account, client, session, ts_ms],
            |r| {
                let excerpt = r.text(2)?;
                Ok(ShortenedOutput {
                    call_id: r.text(0)?,
                    chars: r.count(1)?,
                    excerpt_chars: excerpt.chars().count() as u64,
                    excerpt,
                })
            },
        )
    }

    /// Search the account's conversations not in the trash: BM25 over message text, the best
    /// `limit` conversations, each with a snippet of its best message.
    pub fn search(&self, account: &str, query: &str, limit: usize) -> Result<Vec<Hit>, StoreError> {
        search::search(&self.db, account, query, limit)
    }

    /// Search index rows holding `term` (tests: a purge leaves none behind).
    pub fn index_rows_for(&self, term: &str) -> Result<u64, StoreError> {
        Ok(self
            .db
            .row(
                "SELECT COUNT(*) FROM postings WHERE term = ?1",
                values![&term.to_lowercase()],
                |r| r.count(0),
            )?
            .unwrap_or(0))
    }

    /// Every message of every conversation, with the conversation's id, in (id, position)
    /// order; and the index's totals per account (tests: what a team database holds equals what
    /// was recorded, once).
    pub fn contents(&self) -> Result<Contents, StoreError> {
        let messages = self.db.rows(
            "SELECT conversation_id, position, role, body FROM messages
             ORDER BY conversation_id, position",
            &[],
            |r| Ok((r.text(0)?, r.count(1)?, r.text(2)?, r.text(3)?)),
        )?;
        let conversations = self.db.rows(
            "SELECT id, length FROM conversations ORDER BY id",
            &[],
            |r| Ok((r.text(0)?, r.int(1)?)),
        )?;
        let postings = self.db.rows(
            "SELECT c.id, p.term, p.tf FROM postings p
             JOIN conversations c ON c.seq = p.conversation_seq
             ORDER BY c.id, p.term",
            &[],
            |r| Ok((r.text(0)?, r.text(1)?, r.int(2)?)),
        )?;
        let totals = self.db.rows(
            "SELECT account, documents, total_length FROM index_totals ORDER BY account",
            &[],
            |r| Ok((r.text(0)?, r.int(1)?, r.int(2)?)),
        )?;
        Ok(Contents {
            messages,
            conversations,
            postings,
            totals,
        })
    }
}

/// Everything a history holds, in a fixed order (see [`History::contents`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contents {
    /// (conversation, position, role, body) of every message.
    pub messages: Vec<(String, u64, String, String)>,
    /// (conversation, its indexed length).
    pub conversations: Vec<(String, i64)>,
    /// (conversation, term, count) of every index row.
    pub postings: Vec<(String, String, i64)>,
    /// (account, documents, total length) of the index's totals.
    pub totals: Vec<(String, i64, i64)>,
}

impl StoredMessage {
    fn of(position: usize, message: &NewMessage) -> StoredMessage {
        StoredMessage {
            position: i64::try_from(position).unwrap_or(i64::MAX),
            role: message.role.clone(),
            real_user: message.real_user,
            preview: storable(&preview(bounded(message.gist()))).into_owned(),
            body: storable(bounded(&message.text)).into_owned(),
            ts_ms: message.ts_ms,
            outputs: message
                .outputs
                .iter()
                .map(|o| {
                    let text = cut(&o.text, pith_history::MAX_KEPT_OUTPUT);
                    (o.call_id.clone(), storable(text).into_owned())
                })
                .collect(),
        }
    }
}

/// The caller's `ids` that the token selected, each once, in the caller's order; the others
/// are skipped.
fn narrow_to_token(selected: &[String], ids: &[String], outcome: &mut Changed) -> Vec<String> {
    let mut chosen = Vec::new();
    for id in ids {
        if !selected.contains(id) {
            outcome.skipped.push(Skipped {
                id: id.clone(),
                reason: "not in the token's selection (ids may narrow it, never extend it)".into(),
            });
        } else if !chosen.contains(id) {
            chosen.push(id.clone());
        }
    }
    chosen
}

/// The hex SHA-256 of a filter token, as `used_tokens` keeps it.
fn token_hash(token: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(token.trim().as_bytes());
    digest
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
}

/// Forget expired token uses, then refuse a token already used.
fn refuse_used_token(db: &Db, token_hash: &str, now_ms: i64) -> Result<(), HistoryError> {
    // A token deletes once: a use that trashed something is kept until the token
    // expires, and refuses the token from then on.
    db.execute(
        "DELETE FROM used_tokens WHERE expires_ms < ?1",
        values![now_ms],
    )?;
    let used = db.row(
        "SELECT count(*) FROM used_tokens WHERE token_hash = ?1",
        values![token_hash],
        |r| r.count(0),
    )?;
    if used.unwrap_or(0) > 0 {
        return Err(HistoryError::Token(TokenError::Used));
    }
    Ok(())
}

/// Lock the chosen conversations' rows (PostgreSQL only) before they are checked.
fn lock_for_delete(db: &Db, chosen: &[String], account: &str) -> Result<(), StoreError> {
    // Row locks first, in id order, so a concurrent recorder cannot add a message
    // between the check and the trash (SQLite's write lock is the whole file).
    let mut sorted = chosen.to_vec();
    sorted.sort();
    for id in &sorted {
        db.execute(
            "SELECT 1 FROM conversations WHERE id = ?1 AND account = ?2 FOR UPDATE",
            values![id, account],
        )?;
    }
    Ok(())
}

/// Why a chosen conversation is not trashed, given its state now (trashed at, agent type,
/// messages, whether it still matches the filter); `None`: trash it.
fn delete_skip_reason(
    state: Option<(Option<i64>, String, u64, bool)>,
    agent: Option<&str>,
    filter: Filter,
) -> Option<String> {
    match state {
        None => Some("no such conversation in this account".to_owned()),
        Some((Some(_), ..)) => Some("already in the trash".to_owned()),
        Some((None, agent_type, _, _)) if agent.is_some_and(|a| a != agent_type) => {
            Some(format!("its agent type is now {agent_type}"))
        }
        Some((None, _, messages, false)) => Some(format!(
            "no longer matches filter {filter} (it has {messages} messages now)"
        )),
        Some((None, _, _, true)) => None,
    }
}

/// Record the token's use once something was trashed, refusing it if already recorded.
fn record_used_token(db: &Db, token_hash: &str, exp: i64) -> Result<(), HistoryError> {
    let first_use = db.execute(
        "INSERT INTO used_tokens (token_hash, expires_ms) VALUES (?1, ?2)
                     ON CONFLICT (token_hash) DO NOTHING",
        values![token_hash, exp],
    )?;
    // Another delete with this token committed meanwhile: this one is undone.
    if first_use == 0 {
        return Err(HistoryError::Token(TokenError::Used));
    }
    Ok(())
}

/// The predicate as a 0/1 value over `c` (what [`predicate`] says, as a column).
fn predicate_value(filter: Filter) -> String {
    format!("CASE WHEN {} THEN 1 ELSE 0 END", predicate(filter))
}

fn limit_sql(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The conversation's id, creating it when new (and whether it was). Looked up first: an
/// insert that conflicts would still use up a document number on PostgreSQL, and search
/// sizes its arrays by the largest.
fn ensure_conversation(db: &Db, key: &ConversationKey) -> Result<(String, bool), StoreError> {
    let id = conversation_id(&key.account, key.source, &key.client, &key.session_id);
    let exists = db
        .row(
            "SELECT 1 FROM conversations WHERE id = ?1",
            values![&id],
            |_| Ok(()),
        )?
        .is_some();
    if exists {
        return Ok((id, false));
    }
    let created = db.execute(
        "INSERT INTO conversations
            (id, account, agent_type, source, client, session_id, started_ms, updated_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)
         ON CONFLICT (id) DO NOTHING",
        values![
            &id,
            &key.account,
            key.agent_type.as_str(),
            key.source.as_str(),
            &key.client,
            &key.session_id,
            key.started_ms
        ],
    )?;
    if created == 1 {
        db.execute(
            "INSERT INTO index_totals (account, documents, total_length) VALUES (?1, 1, 0)
             ON CONFLICT (account) DO UPDATE SET documents = index_totals.documents + 1",
            values![&key.account],
        )?;
    }
    Ok((id, created == 1))
}

/// Store `message` at its position in conversation `conversation` (not indexed), unless the
/// conversation already holds a message there: whether it was added.
pub(crate) fn insert_message(
    db: &Db,
    conversation: &str,
    message: &StoredMessage,
) -> Result<bool, StoreError> {
    let inserted = db.execute(
        "INSERT INTO messages
            (conversation_id, position, role, real_user, preview, body, ts_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (conversation_id, position) DO NOTHING",
        values![
            conversation,
            message.position,
            &message.role,
            message.real_user,
            &message.preview,
            &message.body,
            message.ts_ms
        ],
    )?;
    if inserted == 1 {
        insert_outputs(db, conversation, message)?;
    }
    Ok(inserted == 1)
}

/// Store `message`'s kept tool outputs (one already held for its call is left as it is).
pub(crate) fn insert_outputs(
    db: &Db,
    conversation: &str,
    message: &StoredMessage,
) -> Result<(), StoreError> {
    for (call_id, text) in &message.outputs {
        db.execute(
            "INSERT INTO tool_outputs (conversation_id, position, call_id, text)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (conversation_id, call_id) DO NOTHING",
            values![conversation, message.position, call_id, text],
        )?;
    }
    Ok(())
}

/// Store `message` at its position in conversation `conversation` and index it, unless the
/// conversation already holds a message there (a batch shipped again): whether it was added.
fn add_message(
    db: &Db,
    account: &str,
    conversation: &str,
    message: &StoredMessage,
) -> Result<bool, StoreError> {
    if !insert_message(db, conversation, message)? {
        return Ok(false);
    }
    let (counts, length) = terms::count(&message.body);
    let length = i64::from(length);
    let seq = db
        .row(
            "UPDATE conversations SET length = length + ?2 WHERE id = ?1 RETURNING seq",
            values![conversation, length],
            |r| r.int(0),
        )?
        .ok_or_else(|| {
            StoreError::Team(Box::new(PgError::Corrupt(format!(
                "conversation {conversation} vanished while a message was added"
            ))))
        })?;
    for (term, tf) in &counts {
        db.execute(
            "INSERT INTO postings (account, term, conversation_seq, tf) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (account, term, conversation_seq) DO UPDATE SET tf = postings.tf + ?4",
            values![account, term.as_str(), seq, i64::from(*tf)],
        )?;
    }
    db.execute(
        "UPDATE index_totals SET total_length = total_length + ?2 WHERE account = ?1",
        values![account, length],
    )?;
    Ok(true)
}

#[cfg(test)]
mod tests;
