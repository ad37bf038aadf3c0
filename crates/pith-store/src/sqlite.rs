//! Opening SQLite files with pith's rules.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;

/// A storage failure, with the file it concerns where there is one.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database's directory could not be created.
    #[error("cannot create directory {path}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// SQLite could not open or configure the file.
    #[error("cannot open database {path}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// A migration failed; its transaction was rolled back.
    #[error("cannot migrate database {path} to schema version {version}")]
    Migrate {
        /// The database file.
        path: PathBuf,
        /// The schema version the failed migration leads to.
        version: usize,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The file was written by a newer pith; it is left untouched.
    #[error(
        "database {path} has schema version {found}, newer than this pith knows ({known}); upgrade pith"
    )]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// The file's schema version (`PRAGMA user_version`).
        found: usize,
        /// The newest schema version this build knows.
        known: usize,
    },
    /// Any other SQLite failure, such as a query on an open database.
    #[error(transparent)]
    Sql(#[from] rusqlite::Error),
    /// A database file's mode could not be set to 0600.
    #[error("cannot restrict the mode of {path} to 0600")]
    Io {
        /// The database, WAL or shared-memory file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// How long a writer waits for another process's lock before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Open (creating if needed) the database at `path` and bring it to the newest schema.
///
/// `migrations[i]` is the SQL batch that takes the schema from version `i` to `i + 1`; each runs
/// in its own transaction, so a crash mid-migration leaves the previous version intact.
pub fn open(path: &Path, migrations: &[&str]) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: dir.to_owned(),
            source,
        })?;
    }
    let conn = Connection::open(path).map_err(|source| StoreError::Open {
        path: path.to_owned(),
        source,
    })?;
    restrict_permissions(path)?;
    configure(&conn).map_err(|source| StoreError::Open {
        path: path.to_owned(),
        source,
    })?;
    migrate(&conn, path, migrations)?;
    Ok(conn)
}

/// Open an in-memory database with the same schema (tests and benchmarks).
pub fn open_in_memory(migrations: &[&str]) -> Result<Connection, StoreError> {
    let conn = Connection::open_in_memory()?;
    migrate(&conn, Path::new(":memory:"), migrations)?;
    Ok(conn)
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Switching to WAL does not wait on the busy handler: when another process is switching
    // the same new file at that moment, retry within the busy timeout.
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => break other?,
        }
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

fn migrate(conn: &Connection, path: &Path, migrations: &[&str]) -> Result<(), StoreError> {
    let current: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let current = usize::try_from(current).unwrap_or(0);
    if current > migrations.len() {
        return Err(StoreError::TooNew {
            path: path.to_owned(),
            found: current,
            known: migrations.len(),
        });
    }
    for (i, sql) in migrations.iter().enumerate().skip(current) {
        let version = i + 1;
        // IMMEDIATE takes the write lock up front, and the version is re-read under it: two
        // processes opening a new file at once must not both run the same migration.
        let run = || -> rusqlite::Result<()> {
            let tx = rusqlite::Transaction::new_unchecked(
                conn,
                rusqlite::TransactionBehavior::Immediate,
            )?;
            let now: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
            if usize::try_from(now).unwrap_or(0) >= version {
                return Ok(());
            }
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", version as i64)?;
            tx.commit()
        };
        run().map_err(|source| StoreError::Migrate {
            path: path.to_owned(),
            version,
            source,
        })?;
    }
    Ok(())
}

#[cfg(unix)]
fn restrict_permissions(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::PermissionsExt;
    let perms = std::fs::Permissions::from_mode(0o600);
    for p in [
        path.to_owned(),
        path.with_extension("db-wal"),
        path.with_extension("db-shm"),
    ] {
        if p.exists() {
            std::fs::set_permissions(&p, perms.clone())
                .map_err(|source| StoreError::Io { path: p, source })?;
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn restrict_permissions(_path: &Path) -> Result<(), StoreError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIGRATIONS: &[&str] = &[
        "CREATE TABLE t (a INTEGER);",
        "ALTER TABLE t ADD COLUMN b TEXT;",
    ];

    #[test]
    fn migrates_once_and_sets_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/x.db");
        let conn = open(&path, MIGRATIONS).unwrap();
        conn.execute("INSERT INTO t (a, b) VALUES (1, 'x')", [])
            .unwrap();
        drop(conn);
        let conn = open(&path, MIGRATIONS).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let m = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(m & 0o777, 0o600);
        }
    }

    #[test]
    fn processes_opening_a_new_file_at_once_migrate_it_once() {
        for _ in 0..10 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("x.db");
            let start = std::sync::Arc::new(std::sync::Barrier::new(3));
            let openers: Vec<_> = (0..3)
                .map(|_| {
                    let (path, start) = (path.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        open(&path, MIGRATIONS).map(drop)
                    })
                })
                .collect();
            for o in openers {
                o.join().unwrap().unwrap();
            }
        }
    }

    /// Every message in `e`'s chain adds to its cause instead of repeating it (the binary
    /// prints the whole chain).
    fn assert_causes_said_once(e: &(dyn std::error::Error + 'static)) {
        let mut at = e;
        while let Some(cause) = at.source() {
            let (message, cause_message) = (at.to_string(), cause.to_string());
            assert!(
                !message.contains(&cause_message),
                "{message:?} repeats its cause {cause_message:?}"
            );
            at = cause;
        }
    }

    #[test]
    fn errors_name_their_cause_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let err = open(&file.join("x.db"), MIGRATIONS).unwrap_err();
        assert!(matches!(err, StoreError::CreateDir { .. }), "{err}");
        assert_causes_said_once(&err);
        let err = open(&dir.path().join("x.db"), &["CREATE TABLE"]).unwrap_err();
        assert!(matches!(err, StoreError::Migrate { .. }), "{err}");
        assert_causes_said_once(&err);
    }

    #[test]
    fn refuses_a_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        drop(open(&path, MIGRATIONS).unwrap());
        let err = open(&path, &MIGRATIONS[..1]).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::TooNew {
                    found: 2,
                    known: 1,
                    ..
                }
            ),
            "{err}"
        );
    }
}
