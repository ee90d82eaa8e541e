//! `crow serve`'s routes: the JSON API under `/api` (behind the token), its OpenAPI 3.1
//! document generated from these handlers and types (utoipa), and the page at `/`. Handlers
//! only translate: sessions are the hub's, events the session's log, figures `crow stats`'s.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use crow_app::driver::Input;
use crow_core::{SessionFilter, SessionInfo, SessionStore};
use futures::Stream;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, OpenApi, ToSchema};

use super::auth::{self, Auth};
use super::gate::{Answer, Question, Unanswered};
use super::hub::{Hub, Live, NewSession, Taken};
use super::log::EventLog;
use crate::sessions;
use crate::stats::{self, Stats, Sum};

#[derive(Clone)]
pub struct AppState {
    pub hub: Arc<Hub>,
    pub auth: Arc<Auth>,
}

pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/sessions", get(list_sessions).post(create_session))
        .route("/sessions/{id}", get(get_session))
        .route("/sessions/{id}/prompt", post(prompt))
        .route("/sessions/{id}/events", get(events))
        .route("/sessions/{id}/cancel", post(cancel))
        .route(
            "/sessions/{id}/permissions",
            get(permissions).post(answer_permission),
        )
        .route("/sessions/{id}/undo", post(undo))
        .route("/stats", get(stats_of))
        .route("/openapi.json", get(openapi))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ));
    Router::new()
        .route("/", get(super::page::page))
        .nest("/api", api)
        .with_state(state)
}

/// An error as the API returns it: a status and one line saying what to do.
#[derive(Serialize, ToSchema)]
pub struct ApiError {
    pub error: String,
    #[serde(skip)]
    status: StatusCode,
}

impl ApiError {
    fn new(status: StatusCode, error: impl Into<String>) -> Self {
        Self {
            error: error.into(),
            status,
        }
    }

