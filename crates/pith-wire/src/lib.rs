//! The three wire formats pith speaks: which one a request is, views over raw bodies,
//! the SSE codec and usage extraction. Pure data handling: no I/O.

pub mod conversation;
pub mod encoding;
pub mod fingerprint;
pub mod prompt;
pub mod reply;
pub mod request;
pub mod session;
pub mod skim;
pub mod sse;
pub mod usage;

use std::fmt;

/// The API a request speaks, decided by its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wire {
    /// Anthropic `POST /v1/messages` (and `/v1/messages/count_tokens`).
    AnthropicMessages,
    /// OpenAI `POST /v1/chat/completions`.
    ChatCompletions,
    /// OpenAI `POST /v1/responses`.
    Responses,
}

impl Wire {
    /// The top-level member of a request body that holds the conversation: `messages`, or
    /// Responses' `input`.
    pub fn history_member(self) -> &'static str {
        match self {
            Wire::AnthropicMessages | Wire::ChatCompletions => "messages",
            Wire::Responses => "input",
        }
    }

    /// The wire for a request path (query string already removed), or `None` for paths that
    /// pith passes through without looking at the body.
    pub fn from_path(path: &str) -> Option<Wire> {
        match path {
            "/v1/messages" | "/v1/messages/count_tokens" => Some(Wire::AnthropicMessages),
            "/v1/chat/completions" => Some(Wire::ChatCompletions),
            "/v1/responses" => Some(Wire::Responses),
            // The ChatGPT backend's Responses API (Codex signed in with ChatGPT).
            p if p.strip_prefix(pith_clients::codex::PITH_CHATGPT_PATH) == Some("/responses") => {
                Some(Wire::Responses)
            }
            _ => None,
        }
    }

    /// The provider that serves this wire.
    pub fn provider(self) -> Provider {
        match self {
            Wire::AnthropicMessages => Provider::Anthropic,
            Wire::ChatCompletions | Wire::Responses => Provider::OpenAi,
        }
    }

    /// The wire [`Wire::as_str`] names (a ledger row's `wire`).
    pub fn named(name: &str) -> Option<Wire> {
        [
            Wire::AnthropicMessages,
            Wire::ChatCompletions,
            Wire::Responses,
        ]
        .into_iter()
        .find(|w| w.as_str() == name)
    }

    /// Stable name used in the ledger and in `pith stats`.
    pub fn as_str(self) -> &'static str {
        match self {
            Wire::AnthropicMessages => "anthropic",
            Wire::ChatCompletions => "chat",
            Wire::Responses => "responses",
        }
    }
}

impl fmt::Display for Wire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a request belongs to upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Anthropic: the Messages API.
    Anthropic,
    /// OpenAI: Chat Completions and Responses.
    OpenAi,
}

impl Provider {
    /// Stable name used in the ledger and in error messages: `anthropic` or `openai`.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
