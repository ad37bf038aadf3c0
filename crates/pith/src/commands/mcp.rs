//! `pith mcp`: the MCP server on stdio. Stdout is protocol only; logs go to stderr
//! (`PITH_LOG`, default `warn`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use pith_prefilter::{Api, PrefilterConfig, RankerKind};
use pith_search::RankPolicy;

use crate::config::{Config, McpConfig, is_model_path};
use crate::env::Var;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workspace root. Default: the nearest ancestor of the current directory holding `.git`
    /// or `.pith`, else the current directory.
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

pub fn run(args: Args, config: &Config) -> anyhow::Result<()> {
    // No colour: the client reads this stderr, not a person.
    crate::logging::init_with("warn", false);
    let workspace = crate::workspace::workspace_from(args.workspace.as_deref())?;
    // Team mode: the workspace's brain (which the hook reads locally) is kept fresh from the
    // team brain in the background.
    if let Some(url) = config.store_url()? {
        crate::team::spawn_brain_sync(url, workspace.root().to_path_buf())
            .context("cannot start the team brain's sync thread")?;
    }
    let options = pith_mcp::ServerOptions {
        workspace,
        prefilter: prefilter_config(&config.mcp)?,
        history: crate::history_settings::HistorySettings::resolve(config)?.mcp_options(),
        origins: crate::config::pith_home()
            .ok()
            .map(|home| pith_brain::origin::Origins::new(&home)),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(pith_mcp::serve_stdio(options))?;
    Ok(())
}

/// `[mcp]` settings, then the environment over them (`PITH_LOCAL_PREFILTER=1` turns ranking on
/// without a config file; `PITH_PREFILTER_RANKER`, `PITH_PREFILTER_API`, `PITH_PREFILTER_URL` (or the older
/// `PITH_OLLAMA_URL`), `PITH_PREFILTER_MODEL`, `PITH_PREFILTER_LOCAL_MODEL`, `PITH_PREFILTER_THRESHOLD`,
/// `PITH_PREFILTER_SHOWN`, `PITH_PREFILTER_TIMEOUT_MS`). Values that cannot mean anything are
/// errors naming the key or variable, not a silent default.
pub(crate) fn prefilter_config(mcp: &McpConfig) -> anyhow::Result<PrefilterConfig> {
    prefilter_config_with(mcp, &|var| crate::env::raw(var))
}

/// The same with the variables read through `raw` (as set, the empty string included: a
/// switch reads empty as off, every other value as unset).
fn prefilter_config_with(
    mcp: &McpConfig,
    raw: &dyn Fn(Var) -> Option<&'static str>,
) -> anyhow::Result<PrefilterConfig> {
    let env = |var: Var| raw(var).filter(|v| !v.trim().is_empty());
    let defaults = PrefilterConfig::default();
    let switch =
        match raw(Var::LocalPrefilter) {
            Some(v) => Some(crate::env::parse_switch(v).with_context(|| {
                format!("PITH_LOCAL_PREFILTER={v:?} is not a switch; use 1 or 0")
            })?),
            None => None,
        };
    let ranker = match (env(Var::PrefilterRanker), mcp.prefilter_ranker.as_deref()) {
        (Some(name), _) => ranker_named(name).context("PITH_PREFILTER_RANKER")?,
        (None, Some(name)) => ranker_named(name).context("mcp.prefilter_ranker")?,
        (None, None) => defaults.ranker,
    };
    let api = match (env(Var::PrefilterApi), mcp.prefilter_api.as_deref()) {
        (Some(name), _) => api_named(name).context("PITH_PREFILTER_API")?,
        (None, Some(name)) => api_named(name).context("mcp.prefilter_api")?,
        (None, None) => defaults.api,
    };
    let number = |var: Var| -> anyhow::Result<Option<u64>> {
        env(var)
            .map(|v| {
                v.trim()
                    .parse::<u64>()
                    .with_context(|| format!("{}={v:?} is not a whole number", var.name()))
            })
            .transpose()
    };
    let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let url = env(Var::PrefilterUrl).or(env(Var::OllamaUrl));
    let config = PrefilterConfig {
        enabled: switch.or(mcp.local_prefilter).unwrap_or(false),
        ranker,
        api,
        url: url
            .map(|u| u.trim().to_owned())
            .or_else(|| mcp.prefilter_url.clone()),
        model: env(Var::PrefilterModel)
            .map(|m| m.trim().to_owned())
            .or_else(|| mcp.model.clone())
            .unwrap_or(defaults.model),
        policy: RankPolicy {
            threshold: number(Var::PrefilterThreshold)?
                .map(size)
                .or(mcp.prefilter_threshold)
                .unwrap_or(defaults.policy.threshold),
            shown: number(Var::PrefilterShown)?
                .map(size)
                .or(mcp.prefilter_shown)
                .unwrap_or(defaults.policy.shown),
        },
        timeout: number(Var::PrefilterTimeoutMs)?
            .or(mcp.prefilter_timeout_ms)
            .map_or(defaults.timeout, Duration::from_millis),
        load_timeout: defaults.load_timeout,
        local_model: match ranker {
            RankerKind::Local => Some(local_model_with(mcp, raw)?),
            _ => None,
        },
    };
    anyhow::ensure!(
        config.policy.shown > 0,
        "mcp.prefilter_shown (or PITH_PREFILTER_SHOWN) must be at least 1"
    );
    Ok(config)
}

/// The model `prefilter_ranker = "local"` uses unless `prefilter_model` names another.
pub(crate) const DEFAULT_MODEL: &str = "minilm";

/// The in-process model's directory: `PITH_PREFILTER_LOCAL_MODEL`, else `[mcp]
/// prefilter_model`, else [`DEFAULT_MODEL`]'s (each as [`model_dir`] reads it). A relative
/// path is refused: the config file's are made absolute against its directory when it is read
/// (`Config::load`), and one from the environment would be read against whatever directory pith
/// runs in, for `pith mcp` and `pith doctor` a project's, whose library pith would then load.
pub(crate) fn local_model(mcp: &McpConfig) -> anyhow::Result<PathBuf> {
    local_model_with(mcp, &|var| crate::env::raw(var))
}

fn local_model_with(
    mcp: &McpConfig,
    raw: &dyn Fn(Var) -> Option<&'static str>,
) -> anyhow::Result<PathBuf> {
    let set = raw(Var::PrefilterLocalModel).filter(|v| !v.trim().is_empty());
    let (name, key) = match (set, mcp.prefilter_model.as_deref()) {
        (Some(v), _) => (v, "PITH_PREFILTER_LOCAL_MODEL"),
        (None, Some(v)) => (v, "mcp.prefilter_model"),
        (None, None) => (DEFAULT_MODEL, "the default model"),
    };
    let dir = model_dir(name).context(key)?;
    anyhow::ensure!(
        !is_model_path(name) || dir.is_absolute(),
        "{key} = {:?} is a relative path: pith would read it against the directory it runs in \
         (for `pith mcp` and `pith doctor`, a project's) and load the library there; give an \
         absolute path, or the name of an installed model (`pith model list`)",
        name.trim()
    );
    Ok(dir)
}

/// The directory a `prefilter_model` value means: a path ([`is_model_path`]) as it is, else the
/// name of an installed model under `$PITH_HOME/models`.
pub(crate) fn model_dir(value: &str) -> anyhow::Result<PathBuf> {
    let value = value.trim();
    anyhow::ensure!(
        !value.is_empty(),
        "the model's name is empty: use a name from `pith model list` or a directory"
    );
    if is_model_path(value) {
        return Ok(PathBuf::from(value));
    }
    Ok(crate::config::pith_home()?.join("models").join(value))
}

/// The ranker called `name` in config: `model`, `lexical` or `local`.
fn ranker_named(name: &str) -> anyhow::Result<RankerKind> {
    RankerKind::from_name(name).with_context(|| {
        format!(
            "{name:?} is not a ranker pith has: use \"model\" (a local model behind \
             prefilter_api), \"lexical\" (no model) or \"local\" (an embedding model in \
             pith's process; `pith model install`)"
        )
    })
}

/// The API called `name` in config: `ollama` or `openai`.
pub(crate) fn api_named(name: &str) -> anyhow::Result<Api> {
    Api::from_name(name).with_context(|| {
        format!("{name:?} is not an API pith speaks: use \"ollama\" or \"openai\"")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &'static [(Var, &'static str)]) -> impl Fn(Var) -> Option<&'static str> {
        move |var| vars.iter().find(|(v, _)| *v == var).map(|(_, text)| *text)
    }

    /// `prefilter_model` is read for the in-process ranker only: a directory as given, the
    /// environment over the file, an empty value refused naming the key; a relative directory
    /// (from the environment, or left relative with no config file to resolve it against) is
    /// refused naming where it came from.
    #[test]
    fn the_in_process_models_directory_comes_from_the_file_or_the_environment() {
        let file = McpConfig {
            prefilter_ranker: Some("local".into()),
            prefilter_model: Some("/home/me/models/mine".into()),
            ..McpConfig::default()
        };
        let read = prefilter_config_with(&file, &with(&[])).unwrap();
        assert_eq!(read.ranker, RankerKind::Local);
        assert_eq!(
            read.local_model,
            Some(PathBuf::from("/home/me/models/mine"))
        );
        let over = prefilter_config_with(
            &file,
            &with(&[(Var::PrefilterLocalModel, "/srv/models/minilm")]),
        )
        .unwrap();
        assert_eq!(over.local_model, Some(PathBuf::from("/srv/models/minilm")));
        let lexical = prefilter_config_with(&file, &with(&[(Var::PrefilterRanker, "lexical")]));
        assert_eq!(lexical.unwrap().local_model, None);
        let relative =
            prefilter_config_with(&file, &with(&[(Var::PrefilterLocalModel, "./models/mine")]))
                .unwrap_err();
        assert!(
            format!("{relative:#}")
                .contains("PITH_PREFILTER_LOCAL_MODEL = \"./models/mine\" is a relative path"),
            "{relative:#}"
        );
        let unresolved = McpConfig {
            prefilter_ranker: Some("local".into()),
            prefilter_model: Some("models/mine".into()),
            ..McpConfig::default()
        };
        let err = prefilter_config_with(&unresolved, &with(&[])).unwrap_err();
        assert!(
            format!("{err:#}").contains("mcp.prefilter_model"),
            "{err:#}"
        );
        let empty = McpConfig {
            prefilter_model: Some(" ".into()),
            ..file
        };
        let err = prefilter_config_with(&empty, &with(&[])).unwrap_err();
        assert!(
            format!("{err:#}").contains("mcp.prefilter_model"),
            "{err:#}"
        );
    }

    #[test]
    fn the_environment_overrides_the_config_file_and_bad_values_are_errors() {
        let config = prefilter_config_with(
            &McpConfig::default(),
            &with(&[
                (Var::LocalPrefilter, "1"),
                (Var::PrefilterApi, "openai"),
                (Var::OllamaUrl, "http://127.0.0.1:9"),
                (Var::PrefilterModel, "tiny:1b"),
                (Var::PrefilterThreshold, "12"),
                (Var::PrefilterShown, "7"),
                (Var::PrefilterTimeoutMs, "250"),
            ]),
        )
        .unwrap();
        assert!(config.enabled);
        assert_eq!(config.api, pith_prefilter::Api::OpenAi);
        assert_eq!(config.url.as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(config.model, "tiny:1b");
        assert_eq!((config.policy.threshold, config.policy.shown), (12, 7));
        assert_eq!(config.timeout, Duration::from_millis(250));
        let newer = with(&[
            (Var::PrefilterUrl, "http://127.0.0.1:7"),
            (Var::OllamaUrl, "http://127.0.0.1:9"),
        ]);
        let config = prefilter_config_with(&McpConfig::default(), &newer).unwrap();
        assert_eq!(config.base_url(), "http://127.0.0.1:7");
        let file = McpConfig {
            local_prefilter: Some(true),
            prefilter_threshold: Some(7),
            ..McpConfig::default()
        };
        let off = prefilter_config_with(&file, &with(&[(Var::LocalPrefilter, "off")])).unwrap();
        assert!(!off.enabled);
        assert_eq!(off.policy.threshold, 7);
        // Set and empty, a switch is off (as every switch of pith's reads it).
        let empty = prefilter_config_with(&file, &with(&[(Var::LocalPrefilter, "")])).unwrap();
        assert!(!empty.enabled);
        // The ranker: a model by default, the lexical ranking by name, from the file or the
        // environment over it.
        assert_eq!(empty.ranker, RankerKind::Model);
        let lexical = McpConfig {
            prefilter_ranker: Some("lexical".into()),
            ..McpConfig::default()
        };
        let read = prefilter_config_with(&lexical, &with(&[])).unwrap();
        assert_eq!(read.ranker, RankerKind::Lexical);
        let over = prefilter_config_with(&lexical, &with(&[(Var::PrefilterRanker, "model")]));
        assert_eq!(over.unwrap().ranker, RankerKind::Model);
        let err = prefilter_config_with(
            &McpConfig {
                prefilter_ranker: Some("bm25".into()),
                ..McpConfig::default()
            },
            &with(&[]),
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("mcp.prefilter_ranker")
                && format!("{err:#}").contains("\"lexical\""),
            "{err:#}"
        );
        for (var, junk) in [
            (Var::LocalPrefilter, "maybe"),
            (Var::PrefilterRanker, "junk"),
            (Var::PrefilterApi, "junk"),
            (Var::PrefilterShown, "many"),
        ] {
            let vars: &'static [(Var, &'static str)] = Box::leak(Box::new([(var, junk)]));
            let err = prefilter_config_with(&McpConfig::default(), &with(vars)).unwrap_err();
            assert!(format!("{err:#}").contains(var.name()), "{err:#}");
        }
    }
}
