//! `config.toml`: every section optional, every key with a default. Unknown keys are errors so
//! that a typo never silently does nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

use crate::env::{self, Var};

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub proxy: ProxyConfig,
    pub upstreams: UpstreamsConfig,
    pub ledger: LedgerConfig,
    pub store: StoreConfig,
    pub account: AccountConfig,
    pub transforms: TransformsConfig,
    pub mcp: McpConfig,
    pub hook: HookConfig,
    pub history: HistoryConfig,
    /// Prices in USD per million tokens, by model id. Merged over the built-in table.
    pub prices: BTreeMap<String, pith_ledger::report::prices::PriceConfig>,
    /// Where this config came from (not a TOML key).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProxyConfig {
    /// Address to listen on, e.g. `127.0.0.1:8787` (env `PITH_LISTEN`); `pith run` looks for
    /// its shared proxy there.
    pub listen: Option<String>,
    /// How long the proxy `pith run` starts in the background stays up with no client of
    /// `pith run` left and no connection open (default `30m`; env `PITH_IDLE_STOP`).
    pub idle_stop: Option<String>,
    /// Access token clients send in `x-pith-token`; required to listen beyond loopback
    /// (env `PITH_PROXY_TOKEN`).
    pub token: Option<String>,
    /// Wait for the provider's response headers (default `10m`; env
    /// `PITH_UPSTREAM_HEADERS_TIMEOUT`).
    pub upstream_headers_timeout: Option<String>,
    /// Longest silence between chunks of the provider's answer (default `5m`; env
    /// `PITH_UPSTREAM_IDLE_TIMEOUT`).
    pub upstream_idle_timeout: Option<String>,
    /// Longest a client may take to send its request headers (default `30s`; env
    /// `PITH_CLIENT_HEADER_TIMEOUT`).
    pub client_header_timeout: Option<String>,
    /// Longest silence between chunks of a client's request body (default `60s`; env
    /// `PITH_CLIENT_IDLE_TIMEOUT`).
    pub client_idle_timeout: Option<String>,
    /// How long an idle upstream connection stays pooled (default `90s`; env
    /// `PITH_POOL_IDLE_TIMEOUT`).
    pub pool_idle_timeout: Option<String>,
    /// This instance's name on its ledger rows, so a team behind a load balancer sees which
    /// one served each request (default `<host name>:<port>`; env `PITH_INSTANCE`).
    pub instance: Option<String>,
    /// On SIGTERM, how long `/pith/health` answers 503 while requests are still served, so a
    /// load balancer moves traffic away before the proxy stops accepting (default `5s` when
    /// listening beyond loopback, else `0s`; env `PITH_DRAIN`).
    pub drain: Option<String>,
    /// Then, how long open requests and streams get to finish before they are cut (default
    /// `30s` when listening beyond loopback, else `5s`; env `PITH_SHUTDOWN_GRACE`). A second
    /// signal cuts them at once.
    pub shutdown_grace: Option<String>,
    /// Shorten long tool outputs from the turn after the one that carried them to a ranked
    /// excerpt that says so (default off; env `PITH_TRIM_OUTPUTS`). Anthropic Messages so far.
    pub trim_outputs: Option<bool>,
    /// Outputs shorter than this many characters ride whole (default 4,000).
    pub trim_outputs_min_chars: Option<usize>,
    /// Tools whose outputs always ride whole, by the name the client calls them (e.g.
    /// `["Read"]`).
    pub trim_outputs_except: Option<Vec<String>>,
    /// The share of conversations (0 to 0.5) that pass through with no transform, to compare
    /// against (default 0: none; env `PITH_HOLDOUT`).
    pub holdout: Option<f64>,
    /// The share (0 to 1) of the requests a stage changed whose original body the provider's
    /// own token counter is asked to count, beside the request, with the client's
    /// credentials: what checks pith's estimate of its savings (default 0: never; env
    /// `PITH_PROVIDER_COUNTS`).
    pub provider_counts: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamsConfig {
    /// Base URL of the Anthropic API (default `https://api.anthropic.com`).
    pub anthropic: Option<String>,
    /// Base URL of the OpenAI API (default `https://api.openai.com`).
    pub openai: Option<String>,
    /// Origin of the ChatGPT backend, for Codex signed in with ChatGPT (default
    /// `https://chatgpt.com`).
    pub chatgpt: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerConfig {
    /// Ledger database file (default `$PITH_HOME/ledger.db`).
    pub path: Option<PathBuf>,
    /// No longer used (records wait in the spool); accepted so older configs still load.
    pub queue: Option<usize>,
    /// MiB of requests the spool may hold while the writers catch up (default 1024); past it
    /// requests are still served, and counted as lost to the ledger.
    pub spool_limit_mb: Option<u64>,
}

/// Team mode: one PostgreSQL database shared by the team's proxies. Unset, everything stays in
/// the embedded SQLite files under `$PITH_HOME`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `postgres://user:password@host:port/database` (env `PITH_STORE_URL`). The proxy ships
    /// its ledger rows there in the background; `pith stats` and the dashboard read the team's.
    pub url: Option<String>,
    /// The local replica of the team ledger that `pith stats` and the dashboard read (default
    /// `$PITH_HOME/team-ledger.db`).
    pub replica: Option<PathBuf>,
    /// How long a request waits for the team store where it reads or writes on the request
    /// path (the tool search round trip's blocks); past it the request goes on without, and
    /// its row says so (default `100ms`; env `PITH_STORE_TIMEOUT`).
    pub timeout: Option<String>,
}

