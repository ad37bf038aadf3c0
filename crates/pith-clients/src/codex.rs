//! Codex (`codex`, 0.169.0).
//!
//! - Settings: `$CODEX_HOME/config.toml` (default `~/.codex`; an empty `CODEX_HOME` counts as
//!   unset), this person's for every project. MCP servers are `[mcp_servers.<name>]` tables;
//!   hooks are in `$CODEX_HOME/hooks.json` when that file exists, else inline `[hooks]` in
//!   `config.toml` (Codex reads both and warns when one layer has both: pith uses the one in
//!   use). Codex runs a new hook only once the person trusts it in `/hooks`. A project's
//!   `.codex/config.toml` (and hooks there) loads only in a project marked trusted, so pith
//!   registers in the user's config only: the one scope.
//! - `pith run`: `-c key=value` overrides, which win over `config.toml`: `openai_base_url` for
//!   the built-in `openai` provider, `model_providers.<id>.base_url` for a provider of the
//!   person's own (the one `model_provider` names, on the command line, in the chosen profile
//!   or in `config.toml`).
//! - Session files: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`.
//! - Its harness adds `# AGENTS.md instructions for <dir>` and `<environment_context>` messages.

use std::ffi::OsString;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::registration::{HOOK_TIMEOUT_SECS, key, pith_command};
use crate::wiring::trimmed;
use crate::{
    Files, HookEvent, HookSetting, HookTool, McpSetting, Places, Profile, Registration, RunContext,
    Scope, ScopeError, Setting, Wiring,
};

/// Where Codex signed in with ChatGPT sends its model requests, under the ChatGPT backend's
/// origin (Codex's `CHATGPT_CODEX_BASE_URL` is `https://chatgpt.com/backend-api/codex`): the
/// same Responses wire, at `<this>/responses`.
pub const CHATGPT_CODEX_PATH: &str = "/backend-api/codex";

/// The path on the proxy `pith run` points such a Codex at; the proxy sends what arrives under
/// it to its ChatGPT upstream under [`CHATGPT_CODEX_PATH`]. Not the backend's own path: for a
/// base URL whose path is that one, Codex 0.169.0 first asks `chatgpt_base_url` for the
/// workspace's backend origin (`/wham/accounts/check`) and stops when that fails; for any
/// other it speaks to the base URL as it is (both seen with the real binary on loopback).
pub const PITH_CHATGPT_PATH: &str = "/chatgpt";

/// The ChatGPT backend's path for a request on the proxy under [`PITH_CHATGPT_PATH`]
/// (`/chatgpt/responses?x` is `/backend-api/codex/responses?x`); `None` for any other.
pub fn chatgpt_backend_path(path_and_query: &str) -> Option<String> {
    let rest = path_and_query.strip_prefix(PITH_CHATGPT_PATH)?;
    (rest.is_empty() || rest.starts_with('/') || rest.starts_with('?'))
        .then(|| format!("{CHATGPT_CODEX_PATH}{rest}"))
}

/// How Codex opens the message that inlines a project's AGENTS.md.
pub const AGENTS_MD_PREFIX: &str = "# AGENTS.md instructions for ";

/// How Codex opens the instructions block of its AGENTS.md message: harness text through to
/// its end.
pub const INSTRUCTIONS_OPEN: &str = "<INSTRUCTIONS>";

/// Shell commands run as `Bash`, edits as `apply_patch`; Codex has no failure event.
const HOOK_EVENTS: &[HookEvent] = &[HookEvent {
    event: "PostToolUse",
    tools: &[("Bash", HookTool::Shell), ("apply_patch", HookTool::Patch)],
}];

/// How the user messages of Codex 0.169.0's side calls open (its source, checked in the
/// binary): the local compaction's appended prompt (providers without remote compaction, in
/// `exec` too), the guardian's review of an action (a child thread of the session), and the
/// memory writer's first phase. Its prewarm is no side call (a warm-up, recorded as none).
pub const SIDE_CALL_OPENINGS: &[&str] = &[
    "You are performing a CONTEXT CHECKPOINT COMPACTION.",
    "The following is the Codex agent history whose request action you are assessing.",
    "Analyze this rollout and produce JSON with `raw_memory`",
];

/// Codex's facts that are plain data.
pub const PROFILE: Profile = Profile {
    name: "codex",
    display_name: "Codex",
    program: "codex",
    user_agent_product: "codex",
    user_agent_is_prefix: true,
    session_header: "session-id",
    hook_events: HOOK_EVENTS,
    harness_openings: &[
        "<environment_context>",
        "<user_instructions>",
        INSTRUCTIONS_OPEN,
    ],
    harness_prefixes: &[AGENTS_MD_PREFIX],
    side_call_openings: SIDE_CALL_OPENINGS,
    own_tool_search: None,
    default_scope: Scope::User,
    scopes: &[Scope::User],
    base_url_env: Some("OPENAI_BASE_URL"),
};

