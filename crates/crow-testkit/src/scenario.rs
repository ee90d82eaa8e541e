//! The script a [`MockLlm`](crate::MockLlm) follows: steps, replies, faults and their builders.
//!
//! Every type is serde-(de)serialisable so a scenario can live in a JSON file (`crow-mock
//! --scenario FILE.json`). Steps are externally tagged in snake case:
//!
//! ```json
//! {"chunk_size": 8, "steps": [
//!   {"reply": {"thinking": "plan", "text": "hi", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}},
//!   {"fault": {"status": {"code": 429, "retry_after_secs": 1}}},
//!   {"fault": {"drop_after": {"reply": {"text": "partial"}, "after_chunks": 2}}}
//! ]}
//! ```
//!
//! `"quirks": {"tools_need_tool_choice": true, "null_content_fails": true, "no_usage": true}`
//! imitates llama-cpp-python; `strict_tool_arguments` and `rejected_fields` a LiteLLM proxy
//! in front of Anthropic (see [`Quirks`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Default number of characters per streamed delta.
pub const DEFAULT_CHUNK_SIZE: usize = 16;
/// What the server answers once every step has been served.
pub const DEFAULT_EXHAUSTED_TEXT: &str = "mock: the scenario has no more replies";

/// An ordered script of model responses, one step per request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Scenario {
    pub steps: Vec<Step>,
    /// Characters per delta (text, thinking, tool-call arguments). 0 sends each piece whole.
    pub chunk_size: usize,
    /// Pause before each SSE event after the first, so streaming is observable.
    pub chunk_delay_ms: u64,
    /// Reply text once the steps have run out (or none accepts the request).
    pub exhausted_text: String,
    /// A model context window in tokens (body bytes / 4, as usage counts them): larger
    /// requests are refused with HTTP 400 and the provider's overflow message, and consume
    /// no step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Models Ollama's `/api/show` and `/api/chat` answer 404 for (not pulled).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_models: Vec<String>,
    /// Ollama: `/api/show` is not served (404 without Ollama's error), as behind a proxy that
    /// passes only the chat on.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_show: bool,
    /// Behaviours of particular servers (llama-cpp-python, LiteLLM) the mock imitates.
    #[serde(skip_serializing_if = "Quirks::is_none")]
    pub quirks: Quirks,
}

/// How a particular server departs from the APIs' own behaviour. All off by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Quirks {
    /// llama-cpp-python: `tools` sent without `tool_choice` are left out of the prompt, so
    /// the model never calls one (Chat Completions: the reply's tool calls are not sent).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tools_need_tool_choice: bool,
    /// llama-cpp-python: an assistant message with `"content": null` fails with HTTP 500.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub null_content_fails: bool,
    /// llama-cpp-python: no usage in the answer, even when `stream_options.include_usage`
    /// asks for it (Chat Completions).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_usage: bool,
    /// llama-cpp-python: a streamed request with tools and `"tool_choice": "auto"` is answered
    /// with status 200 and an empty body (it cannot stream an automatic tool choice; a forced
    /// one streams). Consumes no step.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_streamed_auto_tools: bool,
    /// Claude thinking behind LiteLLM's Chat Completions: thinking streams as
    /// `reasoning_content` plus `thinking_blocks` (the last one carrying the signature), and
    /// an assistant turn with tool calls replayed without its signed `thinking_blocks` is
    /// refused with HTTP 400, as Anthropic refuses it with thinking on.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub thinking_blocks: bool,
    /// An Anthropic model behind LiteLLM: a replayed tool call whose arguments are not a JSON
    /// object is refused with HTTP 400 (Chat Completions and Responses).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub strict_tool_arguments: bool,
    /// Top-level body fields refused with HTTP 400 (a proxy that passes no unknown field on,
    /// e.g. `prompt_cache_key` to an Anthropic model behind LiteLLM).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rejected_fields: Vec<String>,
}

impl Quirks {
    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }

    /// Every llama-cpp-python quirk the mock knows.
    pub fn llama_cpp_python() -> Self {
        Self {
            tools_need_tool_choice: true,
            null_content_fails: true,
            no_usage: true,
            no_streamed_auto_tools: true,
            ..Self::default()
        }
    }
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            steps: Vec::new(),
            chunk_size: DEFAULT_CHUNK_SIZE,
            chunk_delay_ms: 0,
            exhausted_text: DEFAULT_EXHAUSTED_TEXT.to_owned(),
            context_window: None,
            missing_models: Vec::new(),
            no_show: false,
            quirks: Quirks::default(),
        }
    }
}

