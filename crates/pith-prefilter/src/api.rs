//! The two HTTP APIs a local model is served with: Ollama's own (`/api/...`) and the
//! OpenAI-compatible one (`/v1/...`) that llama.cpp's server, LM Studio, vLLM and Ollama itself
//! expose. Request bodies and the reading of reply envelopes live here; what is asked and the
//! strict reading of the answer are the same on both (`prompt.rs`).

use serde::Deserialize;
use serde_json::{Value, json};

/// Which API the model server speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Api {
    /// Ollama's native API: `/api/tags`, `/api/chat`, `/api/embed`.
    #[default]
    Ollama,
    /// The OpenAI-compatible API: `/v1/models`, `/v1/chat/completions`, `/v1/embeddings`.
    OpenAi,
}

/// How an OpenAI-compatible request asks for an answer in a schema. Servers differ:
/// OpenAI's own `json_schema` (vLLM, LM Studio, Ollama, llama.cpp's server), `json_object` with
/// a `schema` (llama-cpp-python's server, llama.cpp's server), or nothing (the strict parse
/// still decides). The warm-up finds the first a server accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResponseFormat {
    /// `{"type": "json_schema", "json_schema": {"name", "strict", "schema"}}`.
    #[default]
    JsonSchema,
    /// `{"type": "json_object", "schema": ...}`.
    JsonObject,
    /// No `response_format`.
    Unconstrained,
}

impl ResponseFormat {
    /// Every format, in the order they are tried.
    pub(crate) const ALL: [ResponseFormat; 3] = [
        ResponseFormat::JsonSchema,
        ResponseFormat::JsonObject,
        ResponseFormat::Unconstrained,
    ];

    fn field(self, schema: &Value) -> Option<Value> {
        match self {
            Self::JsonSchema => Some(json!({
                "type": "json_schema",
                "json_schema": {"name": "ranking", "strict": true, "schema": schema},
            })),
            Self::JsonObject => Some(json!({"type": "json_object", "schema": schema})),
            Self::Unconstrained => None,
        }
    }
}

/// How long Ollama keeps the model loaded after a request: a cold load takes longer than a
/// ranking's timeout, so a session's searches should find it loaded.
const OLLAMA_KEEP_ALIVE: &str = "30m";

