//! Reading an SQLite file a stranger may have written (DESIGN principle 13): a `brain.db` that
//! came with a cloned repository, an OpenCode database pith imports from.
//!
//! SQLite runs what a file's schema says: a table pith reads can be a view (a recursive one
//! hung `pith hook` forever and filled the disk with a sort's temporary file), a trigger runs
//! on pith's writes, and functions named in the schema run with pith's rights. So a connection
//! to such a file is [`distrust`]ed before its first read: `trusted_schema = OFF` (no function
//! with side effects runs from the schema), the objects pith reads must be what it expects, of
//! the kinds it expects, and every statement runs under a [`Deadline`] that SQLite's progress
//! handler enforces. A leaf of its own so that both the store and the history import (which
//! does not depend on the store) use the one rule.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rusqlite::Connection;

/// The file is not what pith expects there (another schema), or the check could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Unexpected {
    /// A table pith reads is a view, or missing, or an object pith does not make is there.
    #[error("{path} is not a database pith can read safely: {what}")]
    Schema {
        /// The database file.
        path: PathBuf,
        /// What was found (names quoted and escaped).
        what: String,
    },
    /// The schema could not be read or the guard not installed.
    #[error("cannot check the schema of {path}")]
    Sql {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
}

/// The time one call may spend in statements, armed before each call ([`Deadline::arm`]);
/// SQLite's progress handler interrupts a statement past it (the statement then fails with
/// `SQLITE_INTERRUPT`, "interrupted").
#[derive(Debug, Clone)]
pub struct Deadline {
    /// Microseconds from `base` at which the running call must stop.
    until_us: Arc<AtomicU64>,
    base: Instant,
    limit: Duration,
}

