//! The models a provider serves: `GET /models` of an OpenAI-compatible server (vLLM,
//! llama.cpp, LiteLLM, OpenRouter), Anthropic's `GET /v1/models`, Ollama's `GET /api/tags` or
//! Gemini's `GET /models` (the models that generate content, with their `inputTokenLimit`), with
//! the context window where the answer or crow's catalog knows it. For `crow models`.

use std::time::Duration;

use serde_json::Value;

use crate::error::{classify_status, classify_transport, server_message};
use crate::{ProviderKind, ProviderSettings, catalog};

/// A plain 404 (not Ollama's "model not found") from a server configured as Ollama.
pub(crate) fn not_ollama(url: &str, said: &str) -> String {
    format!(
        "not found (HTTP 404): {url}{said} — the server does not speak Ollama's API; for an \
         OpenAI-compatible server (llama.cpp, vLLM, LM Studio) use type = \"openai\" with the \
         base URL ending in /v1"
    )
}

/// A 404 on the model list: the base URL is not the API the provider's type speaks. A plain
/// 404 to Ollama's `/api/tags` is a server that is not Ollama at all.
fn not_listed(kind: ProviderKind, url: &str, body: &str) -> String {
    let said = server_message(body);
    let said = if said.is_empty() {
        String::new()
    } else {
        format!(" ({said})")
    };
    match kind {
        ProviderKind::Ollama => not_ollama(url, &said),
        _ => format!(
            "not found (HTTP 404): {url}{said} — the server lists no models there; check the \
             base URL (OpenAI-compatible servers usually end in /v1)"
        ),
    }
}

/// Vertex AI's publisher models: `publisherModels[].name`, `publishers/P/models/ID`.
fn vertex_models(body: &Value) -> Vec<ListedModel> {
    let mut models: Vec<ListedModel> = body["publisherModels"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item["name"].as_str())
                .filter_map(|name| name.rsplit('/').next())
                .map(|id| ListedModel {
                    id: id.to_owned(),
                    context_window: catalog::context_window(id),
                })
                .collect()
        })
        .unwrap_or_default();
    models.sort_by(|a, b| a.id.cmp(&b.id));
    models
}

/// One model a provider lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedModel {
    pub id: String,
    /// Tokens, from the server's answer (OpenRouter, vLLM) or the catalog.
    pub context_window: Option<u64>,
}

