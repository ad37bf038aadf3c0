//! Opening SQLite files with pith's rules.
//!
//! Three ways in: [`open`] for the one that may create a database (the proxy's ledger, a
//! brain's first save), [`open_existing`] for writers of a database that must already be there
//! (it never creates or chmods a file), and [`open_read_only`] for readers (`pith stats`), which
//! change nothing at all: not the mode, not the schema, not an empty file.
//!
//! What `open` creates is private whatever the umask: directories 0700, the database 0600 from
//! the moment it exists, and SQLite gives its `-wal` and `-shm` files the database's own mode,
//! so there is nothing to restrict afterwards (and no window in which they come and go).
//!
//! Every database is WAL with a busy timeout. Migrations are versioned by `PRAGMA user_version`,
//! one transaction each, append-only; a file newer than the binary is refused, and each
//! migration takes the write lock first and reads the version again, so two processes opening
//! a new file at once migrate it once. A reader with no writer on the file opens it immutable
//! (no side files, so a read-only directory is fine).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pith_sqlite_guard::Deadline;
use rusqlite::{Connection, OpenFlags};

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
    /// A reader found a file written by an older pith; readers never migrate, so it is left
    /// as it is until a writer opens it.
    #[error(
        "{path} was written by an older pith (schema version {found}; this pith reads {known}); {upgrade}"
    )]
    TooOld {
        /// The database file.
        path: PathBuf,
        /// The file's schema version (`PRAGMA user_version`).
        found: usize,
        /// The schema version this build reads.
        known: usize,
        /// What upgrades it, e.g. "run `pith proxy` once to upgrade it".
        upgrade: &'static str,
    },
    /// A reader was given a file that holds no pith database (it is left as it is).
    #[error("{path} is not a pith database: {reason}")]
    NotADatabase {
        /// The file.
        path: PathBuf,
        /// What it is instead: "it is empty", "it is not an SQLite database", ...
        reason: &'static str,
    },
    /// The database file could not be created.
    #[error("cannot create database {path}")]
    Create {
        /// The database file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A database from a project is not what pith expects there: another schema (a table
    /// that is a view, an object pith does not make). It is not read.
    #[error(transparent)]
    Unexpected(#[from] pith_sqlite_guard::Unexpected),
    /// Any other SQLite failure, such as a query on an open database.
    #[error(transparent)]
    Sql(#[from] rusqlite::Error),
    /// The team database (PostgreSQL) failed.
    #[error(transparent)]
    Team(Box<crate::postgres::PgError>),
    /// A database file's mode could not be set to 0600.
    #[error("cannot restrict the mode of {path} to 0600")]
    Io {
        /// The database, WAL or shared-memory file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl StoreError {
    /// The database takes no write now, whatever is written: another process holds its lock,
    /// the disk is full, the file is read-only or failing. A writer keeps what it was writing
    /// and tries again later.
    pub fn refuses_every_write(&self) -> bool {
        use rusqlite::ErrorCode;
        let StoreError::Sql(e) = self else {
            return false;
        };
        matches!(
            e.sqlite_error_code(),
            Some(
                ErrorCode::DatabaseBusy
                    | ErrorCode::DatabaseLocked
                    | ErrorCode::DiskFull
                    | ErrorCode::ReadOnly
                    | ErrorCode::SystemIoFailure
                    | ErrorCode::CannotOpen
            )
        )
    }
}

/// How long a writer waits for another process's lock before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Open (creating if needed) the database at `path` and bring it to the newest schema.
///
/// A missing directory is created 0700 and a missing file 0600, whatever the umask.
/// `migrations[i]` is the SQL batch that takes the schema from version `i` to `i + 1`; each runs
/// in its own transaction, so a crash mid-migration leaves the previous version intact.
pub fn open(path: &Path, migrations: &[&str]) -> Result<Connection, StoreError> {
    open_guarded(path, migrations, None)
}

/// What checks a database before a migration runs on it (a file a stranger may have written:
/// its triggers fire on the migration's writes), given the version the file claims; the
/// deadline it returns, if any, is armed again before each migration.
pub type BeforeMigrating<'a> =
    &'a dyn Fn(&mut Connection, &Path, usize) -> Result<Option<Deadline>, StoreError>;

/// [`open`], with `guard` run first when a migration is due.
pub fn open_guarded(
    path: &Path,
    migrations: &[&str],
    guard: Option<BeforeMigrating<'_>>,
) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir).map_err(|source| StoreError::CreateDir {
            path: dir.to_owned(),
            source,
        })?;
    }
    create_private_file(path).map_err(|source| StoreError::Create {
        path: path.to_owned(),
        source,
    })?;
    let mut conn = Connection::open(path).map_err(|source| StoreError::Open {
        path: path.to_owned(),
        source,
    })?;
    restrict_permissions(path)?;
    configure(&conn, BUSY_TIMEOUT).map_err(|source| StoreError::Open {
        path: path.to_owned(),
        source,
    })?;
    migrate_guarded(&mut conn, path, migrations, guard)?;
    Ok(conn)
}

