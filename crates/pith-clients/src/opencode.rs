//! OpenCode (`opencode`, 1.18.33).
//!
//! - Settings: the global config `$XDG_CONFIG_HOME/opencode/opencode.jsonc` (else
//!   `opencode.json`; `~/.config/opencode` without XDG_CONFIG_HOME), this person's for every
//!   project, and the project's `opencode.jsonc` (else `opencode.json`), committed. OpenCode
//!   reads both names and lets `opencode.jsonc` win, so that is where an entry counts (OpenCode
//!   creates that file on its first start). The project's file is searched for from the working
//!   directory up to the git root. It has no local scope: no per-person project file exists.
//! - MCP servers: the `mcp` object, `{"type": "local", "command": [...], "enabled": true}`.
//! - No command hooks and no status line.
//! - `pith run`: `OPENCODE_CONFIG_CONTENT`, inline JSON it merges after every config file; pith
//!   adds `provider.anthropic.options.baseURL` and `provider.openai.options.baseURL` (with
//!   `/v1`) to whatever the variable already holds.
//! - Its system prompt inlines a rules file after `Instructions from: <path>`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::registration::key;
use crate::{
    Files, McpSetting, Places, Profile, Registration, RunContext, Scope, ScopeError, Setting,
    Wiring,
};

/// How OpenCode's title call opens its user message: a request it sends beside the first turn
/// (no tools, its own system prompt, "You are a title generator"), with the session's id.
pub const TITLE_CALL: &str = "Generate a title for this conversation:";

/// OpenCode's facts that are plain data.
pub const PROFILE: Profile = Profile {
    name: "opencode",
    display_name: "OpenCode",
    program: "opencode",
    user_agent_product: "opencode",
    user_agent_is_prefix: false,
    session_header: "x-session-id",
    hook_events: &[],
    harness_openings: &[],
    harness_prefixes: &[],
    side_call_openings: &[TITLE_CALL],
    own_tool_search: None,
    default_scope: Scope::User,
    scopes: &[Scope::User, Scope::Project],
    base_url_env: None,
};

/// The providers `pith run` and `pith setup --proxy` point at the proxy.
const PROVIDERS: [&str; 2] = ["anthropic", "openai"];

/// OpenCode's global config directory: `$XDG_CONFIG_HOME/opencode`, else `~/.config/opencode`.
pub fn config_dir(places: &Places) -> Option<PathBuf> {
    places
        .xdg_config_home
        .clone()
        .or_else(|| places.home.as_ref().map(|h| h.join(".config")))
        .map(|d| d.join("opencode"))
}

/// OpenCode's session database (SQLite, in WAL mode): `$OPENCODE_DB`, else
/// `$XDG_DATA_HOME/opencode/opencode.db`, else `~/.local/share/opencode/opencode.db`. Its
/// `session` rows (the `id` is what OpenCode sends as `x-session-id`; the title is a column,
/// not a message), `message` rows (`data`: JSON with the `role`) and `part` rows (`data`: JSON,
/// `type` text, reasoning, tool with its `state`, step and file markers; a text part OpenCode
/// made itself has `synthetic: true`), each keyed by its own `id` column (seen in 1.18.33's
/// database; older versions kept JSON files under `storage/`, which pith does not read).
pub fn database(places: &Places) -> Option<PathBuf> {
    if let Some(db) = &places.opencode_db {
        return Some(db.clone());
    }
    places
        .xdg_data_home
        .clone()
        .or_else(|| places.home.as_ref().map(|h| h.join(".local").join("share")))
        .map(|d| d.join("opencode").join("opencode.db"))
}

/// `opencode.jsonc` in `dir` when it exists, else `opencode.json`.
fn config_in(dir: &Path, files: &dyn Files) -> PathBuf {
    let jsonc = dir.join("opencode.jsonc");
    if files.exists(&jsonc) {
        jsonc
    } else {
        dir.join("opencode.json")
    }
}

/// The config file of `scope`.
pub fn config_file(
    scope: Scope,
    places: &Places,
    files: &dyn Files,
) -> Result<PathBuf, ScopeError> {
    match scope {
        Scope::User => config_dir(places)
            .map(|d| config_in(&d, files))
            .ok_or_else(|| {
                ScopeError("cannot find your home directory; set HOME or XDG_CONFIG_HOME".into())
            }),
        Scope::Project => places
            .project
            .as_deref()
            .map(|p| config_in(p, files))
            .ok_or_else(|| ScopeError("OpenCode's project scope needs a project".into())),
        Scope::Local => Err(ScopeError(
            "OpenCode has no local scope: its settings are yours (--scope user, \
             ~/.config/opencode) or the project's shared opencode.json (--scope project)"
                .into(),
        )),
    }
}

