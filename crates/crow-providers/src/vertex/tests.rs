//! Vertex AI: the URLs of both publishers, the Anthropic body's Vertex form, and a model call
//! against a loopback server that issues tokens, wants them, and refuses an expired one.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap as AxumHeaders, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::post;
use crow_core::{ChatRequest, Message, ProviderErrorKind, StreamDelta};
use futures::StreamExt;

use super::auth::tests::service_account;
use super::*;
use crate::{ApiKey, CloudSettings, ProviderKind};

fn settings(model: &str, location: Option<&str>) -> ProviderSettings {
    let mut settings = ProviderSettings::new(ProviderKind::Vertex, model);
    settings.cloud = CloudSettings {
        project: Some("my-proj".into()),
        location: location.map(str::to_owned),
        ..CloudSettings::default()
    };
    settings.api_key = Some(ApiKey::new("ya29.fixed"));
    settings
}

#[test]
fn both_publishers_regional_and_global_urls() {
    assert_eq!(
        url(&settings("gemini-2.5-pro", Some("us-central1"))).unwrap(),
        "https://us-central1-aiplatform.googleapis.com/v1/projects/my-proj/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    );
    assert_eq!(
        url(&settings("claude-sonnet-4-5@20250929", Some("us-east5"))).unwrap(),
        "https://us-east5-aiplatform.googleapis.com/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
    );
    assert_eq!(
        url(&settings("gemini-2.5-flash", None)).unwrap(),
        "https://aiplatform.googleapis.com/v1/projects/my-proj/locations/global/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    // The publisher setting wins over the name; a base URL replaces the host part.
    let mut odd = settings("my-tuned-claude", Some("europe-west1"));
    odd.cloud.publisher = Some(VertexPublisher::Anthropic);
    odd.base_url = "http://127.0.0.1:9/v1/".into();
    assert_eq!(
        url(&odd).unwrap(),
        "http://127.0.0.1:9/v1/projects/my-proj/locations/europe-west1/publishers/anthropic/models/my-tuned-claude:streamRawPredict"
    );
    assert_eq!(
        models_url(&odd).unwrap(),
        "http://127.0.0.1:9/v1beta1/publishers/anthropic/models?pageSize=1000"
    );
    let mut none = settings("gemini-2.5-pro", None);
    none.cloud.project = None;
    let err = VertexProvider::new(&none).unwrap_err().to_string();
    assert!(
        err.contains("providers.vertex.project") && err.contains("GOOGLE_CLOUD_PROJECT"),
        "{err}"
    );
}

fn request() -> ChatRequest<'static> {
    ChatRequest {
        system: "sys",
        messages: vec![Message::User {
            text: "hi",
            images: vec![],
        }],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "s",
    }
}

#[test]
fn claude_on_vertex_names_the_version_not_the_model() {
    let provider = VertexProvider::new(&settings("claude-opus-4-1", Some("us-east5"))).unwrap();
    let body: serde_json::Value =
        serde_json::from_slice(&provider.encode(&request()).unwrap()).unwrap();
    assert_eq!(body["anthropic_version"], "vertex-2023-10-16");
    assert!(body.get("model").is_none(), "{body}");
    assert_eq!(body["stream"], true);
    assert_eq!(body["messages"][0]["content"][0]["text"], "hi");
    let gemini = VertexProvider::new(&settings("gemini-2.5-pro", None)).unwrap();
    let body: serde_json::Value =
        serde_json::from_slice(&gemini.encode(&request()).unwrap()).unwrap();
    assert_eq!(body["contents"][0]["parts"][0]["text"], "hi");
    assert_eq!(body["systemInstruction"]["parts"][0]["text"], "sys");
}

/// A Vertex server on loopback: a token endpoint, and a model endpoint that answers 401 to
/// the first `refuse` tokens it sees, then streams.
#[derive(Clone, Default)]
struct Vertex {
    issued: Arc<Mutex<usize>>,
    seen: Arc<Mutex<Vec<(String, String)>>>,
    refuse: Arc<Mutex<usize>>,
}

async fn vertex_server(refuse: usize) -> (String, Vertex) {
    let state = Vertex {
        refuse: Arc::new(Mutex::new(refuse)),
        ..Vertex::default()
    };
    let app = axum::Router::new()
        .route(
            "/token",
            post(|State(v): State<Vertex>| async move {
                let n = {
                    let mut issued = v.issued.lock().unwrap();
                    *issued += 1;
                    *issued
                };
                axum::Json(serde_json::json!({"access_token": format!("ya29.t{n}"), "expires_in": 3600}))
            }),
        )
        .route(
            "/v1/{*rest}",
            post(
                |State(v): State<Vertex>, uri: Uri, headers: AxumHeaders| async move {
                    let auth = headers
                        .get("authorization")
                        .and_then(|h| h.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    v.seen.lock().unwrap().push((uri.to_string(), auth));
                    let refuse = {
                        let mut refuse = v.refuse.lock().unwrap();
                        let now = *refuse > 0;
                        *refuse = refuse.saturating_sub(1);
                        now
                    };
                    if refuse {
                        let body = serde_json::json!({"error": {"code": 401, "status": "UNAUTHENTICATED",
                            "message": "Request had invalid authentication credentials."}});
                        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
                    }
                    let events = [
                        serde_json::json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Olá"}]}}]}),
                        serde_json::json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP"}],
                            "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 1}}),
                    ];
                    let body: String = events.iter().map(|e| format!("data: {e}\r\n\r\n")).collect();
                    ([("content-type", "text/event-stream")], body).into_response()
                },
            ),
        )
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, state)
}

async fn text_of(provider: &VertexProvider) -> Result<String, ProviderError> {
    let body = provider.encode(&request())?;
    let stream = provider.send(body).await?;
    let items: Vec<_> = stream.collect().await;
    let mut text = String::new();
    for item in items {
        if let StreamDelta::Text { text: t } = item? {
            text.push_str(&t);
        }
    }
    Ok(text)
}

fn with_service_account(base: &str, dir: &tempfile::TempDir) -> ProviderSettings {
    let file = dir.path().join("sa.json");
    std::fs::write(&file, service_account(&format!("{base}/token")).to_string()).unwrap();
    let mut s = settings("gemini-2.5-flash", Some("us-central1"));
    s.api_key = None;
    s.base_url = format!("{base}/v1");
    s.cloud.credentials_file = Some(file);
    s
}

#[tokio::test]
async fn a_model_call_carries_the_cached_token_and_renews_a_refused_one_once() {
    let (base, server) = vertex_server(1).await;
    let dir = tempfile::tempdir().unwrap();
    let provider = VertexProvider::new(&with_service_account(&base, &dir)).unwrap();
    // The first token is refused: a second is fetched and the request sent again.
    assert_eq!(text_of(&provider).await.unwrap(), "Olá");
    // The next call reuses the second token.
    assert_eq!(text_of(&provider).await.unwrap(), "Olá");
    assert_eq!(*server.issued.lock().unwrap(), 2);
    let seen = server.seen.lock().unwrap().clone();
    let auths: Vec<&str> = seen.iter().map(|(_, a)| a.as_str()).collect();
    assert_eq!(
        auths,
        ["Bearer ya29.t1", "Bearer ya29.t2", "Bearer ya29.t2"]
    );
    assert_eq!(
        seen[0].0,
        "/v1/projects/my-proj/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
}

#[tokio::test]
async fn a_token_refused_twice_is_an_auth_error_that_says_what_to_check() {
    let (base, server) = vertex_server(5).await;
    let dir = tempfile::tempdir().unwrap();
    let provider = VertexProvider::new(&with_service_account(&base, &dir)).unwrap();
    let error = text_of(&provider).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Auth);
    assert!(
        error.message.contains("GOOGLE_APPLICATION_CREDENTIALS")
            && error
                .message
                .contains("gcloud auth application-default login"),
        "{}",
        error.message
    );
    assert_eq!(
        server.seen.lock().unwrap().len(),
        2,
        "renewed once, not more"
    );
    // A fixed token cannot be renewed: one request.
    let (base, server) = vertex_server(5).await;
    let mut fixed = settings("gemini-2.5-flash", Some("us-central1"));
    fixed.base_url = format!("{base}/v1");
    let provider = VertexProvider::new(&fixed).unwrap();
    assert_eq!(
        text_of(&provider).await.unwrap_err().kind,
        ProviderErrorKind::Auth
    );
    assert_eq!(server.seen.lock().unwrap().len(), 1);
}

#[test]
fn permission_denied_names_vertex_not_the_gemini_api() {
    let provider = VertexProvider::new(&settings("gemini-2.5-pro", Some("us-central1"))).unwrap();
    let body = r#"{"error":{"code":403,"message":"Permission 'aiplatform.endpoints.predict' denied","status":"PERMISSION_DENIED"}}"#;
    let error = crate::error::classify_status(
        403,
        &reqwest::header::HeaderMap::new(),
        body,
        &provider.endpoint.ctx,
    );
    assert_eq!(error.kind, ProviderErrorKind::Auth);
    assert!(
        error.message.contains("Vertex AI User") && !error.message.contains("Generative Language"),
        "{}",
        error.message
    );
}
