//! `pith doctor`: one line per check, `ok`, `warn` or `fail`, each not-ok line with its fix.
//! It reads and probes; it changes nothing (no file is created or chmodded).
//!
//! Checks: the config file parses; a proxy answers on `proxy.listen` and is this version (a
//! stale older pith there is named, with its pid); for each client, the MCP entry, the hooks and
//! (Claude Code) the status line are registered and run this binary; the ledger and the
//! workspace's brain open and are writable; the local model answers when the prefilter is on;
//! and the clients' own settings that would undo pith: a base URL naming a loopback port where
//! nothing listens (every request of that client fails), or naming pith's port while no pith
//! answers there.

use pith_brain::render::printable;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use pith_clients::{Client, Files, Places, Registration};

use crate::background::{self, Probe};
use crate::client_files::Disk;
use crate::config::{Config, pith_home};

#[derive(Debug, clap::Args)]
#[command(after_help = "Exit status: 0 when no check fails (warnings included), 1 otherwise.")]
pub struct Args {
    /// One JSON object: {"checks": [{"check", "status", "detail", "fix"}]}.
    #[arg(long)]
    json: bool,
    /// Project directory for project-level config (claude-code, opencode) and the brain.
    /// Default: the nearest ancestor of the current directory holding `.git` or `.pith`.
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Serialize)]
struct Check {
    check: String,
    status: Status,
    detail: String,
    /// What to do about it (none for `ok`).
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

#[derive(Default)]
struct Report {
    checks: Vec<Check>,
}

impl Report {
    fn ok(&mut self, check: &str, detail: impl Into<String>) {
        self.add(check, Status::Ok, detail.into(), None);
    }
    fn warn(&mut self, check: &str, detail: impl Into<String>, fix: impl Into<String>) {
        self.add(check, Status::Warn, detail.into(), Some(fix.into()));
    }
    fn fail(&mut self, check: &str, detail: impl Into<String>, fix: impl Into<String>) {
        self.add(check, Status::Fail, detail.into(), Some(fix.into()));
    }
    /// One line each: a multi-line message (a TOML parse error) is folded.
    fn add(&mut self, check: &str, status: Status, detail: String, fix: Option<String>) {
        let fold = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        self.checks.push(Check {
            check: check.to_owned(),
            status,
            detail: fold(&detail),
            fix: fix.as_deref().map(fold),
        });
    }
}

/// The settings a proxy resolves as it starts (the config's and the `PITH_*` variables'): one
/// it would refuse fails here, as it would stop `pith proxy` and leave `pith run`'s client
/// going straight to its provider.
fn check_proxy_settings(report: &mut Report, config: &Config) {
    match crate::commands::proxy::check_settings(config) {
        Ok(()) => report.ok(
            "proxy settings",
            "the config's and the environment's proxy settings are valid",
        ),
        Err(e) => report.fail(
            "proxy settings",
            format!("{e:#}"),
            "fix that setting: `pith proxy` refuses to start until then",
        ),
    }
}

/// Runs apart from the other commands: a config that does not parse is a failed check here,
/// not an error before any check.
pub fn run(args: Args, config_path: Option<&Path>) -> anyhow::Result<ExitCode> {
    let mut report = Report::default();
    let config = match Config::load(config_path) {
        Ok(config) => {
            let detail = match &config.source {
                Some(p) => format!("{} parses", p.display()),
                None => "no config file; defaults".to_owned(),
            };
            report.ok("config", detail);
            config
        }
        Err(e) => {
            report.fail(
                "config",
                format!("{e:#}"),
                "fix the file (every key is listed in the README), or move it away for defaults",
            );
            Config::default()
        }
    };
    if report
        .checks
        .iter()
        .all(|c| !matches!(c.status, Status::Fail))
    {
        check_proxy_settings(&mut report, &config);
    }
    let exe = std::env::current_exe()
        .ok()
        .map(|e| e.canonicalize().unwrap_or(e));
    check_account_keys(&mut report, &config);
    let proxy = check_proxy(&mut report, &config);
    let workspace = crate::workspace::workspace_from(args.workspace.as_deref()).ok();
    let places = crate::client_files::places(args.workspace.as_deref())
        .unwrap_or_else(|_| crate::client_files::places_without_project());
    check_path(&mut report, exe.as_deref());
    for client in Client::ALL {
        check_client(&mut report, client, &places, exe.as_deref(), proxy);
    }
    check_ledger(&mut report, &config);
    check_team(&mut report, &config);
    check_history_backlog(&mut report, &config);
    check_brain(&mut report, workspace);
    check_prefilter(&mut report, &config);

    if args.json {
        println!("{}", serde_json::json!({"checks": report.checks}));
    } else {
        for c in &report.checks {
            let status = match c.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            match &c.fix {
                // A detail quotes what it found (a project's settings, a path, an error):
                // escaped, so a stranger's value cannot rewrite the terminal.
                Some(fix) => println!(
                    "{status} {}: {} -> {}",
                    c.check,
                    printable(&c.detail),
                    printable(fix)
                ),
                None => println!("{status} {}: {}", c.check, printable(&c.detail)),
            }
        }
    }
    Ok(if report.checks.iter().any(|c| c.status == Status::Fail) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A gateway's account keys: how many, or why `pith proxy` would refuse to start with them.
/// Nothing is said on an install without keys.
fn check_account_keys(report: &mut Report, config: &Config) {
    match config.account_keys() {
        Ok(keys) if keys.is_empty() => {}
        Ok(keys) => report.ok(
            "account keys",
            format!(
                "{} keys; a request without one of them in the {} header is refused",
                keys.len(),
                pith_proxy::ACCOUNT_KEY_HEADER
            ),
        ),
        Err(e) => report.fail(
            "account keys",
            format!("{e:#}"),
            "fix [account.keys] in the config, or the file PITH_ACCOUNT_KEYS names",
        ),
    }
}

/// The proxy on `proxy.listen`; returns its address when pith answers there.
fn check_proxy(report: &mut Report, config: &Config) -> Option<SocketAddr> {
    let listen = match super::proxy::listen_addr(None, config) {
        Ok(a) => a,
        Err(e) => {
            report.fail(
                "proxy",
                format!("{e:#}"),
                "give an address like 127.0.0.1:8787",
            );
            return None;
        }
    };
    let addr = super::run::reachable(listen);
    let token = config.proxy_token();
    match background::probe(addr, token.as_deref(), background::PROBE_TIMEOUT) {
        Probe::Pith(h) if h.version == env!("CARGO_PKG_VERSION") => {
            report.ok(
                "proxy",
                format!(
                    "pith {} answers on {addr}{}",
                    h.version,
                    h.pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
                ),
            );
            Some(addr)
        }
        Probe::Pith(h) => {
            report.warn(
                "proxy",
                format!(
                    "a stale pith {} answers on {addr}{}; this is pith {}",
                    h.version,
                    h.pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
                    env!("CARGO_PKG_VERSION")
                ),
                match h.pid {
                    Some(pid) => format!("stop it (kill {pid}); `pith run` then starts this one"),
                    None => "stop it; `pith run` then starts this one".to_owned(),
                },
            );
            Some(addr)
        }
        Probe::Other(what) => {
            report.fail(
                "proxy",
                format!("{addr} is taken by something that is not pith ({what})"),
                "free the port, or set proxy.listen / PITH_LISTEN to another one",
            );
            None
        }
        Probe::Nothing => {
            report.warn(
                "proxy",
                format!("no proxy on {addr}"),
                "`pith run <client>` starts one when needed; `pith service install` keeps one running",
            );
            None
        }
    }
}

/// Where a configured program resolves: a path as it is, a bare name on PATH.
fn resolve(program: &str) -> Option<PathBuf> {
    let program = Path::new(program);
    if program.components().count() > 1 {
        Some(program.to_path_buf())
    } else {
        crate::client_files::on_path(&program.to_string_lossy())
    }
}

/// The `pith` on PATH: the one the clients' settings run when they name `pith`.
fn check_path(report: &mut Report, exe: Option<&Path>) {
    let found = crate::client_files::on_path("pith");
    let resolved = found
        .as_ref()
        .map(|p| p.canonicalize().unwrap_or(p.clone()));
    match (found, resolved, exe) {
        (None, ..) => report.ok(
            "pith on PATH",
            "none: client settings name this binary by its full path (from a clone, \
             `cargo install --locked --path crates/pith` puts pith on PATH)",
        ),
        (Some(p), Some(r), Some(exe)) if r != exe => report.warn(
            "pith on PATH",
            format!(
                "{} is another build than this one ({})",
                p.display(),
                exe.display()
            ),
            "settings that run `pith` run that build: install this one (`cargo install --locked \
             --path crates/pith` from its clone), or run the doctor of that one",
        ),
        (Some(p), ..) => report.ok("pith on PATH", format!("{} is this binary", p.display())),
    }
}

/// One wiring line: `command` (as configured) must be present and run this binary.
fn wiring(
    report: &mut Report,
    check: &str,
    file: &Path,
    command: Option<&str>,
    exe: Option<&Path>,
    setup: &str,
) {
    let Some(cmd) = command else {
        // A file that is there but cannot be read is not "not registered": setup would refuse
        // to change it too.
        if file.exists() && Disk.read(file).is_none() {
            report.warn(
                check,
                format!(
                    "{} cannot be read: not valid {}, or not a regular file of at most {}",
                    file.display(),
                    if crate::client_files::is_toml(file) {
                        "TOML"
                    } else {
                        "JSON"
                    },
                    pith_paths::small::size(crate::client_files::SETTINGS_BYTES_MAX)
                ),
                format!("fix it or move it away, then run `{setup}`"),
            );
            return;
        }
        report.warn(
            check,
            format!("not registered in {}", file.display()),
            format!("run `{setup}`"),
        );
        return;
    };
    let program = pith_clients::first_word(cmd)
        .map(|(word, _)| word)
        .unwrap_or_else(|| cmd.to_owned());
    let program = program.as_str();
    let resolved = resolve(program).and_then(|p| p.canonicalize().ok());
    match (resolved, exe) {
        (None, _) => report.warn(
            check,
            format!(
                "{} runs `{cmd}`, and `{program}` is not found",
                file.display()
            ),
            format!("remove that entry and run `{setup}`"),
        ),
        (Some(r), Some(exe)) if r != exe => report.warn(
            check,
            format!(
                "{} runs `{cmd}`, which is {}, not this binary ({})",
                file.display(),
                r.display(),
                exe.display()
            ),
            format!("remove that entry and run `{setup}`, or put this build on PATH"),
        ),
        _ => report.ok(check, format!("{} runs `{cmd}`", file.display())),
    }
}

/// The first command of a hooks object (Claude Code's and Codex's shape) that runs `pith hook`.
fn pith_hook_command(hooks: &Value) -> Option<String> {
    hooks.as_object()?.values().find_map(|groups| {
        groups.as_array()?.iter().find_map(|g| {
            g["hooks"].as_array()?.iter().find_map(|h| {
                h["command"]
                    .as_str()
                    .filter(|c| pith_clients::runs_pith(c, "hook"))
                    .map(str::to_owned)
            })
        })
    })
}

/// A base URL a client's own settings set: fine when it leads to a live pith (or to a remote
/// provider), a failure when it names a loopback port where nothing listens.
fn base_url(report: &mut Report, check: &str, source: &str, url: &str, proxy: Option<SocketAddr>) {
    let Some(addr) = loopback_addr(url) else {
        report.ok(check, format!("{source} = {url}"));
        return;
    };
    if proxy == Some(addr) {
        report.ok(check, format!("{source} = {url}: pith answers there"));
        return;
    }
    match background::probe(addr, None, background::PROBE_TIMEOUT) {
        Probe::Nothing => report.fail(
            check,
            format!("{source} = {url}, where nothing listens: every request of this client fails"),
            "start pith there (`pith service install`), or take the base URL out (`pith setup --undo <client>`) and use `pith run <client>`",
        ),
        Probe::Pith(_) => report.ok(check, format!("{source} = {url}: pith answers there")),
        Probe::Other(_) => report.ok(check, format!("{source} = {url} (not pith)")),
    }
}

/// `http://127.0.0.1:PORT/...` or `http://localhost:PORT/...` as an address.
fn loopback_addr(url: &str) -> Option<SocketAddr> {
    let rest = url.strip_prefix("http://")?;
    let authority = rest.split('/').next()?;
    let (host, port) = authority.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let ip = match host {
        "localhost" | "127.0.0.1" => std::net::IpAddr::from([127, 0, 0, 1]),
        "[::1]" => std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// One client's wiring, read back from the declarations `pith setup` writes by: a client that
/// is not installed is one line; else its MCP entry, hooks and status line in the first scope
/// that registers pith (the default scope when none does), and every base URL its settings set.
fn check_client(
    report: &mut Report,
    client: Client,
    places: &Places,
    exe: Option<&Path>,
    proxy: Option<SocketAddr>,
) {
    let profile = client.profile();
    let name = client.name();
    let on_path = crate::client_files::on_path(client.program()).is_some();
    if !client.installed(places, &Disk, on_path) {
        report.ok(
            name,
            format!(
                "{} is not installed here (no `{}` on PATH, no settings)",
                profile.display_name,
                client.program()
            ),
        );
        return;
    }
    let Some((registration, mcp)) = registered(client, places) else {
        report.warn(
            name,
            "none of its scopes can be found from here",
            "run pith doctor in a project, or give --workspace",
        );
        return;
    };
    let setup = match registration.scope {
        s if s == profile.default_scope => format!("pith setup {name}"),
        s => format!("pith setup {name} --scope {}", s.name()),
    };
    let check = |what: &str| format!("{name} {what}");
    wiring(
        report,
        &check("mcp"),
        &registration.mcp.file,
        mcp.as_deref(),
        exe,
        &setup,
    );
    if let Some(hooks) = &registration.hooks {
        let command = Disk
            .read(&hooks.file)
            .and_then(|v| pith_hook_command(&v["hooks"]).or_else(|| pith_hook_command(&v)));
        wiring(
            report,
            &check("hooks"),
            &hooks.file,
            command.as_deref(),
            exe,
            &setup,
        );
    }
    if let Some(line) = &registration.status_line {
        check_status_line(report, &check("status line"), line, exe, &setup);
    }
    for (source, url) in client.base_urls(places, &Disk) {
        base_url(report, &check("base URL"), &source, &url, proxy);
    }
    if let Some(var) = profile.base_url_env
        && let Some(url) = crate::env::client_var(var)
    {
        base_url(report, &check("base URL"), var, &url, proxy);
    }
}

/// The first of the client's scopes whose MCP entry is there, with the command it runs; else
/// its first scope that can be found from here, with none.
fn registered(client: Client, places: &Places) -> Option<(Registration, Option<String>)> {
    let registrations: Vec<Registration> = client
        .profile()
        .scopes
        .iter()
        .filter_map(|scope| client.registration(*scope, places, &Disk, "pith").ok())
        .collect();
    let mcp_of = |r: &Registration| {
        Disk.read(&r.mcp.file)
            .and_then(|doc| pith_clients::lookup(&doc, &r.mcp.key()).cloned())
            .and_then(|entry| client.mcp_argv(&entry))
            .map(|argv| {
                let words: Vec<String> = argv.iter().map(|a| pith_clients::shell_word(a)).collect();
                words.join(" ")
            })
    };
    let found = registrations
        .iter()
        .find_map(|r| mcp_of(r).map(|mcp| (r.clone(), Some(mcp))));
    found.or_else(|| registrations.into_iter().next().map(|r| (r, None)))
}

/// The status line setup would write: pith's (and this binary), someone else's, or none.
fn check_status_line(
    report: &mut Report,
    check: &str,
    line: &pith_clients::Setting,
    exe: Option<&Path>,
    setup: &str,
) {
    let shown = Disk.read(&line.file).and_then(|v| {
        pith_clients::lookup(&v, &line.key)?["command"]
            .as_str()
            .map(str::to_owned)
    });
    match shown {
        Some(l) if pith_clients::runs_pith(&l, "statusline") => {
            wiring(report, check, &line.file, Some(&l), exe, setup);
        }
        Some(l) => report.ok(
            check,
            format!("{} shows its own status line (`{l}`)", line.file.display()),
        ),
        None => report.warn(
            check,
            format!("not registered in {}", line.file.display()),
            format!("run `{setup}`"),
        ),
    }
}

fn check_ledger(report: &mut Report, config: &Config) {
    let path = match config
        .ledger
        .path
        .clone()
        .map(Ok)
        .unwrap_or_else(|| pith_home().map(|h| h.join("ledger.db")))
    {
        Ok(p) => p,
        Err(e) => {
            report.fail("ledger", format!("{e:#}"), "set PITH_HOME");
            return;
        }
    };
    if !path.exists() {
        report.ok(
            "ledger",
            format!(
                "{} does not exist yet (the proxy creates it)",
                path.display()
            ),
        );
        return;
    }
    match pith_store::ledger::Ledger::open_read_only(&path) {
        Err(e) => report.fail(
            "ledger",
            format!(
                "{} does not open: {}",
                path.display(),
                pith_brain::render::error_chain(&e)
            ),
            "move it away; the proxy starts a new one",
        ),
        Ok(ledger) => {
            match std::fs::OpenOptions::new().write(true).open(&path) {
                Ok(_) => report.ok(
                    "ledger",
                    format!("{} opens and is writable", path.display()),
                ),
                Err(e) => report.fail(
                    "ledger",
                    format!("{} is not writable ({e})", path.display()),
                    "give your user write access to it",
                ),
            }
            check_spool(report, &path, &ledger);
        }
    }
}

/// What waits in the ledger's spool, and whether requests were served but not kept.
fn check_spool(report: &mut Report, path: &std::path::Path, ledger: &pith_store::ledger::Ledger) {
    let dir = pith_ledger::spool_dir(path);
    match pith_ledger::spool_backlog(&dir, ledger) {
        Ok((0, _)) => report.ok("ledger spool", "no request waits to be written"),
        Ok((n, bytes)) => report.ok(
            "ledger spool",
            format!(
                "{n} requests ({:.1} MB) wait to be written; the proxy writes them (the next \
                 one to start, if none runs)",
                bytes as f64 / 1e6
            ),
        ),
        Err(e) => report.warn(
            "ledger spool",
            format!("{} cannot be read ({e})", dir.display()),
            "give your user access to it; requests waiting there are written once it can be read",
        ),
    }
    match ledger.counter(pith_store::ledger::DROPPED_ROWS) {
        Ok(0) | Err(_) => {}
        Ok(n) => report.warn(
            "ledger losses",
            format!("{n} requests were served but not kept for the ledger"),
            "the spool was at its limit or the disk refused it: see [ledger] spool_limit_mb and \
             the free space beside the ledger",
        ),
    }
    match ledger.counter(pith_store::ledger::DAMAGED_ENTRIES) {
        Ok(0) | Err(_) => {}
        Ok(n) => report.warn(
            "ledger spool damage",
            format!("{n} requests kept in the spool were found damaged and skipped"),
            "a write torn when pith was killed mid-write, or a failing disk: stop pith with \
             SIGTERM rather than kill -9, and check the disk beside the ledger",
        ),
    }
}

/// Team mode: how many of this machine's history messages wait to ship.
fn check_history_backlog(report: &mut Report, config: &Config) {
    if !matches!(config.store_url(), Ok(Some(_))) {
        return;
    }
    let Ok(settings) = crate::history_settings::HistorySettings::resolve(config) else {
        return;
    };
    if !settings.path.exists() {
        return;
    }
    match pith_store::history::History::open_read_only(&settings.path).and_then(|h| h.backlog()) {
        Ok(b) if b.messages == 0 && b.conversations == 0 => {
            report.ok("history backlog", "every history message has shipped")
        }
        Ok(b) => report.warn(
            "history backlog",
            format!(
                "{} history messages wait to ship{}",
                b.messages,
                match b.conversations {
                    0 => String::new(),
                    n => format!(" (with {n} conversations new to the team)"),
                }
            ),
            "they go out while `pith proxy` runs and the team database answers (or with `pith history import`)",
        ),
        Err(e) => report.warn(
            "history backlog",
            format!(
                "cannot read the history {}: {}",
                settings.path.display(),
                pith_brain::render::error_chain(&e)
            ),
            "run `pith history --local list` to see what is wrong with it",
        ),
    }
}

/// Team mode: whether the team database answers (read only: no schema is created), and how
/// many of this machine's ledger rows wait to ship.
fn check_team(report: &mut Report, config: &Config) {
    let url = match config.store_url() {
        Ok(Some(url)) => url,
        Ok(None) => return,
        Err(e) => {
            report.fail(
                "team",
                format!("{e:#}"),
                "fix [store] url or PITH_STORE_URL, or unset it",
            );
            return;
        }
    };
    match pith_store::postgres::Pg::new(&url).and_then(|pg| pg.schema_versions()) {
        Ok(versions) if versions.is_empty() => report.ok(
            "team",
            format!("{url} answers; pith has not used it yet (the proxy creates its tables)"),
        ),
        Ok(versions) => {
            let schemas: Vec<String> = versions
                .iter()
                .map(|(component, v)| format!("{component} {v}"))
                .collect();
            report.ok(
                "team",
                format!("{url} answers (schema versions: {})", schemas.join(", ")),
            );
        }
        Err(e) => report.warn(
            "team",
            format!("cannot reach {url}: {}", pith_brain::render::error_chain(&e)),
            "check the URL, the network and the server; ledger rows wait in the local ledger meanwhile",
        ),
    }
    let ledger = match config
        .ledger
        .path
        .clone()
        .map(Ok)
        .unwrap_or_else(|| pith_home().map(|h| h.join("ledger.db")))
    {
        Ok(p) if p.exists() => p,
        _ => return,
    };
    match pith_store::ledger::Ledger::open_read_only(&ledger)
        .and_then(|l| pith_store::postgres::ship::backlog(&l))
    {
        Ok(0) => report.ok("team backlog", "every ledger row has shipped"),
        Ok(n) => report.warn(
            "team backlog",
            format!("{n} ledger rows wait to ship"),
            "they go out while `pith proxy` runs and the team database answers",
        ),
        Err(e) => report.warn(
            "team backlog",
            format!(
                "cannot read the ledger: {}",
                pith_brain::render::error_chain(&e)
            ),
            "see the ledger check",
        ),
    }
}

fn check_brain(report: &mut Report, workspace: Option<pith_brain::Workspace>) {
    let Some(ws) = workspace else { return };
    let root = ws.root().display().to_string();
    match pith_store::brain::open_workspace_brain_for_hook(
        ws,
        pith_brain::recall::Access::Write,
        Duration::from_secs(1),
    ) {
        Ok(Some(_)) => report.ok(
            "brain",
            format!("{root}/.pith/brain.db opens and is writable"),
        ),
        Ok(None) => report.ok(
            "brain",
            format!("{root} has no brain yet (the first saved memory creates it)"),
        ),
        Err(e) => report.fail(
            "brain",
            format!(
                "{root}/.pith/brain.db: {}",
                pith_brain::render::error_chain(&e)
            ),
            "check its permissions, or move it away to start a new one",
        ),
    }
}

/// The in-process model: its files against their checksums, then loaded and run once.
fn check_local_model(report: &mut Report, dir: &std::path::Path) {
    let started = std::time::Instant::now();
    let loaded = pith_model::Encoder::load(dir, 1).and_then(|mut encoder| {
        encoder.embed(&["fn main() {}"])?;
        Ok(encoder.name().to_owned())
    });
    match loaded {
        Ok(name) => report.ok(
            "local model",
            format!(
                "{name} in {} (in-process): checksums match, loads and embeds in {} ms",
                dir.display(),
                started.elapsed().as_millis()
            ),
        ),
        Err(e @ pith_model::ModelError::NotInstalled(_)) => report.fail(
            "local model",
            e.to_string(),
            "run `pith model install`, or set mcp.prefilter_model to an installed model",
        ),
        Err(e) => report.fail(
            "local model",
            format!("{}: {e}", dir.display()),
            "reinstall it with `pith model install` (searches are shown unranked until then)",
        ),
    }
}

fn check_prefilter(report: &mut Report, config: &Config) {
    let prefilter = match super::mcp::prefilter_config(&config.mcp) {
        Ok(p) => p,
        Err(e) => {
            report.fail(
                "local model",
                format!("{e:#}"),
                "fix the [mcp] prefilter settings",
            );
            return;
        }
    };
    if !prefilter.enabled {
        report.ok("local model", "the prefilter is off");
        return;
    }
    if prefilter.ranker == pith_prefilter::RankerKind::Lexical {
        report.ok(
            "local model",
            "none needed: the prefilter ranks lexically, in-process (prefilter_ranker = \"lexical\")",
        );
        return;
    }
    if let (pith_prefilter::RankerKind::Local, Some(dir)) =
        (prefilter.ranker, &prefilter.local_model)
    {
        check_local_model(report, dir);
        return;
    }
    let url = prefilter.base_url();
    let model = prefilter.model.clone();
    let mut quick = prefilter;
    quick.load_timeout = Duration::from_secs(5);
    quick.timeout = Duration::from_secs(5);
    match pith_prefilter::ModelRanker::new(quick) {
        Err(e) => report.fail("local model", e.0, "fix mcp.prefilter_url"),
        Ok(ranker) => match ranker.load() {
            Ok(()) => report.ok("local model", format!("{model} answers at {url}")),
            Err(e) => report.fail(
                "local model",
                format!("{model} at {url}: {}", pith_brain::render::error_chain(&*e)),
                "start the model server and pull the model, or turn the prefilter off",
            ),
        },
    }
}