/// Who this install's requests belong to. A single install is one account, `local`; in team
/// mode each developer sets their own, and the team ledger says which account each proxy's
/// requests belong to. A gateway shared by several developers maps each request to an account
/// by its key instead (`keys`).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccountConfig {
    /// The account id (env `PITH_ACCOUNT`; default `local`): letters, digits and `.`, `_`, `-`,
    /// `@`, at most 64. On a gateway with `keys`, the gateway's own account.
    pub id: Option<String>,
    /// A gateway's account keys, by account: `alice = "<key>"` (at least 16 characters) or
    /// `alice = "sha256:<64 hex digits>"` (the key's SHA-256, so the config holds no secret).
    /// With keys, every request must name one in its `pith-account-key` header and belongs to
    /// its account. Env `PITH_ACCOUNT_KEYS`: a file holding the same lines, used instead.
    pub keys: BTreeMap<String, String>,
}

/// The account of a single install.
pub const LOCAL_ACCOUNT: &str = "local";

impl Config {
    /// This install's account: `PITH_ACCOUNT` over `[account] id`, else `local`.
    pub fn account_id(&self) -> anyhow::Result<String> {
        let (id, source) = match env::text(Var::Account) {
            Some(v) => (v.trim().to_owned(), "PITH_ACCOUNT"),
            None => match &self.account.id {
                Some(v) => (v.clone(), "account.id"),
                None => return Ok(LOCAL_ACCOUNT.to_owned()),
            },
        };
        anyhow::ensure!(
            is_account_id(&id),
            "{source} = {id:?} is not an account id: {ACCOUNT_ID_RULE}, e.g. your login name"
        );
        Ok(id)
    }

    /// The gateway's account keys: the file `PITH_ACCOUNT_KEYS` names over `[account.keys]`;
    /// empty when neither has any. Each account id and key is checked, and a key given to two
    /// accounts is refused; an error names the account, never the key.
    pub fn account_keys(&self) -> anyhow::Result<pith_proxy::AccountKeys> {
        match env::absolute_path(Var::AccountKeys)? {
            Some(path) => {
                let table = read_keys_file(&path)?;
                keys_from(&table, &format!("{} (PITH_ACCOUNT_KEYS)", path.display()))
            }
            None => keys_from(&self.account.keys, "account.keys"),
        }
    }

    /// The proxy's access token: `PITH_PROXY_TOKEN` over `[proxy] token`; none when empty.
    pub fn proxy_token(&self) -> Option<String> {
        env::text(Var::ProxyToken)
            .map(str::to_owned)
            .or_else(|| self.proxy.token.clone())
            .filter(|t| !t.is_empty())
    }