/// Open the database at `path` for writing only if it exists, and bring it to the newest
/// schema. Never creates a file or a directory, never changes a mode: for commands that read
/// and record as they go (a brain search credits its hits).
pub fn open_existing(path: &Path, migrations: &[&str]) -> Result<Connection, StoreError> {
    open_existing_waiting(path, migrations, BUSY_TIMEOUT)
}

/// [`open_existing`], waiting at most `busy` for another process's lock (a hook has
/// milliseconds, not seconds).
pub fn open_existing_waiting(
    path: &Path,
    migrations: &[&str],
    busy: Duration,
) -> Result<Connection, StoreError> {
    open_existing_guarded(path, migrations, busy, None)
}

/// [`open_existing_waiting`], with `guard` run first when a migration is due.
pub fn open_existing_guarded(
    path: &Path,
    migrations: &[&str],
    busy: Duration,
    guard: Option<BeforeMigrating<'_>>,
) -> Result<Connection, StoreError> {
    let open_error = |source| StoreError::Open {
        path: path.to_owned(),
        source,
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(path, flags).map_err(open_error)?;
    configure(&conn, busy).map_err(open_error)?;
    migrate_guarded(&mut conn, path, migrations, guard)?;
    Ok(conn)
}

/// Open the database at `path` to read it, changing nothing: no file is created or chmodded,
/// no schema migrated, and a file that is empty or not SQLite is refused
/// ([`StoreError::NotADatabase`]), not made into a database. It must be at the newest schema
/// `migrations` leads to: an older one is [`StoreError::TooOld`], with `upgrade` saying what
/// upgrades it; a newer one [`StoreError::TooNew`].
///
/// While a writer has the database open (its `-wal` file exists) the read goes through SQLite's
/// locks and sees what was committed. Otherwise the file is opened immutable: SQLite then needs
/// no `-wal` or `-shm` files at all, so nothing is left beside the database and it can be read
/// in a directory the reader cannot write.
pub fn open_read_only(
    path: &Path,
    migrations: &[&str],
    upgrade: &'static str,
) -> Result<Connection, StoreError> {
    open_read_only_waiting(path, migrations, upgrade, BUSY_TIMEOUT)
}

/// [`open_read_only`], waiting at most `busy` for another process's lock.
pub fn open_read_only_waiting(
    path: &Path,
    migrations: &[&str],
    upgrade: &'static str,
    busy: Duration,
) -> Result<Connection, StoreError> {
    open_read_only_telling(path, migrations, upgrade, busy).map(|(conn, _)| conn)
}

/// [`open_read_only_waiting`], and whether the connection was opened immutable (no writer had
/// the file open): such a connection never sees later commits, so it must not be kept.
pub(crate) fn open_read_only_telling(
    path: &Path,
    migrations: &[&str],
    upgrade: &'static str,
    busy: Duration,
) -> Result<(Connection, bool), StoreError> {
    let not_a_database = |reason| StoreError::NotADatabase {
        path: path.to_owned(),
        reason,
    };
    // Only `stat` here, never a descriptor of our own: closing any descriptor of a file drops
    // every POSIX lock this process holds on it, and a reader inside the proxy would so take
    // the writer's locks away (another process could then delete the `-wal` under it).
    // SQLite's own connections share one descriptor table per file and defer such closes.
    let size = std::fs::metadata(path)
        .map_err(|source| StoreError::Read {
            path: path.to_owned(),
            source,
        })?
        .len();
    if size == 0 {
        return Err(not_a_database("it is empty"));
    }
    let open_error = |source| StoreError::Open {
        path: path.to_owned(),
        source,
    };
    let mut immutable = !side_file(path, "-wal").exists();
    let conn = match connect_read_only(path, immutable, busy) {
        // The writer closed (taking its `-wal` with it) in between, and SQLite could not make
        // the files it then wants: read the file as it is.
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::CannotOpen) => {
            immutable = true;
            connect_read_only(path, true, busy)
        }
        other => other,
    }
    .map_err(|e| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => not_a_database("it is not an SQLite database"),
        _ => open_error(e),
    })?;
    let found: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(open_error)?;
    let found = usize::try_from(found).unwrap_or(0);
    let known = migrations.len();
    if found == 0 {
        return Err(not_a_database("it has no pith schema"));
    }
    if found > known {
        return Err(StoreError::TooNew {
            path: path.to_owned(),
            found,
            known,
        });
    }
    if found < known {
        return Err(StoreError::TooOld {
            path: path.to_owned(),
            found,
            known,
            upgrade,
        });
    }
    Ok((conn, immutable))
}