/// Asks the provider which models it serves. The error is one line naming the URL (never
/// the key) and, for a refused key, the setting to check.
pub async fn list_models(settings: &ProviderSettings) -> Result<Vec<ListedModel>, String> {
    let base = settings.base_url.trim_end_matches('/');
    let client = crate::http::client().map_err(|e| e.to_string())?;
    let (url, mut request) = match settings.kind {
        ProviderKind::OpenAi => {
            let url = format!("{base}/models");
            let mut request = client.get(&url);
            if let Some(key) = &settings.api_key {
                request = request.bearer_auth(key.expose());
            }
            (url, request)
        }
        ProviderKind::Anthropic => {
            let base = base.strip_suffix("/v1").unwrap_or(base);
            let url = format!("{base}/v1/models?limit=1000");
            let mut request = client
                .get(&url)
                .header("anthropic-version", crate::anthropic::ANTHROPIC_VERSION);
            if let Some(key) = &settings.api_key {
                request = request.header("x-api-key", key.expose());
            }
            (url, request)
        }
        ProviderKind::Ollama => {
            let url = format!("{}/api/tags", crate::ollama::root(base));
            let mut request = client.get(&url);
            if let Some(key) = &settings.api_key {
                request = request.bearer_auth(key.expose());
            }
            (url, request)
        }
        ProviderKind::Azure => {
            let url = crate::azure::models_url(settings);
            let mut request = client.get(&url);
            if let Some(key) = &settings.api_key {
                let (name, value) = crate::azure::auth_header(key.expose());
                request = request.header(name, value);
            }
            (url, request)
        }
        ProviderKind::Vertex => {
            let url = crate::vertex::models_url(settings).map_err(|e| e.to_string())?;
            let auth = crate::vertex::auth::GoogleAuth::discover(
                settings.api_key.as_ref(),
                settings.cloud.credentials_file.as_deref(),
            )?;
            let token = auth.token().await.map_err(|e| e.message)?;
            let mut request = client.get(&url).bearer_auth(token.expose());
            if let Some(project) = auth.quota_project() {
                request = request.header("x-goog-user-project", project);
            }
            (url, request)
        }
        ProviderKind::Bedrock => {
            return Err(format!(
                "crow models does not list Bedrock's models: that takes Bedrock's control-plane \
                 API; run `aws bedrock list-foundation-models --region {}` (or list-inference-profiles) \
                 and set the model id or inference profile as providers.{}.model",
                settings.cloud.region.as_deref().unwrap_or("REGION"),
                settings.name
            ));
        }
        ProviderKind::Gemini => {
            let url = format!("{base}/models?pageSize=1000");
            let mut request = client.get(&url);
            if let Some(key) = &settings.api_key {
                request = request.header("x-goog-api-key", key.expose());
            }
            (url, request)
        }
    };
    for (name, value) in &settings.headers {
        request = request.header(name, value);
    }
    // The same words as a model call's errors: one wording for one failure.
    let mut ctx = settings.error_context(match settings.kind {
        ProviderKind::OpenAi => crate::openai::OPENAI_API_KEY_ENV,
        ProviderKind::Anthropic => crate::anthropic::ANTHROPIC_API_KEY_ENV,
        ProviderKind::Ollama => "OLLAMA_API_KEY",
        ProviderKind::Gemini => crate::gemini::GEMINI_API_KEY_ENV,
        ProviderKind::Azure => crate::azure::AZURE_OPENAI_API_KEY_ENV,
        ProviderKind::Vertex => crate::vertex::GOOGLE_APPLICATION_CREDENTIALS_ENV,
        ProviderKind::Bedrock => crate::bedrock::AWS_ACCESS_KEY_ID_ENV,
    });
    ctx.url.clone_from(&url);
    let response = request
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| classify_transport(&e, &ctx).message)?;
    let status = response.status();
    if !status.is_success() {
        let headers = response.headers().clone();
        let text = response.text().await.unwrap_or_default();
        if status.as_u16() == 404 {
            return Err(not_listed(settings.kind, &url, &text));
        }
        return Err(classify_status(status.as_u16(), &headers, &text, &ctx).message);
    }
    let body: Value = response
        .json()
        .await
        .map_err(|e| format!("{url} answered {status} without a JSON model list: {e}"))?;
    if settings.kind == ProviderKind::Gemini {
        return Ok(gemini_models(&body));
    }
    if settings.kind == ProviderKind::Vertex {
        return Ok(vertex_models(&body));
    }
    // OpenAI and Anthropic list `data[].id`; Ollama's `/api/tags` lists `models[].name`.
    let items = body["data"]
        .as_array()
        .or_else(|| body["models"].as_array());
    let mut models: Vec<ListedModel> = items
        .map(|items| {
            items
                .iter()
                .filter_map(|item| {
                    let id = item["id"]
                        .as_str()
                        .or_else(|| item["name"].as_str())?
                        .to_owned();
                    // OpenRouter says `context_length`, vLLM `max_model_len`.
                    let window = ["context_length", "max_model_len", "context_window"]
                        .iter()
                        .find_map(|k| item[*k].as_u64())
                        .or_else(|| catalog::context_window(&id));
                    Some(ListedModel {
                        id,
                        context_window: window,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    models.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(models)
}

/// Gemini's list: `models[]` with `name` (`models/gemini-2.5-pro`), the methods each supports
/// and `inputTokenLimit`; only the models that answer `generateContent` (not embedding ones).
fn gemini_models(body: &Value) -> Vec<ListedModel> {
    let mut models: Vec<ListedModel> = body["models"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| {
            item["supportedGenerationMethods"]
                .as_array()
                .is_none_or(|methods| methods.iter().any(|m| m == "generateContent"))
        })
        .filter_map(|item| {
            let id = crate::gemini::model_id(item["name"].as_str()?).to_owned();
            let context_window = item["inputTokenLimit"]
                .as_u64()
                .or_else(|| catalog::context_window(&id));
            Some(ListedModel { id, context_window })
        })
        .collect();
    models.sort_by(|a, b| a.id.cmp(&b.id));
    models
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_lists_the_models_that_generate_content() {
        let body = serde_json::json!({"models": [
            {"name": "models/gemini-2.5-pro", "inputTokenLimit": 1048576,
             "supportedGenerationMethods": ["generateContent", "countTokens"]},
            {"name": "models/text-embedding-004", "inputTokenLimit": 2048,
             "supportedGenerationMethods": ["embedContent"]},
            {"name": "models/gemini-2.5-flash"},
        ]});
        assert_eq!(
            gemini_models(&body),
            vec![
                ListedModel {
                    id: "gemini-2.5-flash".into(),
                    context_window: Some(1_048_576)
                },
                ListedModel {
                    id: "gemini-2.5-pro".into(),
                    context_window: Some(1_048_576)
                },
            ]
        );
    }
}