    /// The team store, if one is configured: `PITH_STORE_URL` over `[store] url`. Anything but
    /// a PostgreSQL URL is an error that says what is accepted.
    pub fn store_url(&self) -> anyhow::Result<Option<pith_store::postgres::StoreUrl>> {
        let (text, source) = match env::text(Var::StoreUrl) {
            Some(v) => (v.to_owned(), "PITH_STORE_URL"),
            None => match &self.store.url {
                Some(v) => (v.clone(), "store.url"),
                None => return Ok(None),
            },
        };
        let url = pith_store::postgres::StoreUrl::new(text.trim());
        anyhow::ensure!(
            url.is_postgres(),
            "{source} = {url} is not a PostgreSQL URL: give postgres://user:password@host:port/database, \
             or leave it unset to keep everything in local SQLite"
        );
        Ok(Some(url))
    }

    /// Where `pith stats` and the dashboard keep their copy of the team ledger.
    pub fn team_replica(&self) -> anyhow::Result<PathBuf> {
        match &self.store.replica {
            Some(p) => Ok(p.clone()),
            None => Ok(pith_home()?.join("team-ledger.db")),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransformsConfig {
    /// Pins (`@pith pin <rule>`) on all three wires (default on; env `PITH_PINS`).
    pub pins: Option<bool>,
    /// Tool deferral on Anthropic and Responses requests (default on).
    pub defer_tools: Option<bool>,
    /// For clients without tool search of their own: take the tool search blocks pith's
    /// search tool causes out of answers, and put them back in the session's later requests
    /// (default on; env `PITH_TOOL_SEARCH_ROUND_TRIP`). Kept in `$PITH_HOME/search-blocks.db`.
    pub tool_search_round_trip: Option<bool>,
    /// Tools kept loaded because they are most relevant to the task (default 5).
    pub keep_relevant: Option<usize>,
    /// Definitions at or below this many characters stay loaded (default 0).
    pub small_tool_chars: Option<usize>,
    /// `regex` (default) or `bm25`: which Anthropic tool search tool to add.
    pub tool_search: Option<String>,
    /// Defer only when the deferred definitions add up to at least this many characters
    /// (default 16,000; env `PITH_MIN_DEFERRED_CHARS`). See BENCHMARKS.md: deferring a few
    /// kilobytes can cost more than it saves.
    pub min_deferred_chars: Option<usize>,
    /// Base URL of the embedding server for semantic tool ranking; with `embeddings_model`,
    /// tools are ranked by embedding similarity instead of BM25. Each session's ranking is
    /// decided once and cached under `$PITH_HOME/embeddings`; any failure means BM25.
    pub embeddings_url: Option<String>,
    /// Embedding model for semantic tool ranking (e.g. `nomic-embed-text`); needs
    /// `embeddings_url`.
    pub embeddings_model: Option<String>,
    /// `ollama` (default: `/api/embed`) or `openai` (`/v1/embeddings`).
    pub embeddings_api: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// Rank large search results (default off), by `prefilter_ranker`.
    pub local_prefilter: Option<bool>,
    /// `model` (default: a local model behind `prefilter_api`), `lexical` (the search's
    /// words in each file's path and lines, in-process, no model) or `local` (an embedding
    /// model in pith's process, fused with the lexical ranking; `pith model install`).
    pub prefilter_ranker: Option<String>,
    /// The in-process model for `prefilter_ranker = "local"`: the name of one `pith model
    /// install` installed (default `minilm`), or its directory.
    pub prefilter_model: Option<String>,
    /// `ollama` (default: Ollama's `/api/chat`) or `openai` (`/v1/chat/completions`, as
    /// llama.cpp's server, LM Studio, vLLM and Ollama serve it).
    pub prefilter_api: Option<String>,
    /// The model server's base URL (default `http://127.0.0.1:11434` for Ollama,
    /// `http://127.0.0.1:8080` for the OpenAI API). `ollama_url` is its older name.
    #[serde(alias = "ollama_url")]
    pub prefilter_url: Option<String>,
    /// Local model name, as the server lists it.
    pub model: Option<String>,
    /// Matches above which the prefilter ranks (default 50, the page size).
    pub prefilter_threshold: Option<usize>,
    /// How many lines of the files the ranker picked are shown at most (default 10).
    pub prefilter_shown: Option<usize>,
    /// Ranking timeout in milliseconds (default 3000).
    pub prefilter_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HookConfig {
    /// Record a `fix` memory when a verdict command that failed passes again in the same
    /// session after edits (default off).
    pub capture_fixes: Option<bool>,
    /// The commands whose failures are verdicts, as leading words (`"cargo test"`); replaces
    /// the built-in list.
    pub verdict_commands: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryConfig {
    /// Record the conversations that pass through the proxy (default on; env `PITH_HISTORY`).
    pub record: Option<bool>,
    /// History database file (default `$PITH_HOME/history.db`; env `PITH_HISTORY_PATH`).
    pub path: Option<PathBuf>,
    /// The key filter tokens are signed with, 64 hex digits: for a team sharing one history
    /// (default: 32 random bytes made on first use in `$PITH_HOME/history.key`, mode 0600;
    /// env `PITH_HISTORY_TOKEN_KEY`).
    pub token_key: Option<String>,
    /// How long a filter token is good for (default `15m`; env `PITH_HISTORY_TOKEN_TTL`).
    pub token_ttl: Option<String>,
    /// Agent type per client (`admin` or `public`, default `public`), by the client names the
    /// ledger shows: `agent_types = { codex = "admin" }`. A request's `pith-agent-type` header
    /// overrides it.
    pub agent_types: BTreeMap<String, String>,
}

impl Config {
    /// Load `explicit`, else `$PITH_HOME/config.toml` if it exists, else defaults.
    pub fn load(explicit: Option<&Path>) -> anyhow::Result<Config> {
        let path = match explicit {
            Some(p) => {
                anyhow::ensure!(
                    !(p.is_relative() && from_the_environment(p)),
                    "PITH_CONFIG is a relative path ({p:?}): set it to an absolute one (a \
                     relative one would be found in whatever directory pith runs in, a cloned \
                     project's too), or pass --config"
                );
                anyhow::ensure!(
                    p.exists(),
                    "config file {} does not exist (given by --config or PITH_CONFIG)",
                    p.display()
                );
                Some(p.to_owned())
            }
            None => Some(pith_home()?.join("config.toml")).filter(|p| p.exists()),
        };
        let Some(path) = path else {
            return Ok(Config::default());
        };
        // Named by a flag or a variable, it may be anything: a FIFO hung every command (the
        // hook too), `/dev/zero` took gigabytes.
        let text = pith_paths::small::read_small_file(&path, CONFIG_BYTES_MAX)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        let mut config: Config = toml::from_str(&text)
            .with_context(|| format!("invalid config file {}", path.display()))?;
        let path = std::path::absolute(&path)
            .with_context(|| format!("cannot tell where config file {} is", path.display()))?;
        if let Some(dir) = path.parent() {
            config.resolve_paths(dir)?;
        }
        config.source = Some(path);
        Ok(config)
    }

    /// Every path the file names, made absolute against the file's own directory (`dir`): the
    /// one rule for a configured path, so that a relative one means the same wherever pith
    /// runs; for `pith mcp`, `pith doctor` and `pith model check` that is a project's directory,
    /// a stranger's, and a model's directory holds a library pith loads. The path settings:
    /// `ledger.path`, `store.replica`, `history.path`, and `mcp.prefilter_model` when it names
    /// a directory ([`is_model_path`]) rather than an installed model.
    fn resolve_paths(&mut self, dir: &Path) -> anyhow::Result<()> {
        let resolve = |path: &Path| {
            std::path::absolute(dir.join(path)).with_context(|| {
                format!(
                    "cannot resolve {} against {}",
                    path.display(),
                    dir.display()
                )
            })
        };
        for path in [
            &mut self.ledger.path,
            &mut self.store.replica,
            &mut self.history.path,
        ]
        .into_iter()
        .flatten()
        {
            *path = resolve(path)?;
        }
        if let Some(model) = &mut self.mcp.prefilter_model
            && is_model_path(model)
        {
            let resolved = resolve(Path::new(model.trim()))?;
            *model = resolved.into_os_string().into_string().map_err(|path| {
                anyhow::anyhow!(
                    "mcp.prefilter_model: {} is not valid UTF-8 once resolved against the config \
                     file's directory; give an absolute path",
                    Path::new(&path).display()
                )
            })?;
        }
        Ok(())
    }
}

/// Whether a `prefilter_model` value names a directory (it has a `/` or starts with `.`) rather
/// than a model installed under `$PITH_HOME/models`.
pub fn is_model_path(value: &str) -> bool {
    let value = value.trim();
    value.contains('/') || value.contains(std::path::MAIN_SEPARATOR) || value.starts_with('.')
}

/// The largest config or account keys file pith reads.
const CONFIG_BYTES_MAX: u64 = 1 << 20;

/// The file `PITH_ACCOUNT_KEYS` names: `account = "key"` lines, as `[account.keys]` holds them.
fn read_keys_file(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let named = "named by PITH_ACCOUNT_KEYS";
    let text = pith_paths::small::read_small_file(path, CONFIG_BYTES_MAX).with_context(|| {
        format!(
            "cannot read the account keys file {} ({named})",
            path.display()
        )
    })?;
    toml::from_str(&text).with_context(|| {
        format!(
            "invalid account keys file {} ({named}): write one `account = \"key\"` line per account",
            path.display()
        )
    })
}

/// The keys of `table` (account to key), checked; `source` names where they came from.
fn keys_from(
    table: &BTreeMap<String, String>,
    source: &str,
) -> anyhow::Result<pith_proxy::AccountKeys> {
    let mut keys = pith_proxy::AccountKeys::new();
    for (account, key) in table {
        anyhow::ensure!(
            is_account_id(account),
            "{source}: {account:?} is not an account id: {ACCOUNT_ID_RULE}"
        );
        keys.add(account, key)
            .with_context(|| format!("{source}: the key of account {account}"))?;
    }
    Ok(keys)
}

/// What an account id may hold, as errors say it.
const ACCOUNT_ID_RULE: &str = "use letters, digits and . _ - @ (at most 64)";

/// Whether `id` is an account id: letters, digits and `. _ - @`, at most 64.
fn is_account_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

/// A data directory other users can write into (its group or everyone) is refused: they could plant the locks, the
/// spool, the setup record or the config pith reads and acts on. One that does not exist yet
/// is created 0700 by whoever needs it.
fn check_private(home: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::metadata(home) else {
            return Ok(());
        };
        let mine = meta.uid() == rustix::process::getuid().as_raw();
        anyhow::ensure!(
            mine && meta.mode() & 0o022 == 0,
            "PITH_HOME {} is {}: another user could put files there that pith reads and runs; \
             use a directory of your own (pith creates a new one 0700), or `chmod 700` it if \
             it is yours",
            home.display(),
            if mine {
                format!("writable by other users (mode {:o})", meta.mode() & 0o7777)
            } else {
                "another user's".to_owned()
            }
        );
    }
    Ok(())
}

/// Whether the config path given is what `PITH_CONFIG` says (a `--config` on the command line
/// giving the same relative path is taken for it: the user can give it absolute). The client's
/// own arguments after `pith run` may hold a `--config` of theirs: argv says nothing here.
fn from_the_environment(path: &Path) -> bool {
    std::env::var_os("PITH_CONFIG").is_some_and(|v| Path::new(&v) == path)
}

/// pith's own data directory: `$PITH_HOME`, else the platform data dir + `pith`.
pub fn pith_home() -> anyhow::Result<PathBuf> {
    if let Some(home) = env::absolute_path(Var::Home)? {
        check_private(&home)?;
        return Ok(home);
    }
    dirs::data_dir()
        .map(|d| d.join("pith"))
        .context("cannot find a data directory for pith; set PITH_HOME")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_errors() {
        let err = toml::from_str::<Config>("[proxy]\nlisten_on = \"x\"\n").unwrap_err();
        assert!(err.to_string().contains("listen_on"), "{err}");
    }

    #[test]
    fn full_config_parses() {
        let c: Config = toml::from_str(
            r#"
            [proxy]
            listen = "127.0.0.1:9000"
            [upstreams]
            anthropic = "http://127.0.0.1:1"
            [transforms]
            defer_tools = false
            [store]
            url = "postgres://team@db.internal/pith"
            [account]
            id = "alice"
            [mcp]
            local_prefilter = true
            prefilter_api = "openai"
            prefilter_url = "http://127.0.0.1:8080/v1"
            prefilter_shown = 10
            [prices."claude-x"]
            input = 3.0
            output = 15.0
            "#,
        )
        .unwrap();
        assert_eq!(c.proxy.listen.as_deref(), Some("127.0.0.1:9000"));
        assert_eq!(c.transforms.defer_tools, Some(false));
        assert_eq!(
            c.store.url.as_deref(),
            Some("postgres://team@db.internal/pith")
        );
        assert_eq!(c.account.id.as_deref(), Some("alice"));
        assert_eq!(c.prices["claude-x"].input, 3.0);
        assert_eq!(c.mcp.prefilter_shown, Some(10));
        assert_eq!(
            c.mcp.prefilter_url.as_deref(),
            Some("http://127.0.0.1:8080/v1")
        );
    }

    #[test]
    fn account_keys_are_checked_and_errors_name_the_account_never_the_key() {
        let c: Config = toml::from_str(
            r#"
            [account]
            id = "gateway"
            [account.keys]
            alice = "alice-0123456789abcdef"
            "bob@example.com" = "sha256:d0d6d50b078333857133399f9ce499a2b9f941c6d9bb36ef786163af574450d7"
            "#,
        )
        .unwrap();
        let keys = keys_from(&c.account.keys, "account.keys").unwrap();
        assert_eq!(keys.account_for(b"alice-0123456789abcdef"), Some("alice"));
        assert_eq!(
            keys.account_for(b"bob-secret-key-0123456789"),
            Some("bob@example.com")
        );
        // Only strings are keys.
        let err = toml::from_str::<Config>("[account.keys]\nalice = 7\n").unwrap_err();
        assert!(err.to_string().contains("string"), "{err}");

        let refused = |toml_text: &str| -> String {
            let c: Config = toml::from_str(toml_text).unwrap();
            format!(
                "{:#}",
                keys_from(&c.account.keys, "account.keys").unwrap_err()
            )
        };
        let short = refused("[account.keys]\nalice = \"short-secret\"\n");
        assert!(
            short.starts_with("account.keys: the key of account alice: the key is 12 characters")
                && !short.contains("short-secret"),
            "{short}"
        );
        let twice = refused(
            "[account.keys]\nalice = \"same-key-0123456789\"\nbob = \"same-key-0123456789\"\n",
        );
        assert!(
            twice.contains("the key of account bob: the key is also account \"alice\"'s")
                && !twice.contains("same-key"),
            "{twice}"
        );
        let bad_id = refused("[account.keys]\n\"al ice\" = \"alice-0123456789abcdef\"\n");
        assert!(
            bad_id.contains("\"al ice\" is not an account id") && !bad_id.contains("0123"),
            "{bad_id}"
        );
        let digest = refused("[account.keys]\nalice = \"sha256:abcd\"\n");
        assert!(digest.contains("64 hex digits"), "{digest}");
    }

    /// Every path a config file names is read against the file's own directory, never the
    /// directory pith runs in (a project's, for `pith mcp`); absolute paths and a model's name
    /// stay as written.
    #[test]
    fn relative_paths_in_a_config_file_are_read_against_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(
            &file,
            "[ledger]\npath = \"data/ledger.db\"\n[store]\nreplica = \"./team.db\"\n\
             [history]\npath = \"/srv/history.db\"\n[mcp]\nprefilter_model = \"./models/mine\"\n",
        )
        .unwrap();
        let c = Config::load(Some(&file)).unwrap();
        assert_eq!(c.ledger.path, Some(dir.path().join("data/ledger.db")));
        assert_eq!(c.store.replica, Some(dir.path().join("team.db")));
        assert_eq!(c.history.path, Some(PathBuf::from("/srv/history.db")));
        let model = dir.path().join("models/mine");
        assert_eq!(c.mcp.prefilter_model.as_deref(), model.to_str());
        std::fs::write(&file, "[mcp]\nprefilter_model = \"minilm\"\n").unwrap();
        let c = Config::load(Some(&file)).unwrap();
        assert_eq!(c.mcp.prefilter_model.as_deref(), Some("minilm"));
    }

    #[test]
    fn the_older_name_of_the_prefilter_url_still_works_but_not_with_the_new_one() {
        let c: Config = toml::from_str("[mcp]\nollama_url = \"http://127.0.0.1:1\"\n").unwrap();
        assert_eq!(c.mcp.prefilter_url.as_deref(), Some("http://127.0.0.1:1"));
        let err = toml::from_str::<Config>(
            "[mcp]\nollama_url = \"http://a:1\"\nprefilter_url = \"http://b:1\"\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("duplicate"), "{err}");
    }
}
