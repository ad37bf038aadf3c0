//! `pith run <claude|opencode|codex> [client args...]`: make sure a pith proxy serves (start a
//! shared one in the background when none does), then run the client with the proxy wired in
//! for that process only, and become it (`exec`: its exit code, signals and terminal are the
//! client's own).
//!
//! Nothing is written to the client's settings. How each client takes a base URL for one run,
//! as its own code reads it:
//! - Claude Code: the `ANTHROPIC_BASE_URL` environment variable (the origin, without `/v1`).
//! - Codex: `-c key=value` overrides on its command line, which win over `config.toml`:
//!   `openai_base_url` for the built-in `openai` provider, `model_providers.<id>.base_url` for a
//!   provider of the user's own (the one `model_provider` names, on the command line, in the
//!   chosen profile or in `config.toml`).
//! - OpenCode: `OPENCODE_CONFIG_CONTENT`, inline JSON it merges after every config file; pith
//!   adds `provider.anthropic.options.baseURL` and `provider.openai.options.baseURL` (with
//!   `/v1`) to whatever the variable already holds.
//!
//! A client runs through the proxy only when the proxy sends its traffic where the client would
//! have sent it; otherwise, and when no proxy answers within [`START_WAIT`], it runs straight to
//! its provider and one line on stderr says why.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::Context;
use pith_clients::{Client, RunContext, Wiring};

use crate::client_files::Disk;

use crate::background::{self, Health, Probe};
use crate::config::{Config, pith_home};

/// How long `pith run` waits for a proxy (found, or started) before the client runs without.
pub const START_WAIT: Duration = Duration::from_secs(2);

/// How long the shared proxy stays up with nothing to do, unless configured.
const DEFAULT_IDLE_STOP: &str = "30m";

#[derive(Debug, clap::Args)]
#[command(
    disable_version_flag = true,
    after_help = "Examples:
  pith run claude
  pith run codex exec \"fix the failing test\"
  pith run opencode run \"say hi\"

pith looks for its proxy on proxy.listen (PITH_LISTEN; default 127.0.0.1:8787) and starts one in
the background when none answers there (log: $PITH_HOME/logs/proxy.log). That proxy is shared by
every `pith run` with the same $PITH_HOME; it stops after proxy.idle_stop (PITH_IDLE_STOP; default
30m) with no client left and no connection open. If no proxy answers within 2 seconds, or the port
is taken by something else, the client runs straight to its provider and pith says so in one line.

Wiring is per process: Claude Code gets ANTHROPIC_BASE_URL, Codex `-c openai_base_url=...` (or
`-c model_providers.<id>.base_url=...`), OpenCode OPENCODE_CONFIG_CONTENT. Nothing is written to
the client's settings."
)]
pub struct Args {
    /// The coding agent to run, then its own arguments, passed on as they are (`--help`,
    /// `--version` and `--` included).
    #[arg(
        help = format!(
            "The coding agent to run: {}; then its own arguments, passed on as they are \
             (`--help`, `--version` and `--` included)",
            Client::names()
        ),
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CLIENT [ARGS]"
    )]
    command: Vec<OsString>,
}