impl Scenario {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a step that answers normally.
    pub fn reply(mut self, reply: Reply) -> Self {
        self.steps.push(Step::Reply(reply));
        self
    }

    /// Appends a step that misbehaves.
    pub fn fault(mut self, fault: Fault) -> Self {
        self.steps.push(Step::Fault(fault));
        self
    }

    pub fn step(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    /// Ollama: `model` is not pulled (`/api/show` and `/api/chat` answer 404).
    pub fn missing_model(mut self, model: impl Into<String>) -> Self {
        self.missing_models.push(model.into());
        self
    }

    /// Ollama: `/api/show` answers a bare 404.
    pub fn without_show(mut self) -> Self {
        self.no_show = true;
        self
    }

    /// Imitates a particular server (see [`Quirks`]).
    pub fn quirks(mut self, quirks: Quirks) -> Self {
        self.quirks = quirks;
        self
    }

    pub fn chunk_size(mut self, chars: usize) -> Self {
        self.chunk_size = chars;
        self
    }

    pub fn chunk_delay(mut self, ms: u64) -> Self {
        self.chunk_delay_ms = ms;
        self
    }

    /// Refuses requests over `tokens` (see [`Scenario::context_window`]).
    pub fn context_window(mut self, tokens: u64) -> Self {
        self.context_window = Some(tokens);
        self
    }

    pub fn exhausted_text(mut self, text: impl Into<String>) -> Self {
        self.exhausted_text = text.into();
        self
    }

    /// Parses a scenario from JSON (the format documented at the top of this module).
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(json)
    }

    /// Reads and parses a scenario file.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        Self::from_json(&text).map_err(std::io::Error::from)
    }

    pub fn to_json(&self) -> String {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// One scripted response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Reply(Reply),
    Fault(Fault),
}

impl Step {
    /// The `match_system` routing filter of this step, if any. Status faults accept anything.
    pub fn match_system(&self) -> Option<&str> {
        match self {
            Step::Reply(reply) => reply.match_system.as_deref(),
            Step::Fault(
                Fault::DropAfter { reply, .. }
                | Fault::Stall { reply, .. }
                | Fault::KeepAlive { reply, .. },
            ) => reply.match_system.as_deref(),
            Step::Fault(Fault::Status { .. } | Fault::Raw { .. }) => None,
        }
    }

    /// The `match_model` routing filter of this step, if any.
    pub fn match_model(&self) -> Option<&str> {
        match self {
            Step::Reply(reply) => reply.match_model.as_deref(),
            Step::Fault(
                Fault::DropAfter { reply, .. }
                | Fault::Stall { reply, .. }
                | Fault::KeepAlive { reply, .. },
            ) => reply.match_model.as_deref(),
            Step::Fault(Fault::Status { .. } | Fault::Raw { .. }) => None,
        }
    }

    /// Whether this step may answer a request whose system prompt is `system`, for `model`.
    pub fn accepts(&self, system: &str, model: &str) -> bool {
        self.match_system()
            .is_none_or(|needle| system.contains(needle))
            && self.match_model().is_none_or(|name| name == model)
    }
}

/// A normal model response: optional thinking, optional text, then tool calls, in that order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Reply {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Overrides [`Scenario::chunk_size`] for this step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_size: Option<usize>,
    /// Overrides [`Scenario::chunk_delay_ms`] for this step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_delay_ms: Option<u64>,
    /// Serve this step only to requests whose system prompt contains this string, so
    /// concurrent agents (primary, coagent, subagents) each get their own script.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub match_system: Option<String>,
    /// Serve this step only to requests for this model, so concurrent sessions on different
    /// models (`crow run --attempts`) each get their own script.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub match_model: Option<String>,
}