impl Api {
    /// `ollama` or `openai` (as in config); `None` for anything else.
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "ollama" => Some(Self::Ollama),
            "openai" => Some(Self::OpenAi),
            _ => None,
        }
    }

    /// The config name: `ollama` or `openai`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ollama => "ollama",
            Self::OpenAi => "openai",
        }
    }

    /// How the API is named in text a person reads.
    pub fn label(self) -> &'static str {
        match self {
            Self::Ollama => "Ollama",
            Self::OpenAi => "OpenAI-compatible API",
        }
    }

    /// Where a server of this kind listens by default (Ollama's port; llama.cpp's server's).
    pub fn default_url(self) -> &'static str {
        match self {
            Self::Ollama => "http://127.0.0.1:11434",
            Self::OpenAi => "http://127.0.0.1:8080",
        }
    }

    /// The path that lists the models the server has.
    pub(crate) fn models_path(self) -> &'static str {
        match self {
            Self::Ollama => "/api/tags",
            Self::OpenAi => "/v1/models",
        }
    }

    pub(crate) fn chat_path(self) -> &'static str {
        match self {
            Self::Ollama => "/api/chat",
            Self::OpenAi => "/v1/chat/completions",
        }
    }

    pub(crate) fn embed_path(self) -> &'static str {
        match self {
            Self::Ollama => "/api/embed",
            Self::OpenAi => "/v1/embeddings",
        }
    }

    /// Whether the model list (`body` of [`Api::models_path`]) names `model`. Ollama names
    /// without a tag mean `:latest`, on both of its APIs.
    pub(crate) fn lists_model(self, body: &[u8], model: &str) -> bool {
        let Ok(list) = serde_json::from_slice::<Value>(body) else {
            return false;
        };
        let (array, keys): (&str, &[&str]) = match self {
            Self::Ollama => ("models", &["name", "model"]),
            Self::OpenAi => ("data", &["id"]),
        };
        let wanted = with_tag(model);
        list.get(array)
            .and_then(Value::as_array)
            .is_some_and(|models| {
                models.iter().any(|entry| {
                    keys.iter().any(|key| {
                        entry
                            .get(key)
                            .and_then(Value::as_str)
                            .is_some_and(|name| name == model || with_tag(name) == wanted)
                    })
                })
            })
    }

    /// A request that makes the server load `model` and answers as soon as it has: Ollama's
    /// documented load request (no messages); elsewhere a one-token completion asking for
    /// `format`, so that a server refusing that format says so here and not on a search.
    pub(crate) fn warm_up_body(self, model: &str, format: ResponseFormat) -> Vec<u8> {
        let body = match self {
            Self::Ollama => json!({
                "model": model,
                "messages": [],
                "keep_alive": OLLAMA_KEEP_ALIVE,
            }),
            Self::OpenAi => {
                let mut body = json!({
                    "model": model,
                    "messages": [{"role": "user", "content": "Answer {\"ok\": true}."}],
                    "max_tokens": 1,
                    "temperature": 0,
                    "stream": false,
                });
                let schema = json!({
                    "type": "object",
                    "properties": {"ok": {"type": "boolean"}},
                    "required": ["ok"],
                });
                if let Some(field) = format.field(&schema) {
                    body["response_format"] = field;
                }
                body
            }
        };
        body.to_string().into_bytes()
    }

    /// A non-streaming, deterministic chat request whose answer is constrained to `schema`.
    /// `num_ctx` is sent to Ollama (which otherwise truncates a long prompt silently); an
    /// OpenAI-compatible server sizes its context itself and refuses a prompt that does not
    /// fit.
    #[expect(
        clippy::too_many_arguments,
        reason = "one request's fields, each used once; a struct would only rename them"
    )]
    pub(crate) fn chat_body(
        self,
        model: &str,
        system: &str,
        user: &str,
        schema: &Value,
        format: ResponseFormat,
        num_ctx: usize,
        num_predict: usize,
    ) -> Vec<u8> {
        let messages = json!([
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]);
        let body = match self {
            Self::Ollama => json!({
                "model": model,
                "stream": false,
                "messages": messages,
                "format": schema,
                "options": {
                    "num_ctx": num_ctx,
                    "num_predict": num_predict,
                    "temperature": 0,
                    "seed": 0,
                },
                "keep_alive": OLLAMA_KEEP_ALIVE,
            }),
            Self::OpenAi => {
                let mut body = json!({
                    "model": model,
                    "stream": false,
                    "messages": messages,
                    "max_tokens": num_predict,
                    "temperature": 0,
                    "seed": 0,
                });
                if let Some(field) = format.field(schema) {
                    body["response_format"] = field;
                }
                body
            }
        };
        body.to_string().into_bytes()
    }

    /// The assistant's message text from a complete chat reply.
    pub(crate) fn chat_content(self, body: &[u8]) -> Result<String, EnvelopeError> {
        match self {
            Self::Ollama => {
                let reply: OllamaChat = serde_json::from_slice(body)
                    .map_err(|err| EnvelopeError::NotAReply(err.to_string()))?;
                if !reply.done {
                    return Err(EnvelopeError::Incomplete("not done".to_owned()));
                }
                match reply.done_reason.as_deref() {
                    None | Some("stop") => Ok(reply.message.content),
                    Some(reason) => Err(EnvelopeError::Incomplete(reason.to_owned())),
                }
            }
            Self::OpenAi => {
                let reply: OpenAiChat = serde_json::from_slice(body)
                    .map_err(|err| EnvelopeError::NotAReply(err.to_string()))?;
                let choice = reply
                    .choices
                    .into_iter()
                    .next()
                    .ok_or_else(|| EnvelopeError::NotAReply("no choices".to_owned()))?;
                match choice.finish_reason.as_deref() {
                    None | Some("stop") => Ok(choice.message.content.unwrap_or_default()),
                    Some(reason) => Err(EnvelopeError::Incomplete(reason.to_owned())),
                }
            }
        }
    }

    /// An embeddings request for `inputs`.
    pub(crate) fn embed_body(self, model: &str, inputs: &[String]) -> Vec<u8> {
        let body = match self {
            Self::Ollama => json!({"model": model, "input": inputs, "truncate": true}),
            Self::OpenAi => json!({"model": model, "input": inputs, "encoding_format": "float"}),
        };
        body.to_string().into_bytes()
    }

    /// The vectors of an embeddings reply, in input order.
    pub(crate) fn embeddings(self, body: &[u8]) -> Result<Vec<Vec<f64>>, EnvelopeError> {
        match self {
            Self::Ollama => serde_json::from_slice::<OllamaEmbed>(body)
                .map(|reply| reply.embeddings)
                .map_err(|err| EnvelopeError::NotAReply(err.to_string())),
            Self::OpenAi => {
                let reply: OpenAiEmbed = serde_json::from_slice(body)
                    .map_err(|err| EnvelopeError::NotAReply(err.to_string()))?;
                let count = reply.data.len();
                let mut slots: Vec<Option<Vec<f64>>> = vec![None; count];
                for item in reply.data {
                    match slots.get_mut(item.index) {
                        Some(slot @ None) => *slot = Some(item.embedding),
                        _ => {
                            return Err(EnvelopeError::NotAReply(format!(
                                "embedding index {} repeated or out of range",
                                item.index
                            )));
                        }
                    }
                }
                slots
                    .into_iter()
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| EnvelopeError::NotAReply("an embedding index is missing".into()))
            }
        }
    }
}