impl Deadline {
    /// Give the next call `limit` from now.
    pub fn arm(&self) {
        let until = self.base.elapsed() + self.limit;
        self.until_us.store(
            u64::try_from(until.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// How long each call may take.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    fn passed(&self) -> bool {
        u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX)
            > self.until_us.load(Ordering::Relaxed)
    }
}

/// How often (in SQLite virtual machine steps) the progress handler looks at the clock: a
/// few microseconds of work between looks.
const PROGRESS_STEPS: i32 = 1000;

/// The longest string or blob a distrusted database may make or hold (SQLite's
/// `SQLITE_LIMIT_LENGTH`; its default is a billion bytes): one step of SQLite's machine, which
/// the [`Deadline`] cannot stop, builds a value at once (`printf('%.*c', 400000000, 'x')` in a
/// planted trigger or generated column), so this bounds the memory one step can take.
pub const VALUE_MAX: i32 = 64 << 20;

/// What [`distrust`] requires of a schema.
#[derive(Debug, Clone, Copy)]
pub enum Schema<'a> {
    /// Exactly these `(type, name)` objects, SQLite's own `sqlite_*` aside: a database pith
    /// makes itself.
    Exactly(&'a [(&'a str, &'a str)]),
    /// At least these, each of the kind named: another program's database, of which pith
    /// reads a few tables.
    AtLeast(&'a [(&'a str, &'a str)]),
}

/// Treat `conn`'s database (the file at `path`) as a stranger's: no function with side effects
/// runs from its schema (`trusted_schema = OFF`), no value is longer than [`VALUE_MAX`], its
/// schema must be as `schema` says, and a
/// statement running past the returned [`Deadline`] (armed now; `limit` from each
/// [`Deadline::arm`]) is interrupted.
pub fn distrust(
    conn: &mut Connection,
    path: &Path,
    schema: Schema<'_>,
    limit: Duration,
) -> Result<Deadline, Unexpected> {
    let deadline = Deadline {
        until_us: Arc::new(AtomicU64::new(0)),
        base: Instant::now(),
        limit,
    };
    deadline.arm();
    let sql = |source| Unexpected::Sql {
        path: path.to_owned(),
        source,
    };
    let check = deadline.clone();
    conn.progress_handler(PROGRESS_STEPS, Some(move || check.passed()))
        .map_err(sql)?;
    conn.pragma_update(None, "trusted_schema", "OFF")
        .map_err(sql)?;
    conn.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH, VALUE_MAX)
        .map_err(sql)?;
    let found: Vec<(String, String)> = conn
        .prepare("SELECT type, name FROM sqlite_master")
        .and_then(|mut stmt| {
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
        .map_err(sql)?;
    let unexpected = |what: String| Unexpected::Schema {
        path: path.to_owned(),
        what,
    };
    let (expected, exact) = match schema {
        Schema::Exactly(objects) => (objects, true),
        Schema::AtLeast(objects) => (objects, false),
    };
    for (kind, name) in expected {
        match found.iter().find(|(_, n)| n == name) {
            Some((k, _)) if k == kind => {}
            Some((k, _)) => {
                return Err(unexpected(format!(
                    "`{name}` is a {}, not a {kind}",
                    quoted(k, 16)
                )));
            }
            None => return Err(unexpected(format!("it has no {kind} `{name}`"))),
        }
    }
    if exact
        && let Some((kind, name)) = found.iter().find(|(k, n)| {
            !n.starts_with("sqlite_") && !expected.iter().any(|(ek, en)| ek == k && en == n)
        })
    {
        return Err(unexpected(format!(
            "it holds a {} {} that pith does not make",
            quoted(kind, 16),
            quoted(name, 80)
        )));
    }
    Ok(deadline)
}

/// A stranger's name as it is printed: at most `max` characters, escaped (Rust's debug form,
/// so a control character cannot rewrite the terminal); the expected kinds print bare.
fn quoted(text: &str, max: usize) -> String {
    if text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') && text.len() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut:?}")
}

/// Whether `error` is a statement the [`Deadline`] interrupted.
pub fn interrupted(error: &rusqlite::Error) -> bool {
    error.sqlite_error_code() == Some(rusqlite::ErrorCode::OperationInterrupted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(sql: &str) -> (tempfile::TempDir, PathBuf, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(sql).unwrap();
        (dir, path, conn)
    }

    #[test]
    fn a_table_that_is_a_view_or_missing_is_refused() {
        let (_d, path, mut conn) = db("CREATE TABLE a (x); CREATE VIEW b AS SELECT 1 AS x;");
        let want = [("table", "a"), ("table", "b")];
        let err = distrust(
            &mut conn,
            &path,
            Schema::AtLeast(&want),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("`b` is a view, not a table"),
            "{err}"
        );
        let err = distrust(
            &mut conn,
            &path,
            Schema::AtLeast(&[("table", "c")]),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(err.to_string().contains("it has no table `c`"), "{err}");
        assert!(
            distrust(
                &mut conn,
                &path,
                Schema::AtLeast(&[("table", "a")]),
                Duration::from_secs(1)
            )
            .is_ok()
        );
        let err = distrust(
            &mut conn,
            &path,
            Schema::Exactly(&[("table", "a")]),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("a view b that pith does not make"),
            "{err}"
        );
    }

    #[test]
    fn a_statement_past_the_deadline_is_interrupted_and_the_next_call_has_its_own_time() {
        let (_d, path, mut conn) = db("CREATE TABLE a (x); INSERT INTO a VALUES (1);");
        let deadline = distrust(
            &mut conn,
            &path,
            Schema::AtLeast(&[("table", "a")]),
            Duration::from_millis(50),
        )
        .unwrap();
        let endless = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)
                       SELECT count(*) FROM r";
        deadline.arm();
        let err = conn
            .query_row(endless, [], |r| r.get::<_, i64>(0))
            .unwrap_err();
        assert!(interrupted(&err), "{err}");
        deadline.arm();
        let one: i64 = conn.query_row("SELECT x FROM a", [], |r| r.get(0)).unwrap();
        assert_eq!(one, 1);
    }

    /// A generated column can make a value of hundreds of MB in one step the deadline cannot
    /// stop: the length limit refuses it before it is built.
    #[test]
    fn a_value_past_the_limit_is_refused_not_built() {
        let (_d, path, mut conn) = db(&format!(
            "CREATE TABLE a (x, big AS (printf('%.*c', {}, 'x')));",
            VALUE_MAX as i64 * 4
        ));
        let deadline = distrust(
            &mut conn,
            &path,
            Schema::Exactly(&[("table", "a")]),
            Duration::from_secs(5),
        )
        .unwrap();
        deadline.arm();
        let err = conn
            .execute("INSERT INTO a (x) VALUES (1)", [])
            .unwrap_err();
        assert_eq!(
            err.sqlite_error_code(),
            Some(rusqlite::ErrorCode::TooBig),
            "{err}"
        );
        let err = conn
            .query_row("SELECT printf('%.*c', 100000000, 'x')", [], |r| {
                r.get::<_, String>(0)
            })
            .unwrap_err();
        assert_eq!(err.sqlite_error_code(), Some(rusqlite::ErrorCode::TooBig));
        let small: String = conn
            .query_row("SELECT printf('%.*c', 1000, 'x')", [], |r| r.get(0))
            .unwrap();
        assert_eq!(small.len(), 1000);
    }

    #[test]
    fn a_stranger_s_names_are_escaped() {
        let (_d, path, mut conn) = db("CREATE TABLE \"t\x1b[2J\" (x);");
        let err = distrust(
            &mut conn,
            &path,
            Schema::Exactly(&[]),
            Duration::from_secs(1),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            !text.contains('\x1b') && text.contains("\\u{1b}"),
            "{text:?}"
        );
    }
}
