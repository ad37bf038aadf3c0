//! Everything `pith proxy` will do, resolved before anything starts: each setting from its flag,
//! else its environment variable, else the config file, else the default, checked so that a bad
//! value is an error naming where it came from, not a proxy that misbehaves later.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use pith_ledger::{DEFAULT_SPOOL_LIMIT, SpoolConfig};
use pith_prefilter::{Api, DEFAULT_EMBED_TIMEOUT, EmbedConfig};
use pith_proxy::{AccountKeys, Timeouts, UpstreamUrl};
use pith_store::postgres::StoreUrl;
use pith_transform::{DeferOptions, SearchVariant};

use super::Args;
use crate::config::{Config, pith_home};
use crate::env::{self, Var};
use crate::history_settings::HistorySettings;

const DEFAULT_LISTEN: &str = "127.0.0.1:8787";

/// The resolved settings of one `pith proxy`.
pub struct Plan {
    pub listen: SocketAddr,
    pub idle_stop: Option<Duration>,
    pub anthropic: UpstreamUrl,
    pub openai: UpstreamUrl,
    pub chatgpt: UpstreamUrl,
    /// The ledger, unless `--no-ledger`.
    pub ledger: Option<PathBuf>,
    pub spool: Option<SpoolConfig>,
    pub history: HistorySettings,
    /// The account this proxy's requests belong to, and a gateway's account keys.
    pub account: String,
    pub keys: AccountKeys,
    /// Team mode's database.
    pub store: Option<StoreUrl>,
    pub team_replica: Option<PathBuf>,
    pub pins: bool,
    /// Tool output excerpts' options, when they are on.
    pub trim_outputs: Option<pith_transform::outputs::OutputsOptions>,
    /// The share of conversations held out from every transform.
    pub holdout: f64,
    /// The share of changed requests the provider is asked to count.
    pub provider_counts: f64,
    /// Tool deferral's options, when it is on, and the embedding ranker's when one is set.
    pub defer: Option<DeferOptions>,
    pub embeddings: Option<EmbedConfig>,
    /// Where hidden tool searches wait, when the round trip is on.
    pub searches: Option<PathBuf>,
    pub timeouts: Timeouts,
    pub token: Option<String>,
    /// This instance's name on its ledger rows, when one is set ([`Plan::instance_name`]).
    pub instance: Option<String>,
    /// On SIGTERM: how long the health check fails while requests are still served, then how
    /// long open requests get to finish.
    pub drain: Duration,
    pub grace: Duration,
    /// How long a request waits for the team store on the request path.
    pub store_timeout: Duration,
}

/// Longest instance name kept (it goes on every ledger row).
const MAX_INSTANCE: usize = 64;
/// The drain a proxy listening beyond loopback (a gateway behind a load balancer) gets by
/// default: two or three health checks at a load balancer's usual interval of one or two
/// seconds.
const GATEWAY_DRAIN: Duration = Duration::from_secs(5);
/// How long open requests get to finish on a stop, by default, on a gateway: a model's turn
/// rarely takes longer to stream, and a service manager's stop timeout is longer (systemd:
/// 90 s). A proxy on loopback (one person's) gets [`LOCAL_GRACE`]: its user stopped it.
const GATEWAY_GRACE: Duration = Duration::from_secs(30);
const LOCAL_GRACE: Duration = Duration::from_secs(5);
/// How long a request waits for the team store by default: a loopback or LAN PostgreSQL
/// answers in a millisecond or two.
const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_millis(100);

