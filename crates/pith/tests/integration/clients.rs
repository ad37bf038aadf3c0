//! The real coding-agent CLIs, run non-interactively against a base URL on loopback (pith's
//! proxy, or the mock upstream directly), each in a project directory with a private home,
//! killed after a time limit. scripts/test installs them (into `.cache/`) and sets
//! `PITH_TEST_OPENCODE`, `PITH_TEST_CLAUDE` and `PITH_TEST_CODEX`; a test that needs one
//! fails, naming scripts/test, when its variable is unset.
//!
//! Every client starts from an empty environment (only `PATH` is kept), so nothing of the
//! developer's own setup (keys, base URLs, proxies, configs) reaches it. `HTTPS_PROXY` and
//! `HTTP_PROXY` point at an [`EgressTrap`]: a loopback listener that refuses and records every
//! request a client sends through the proxy (loopback itself is in `NO_PROXY`), so a run that
//! tries to leave loopback fails its test instead of reaching out. The switches below turn off
//! everything the clients were seen reaching for; the trap checks that nothing is left. It
//! sees what honours the proxy variables (all three clients, and `git` under them), not a
//! direct connection or a DNS lookup: those were checked by hand, with strace.
//!
//! What each client does, observed on this machine (`strace -f -e connect`, and a recording
//! TLS proxy trusted through `NODE_EXTRA_CA_CERTS` / `CODEX_CA_CERTIFICATE`, to see what goes
//! beyond loopback without the switches):
//!
//! # Claude Code 2.1.328 (`claude -p PROMPT`)
//!
//! - Non-interactive: `-p` (print mode) needs no terminal, trust dialog or login; with
//!   `ANTHROPIC_API_KEY` set, print mode always uses it (sent as `x-api-key`).
//!   `ANTHROPIC_BASE_URL` is the proxy without `/v1`. `CLAUDE_CONFIG_DIR` is `$HOME/.claude`.
//! - Offline: `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`. Without it, a run sends to
//!   `api.anthropic.com` whatever the base URL: `POST /api/eval/sdk-...` (feature flags),
//!   `GET /api/claude_cli/bootstrap`, `GET /api/claude_code_penguin_mode` (fast mode),
//!   `GET /api/directory/server-urls` (the MCP registry) and `POST /api/event_logging/v2/batch`
//!   (telemetry). `DISABLE_TELEMETRY` stops only the first and the last; the switch stops them
//!   all (and the auto-updater, error reporting and the bug command, which
//!   `DISABLE_AUTOUPDATER`, `DISABLE_ERROR_REPORTING` and `DISABLE_TELEMETRY` also name, set
//!   here too).
//! - Side requests: none with the switch. Without it there is one more to the base URL:
//!   `HEAD /api/hello`, a fire-and-forget preconnect racing the main request (also skipped
//!   when a proxy variable is set). No `count_tokens`, no small-model (title, quota) call in
//!   print mode.
//! - The one request: `POST /v1/messages?beta=true`, streamed. Headers: `x-api-key`,
//!   `anthropic-version: 2023-06-01`, `anthropic-beta` (a list that includes
//!   `advanced-tool-use-2025-11-20`), `x-app: cli`, `user-agent: claude-cli/2.1.328 (external,
//!   sdk-cli)`, `X-Claude-Code-Session-Id`, the `X-Stainless-*` SDK headers. Model
//!   `claude-opus-5-5` unless told otherwise.
//! - The prompt: the last text block of `messages[0]` (user), exactly as typed, not wrapped or
//!   quoted. Before it, in the same message, `<system-reminder>` blocks: the git status (in a
//!   git repository) and the commit attribution rules. `messages[1]` is a `role: "system"`
//!   message (the environment, skills and date).
//! - Output: the final answer's text on stdout, then a newline; nothing on stderr.
//!
//! # Codex 0.169.0 (`codex exec PROMPT`)
//!
//! - Non-interactive: `exec`, with a private `CODEX_HOME` whose `config.toml` names a custom
//!   model provider (`wire_api = "responses"`, `base_url` the proxy with `/v1`, `env_key` the
//!   variable holding a fake key, sent as `authorization: Bearer`); `approval_policy = "never"`
//!   and `sandbox_mode = "danger-full-access"` (as in the captures: no bubblewrap needed);
//!   `--skip-git-repo-check` so any directory will do. Stdin is read for more prompt text
//!   (`/dev/null` here: none).
//! - Offline: `[analytics] enabled = false` (else OTel metrics go to
//!   `ab.chatgpt.com/otlp/v1/metrics`) and `[features] plugins = false` (else the curated plugin
//!   sync: `api.github.com/repos/openai/plugins`, `git` against github.com, and
//!   `chatgpt.com/backend-api/plugins/export/curated`); `check_for_update_on_startup = false`.
//! - Side requests: none (no `/v1/models` with an API-key provider).
//! - The one request: `POST /v1/responses`, `stream: true`, `store: false`. Headers:
//!   `authorization`, `accept: text/event-stream`, `originator: codex_exec`,
//!   `user-agent: codex_exec/0.169.0 (...)`, `session-id` and `thread-id` (the same id, also
//!   the body's `prompt_cache_key`), `x-client-request-id`, `x-codex-window-id`,
//!   `x-codex-beta-features`, `x-codex-turn-metadata` (JSON: sandbox, model, workspaces).
//!   Model `gpt-5.5` (the captures'; another name gets a "model metadata not found" warning and
//!   a different tool list).
//! - The prompt: the last item of `input`, a `role: "user"` message with one `input_text`,
//!   exactly as typed. Before it: two developer messages (the base prompt; skills and
//!   permissions) and a user message holding `<environment_context>`.
//! - Output: the final answer's text on stdout; the banner (model, provider, sandbox, session
//!   id), the prompt, the answer again and the token count on stderr.
//!
//! # OpenCode 1.18.33 (`opencode run PROMPT`)
//!
//! - Non-interactive: `run`, the config named by `OPENCODE_CONFIG` (an Anthropic provider with
//!   `baseURL` the proxy with `/v1`), `PWD` set to the project (OpenCode finds its project
//!   through it).
//! - Offline: `OPENCODE_DISABLE_AUTOUPDATE`, `_MODELS_FETCH`, `_SHARE`, `_LSP_DOWNLOAD`,
//!   `_DEFAULT_PLUGINS`, `_CLAUDE_CODE`; the npm and bun registries are a closed loopback port;
//!   `rg` on `PATH` (else its grep tool downloads ripgrep from github.com, which the trap
//!   caught).
//! - Side requests: a title call racing the main loop, both `POST /v1/messages`, streamed:
//!   model `claude-haiku-4-5-20251001`, no tools, the prompt after a "Generate a title for this
//!   conversation:" block. The main loop: `claude-sonnet-4-5` (the config's), 10 tools.
//! - Headers: `x-api-key`, `anthropic-version: 2023-06-01`, `x-session-id` and
//!   `x-session-affinity` (the same `ses_...` id), `user-agent: opencode/1.18.33
//!   ai-sdk/provider-utils/... runtime/bun/...`.
//! - The prompt: the one block of `messages[0]`, wrapped in literal double quotes (`"\"say
//!   hi\""`).
//! - Output: the answer's text on stdout; the agent and model (`> build · claude-sonnet-4-5`)
//!   on stderr.
//!
//! # A second turn
//!
//! Each run is one turn. The next turn of the same session, with the history resent:
//! `claude_code(.., &["--continue"], ..)` (same `X-Claude-Code-Session-Id`) and
//! `codex(.., &["resume", "--last"], ..)` (same `session-id`), with the same `home`; both stay
//! offline with the same switches.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pith_testkit::fixtures::{Usage, anthropic, responses};
use pith_testkit::ollama::closed_port_url;
use pith_testkit::{MockUpstream, Recorded, Reply};
use serde_json::Value;

