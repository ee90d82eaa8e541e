//! The body of Bedrock's ConverseStream: `system`, `toolConfig` (tool specs), the inference
//! and thinking settings, then `messages` last, built from borrowed crow-core messages.
//!
//! Roles alternate, user first (like Anthropic's). Cache points go after the system prompt,
//! after the tools and at the end of the conversation, where the model caches (Claude 3.5
//! Haiku, 3.7 and later, Amazon Nova); other models refuse them. Signed reasoning is sent
//! back as `reasoningContent` (Claude's signatures are valid on every platform); unsigned or
//! Gemini-signed thinking never is.

use crow_core::{AssistantPart, ChatRequest, Message, ToolDefinition};
use serde::Serialize;

use crate::wire::ObjectArguments;

/// Response limit when neither the request nor the settings give one.
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 8192;

pub(super) struct BodyOptions {
    pub max_tokens: Option<u32>,
    /// Claude's extended thinking budget, sent in `additionalModelRequestFields`.
    pub thinking_budget: Option<u32>,
    pub cache_points: bool,
}

/// The body's fields but `messages`, which [`crate::encode::PrefixCache`] appends.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Body<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<SystemBlock<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<ToolConfig<'a>>,
    inference_config: InferenceConfig,
    #[serde(skip_serializing_if = "Option::is_none")]
    additional_model_request_fields: Option<serde_json::Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum SystemBlock<'a> {
    Text(&'a str),
    CachePoint(CachePoint),
}

#[derive(Serialize, Hash, Clone, Copy)]
struct CachePoint {
    #[serde(rename = "type")]
    kind: &'static str,
}

const CACHE_POINT: CachePoint = CachePoint { kind: "default" };

#[derive(Serialize)]
struct ToolConfig<'a> {
    tools: Vec<ToolEntry<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum ToolEntry<'a> {
    ToolSpec(ToolSpec<'a>),
    CachePoint(CachePoint),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolSpec<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: InputSchema<'a>,
}

#[derive(Serialize)]
struct InputSchema<'a> {
    json: &'a serde_json::Value,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InferenceConfig {
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
}

#[derive(Serialize, Hash)]
pub(super) struct WireMessage<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize, Hash)]
#[serde(rename_all = "camelCase")]
enum Block<'a> {
    Text(&'a str),
    Image(Image<'a>),
    ReasoningContent(Reasoning<'a>),
    ToolUse(ToolUse<'a>),
    ToolResult(ToolResult<'a>),
    CachePoint(CachePoint),
}

#[derive(Serialize, Hash)]
struct Image<'a> {
    format: &'a str,
    source: ImageSource<'a>,
}

#[derive(Serialize, Hash)]
struct ImageSource<'a> {
    /// Base64, as JSON carries a blob.
    bytes: &'a str,
}

#[derive(Serialize, Hash)]
#[serde(rename_all = "camelCase")]
enum Reasoning<'a> {
    ReasoningText {
        text: &'a str,
        signature: &'a str,
    },
    /// Base64 of the encrypted reasoning, as it came.
    RedactedContent(&'a str),
}

#[derive(Serialize, Hash)]
#[serde(rename_all = "camelCase")]
struct ToolUse<'a> {
    tool_use_id: &'a str,
    name: &'a str,
    input: ObjectArguments<'a>,
}

#[derive(Serialize, Hash)]
#[serde(rename_all = "camelCase")]
struct ToolResult<'a> {
    tool_use_id: &'a str,
    content: [ResultText<'a>; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'static str>,
}

#[derive(Serialize, Hash)]
struct ResultText<'a> {
    text: &'a str,
}

/// Builds the body's fields and its messages. Pure: the same request gives the same bytes.
pub(super) fn body<'a>(
    request: &'a ChatRequest<'a>,
    options: &BodyOptions,
) -> (Body<'a>, Vec<WireMessage<'a>>) {
    let mut messages: Vec<WireMessage<'a>> = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        let (role, blocks) = match message {
            Message::User { text, images } => (
                "user",
                images
                    .iter()
                    .map(|i| {
                        Block::Image(Image {
                            format: image_format(i.mime_type),
                            source: ImageSource { bytes: i.data },
                        })
                    })
                    .chain((!text.is_empty()).then_some(Block::Text(text)))
                    .collect::<Vec<_>>(),
            ),
            Message::Assistant { parts } => ("assistant", assistant_blocks(parts)),
            Message::ToolResults { results } => (
                "user",
                results
                    .iter()
                    .map(|r| {
                        Block::ToolResult(ToolResult {
                            tool_use_id: r.call_id,
                            content: [ResultText { text: r.content }],
                            status: r.is_error.then_some("error"),
                        })
                    })
                    .collect(),
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => messages.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    if options.cache_points
        && let Some(last) = messages.last_mut()
    {
        last.content.push(Block::CachePoint(CACHE_POINT));
    }

    let mut system = Vec::new();
    if !request.system.is_empty() {
        system.push(SystemBlock::Text(request.system));
        if options.cache_points {
            system.push(SystemBlock::CachePoint(CACHE_POINT));
        }
    }
    let tool_config = (!request.tools.is_empty()).then(|| {
        let mut tools: Vec<ToolEntry<'a>> = request.tools.iter().map(tool).collect();
        if options.cache_points {
            tools.push(ToolEntry::CachePoint(CACHE_POINT));
        }
        ToolConfig { tools }
    });

    let mut max_tokens = request
        .max_tokens
        .or(options.max_tokens)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    let thinking = options.thinking_budget.map(|budget| {
        if max_tokens <= budget {
            max_tokens = budget.saturating_add(DEFAULT_MAX_TOKENS);
        }
        serde_json::json!({"thinking": {"type": "enabled", "budget_tokens": budget}})
    });
    let fields = Body {
        system,
        tool_config,
        inference_config: InferenceConfig {
            max_tokens,
            // Extended thinking refuses any temperature but the default.
            temperature: if thinking.is_some() {
                None
            } else {
                request.temperature
            },
        },
        additional_model_request_fields: thinking,
    };
    (fields, messages)
}

/// Converse's image format from a MIME type (`image/png` → `png`).
fn image_format(mime: &str) -> &str {
    match mime.strip_prefix("image/").unwrap_or(mime) {
        "jpg" => "jpeg",
        other => other,
    }
}

fn assistant_blocks<'a>(parts: &'a [AssistantPart<'a>]) -> Vec<Block<'a>> {
    parts
        .iter()
        .filter_map(|part| match *part {
            AssistantPart::Text(text) => (!text.is_empty()).then_some(Block::Text(text)),
            AssistantPart::Thinking {
                text,
                signature: Some(signature),
            } if !signature.is_empty() && !crate::gemini::signature::is_gemini(signature) => {
                Some(Block::ReasoningContent(Reasoning::ReasoningText {
                    text,
                    signature,
                }))
            }
            AssistantPart::Thinking { .. } => None,
            AssistantPart::RedactedThinking(data) => {
                Some(Block::ReasoningContent(Reasoning::RedactedContent(data)))
            }
            AssistantPart::ToolCall {
                id,
                name,
                arguments,
            } => Some(Block::ToolUse(ToolUse {
                tool_use_id: id,
                name,
                input: ObjectArguments::new(arguments),
            })),
        })
        .collect()
}

fn tool(def: &ToolDefinition) -> ToolEntry<'_> {
    ToolEntry::ToolSpec(ToolSpec {
        name: &def.name,
        description: &def.description,
        input_schema: InputSchema {
            json: &def.parameters,
        },
    })
}
