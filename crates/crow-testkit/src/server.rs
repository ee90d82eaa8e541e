//! The HTTP side: [`MockLlm`] binds a loopback port, records every request, picks the step
//! that answers it, and streams the answer in the wire format of the path it came in on.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cloud::TokenGrant;
use crate::frames::{Ctx, Ending, Tokens, body_stream};
use crate::scenario::{Fault, Quirks, Reply, Scenario, Step};
use crate::{anthropic, bedrock, cloud, gemini, ollama, openai, responses};

/// Model name reported when a request names none.
const DEFAULT_MODEL: &str = "mock-model";
/// Conversation bodies in long benchmark sessions outgrow axum's 2 MB default.
const BODY_LIMIT: usize = 256 * 1024 * 1024;

/// One request as the server received it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    pub path: String,
    /// Header names lower-cased, values as (lossy) UTF-8, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The parsed body; `null` when it was not JSON.
    pub body: Value,
    /// The exact bytes received, for byte-prefix (prompt cache) comparisons. Serialised as a
    /// UTF-8 string for `GET /_mock/requests`.
    #[serde(with = "raw_body_serde")]
    pub raw_body: Bytes,
    /// When the body had arrived, before the mock did any work on it.
    pub received_at: SystemTime,
    /// When the mock had parsed the request and chosen its answer: its own work on the
    /// request is done, what follows until the next request is the client's. The interval
    /// from here to the next `received_at` is the client's step, free of the mock's parsing
    /// (which grows with the body).
    #[serde(default = "SystemTime::now")]
    pub answered_at: SystemTime,
    /// Index of the scenario step that answered; `None` when the scenario was exhausted or
    /// the request was rejected.
    pub step: Option<usize>,
}

impl RecordedRequest {
    /// First value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

mod raw_body_serde {
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&String::from_utf8_lossy(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        String::deserialize(d).map(Bytes::from)
    }
}

/// Which wire API a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    OpenAi,
    Anthropic,
    Ollama,
    /// OpenAI's Responses API.
    Responses,
    /// Google's Gemini API (`models/M:streamGenerateContent`).
    Gemini,
    /// Amazon Bedrock's ConverseStream (`model/M/converse-stream`, binary event stream).
    Bedrock,
}

pub(crate) struct Shared {
    inner: Mutex<Inner>,
    /// Cancelled on shutdown: stops accepting, and ends stalled or pausing bodies.
    shutdown: CancellationToken,
    /// TCP connections accepted so far: a client that reuses its connection opens one.
    connections: AtomicU64,
}

struct Inner {
    scenario: Scenario,
    consumed: Vec<bool>,
    requests: Vec<RecordedRequest>,
    seq: u64,
    /// The OAuth tokens `POST /token` issued (Vertex AI).
    tokens: Vec<TokenGrant>,
}

impl Shared {
    /// Records a grant and returns the token it gets.
    pub(crate) fn issue_token(&self, mut grant: TokenGrant) -> String {
        let mut inner = self.lock();
        grant.token = format!("mock-token-{}", inner.tokens.len() + 1);
        let token = grant.token.clone();
        inner.tokens.push(grant);
        token
    }