    fn not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            format!("no session {id} is open here"),
        )
    }

    fn failed(e: &anyhow::Error) -> Self {
        Self::new(StatusCode::BAD_REQUEST, format!("{e:#}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self)).into_response()
    }
}

/// A session in the list.
#[derive(Serialize, ToSchema)]
pub struct SessionSummary {
    pub id: String,
    pub title: String,
    pub project_root: String,
    pub cwd: String,
    pub provider: String,
    pub model: String,
    /// The composition (or agent) it runs.
    pub agent: String,
    /// `running` or `idle` (open in this server), else the stored status (`completed`,
    /// `interrupted`, ...).
    pub status: String,
    /// Open in this server: events stream at `/events`.
    pub open: bool,
    /// Its model calls' totals, as `crow stats` sums them.
    pub usage: Sum,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// `POST /api/sessions`.
#[derive(Deserialize, ToSchema)]
pub struct CreateSession {
    /// The directory the session works in (absolute); its project's config and trust apply.
    pub cwd: String,
    /// Composition or agent: build, build-judge, plan, ...
    pub agent: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    /// Permission mode: read-only, ask (default), auto-edit, full-auto.
    pub mode: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Created {
    pub id: String,
}

/// `GET /api/sessions/{id}`: the session and its stored timeline.
#[derive(Serialize, ToSchema)]
pub struct SessionDetail {
    pub session: SessionSummary,
    /// The stored history entries of every agent, in order (crow-core `StoredEntry`).
    #[schema(value_type = Vec<Object>)]
    pub entries: Vec<serde_json::Value>,
    /// Permission questions waiting for an answer.
    pub pending: Vec<Question>,
    /// The id of the latest event (open sessions): subscribe from here to miss nothing.
    pub last_event_id: u64,
}

/// An attached image.
#[derive(Deserialize, ToSchema)]
pub struct Image {
    /// `image/png`, `image/jpeg`, ...
    pub mime_type: String,
    /// Base64 of the image.
    pub data: String,
}

/// `POST /api/sessions/{id}/prompt`.
#[derive(Deserialize, ToSchema)]
pub struct PromptBody {
    pub text: String,
    #[serde(default)]
    pub images: Vec<Image>,
}

#[derive(Serialize, ToSchema)]
pub struct PromptAccepted {
    pub taken: Taken,
}

/// `POST /api/sessions/{id}/permissions`.
#[derive(Deserialize, ToSchema)]
pub struct AnswerBody {
    /// The question's id (from `GET .../permissions` or a `permission_request` event).
    pub id: u64,
    pub answer: Answer,
    /// With `reject`: why, for the model to read.
    pub reason: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Done {
    pub ok: bool,
    pub message: String,
}

#[derive(Deserialize, IntoParams)]
pub struct StatsQuery {
    /// Sessions of every project (default: the project crow serve started in).
    #[serde(default)]
    pub all: bool,
    /// One session (id or unique prefix).
    pub session: Option<String>,
    /// Only sessions active since `30m`, `12h`, `7d`, `2w` or a date.
    pub since: Option<String>,
}

#[derive(Deserialize, IntoParams)]
pub struct EventsQuery {
    /// Events after this id (the `Last-Event-ID` header wins when both are sent).
    pub after: Option<u64>,
}

/// Runs blocking store work off the async workers.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn usage_of(
    store: Option<&crow_store::SqliteStore>,
    config: &crate::config::Config,
    id: &str,
) -> Sum {
    let mut sum = Sum::default();
    if let Some(rows) = store.and_then(|s| s.usage(id).ok()) {
        for row in rows {
            let price = config.models.price(&row.model);
            sum.add(&row, price);
        }
    }
    sum
}

fn summary(info: Option<&SessionInfo>, live: Option<&Live>, usage: Sum) -> SessionSummary {
    let shown = |p: &std::path::Path| p.display().to_string();
    let status = match (live, info) {
        (Some(live), _) if live.running() => "running".to_owned(),
        (Some(_), _) => "idle".to_owned(),
        (None, Some(info)) => serde_json::to_value(info.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        (None, None) => String::new(),
    };
    SessionSummary {
        id: live.map_or_else(
            || info.map(|i| i.id.clone()).unwrap_or_default(),
            |l| l.id.clone(),
        ),
        title: info.map(|i| i.title.clone()).unwrap_or_default(),
        project_root: live.map_or_else(
            || info.map(|i| shown(&i.project_root)).unwrap_or_default(),
            |l| shown(&l.project_root),
        ),
        cwd: live.map_or_else(
            || info.map(|i| shown(&i.cwd)).unwrap_or_default(),
            |l| shown(&l.cwd),
        ),
        provider: live.map_or_else(
            || info.map(|i| i.provider.clone()).unwrap_or_default(),
            |l| l.provider.clone(),
        ),
        model: live.map_or_else(
            || info.map(|i| i.model.clone()).unwrap_or_default(),
            |l| l.model.clone(),
        ),
        agent: live.map_or_else(
            || info.map(|i| i.agent.clone()).unwrap_or_default(),
            |l| l.agent.clone(),
        ),
        status,
        open: live.is_some(),
        usage,
        updated_at: info.map(|i| i.updated_at.to_rfc3339()),
    }
}

/// The sessions, newest first: those open here and those stored.
#[utoipa::path(get, path = "/api/sessions", tag = "sessions",
    responses((status = 200, body = Vec<SessionSummary>), (status = 401)))]
async fn list_sessions(
    State(state): State<AppState>,
) -> Result<Json<Vec<SessionSummary>>, ApiError> {
    let hub = &state.hub;
    let list = blocking(|| -> anyhow::Result<Vec<SessionSummary>> {
        let store = sessions::open_for_reading(&hub.config)?;
        let stored = match &store {
            Some(store) => store
                .list_sessions(&SessionFilter {
                    project_root: None,
                    limit: Some(200),
                })
                .map_err(sessions::store_error)?,
            None => Vec::new(),
        };
        let live = hub.live();
        let mut list: Vec<SessionSummary> = live
            .iter()
            .filter(|l| !stored.iter().any(|s| s.id == l.id))
            .map(|l| summary(None, Some(l), usage_of(store.as_ref(), &hub.config, &l.id)))
            .collect();
        for info in &stored {
            let open = live.iter().find(|l| l.id == info.id);
            let usage = usage_of(store.as_ref(), &hub.config, &info.id);
            list.push(summary(Some(info), open.map(Arc::as_ref), usage));
        }
        Ok(list)
    })
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")))?;
    Ok(Json(list))
}

/// Opens a new session in `cwd`, assembled like `crow run`'s there.
#[utoipa::path(post, path = "/api/sessions", tag = "sessions", request_body = CreateSession,
    responses((status = 201, body = Created), (status = 400, body = ApiError), (status = 401)))]
async fn create_session(
    State(state): State<AppState>,
    Json(body): Json<CreateSession>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let mode = match body.mode.as_deref() {
        Some(name) => Some(crow_core::Mode::parse(name).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("mode is read-only, ask, auto-edit or full-auto, not {name}"),
            )
        })?),
        None => None,
    };
    let request = NewSession {
        cwd: body.cwd.into(),
        agent: body.agent,
        model: body.model,
        provider: body.provider,
        mode,
    };
    let live = state
        .hub
        .create(request)
        .map_err(|e| ApiError::failed(&e))?;
    Ok((
        StatusCode::CREATED,
        Json(Created {
            id: live.id.clone(),
        }),
    ))
}

