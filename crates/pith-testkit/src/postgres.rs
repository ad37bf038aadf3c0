//! A real, throwaway PostgreSQL server for tests: Debian's `postgresql` binaries (installed by
//! `scripts/test`), `initdb` into a temporary directory, listening on a free loopback port, with
//! trust authentication for the loopback superuser `pith`.
//!
//! One server per test binary ([`PgServer::shared`]) keeps CI fast; each test takes a database of
//! its own ([`PgServer::database`]). PostgreSQL refuses to run as root (CI runs as root), so as
//! root the server runs as the `postgres` system user (`Command::uid`, no `unsafe`).
//!
//! Teardown: a watchdog shell, started beside the server, reads a pipe whose write end only the
//! test process holds; when that process ends, however it ends, the read returns, and the
//! watchdog shuts the server down (fast shutdown) and removes the directory. A static server is
//! never dropped, so nothing else would.
//!
//! [`PgServer::kill`] and [`PgServer::start_again`] are the fault tests' lever: an immediate
//! shutdown (what a crash looks like to clients) and a restart on the same port and data.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Why a test server could not be had.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The PostgreSQL binaries are not on this machine.
    #[error(
        "no PostgreSQL server binaries (looked in $PITH_TEST_PG_BIN and /usr/lib/postgresql/*/bin): \
         install Debian's postgresql package (scripts/test does)"
    )]
    NotInstalled,
    /// Running as root, but there is no `postgres` system user to run the server as.
    #[error(
        "running as root and there is no `postgres` user to run PostgreSQL as (initdb refuses root)"
    )]
    NoServerUser,
    /// A step of setting the server up failed.
    #[error("{step}")]
    Io {
        /// What was being done.
        step: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A PostgreSQL tool exited with an error.
    #[error("{tool} failed: {stderr}")]
    Tool {
        /// The tool and what it was asked.
        tool: String,
        /// What it said.
        stderr: String,
    },
    /// The server did not accept connections in time.
    #[error("PostgreSQL did not accept connections on port {port} within {secs} s")]
    NotReady {
        /// Its port.
        port: u16,
        /// How long it was given.
        secs: u64,
    },
}

fn io(step: impl Into<String>) -> impl FnOnce(std::io::Error) -> PgError {
    let step = step.into();
    move |source| PgError::Io { step, source }
}

/// A PostgreSQL server of the tests' own.
pub struct PgServer {
    bin: PathBuf,
    root: PathBuf,
    port: u16,
    run_as: Option<(u32, u32)>,
    server: Mutex<Option<Child>>,
    // Held, never written: its closing (the test process ending) is the watchdog's signal.
    _watchdog: ChildStdin,
}

const SUPERUSER: &str = "pith";
const READY_WITHIN: Duration = Duration::from_secs(30);

static SHARED: OnceLock<Result<PgServer, String>> = OnceLock::new();
static NEXT_DATABASE: AtomicU64 = AtomicU64::new(0);

