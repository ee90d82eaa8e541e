//! The Anthropic messages request body: alternating roles, prompt-cache breakpoints and
//! replayed thinking, built from borrowed crow-core messages.

use crow_core::{AssistantPart, ChatRequest, Message, ToolDefinition};
use serde::Serialize;

use crate::wire::ObjectArguments;

/// Response limit when neither the request nor the settings give one (the API requires it).
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// The API version Vertex AI's Anthropic models take in the body.
pub(crate) const VERTEX_VERSION: &str = "vertex-2023-10-16";

pub(crate) struct BodyOptions<'a> {
    /// `None` on Vertex AI, where the URL names the model and the body the API version.
    pub model: Option<&'a str>,
    pub max_tokens: Option<u32>,
    pub thinking_budget: Option<u32>,
}

/// The body's fields but `messages`, which [`crate::encode::PrefixCache`] appends.
#[derive(Serialize)]
pub(crate) struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    anthropic_version: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
}

#[derive(Serialize)]
struct Thinking {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u32,
}

#[derive(Serialize, Clone, Copy, Hash)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

#[derive(Serialize, Hash)]
pub(crate) struct WireMessage<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize, Hash)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    Image {
        source: ImageSource<'a>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        /// The API insists on an object.
        input: ObjectArguments<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

impl Block<'_> {
    /// The breakpoint slot of blocks that accept one (thinking blocks do not).
    fn cache_slot(&mut self) -> Option<&mut Option<CacheControl>> {
        match self {
            Block::Text { cache_control, .. }
            | Block::ToolUse { cache_control, .. }
            | Block::ToolResult { cache_control, .. } => Some(cache_control),
            Block::Thinking { .. } | Block::RedactedThinking { .. } | Block::Image { .. } => None,
        }
    }
}

/// An image block's data: `{"type": "base64", "media_type", "data"}`.
#[derive(Serialize, Hash)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

/// Builds the body's fields and its messages. Pure: the same request gives the same bytes,
/// for prompt caches.
pub(crate) fn body<'a>(
    request: &'a ChatRequest<'a>,
    options: &BodyOptions<'a>,
) -> (Body<'a>, Vec<WireMessage<'a>>) {
    let mut messages: Vec<WireMessage<'a>> = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        let (role, blocks) = match message {
            // Images first, then the words about them (Anthropic's recommended order).
            Message::User { text, images } => (
                "user",
                images
                    .iter()
                    .map(|i| Block::Image {
                        source: ImageSource {
                            kind: "base64",
                            media_type: i.mime_type,
                            data: i.data,
                        },
                    })
                    .chain(text_block(text))
                    .collect(),
            ),
            Message::Assistant { parts } => ("assistant", assistant_blocks(parts)),
            Message::ToolResults { results } => (
                "user",
                results
                    .iter()
                    .map(|r| Block::ToolResult {
                        tool_use_id: r.call_id,
                        content: r.content,
                        is_error: r.is_error,
                        cache_control: None,
                    })
                    .collect(),
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        // The API requires alternating roles: a user text after tool results (or two
        // assistant messages around a skipped one) join into one message, in order.
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => messages.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    // Breakpoint on the conversation so far: the next call reads it all from cache.
    if let Some(last) = messages.last_mut()
        && let Some(slot) = last.content.iter_mut().rev().find_map(Block::cache_slot)
    {
        *slot = Some(EPHEMERAL);
    }

    let mut tools: Vec<WireTool<'a>> = request.tools.iter().map(tool).collect();
    if let Some(last) = tools.last_mut() {
        last.cache_control = Some(EPHEMERAL);
    }
    let system = match text_block(request.system) {
        Some(Block::Text { text, .. }) => vec![Block::Text {
            text,
            cache_control: Some(EPHEMERAL),
        }],
        _ => Vec::new(),
    };

    let mut max_tokens = request
        .max_tokens
        .or(options.max_tokens)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    let thinking = options.thinking_budget.map(|budget| {
        // The budget must be below max_tokens; leave room for the answer itself.
        if max_tokens <= budget {
            max_tokens = budget.saturating_add(DEFAULT_MAX_TOKENS);
        }
        Thinking {
            kind: "enabled",
            budget_tokens: budget,
        }
    });
    let fields = Body {
        anthropic_version: options.model.is_none().then_some(VERTEX_VERSION),
        model: options.model,
        max_tokens,
        system,
        tools,
        stream: true,
        // Extended thinking rejects any temperature but the default.
        temperature: if thinking.is_some() {
            None
        } else {
            request.temperature
        },
        thinking,
    };
    (fields, messages)
}

/// A text block, or nothing for empty text (the API rejects empty text blocks).
fn text_block(text: &str) -> Option<Block<'_>> {
    (!text.is_empty()).then_some(Block::Text {
        text,
        cache_control: None,
    })
}

fn assistant_blocks<'a>(parts: &'a [AssistantPart<'a>]) -> Vec<Block<'a>> {
    parts
        .iter()
        .filter_map(|part| match *part {
            AssistantPart::Text(text) => text_block(text),
            // Unsigned (partial, or from another provider) thinking cannot be replayed, nor
            // can Gemini's (its signatures name Gemini's parts).
            AssistantPart::Thinking {
                text,
                signature: Some(signature),
            } if !signature.is_empty() && !crate::gemini::signature::is_gemini(signature) => {
                Some(Block::Thinking {
                    thinking: text,
                    signature,
                })
            }
            AssistantPart::Thinking { .. } => None,
            AssistantPart::RedactedThinking(data) => Some(Block::RedactedThinking { data }),
            AssistantPart::ToolCall {
                id,
                name,
                arguments,
            } => Some(Block::ToolUse {
                id,
                name,
                input: ObjectArguments::new(arguments),
                cache_control: None,
            }),
        })
        .collect()
}

fn tool(def: &ToolDefinition) -> WireTool<'_> {
    WireTool {
        name: &def.name,
        description: &def.description,
        input_schema: &def.parameters,
        cache_control: None,
    }
}
