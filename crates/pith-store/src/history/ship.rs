//! Shipping a machine's history to the team's (team mode). The local SQLite history is the
//! outbox, as the local ledger is the ledger's: the proxy records there as always, and the
//! shipper thread ([`crate::postgres::ship`]) sends what lies past two cursors (conversations
//! by document number, messages by row id) to PostgreSQL, then moves the cursors. A crash
//! between the two sends the batch again; the team history meets its own rows (a conversation's
//! id is a hash of its account, source, client and session; a message is keyed by its
//! conversation and position) and adds nothing, so nothing arrives twice and the search index
//! counts each message once.

use std::collections::{BTreeMap, HashMap};

use pith_history::terms;

use super::db::{Db, values};
use super::{
    ConversationKey, History, Source, StoredMessage, ensure_conversation, insert_message,
    insert_outputs,
};
use crate::postgres::PgError;
use crate::sqlite::StoreError;

/// The local counter holding the newest conversation (`seq`) the team history has.
pub const SHIPPED_CONVERSATIONS: &str = "team_shipped_conversations";
/// The local counter holding the newest message (row id) the team history has.
pub const SHIPPED_MESSAGES: &str = "team_shipped_messages";
/// Messages (and conversations) per push.
pub const BATCH: usize = 500;
/// The advisory lock pushes take: two machines pushing to one conversation at once would
/// otherwise lock its index rows in different orders.
const PUSH_LOCK: i64 = 7_369_746_801;

/// What this machine's history still has to send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Backlog {
    /// Conversations the team history does not have yet (some may have no messages).
    pub conversations: u64,
    /// Messages it does not have yet.
    pub messages: u64,
}

/// One batch to send.
#[derive(Debug, Clone, Default)]
pub struct Outbox {
    /// Conversations past the cursor, by document number.
    conversations: Vec<(i64, Shipped)>,
    /// Messages past the cursor, by row id, each with its conversation (which may have been
    /// shipped before, or lie past this batch's conversations).
    messages: Vec<(i64, String, StoredMessage, Shipped)>,
}

/// A conversation as shipped: its key and the state that moves (first message, last turn).
#[derive(Debug, Clone)]
struct Shipped {
    key: ConversationKey,
    first_hash: Option<String>,
    updated_ms: i64,
}

impl Outbox {
    /// Nothing left to send.
    pub fn is_empty(&self) -> bool {
        self.conversations.is_empty() && self.messages.is_empty()
    }

    /// Messages in it.
    pub fn messages(&self) -> usize {
        self.messages.len()
    }
}

/// What a push or a whole ship did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ShipReport {
    /// Messages sent.
    pub sent: u64,
    /// Of those, new to the team history (the rest it had: a batch sent again).
    pub added: u64,
}

const SHIPPED_COLUMNS: &str = "c.account, c.source, c.client, c.session_id, c.agent_type,
    c.started_ms, c.first_hash, c.updated_ms";

fn shipped_row(r: &dyn super::db::Row, at: usize) -> Result<Shipped, StoreError> {
    let source = r.text(at + 1)?;
    let agent_type = r.text(at + 4)?;
    Ok(Shipped {
        key: ConversationKey {
            account: r.text(at)?,
            source: Source::parse(&source)
                .ok_or_else(|| corrupt(format!("unknown conversation source {source:?}")))?,
            client: r.text(at + 2)?,
            session_id: r.text(at + 3)?,
            agent_type: agent_type
                .parse()
                .map_err(|_| corrupt(format!("unknown agent type {agent_type:?}")))?,
            started_ms: r.int(at + 5)?,
        },
        first_hash: r.opt_text(at + 6)?,
        updated_ms: r.int(at + 7)?,
    })
}

fn corrupt(what: String) -> StoreError {
    StoreError::Team(Box::new(PgError::Corrupt(what)))
}

impl History {
    fn counter(&self, name: &str) -> Result<i64, StoreError> {
        Ok(self
            .db
            .row(
                "SELECT value FROM counters WHERE name = ?1",
                values![name],
                |r| r.int(0),
            )?
            .unwrap_or(0))
    }