impl PgServer {
    /// The test binary's one server, started on first use. Panics (with the reason) when it
    /// cannot be started: a test that needs PostgreSQL must fail, not pass, without it.
    #[expect(
        clippy::panic,
        reason = "test setup: no server means the test cannot run"
    )]
    pub fn shared() -> &'static PgServer {
        match SHARED.get_or_init(|| PgServer::start().map_err(|e| crate::errors::chain(&e))) {
            Ok(server) => server,
            Err(e) => panic!("cannot start the test PostgreSQL: {e}"),
        }
    }

    /// Start a new server (most tests want [`PgServer::shared`]).
    pub fn start() -> Result<PgServer, PgError> {
        let bin = bin_dir().ok_or(PgError::NotInstalled)?;
        let run_as = if is_root() {
            Some(postgres_user().ok_or(PgError::NoServerUser)?)
        } else {
            None
        };
        let root = std::env::temp_dir().join(format!(
            "pith-pg-{}-{}",
            std::process::id(),
            NEXT_DATABASE.fetch_add(1, Ordering::Relaxed)
        ));
        // A directory left by an earlier process of the same id (its watchdog never ran).
        let _ = std::fs::remove_dir_all(&root);
        let data = root.join("data");
        let sock = root.join("sock");
        for dir in [&root, &data, &sock] {
            std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        }
        // The server user must reach its directories through the root.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755))
            .map_err(io("chmod of the server's directory"))?;
        if let Some((uid, gid)) = run_as {
            for dir in [&data, &sock] {
                std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                    .map_err(io(format!("chown of {}", dir.display())))?;
            }
        }
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700))
            .map_err(io("chmod of the data directory"))?;
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync"])
            .args(["--locale=C.UTF-8"]);
        run_tool(as_user(&mut initdb, run_as), "initdb")?;

        // The watchdog: waits for the test process to end, then stops the server and cleans up.
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg(
                "read _ignored; pid=$(head -n 1 \"$1/postmaster.pid\" 2>/dev/null); \
                 if [ -n \"$pid\" ]; then kill -INT \"$pid\" 2>/dev/null; \
                 i=0; while kill -0 \"$pid\" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; fi; \
                 rm -rf \"$2\"",
            )
            .arg("watchdog")
            .arg(&data)
            .arg(&root)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io("starting the server's watchdog"))?;
        let watchdog_pipe = watchdog.stdin.take().ok_or_else(|| PgError::Io {
            step: "the watchdog's pipe".into(),
            source: std::io::Error::other("no stdin"),
        })?;

        let mut server = PgServer {
            bin,
            root,
            port: 0,
            run_as,
            server: Mutex::new(None),
            _watchdog: watchdog_pipe,
        };
        // A free port can be taken between finding it and the server binding it: try a few.
        let mut last = None;
        for _ in 0..5 {
            server.port = free_port().map_err(io("finding a free loopback port"))?;
            match server.start_again() {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(PgError::NotReady { port: 0, secs: 0 }))
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A connection URL for `database` as the superuser (trust authentication on loopback).
    pub fn url(&self, database: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{database}", self.port)
    }

    /// A new, empty database of its own; its URL.
    pub fn database(&self) -> Result<String, PgError> {
        let name = format!(
            "t{}_{}",
            std::process::id(),
            NEXT_DATABASE.fetch_add(1, Ordering::Relaxed)
        );
        self.psql("postgres", &format!("CREATE DATABASE {name}"))?;
        Ok(self.url(&name))
    }

    /// Run `sql` in `database` with psql as the superuser; its output (unaligned, tuples only).
    pub fn psql(&self, database: &str, sql: &str) -> Result<String, PgError> {
        let mut psql = Command::new(self.bin.join("psql"));
        psql.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-U", SUPERUSER, "-d", database])
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-c")
            .arg(sql);
        run_tool(&mut psql, "psql")
    }

    /// Stop the server the way a crash does (immediate shutdown: every connection cut, no
    /// checkpoint), and wait until it is gone.
    pub fn kill(&self) -> Result<(), PgError> {
        let mut slot = self.server.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(mut child) = slot.take() {
            let pid = child.id().to_string();
            run_tool(Command::new("kill").args(["-QUIT", &pid]), "kill -QUIT")?;
            child.wait().map_err(io("waiting for PostgreSQL to exit"))?;
        }
        Ok(())
    }

    /// Start the server (again) on its port and data, and wait until it accepts connections.
    pub fn start_again(&self) -> Result<(), PgError> {
        let mut slot = self.server.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_some() {
            return Ok(());
        }
        let log = std::fs::File::create(self.root.join("server.log"))
            .map_err(io("creating the server log"))?;
        let mut postgres = Command::new(self.bin.join("postgres"));
        postgres
            .arg("-D")
            .arg(self.root.join("data"))
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(self.root.join("sock"))
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=200"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let mut child = as_user(&mut postgres, self.run_as)
            .spawn()
            .map_err(io("starting postgres"))?;
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let mut ready = Command::new(self.bin.join("pg_isready"));
            ready
                .args(["-q", "-h", "127.0.0.1", "-U", SUPERUSER, "-d", "postgres"])
                .arg("-p")
                .arg(self.port.to_string());
            if ready.status().is_ok_and(|s| s.success()) {
                *slot = Some(child);
                return Ok(());
            }
            let exited = child.try_wait().map_err(io("watching postgres start"))?;
            if exited.is_some() || Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                let log = std::fs::read_to_string(self.root.join("server.log")).unwrap_or_default();
                if exited.is_some() {
                    return Err(PgError::Tool {
                        tool: "postgres".into(),
                        stderr: log,
                    });
                }
                return Err(PgError::NotReady {
                    port: self.port,
                    secs: READY_WITHIN.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Turn TLS on (a new CA and a server certificate for 127.0.0.1 and localhost, made with
    /// the `openssl` command; `ssl = on` and a configuration reload): the CA's PEM file, for a
    /// client's `sslrootcert`. Plain connections are still accepted.
    pub fn enable_tls(&self) -> Result<PathBuf, PgError> {
        let dir = self.root.join("tls");
        std::fs::create_dir_all(&dir).map_err(io("creating the TLS directory"))?;
        let path = |name: &str| dir.join(name);
        let extensions = path("server.ext");
        std::fs::write(
            &extensions,
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )
        .map_err(io("writing the certificate extensions"))?;
        let openssl = |args: &[&std::ffi::OsStr]| -> Result<String, PgError> {
            run_tool(Command::new("openssl").args(args), "openssl")
        };
        let os = |s: &'static str| std::ffi::OsStr::new(s);
        let p = |name: &str| path(name).into_os_string();
        let (ca_key, ca, key, csr, crt) = (
            p("ca.key"),
            p("ca.pem"),
            p("server.key"),
            p("server.csr"),
            p("server.crt"),
        );
        let ec = [
            os("-newkey"),
            os("ec"),
            os("-pkeyopt"),
            os("ec_paramgen_curve:prime256v1"),
        ];
        openssl(
            &[
                &[os("req"), os("-x509"), os("-nodes"), os("-days"), os("2")][..],
                &ec,
                &[
                    os("-subj"),
                    os("/CN=pith test CA"),
                    os("-keyout"),
                    &ca_key,
                    os("-out"),
                    &ca,
                ],
                &[
                    os("-addext"),
                    os("basicConstraints=critical,CA:TRUE"),
                    os("-addext"),
                    os("keyUsage=critical,keyCertSign,cRLSign"),
                ],
            ]
            .concat(),
        )?;
        openssl(
            &[
                &[os("req"), os("-nodes")][..],
                &ec,
                &[
                    os("-subj"),
                    os("/CN=127.0.0.1"),
                    os("-keyout"),
                    &key,
                    os("-out"),
                    &csr,
                ],
            ]
            .concat(),
        )?;
        let ext = extensions.into_os_string();
        openssl(&[
            os("x509"),
            os("-req"),
            os("-in"),
            &csr,
            os("-CA"),
            &ca,
            os("-CAkey"),
            &ca_key,
            os("-CAcreateserial"),
            os("-days"),
            os("2"),
            os("-extfile"),
            &ext,
            os("-out"),
            &crt,
        ])?;
        // The server reads its key only if only it can.
        std::fs::set_permissions(path("server.key"), std::fs::Permissions::from_mode(0o600))
            .map_err(io("chmod of the server key"))?;
        if let Some((uid, gid)) = self.run_as {
            for name in ["server.key", "server.crt"] {
                std::os::unix::fs::chown(path(name), Some(uid), Some(gid))
                    .map_err(io(format!("chown of {name}")))?;
            }
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(io("chmod of the TLS directory"))?;
        let quoted = |name: &str| format!("'{}'", path(name).display());
        for sql in [
            format!("ALTER SYSTEM SET ssl_cert_file = {}", quoted("server.crt")),
            format!("ALTER SYSTEM SET ssl_key_file = {}", quoted("server.key")),
            "ALTER SYSTEM SET ssl = on".to_owned(),
            "SELECT pg_reload_conf()".to_owned(),
        ] {
            self.psql("postgres", &sql)?;
        }
        // The reload is asynchronous: wait until new connections see it.
        let deadline = Instant::now() + READY_WITHIN;
        while self.psql("postgres", "SHOW ssl")?.trim() != "on" {
            if Instant::now() > deadline {
                return Err(PgError::Tool {
                    tool: "postgres".into(),
                    stderr: format!("TLS did not come on:\n{}", self.log()),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(path("ca.pem"))
    }

    /// The server's own log (startup, crash recovery, errors).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("server.log")).unwrap_or_default()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // A server that is dropped (not the shared one) goes at once; the watchdog, whose pipe
        // closes with `self`, removes the directory.
        let _ = self.kill();
    }
}

fn as_user(command: &mut Command, run_as: Option<(u32, u32)>) -> &mut Command {
    if let Some((uid, gid)) = run_as {
        command.uid(uid).gid(gid);
        // The server user's own home, not root's (psqlrc, locale lookups).
        command.env("HOME", "/tmp");
    }
    command
}

fn run_tool(command: &mut Command, tool: &str) -> Result<String, PgError> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(io(format!("running {tool}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(PgError::Tool {
            tool: tool.into(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PITH_TEST_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// The `postgres` system user's uid and gid, from /etc/passwd.
fn postgres_user() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string(Path::new("/etc/passwd")).ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next()? == "postgres").then_some(())?;
        let _password = fields.next()?;
        Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
    })
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