use crate::support::PithProxy;

/// The fake key every client is given (the mock and pith never check it).
pub const FAKE_KEY: &str = "sk-pith-test-key";

/// The variable Codex reads its key from (`env_key` of the test provider).
const CODEX_KEY_VAR: &str = "PITH_TEST_OPENAI_KEY";

/// How long a client may run before it is killed.
pub const LIMIT: Duration = Duration::from_secs(180);

/// A client binary installed by scripts/test, from its `PITH_TEST_*` variable.
fn installed(var: &str, what: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => panic!(
            "{var} is not set: run the tests through scripts/test, which installs {what} and \
             sets it"
        ),
    }
}

/// `git init` and a first commit of everything in `dir` (the clients describe git state).
pub fn git_commit_all(dir: &Path) {
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.test")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.test")
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "init", "--allow-empty"]);
}

/// A loopback HTTP proxy that answers every request `403` and records its request line
/// (`CONNECT host:443 HTTP/1.1` for HTTPS): where a client tried to go beyond loopback.
pub struct EgressTrap {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EgressTrap {
    pub fn start() -> EgressTrap {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (Arc::clone(&seen), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut line = String::new();
                let _ = BufReader::new(&mut stream).read_line(&mut line);
                seen2.lock().unwrap().push(line.trim_end().to_owned());
                let _ = stream.write_all(
                    b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            }
        });
        EgressTrap {
            addr,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The request lines received so far.
    pub fn attempts(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for EgressTrap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How a client run ended.
pub struct Run {
    pub client: &'static str,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    /// Killed at the time limit.
    pub timed_out: bool,
    /// What the client sent to the [`EgressTrap`].
    pub egress: Vec<String>,
}

impl Run {
    /// Panics, with the client's output and `context` (e.g. pith's log), unless the client
    /// exited 0 within its limit and tried nothing beyond loopback.
    pub fn assert_ok(&self, context: &str) {
        let Run {
            client,
            status,
            stdout,
            stderr,
            elapsed,
            timed_out,
            egress,
        } = self;
        let why = if *timed_out {
            format!("killed after {elapsed:.1?}")
        } else {
            format!("{status}")
        };
        assert!(
            status.success() && !timed_out,
            "{client} failed ({why})\nstdout:\n{stdout}\nstderr:\n{stderr}\n{context}"
        );
        assert!(
            egress.is_empty(),
            "{client} tried to reach beyond loopback: {egress:?}\nstderr:\n{stderr}"
        );
    }
}

/// How a client is started: itself, or through `pith run` (with pith's environment, and the
/// client found on `PATH` under its usual name).
#[derive(Clone, Copy)]
pub enum Launch<'a> {
    Direct,
    PithRun(&'a [(&'a str, std::ffi::OsString)]),
}

/// A client command starting from an empty environment: `PATH`, a private `HOME` (and XDG
/// directories in it), proxies that lead to `trap`, and `dir` as its working directory. Through
/// `pith run`, `PATH` starts with a directory where `name` leads to `bin`.
fn command(
    launch: Launch,
    bin: &Path,
    name: &str,
    dir: &Path,
    home: &Path,
    trap: &EgressTrap,
) -> Command {
    let mut cmd = match launch {
        Launch::Direct => Command::new(bin),
        Launch::PithRun(_) => {
            let mut cmd = Command::new(crate::support::pith_bin());
            cmd.args(["run", name]);
            cmd
        }
    };
    cmd.current_dir(dir).env_clear();
    let mut path: Vec<PathBuf> = Vec::new();
    if let Launch::PithRun(env) = launch {
        let links = home.join(".pith-run-bin");
        std::fs::create_dir_all(&links).unwrap();
        #[cfg(unix)]
        if !links.join(name).exists() {
            std::os::unix::fs::symlink(bin, links.join(name)).unwrap();
        }
        path.push(links);
        for (k, v) in env {
            cmd.env(k, v);
        }
    }
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    cmd.env("PATH", std::env::join_paths(path).unwrap());
    let trap = trap.url();
    cmd.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("HTTPS_PROXY", &trap)
        .env("HTTP_PROXY", &trap)
        .env("https_proxy", &trap)
        .env("http_proxy", &trap)
        .env("NO_PROXY", "127.0.0.1,localhost,::1")
        .env("no_proxy", "127.0.0.1,localhost,::1");
    cmd
}

/// Runs `cmd` with stdin closed, in its own process group, reading its output as it comes;
/// kills the group at `limit`, and whatever is left of it when the client exits.
fn run(client: &'static str, mut cmd: Command, trap: EgressTrap, limit: Duration) -> Run {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{client}: cannot start {:?}: {e}", cmd.get_program()));
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() >= limit {
            timed_out = true;
            kill_group(child.id());
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = start.elapsed();
    // Codex's launcher leaves its native binary; a client may leave a shell or a server.
    kill_group(child.id());
    Run {
        client,
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        elapsed,
        timed_out,
        egress: trap.attempts(),
    }
}

/// Reads a child's pipe to its end on a thread of its own (a client blocked on a full pipe
/// would never exit).
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// SIGKILL to the process group `pgid` (a client started by [`run`] leads its own group).
fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// `claude -p [ARGS] PROMPT` in `dir` against `base_url` (no `/v1`: Claude Code adds it).
pub fn claude_code(
    dir: &Path,
    home: &Path,
    base_url: &str,
    args: &[&str],
    prompt: &str,
    limit: Duration,
) -> Run {
    claude_code_with(dir, home, base_url, args, prompt, limit, &[])
}

/// [`claude_code`] with more environment variables (`PATH` replaces the inherited one).
pub fn claude_code_with(
    dir: &Path,
    home: &Path,
    base_url: &str,
    args: &[&str],
    prompt: &str,
    limit: Duration,
    env: &[(&str, &std::ffi::OsStr)],
) -> Run {
    claude_code_via(
        Launch::Direct,
        dir,
        home,
        base_url,
        args,
        prompt,
        limit,
        env,
    )
}

/// [`claude_code_with`], started as `launch` says.
#[expect(clippy::too_many_arguments, reason = "a test helper's knobs")]
pub fn claude_code_via(
    launch: Launch,
    dir: &Path,
    home: &Path,
    base_url: &str,
    args: &[&str],
    prompt: &str,
    limit: Duration,
    env: &[(&str, &std::ffi::OsStr)],
) -> Run {
    let trap = EgressTrap::start();
    let mut cmd = command(
        launch,
        &installed("PITH_TEST_CLAUDE", "Claude Code"),
        "claude",
        dir,
        home,
        &trap,
    );
    cmd.arg("-p")
        .args(args)
        .arg(prompt)
        .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
        .env("ANTHROPIC_BASE_URL", base_url)
        .env("ANTHROPIC_API_KEY", FAKE_KEY)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run("claude", cmd, trap, limit)
}

/// `codex exec --skip-git-repo-check [ARGS] PROMPT` in `dir`, with `$HOME/.codex/config.toml`
/// naming `base_url` (with `/v1`) as a Responses provider.
pub fn codex(
    dir: &Path,
    home: &Path,
    base_url: &str,
    args: &[&str],
    prompt: &str,
    limit: Duration,
) -> Run {
    write_codex_config(home, base_url);
    codex_with(dir, home, args, prompt, limit, &[])
}

/// `$HOME/.codex/config.toml` naming `base_url` (with `/v1`) as a Responses provider, as
/// [`codex`] writes it; returns `CODEX_HOME`.
pub fn write_codex_config(home: &Path, base_url: &str) -> PathBuf {
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    let config = format!(
        r#"model = "gpt-5.5"
model_provider = "pith-test"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false

[model_providers.pith-test]
name = "pith test upstream"
base_url = {}
env_key = "{CODEX_KEY_VAR}"
wire_api = "responses"
"#,
        Value::String(base_url.to_owned())
    );
    std::fs::write(codex_home.join("config.toml"), config).unwrap();
    codex_home
}

/// `codex exec --skip-git-repo-check [ARGS] PROMPT` in `dir` with the config already in
/// `$HOME/.codex` ([`write_codex_config`]) and more environment variables.
pub fn codex_with(
    dir: &Path,
    home: &Path,
    args: &[&str],
    prompt: &str,
    limit: Duration,
    env: &[(&str, &std::ffi::OsStr)],
) -> Run {
    codex_via(Launch::Direct, dir, home, args, prompt, limit, env)
}

/// [`codex_with`], started as `launch` says.
pub fn codex_via(
    launch: Launch,
    dir: &Path,
    home: &Path,
    args: &[&str],
    prompt: &str,
    limit: Duration,
    env: &[(&str, &std::ffi::OsStr)],
) -> Run {
    let codex_home = home.join(".codex");
    let trap = EgressTrap::start();
    let mut cmd = command(
        launch,
        &installed("PITH_TEST_CODEX", "Codex"),
        "codex",
        dir,
        home,
        &trap,
    );
    cmd.args(["exec", "--skip-git-repo-check"])
        .args(args)
        .arg(prompt)
        .env("CODEX_HOME", &codex_home)
        .env(CODEX_KEY_VAR, FAKE_KEY);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run("codex", cmd, trap, limit)
}

/// `opencode run [ARGS] PROMPT` in `dir`, with `$HOME/opencode.json` naming `base_url` (with
/// `/v1`) as its Anthropic provider and `claude-sonnet-4-5` as the model.
pub fn opencode(
    dir: &Path,
    home: &Path,
    base_url: &str,
    args: &[&str],
    prompt: &str,
    limit: Duration,
) -> Run {
    opencode_via(Launch::Direct, dir, home, base_url, args, prompt, limit)
}

/// [`opencode`], started as `launch` says.
pub fn opencode_via(
    launch: Launch,
    dir: &Path,
    home: &Path,
    base_url: &str,
    args: &[&str],
    prompt: &str,
    limit: Duration,
) -> Run {
    opencode_with_options(
        launch,
        dir,
        home,
        base_url,
        &Value::Null,
        args,
        prompt,
        limit,
    )
}

/// [`opencode_via`] with more keys in the Anthropic provider's `options` (e.g. `headers`).
#[expect(clippy::too_many_arguments, reason = "a test helper's knobs")]
pub fn opencode_with_options(
    launch: Launch,
    dir: &Path,
    home: &Path,
    base_url: &str,
    more_options: &Value,
    args: &[&str],
    prompt: &str,
    limit: Duration,
) -> Run {
    let config = opencode_config(base_url, more_options);
    opencode_configured(launch, dir, home, &config, args, prompt, limit)
}

/// OpenCode's config for the mock behind `base_url`, with more keys in the Anthropic
/// provider's `options`.
pub fn opencode_config(base_url: &str, more_options: &Value) -> Value {
    let mut options = serde_json::json!({"baseURL": base_url, "apiKey": FAKE_KEY});
    if let (Some(options), Some(more)) = (options.as_object_mut(), more_options.as_object()) {
        options.extend(more.clone());
    }
    serde_json::json!({
        "model": "anthropic/claude-sonnet-4-5",
        "provider": {"anthropic": {"options": options}},
    })
}

/// `opencode run` with `config` as its whole config (e.g. [`opencode_config`] with an `mcp`
/// member added).
pub fn opencode_configured(
    launch: Launch,
    dir: &Path,
    home: &Path,
    config: &Value,
    args: &[&str],
    prompt: &str,
    limit: Duration,
) -> Run {
    let config_path = home.join("opencode.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let closed = closed_port_url().unwrap();
    let trap = EgressTrap::start();
    let mut cmd = command(
        launch,
        &installed("PITH_TEST_OPENCODE", "OpenCode"),
        "opencode",
        dir,
        home,
        &trap,
    );
    cmd.env("PATH", with_ripgrep(home, cmd.get_envs()));
    cmd.arg("run")
        .args(args)
        .arg(prompt)
        // OpenCode finds its project through PWD, which current_dir does not set; the config
        // is named outright, so a missed project never falls back to a hosted model.
        .env("PWD", dir)
        .env("OPENCODE_CONFIG", &config_path)
        .env("NPM_CONFIG_REGISTRY", &closed)
        .env("BUN_CONFIG_REGISTRY", &closed)
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_SHARE", "1")
        .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
        .env("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1")
        .env("OPENCODE_DISABLE_CLAUDE_CODE", "1");
    run("opencode", cmd, trap, limit)
}

/// One of a client's own subcommands (`mcp list`) in `dir`, with the private home and the
/// network switches the prompt runs above use; killed at `limit`.
pub fn client_subcommand(
    client: &'static str,
    dir: &Path,
    home: &Path,
    args: &[&str],
    limit: Duration,
) -> Run {
    let (var, what) = match client {
        "claude" => ("PITH_TEST_CLAUDE", "Claude Code"),
        "opencode" => ("PITH_TEST_OPENCODE", "OpenCode"),
        _ => ("PITH_TEST_CODEX", "Codex"),
    };
    let trap = EgressTrap::start();
    let mut cmd = command(
        Launch::Direct,
        &installed(var, what),
        client,
        dir,
        home,
        &trap,
    );
    cmd.args(args);
    match client {
        "claude" => {
            // `mcp list` also asks for the account's claude.ai connectors unless told not to.
            cmd.env("CLAUDE_CONFIG_DIR", home.join(".claude"))
                .env("ANTHROPIC_API_KEY", FAKE_KEY)
                .env("ANTHROPIC_BASE_URL", closed_port_url().unwrap())
                .env("ENABLE_CLAUDEAI_MCP_SERVERS", "false")
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                .env("DISABLE_AUTOUPDATER", "1")
                .env("DISABLE_TELEMETRY", "1")
                .env("DISABLE_ERROR_REPORTING", "1");
        }
        "opencode" => {
            let closed = closed_port_url().unwrap();
            cmd.env("PWD", dir)
                .env("NPM_CONFIG_REGISTRY", &closed)
                .env("BUN_CONFIG_REGISTRY", &closed)
                .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
                .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
                .env("OPENCODE_DISABLE_SHARE", "1")
                .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
                .env("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1")
                .env("OPENCODE_DISABLE_CLAUDE_CODE", "1");
        }
        _ => {
            cmd.env("CODEX_HOME", home.join(".codex"))
                .env(CODEX_KEY_VAR, FAKE_KEY);
        }
    }
    run(client, cmd, trap, limit)
}

/// `PATH` with a directory holding only `rg` in front: the ripgrep wheel scripts/test puts in
/// .venv beside the SDKs. OpenCode's grep and glob tools run `rg`, and download it from GitHub
/// into their data directory when `PATH` has none.
fn with_ripgrep<'a>(
    home: &Path,
    mut envs: impl Iterator<Item = (&'a std::ffi::OsStr, Option<&'a std::ffi::OsStr>)>,
) -> std::ffi::OsString {
    let rg = crate::support::python().with_file_name("rg");
    assert!(
        rg.is_file(),
        "{} is missing: run the tests through scripts/test, which installs ripgrep into .venv",
        rg.display()
    );
    let bin = home.join(".pith-test-bin");
    std::fs::create_dir_all(&bin).unwrap();
    // A second turn in the same home finds the link from the first.
    #[cfg(unix)]
    if !bin.join("rg").exists() {
        std::os::unix::fs::symlink(&rg, bin.join("rg")).unwrap();
    }
    let mut dirs = vec![bin];
    // The command's own PATH (through `pith run`, with the client's link in front).
    let path = envs
        .find(|(k, _)| *k == "PATH")
        .and_then(|(_, v)| v.map(std::ffi::OsStr::to_owned))
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    dirs.extend(std::env::split_paths(&path));
    std::env::join_paths(dirs).unwrap()
}

// Smoke tests: one prompt through `pith proxy` to the mock, which answers with plain text.

const PROMPT: &str = "say hi";
const ANSWER: &[&str] = &["Hi", " from pith's", " mock upstream."];
const USAGE: Usage = Usage {
    input: 120,
    output: 6,
    cache_write: 0,
    cache_write_1h: 0,
    cache_read: 0,
};

pub fn has(body: &[u8], needle: &str) -> bool {
    body.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// What the mock received, as `METHOD path?query` lines.
fn request_lines(received: &[Recorded]) -> Vec<String> {
    received
        .iter()
        .map(|r| format!("{} {}", r.method, r.path_and_query))
        .collect()
}

/// The captures' scenario in `dir`: a git repository with a buggy `calc.py` and its test.
pub fn write_calc_project(dir: &Path) {
    std::fs::write(dir.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(
        dir.join("test_calc.py"),
        "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    )
    .unwrap();
    git_commit_all(dir);
}

/// A git repository with one file, and a private home, for one client run.
pub fn project() -> (tempfile::TempDir, tempfile::TempDir) {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("README.md"), "# greeter\n").unwrap();
    git_commit_all(work.path());
    (work, tempfile::tempdir().unwrap())
}

fn text(value: &Value) -> &str {
    value["text"].as_str().unwrap_or("")
}

#[test]
fn claude_code_answers_a_prompt_through_pith_with_no_side_requests() {
    let mock = MockUpstream::start().unwrap();
    mock.push_when(
        |body| has(body, PROMPT),
        Reply::sse(anthropic::stream(ANSWER, USAGE)),
    );
    let pith = PithProxy::start(&mock.url(), &[]);
    let (work, home) = project();

    let run = claude_code(work.path(), home.path(), &pith.url(), &[], PROMPT, LIMIT);
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    // Print mode prints the answer's text and nothing else.
    assert_eq!(
        run.stdout,
        format!("{}\n", ANSWER.concat()),
        "{}",
        run.stderr
    );
    assert_eq!(
        mock.queued_replies(),
        0,
        "the main-loop request reached the mock"
    );

    // One request: with nonessential traffic off there is no preconnect (HEAD /api/hello),
    // count_tokens or small-model call.
    let received = mock.received();
    assert_eq!(
        request_lines(&received),
        ["POST /v1/messages?beta=true"],
        "Claude Code 2.1.328 sends only its main-loop request"
    );
    let main = &received[0];
    assert_eq!(main.header("x-api-key"), Some(FAKE_KEY));
    assert_eq!(main.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(main.header("x-app"), Some("cli"));
    assert_eq!(
        main.header("user-agent"),
        Some("claude-cli/2.1.328 (external, sdk-cli)")
    );
    assert!(
        main.header("anthropic-beta")
            .is_some_and(|b| b.split(',').any(|b| b == "advanced-tool-use-2025-11-20")),
        "{:?}",
        main.headers
    );
    let session = main.header("x-claude-code-session-id").unwrap().to_owned();

    // The prompt is the last block of the first user message, as typed; system reminders
    // (git status, commit attribution) come before it; then a mid-conversation system message.
    let body = main.body_json().unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(body["model"], "claude-opus-5-5");
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "user");
    let blocks = messages[0]["content"].as_array().unwrap();
    let (prompt, reminders) = blocks.split_last().unwrap();
    assert_eq!(prompt["type"], "text");
    assert_eq!(text(prompt), PROMPT);
    assert_eq!(reminders.len(), 2, "{reminders:?}");
    assert!(
        reminders
            .iter()
            .all(|b| text(b).starts_with("<system-reminder>")),
        "{reminders:?}"
    );
    assert!(text(&reminders[0]).contains("gitStatus"), "{reminders:?}");
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1]["role"], "system");

    // pith knew the client and its session.
    let rows = pith.wait_rows(1);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].client, "claude-code");
    assert_eq!(rows[0].session.as_deref(), Some(session.as_str()));
    assert_eq!(rows[0].wire.as_deref(), Some("anthropic"));
    assert_eq!(rows[0].outcome.as_str(), "ok");
}