/// Codex's built-in providers that are not the OpenAI API (local model servers).
const LOCAL_PROVIDERS: &[&str] = &["oss", "ollama", "lmstudio"];

/// `$CODEX_HOME`, else `~/.codex`.
pub fn home(places: &Places) -> Option<PathBuf> {
    places
        .codex_home
        .clone()
        .or_else(|| places.home.as_ref().map(|h| h.join(".codex")))
}

fn home_or_err(places: &Places) -> Result<PathBuf, ScopeError> {
    home(places).ok_or_else(|| ScopeError("cannot find your home directory; set CODEX_HOME".into()))
}

pub(crate) fn registration(
    scope: Scope,
    places: &Places,
    files: &dyn Files,
    command: &str,
) -> Result<Registration, ScopeError> {
    if scope != Scope::User {
        return Err(ScopeError(format!(
            "pith registers with Codex in your own config only (--scope user, \
             $CODEX_HOME/config.toml), not --scope {}: Codex starts the server in every \
             project and finds the workspace from where it runs",
            scope.name()
        )));
    }
    let home = home_or_err(places)?;
    let config = home.join("config.toml");
    let hooks_json = home.join("hooks.json");
    let hook_file = if files.exists(&hooks_json) {
        hooks_json.clone()
    } else {
        config.clone()
    };
    Ok(Registration {
        scope,
        mcp: McpSetting {
            file: config.clone(),
            section: key(&["mcp_servers"]),
            entry: json!({"command": command, "args": ["mcp"]}),
        },
        hooks: Some(HookSetting {
            file: hook_file,
            events: HOOK_EVENTS,
            command: pith_command(command, "hook"),
            timeout_secs: HOOK_TIMEOUT_SECS,
        }),
        status_line: None,
        git_ignored: None,
        // The hooks may be in either file, whichever was in use then.
        files: vec![config, hooks_json],
        next: "Codex starts `pith mcp` in every project; the workspace is found from where \
               Codex runs. Codex runs a new hook only once you trust it: open Codex and approve \
               `pith hook` in /hooks."
            .to_owned(),
    })
}

/// `openai_base_url` for the built-in provider; a provider of the person's own keeps its
/// `base_url` (pith never rewrites a setting of theirs), and is said.
pub(crate) fn proxy_settings(
    registration: &Registration,
    places: &Places,
    files: &dyn Files,
    origin: &str,
) -> Result<Vec<Setting>, String> {
    let v1 = format!("{origin}/v1");
    match provider(&[], places, files, &|_| None) {
        Ok(p) if p.id != "openai" => Err(format!(
            "Codex uses its model provider `{}` (base_url {}); pith leaves it: point that \
             base_url at {v1} yourself, or use `pith run codex`.",
            p.id, p.base_url
        )),
        _ => Ok(vec![Setting {
            file: registration.mcp.file.clone(),
            key: key(&["openai_base_url"]),
            value: Value::String(v1),
        }]),
    }
}

/// `openai_base_url` and each `model_providers.<id>.base_url` in `config.toml`.
pub(crate) fn base_urls(places: &Places, files: &dyn Files) -> Vec<(String, String)> {
    let Some(file) = home(places).map(|h| h.join("config.toml")) else {
        return vec![];
    };
    let Some(doc) = files.read(&file) else {
        return vec![];
    };
    let mut out = Vec::new();
    if let Some(url) = doc["openai_base_url"].as_str() {
        out.push((
            format!("openai_base_url in {}", file.display()),
            url.to_owned(),
        ));
    }
    for (id, p) in doc["model_providers"].as_object().into_iter().flatten() {
        if let Some(url) = p["base_url"].as_str() {
            out.push((
                format!("model_providers.{id}.base_url in {}", file.display()),
                url.to_owned(),
            ));
        }
    }
    out
}

/// The model provider a Codex run uses, and where it sends requests.
#[derive(Debug, PartialEq)]
pub struct Provider {
    /// Its id (`openai`, or a `model_providers` key).
    pub id: String,
    /// Its base URL (with `/v1`), when one is set.
    pub base_url: String,
    /// Codex signs in with ChatGPT: without a base URL of its own it goes to the ChatGPT
    /// backend (`https://chatgpt.com/backend-api/codex`), with the person's ChatGPT tokens.
    pub chatgpt: bool,
}