pub(crate) fn registration(
    scope: Scope,
    places: &Places,
    files: &dyn Files,
    command: &str,
) -> Result<Registration, ScopeError> {
    let file = config_file(scope, places, files)?;
    let next = match scope {
        Scope::Project => "OpenCode starts `pith mcp` the next time it runs in this project.",
        _ => {
            "OpenCode starts `pith mcp` in every project from its next start; the workspace is \
             found from where OpenCode runs."
        }
    };
    Ok(Registration {
        scope,
        mcp: McpSetting {
            file: file.clone(),
            section: key(&["mcp"]),
            entry: json!({"type": "local", "command": [command, "mcp"], "enabled": true}),
        },
        hooks: None,
        status_line: None,
        files: vec![file],
        next: next.to_owned(),
        git_ignored: None,
    })
}

/// The command array of an OpenCode MCP entry.
pub(crate) fn mcp_argv(entry: &Value) -> Option<Vec<String>> {
    entry
        .get("command")?
        .as_array()?
        .iter()
        .map(|w| w.as_str().map(str::to_owned))
        .collect()
}

/// Both providers' `options.baseURL` in the scope's config.
pub(crate) fn proxy_settings(registration: &Registration, origin: &str) -> Vec<Setting> {
    PROVIDERS
        .iter()
        .map(|provider| Setting {
            file: registration.mcp.file.clone(),
            key: key(&["provider", provider, "options", "baseURL"]),
            value: Value::String(format!("{origin}/v1")),
        })
        .collect()
}

/// `provider.<id>.options.baseURL` in each config file.
pub(crate) fn base_urls(places: &Places, files: &dyn Files) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for scope in PROFILE.scopes {
        let Ok(file) = config_file(*scope, places, files) else {
            continue;
        };
        let Some(doc) = files.read(&file) else {
            continue;
        };
        for (id, p) in doc["provider"].as_object().into_iter().flatten() {
            if let Some(url) = p["options"]["baseURL"].as_str() {
                out.push((
                    format!("provider.{id}.options.baseURL in {}", file.display()),
                    url.to_owned(),
                ));
            }
        }
    }
    out
}

/// `OPENCODE_CONFIG_CONTENT` for one process.
pub(crate) fn wire(ctx: &RunContext<'_>) -> Result<Wiring, String> {
    let mut content = match (ctx.env)("OPENCODE_CONFIG_CONTENT") {
        Some(text) if !text.trim().is_empty() => match serde_json::from_str::<Value>(&text) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                return Err(
                    "OPENCODE_CONFIG_CONTENT is set but is not a JSON object pith can \
                            add its base URL to"
                        .to_owned(),
                );
            }
        },
        _ => json!({}),
    };
    for provider in PROVIDERS {
        let options = &mut content["provider"][provider]["options"];
        options["baseURL"] = json!(ctx.v1());
        if let Some((header, token)) = ctx.token {
            options["headers"][header] = json!(token);
        }
    }
    Ok(Wiring {
        env: vec![("OPENCODE_CONFIG_CONTENT", content.to_string())],
        args: vec![],
    })
}

/// The rules file an `Instructions from: /p/AGENTS.md` line names.
pub(crate) fn rules_file_named(line: &str) -> Option<String> {
    let rest = line.strip_prefix("Instructions from: ")?;
    Some(rest.trim().to_owned()).filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_files::Disk;

    #[test]
    fn the_user_scope_is_the_global_config_and_jsonc_wins() {
        let places = Places {
            home: Some("/h".into()),
            project: Some("/w".into()),
            ..Places::default()
        };
        let none = Disk::default();
        let user = registration(Scope::User, &places, &none, "pith").unwrap();
        assert_eq!(
            user.mcp.file,
            PathBuf::from("/h/.config/opencode/opencode.json")
        );
        let with_jsonc = Disk::of([(
            PathBuf::from("/w/opencode.jsonc"),
            json!({"provider": {"openai": {"options": {"baseURL": "http://x/v1"}}}}),
        )]);
        let project = registration(Scope::Project, &places, &with_jsonc, "pith").unwrap();
        assert_eq!(project.mcp.file, PathBuf::from("/w/opencode.jsonc"));
        assert_eq!(
            mcp_argv(&project.mcp.entry),
            Some(vec!["pith".to_owned(), "mcp".to_owned()])
        );
        assert!(registration(Scope::Local, &places, &none, "pith").is_err());
        assert_eq!(
            base_urls(&places, &with_jsonc),
            vec![(
                "provider.openai.options.baseURL in /w/opencode.jsonc".to_owned(),
                "http://x/v1".to_owned()
            )]
        );
    }
}
