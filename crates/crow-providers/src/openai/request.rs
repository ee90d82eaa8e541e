//! The OpenAI chat-completions request body, built from borrowed crow-core messages.

use std::borrow::Cow;

use crow_core::{AssistantPart, ChatRequest, Message, ToolDefinition};
use serde::Serialize;

/// Settings that shape the body beyond the request itself.
pub(crate) struct BodyOptions<'a> {
    pub model: &'a str,
    pub max_tokens: Option<u32>,
    /// `reasoning_effort`, where the server and model take it.
    pub reasoning_effort: Option<&'a str>,
    /// Send the session id as `prompt_cache_key`.
    pub prompt_cache_key: bool,
    /// Hand signed thinking back as `thinking_blocks` (not to OpenAI's own API, which has no
    /// such field).
    pub thinking_blocks: bool,
}

/// The body's fields but `messages`, which [`crate::encode::PrefixCache`] appends.
#[derive(Serialize)]
pub(crate) struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    /// `auto` whenever tools are sent: OpenAI's default, but llama-cpp-python leaves the
    /// tools out of the prompt without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    /// OpenAI's reasoning models (o-series, gpt-5) refuse `max_tokens` and take this instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    /// Requests with the same key share a prompt cache on OpenAI's side.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
}

/// Whether `model` is one of OpenAI's reasoning models, which limit output with
/// `max_completion_tokens` (router prefixes like `openai/` are ignored).
pub(crate) fn reasoning_model(model: &str) -> bool {
    let base = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    ["o1", "o3", "o4", "gpt-5"]
        .iter()
        .any(|p| base.starts_with(p))
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// A user message's content: a plain string, or parts when images are attached (a plain
/// string keeps text-only requests what every OpenAI-compatible server accepts).
#[derive(Serialize, Hash)]
#[serde(untagged)]
pub(super) enum UserContent<'a> {
    Text(&'a str),
    Parts(Vec<UserPart<'a>>),
}

#[derive(Serialize, Hash)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum UserPart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl },
}

/// A `data:` URL carrying the image (built per request; images are rare and small enough).
#[derive(Serialize, Hash)]
pub(super) struct ImageUrl {
    url: String,
}

#[derive(Serialize, Hash)]
#[serde(tag = "role", rename_all = "lowercase")]
pub(super) enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        /// `""` when the message is only tool calls: present for chat templates that read
        /// the field unconditionally (llama.cpp), a string for those that concatenate it
        /// (llama-cpp-python answers `null` with HTTP 500).
        content: Cow<'a, str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
        /// Signed thinking handed back (LiteLLM turns it into Anthropic's blocks, which Claude
        /// requires before tool calls when thinking is on). Only thinking a server signed.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        thinking_blocks: Vec<WireThinkingBlock<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

#[derive(Serialize, Hash)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum WireThinkingBlock<'a> {
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
}

#[derive(Serialize, Hash)]
pub(super) struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize, Hash)]
pub(super) struct WireFunctionCall<'a> {
    name: &'a str,
    /// The model's raw argument text, replayed verbatim when it is a JSON object.
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

/// Builds the body's fields and its messages. Pure: the same request gives the same bytes,
/// for prompt caches.
pub(crate) fn body<'a>(
    request: &'a ChatRequest<'a>,
    options: &BodyOptions<'a>,
) -> (Body<'a>, Vec<WireMessage<'a>>) {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(WireMessage::System {
            content: request.system,
        });
    }
    for message in &request.messages {
        match message {
            Message::User { text, images } if images.is_empty() => {
                messages.push(WireMessage::User {
                    content: UserContent::Text(text),
                })
            }
            Message::User { text, images } => {
                let mut parts: Vec<UserPart<'a>> = Vec::with_capacity(images.len() + 1);
                if !text.is_empty() {
                    parts.push(UserPart::Text { text });
                }
                parts.extend(images.iter().map(|i| UserPart::ImageUrl {
                    image_url: ImageUrl {
                        url: format!("data:{};base64,{}", i.mime_type, i.data),
                    },
                }));
                messages.push(WireMessage::User {
                    content: UserContent::Parts(parts),
                });
            }
            Message::Assistant { parts } => {
                if let Some(m) = assistant(parts, options.thinking_blocks) {
                    messages.push(m);
                }
            }
            Message::ToolResults { results } => {
                messages.extend(results.iter().map(|r| WireMessage::Tool {
                    tool_call_id: r.call_id,
                    content: r.content,
                }));
            }
        }
    }
    let limit = request.max_tokens.or(options.max_tokens);
    let reasoning = reasoning_model(options.model);
    let fields = Body {
        model: options.model,
        tools: request.tools.iter().map(tool).collect(),
        tool_choice: (!request.tools.is_empty()).then_some("auto"),
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        max_tokens: limit.filter(|_| !reasoning),
        max_completion_tokens: limit.filter(|_| reasoning),
        temperature: request.temperature,
        reasoning_effort: options.reasoning_effort,
        prompt_cache_key: options
            .prompt_cache_key
            .then_some(request.session_id)
            .filter(|id| !id.is_empty()),
    };
    (fields, messages)
}

/// One assistant message, or `None` when nothing in it can be sent. Thinking goes back only
/// where a server signed it (LiteLLM's `thinking_blocks`); plain reasoning text is dropped,
/// since OpenAI-compatible servers have no field to take it back.
fn assistant<'a>(parts: &'a [AssistantPart<'a>], thinking_blocks: bool) -> Option<WireMessage<'a>> {
    let content = crate::wire::joined_text(parts);
    let tool_calls: Vec<_> = parts
        .iter()
        .filter_map(|p| match p {
            AssistantPart::ToolCall {
                id,
                name,
                arguments,
            } => Some(WireToolCall {
                id,
                kind: "function",
                function: WireFunctionCall {
                    name,
                    arguments: crate::wire::object_arguments_text(arguments),
                },
            }),
            _ => None,
        })
        .collect();
    if content.is_none() && tool_calls.is_empty() {
        return None;
    }
    let thinking_blocks = parts
        .iter()
        .filter(|_| thinking_blocks)
        .filter_map(|p| match p {
            AssistantPart::Thinking {
                text,
                signature: Some(signature),
            } if !crate::gemini::signature::is_gemini(signature) => {
                Some(WireThinkingBlock::Thinking {
                    thinking: text,
                    signature,
                })
            }
            AssistantPart::RedactedThinking(data) => {
                Some(WireThinkingBlock::RedactedThinking { data })
            }
            _ => None,
        })
        .collect();
    Some(WireMessage::Assistant {
        content: content.unwrap_or(Cow::Borrowed("")),
        tool_calls,
        thinking_blocks,
    })
}

fn tool(def: &ToolDefinition) -> WireTool<'_> {
    WireTool {
        kind: "function",
        function: WireFunction {
            name: &def.name,
            description: &def.description,
            parameters: &def.parameters,
        },
    }
}
