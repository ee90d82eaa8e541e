//! crow's `task_complete` offered to an external agent as an MCP tool: a streamable-HTTP MCP
//! server on 127.0.0.1 answering JSON (no SSE stream: nothing is pushed). Each conversation
//! gets its own URL whose path is a random 128-bit token, so the call reaches the right crow
//! session and no other local process can guess its way in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Event, Route};

/// The tool's name as the agent sees it (its client may prefix the server's name).
pub(super) const TOOL: &str = "task_complete";

type Routes = Arc<Mutex<HashMap<String, Route>>>;

pub(super) struct TaskCompleteServer {
    base: String,
    routes: Routes,
    _task: tokio::task::JoinHandle<()>,
}

impl Drop for TaskCompleteServer {
    fn drop(&mut self) {
        self._task.abort();
    }
}

impl TaskCompleteServer {
    pub(super) async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let routes: Routes = Arc::default();
        let app = axum::Router::new()
            .route("/mcp/{token}", axum::routing::post(handle).get(no_stream))
            .with_state(Arc::clone(&routes));
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(%e, "the task_complete server stopped");
            }
        });
        Ok(Self {
            base: format!("http://{address}/mcp/"),
            routes,
            _task: task,
        })
    }

    /// A URL whose calls reach `route`.
    pub(super) fn url_for(&self, route: Route) -> String {
        let token = format!("{:032x}", uuid::Uuid::new_v4().as_u128());
        self.routes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(token.clone(), route);
        format!("{}{token}", self.base)
    }
}

/// No server-sent stream: the spec's answer is 405.
async fn no_stream() -> StatusCode {
    StatusCode::METHOD_NOT_ALLOWED
}

async fn handle(
    State(routes): State<Routes>,
    Path(token): Path<String>,
    Json(message): Json<Value>,
) -> Response {
    let route = routes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&token)
        .cloned();
    let Some(route) = route else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Some(id) = message.get("id").cloned() else {
        // A notification (`notifications/initialized`): accepted, nothing to answer.
        return StatusCode::ACCEPTED.into_response();
    };
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let result = match method {
        "initialize" => Ok(json!({
            "protocolVersion": message
                .pointer("/params/protocolVersion")
                .cloned()
                .unwrap_or_else(|| json!("2025-06-18")),
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "crow", "version": env!("CARGO_PKG_VERSION") },
        })),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({ "tools": [{
            "name": TOOL,
            "description": "Call this when the task is done and verified: it ends your turn and tells crow the work is complete. Put what was done in `summary`. Only call it when you approve; otherwise answer with what must change.",
            "inputSchema": {
                "type": "object",
                "properties": { "summary": { "type": "string", "description": "What was done." } },
                "required": ["summary"],
            },
        }]})),
        "tools/call" if message.pointer("/params/name").and_then(Value::as_str) == Some(TOOL) => {
            let summary = message
                .pointer("/params/arguments/summary")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if route.send(Event::TaskComplete(summary)).is_err() {
                Err((-32603, "no turn of this session is running".to_owned()))
            } else {
                Ok(json!({ "content": [{
                    "type": "text",
                    "text": "Recorded: the task is complete. End your turn now.",
                }]}))
            }
        }
        "tools/call" => Err((-32602, "unknown tool".to_owned())),
        other => Err((-32601, format!("method not found: {other}"))),
    };
    let body = match result {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err((code, message)) => {
            json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
        }
    };
    Json(body).into_response()
}