    /// Whether `token` is one `POST /token` issued.
    pub(crate) fn issued(&self, token: &str) -> bool {
        !token.is_empty() && self.lock().tokens.iter().any(|g| g.token == token)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the data half-updated in a way that
        // matters to a test fixture, so recover from poisoning.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A running mock LLM server. Shuts down when dropped.
pub struct MockLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl MockLlm {
    /// Starts serving `scenario` on `127.0.0.1` with a random free port.
    pub async fn start(scenario: Scenario) -> std::io::Result<MockLlm> {
        Self::start_on(scenario, SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    pub async fn start_on(scenario: Scenario, addr: SocketAddr) -> std::io::Result<MockLlm> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                consumed: vec![false; scenario.steps.len()],
                scenario,
                requests: Vec::new(),
                seq: 0,
                tokens: Vec::new(),
            }),
            shutdown: CancellationToken::new(),
            connections: AtomicU64::new(0),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(openai_handler))
            .route("/chat/completions", post(openai_handler))
            .route("/v1/messages", post(anthropic_handler))
            .route("/v1/responses", post(responses_handler))
            .route("/responses", post(responses_handler))
            // Azure OpenAI: the v1 API, and the dated API (deployment in the path, a required
            // `api-version`).
            .route("/openai/v1/chat/completions", post(openai_handler))
            .route("/openai/v1/responses", post(responses_handler))
            .route("/openai/v1/models", get(models_handler))
            .route(
                "/openai/deployments/{deployment}/chat/completions",
                post(azure_dated_handler),
            )
            .route("/openai/responses", post(azure_dated_handler))
            .route("/api/chat", post(ollama_handler))
            .route("/api/show", post(ollama_show_handler))
            .route("/api/tags", get(ollama_tags_handler))
            .route("/v1/models", get(models_handler))
            .route("/models", get(models_handler))
            .route("/v1beta/models", get(models_handler))
            .route("/v1beta/models/{*rest}", post(gemini_handler))
            .route("/models/{*rest}", post(gemini_handler))
            .route("/token", post(cloud::token_handler))
            .route("/v1/projects/{*rest}", post(cloud::vertex_handler))
            .route(
                "/v1beta1/publishers/{publisher}/models",
                get(cloud::vertex_models_handler),
            )
            .route(
                "/model/{model}/converse-stream",
                post(cloud::bedrock_handler),
            )
            .route("/_mock/requests", get(requests_handler))
            .route("/_mock/scenario", post(scenario_handler))
            .fallback(not_found)
            .layer(DefaultBodyLimit::max(BODY_LIMIT))
            .with_state(shared.clone());
        let stop = shared.shutdown.clone().cancelled_owned();
        let counted = Arc::clone(&shared);
        let listener = listener.tap_io(move |_| {
            counted.connections.fetch_add(1, Ordering::Relaxed);
        });
        let task = tokio::spawn(async move {
            // Errors here mean the listener died; nothing useful to report to a test.
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await;
        });
        Ok(MockLlm {
            addr,
            shared,
            task: Some(task),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL for Anthropic clients: `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Base URL for Gemini clients: `http://127.0.0.1:PORT/v1beta` (the bare
    /// [`MockLlm::base_url`] is served too).
    pub fn gemini_base_url(&self) -> String {
        format!("http://{}/v1beta", self.addr)
    }

    /// Base URL for OpenAI-compatible clients: `http://127.0.0.1:PORT/v1`.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Vertex AI's base URL (`…/v1`; the project's path follows it).
    pub fn vertex_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The OAuth token endpoint, for a credentials file's `token_uri`.
    pub fn token_uri(&self) -> String {
        format!("http://{}/token", self.addr)
    }

    /// The tokens issued so far by `POST /token`, in order.
    pub fn token_grants(&self) -> Vec<TokenGrant> {
        self.shared.lock().tokens.clone()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// TCP connections accepted since the server started (not reset by
    /// [`MockLlm::set_scenario`]): how well clients reuse their connections.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Steps not yet served.
    pub fn remaining_steps(&self) -> usize {
        self.shared.lock().consumed.iter().filter(|c| !**c).count()
    }

    /// Replaces the scenario and forgets the requests so far, so one server can serve a
    /// sequence of independent cases (e.g. driven over HTTP by an out-of-process test).
    pub fn set_scenario(&self, scenario: Scenario) {
        replace_scenario(&self.shared, scenario);
    }

    /// Appends a step to the running scenario.
    pub fn push_step(&self, step: Step) {
        let mut inner = self.shared.lock();
        inner.scenario.steps.push(step);
        inner.consumed.push(false);
    }

    /// Stops the server: refuses new connections and ends open streams, waiting briefly
    /// for connections to close.
    pub async fn shutdown(mut self) {
        self.shared.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn openai_handler(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&shared, Api::OpenAi, uri.path(), &headers, body)
}

async fn responses_handler(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&shared, Api::Responses, uri.path(), &headers, body)
}

/// Azure's dated API: without `api-version` Azure answers 404 "Resource not found".
async fn azure_dated_handler(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let versioned = uri.query().is_some_and(|q| {
        q.split('&')
            .any(|p| p.starts_with("api-version=") && p.len() > 12)
    });
    if !versioned {
        let body = openai::error_body(404, "Resource not found");
        return (StatusCode::NOT_FOUND, Json(body)).into_response();
    }
    let api = if uri.path().ends_with("/responses") {
        Api::Responses
    } else {
        Api::OpenAi
    };
    handle(&shared, api, uri.path(), &headers, body)
}

async fn gemini_handler(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&shared, Api::Gemini, uri.path(), &headers, body)
}

async fn ollama_handler(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&shared, Api::Ollama, uri.path(), &headers, body)
}

/// `POST /api/show`: the model's details, its context length among them. A model the
/// scenario names in `missing_models` is answered 404 the way Ollama words it.
async fn ollama_show_handler(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (missing, no_show) = {
        let inner = shared.lock();
        let scenario = &inner.scenario;
        (
            scenario.missing_models.iter().any(|m| m == model),
            scenario.no_show,
        )
    };
    if no_show {
        return (StatusCode::NOT_FOUND, "404 page not found").into_response();
    }
    if missing {
        let message = format!("model '{model}' not found");
        return (
            StatusCode::NOT_FOUND,
            Json(ollama::error_body(404, &message)),
        )
            .into_response();
    }
    Json(ollama::show(&body)).into_response()
}

async fn ollama_tags_handler() -> Json<Value> {
    Json(ollama::tags())
}

async fn anthropic_handler(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&shared, Api::Anthropic, uri.path(), &headers, body)
}

/// The models the mock serves, in a shape an OpenAI-compatible client (`data[].id`,
/// OpenRouter's `context_length`), an Anthropic one (`data[].id`, `type`) and a Gemini one
/// (`models[].name`) read.
async fn models_handler() -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "models": gemini::models(),
        "object": "list",
        "data": [
            {"id": "mock-model", "type": "model", "display_name": "Mock", "context_length": 32768},
            {"id": "mock-small", "type": "model", "display_name": "Mock small"}
        ],
        "has_more": false
    }))
}