/// The session, its stored entries and its waiting questions.
#[utoipa::path(get, path = "/api/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "session id")),
    responses((status = 200, body = SessionDetail), (status = 404, body = ApiError), (status = 401)))]
async fn get_session(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<SessionDetail>, ApiError> {
    let hub = &state.hub;
    let live = hub.get(&id);
    let detail = blocking(|| -> anyhow::Result<Option<SessionDetail>> {
        let store = sessions::open_for_reading(&hub.config)?;
        let info = store.as_ref().and_then(|s| s.session(&id).ok());
        if info.is_none() && live.is_none() {
            return Ok(None);
        }
        let key = info.as_ref().map_or(id.as_str(), |i| i.id.as_str());
        let entries = store
            .as_ref()
            .and_then(|s| s.timeline(key).ok())
            .unwrap_or_default()
            .iter()
            .filter_map(|e| serde_json::to_value(e).ok())
            .collect();
        let usage = usage_of(store.as_ref(), &hub.config, key);
        Ok(Some(SessionDetail {
            session: summary(info.as_ref(), live.as_deref(), usage),
            entries,
            pending: live
                .as_ref()
                .map(|l| l.questions.waiting())
                .unwrap_or_default(),
            last_event_id: live.as_ref().map_or(0, |l| l.log.latest()),
        }))
    })
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")))?;
    detail.map(Json).ok_or_else(|| ApiError::not_found(&id))
}

/// Sends a prompt: it starts a turn, or steers the running one (taken between its steps). A
/// stored session not open here is opened again first.
#[utoipa::path(post, path = "/api/sessions/{id}/prompt", tag = "sessions", request_body = PromptBody,
    params(("id" = String, Path, description = "session id")),
    responses((status = 202, body = PromptAccepted), (status = 400, body = ApiError), (status = 404, body = ApiError), (status = 401)))]
async fn prompt(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(body): Json<PromptBody>,
) -> Result<(StatusCode, Json<PromptAccepted>), ApiError> {
    if body.text.trim().is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "the prompt is empty",
        ));
    }
    let live = match state.hub.get(&id) {
        Some(live) => live,
        None => state
            .hub
            .resume(&id)
            .map_err(|e| ApiError::new(StatusCode::NOT_FOUND, format!("{e:#}")))?,
    };
    let input = Input {
        text: body.text,
        images: body
            .images
            .into_iter()
            .map(|i| (i.mime_type, i.data))
            .collect(),
        agent: None,
    };
    let taken = live.prompt(input).await.map_err(|e| ApiError::failed(&e))?;
    Ok((StatusCode::ACCEPTED, Json(PromptAccepted { taken })))
}

/// The session's events as Server-Sent Events: each `data` is one JSON object — those `crow
/// run --json` prints (`text_delta`, `tool_call_start`, `tool_call_end`, `usage`, ...) and
/// crow serve's own (`session`, `prompt`, `permission_request`, `permission_answered`,
/// `result`); each `id` is its number, and `Last-Event-ID` (or `?after=`) resumes after it.
#[utoipa::path(get, path = "/api/sessions/{id}/events", tag = "events",
    params(("id" = String, Path, description = "session id"), EventsQuery,
        ("Last-Event-ID" = Option<u64>, Header, description = "resume after this event")),
    responses((status = 200, content_type = "text/event-stream", body = String), (status = 404, body = ApiError), (status = 401)))]
async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let live = state.hub.get(&id).ok_or_else(|| ApiError::not_found(&id))?;
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .or(query.after)
        .unwrap_or(0);
    let stream = event_stream(Arc::clone(&live.log), after, crate::stop::token());
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The log's events after `after`, then each new one as it comes, until the server stops.
fn event_stream(
    log: Arc<EventLog>,
    after: u64,
    stop: tokio_util::sync::CancellationToken,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let seen = log.subscribe();
    let queue = std::collections::VecDeque::new();
    futures::stream::unfold(
        (log, seen, after, queue, stop),
        |(log, mut seen, mut last, mut queue, stop)| async move {
            loop {
                if let Some(next) = queue.pop_front() {
                    let logged: Arc<super::log::Logged> = next;
                    let event = Event::default()
                        .id(logged.id.to_string())
                        .data(logged.json.as_str());
                    return Some((Ok(event), (log, seen, last, queue, stop)));
                }
                // Marked seen before reading: an event pushed after this wakes the wait.
                seen.borrow_and_update();
                let batch = log.after(last);
                if let Some(newest) = batch.last() {
                    last = newest.id;
                    queue.extend(batch);
                    continue;
                }
                tokio::select! {
                    changed = seen.changed() => if changed.is_err() { return None },
                    () = stop.cancelled() => return None,
                }
            }
        },
    )
}

