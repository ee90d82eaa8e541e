//! Azure OpenAI: OpenAI's wire APIs on a resource of one's own, where requests name a
//! deployment and carry the key in an `api-key` header (or an Entra ID token as a bearer).
//!
//! Two URL shapes, both Azure's: the v1 API (`{endpoint}/openai/v1/chat/completions` and
//! `/openai/v1/responses`, the deployment in the body's `model`) when no `api_version` is
//! set, and the dated API (`{endpoint}/openai/deployments/{deployment}/chat/completions?api-version=V`,
//! `{endpoint}/openai/responses?api-version=V`) when one is. The request and stream formats
//! are OpenAI's: the Chat Completions and Responses providers do the rest.

use crate::{OpenAiWire, ProviderSettings};

/// Env var conventionally holding an Azure OpenAI key.
pub const AZURE_OPENAI_API_KEY_ENV: &str = "AZURE_OPENAI_API_KEY";

/// The URL a model call goes to.
pub(crate) fn url(settings: &ProviderSettings) -> String {
    let endpoint = endpoint(&settings.base_url);
    let wire = settings.wire_api.unwrap_or(OpenAiWire::Chat);
    match (&settings.api_version, wire) {
        (None, OpenAiWire::Chat) => format!("{endpoint}/openai/v1/chat/completions"),
        (None, OpenAiWire::Responses) => format!("{endpoint}/openai/v1/responses"),
        (Some(version), OpenAiWire::Chat) => format!(
            "{endpoint}/openai/deployments/{}/chat/completions?api-version={}",
            encode(&settings.model),
            encode(version)
        ),
        (Some(version), OpenAiWire::Responses) => format!(
            "{endpoint}/openai/responses?api-version={}",
            encode(version)
        ),
    }
}

/// The base the model list is asked of (`GET …/models`).
pub(crate) fn models_url(settings: &ProviderSettings) -> String {
    let endpoint = endpoint(&settings.base_url);
    match &settings.api_version {
        None => format!("{endpoint}/openai/v1/models"),
        Some(version) => format!("{endpoint}/openai/models?api-version={}", encode(version)),
    }
}

/// The resource endpoint, whatever of the API's path the configured URL already has.
fn endpoint(base_url: &str) -> &str {
    let base = base_url.trim_end_matches('/');
    for suffix in ["/openai/v1", "/openai"] {
        if let Some(stripped) = base.strip_suffix(suffix) {
            return stripped;
        }
    }
    base
}

/// The authentication header: an Entra ID access token (a JWT, `eyJ…`) as a bearer token,
/// an API key as `api-key`.
pub(crate) fn auth_header(key: &str) -> (String, String) {
    if key.starts_with("eyJ") {
        ("authorization".to_owned(), format!("Bearer {key}"))
    } else {
        ("api-key".to_owned(), key.to_owned())
    }
}

/// The headers of every request: the key's, then the configured ones.
pub(crate) fn headers(settings: &ProviderSettings) -> Vec<(String, String)> {
    let mut headers = Vec::new();
    if let Some(key) = &settings.api_key {
        headers.push(auth_header(key.expose()));
    }
    headers.extend(settings.headers.iter().cloned());
    headers
}

/// A path or query segment: deployment names and versions are plain, but a stray character
/// must not change the URL's shape.
fn encode(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~') {
                vec![c]
            } else {
                let mut buf = [0u8; 4];
                c.encode_utf8(&mut buf)
                    .bytes()
                    .flat_map(|b| format!("%{b:02X}").chars().collect::<Vec<_>>())
                    .collect()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ApiKey, ProviderKind};

    fn settings(base: &str, version: Option<&str>, wire: Option<OpenAiWire>) -> ProviderSettings {
        let mut settings = ProviderSettings::new(ProviderKind::Azure, "my-gpt-4o");
        settings.base_url = base.to_owned();
        settings.api_version = version.map(str::to_owned);
        settings.wire_api = wire;
        settings
    }

    #[test]
    fn both_url_shapes_for_both_wire_apis() {
        let base = "https://res.openai.azure.com";
        assert_eq!(
            url(&settings(base, None, None)),
            "https://res.openai.azure.com/openai/v1/chat/completions"
        );
        assert_eq!(
            url(&settings(
                "https://res.openai.azure.com/openai/v1/",
                None,
                Some(OpenAiWire::Responses)
            )),
            "https://res.openai.azure.com/openai/v1/responses"
        );
        assert_eq!(
            url(&settings(base, Some("2024-10-21"), None)),
            "https://res.openai.azure.com/openai/deployments/my-gpt-4o/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(
            url(&settings(
                "https://res.openai.azure.com/openai",
                Some("2025-04-01-preview"),
                Some(OpenAiWire::Responses)
            )),
            "https://res.openai.azure.com/openai/responses?api-version=2025-04-01-preview"
        );
        let mut odd = settings(base, Some("1&x=2"), None);
        odd.model = "a/b?c".to_owned();
        assert_eq!(
            url(&odd),
            "https://res.openai.azure.com/openai/deployments/a%2Fb%3Fc/chat/completions?api-version=1%26x%3D2"
        );
        assert_eq!(
            models_url(&settings(base, None, None)),
            "https://res.openai.azure.com/openai/v1/models"
        );
    }

    #[test]
    fn a_key_goes_in_api_key_and_an_entra_token_as_a_bearer() {
        let mut s = settings("https://r.openai.azure.com", None, None);
        s.api_key = Some(ApiKey::new("0123abcd"));
        assert_eq!(headers(&s), [("api-key".to_owned(), "0123abcd".to_owned())]);
        s.api_key = Some(ApiKey::new("eyJhbGciOi.payload.sig"));
        assert_eq!(
            headers(&s),
            [(
                "authorization".to_owned(),
                "Bearer eyJhbGciOi.payload.sig".to_owned()
            )]
        );
    }
}