async fn requests_handler(State(shared): State<Arc<Shared>>) -> Json<Vec<RecordedRequest>> {
    Json(shared.lock().requests.clone())
}

fn replace_scenario(shared: &Shared, scenario: Scenario) {
    let mut inner = shared.lock();
    inner.consumed = vec![false; scenario.steps.len()];
    inner.scenario = scenario;
    inner.requests.clear();
}

/// `POST /_mock/scenario` with a scenario JSON body: [`MockLlm::set_scenario`] over HTTP.
async fn scenario_handler(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    match serde_json::from_slice::<Scenario>(&body) {
        Ok(scenario) => {
            replace_scenario(&shared, scenario);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, format!("mock: bad scenario: {e}")).into_response(),
    }
}

async fn not_found(uri: Uri) -> Response {
    let message = format!("mock: no route for {}", uri.path());
    let body = openai::error_body(404, &message);
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

/// What the step selection decided, taken out of the lock.
struct Served {
    step: Step,
    seq: u64,
    tokens_prefix: usize,
    chunk_size: usize,
    chunk_delay_ms: u64,
}

/// Records the request and answers it. Synchronous: the lock is never held across an await,
/// and the streaming body does its waiting after this returns.
pub(crate) fn handle(
    shared: &Shared,
    api: Api,
    path: &str,
    headers: &HeaderMap,
    raw: Bytes,
) -> Response {
    let received_at = SystemTime::now();
    let parsed: Option<Value> = serde_json::from_slice(&raw).ok();
    let valid = parsed.is_some();
    let body = parsed.unwrap_or(Value::Null);
    let system = match api {
        Api::OpenAi => openai::system_prompt(&body),
        Api::Anthropic => anthropic::system_prompt(&body),
        Api::Ollama => ollama::system_prompt(&body),
        Api::Responses => responses::system_prompt(&body),
        Api::Gemini => gemini::system_prompt(&body),
        Api::Bedrock => bedrock::system_prompt(&body),
    };
    // What the answer needs from the body, read before the body moves into the record.
    // Gemini names the model and the method in the path.
    let (path_model, method) = gemini::model_and_method(path);
    let model = match api {
        Api::Gemini => path_model,
        // Vertex AI names Anthropic's model in the path too.
        Api::Anthropic if path.contains("/publishers/") => path_model,
        Api::Bedrock => bedrock::model(path),
        _ => body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(DEFAULT_MODEL)
            .to_owned(),
    };
    let mut options = openai::Options::from_request(&body);
    let stream = match api {
        Api::OpenAi => options.stream,
        Api::Anthropic => anthropic::wants_stream(&body),
        Api::Ollama => ollama::wants_stream(&body),
        Api::Responses => responses::wants_stream(&body),
        Api::Gemini => method == "streamGenerateContent",
        Api::Bedrock => true,
    };
    let record = RecordedRequest {
        path: path.to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
                (k.as_str().to_owned(), value)
            })
            .collect(),
        body,
        raw_body: raw.clone(),
        received_at,
        answered_at: received_at,
        step: None,
    };

    let served = {
        let mut inner = shared.lock();
        inner.seq += 1;
        let seq = inner.seq;
        // Prompt-cache simulation: the prefix shared with the previous request on this path.
        let tokens_prefix = inner
            .requests
            .iter()
            .rev()
            .find(|r| r.path == path)
            .map_or(0, |prev| common_prefix(&prev.raw_body, &raw));
        let mut record = record;
        let tokens = (raw.len() / 4) as u64;
        if let Some(window) = inner.scenario.context_window
            && valid
            && tokens > window
        {
            record.answered_at = SystemTime::now();
            inner.requests.push(record);
            drop(inner);
            return overflow_response(api, window, tokens);
        }
        if let Some((code, message)) = quirk_refusal(&inner.scenario.quirks, api, &record.body) {
            record.answered_at = SystemTime::now();
            inner.requests.push(record);
            drop(inner);
            return error_response(api, code, None, Some(&message));
        }
        if inner.scenario.quirks.no_streamed_auto_tools
            && api == Api::OpenAi
            && stream
            && auto_tool_choice(&record.body)
        {
            record.answered_at = SystemTime::now();
            inner.requests.push(record);
            drop(inner);
            return (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/event-stream")],
                "",
            )
                .into_response();
        }
        if api == Api::Ollama && inner.scenario.missing_models.contains(&model) {
            record.answered_at = SystemTime::now();
            inner.requests.push(record);
            drop(inner);
            let message = format!("model '{model}' not found");
            return error_response(api, 404, None, Some(&message));
        }
        // Malformed JSON is rejected like a real API would, without consuming a step.
        let chosen = if !valid {
            None
        } else {
            let Inner {
                scenario, consumed, ..
            } = &mut *inner;
            let found = scenario
                .steps
                .iter()
                .enumerate()
                .find(|(i, step)| !consumed[*i] && step.accepts(&system, &model))
                .map(|(i, step)| (i, step.clone()));
            if let Some((i, _)) = &found {
                consumed[*i] = true;
            }
            found
        };
        record.step = chosen.as_ref().map(|(i, _)| *i);
        record.answered_at = SystemTime::now();
        inner.requests.push(record);
        if !valid {
            drop(inner);
            return error_response(
                api,
                400,
                None,
                Some("mock: the request body is not valid JSON"),
            );
        }
        let scenario = &inner.scenario;
        let mut step = match chosen {
            Some((_, step)) => step,
            None => Step::Reply(Reply::text(scenario.exhausted_text.clone())),
        };
        if scenario.quirks.tools_need_tool_choice
            && api == Api::OpenAi
            && tools_without_choice(&inner.requests)
            && let Step::Reply(reply) = &mut step
        {
            // The tools never reached the prompt: the model cannot call one.
            reply.tool_calls.clear();
        }
        if scenario.quirks.no_usage {
            options.include_usage = false;
        }
        options.thinking_blocks = scenario.quirks.thinking_blocks;
        Served {
            step,
            seq,
            tokens_prefix,
            chunk_size: scenario.chunk_size,
            chunk_delay_ms: scenario.chunk_delay_ms,
        }
    };
    let (reply, ending) = match served.step {
        Step::Fault(Fault::Status {
            code,
            retry_after_secs,
            body,
        }) => return error_response(api, code, retry_after_secs, body.as_deref()),
        Step::Reply(reply) => (reply, Ending::Complete),
        Step::Fault(Fault::DropAfter {
            reply,
            after_chunks,
        }) => (reply, Ending::Drop { after_chunks }),
        Step::Fault(Fault::Stall {
            reply,
            after_chunks,
        }) => (reply, Ending::Stall { after_chunks }),
        Step::Fault(Fault::KeepAlive {
            reply,
            after_chunks,
            interval_ms,
        }) => (
            reply,
            Ending::KeepAlive {
                after_chunks,
                interval: Duration::from_millis(interval_ms.max(1)),
            },
        ),
        Step::Fault(Fault::Raw { body, content_type }) => {
            return (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response();
        }
    };

    // Anthropic only writes the cache where the request asks for it.
    let writes_cache = (api == Api::Anthropic && contains(&raw, b"\"cache_control\""))
        || (api == Api::Bedrock && contains(&raw, b"\"cachePoint\""));
    let ctx = Ctx {
        reply: &reply,
        chunk_size: reply.chunk_size.unwrap_or(served.chunk_size),
        model,
        seq: served.seq,
        tokens: Tokens::estimate(raw.len(), served.tokens_prefix, writes_cache, &reply),
        created: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let delay = Duration::from_millis(reply.chunk_delay_ms.unwrap_or(served.chunk_delay_ms));

    if !stream {
        if ending == Ending::Complete {
            let full = match api {
                Api::OpenAi => openai::full_response(&ctx),
                Api::Anthropic => anthropic::full_response(&ctx),
                Api::Ollama => ollama::full_response(&ctx),
                Api::Responses => responses::full_response(&ctx),
                Api::Gemini => gemini::full_response(&ctx),
                // ConverseStream always streams.
                Api::Bedrock => serde_json::json!({}),
            };
            return (StatusCode::OK, Json(full)).into_response();
        }
        // A faulted non-streaming answer: headers, then no body before the drop or stall.
        let body = body_stream(Vec::new(), ending, delay, shared.shutdown.clone());
        return (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            Body::from_stream(body),
        )
            .into_response();
    }

    let frames = match api {
        Api::OpenAi => openai::stream_frames(&ctx, options),
        Api::Anthropic => anthropic::stream_frames(&ctx),
        Api::Ollama => ollama::stream_frames(&ctx),
        Api::Responses => responses::stream_frames(&ctx),
        Api::Gemini => gemini::stream_frames(&ctx),
        Api::Bedrock => bedrock::stream_frames(&ctx),
    };
    let content_type = match api {
        Api::Ollama => "application/x-ndjson",
        Api::Bedrock => "application/vnd.amazon.eventstream",
        Api::OpenAi | Api::Anthropic | Api::Responses | Api::Gemini => "text/event-stream",
    };
    let body = body_stream(frames, ending, delay, shared.shutdown.clone());
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// An error status with the API's own error body and an optional `retry-after` header.
/// `body`, when valid JSON, is sent verbatim; otherwise it is the error message.
fn error_response(api: Api, code: u16, retry_after: Option<u64>, body: Option<&str>) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let verbatim = body.and_then(|b| serde_json::from_str::<Value>(b).ok());
    let json = verbatim.unwrap_or_else(|| {
        let default = format!(
            "mock: scripted {code} {}",
            status.canonical_reason().unwrap_or("error")
        );
        let message = body.map_or(default, str::to_owned);
        match api {
            Api::OpenAi | Api::Responses => openai::error_body(code, &message),
            Api::Anthropic => anthropic::error_body(code, &message),
            Api::Ollama => ollama::error_body(code, &message),
            Api::Gemini => gemini::error_body(code, &message, retry_after),
            Api::Bedrock => bedrock::error_body(&message),
        }
    });
    let mut headers = HeaderMap::new();
    if api == Api::Bedrock {
        headers.insert(
            "x-amzn-errortype",
            HeaderValue::from_static(bedrock::error_type(code)),
        );
    }
    // Gemini says how long to wait in the body (RetryInfo), not in a header.
    if let Some(secs) = retry_after.filter(|_| api != Api::Gemini) {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    (status, headers, Json(json)).into_response()
}

/// A request over the scenario's window, refused the way each API words it.
fn overflow_response(api: Api, window: u64, tokens: u64) -> Response {
    let json = match api {
        Api::OpenAi | Api::Responses => {
            let message = format!(
                "This model's maximum context length is {window} tokens. However, your messages \
                 resulted in {tokens} tokens. Please reduce the length of the messages."
            );
            serde_json::json!({"error": {"message": message, "type": "invalid_request_error",
                "param": "messages", "code": "context_length_exceeded"}})
        }
        Api::Anthropic => anthropic::error_body(
            400,
            &format!("prompt is too long: {tokens} tokens > {window} maximum"),
        ),
        // Ollama itself truncates instead; a proxy in front of it refuses like this.
        Api::Ollama => ollama::error_body(
            400,
            &format!("the input length exceeds the context length ({tokens} > {window} tokens)"),
        ),
        Api::Gemini => gemini::overflow_body(window, tokens),
        Api::Bedrock => bedrock::overflow_body(window, tokens),
    };
    (StatusCode::BAD_REQUEST, Json(json)).into_response()
}

/// Whether the request just recorded sends `tools` without `tool_choice`.
fn tools_without_choice(requests: &[RecordedRequest]) -> bool {
    requests.last().is_some_and(|r| {
        r.body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty())
            && r.body.get("tool_choice").is_none()
    })
}

/// Whether `body` offers tools and lets the model choose whether to call one.
fn auto_tool_choice(body: &Value) -> bool {
    body.get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty())
        && body.get("tool_choice").and_then(Value::as_str) == Some("auto")
}

