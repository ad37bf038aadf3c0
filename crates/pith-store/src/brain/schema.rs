//! The schema of `brain.db`: memories, their evidence, and the FTS5 index over live memories.

/// Schema history of `brain.db`; append only.
pub const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE memories (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('note', 'fix', 'failed', 'decision')),
    title TEXT NOT NULL,
    body TEXT NOT NULL DEFAULT '',
    tags TEXT NOT NULL DEFAULT '',
    headline TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    last_hit_at INTEGER,
    checked_status TEXT,
    checked_at INTEGER,
    trashed_at INTEGER
);

CREATE TABLE evidence (
    memory_seq INTEGER NOT NULL REFERENCES memories(seq) ON DELETE CASCADE,
    ord INTEGER NOT NULL,
    path TEXT NOT NULL,
    line_start INTEGER,
    line_end INTEGER,
    hash TEXT,
    size INTEGER,
    mtime_ns INTEGER,
    PRIMARY KEY (memory_seq, ord)
);
CREATE INDEX evidence_by_path ON evidence(path);

-- Only live memories are indexed, so searches never have to skip the trash.
CREATE VIRTUAL TABLE memories_fts USING fts5(
    title, body, tags, headline, kind,
    content = 'memories', content_rowid = 'seq',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
-- Title weighs most, then the error headline, tags, body; kind is for filtering only.
INSERT INTO memories_fts(memories_fts, rank) VALUES ('rank', 'bm25(4.0, 1.0, 2.0, 3.0, 0.0)');

CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories WHEN new.trashed_at IS NULL BEGIN
    INSERT INTO memories_fts(rowid, title, body, tags, headline, kind)
    VALUES (new.seq, new.title, new.body, new.tags, new.headline, new.kind);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories WHEN old.trashed_at IS NULL BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, title, body, tags, headline, kind)
    VALUES ('delete', old.seq, old.title, old.body, old.tags, old.headline, old.kind);
END;
-- Hit counters change on every search: only text and trash changes touch the index.
CREATE TRIGGER memories_fts_unindex AFTER UPDATE OF title, body, tags, headline, kind, trashed_at
ON memories WHEN old.trashed_at IS NULL BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, title, body, tags, headline, kind)
    VALUES ('delete', old.seq, old.title, old.body, old.tags, old.headline, old.kind);
END;
CREATE TRIGGER memories_fts_reindex AFTER UPDATE OF title, body, tags, headline, kind, trashed_at
ON memories WHEN new.trashed_at IS NULL BEGIN
    INSERT INTO memories_fts(rowid, title, body, tags, headline, kind)
    VALUES (new.seq, new.title, new.body, new.tags, new.headline, new.kind);
END;
"#];