/// Why a reply body is not a complete answer of the API.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvelopeError {
    /// The body is not this API's reply.
    #[error("not a reply of this API: {0}")]
    NotAReply(String),
    /// The answer stopped early (`length`, `load`, ...).
    #[error("answer incomplete (stopped: {0})")]
    Incomplete(String),
}

#[derive(Deserialize)]
struct OllamaChat {
    message: Message,
    done: bool,
    #[serde(default)]
    done_reason: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    content: String,
}

#[derive(Deserialize)]
struct OpenAiChat {
    choices: Vec<OpenAiChoice>,
}

#[derive(Deserialize)]
struct OpenAiChoice {
    message: OpenAiMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct OpenAiMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct OllamaEmbed {
    embeddings: Vec<Vec<f64>>,
}

#[derive(Deserialize)]
struct OpenAiEmbed {
    data: Vec<OpenAiEmbedding>,
}

#[derive(Deserialize)]
struct OpenAiEmbedding {
    index: usize,
    embedding: Vec<f64>,
}

fn with_tag(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.contains(':') {
        name.to_owned()
    } else {
        format!("{name}:latest")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_lists_of_both_apis() {
        let tags = br#"{"models":[{"name":"qwen2.5-coder:1.5b","model":"qwen2.5-coder:1.5b"},
            {"name":"llama3.2:latest","model":"llama3.2:latest"}]}"#;
        let ollama = Api::Ollama;
        assert!(ollama.lists_model(tags, "qwen2.5-coder:1.5b"));
        assert!(ollama.lists_model(tags, "llama3.2"));
        assert!(!ollama.lists_model(tags, "qwen2.5-coder"));
        assert!(!ollama.lists_model(tags, "mistral"));
        assert!(!ollama.lists_model(b"<html>", "llama3.2"));
        let models = br#"{"object":"list","data":[{"id":"smollm2-135m","object":"model"},
            {"id":"llama3.2:latest","object":"model"}]}"#;
        let openai = Api::OpenAi;
        assert!(openai.lists_model(models, "smollm2-135m"));
        assert!(openai.lists_model(models, "llama3.2"));
        assert!(!openai.lists_model(models, "smollm2"));
        assert!(
            !openai.lists_model(tags, "llama3.2"),
            "an Ollama list is not a /v1 list"
        );
    }

    #[test]
    fn chat_envelopes_of_both_apis() {
        let ollama = br#"{"model":"m","message":{"role":"assistant","content":"{\"top\":[1]}"},
            "done":true,"done_reason":"stop"}"#;
        assert_eq!(Api::Ollama.chat_content(ollama).unwrap(), "{\"top\":[1]}");
        let loading = br#"{"model":"m","message":{"role":"assistant","content":""},
            "done":true,"done_reason":"load"}"#;
        assert_eq!(
            Api::Ollama.chat_content(loading),
            Err(EnvelopeError::Incomplete("load".into()))
        );
        let openai = br#"{"id":"x","object":"chat.completion","choices":[{"index":0,
            "message":{"role":"assistant","content":"{\"top\":[1]}"},"finish_reason":"stop"}]}"#;
        assert_eq!(Api::OpenAi.chat_content(openai).unwrap(), "{\"top\":[1]}");
        let cut = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"{"},
            "finish_reason":"length"}]}"#;
        assert_eq!(
            Api::OpenAi.chat_content(cut),
            Err(EnvelopeError::Incomplete("length".into()))
        );
        assert!(matches!(
            Api::OpenAi.chat_content(ollama),
            Err(EnvelopeError::NotAReply(_))
        ));
        assert!(matches!(
            Api::OpenAi.chat_content(br#"{"choices":[]}"#),
            Err(EnvelopeError::NotAReply(_))
        ));
    }

    #[test]
    fn embedding_envelopes_of_both_apis() {
        assert_eq!(
            Api::Ollama
                .embeddings(br#"{"model":"m","embeddings":[[1.0,0.0],[0.5,0.5]]}"#)
                .unwrap(),
            vec![vec![1.0, 0.0], vec![0.5, 0.5]]
        );
        // OpenAI's list is put in input order by its indices.
        let reply = br#"{"object":"list","data":[
            {"object":"embedding","index":1,"embedding":[0.5,0.5]},
            {"object":"embedding","index":0,"embedding":[1.0,0.0]}],"model":"m"}"#;
        assert_eq!(
            Api::OpenAi.embeddings(reply).unwrap(),
            vec![vec![1.0, 0.0], vec![0.5, 0.5]]
        );
        for bad in [
            &br#"{"data":[{"index":0,"embedding":[1.0]},{"index":0,"embedding":[1.0]}]}"#[..],
            br#"{"data":[{"index":1,"embedding":[1.0]}]}"#,
            br#"{"embeddings":[[1.0]]}"#,
        ] {
            assert!(Api::OpenAi.embeddings(bad).is_err());
        }
    }

    #[test]
    fn names_and_request_shapes() {
        assert_eq!(Api::from_name(" OpenAI "), Some(Api::OpenAi));
        assert_eq!(Api::from_name("ollama"), Some(Api::Ollama));
        assert_eq!(Api::from_name("vllm"), None);
        let schema = json!({"type": "object"});
        let chat = |api: Api, format| -> Value {
            serde_json::from_slice(&api.chat_body("m", "s", "u", &schema, format, 4096, 50))
                .unwrap()
        };
        let body = chat(Api::OpenAi, ResponseFormat::JsonSchema);
        assert_eq!(body["response_format"]["type"], "json_schema");
        assert_eq!(body["response_format"]["json_schema"]["schema"], schema);
        assert_eq!(body["max_tokens"], 50);
        assert_eq!(body["messages"][1]["content"], "u");
        let body = chat(Api::OpenAi, ResponseFormat::JsonObject);
        assert_eq!(
            body["response_format"],
            json!({"type": "json_object", "schema": schema})
        );
        assert!(
            chat(Api::OpenAi, ResponseFormat::Unconstrained)
                .get("response_format")
                .is_none()
        );
        let body = chat(Api::Ollama, ResponseFormat::JsonSchema);
        assert_eq!(body["format"], schema);
        assert_eq!(body["options"]["num_ctx"], 4096);
        assert_eq!(body["stream"], false);
        let warm: Value =
            serde_json::from_slice(&Api::Ollama.warm_up_body("m", ResponseFormat::JsonSchema))
                .unwrap();
        assert_eq!(warm["messages"], json!([]));
        let warm: Value =
            serde_json::from_slice(&Api::OpenAi.warm_up_body("m", ResponseFormat::JsonObject))
                .unwrap();
        assert_eq!(warm["max_tokens"], 1);
        assert_eq!(warm["response_format"]["type"], "json_object");
    }
}