pub fn run(args: Args, config: &Config) -> anyhow::Result<ExitCode> {
    let deadline = Instant::now() + START_WAIT;
    let (client, client_args) = match args.command.split_first() {
        Some((name, rest)) => (named(&name.to_string_lossy())?, rest.to_vec()),
        None => anyhow::bail!("name the client to run: {}", Client::names()),
    };
    // Before anything starts: a proxy started for a client that is not there would stay up,
    // unused, until its idle stop.
    if crate::client_files::on_path(client.program()).is_none() {
        return Err(not_found(client.program()));
    }
    let listen = super::proxy::listen_addr(None, config)?;
    let addr = reachable(listen);
    let home = pith_home()?;
    let token = config.proxy_token();
    let idle = idle_stop(config)?;
    let program = client.program();

    // Held, shared, for the client's whole life: the shared proxy stops only when no client
    // holds it. A proxy taking it to stop makes this wait until that proxy is gone.
    let clients = background::open_private(&background::clients_lock_path(&home), false)
        .ok()
        .filter(|f| matches!(background::lock_until(f, true, deadline), Ok(true)));

    let mut wiring = Wiring::default();
    match ensure(
        listen,
        addr,
        &home,
        token.as_deref(),
        config,
        &idle,
        deadline,
    ) {
        Ok(health) => {
            if health.version != env!("CARGO_PKG_VERSION") {
                eprintln!(
                    "pith: the proxy on {addr} is pith {}, this is pith {}; stop it to have this \
                     version start (`pith doctor` shows it).",
                    shown(&health.version),
                    env!("CARGO_PKG_VERSION")
                );
            }
            match wire(client, &client_args, addr, &health, token.as_deref()) {
                Ok(w) => wiring = w,
                Err(why) => eprintln!(
                    "pith: {}; {program} runs straight to its provider.",
                    shown(&why)
                ),
            }
        }
        // Why may quote what answered on the port (a server's status line, its version).
        Err(why) => eprintln!(
            "pith: {}; {program} runs straight to its provider.",
            shown(&why)
        ),
    }

    let mut cmd = Command::new(program);
    cmd.args(&wiring.args).args(&client_args);
    for (k, v) in &wiring.env {
        cmd.env(k, v);
    }
    exec(cmd, program, clients)
}

/// Become the client (Unix), keeping the clients lock open in it.
#[cfg(unix)]
fn exec(
    mut cmd: Command,
    program: &str,
    clients: Option<std::fs::File>,
) -> anyhow::Result<ExitCode> {
    use std::os::unix::process::CommandExt;
    if let Some(lock) = &clients {
        // std opens files close-on-exec; the lock must outlive this process image.
        let _ = rustix::io::fcntl_setfd(lock, rustix::io::FdFlags::empty());
    }
    let e = cmd.exec();
    drop(clients);
    Err(not_started(e, program))
}

/// Run the client and pass its exit code on (no `exec` here).
#[cfg(not(unix))]
fn exec(
    mut cmd: Command,
    program: &str,
    clients: Option<std::fs::File>,
) -> anyhow::Result<ExitCode> {
    let status = cmd.status().map_err(|e| not_started(e, program))?;
    drop(clients);
    Ok(match status.code() {
        Some(code) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}

fn not_found(program: &str) -> anyhow::Error {
    anyhow::anyhow!("{program} is not on PATH: install it, or add its directory to PATH")
}

fn not_started(e: std::io::Error, program: &str) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        not_found(program)
    } else {
        anyhow::Error::new(e).context(format!("cannot run {program}"))
    }
}

/// The address to reach a proxy listening on `listen` (one listening on every address is
/// reached on loopback).
pub fn reachable(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

/// The shared proxy's idle stop: `PITH_IDLE_STOP`, else `proxy.idle_stop`, else 30m; checked
/// here so that a typo is an error now, not a proxy that never started.
fn idle_stop(config: &Config) -> anyhow::Result<String> {
    let (text, source) = match crate::env::text(crate::env::Var::IdleStop) {
        Some(v) => (v.to_owned(), "PITH_IDLE_STOP"),
        None => match &config.proxy.idle_stop {
            Some(v) => (v.clone(), "proxy.idle_stop"),
            None => (DEFAULT_IDLE_STOP.to_owned(), "the default"),
        },
    };
    match crate::duration::parse(&text) {
        Ok(d) if !d.is_zero() => Ok(crate::duration::format(d)),
        Ok(_) => anyhow::bail!("{source} must be longer than 0"),
        Err(e) => anyhow::bail!("{source}: {e}"),
    }
}

/// A pith proxy answering on `addr`: found, or started in the background (one at a time per
/// `$PITH_HOME`, under the start lock). The error says why there is none, naming the port.
fn ensure(
    listen: SocketAddr,
    addr: SocketAddr,
    home: &Path,
    token: Option<&str>,
    config: &Config,
    idle: &str,
    deadline: Instant,
) -> Result<Health, String> {
    let taken = |what: String| {
        format!(
            "port {} ({addr}) is taken by something that is not a pith proxy ({what}); free it, \
             or set proxy.listen or PITH_LISTEN to another port",
            addr.port()
        )
    };
    match background::probe(addr, token, background::PROBE_TIMEOUT) {
        Probe::Pith(h) => return Ok(h),
        Probe::Other(what) => return Err(taken(what)),
        Probe::Nothing => {}
    }
    // A setting the proxy would refuse stops it at once, its reason only in its log: say it
    // here instead of waiting for an answer that will not come.
    crate::commands::proxy::check_settings(config)
        .map_err(|e| format!("a pith proxy cannot start here: {e:#}"))?;
    let log = background::log_path(home);
    let late = || {
        format!(
            "no pith proxy answered on {addr} within {} s (its log: {})",
            START_WAIT.as_secs(),
            log.display()
        )
    };
    let start = background::open_private(&background::start_lock_path(home), false)
        .map_err(|e| format!("cannot start a pith proxy: {e:#}"))?;
    if !matches!(background::lock_until(&start, false, deadline), Ok(true)) {
        return Err(late());
    }
    // Another `pith run` may have started it while this one waited for the lock.
    match background::probe(addr, token, background::PROBE_TIMEOUT) {
        Probe::Pith(h) => return Ok(h),
        Probe::Other(what) => return Err(taken(what)),
        Probe::Nothing => {}
    }
    start_detached(listen, config, idle).map_err(|e| format!("{e:#}"))?;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
        match background::probe(addr, token, background::PROBE_TIMEOUT) {
            Probe::Pith(h) => return Ok(h),
            Probe::Other(what) => return Err(taken(what)),
            Probe::Nothing => {}
        }
    }
    Err(late())
}