    /// What this (local) history has not shipped yet.
    pub fn backlog(&self) -> Result<Backlog, StoreError> {
        let conversations = self
            .db
            .row(
                "SELECT COUNT(*) FROM conversations WHERE seq > ?1",
                values![self.counter(SHIPPED_CONVERSATIONS)?],
                |r| r.count(0),
            )?
            .unwrap_or(0);
        let messages = self
            .db
            .row(
                "SELECT COUNT(*) FROM messages WHERE id > ?1",
                values![self.counter(SHIPPED_MESSAGES)?],
                |r| r.count(0),
            )?
            .unwrap_or(0);
        Ok(Backlog {
            conversations,
            messages,
        })
    }

    /// The next batch past the cursors: up to [`BATCH`] conversations and [`BATCH`] messages,
    /// oldest first.
    pub fn outbox(&self) -> Result<Outbox, StoreError> {
        let limit = i64::try_from(BATCH).unwrap_or(i64::MAX);
        let conversations = self.db.rows(
            &format!(
                "SELECT c.seq, {SHIPPED_COLUMNS} FROM conversations c
                 WHERE c.seq > ?1 ORDER BY c.seq LIMIT ?2"
            ),
            values![self.counter(SHIPPED_CONVERSATIONS)?, limit],
            |r| Ok((r.int(0)?, shipped_row(r, 1)?)),
        )?;
        let mut messages = Vec::new();
        self.db.each(
            &format!(
                "SELECT m.id, m.conversation_id, m.position, m.role, m.real_user, m.preview,
                        m.body, m.ts_ms, {SHIPPED_COLUMNS}
                 FROM messages m JOIN conversations c ON c.id = m.conversation_id
                 WHERE m.id > ?1 ORDER BY m.id LIMIT ?2"
            ),
            values![self.counter(SHIPPED_MESSAGES)?, limit],
            |r| {
                messages.push((
                    r.int(0)?,
                    r.text(1)?,
                    StoredMessage {
                        position: r.int(2)?,
                        role: r.text(3)?,
                        real_user: r.int(4)? != 0,
                        preview: r.text(5)?,
                        body: r.text(6)?,
                        ts_ms: r.int(7)?,
                        outputs: Vec::new(),
                    },
                    shipped_row(r, 8)?,
                ));
                Ok(())
            },
        )?;
        // The batch's kept tool outputs, in one query over the same range of messages.
        if let (Some(first), Some(last)) = (messages.first(), messages.last()) {
            let at: HashMap<i64, usize> = messages
                .iter()
                .enumerate()
                .map(|(i, (id, ..))| (*id, i))
                .collect();
            let outputs = self.db.rows(
                "SELECT m.id, o.call_id, o.text FROM tool_outputs o
                 JOIN messages m ON m.conversation_id = o.conversation_id
                                AND m.position = o.position
                 WHERE m.id >= ?1 AND m.id <= ?2 ORDER BY m.id, o.call_id",
                values![first.0, last.0],
                |r| Ok((r.int(0)?, r.text(1)?, r.text(2)?)),
            )?;
            for (id, call_id, text) in outputs {
                if let Some(&i) = at.get(&id) {
                    messages[i].2.outputs.push((call_id, text));
                }
            }
        }
        Ok(Outbox {
            conversations,
            messages,
        })
    }

