//! The body of OpenAI's `POST /v1/responses`, built from borrowed crow-core messages.
//! Stateless (`store: false`): every request carries the conversation, reasoning included
//! as the encrypted items the API returned, so nothing is kept on OpenAI's side.

use crow_core::{AssistantPart, ChatRequest, Message, ToolDefinition};
use serde::Serialize;

/// Settings that shape the body beyond the request itself.
pub(super) struct BodyOptions<'a> {
    pub model: &'a str,
    pub max_tokens: Option<u32>,
    /// A reasoning model: ask for summaries and the encrypted reasoning to carry forward.
    pub reasoning: bool,
    pub effort: Option<&'a str>,
    /// `auto`, `concise` or `detailed`; `None`: no summary.
    pub summary: Option<&'a str>,
    pub prompt_cache_key: bool,
}

/// The body's fields but `input`, which [`crate::encode::PrefixCache`] appends.
#[derive(Serialize)]
pub(super) struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    instructions: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    stream: bool,
    store: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    include: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<Reasoning<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
}

#[derive(Serialize)]
struct Reasoning<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<&'a str>,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

/// One item of `input`.
#[derive(Serialize, Hash)]
#[serde(untagged)]
pub(super) enum Item<'a> {
    Message {
        role: &'static str,
        content: Content<'a>,
    },
    Typed(TypedItem<'a>),
}

#[derive(Serialize, Hash)]
#[serde(untagged)]
pub(super) enum Content<'a> {
    Text(&'a str),
    Parts(Vec<Part<'a>>),
}

#[derive(Serialize, Hash)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Part<'a> {
    InputText { text: &'a str },
    InputImage { image_url: String },
}

#[derive(Serialize, Hash)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum TypedItem<'a> {
    Reasoning {
        id: &'a str,
        summary: Vec<Summary<'a>>,
        encrypted_content: &'a str,
    },
    FunctionCall {
        call_id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
    FunctionCallOutput {
        call_id: &'a str,
        output: &'a str,
    },
}

#[derive(Serialize, Hash)]
pub(super) struct Summary<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

/// A reasoning item as crow keeps it: the thinking block's signature is `ID ENCRYPTED`.
pub(crate) fn split_signature(signature: &str) -> Option<(&str, &str)> {
    let (id, encrypted) = signature.split_once(' ')?;
    (id.starts_with("rs_") && !encrypted.is_empty()).then_some((id, encrypted))
}

/// Builds the body's fields and its input items. Pure: the same request gives the same
/// bytes.
pub(super) fn body<'a>(
    request: &'a ChatRequest<'a>,
    options: &BodyOptions<'a>,
) -> (Body<'a>, Vec<Item<'a>>) {
    let mut items = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        match message {
            Message::User { text, images } if images.is_empty() => items.push(Item::Message {
                role: "user",
                content: Content::Text(text),
            }),
            Message::User { text, images } => {
                let mut parts = Vec::with_capacity(images.len() + 1);
                if !text.is_empty() {
                    parts.push(Part::InputText { text });
                }
                parts.extend(images.iter().map(|i| Part::InputImage {
                    image_url: format!("data:{};base64,{}", i.mime_type, i.data),
                }));
                items.push(Item::Message {
                    role: "user",
                    content: Content::Parts(parts),
                });
            }
            Message::Assistant { parts } => {
                for part in parts {
                    match part {
                        // Only reasoning this API produced (its id and encrypted content in
                        // the signature) goes back; another provider's thinking cannot.
                        AssistantPart::Thinking {
                            text,
                            signature: Some(signature),
                        } => {
                            if let Some((id, encrypted)) = split_signature(signature) {
                                let summary = if text.is_empty() {
                                    Vec::new()
                                } else {
                                    vec![Summary {
                                        kind: "summary_text",
                                        text,
                                    }]
                                };
                                items.push(Item::Typed(TypedItem::Reasoning {
                                    id,
                                    summary,
                                    encrypted_content: encrypted,
                                }));
                            }
                        }
                        AssistantPart::Text(text) if !text.is_empty() => {
                            items.push(Item::Message {
                                role: "assistant",
                                content: Content::Text(text),
                            });
                        }
                        AssistantPart::ToolCall {
                            id,
                            name,
                            arguments,
                        } => items.push(Item::Typed(TypedItem::FunctionCall {
                            call_id: id,
                            name,
                            arguments: crate::wire::object_arguments_text(arguments),
                        })),
                        _ => {}
                    }
                }
            }
            Message::ToolResults { results } => {
                items.extend(results.iter().map(|r| {
                    Item::Typed(TypedItem::FunctionCallOutput {
                        call_id: r.call_id,
                        output: r.content,
                    })
                }));
            }
        }
    }
    let fields = Body {
        model: options.model,
        instructions: request.system,
        tools: request.tools.iter().map(tool).collect(),
        stream: true,
        store: false,
        include: if options.reasoning {
            vec!["reasoning.encrypted_content"]
        } else {
            Vec::new()
        },
        reasoning: options.reasoning.then_some(Reasoning {
            effort: options.effort,
            summary: options.summary,
        }),
        max_output_tokens: request.max_tokens.or(options.max_tokens),
        // Reasoning models refuse a temperature.
        temperature: request.temperature.filter(|_| !options.reasoning),
        prompt_cache_key: options
            .prompt_cache_key
            .then_some(request.session_id)
            .filter(|id| !id.is_empty()),
    };
    (fields, items)
}

fn tool(def: &ToolDefinition) -> WireTool<'_> {
    WireTool {
        kind: "function",
        name: &def.name,
        description: &def.description,
        parameters: &def.parameters,
    }
}