/// The error status and message a quirky server answers `body` with, if it refuses it.
fn quirk_refusal(quirks: &Quirks, api: Api, body: &Value) -> Option<(u16, String)> {
    if let Some(field) = quirks
        .rejected_fields
        .iter()
        .find(|f| body.get(f.as_str()).is_some())
    {
        return Some((400, format!("mock: unsupported parameter: {field}")));
    }
    let messages = body.get("messages").and_then(Value::as_array);
    let assistants = || {
        messages
            .into_iter()
            .flatten()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
    };
    if quirks.null_content_fails
        && api == Api::OpenAi
        && assistants().any(|m| m.get("content").is_some_and(Value::is_null))
    {
        // llama-cpp-python's chat templates concatenate the content: a Python TypeError.
        return Some((
            500,
            "mock: can only concatenate str (not \"NoneType\") to str".to_owned(),
        ));
    }
    if quirks.thinking_blocks
        && api == Api::OpenAi
        && assistants().any(|m| {
            m.get("tool_calls").is_some()
                && !m
                    .get("thinking_blocks")
                    .and_then(Value::as_array)
                    .is_some_and(|b| b.iter().any(|b| b.get("signature").is_some()))
        })
    {
        return Some((
            400,
            "mock: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When \
             `thinking` is enabled, a final `assistant` message must start with a thinking block"
                .to_owned(),
        ));
    }
    if quirks.strict_tool_arguments {
        let arguments: Vec<&Value> = match api {
            Api::OpenAi => assistants()
                .filter_map(|m| m.get("tool_calls").and_then(Value::as_array))
                .flatten()
                .filter_map(|c| c.pointer("/function/arguments"))
                .collect(),
            Api::Responses => body
                .get("input")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|i| i.get("type").and_then(Value::as_str) == Some("function_call"))
                .filter_map(|i| i.get("arguments"))
                .collect(),
            Api::Anthropic | Api::Ollama | Api::Gemini | Api::Bedrock => Vec::new(),
        };
        let object = |a: &&Value| {
            a.as_str()
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .is_some_and(|v| v.is_object())
        };
        if !arguments.iter().all(object) {
            return Some((
                400,
                "mock: Failed to parse tool call arguments as JSON".to_owned(),
            ));
        }
    }
    None
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