impl Plan {
    pub fn resolve(args: &Args, config: &Config) -> anyhow::Result<Plan> {
        let idle_stop = match args.idle_stop.as_deref() {
            None => None,
            Some(text) => Some(env::positive_duration(text, "--idle-stop")?),
        };
        let Upstreams {
            anthropic,
            openai,
            chatgpt,
        } = upstreams(
            [
                args.anthropic_upstream.as_deref(),
                args.openai_upstream.as_deref(),
                args.chatgpt_upstream.as_deref(),
            ],
            config,
        )?;
        let ledger = if args.no_ledger {
            None
        } else {
            Some(
                match args.ledger.clone().or_else(|| config.ledger.path.clone()) {
                    Some(p) => p,
                    None => pith_home()?.join("ledger.db"),
                },
            )
        };
        if ledger.is_some() && config.ledger.queue.is_some() {
            tracing::warn!(
                "[ledger] queue is no longer used: records wait in the spool beside the \
                 ledger ([ledger] spool_limit_mb bounds it)"
            );
        }
        let store = config.store_url()?;
        let listen = listen_addr(args.listen, config)?;
        let defer = defer_on(config)?
            .then(|| defer_options(config))
            .transpose()?;
        let searches = (search_round_trip_on(config)? && defer.is_some())
            .then(|| pith_home().map(|h| h.join("search-blocks.db")))
            .transpose()?;
        let mut plan = Plan {
            listen,
            idle_stop,
            anthropic,
            openai,
            chatgpt,
            spool: ledger.as_deref().map(|p| spool_config(p, config)),
            ledger,
            history: HistorySettings::resolve(config)?,
            // Checked even outside team mode, so a typo shows before it matters.
            account: config.account_id()?,
            keys: config.account_keys()?,
            team_replica: store.as_ref().map(|_| config.team_replica()).transpose()?,
            store,
            pins: pins_on(config)?,
            trim_outputs: trim_outputs(config)?,
            holdout: holdout(config)?,
            provider_counts: provider_counts(config)?,
            embeddings: match defer {
                Some(_) => embeddings(config)?,
                None => None,
            },
            defer,
            searches,
            timeouts: timeouts(&config.proxy)?,
            token: token_for(listen, config.proxy_token())?,
            instance: instance_name(config)?,
            drain: drain_of(config, listen)?,
            grace: grace_of(config, listen)?,
            store_timeout: setting(
                Var::StoreTimeout,
                "store.timeout",
                &config.store.timeout,
                DEFAULT_STORE_TIMEOUT,
                env::positive_duration,
            )?,
        };
        // An output the stage shortens is kept whole in the history, for `pith mcp`.
        let recorded = plan.history_path().is_some();
        if let Some(options) = &mut plan.trim_outputs {
            options.originals_kept = recorded;
        }
        Ok(plan)
    }

    /// Where conversations are recorded: on the ledger's writer threads, so only with a ledger.
    pub fn history_path(&self) -> Option<&Path> {
        (self.history.record && self.ledger.is_some()).then_some(self.history.path.as_path())
    }
}

/// The access token, checked: beyond loopback it is all that stands between the network and
/// the user's provider credentials, so it must be as long as an account key (a 5-character
/// token was accepted).
fn token_for(listen: SocketAddr, token: Option<String>) -> anyhow::Result<Option<String>> {
    let min = pith_proxy::accounts::MIN_KEY_CHARS;
    if let Some(t) = &token
        && !listen.ip().is_loopback()
    {
        let chars = t.chars().count();
        anyhow::ensure!(
            chars >= min,
            "the access token ([proxy] token or PITH_PROXY_TOKEN) is {chars} characters long; \
             listening on {listen}, beyond loopback, it needs at least {min} (e.g. the output \
             of `openssl rand -hex 24`)"
        );
    }
    Ok(token)
}

/// How long the health check fails on a stop before the proxy stops accepting.
fn drain_of(config: &Config, listen: SocketAddr) -> anyhow::Result<Duration> {
    let default = if listen.ip().is_loopback() {
        Duration::ZERO
    } else {
        GATEWAY_DRAIN
    };
    setting(
        Var::Drain,
        "proxy.drain",
        &config.proxy.drain,
        default,
        env::any_duration,
    )
}

/// How long open requests get to finish on a stop.
fn grace_of(config: &Config, listen: SocketAddr) -> anyhow::Result<Duration> {
    let default = if listen.ip().is_loopback() {
        LOCAL_GRACE
    } else {
        GATEWAY_GRACE
    };
    setting(
        Var::ShutdownGrace,
        "proxy.shutdown_grace",
        &config.proxy.shutdown_grace,
        default,
        env::any_duration,
    )
}