#[test]
fn codex_answers_a_prompt_through_pith_with_no_side_requests() {
    let mock = MockUpstream::start().unwrap();
    mock.push_when(
        |body| has(body, PROMPT),
        Reply::sse(responses::stream(ANSWER, USAGE)),
    );
    let pith = PithProxy::start(&mock.url(), &[]);
    let (work, home) = project();

    let base = format!("{}/v1", pith.url());
    let run = codex(work.path(), home.path(), &base, &[], PROMPT, LIMIT);
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    // exec prints the final answer alone on stdout; the rest goes to stderr.
    assert_eq!(
        run.stdout,
        format!("{}\n", ANSWER.concat()),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("provider: pith-test"), "{}", run.stderr);
    assert_eq!(
        mock.queued_replies(),
        0,
        "the main-loop request reached the mock"
    );

    let received = mock.received();
    assert_eq!(
        request_lines(&received),
        ["POST /v1/responses"],
        "Codex 0.169.0 sends only its main-loop request"
    );
    let main = &received[0];
    let bearer = format!("Bearer {FAKE_KEY}");
    assert_eq!(main.header("authorization"), Some(bearer.as_str()));
    assert_eq!(main.header("accept"), Some("text/event-stream"));
    assert_eq!(main.header("originator"), Some("codex_exec"));
    assert!(
        main.header("user-agent")
            .is_some_and(|ua| ua.starts_with("codex_exec/0.169.0 ")),
        "{:?}",
        main.headers
    );
    let session = main.header("session-id").unwrap().to_owned();
    assert_eq!(main.header("thread-id"), Some(session.as_str()));
    assert!(main.header("x-codex-turn-metadata").is_some());

    // The prompt is the last input item, a user message as typed; before it the developer
    // messages and the environment context.
    let body = main.body_json().unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(body["store"], false);
    assert_eq!(body["model"], "gpt-5.5");
    assert_eq!(body["prompt_cache_key"], session.as_str());
    let input = body["input"].as_array().unwrap();
    let (prompt, before) = input.split_last().unwrap();
    assert_eq!(prompt["type"], "message");
    assert_eq!(prompt["role"], "user");
    assert_eq!(
        prompt["content"],
        serde_json::json!([{"type": "input_text", "text": PROMPT}])
    );
    let roles: Vec<&str> = before.iter().filter_map(|i| i["role"].as_str()).collect();
    assert_eq!(roles, ["developer", "developer", "user"], "{before:?}");
    assert!(
        text(&before[2]["content"][0]).starts_with("<environment_context>"),
        "{before:?}"
    );

    let rows = pith.wait_rows(1);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].client, "codex");
    assert_eq!(rows[0].session.as_deref(), Some(session.as_str()));
    assert_eq!(rows[0].wire.as_deref(), Some("responses"));
    assert_eq!(rows[0].outcome.as_str(), "ok");
}