/// Which provider a Codex run with `args` uses: `-c model_provider=...` on the command line,
/// else the chosen profile's (`--profile`, or `profile` in config.toml), else config.toml's
/// `model_provider`, else `openai`.
pub fn provider(
    args: &[OsString],
    places: &Places,
    files: &dyn Files,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Provider, String> {
    let home = home(places).ok_or("cannot find your home directory; set CODEX_HOME")?;
    let file = home.join("config.toml");
    let config = match files.read(&file) {
        Some(v) => v,
        None if files.exists(&file) => return Err(format!("{} does not parse", file.display())),
        None => json!({}),
    };
    let overrides = overrides(args);
    let cli = |key: &str| {
        overrides
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let profile = flag(args, &["--profile", "-p"]).or_else(|| text(&config["profile"]));
    let from_profile = profile
        .as_deref()
        .and_then(|p| text(&config["profiles"][p]["model_provider"]));
    let id = cli("model_provider")
        .or(from_profile)
        .or_else(|| text(&config["model_provider"]))
        .unwrap_or_else(|| "openai".to_owned());
    if id == "openai" {
        let auth = files.read(&home.join("auth.json"));
        let api_key = env("OPENAI_API_KEY").is_some() || env("CODEX_API_KEY").is_some();
        let chatgpt = !api_key && auth.as_ref().is_some_and(signs_in_with_chatgpt);
        let base_url = cli("openai_base_url")
            .or_else(|| text(&config["openai_base_url"]))
            .or_else(|| env("OPENAI_BASE_URL"));
        return Ok(Provider {
            id,
            base_url: base_url.unwrap_or_default(),
            chatgpt,
        });
    }
    let base_url = cli(&format!("model_providers.{id}.base_url"))
        .or_else(|| text(&config["model_providers"][&id]["base_url"]));
    match base_url {
        Some(base_url) => Ok(Provider {
            id,
            base_url,
            chatgpt: false,
        }),
        None if LOCAL_PROVIDERS.contains(&id.as_str()) => Err(format!(
            "codex's model provider `{id}` is a local model server, not a provider pith proxies"
        )),
        None => Err(format!(
            "codex's model provider `{id}` has no base_url in {}",
            file.display()
        )),
    }
}

/// Whether Codex's stored login (`auth.json`) is a ChatGPT one (tokens and no API key).
fn signs_in_with_chatgpt(auth: &Value) -> bool {
    auth["auth_mode"] == "chatgpt"
        || (auth["tokens"].is_object() && !auth["OPENAI_API_KEY"].is_string())
}

/// `-c` overrides pointing the run's provider at the proxy.
pub(crate) fn wire(ctx: &RunContext<'_>) -> Result<Wiring, String> {
    let mut provider = provider(ctx.args, ctx.places, ctx.files, ctx.env)?;
    // Signed in with ChatGPT, Codex speaks the same Responses API to the ChatGPT backend
    // (`{base}/responses`, over HTTP and WebSocket, its tokens in `Authorization` and
    // `ChatGPT-Account-ID`), and `openai_base_url` moves it: the proxy takes it under the
    // backend's own path and sends it to its ChatGPT upstream.
    let (path, upstream, default) = if provider.chatgpt {
        let Some(upstream) = ctx.upstream_chatgpt else {
            return Err(format!(
                "codex signs in with ChatGPT, and the proxy on {} is a pith too old to send the \
                 ChatGPT backend's traffic on (stop it; `pith run` starts a new one)",
                ctx.origin.trim_start_matches("http://")
            ));
        };
        (
            (CHATGPT_CODEX_PATH, PITH_CHATGPT_PATH),
            Some(upstream),
            ctx.default_chatgpt,
        )
    } else {
        (("/v1", "/v1"), ctx.upstream_openai, ctx.default_openai)
    };
    // Where Codex goes on its own, and where on the proxy it is pointed instead.
    let (own_path, proxy_path) = path;
    if provider.base_url.is_empty() {
        provider.base_url = format!("{}{own_path}", trimmed(default));
    }
    let v1 = format!("{}{proxy_path}", ctx.origin);
    if let Some(upstream) = upstream {
        let expected = format!("{}{own_path}", trimmed(upstream));
        if trimmed(&provider.base_url) != expected && trimmed(&provider.base_url) != v1 {
            return Err(ctx.mismatch(
                &format!("codex's model provider `{}`", provider.id),
                &provider.base_url,
                upstream,
            ));
        }
    }
    let key = if provider.id == "openai" {
        "openai_base_url".to_owned()
    } else {
        format!("model_providers.{}.base_url", provider.id)
    };
    let mut args: Vec<OsString> = vec!["-c".into(), format!("{key}={}", json!(v1)).into()];
    if let Some((header, token)) = ctx.token {
        args.push("-c".into());
        args.push(
            format!(
                "model_providers.{}.http_headers.{header}={}",
                provider.id,
                json!(token)
            )
            .into(),
        );
    }
    Ok(Wiring { env: vec![], args })
}

/// The value after the first of `names` in `args` (`--profile p` or `--profile=p`).
fn flag(args: &[OsString], names: &[&str]) -> Option<String> {
    let mut it = args.iter().map(|a| a.to_string_lossy());
    while let Some(arg) = it.next() {
        if arg == "--" {
            return None;
        }
        for name in names {
            if arg == *name {
                return it.next().map(|v| v.into_owned());
            }
            if let Some(v) = arg.strip_prefix(&format!("{name}=")) {
                return Some(v.to_owned());
            }
        }
    }
    None
}

/// Codex's `-c key=value` / `--config key=value` overrides in `args`. A value is read as
/// Codex reads it, as TOML: a quoted string is its content, anything else (a bare word) the
/// text as it is.
fn overrides(args: &[OsString]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut it = args.iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(arg) = it.next() {
        if arg == "--" {
            break;
        }
        let pair = if arg == "-c" || arg == "--config" {
            it.next()
        } else {
            arg.strip_prefix("--config=").map(str::to_owned)
        };
        let Some((key, value)) = pair.as_deref().and_then(|p| p.split_once('=')) else {
            continue;
        };
        let value = value.trim();
        let value = if value.starts_with('"') {
            serde_json::from_str::<String>(value).unwrap_or_else(|_| value.to_owned())
        } else if let Some(literal) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
            literal.to_owned()
        } else {
            value.to_owned()
        };
        out.push((key.trim().to_owned(), value));
    }
    out
}

/// The rules file a `# AGENTS.md instructions for /p` line names.
pub(crate) fn rules_file_named(line: &str) -> Option<String> {
    let dir = line.strip_prefix(AGENTS_MD_PREFIX)?;
    let dir = dir.trim().trim_end_matches('/');
    Some(format!("{dir}/AGENTS.md")).filter(|_| !dir.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_files::Disk;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn codex_uses_the_provider_the_command_line_the_profile_or_the_config_names() {
        let places = Places {
            codex_home: Some("/c".into()),
            ..Places::default()
        };
        let disk = Disk::of([(
            PathBuf::from("/c/config.toml"),
            json!({
                "model_provider": "mine",
                "model_providers": {"mine": {"base_url": "http://m/v1"}, "other": {"base_url": "http://o/v1"}},
                "profiles": {"work": {"model_provider": "other"}}
            }),
        )]);
        let provider_of = |args: &[&str]| provider(&os(args), &places, &disk, &|_| None);
        assert_eq!(
            provider_of(&["exec", "hi"]).unwrap(),
            Provider {
                id: "mine".into(),
                base_url: "http://m/v1".into(),
                chatgpt: false,
            }
        );
        assert_eq!(provider_of(&["--profile", "work"]).unwrap().id, "other");
        assert_eq!(
            provider_of(&["-c", "model_provider=\"other\""]).unwrap().id,
            "other"
        );
        assert_eq!(
            provider_of(&["-c", "model_provider='other'"]).unwrap().id,
            "other"
        );
        assert_eq!(
            provider_of(&["--config=model_provider=other"]).unwrap().id,
            "other"
        );
        // After `--` it is the prompt, not a flag.
        assert_eq!(
            provider_of(&["--", "-c", "model_provider=other"])
                .unwrap()
                .id,
            "mine"
        );
        assert!(
            provider_of(&["-c", "model_provider=ollama"])
                .unwrap_err()
                .contains("local model server")
        );
        let empty = Disk::default();
        let openai = provider(&[], &places, &empty, &|_| None).unwrap();
        assert_eq!(openai.id, "openai");
        assert!(!openai.chatgpt);
        // A ChatGPT login is told, an API key in the environment wins over it.
        let chatgpt = Disk::of([(
            PathBuf::from("/c/auth.json"),
            json!({"tokens": {"id_token": "x"}}),
        )]);
        assert!(provider(&[], &places, &chatgpt, &|_| None).unwrap().chatgpt);
        let key = |k: &str| (k == "OPENAI_API_KEY").then(|| "sk".to_owned());
        assert!(!provider(&[], &places, &chatgpt, &key).unwrap().chatgpt);
    }

    #[test]
    fn hooks_go_in_the_file_codex_uses() {
        let places = Places {
            codex_home: Some("/c".into()),
            ..Places::default()
        };
        let none = Disk::default();
        let r = registration(Scope::User, &places, &none, "pith").unwrap();
        assert_eq!(r.hooks.unwrap().file, PathBuf::from("/c/config.toml"));
        let json = Disk::of([(PathBuf::from("/c/hooks.json"), json!({}))]);
        let r = registration(Scope::User, &places, &json, "pith").unwrap();
        assert_eq!(r.hooks.unwrap().file, PathBuf::from("/c/hooks.json"));
        assert!(registration(Scope::Project, &places, &none, "pith").is_err());
    }
}