/// A read-only connection; `immutable`: without locks or side files (the file must not change
/// while it is read).
fn connect_read_only(path: &Path, immutable: bool, busy: Duration) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let mut uri = file_uri(path);
    uri.push_str(if immutable {
        "?mode=ro&immutable=1"
    } else {
        "?mode=ro"
    });
    let conn = Connection::open_with_flags(uri, flags)?;
    conn.busy_timeout(busy)?;
    // Opening is lazy: read the schema now, so a file SQLite cannot use fails here.
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
    Ok(conn)
}

/// `path` as an SQLite `file:` URI, every byte but unreserved ones and `/` percent-encoded.
fn file_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

/// `path` with `suffix` appended to its file name: SQLite's `-wal` and `-shm` files.
fn side_file(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// Create `dir` and its missing parents, each 0700 whatever the umask.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Create `path` empty with mode 0600 unless it exists, so SQLite never creates it with the
/// umask's mode (and its `-wal`/`-shm` files, which take the database's mode, are private too).
fn create_private_file(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other.map(drop),
    }
}

/// Open an in-memory database with the same schema (tests and benchmarks).
pub fn open_in_memory(migrations: &[&str]) -> Result<Connection, StoreError> {
    let conn = Connection::open_in_memory()?;
    migrate(&conn, Path::new(":memory:"), migrations)?;
    Ok(conn)
}

