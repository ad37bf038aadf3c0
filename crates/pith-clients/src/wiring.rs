//! What `pith run` hands one client process so that it goes through the proxy, and what it
//! needs to know to decide.

use std::ffi::OsString;

use crate::{Files, Places};

/// What the client gets for one run: environment variables and leading arguments.
#[derive(Debug, Default, PartialEq)]
pub struct Wiring {
    /// Variables set for the client's process.
    pub env: Vec<(&'static str, String)>,
    /// Arguments put before the client's own.
    pub args: Vec<OsString>,
}

/// One `pith run`: the client's own arguments and environment, and the proxy it would use.
pub struct RunContext<'a> {
    /// The client's arguments, as given after `pith run <client>`.
    pub args: &'a [OsString],
    /// The proxy's origin (`http://127.0.0.1:8787`).
    pub origin: String,
    /// The proxy's access token, when it has one, and the header it is sent in.
    pub token: Option<(&'a str, &'a str)>,
    /// Where the proxy sends Anthropic requests (`None`: an older proxy that does not say).
    pub upstream_anthropic: Option<&'a str>,
    /// Where the proxy sends OpenAI requests.
    pub upstream_openai: Option<&'a str>,
    /// Where the proxy sends ChatGPT-backend requests (`None`: an older proxy that does not
    /// say, and does not route them).
    pub upstream_chatgpt: Option<&'a str>,
    /// Where a client goes when nothing moves it: the providers' own APIs.
    pub default_anthropic: &'a str,
    /// The same for OpenAI.
    pub default_openai: &'a str,
    /// The ChatGPT backend's origin, where Codex signed in with ChatGPT goes.
    pub default_chatgpt: &'a str,
    /// The client's environment variable `name`, when set and not empty.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Where the client's files are.
    pub places: &'a Places,
    /// How to read them.
    pub files: &'a dyn Files,
}

impl RunContext<'_> {
    /// The proxy's OpenAI-style base URL (`<origin>/v1`).
    pub fn v1(&self) -> String {
        format!("{}/v1", self.origin)
    }

    /// `client` goes to `client_url`, the proxy to `proxy_url`: the sentence `pith run` prints.
    pub fn mismatch(&self, what: &str, client_url: &str, proxy_url: &str) -> String {
        format!(
            "{what} goes to {client_url}, the proxy on {} to {proxy_url}",
            self.origin.trim_start_matches("http://")
        )
    }
}

/// `url` without trailing slashes, to compare base URLs.
pub(crate) fn trimmed(url: &str) -> &str {
    url.trim_end_matches('/')
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::{Value, json};

    use super::*;
    use crate::Client;
    use crate::test_files::Disk;

    fn wire(client: Client, env: &[(&str, &str)], files: &Disk) -> Result<Wiring, String> {
        let places = Places {
            codex_home: Some("/c".into()),
            ..Places::default()
        };
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        };
        client.wire(&RunContext {
            args: &[],
            origin: "http://127.0.0.1:9999".into(),
            token: Some(("x-pith-token", "t")),
            upstream_anthropic: Some("https://api.anthropic.com"),
            upstream_openai: Some("https://api.openai.com"),
            upstream_chatgpt: Some("https://chatgpt.com"),
            default_anthropic: "https://api.anthropic.com",
            default_openai: "https://api.openai.com",
            default_chatgpt: "https://chatgpt.com",
            env: &lookup,
            places: &places,
            files,
        })
    }

    #[test]
    fn each_client_is_wired_for_one_process_or_told_why_not() {
        let none = Disk::default();
        // Claude Code: the origin, and the token beside the headers already set.
        let w = wire(
            Client::ClaudeCode,
            &[("ANTHROPIC_CUSTOM_HEADERS", "a: b")],
            &none,
        )
        .unwrap();
        assert_eq!(
            w.env,
            vec![
                ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9999".to_owned()),
                (
                    "ANTHROPIC_CUSTOM_HEADERS",
                    "a: b\nx-pith-token: t".to_owned()
                )
            ]
        );
        let elsewhere = wire(
            Client::ClaudeCode,
            &[("ANTHROPIC_BASE_URL", "https://gw.example")],
            &none,
        );
        assert_eq!(
            elsewhere.unwrap_err(),
            "ANTHROPIC_BASE_URL goes to https://gw.example, the proxy on 127.0.0.1:9999 to https://api.anthropic.com"
        );
        // OpenCode: both providers' base URL, added to what the variable holds.
        let w = wire(
            Client::Opencode,
            &[("OPENCODE_CONFIG_CONTENT", r#"{"model": "m"}"#)],
            &none,
        )
        .unwrap();
        let (name, content) = &w.env[0];
        assert_eq!(*name, "OPENCODE_CONFIG_CONTENT");
        let content: Value = serde_json::from_str(content).unwrap();
        assert_eq!(content["model"], "m");
        for provider in ["anthropic", "openai"] {
            assert_eq!(
                content["provider"][provider]["options"]["baseURL"],
                "http://127.0.0.1:9999/v1"
            );
            assert_eq!(
                content["provider"][provider]["options"]["headers"]["x-pith-token"],
                "t"
            );
        }
        assert!(
            wire(
                Client::Opencode,
                &[("OPENCODE_CONFIG_CONTENT", "[1]")],
                &none
            )
            .is_err()
        );
        // Codex: `-c` overrides for the built-in provider; one going elsewhere is left alone.
        let w = wire(Client::Codex, &[], &none).unwrap();
        assert_eq!(w.args[1], "openai_base_url=\"http://127.0.0.1:9999/v1\"");
        let router = Disk::of([(
            PathBuf::from("/c/config.toml"),
            json!({"model_provider": "router", "model_providers": {"router": {"base_url": "https://router.example/api/v1"}}}),
        )]);
        assert!(
            wire(Client::Codex, &[], &router)
                .unwrap_err()
                .contains("router.example")
        );
        // Signed in with ChatGPT: the backend's own path on the proxy, which sends it to its
        // ChatGPT upstream; a proxy sending that elsewhere than Codex goes is told.
        let chatgpt = Disk::of([(
            PathBuf::from("/c/auth.json"),
            json!({"auth_mode": "chatgpt", "tokens": {"id_token": "x"}}),
        )]);
        let w = wire(Client::Codex, &[], &chatgpt).unwrap();
        assert_eq!(
            w.args[1],
            "openai_base_url=\"http://127.0.0.1:9999/chatgpt\""
        );
        let moved = Disk::of([
            (
                PathBuf::from("/c/auth.json"),
                json!({"auth_mode": "chatgpt", "tokens": {"id_token": "x"}}),
            ),
            (
                PathBuf::from("/c/config.toml"),
                json!({"openai_base_url": "https://elsewhere.example/backend-api/codex"}),
            ),
        ]);
        assert!(
            wire(Client::Codex, &[], &moved)
                .unwrap_err()
                .contains("elsewhere.example")
        );
    }
}