/// Cancels the running turn.
#[utoipa::path(post, path = "/api/sessions/{id}/cancel", tag = "sessions",
    params(("id" = String, Path, description = "session id")),
    responses((status = 200, body = Done), (status = 404, body = ApiError), (status = 401)))]
async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Done>, ApiError> {
    let live = state.hub.get(&id).ok_or_else(|| ApiError::not_found(&id))?;
    let cancelled = live.cancel();
    Ok(Json(Done {
        ok: cancelled,
        message: if cancelled {
            "cancelled"
        } else {
            "no turn is running"
        }
        .to_owned(),
    }))
}

/// Permission questions waiting for an answer, with what each call would do.
#[utoipa::path(get, path = "/api/sessions/{id}/permissions", tag = "permissions",
    params(("id" = String, Path, description = "session id")),
    responses((status = 200, body = Vec<Question>), (status = 404, body = ApiError), (status = 401)))]
async fn permissions(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<Question>>, ApiError> {
    let live = state.hub.get(&id).ok_or_else(|| ApiError::not_found(&id))?;
    Ok(Json(live.questions.waiting()))
}

/// Answers a question: allow once, always (this session), or reject with a reason.
#[utoipa::path(post, path = "/api/sessions/{id}/permissions", tag = "permissions", request_body = AnswerBody,
    params(("id" = String, Path, description = "session id")),
    responses((status = 200, body = Done), (status = 404, body = ApiError), (status = 409, body = ApiError), (status = 401)))]
async fn answer_permission(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(body): Json<AnswerBody>,
) -> Result<Json<Done>, ApiError> {
    let live = state.hub.get(&id).ok_or_else(|| ApiError::not_found(&id))?;
    match live.questions.answer(body.id, body.answer, body.reason) {
        Ok(()) => Ok(Json(Done {
            ok: true,
            message: "answered".to_owned(),
        })),
        Err(Unanswered::NotWaiting) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "question {} is not waiting (answered, or its turn ended)",
                body.id
            ),
        )),
        Err(Unanswered::NoAlways) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "this question is asked every time: answer once or reject",
        )),
    }
}

/// Undoes the session's last turn (its files and its history), as `/undo` does.
#[utoipa::path(post, path = "/api/sessions/{id}/undo", tag = "sessions",
    params(("id" = String, Path, description = "session id")),
    responses((status = 200, body = Done), (status = 404, body = ApiError), (status = 409, body = ApiError), (status = 401)))]
async fn undo(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Done>, ApiError> {
    let live = state.hub.get(&id).ok_or_else(|| ApiError::not_found(&id))?;
    let reply = live
        .undo()
        .await
        .map_err(|e| ApiError::new(StatusCode::CONFLICT, format!("{e:#}")))?;
    Ok(Json(Done {
        ok: reply.status == 0,
        message: reply.text,
    }))
}

/// What `crow stats` prints, as data: totals per model, agent and day, and tool calls.
#[utoipa::path(get, path = "/api/stats", tag = "stats", params(StatsQuery),
    responses((status = 200, body = Stats), (status = 400, body = ApiError), (status = 401)))]
async fn stats_of(
    State(state): State<AppState>,
    Query(query): Query<StatsQuery>,
) -> Result<Json<Stats>, ApiError> {
    let hub = &state.hub;
    let scope = stats::Scope {
        since: query
            .since
            .as_deref()
            .map(stats::parse_since)
            .transpose()
            .map_err(|e| ApiError::failed(&e))?,
        session: query.session,
        all: query.all,
    };
    let figures = blocking(|| -> anyhow::Result<Stats> {
        match sessions::open_for_reading(&hub.config)? {
            Some(store) => stats::collect(&store, &hub.config, &hub.root, &scope),
            None => Ok(Stats::default()),
        }
    })
    .map_err(|e| ApiError::failed(&e))?;
    Ok(Json(figures))
}

/// This API, as OpenAPI 3.1.
#[utoipa::path(get, path = "/api/openapi.json", tag = "meta",
    responses((status = 200, content_type = "application/json", body = Object)))]
async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "crow serve",
        description = "crow's sessions over HTTP: create, prompt (steering while a turn runs), \
            stream events (Server-Sent Events, the objects `crow run --json` prints), answer \
            permission questions, cancel, undo, and stats. Every request carries the token: \
            `Authorization: Bearer TOKEN`."
    ),
    paths(list_sessions, create_session, get_session, prompt, events, cancel, permissions,
        answer_permission, undo, stats_of, openapi),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}