/// A duration setting: its variable, else its config key, else `default`; `parse` says which
/// values are allowed (and names the source in its error).
fn setting(
    var: Var,
    key: &str,
    configured: &Option<String>,
    default: Duration,
    parse: fn(&str, &str) -> anyhow::Result<Duration>,
) -> anyhow::Result<Duration> {
    match (env::text(var), configured) {
        (Some(text), _) => parse(text, var.name()),
        (None, Some(text)) => parse(text, key),
        (None, None) => Ok(default),
    }
}

impl Plan {
    /// This instance's name on its ledger rows: the one set, else the host name and the port
    /// it listens on, `bound` (two instances on one machine differ).
    pub fn instance_name(&self, bound: SocketAddr) -> String {
        if let Some(name) = &self.instance {
            return name.clone();
        }
        let port = format!(":{}", bound.port());
        let mut host = pith_store::postgres::ship::host_name();
        while host.len() + port.len() > MAX_INSTANCE {
            host.pop();
        }
        host + &port
    }
}

/// The instance name set: `PITH_INSTANCE`, else `[proxy] instance`; printable, at most 64
/// bytes.
fn instance_name(config: &Config) -> anyhow::Result<Option<String>> {
    let (name, source) = match (env::text(Var::Instance), &config.proxy.instance) {
        (Some(v), _) => (v.trim().to_owned(), "PITH_INSTANCE"),
        (None, Some(v)) => (v.trim().to_owned(), "proxy.instance"),
        (None, None) => return Ok(None),
    };
    anyhow::ensure!(
        !name.is_empty() && name.len() <= MAX_INSTANCE && name.chars().all(|c| !c.is_control()),
        "{source} = {name:?} is not an instance name: give up to {MAX_INSTANCE} printable \
         characters (e.g. gw-1), or leave it unset for <host name>:<port>"
    );
    Ok(Some(name))
}

/// The address the proxy listens on: the flag, else `PITH_LISTEN`, else `proxy.listen`, else
/// 127.0.0.1:8787.
pub fn listen_addr(flag: Option<SocketAddr>, config: &Config) -> anyhow::Result<SocketAddr> {
    if let Some(a) = flag {
        return Ok(a);
    }
    if let Some(text) = env::text(Var::Listen) {
        return text.parse().with_context(|| {
            format!("PITH_LISTEN={text:?} is not an address like 127.0.0.1:8787")
        });
    }
    let text = config.proxy.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
    text.parse()
        .with_context(|| format!("proxy.listen {text:?} is not an address like 127.0.0.1:8787"))
}

/// Where the proxy sends each provider's traffic.
pub struct Upstreams {
    pub anthropic: UpstreamUrl,
    pub openai: UpstreamUrl,
    /// The ChatGPT backend (Codex signed in with ChatGPT).
    pub chatgpt: UpstreamUrl,
}

/// Where the proxy sends Anthropic, OpenAI and ChatGPT-backend traffic (`flags` in that order):
/// flag, else env, else config, else the providers' own.
pub fn upstreams(flags: [Option<&str>; 3], config: &Config) -> anyhow::Result<Upstreams> {
    let pick = |flag: Option<&str>, var: Var, configured: Option<&str>, default: &str| {
        let url = flag.or(env::text(var)).or(configured).unwrap_or(default);
        UpstreamUrl::parse(url)
    };
    let [anthropic, openai, chatgpt] = flags;
    let u = &config.upstreams;
    Ok(Upstreams {
        anthropic: pick(
            anthropic,
            Var::AnthropicUpstream,
            u.anthropic.as_deref(),
            pith_proxy::upstream::ANTHROPIC_DEFAULT,
        )?,
        openai: pick(
            openai,
            Var::OpenaiUpstream,
            u.openai.as_deref(),
            pith_proxy::upstream::OPENAI_DEFAULT,
        )?,
        chatgpt: pick(
            chatgpt,
            Var::ChatgptUpstream,
            u.chatgpt.as_deref(),
            pith_proxy::upstream::CHATGPT_DEFAULT,
        )?,
    })
}