#[test]
fn opencode_answers_a_prompt_through_pith_with_a_title_side_request() {
    let mock = MockUpstream::start().unwrap();
    let has_tools = |body: &[u8]| has(body, "\"tools\":[");
    // The title call races the main loop; it takes the mock's default answer.
    mock.push_when(has_tools, Reply::sse(anthropic::stream(ANSWER, USAGE)));
    let pith = PithProxy::start(&mock.url(), &[]);
    let (work, home) = project();

    let base = format!("{}/v1", pith.url());
    let run = opencode(work.path(), home.path(), &base, &[], PROMPT, LIMIT);
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert!(run.stdout.contains(&ANSWER.concat()), "{}", run.stdout);
    assert_eq!(
        mock.queued_replies(),
        0,
        "the main-loop request reached the mock"
    );

    // Two requests in either order: the main loop (its 10 tools) and a title call (none).
    let received = mock.received();
    assert_eq!(
        request_lines(&received),
        ["POST /v1/messages", "POST /v1/messages"],
        "OpenCode 1.18.33 sends its main-loop request and a title call"
    );
    let (main, title): (Vec<&Recorded>, Vec<&Recorded>) =
        received.iter().partition(|r| has_tools(&r.body));
    let (main, title) = (main[0].body_json().unwrap(), title[0].body_json().unwrap());
    for r in &received {
        assert_eq!(r.header("x-api-key"), Some(FAKE_KEY));
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
        assert!(r.header("x-session-id").is_some(), "{:?}", r.headers);
        assert!(
            r.header("user-agent")
                .is_some_and(|ua| ua.starts_with("opencode/1.18.33 ")),
            "{:?}",
            r.headers
        );
    }
    assert_eq!(main["model"], "claude-sonnet-4-5");
    assert_eq!(title["model"], "claude-haiku-4-5-20251001");
    assert_eq!(main["tools"].as_array().map(Vec::len), Some(10));
    // The prompt arrives in literal double quotes, the title call's after its instruction.
    let quoted = format!("\"{PROMPT}\"");
    let texts = |body: &Value| -> Vec<String> {
        body["messages"][0]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| text(b).to_owned())
            .collect()
    };
    assert_eq!(texts(&main), std::slice::from_ref(&quoted));
    assert_eq!(
        texts(&title),
        [
            "Generate a title for this conversation:\n".to_owned(),
            quoted
        ]
    );

    let rows = pith.wait_rows(2);
    assert!(rows.iter().all(|r| r.client == "opencode"), "{rows:?}");
    assert!(rows.iter().all(|r| r.outcome.as_str() == "ok"), "{rows:?}");
}
