//! The provider-neutral request: system prompt, batched messages, tool definitions.
//!
//! Messages borrow from the session history, so building a request never clones the
//! conversation; the provider serialises it straight into the request body. Because the
//! conversion is a pure function of the history, the bytes sent for an unchanged prefix are
//! identical from call to call, which is what provider prompt caches need.

use serde::{Deserialize, Serialize};

/// Everything one model call needs.
#[derive(Debug, Clone)]
pub struct ChatRequest<'a> {
    pub system: &'a str,
    pub messages: Vec<Message<'a>>,
    pub tools: &'a [ToolDefinition],
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    /// Stable per session; providers may use it as a prompt-cache key.
    pub session_id: &'a str,
}

/// One message in the batched format the wire APIs expect.
#[derive(Debug, Clone, PartialEq)]
pub enum Message<'a> {
    /// The user's words and any images attached to them.
    User {
        text: &'a str,
        images: Vec<ImagePart<'a>>,
    },
    Assistant {
        parts: Vec<AssistantPart<'a>>,
    },
    /// The results of the previous assistant message's tool calls, in call order.
    ToolResults {
        results: Vec<ToolResultMessage<'a>>,
    },
}

/// An image in a user message: base64 data and its MIME type.
#[derive(Debug, Clone, PartialEq)]
pub struct ImagePart<'a> {
    pub mime_type: &'a str,
    pub data: &'a str,
}

/// A piece of an assistant message.
#[derive(Debug, Clone, PartialEq)]
pub enum AssistantPart<'a> {
    Text(&'a str),
    Thinking {
        text: &'a str,
        signature: Option<&'a str>,
    },
    RedactedThinking(&'a str),
    /// `arguments` is the raw JSON text the model produced, replayed verbatim.
    ToolCall {
        id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
}

/// The result of one tool call as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResultMessage<'a> {
    pub call_id: &'a str,
    pub name: &'a str,
    pub content: &'a str,
    pub is_error: bool,
}

/// A tool as advertised to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}