/// The proxy's timeouts: env over config over the defaults, each named in its error.
fn timeouts(proxy: &crate::config::ProxyConfig) -> anyhow::Result<Timeouts> {
    let defaults = Timeouts::default();
    let pick = |var: Var, key: &str, configured: &Option<String>, default: Duration| match (
        env::duration(var)?,
        configured,
    ) {
        (Some(d), _) => Ok(d),
        (None, Some(text)) => env::positive_duration(text, &format!("proxy.{key}")),
        (None, None) => Ok(default),
    };
    Ok(Timeouts {
        upstream_headers: pick(
            Var::UpstreamHeadersTimeout,
            "upstream_headers_timeout",
            &proxy.upstream_headers_timeout,
            defaults.upstream_headers,
        )?,
        upstream_idle: pick(
            Var::UpstreamIdleTimeout,
            "upstream_idle_timeout",
            &proxy.upstream_idle_timeout,
            defaults.upstream_idle,
        )?,
        client_headers: pick(
            Var::ClientHeaderTimeout,
            "client_header_timeout",
            &proxy.client_header_timeout,
            defaults.client_headers,
        )?,
        client_idle: pick(
            Var::ClientIdleTimeout,
            "client_idle_timeout",
            &proxy.client_idle_timeout,
            defaults.client_idle,
        )?,
        pool_idle: pick(
            Var::PoolIdleTimeout,
            "pool_idle_timeout",
            &proxy.pool_idle_timeout,
            defaults.pool_idle,
        )?,
    })
}

/// Where records wait for the ledger's writers: the spool beside the ledger, bounded by
/// `[ledger] spool_limit_mb`.
fn spool_config(ledger: &Path, config: &Config) -> SpoolConfig {
    SpoolConfig {
        dir: pith_ledger::spool_dir(ledger),
        limit: config
            .ledger
            .spool_limit_mb
            .map_or(DEFAULT_SPOOL_LIMIT, |mb| mb.saturating_mul(1 << 20)),
    }
}

/// Tool deferral's options: environment over config over the defaults.
fn defer_options(config: &Config) -> anyhow::Result<DeferOptions> {
    let defaults = DeferOptions::default();
    let t = &config.transforms;
    let size = |var: Var, configured: Option<usize>, default: usize| -> anyhow::Result<usize> {
        Ok(match env::number(var)? {
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => configured.unwrap_or(default),
        })
    };
    Ok(DeferOptions {
        keep_relevant: t.keep_relevant.unwrap_or(defaults.keep_relevant),
        small_tool_chars: size(
            Var::SmallToolChars,
            t.small_tool_chars,
            defaults.small_tool_chars,
        )?,
        search: match t.tool_search.as_deref() {
            None => defaults.search,
            Some(name) => SearchVariant::from_name(name).with_context(|| {
                format!("transforms.tool_search = {name:?}: use \"regex\" or \"bm25\"")
            })?,
        },
        min_deferred_chars: size(
            Var::MinDeferredChars,
            t.min_deferred_chars,
            defaults.min_deferred_chars,
        )?,
    })
}

/// The embedding ranker tool deferral uses instead of BM25, when both its keys are set.
fn embeddings(config: &Config) -> anyhow::Result<Option<EmbedConfig>> {
    let t = &config.transforms;
    match (&t.embeddings_url, &t.embeddings_model) {
        (None, None) if t.embeddings_api.is_some() => anyhow::bail!(
            "transforms.embeddings_api is set but transforms.embeddings_url and \
             transforms.embeddings_model are not: set them too, or remove it"
        ),
        (None, None) => Ok(None),
        (Some(url), Some(model)) => Ok(Some(EmbedConfig {
            api: match t.embeddings_api.as_deref() {
                None => Api::default(),
                Some(name) => {
                    crate::commands::mcp::api_named(name).context("transforms.embeddings_api")?
                }
            },
            url: url.clone(),
            model: model.clone(),
            timeout: DEFAULT_EMBED_TIMEOUT,
            cache_dir: pith_home()?.join("embeddings"),
        })),
        (Some(_), None) => anyhow::bail!(
            "transforms.embeddings_url is set but transforms.embeddings_model is missing: \
             name the embedding model (e.g. \"nomic-embed-text\")"
        ),
        (None, Some(_)) => anyhow::bail!(
            "transforms.embeddings_model is set but transforms.embeddings_url is missing: \
             give the embedding server's base URL (e.g. \"http://127.0.0.1:11434\")"
        ),
    }
}