impl Reply {
    pub fn text(text: impl Into<String>) -> Self {
        Self::default().with_text(text)
    }

    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::default().with_tool_call(name, arguments)
    }

    pub fn thinking(thinking: impl Into<String>) -> Self {
        Self::default().with_thinking(thinking)
    }

    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    pub fn with_thinking(mut self, thinking: impl Into<String>) -> Self {
        self.thinking = Some(thinking.into());
        self
    }

    pub fn with_tool_call(self, name: impl Into<String>, arguments: Value) -> Self {
        self.with_call(ToolCall::new(name, arguments))
    }

    /// Adds a call whose argument text is sent verbatim (e.g. malformed JSON).
    pub fn with_raw_tool_call(self, name: impl Into<String>, raw: impl Into<String>) -> Self {
        self.with_call(ToolCall::raw(name, raw))
    }

    pub fn with_call(mut self, call: ToolCall) -> Self {
        self.tool_calls.push(call);
        self
    }

    pub fn with_chunk_size(mut self, chars: usize) -> Self {
        self.chunk_size = Some(chars);
        self
    }

    pub fn with_chunk_delay(mut self, ms: u64) -> Self {
        self.chunk_delay_ms = Some(ms);
        self
    }

    pub fn matching_system(mut self, needle: impl Into<String>) -> Self {
        self.match_system = Some(needle.into());
        self
    }

    pub fn matching_model(mut self, model: impl Into<String>) -> Self {
        self.match_model = Some(model.into());
        self
    }
}

/// A tool call in a [`Reply`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id; generated (`call_…` / `toolu_…`, unique per server) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub name: String,
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// Sent instead of `arguments`, byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_arguments: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

impl ToolCall {
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: None,
            name: name.into(),
            arguments,
            raw_arguments: None,
        }
    }

    pub fn raw(name: impl Into<String>, raw: impl Into<String>) -> Self {
        Self {
            raw_arguments: Some(raw.into()),
            ..Self::new(name, empty_object())
        }
    }

    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The argument text as streamed: `raw_arguments`, else compact JSON of `arguments`.
    pub fn arguments_text(&self) -> String {
        match &self.raw_arguments {
            Some(raw) => raw.clone(),
            None => self.arguments.to_string(),
        }
    }
}

/// A misbehaving response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// An HTTP error status with a JSON error body in the API's own shape. `body`, when set,
    /// is sent verbatim if it is valid JSON, otherwise used as the error message.
    Status {
        code: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_secs: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
    },
    /// Streams the opening events and `after_chunks` content deltas of `reply`, then aborts
    /// the connection mid-body (never reaching `[DONE]` / `message_stop`).
    DropAfter {
        reply: Reply,
        #[serde(default)]
        after_chunks: usize,
    },
    /// Like `DropAfter`, but then sends nothing and keeps the connection open until the
    /// client gives up (or the server shuts down).
    Stall {
        reply: Reply,
        #[serde(default)]
        after_chunks: usize,
    },
    /// Like `Stall`, but keeps sending the SSE comment `: keep-alive` every `interval_ms`:
    /// the connection is alive, the model never says anything more.
    KeepAlive {
        reply: Reply,
        #[serde(default)]
        after_chunks: usize,
        #[serde(default = "default_keep_alive_ms")]
        interval_ms: u64,
    },
    /// Status 200 with `content_type` and `body` verbatim (e.g. lines that are not SSE).
    Raw {
        body: String,
        #[serde(default = "default_raw_content_type")]
        content_type: String,
    },
}

fn default_keep_alive_ms() -> u64 {
    100
}

fn default_raw_content_type() -> String {
    "text/event-stream".to_owned()
}

impl Fault {
    pub fn status(code: u16) -> Self {
        Fault::Status {
            code,
            retry_after_secs: None,
            body: None,
        }
    }

    /// A 429 with a `retry-after` header.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Fault::Status {
            code: 429,
            retry_after_secs: Some(retry_after_secs),
            body: None,
        }
    }

    pub fn drop_after(reply: Reply, after_chunks: usize) -> Self {
        Fault::DropAfter {
            reply,
            after_chunks,
        }
    }

    pub fn stall(reply: Reply, after_chunks: usize) -> Self {
        Fault::Stall {
            reply,
            after_chunks,
        }
    }

    pub fn keep_alive(reply: Reply, after_chunks: usize, interval_ms: u64) -> Self {
        Fault::KeepAlive {
            reply,
            after_chunks,
            interval_ms,
        }
    }

    /// A 200 `text/event-stream` response whose body is `body`, byte for byte.
    pub fn raw(body: impl Into<String>) -> Self {
        Fault::Raw {
            body: body.into(),
            content_type: default_raw_content_type(),
        }
    }

    /// Sets the body of a `Status` fault; no effect on the others.
    pub fn with_body(mut self, text: impl Into<String>) -> Self {
        if let Fault::Status { body, .. } = &mut self {
            *body = Some(text.into());
        }
        self
    }
}
