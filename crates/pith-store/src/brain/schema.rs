//! The schema of `brain.db`: memories, their evidence, the FTS5 index over live memories, and
//! the change tracking the team brain's sync reads.

/// Schema history of `brain.db`; append only.
pub const MIGRATIONS: &[&str] = &[
    r#"
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
"#,
    r#"
-- Schema 2: what the team brain's sync needs (pith-store::brain::postgres).
-- `rev`: a local change counter; the sync pushes memories whose rev is past its cursor.
-- `changed_ms`: the version the conflict rule compares (the newer change wins), set from the
-- clock by the triggers below on every local change of what a memory says or of its trash
-- state; a memory written by the sync carries the version it came with, and the triggers leave
-- it (and its rev) alone. Hit counters and verifications are this machine's own: they move
-- neither.
ALTER TABLE memories ADD COLUMN rev INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memories ADD COLUMN changed_ms INTEGER NOT NULL DEFAULT 0;
UPDATE memories SET rev = seq, changed_ms = updated_at * 1000;
CREATE INDEX memories_by_rev ON memories(rev);
CREATE TABLE sync_state (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TRIGGER memories_changed_insert AFTER INSERT ON memories WHEN new.changed_ms = 0 BEGIN
    UPDATE memories
    SET rev = (SELECT coalesce(max(rev), 0) + 1 FROM memories),
        changed_ms = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
    WHERE seq = new.seq;
END;
CREATE TRIGGER memories_changed_update
AFTER UPDATE OF kind, title, body, tags, headline, trashed_at ON memories
WHEN new.changed_ms = old.changed_ms BEGIN
    UPDATE memories
    SET rev = (SELECT coalesce(max(rev), 0) + 1 FROM memories),
        changed_ms = max(CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),
                         old.changed_ms + 1)
    WHERE seq = new.seq;
END;
"#,
];

/// Every object the newest schema holds (SQLite's own `sqlite_*` aside), as `(type, name)`:
/// a brain that comes with a project must hold exactly these before pith reads it
/// ([`crate::sqlite::distrust`]). A unit test derives the list from [`MIGRATIONS`], so the two
/// cannot drift apart.
pub const OBJECTS: &[(&str, &str)] = &[
    ("table", "memories"),
    ("table", "evidence"),
    ("index", "evidence_by_path"),
    ("table", "memories_fts"),
    ("table", "memories_fts_data"),
    ("table", "memories_fts_idx"),
    ("table", "memories_fts_docsize"),
    ("table", "memories_fts_config"),
    ("trigger", "memories_fts_insert"),
    ("trigger", "memories_fts_delete"),
    ("trigger", "memories_fts_unindex"),
    ("trigger", "memories_fts_reindex"),
    ("index", "memories_by_rev"),
    ("table", "sync_state"),
    ("trigger", "memories_changed_insert"),
    ("trigger", "memories_changed_update"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_objects_list_is_what_the_migrations_make() {
        let conn = crate::sqlite::open_in_memory(MIGRATIONS).unwrap();
        let mut stmt = conn
            .prepare("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
            .unwrap();
        let mut made: Vec<(String, String)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let mut listed: Vec<(String, String)> = OBJECTS
            .iter()
            .map(|(k, n)| ((*k).to_owned(), (*n).to_owned()))
            .collect();
        made.sort();
        listed.sort();
        assert_eq!(made, listed);
    }
}