/// `pith [--config FILE] proxy --detach --listen ADDR --idle-stop IDLE`, waited for (it returns
/// as soon as the proxy process is started).
/// Text that came from outside (what answered on a port, a setting's value) as a terminal
/// shows it.
fn shown(text: &str) -> String {
    pith_brain::render::printable(text)
}

fn start_detached(listen: SocketAddr, config: &Config, idle: &str) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("cannot find the pith binary to start its proxy")?;
    let mut cmd = Command::new(exe);
    if let Some(path) = &config.source {
        cmd.arg("--config").arg(path);
    }
    // The shared proxy serves every project and outlives this one: it does not keep a
    // stranger's directory as its own (anything relative it met would be found there).
    cmd.args(["proxy", "--detach", "--listen", &listen.to_string()])
        .args(["--idle-stop", idle])
        .current_dir("/")
        .stdin(std::process::Stdio::null());
    let status = cmd.status().context("cannot start pith proxy")?;
    anyhow::ensure!(status.success(), "pith proxy --detach failed ({status})");
    Ok(())
}

/// The client a `pith run` names.
fn named(name: &str) -> anyhow::Result<Client> {
    Client::named(name).ok_or_else(|| {
        anyhow::anyhow!(
            "pith run does not know a client {name:?}: name {} (e.g. `pith run claude`)",
            Client::names()
        )
    })
}

/// The wiring of `client` to the proxy at `addr`, or why it would send the client elsewhere
/// than the client goes on its own.
fn wire(
    client: Client,
    client_args: &[OsString],
    addr: SocketAddr,
    health: &Health,
    token: Option<&str>,
) -> Result<Wiring, String> {
    let places = crate::client_files::places(None)
        .unwrap_or_else(|_| crate::client_files::places_without_project());
    let env = |name: &str| crate::env::client_var(name);
    client.wire(&RunContext {
        args: client_args,
        origin: format!("http://{addr}"),
        token: token.map(|t| (pith_proxy::TOKEN_HEADER, t)),
        upstream_anthropic: health.anthropic.as_deref(),
        upstream_openai: health.openai.as_deref(),
        upstream_chatgpt: health.chatgpt.as_deref(),
        default_anthropic: pith_proxy::upstream::ANTHROPIC_DEFAULT,
        default_openai: pith_proxy::upstream::OPENAI_DEFAULT,
        default_chatgpt: pith_proxy::upstream::CHATGPT_DEFAULT,
        env: &env,
        places: &places,
        files: &Disk,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_listen_address_is_reached_on_loopback() {
        assert_eq!(
            reachable("0.0.0.0:8787".parse().unwrap()),
            "127.0.0.1:8787".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            reachable("[::]:8787".parse().unwrap()),
            "[::1]:8787".parse::<SocketAddr>().unwrap()
        );
    }
}
