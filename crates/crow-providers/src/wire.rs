//! Pieces of request bodies and requests that several wire APIs share.

use std::borrow::Cow;

use crow_core::AssistantPart;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::ProviderSettings;

/// `Authorization: Bearer KEY` when there is a key (local servers need none, and an empty
/// bearer confuses some of them), then the configured extra headers.
pub(crate) fn bearer_headers(settings: &ProviderSettings) -> Vec<(String, String)> {
    let mut headers = Vec::new();
    if let Some(key) = &settings.api_key {
        headers.push((
            "authorization".to_owned(),
            format!("Bearer {}", key.expose()),
        ));
    }
    headers.extend(settings.headers.iter().cloned());
    headers
}

/// The text parts of an assistant message as one string, borrowed when there is one part;
/// `None` when there is no text.
pub(crate) fn joined_text<'a>(parts: &'a [AssistantPart<'a>]) -> Option<Cow<'a, str>> {
    let mut texts = parts.iter().filter_map(|p| match p {
        AssistantPart::Text(t) if !t.is_empty() => Some(*t),
        _ => None,
    });
    match (texts.next(), texts.next()) {
        (None, _) => None,
        (Some(only), None) => Some(Cow::Borrowed(only)),
        (Some(first), Some(second)) => {
            let mut joined = String::from(first);
            joined.push_str(second);
            texts.for_each(|t| joined.push_str(t));
            Some(Cow::Owned(joined))
        }
    }
}

/// A tool call's arguments for the APIs that take them as a JSON object (Anthropic's
/// `input`, Ollama's `arguments`): the model's own text when it is an object, replayed byte
/// for byte, else `{}`.
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum ObjectArguments<'a> {
    Raw(&'a RawValue),
    Empty(EmptyObject),
}

#[derive(Serialize)]
pub(crate) struct EmptyObject {}

impl<'a> ObjectArguments<'a> {
    pub(crate) fn new(arguments: &'a str) -> Self {
        match serde_json::from_str::<&RawValue>(arguments) {
            Ok(raw) if raw.get().starts_with('{') => Self::Raw(raw),
            _ => Self::Empty(EmptyObject {}),
        }
    }
}

/// A tool call's arguments for the APIs that take them as a string (OpenAI's): the model's
/// own text when it is a JSON object, else `"{}"`. Malformed text replayed verbatim makes
/// some backends (Anthropic behind LiteLLM) refuse every later request; the model already
/// saw the error result that quotes it.
pub(crate) fn object_arguments_text(arguments: &str) -> &str {
    match ObjectArguments::new(arguments) {
        ObjectArguments::Raw(_) => arguments,
        ObjectArguments::Empty(_) => "{}",
    }
}

/// By the text of the raw arguments (`RawValue` has no `Hash` of its own).
impl std::hash::Hash for ObjectArguments<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            Self::Raw(raw) => raw.get().hash(state),
            Self::Empty(_) => state.write_u8(0),
        }
    }
}
