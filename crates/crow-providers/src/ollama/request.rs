//! The body of Ollama's native `POST /api/chat`, built from borrowed crow-core messages.

use std::borrow::Cow;

use crow_core::{AssistantPart, ChatRequest, Message, ToolDefinition};
use serde::Serialize;

use crate::wire::ObjectArguments;

/// Settings that shape the body beyond the request itself.
pub(super) struct BodyOptions<'a> {
    pub model: &'a str,
    /// The context the model gets (`options.num_ctx`): Ollama's own default is a few
    /// thousand tokens, past which it silently drops the start of the conversation.
    pub num_ctx: Option<u64>,
    pub max_tokens: Option<u32>,
    pub keep_alive: Option<&'a str>,
    /// Ask a thinking model to think (`think: true`); `None` leaves the model's default.
    pub think: Option<bool>,
}

/// The body's fields but `messages`, which [`crate::encode::PrefixCache`] appends.
#[derive(Serialize)]
pub(super) struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    think: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    keep_alive: Option<&'a str>,
    options: Options,
}

#[derive(Serialize)]
struct Options {
    #[serde(skip_serializing_if = "Option::is_none")]
    num_ctx: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    num_predict: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
}

#[derive(Serialize, Hash)]
#[serde(tag = "role", rename_all = "lowercase")]
pub(super) enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
        /// Base64 images, without a data: prefix.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        images: Vec<&'a str>,
    },
    Assistant {
        content: Cow<'a, str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        content: &'a str,
        tool_name: &'a str,
    },
}

#[derive(Serialize, Hash)]
pub(super) struct WireToolCall<'a> {
    function: WireFunctionCall<'a>,
}

#[derive(Serialize, Hash)]
pub(super) struct WireFunctionCall<'a> {
    name: &'a str,
    /// An object, not a string.
    arguments: ObjectArguments<'a>,
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

/// Builds the body's fields and its messages. Pure: the same request gives the same bytes.
pub(super) fn body<'a>(
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
            Message::User { text, images } => messages.push(WireMessage::User {
                content: text,
                images: images.iter().map(|i| i.data).collect(),
            }),
            Message::Assistant { parts } => {
                let content = crate::wire::joined_text(parts).unwrap_or(Cow::Borrowed(""));
                let tool_calls: Vec<WireToolCall<'a>> = parts
                    .iter()
                    .filter_map(|p| match p {
                        AssistantPart::ToolCall {
                            name, arguments: a, ..
                        } => Some(WireToolCall {
                            function: WireFunctionCall {
                                name,
                                arguments: ObjectArguments::new(a),
                            },
                        }),
                        _ => None,
                    })
                    .collect();
                // Thinking is not sent back: Ollama has no field that takes it.
                if !content.is_empty() || !tool_calls.is_empty() {
                    messages.push(WireMessage::Assistant {
                        content,
                        tool_calls,
                    });
                }
            }
            Message::ToolResults { results } => {
                messages.extend(results.iter().map(|r| WireMessage::Tool {
                    content: r.content,
                    tool_name: r.name,
                }));
            }
        }
    }
    let fields = Body {
        model: options.model,
        tools: request.tools.iter().map(tool).collect(),
        stream: true,
        think: options.think,
        keep_alive: options.keep_alive,
        options: Options {
            num_ctx: options.num_ctx,
            num_predict: request.max_tokens.or(options.max_tokens),
            temperature: request.temperature,
        },
    };
    (fields, messages)
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
