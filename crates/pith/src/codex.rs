//! What pith knows about Codex that `pith run`, `pith setup` and `pith doctor` share: where
//! its home is, and which model provider a run uses and where that provider sends requests (its
//! `config.toml`, the chosen profile, and the `-c key=value` overrides of a command line).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

/// `$CODEX_HOME`, else `~/.codex`.
pub fn home() -> anyhow::Result<PathBuf> {
    Ok(
        match std::env::var_os("CODEX_HOME").filter(|v| !v.is_empty()) {
            Some(h) => PathBuf::from(h),
            None => dirs::home_dir()
                .context("cannot find your home directory; set CODEX_HOME")?
                .join(".codex"),
        },
    )
}

/// The model provider a Codex run uses, and where it sends requests.
#[derive(Debug, PartialEq)]
pub struct Provider {
    pub id: String,
    pub base_url: String,
}

/// Codex's built-in providers that are not the OpenAI API (local model servers).
const LOCAL_PROVIDERS: &[&str] = &["oss", "ollama", "lmstudio"];

/// Which provider a Codex run with `args` uses: `-c model_provider=...` on the command line,
/// else the chosen profile's (`--profile`, or `profile` in config.toml), else config.toml's
/// `model_provider`, else `openai`.
pub fn provider(args: &[OsString], home: &Path) -> Result<Provider, String> {
    let config: toml::Table = match std::fs::read_to_string(home.join("config.toml")) {
        Ok(text) => toml::from_str(&text).map_err(|e| {
            format!(
                "{} does not parse ({})",
                home.join("config.toml").display(),
                e.message()
            )
        })?,
        Err(_) => toml::Table::new(),
    };
    let overrides = overrides(args);
    let cli = |key: &str| {
        overrides
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let profile = flag(args, &["--profile", "-p"]).or_else(|| {
        config
            .get("profile")
            .and_then(|p| p.as_str())
            .map(str::to_owned)
    });
    let from_profile = profile.as_deref().and_then(|p| {
        config
            .get("profiles")
            .and_then(|ps| ps.get(p))
            .and_then(|p| p.get("model_provider"))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    });
    let id = cli("model_provider")
        .or(from_profile)
        .or_else(|| {
            config
                .get("model_provider")
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "openai".to_owned());
    if id == "openai" {
        if signs_in_with_chatgpt(home) {
            return Err(
                "codex signs in with ChatGPT, whose backend pith does not proxy (pith proxies the \
                 OpenAI API: sign in with an API key)"
                    .to_owned(),
            );
        }
        let base_url = cli("openai_base_url")
            .or_else(|| {
                config
                    .get("openai_base_url")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
            })
            .or_else(|| {
                std::env::var("OPENAI_BASE_URL")
                    .ok()
                    .filter(|v| !v.is_empty())
            })
            .unwrap_or_else(|| format!("{}/v1", pith_proxy::upstream::OPENAI_DEFAULT));
        return Ok(Provider { id, base_url });
    }
    let base_url = cli(&format!("model_providers.{id}.base_url")).or_else(|| {
        config
            .get("model_providers")
            .and_then(|ps| ps.get(&id))
            .and_then(|p| p.get("base_url"))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    });
    match base_url {
        Some(base_url) => Ok(Provider { id, base_url }),
        None if LOCAL_PROVIDERS.contains(&id.as_str()) => Err(format!(
            "codex's model provider `{id}` is a local model server, not a provider pith proxies"
        )),
        None => Err(format!(
            "codex's model provider `{id}` has no base_url in {}",
            home.join("config.toml").display()
        )),
    }
}

/// Whether Codex's stored login is a ChatGPT one (`auth.json` with tokens and no API key).
fn signs_in_with_chatgpt(home: &Path) -> bool {
    if std::env::var_os("OPENAI_API_KEY").is_some() || std::env::var_os("CODEX_API_KEY").is_some() {
        return false;
    }
    let Ok(text) = std::fs::read_to_string(home.join("auth.json")) else {
        return false;
    };
    let Ok(auth) = serde_json::from_str::<Value>(&text) else {
        return false;
    };
    auth["auth_mode"] == "chatgpt"
        || (auth["tokens"].is_object() && !auth["OPENAI_API_KEY"].is_string())
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

/// Codex's `-c key=value` / `--config key=value` overrides in `args`, values read as TOML
/// (a bare word is a string, as Codex reads it).
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
        let Some(pair) = pair else { continue };
        let Some((key, value)) = pair.split_once('=') else {
            continue;
        };
        let value = value.trim();
        let value = toml::from_str::<toml::Table>(&format!("v = {value}"))
            .ok()
            .and_then(|t| t.get("v").and_then(|v| v.as_str()).map(str::to_owned))
            .unwrap_or_else(|| value.to_owned());
        out.push((key.trim().to_owned(), value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn codex_uses_the_provider_the_command_line_the_profile_or_the_config_names() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join("config.toml"),
            "model_provider = \"mine\"\n[model_providers.mine]\nbase_url = \"http://m/v1\"\n\
             [model_providers.other]\nbase_url = \"http://o/v1\"\n\
             [profiles.work]\nmodel_provider = \"other\"\n",
        )
        .unwrap();
        let provider_of = |args: &[&str]| provider(&os(args), home.path());
        assert_eq!(
            provider_of(&["exec", "hi"]).unwrap(),
            Provider {
                id: "mine".into(),
                base_url: "http://m/v1".into()
            }
        );
        assert_eq!(provider_of(&["--profile", "work"]).unwrap().id, "other");
        assert_eq!(
            provider_of(&["-c", "model_provider=\"other\""]).unwrap().id,
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
        let empty = tempfile::tempdir().unwrap();
        let openai = provider(&[], empty.path()).unwrap();
        assert_eq!(openai.id, "openai");
    }
}
