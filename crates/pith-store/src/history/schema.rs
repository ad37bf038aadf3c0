//! The history database's migrations. Plain SQL both SQLite and PostgreSQL run (no FTS5, no
//! `WITHOUT ROWID`, no SQLite-only functions in queries): the search index is this schema's
//! own postings table (a conversation is a document), scored by BM25 in Rust (`search.rs`), so a second backend indexes and
//! ranks the same way. Append-only: never edit a shipped migration.

/// `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
pub(crate) const MIGRATIONS: &[&str] = &["
CREATE TABLE conversations (
    seq         INTEGER PRIMARY KEY, -- the search index's document number
    id          TEXT NOT NULL UNIQUE,
    account     TEXT NOT NULL,
    agent_type  TEXT NOT NULL,
    source      TEXT NOT NULL,   -- proxy, import
    client      TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    started_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL,
    trashed_ms  BIGINT,
    -- Terms in its messages: BM25's document length (a conversation is a document).
    length      BIGINT NOT NULL DEFAULT 0,
    -- The first message's role and text hashed (its typed text, when a person typed it: the
    -- reminders around it change between turns): a request of the same session that starts
    -- elsewhere (a side call) is another thread, not this conversation's next turn.
    first_hash  TEXT,
    UNIQUE (account, source, client, session_id)
);
CREATE INDEX conversations_account ON conversations (account, trashed_ms, started_ms);
-- What a search reads first: the account's conversations not in the trash, with their lengths.
CREATE INDEX conversations_search ON conversations (account, trashed_ms, length);
CREATE TABLE messages (
    id              INTEGER PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (id),
    position        INTEGER NOT NULL,
    role            TEXT NOT NULL,
    real_user       INTEGER NOT NULL,
    preview         TEXT NOT NULL,
    body            TEXT NOT NULL,   -- the indexed text (bounded), for snippets
    ts_ms           BIGINT NOT NULL,
    UNIQUE (conversation_id, position)
);
-- A term's count in each conversation of an account. Scoped and ordered by (account, term),
-- so a query term's postings are one range of the primary key, their counts in it (without a
-- rowid the table is that key's b-tree: a search reads no second b-tree per posting).
CREATE TABLE postings (
    account          TEXT NOT NULL,
    term             TEXT NOT NULL,
    conversation_seq INTEGER NOT NULL REFERENCES conversations (seq),
    tf               INTEGER NOT NULL,
    PRIMARY KEY (account, term, conversation_seq)
) WITHOUT ROWID;
CREATE INDEX postings_conversation ON postings (conversation_seq);
-- Per account: conversations indexed and their total length (BM25's N and average length),
-- kept as messages are added and purged so a search never sums the whole table.
CREATE TABLE index_totals (
    account      TEXT PRIMARY KEY,
    documents    BIGINT NOT NULL,
    total_length BIGINT NOT NULL
);
"];