    /// Add `outbox` to this (team) history in one transaction: conversations it lacks are
    /// created, messages it holds already are skipped (and not indexed again). Returns the
    /// messages new to it. On PostgreSQL the messages and their index rows go in one
    /// statement each (`unnest` of arrays): a round trip per index row made a message cost
    /// about a hundred.
    pub fn push(&mut self, outbox: &Outbox) -> Result<ShipReport, StoreError> {
        self.db.transaction(|db| {
            if db.is_postgres() {
                db.execute("SELECT pg_advisory_xact_lock(?1)", values![PUSH_LOCK])?;
            }
            // Each conversation of the batch, created when new: its document number.
            let mut seqs: HashMap<String, i64> = HashMap::new();
            let carried = outbox.messages.iter().map(|(.., shipped)| shipped);
            for shipped in outbox.conversations.iter().map(|(_, s)| s).chain(carried) {
                let (id, _) = ensure_conversation(db, &shipped.key)?;
                if seqs.contains_key(&id) {
                    continue;
                }
                let seq = db
                    .row(
                        "UPDATE conversations
                         SET first_hash = COALESCE(first_hash, ?2),
                             updated_ms = CASE WHEN updated_ms < ?3 THEN ?3 ELSE updated_ms END
                         WHERE id = ?1 RETURNING seq",
                        values![&id, shipped.first_hash.as_deref(), shipped.updated_ms],
                        |r| r.int(0),
                    )?
                    .ok_or_else(|| corrupt(format!("conversation {id} vanished while shipped")))?;
                seqs.insert(id, seq);
            }
            let added = insert_messages(db, &outbox.messages)?;
            if db.is_postgres() {
                for &i in &added {
                    let (_, conversation, message, _) = &outbox.messages[i];
                    insert_outputs(db, conversation, message)?;
                }
            }
            // The index rows of the messages added, summed per (account, term, conversation).
            let mut postings: BTreeMap<(&str, String, i64), i64> = BTreeMap::new();
            let mut lengths: HashMap<&str, i64> = HashMap::new();
            let mut totals: HashMap<&str, i64> = HashMap::new();
            for &i in &added {
                let (_, conversation, message, shipped) = &outbox.messages[i];
                let account = shipped.key.account.as_str();
                let seq = seqs.get(conversation).copied().ok_or_else(|| {
                    corrupt(format!(
                        "message of conversation {conversation} shipped without it"
                    ))
                })?;
                let (counts, length) = terms::count(&message.body);
                for (term, tf) in counts {
                    *postings.entry((account, term, seq)).or_default() += i64::from(tf);
                }
                *lengths.entry(conversation.as_str()).or_default() += i64::from(length);
                *totals.entry(account).or_default() += i64::from(length);
            }
            upsert_postings(db, &postings)?;
            for (conversation, length) in &lengths {
                db.execute(
                    "UPDATE conversations SET length = length + ?2 WHERE id = ?1",
                    values![*conversation, *length],
                )?;
            }
            for (account, length) in &totals {
                db.execute(
                    "UPDATE index_totals SET total_length = total_length + ?2 WHERE account = ?1",
                    values![*account, *length],
                )?;
            }
            Ok(ShipReport {
                sent: outbox.messages.len() as u64,
                added: added.len() as u64,
            })
        })
    }

    /// Move this (local) history's cursors past `outbox`, once the team history has it.
    pub fn mark_shipped(&mut self, outbox: &Outbox) -> Result<(), StoreError> {
        let through_conversation = outbox.conversations.iter().map(|(seq, _)| *seq).max();
        let through_message = outbox.messages.iter().map(|(id, ..)| *id).max();
        self.db.transaction(|db| {
            for (name, value) in [
                (SHIPPED_CONVERSATIONS, through_conversation),
                (SHIPPED_MESSAGES, through_message),
            ] {
                if let Some(value) = value {
                    db.execute(
                        "INSERT INTO counters (name, value) VALUES (?1, ?2)
                         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                        values![name, value],
                    )?;
                }
            }
            Ok(())
        })
    }

    /// Forget what was shipped (the cursors back to the start): everything is sent again and
    /// the team history, holding it, adds nothing. For a team database that was replaced.
    pub fn forget_shipped(&mut self) -> Result<(), StoreError> {
        self.db.execute("DELETE FROM counters", &[])?;
        Ok(())
    }

    /// Send one batch from this (local) history to `team`; `None` when nothing was waiting.
    pub fn ship_batch(&mut self, team: &mut History) -> Result<Option<ShipReport>, StoreError> {
        let outbox = self.outbox()?;
        if outbox.is_empty() {
            return Ok(None);
        }
        let report = team.push(&outbox)?;
        self.mark_shipped(&outbox)?;
        Ok(Some(report))
    }

    /// Send everything waiting in this (local) history to `team`.
    pub fn ship_all(&mut self, team: &mut History) -> Result<ShipReport, StoreError> {
        let mut total = ShipReport::default();
        while let Some(report) = self.ship_batch(team)? {
            total.sent += report.sent;
            total.added += report.added;
        }
        Ok(total)
    }
}