fn configure(conn: &Connection, busy: Duration) -> rusqlite::Result<()> {
    conn.busy_timeout(busy)?;
    // Switching to WAL does not wait on the busy handler: when another process is switching
    // the same new file at that moment, retry within the busy timeout.
    let deadline = std::time::Instant::now() + busy;
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

/// [`migrate`], with `guard` run first when the file's version is older than the newest.
fn migrate_guarded(
    conn: &mut Connection,
    path: &Path,
    migrations: &[&str],
    guard: Option<BeforeMigrating<'_>>,
) -> Result<(), StoreError> {
    let mut deadline = None;
    if let Some(guard) = guard {
        let current: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let current = usize::try_from(current).unwrap_or(0);
        if current < migrations.len() {
            deadline = guard(conn, path, current)?;
        }
    }
    migrate_each(conn, path, migrations, &|| {
        if let Some(deadline) = &deadline {
            deadline.arm();
        }
    })
}

fn migrate(conn: &Connection, path: &Path, migrations: &[&str]) -> Result<(), StoreError> {
    migrate_each(conn, path, migrations, &|| {})
}

/// Run the migrations the file has not had, each in its own transaction, `before_each` called
/// before each (a guard's deadline gives each its own time).
fn migrate_each(
    conn: &Connection,
    path: &Path,
    migrations: &[&str],
    before_each: &dyn Fn(),
) -> Result<(), StoreError> {
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
        before_each();
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

/// A database made before pith created its files 0600 (or by someone else): narrow it to 0600.
/// The `-wal` and `-shm` files come and go as other processes open and close the database, so
/// one that is gone is not an error; a file already 0600 is not touched.
#[cfg(unix)]
fn restrict_permissions(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::PermissionsExt;
    for p in [
        path.to_owned(),
        side_file(path, "-wal"),
        side_file(path, "-shm"),
    ] {
        let result = std::fs::metadata(&p).and_then(|meta| {
            if meta.permissions().mode() & 0o777 == 0o600 {
                return Ok(());
            }
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))
        });
        match result {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && p != path => {}
            other => other.map_err(|source| StoreError::Io { path: p, source })?,
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

    #[test]
    fn errors_name_their_cause_once() {
        use pith_testkit::errors::assert_causes_said_once;
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
    fn processes_opening_while_others_close_never_fail() {
        // The WAL and shared-memory files come and go as processes open and close the
        // database: the last one to close removes them, maybe between another opener's look and
        // its use. Few processes that each hold the database briefly (like short commands) make
        // "the last one" frequent: with the old exists-then-chmod, 7 of 8 runs failed.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        drop(open(&path, MIGRATIONS).unwrap());
        let exe = std::env::current_exe().unwrap();
        let children: Vec<_> = (0..4)
            .map(|i| {
                std::process::Command::new(&exe)
                    .args(["--exact", "sqlite::tests::opener_process", "--ignored"])
                    .env("PITH_TEST_OPENER_DB", &path)
                    .env("PITH_TEST_OPENER_WRITES", if i < 3 { "1" } else { "0" })
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// One of the processes of `processes_opening_while_others_close_never_fail`.
    #[test]
    #[ignore = "run in its own process by processes_opening_while_others_close_never_fail"]
    fn opener_process() {
        let Some(path) = std::env::var_os("PITH_TEST_OPENER_DB") else {
            return;
        };
        let writes = std::env::var_os("PITH_TEST_OPENER_WRITES").is_some_and(|v| v == "1");
        for _ in 0..800 {
            let conn = open(Path::new(&path), MIGRATIONS).unwrap();
            if writes {
                conn.execute("INSERT INTO t (a) VALUES (1)", []).unwrap();
            } else {
                conn.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
                    .unwrap();
            }
            drop(conn);
            // Like separate short-lived commands: often nobody has the database open.
            std::thread::sleep(Duration::from_micros(1000));
        }
    }

    #[cfg(unix)]
    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[cfg(unix)]
    fn make_readable_to_all(path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }

    #[test]
    #[cfg(unix)]
    fn read_only_changes_nothing_and_sees_a_writers_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db");
        let conn = open(&path, MIGRATIONS).unwrap();
        conn.execute("INSERT INTO t (a) VALUES (1)", []).unwrap();
        drop(conn);
        make_readable_to_all(&path);
        let bytes = std::fs::read(&path).unwrap();

        let count = |conn: &Connection| -> i64 {
            conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .unwrap()
        };
        let reader = open_read_only(&path, MIGRATIONS, "upgrade it").unwrap();
        assert_eq!(count(&reader), 1);
        assert!(reader.execute("INSERT INTO t (a) VALUES (2)", []).is_err());
        drop(reader);
        assert_eq!(mode(&path), 0o644);
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        assert_eq!(names(dir.path()), ["x.db"]);

        // With a writer open, the reader sees what it committed (still in the WAL).
        let writer = open_existing(&path, MIGRATIONS).unwrap();
        writer.execute("INSERT INTO t (a) VALUES (3)", []).unwrap();
        let reader = open_read_only(&path, MIGRATIONS, "upgrade it").unwrap();
        assert_eq!(count(&reader), 2);
        assert_eq!(mode(&path), 0o644, "open_existing changed the mode");
    }

    #[test]
    fn read_only_refuses_what_it_cannot_read_and_leaves_it_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str| dir.path().join(name);

        let err = open_read_only(&at("missing.db"), MIGRATIONS, "upgrade it").unwrap_err();
        assert!(matches!(err, StoreError::Read { .. }), "{err}");
        assert!(!at("missing.db").exists());
        let err = open_existing(&at("missing.db"), MIGRATIONS).unwrap_err();
        assert!(matches!(err, StoreError::Open { .. }), "{err}");
        assert!(!at("missing.db").exists());

        std::fs::write(at("empty.db"), "").unwrap();
        let err = open_read_only(&at("empty.db"), MIGRATIONS, "upgrade it").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{} is not a pith database: it is empty",
                at("empty.db").display()
            )
        );
        assert_eq!(std::fs::metadata(at("empty.db")).unwrap().len(), 0);

        std::fs::write(
            at("text.db"),
            "some words, and more than sixteen bytes of them",
        )
        .unwrap();
        let err = open_read_only(&at("text.db"), MIGRATIONS, "upgrade it").unwrap_err();
        assert!(
            err.to_string().ends_with("it is not an SQLite database"),
            "{err}"
        );

        drop(open(&at("old.db"), &MIGRATIONS[..1]).unwrap());
        let err =
            open_read_only(&at("old.db"), MIGRATIONS, "run `x` once to upgrade it").unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::TooOld {
                    found: 1,
                    known: 2,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().ends_with("; run `x` once to upgrade it"),
            "{err}"
        );
        // Not migrated: still readable as version 1.
        drop(open_read_only(&at("old.db"), &MIGRATIONS[..1], "upgrade it").unwrap());

        let err = open_read_only(&at("old.db"), &[], "upgrade it").unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::TooNew {
                    found: 1,
                    known: 0,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(names(dir.path()), ["empty.db", "old.db", "text.db"]);
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
