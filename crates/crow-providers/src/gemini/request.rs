//! The body of Gemini's `streamGenerateContent`: `systemInstruction`, `tools` (function
//! declarations in Gemini's schema subset), `generationConfig` (limits and thinking), then
//! `contents` last, built from borrowed crow-core messages.
//!
//! A Gemini thought signature belongs to the part it came on (a function call, the text, a
//! thought). crow keeps it as a thinking block's signature naming that part (`signature.rs`'s
//! format); here it goes back on the same part. Another provider's thinking is never sent.

use crow_core::{AssistantPart, ChatRequest, Message, ToolDefinition};
use serde::Serialize;
use serde_json::Value;

use super::signature::{Target, parse as parse_signature};
use crate::wire::ObjectArguments;

pub(super) struct BodyOptions {
    pub max_tokens: Option<u32>,
    pub thinking: Option<ThinkingConfig>,
}

/// The body's fields but `contents`, which [`crate::encode::PrefixCache`] appends.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<SystemInstruction<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tools<'a>>,
    generation_config: GenerationConfig,
}

#[derive(Serialize)]
struct SystemInstruction<'a> {
    parts: [TextOnly<'a>; 1],
}

#[derive(Serialize)]
struct TextOnly<'a> {
    text: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Tools<'a> {
    function_declarations: Vec<FunctionDeclaration<'a>>,
}

#[derive(Serialize)]
struct FunctionDeclaration<'a> {
    name: &'a str,
    description: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_config: Option<ThinkingConfig>,
}

#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ThinkingConfig {
    /// `None`: the model decides how long to think (dynamic thinking).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking_budget: Option<u32>,
    /// Thought summaries streamed as `thought: true` parts (crow's reasoning).
    pub include_thoughts: bool,
}

/// One turn of `contents`.
#[derive(Serialize, Hash)]
pub(super) struct Content<'a> {
    role: &'static str,
    parts: Vec<Part<'a>>,
}

#[derive(Serialize, Hash, Default)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    thought: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    inline_data: Option<InlineData<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<FunctionCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_response: Option<FunctionResponse<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'a str>,
}

#[derive(Serialize, Hash)]
#[serde(rename_all = "camelCase")]
struct InlineData<'a> {
    mime_type: &'a str,
    data: &'a str,
}

#[derive(Serialize, Hash)]
struct FunctionCall<'a> {
    name: &'a str,
    args: ObjectArguments<'a>,
}

#[derive(Serialize, Hash)]
struct FunctionResponse<'a> {
    name: &'a str,
    response: Outcome<'a>,
}

/// `{"result": …}` or `{"error": …}`, the shape Gemini's documentation gives.
#[derive(Serialize, Hash)]
enum Outcome<'a> {
    #[serde(rename = "result")]
    Result(&'a str),
    #[serde(rename = "error")]
    Error(&'a str),
}

/// Builds the body's fields and its contents. Pure: the same request gives the same bytes.
pub(super) fn body<'a>(
    request: &'a ChatRequest<'a>,
    options: &BodyOptions,
) -> (Body<'a>, Vec<Content<'a>>) {
    let mut contents: Vec<Content<'a>> = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        let (role, parts) = match message {
            Message::User { text, images } => (
                "user",
                images
                    .iter()
                    .map(|i| Part {
                        inline_data: Some(InlineData {
                            mime_type: i.mime_type,
                            data: i.data,
                        }),
                        ..Part::default()
                    })
                    .chain((!text.is_empty()).then(|| Part {
                        text: Some(text),
                        ..Part::default()
                    }))
                    .collect(),
            ),
            Message::Assistant { parts } => ("model", model_parts(parts)),
            // All results of one batch in one user turn: Gemini pairs them with the
            // preceding turn's function calls.
            Message::ToolResults { results } => (
                "user",
                results
                    .iter()
                    .map(|r| Part {
                        function_response: Some(FunctionResponse {
                            name: r.name,
                            response: if r.is_error {
                                Outcome::Error(r.content)
                            } else {
                                Outcome::Result(r.content)
                            },
                        }),
                        ..Part::default()
                    })
                    .collect(),
            ),
        };
        if parts.is_empty() {
            continue;
        }
        // A user text after tool results joins their turn, as the API expects turns to
        // alternate.
        match contents.last_mut() {
            Some(last) if last.role == role => last.parts.extend(parts),
            _ => contents.push(Content { role, parts }),
        }
    }
    let declarations: Vec<FunctionDeclaration<'a>> =
        request.tools.iter().map(declaration).collect();
    let fields = Body {
        system_instruction: (!request.system.is_empty()).then_some(SystemInstruction {
            parts: [TextOnly {
                text: request.system,
            }],
        }),
        tools: if declarations.is_empty() {
            Vec::new()
        } else {
            vec![Tools {
                function_declarations: declarations,
            }]
        },
        generation_config: GenerationConfig {
            max_output_tokens: request.max_tokens.or(options.max_tokens),
            temperature: request.temperature,
            thinking_config: options.thinking,
        },
    };
    (fields, contents)
}

/// A model turn's parts, each Gemini signature back on the part it came with. Thinking
/// blocks precede the text and calls of their response in crow's history, so a signature
/// naming "call k" means the k-th call after it.
fn model_parts<'a>(parts: &'a [AssistantPart<'a>]) -> Vec<Part<'a>> {
    let mut out = Vec::with_capacity(parts.len());
    let mut text_signature: Option<&'a str> = None;
    let mut call_signatures: Vec<(usize, &'a str)> = Vec::new();
    let mut calls = 0usize;
    for part in parts {
        match *part {
            AssistantPart::Thinking {
                text,
                signature: Some(signature),
            } => match parse_signature(signature) {
                Some((Target::Text, sig)) => text_signature = Some(sig),
                Some((Target::Call(k), sig)) => call_signatures.push((calls + k, sig)),
                Some((Target::Thought, sig)) => out.push(Part {
                    text: Some(text),
                    thought: true,
                    thought_signature: Some(sig),
                    ..Part::default()
                }),
                // Another provider's (or a partial) thinking cannot go to Gemini.
                None => {}
            },
            AssistantPart::Thinking { .. } | AssistantPart::RedactedThinking(_) => {}
            AssistantPart::Text(text) if !text.is_empty() => out.push(Part {
                text: Some(text),
                thought_signature: text_signature.take(),
                ..Part::default()
            }),
            AssistantPart::Text(_) => {}
            AssistantPart::ToolCall {
                name, arguments, ..
            } => {
                let signature = call_signatures
                    .iter()
                    .find(|(at, _)| *at == calls)
                    .map(|(_, sig)| *sig);
                out.push(Part {
                    function_call: Some(FunctionCall {
                        name,
                        args: ObjectArguments::new(arguments),
                    }),
                    thought_signature: signature,
                    ..Part::default()
                });
                calls += 1;
            }
        }
    }
    // A signature that came on an empty closing text part goes back on one.
    if let Some(sig) = text_signature
        && !out.is_empty()
    {
        out.push(Part {
            text: Some(""),
            thought_signature: Some(sig),
            ..Part::default()
        });
    }
    out
}

fn declaration(def: &ToolDefinition) -> FunctionDeclaration<'_> {
    FunctionDeclaration {
        name: &def.name,
        description: &def.description,
        parameters: super::schema::parameters(&def.parameters),
    }
}