/// Whether tool deferral is on: `PITH_DEFER_TOOLS`, else `transforms.defer_tools`, else on.
fn defer_on(config: &Config) -> anyhow::Result<bool> {
    Ok(env::flag(Var::DeferTools)?
        .or(config.transforms.defer_tools)
        .unwrap_or(true))
}

/// Whether pith hides the tool search blocks it caused and restores them later:
/// `PITH_TOOL_SEARCH_ROUND_TRIP`, else `transforms.tool_search_round_trip`, else on.
fn search_round_trip_on(config: &Config) -> anyhow::Result<bool> {
    Ok(env::flag(Var::ToolSearchRoundTrip)?
        .or(config.transforms.tool_search_round_trip)
        .unwrap_or(true))
}

/// Tool output excerpts' options when they are on: `PITH_TRIM_OUTPUTS`, else
/// `proxy.trim_outputs`, else off (a wrong excerpt can cost a correct answer: issue 48 decides
/// the default on its evidence).
fn trim_outputs(
    config: &Config,
) -> anyhow::Result<Option<pith_transform::outputs::OutputsOptions>> {
    let on = env::flag(Var::TrimOutputs)?
        .or(config.proxy.trim_outputs)
        .unwrap_or(false);
    let defaults = pith_transform::outputs::OutputsOptions::default();
    Ok(on.then(|| pith_transform::outputs::OutputsOptions {
        min_chars: config
            .proxy
            .trim_outputs_min_chars
            .unwrap_or(defaults.min_chars),
        excluded_tools: config.proxy.trim_outputs_except.clone().unwrap_or_default(),
        // Set once the plan knows whether the history is recorded.
        originals_kept: false,
    }))
}

/// The held-out share of conversations: `PITH_HOLDOUT`, else `proxy.holdout`, else 0 (none).
/// At most a half: the held-out arm is the comparison, not the product.
fn holdout(config: &Config) -> anyhow::Result<f64> {
    share(
        (Var::Holdout, config.proxy.holdout, "proxy.holdout"),
        0.5,
        "conversations",
        "e.g. 0.1 for a tenth",
    )
}

/// The share of changed requests whose original body the provider counts:
/// `PITH_PROVIDER_COUNTS`, else `proxy.provider_counts`, else 0 (never).
fn provider_counts(config: &Config) -> anyhow::Result<f64> {
    share(
        (
            Var::ProviderCounts,
            config.proxy.provider_counts,
            "proxy.provider_counts",
        ),
        1.0,
        "requests",
        "e.g. 0.1 to have the provider count a tenth of the requests pith changed",
    )
}

/// A share setting: its variable, else its config key's value, else 0; a number from 0 to
/// `max`, of `of`, which `example` illustrates in what a refusal says.
fn share(
    (var, configured, key): (Var, Option<f64>, &str),
    max: f64,
    of: &str,
    example: &str,
) -> anyhow::Result<f64> {
    let (share, source) = match env::text(var) {
        Some(text) => (
            text.trim().parse::<f64>().map_err(|_| {
                anyhow::anyhow!(
                    "{}={text:?} is not a share of {of}; use a number from 0 to {max} \
                     ({example})",
                    var.name()
                )
            })?,
            var.name(),
        ),
        None => (configured.unwrap_or(0.0), key),
    };
    anyhow::ensure!(
        (0.0..=max).contains(&share),
        "{source} = {share} is out of range: a share of {of} from 0 to {max} ({example})"
    );
    Ok(share)
}

/// Whether pins are on: `PITH_PINS`, else `transforms.pins`, else on.
fn pins_on(config: &Config) -> anyhow::Result<bool> {
    Ok(env::flag(Var::Pins)?
        .or(config.transforms.pins)
        .unwrap_or(true))
}