/// Insert the batch's messages, skipping those already at their position: the indexes (into
/// `messages`) of those added.
fn insert_messages(
    db: &Db,
    messages: &[(i64, String, StoredMessage, Shipped)],
) -> Result<Vec<usize>, StoreError> {
    if !db.is_postgres() {
        let mut added = Vec::new();
        for (i, (_, conversation, m, _)) in messages.iter().enumerate() {
            if insert_message(db, conversation, m)? {
                added.push(i);
            }
        }
        return Ok(added);
    }
    let conversations: Vec<String> = messages.iter().map(|(_, c, ..)| c.clone()).collect();
    let positions: Vec<i64> = messages.iter().map(|(_, _, m, _)| m.position).collect();
    let roles: Vec<String> = messages.iter().map(|(_, _, m, _)| m.role.clone()).collect();
    let real_users: Vec<i64> = messages
        .iter()
        .map(|(_, _, m, _)| i64::from(m.real_user))
        .collect();
    let previews: Vec<String> = messages
        .iter()
        .map(|(_, _, m, _)| m.preview.clone())
        .collect();
    let bodies: Vec<String> = messages.iter().map(|(_, _, m, _)| m.body.clone()).collect();
    let times: Vec<i64> = messages.iter().map(|(_, _, m, _)| m.ts_ms).collect();
    let inserted = db.rows(
        "INSERT INTO messages (conversation_id, position, role, real_user, preview, body, ts_ms)
         SELECT c, p, r, u::integer, pr, b, t
         FROM unnest(?1::text[], ?2::bigint[], ?3::text[], ?4::bigint[], ?5::text[],
                     ?6::text[], ?7::bigint[]) AS m (c, p, r, u, pr, b, t)
         ON CONFLICT (conversation_id, position) DO NOTHING
         RETURNING conversation_id, position",
        values![
            conversations.as_slice(),
            positions.as_slice(),
            roles.as_slice(),
            real_users.as_slice(),
            previews.as_slice(),
            bodies.as_slice(),
            times.as_slice()
        ],
        |r| Ok((r.text(0)?, r.int(1)?)),
    )?;
    let at: HashMap<(&str, i64), usize> = messages
        .iter()
        .enumerate()
        .map(|(i, (_, c, m, _))| ((c.as_str(), m.position), i))
        .collect();
    let mut added: Vec<usize> = inserted
        .iter()
        .filter_map(|(c, p)| at.get(&(c.as_str(), *p)).copied())
        .collect();
    added.sort_unstable();
    Ok(added)
}

/// Add `postings` (summed per key) to the index: one statement on PostgreSQL.
fn upsert_postings(
    db: &Db,
    postings: &BTreeMap<(&str, String, i64), i64>,
) -> Result<(), StoreError> {
    const UPSERT: &str = "ON CONFLICT (account, term, conversation_seq)
                          DO UPDATE SET tf = postings.tf + excluded.tf";
    if !db.is_postgres() {
        for ((account, term, seq), tf) in postings {
            db.execute(
                &format!(
                    "INSERT INTO postings (account, term, conversation_seq, tf)
                     VALUES (?1, ?2, ?3, ?4) {UPSERT}"
                ),
                values![*account, term.as_str(), *seq, *tf],
            )?;
        }
        return Ok(());
    }
    if postings.is_empty() {
        return Ok(());
    }
    let accounts: Vec<String> = postings.keys().map(|(a, ..)| (*a).to_owned()).collect();
    let terms: Vec<String> = postings.keys().map(|(_, t, _)| t.clone()).collect();
    let seqs: Vec<i64> = postings.keys().map(|(.., s)| *s).collect();
    let tfs: Vec<i64> = postings.values().copied().collect();
    db.execute(
        &format!(
            "INSERT INTO postings (account, term, conversation_seq, tf)
             SELECT * FROM unnest(?1::text[], ?2::text[], ?3::bigint[], ?4::bigint[]) {UPSERT}"
        ),
        values![
            accounts.as_slice(),
            terms.as_slice(),
            seqs.as_slice(),
            tfs.as_slice()
        ],
    )?;
    Ok(())
}
