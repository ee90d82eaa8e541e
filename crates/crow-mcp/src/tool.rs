//! [`McpTool`]: one tool of one MCP server behind crow-core's [`Tool`] trait, so the model and
//! the user see it like a built-in: namespaced name, the server's description and schema,
//! results flattened to text, `isError` as an error result, cancellation and a timeout.
//!
//! Kinds come from annotations: read-only is Read or Fetch, non-destructive Edit, otherwise
//! annotated Execute, none Other. Permission is asked for every tool not marked read-only. The call
//! is raced against `ctx.cancel` and the tool timeout; results are capped like the built-ins'
//! output.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use crow_core::{PermissionDecision, Tool, ToolContext, ToolKind, ToolMetadata, ToolResult};
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ToolAnnotations};
use rmcp::{Peer, RoleClient, ServiceError};
use serde_json::Value;

/// Longest tool name providers accept (OpenAI: `^[a-zA-Z0-9_-]{1,64}$`).
pub const MAX_TOOL_NAME: usize = 64;

/// `mcp__SERVER__TOOL`, with characters providers refuse replaced by `_`, and cut to 64
/// characters with a hash of the full name so two long names stay distinct.
pub fn tool_name(server: &str, tool: &str) -> String {
    let full = format!("mcp__{server}__{tool}");
    let clean: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_TOOL_NAME {
        return clean;
    }
    // FNV-1a: stable across runs and platforms (std's hasher is not), so names never drift.
    let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{}_{:08x}", &clean[..MAX_TOOL_NAME - 9], hash as u32)
}

/// The tool kind from MCP annotations: read-only tools read (or fetch, when they reach the
/// outside world); others edit or execute. Without annotations nothing is known: `Other`.
pub fn tool_kind(annotations: Option<&ToolAnnotations>) -> ToolKind {
    let Some(a) = annotations else {
        return ToolKind::Other;
    };
    match (a.read_only_hint, a.destructive_hint, a.open_world_hint) {
        (Some(true), _, Some(true)) => ToolKind::Fetch,
        (Some(true), _, _) => ToolKind::Read,
        (_, Some(false), _) => ToolKind::Edit,
        (Some(false), _, _) | (_, Some(true), _) => ToolKind::Execute,
        _ => ToolKind::Other,
    }
}

/// Facts a tool needs about its server, shared by all of that server's tools.
#[derive(Debug)]
pub(crate) struct ServerLink {
    pub server: String,
    pub peer: Peer<RoleClient>,
    pub tool_timeout: Duration,
    pub max_output_bytes: usize,
    /// Set when the server exited: calls fail at once with this reason.
    pub dead: std::sync::Mutex<Option<String>>,
}

impl ServerLink {
    fn dead_reason(&self) -> Option<String> {
        self.dead
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// One MCP tool as a crow tool.
pub struct McpTool {
    name: String,
    mcp_name: String,
    description: String,
    schema: Value,
    kind: ToolKind,
    /// MCP says tools without `readOnlyHint` may change things, so every such tool asks.
    read_only: bool,
    link: Arc<ServerLink>,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.name)
            .field("server", &self.link.server)
            .finish_non_exhaustive()
    }
}

impl McpTool {
    /// Adapts `tool`, or says why it cannot be offered to a model.
    pub(crate) fn new(tool: &rmcp::model::Tool, link: Arc<ServerLink>) -> Result<Self, String> {
        let mut schema = Value::Object((*tool.input_schema).clone());
        match schema.get("type") {
            Some(Value::String(t)) if t == "object" => {}
            // Servers often omit the type of an empty argument list; models need it.
            None => {
                if let Some(obj) = schema.as_object_mut() {
                    obj.insert("type".into(), Value::String("object".into()));
                }
            }
            Some(other) => {
                return Err(format!(
                    "its input schema has type {other}, but tool arguments must be an object"
                ));
            }
        }
        if let Some(props) = schema.get("properties")
            && !props.is_object()
        {
            return Err("its input schema's `properties` is not an object".into());
        }
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or_default()
            .to_owned();
        Ok(Self {
            name: tool_name(&link.server, &tool.name),
            mcp_name: tool.name.to_string(),
            description,
            schema,
            kind: tool_kind(tool.annotations.as_ref()),
            read_only: tool
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false),
            link,
        })
    }

    pub fn mcp_name(&self) -> &str {
        &self.mcp_name
    }

    pub fn server(&self) -> &str {
        &self.link.server
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> ToolResult {
        let server = &self.link.server;
        if let Some(reason) = self.link.dead_reason() {
            return ToolResult::error(format!(
                "MCP server '{server}' is not running ({reason}); its tools are unavailable"
            ));
        }
        let arguments = match input {
            Value::Object(map) => map,
            Value::Null => serde_json::Map::new(),
            other => {
                return ToolResult::error(format!("arguments must be a JSON object, got {other}"));
            }
        };
        let params = CallToolRequestParams::new(self.mcp_name.clone()).with_arguments(arguments);
        let timeout = self.link.tool_timeout;
        // Dropping the request future (cancel or timeout) makes rmcp send
        // notifications/cancelled, so the server can stop its work too.
        let response = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => return ToolResult::cancelled(),
            r = tokio::time::timeout(timeout, self.link.peer.call_tool_once(params)) => r,
        };
        match response {
            Err(_) => ToolResult::error(format!(
                "MCP server '{server}' did not answer {} within {:.0?} (tool_timeout_sec); the call was cancelled",
                self.mcp_name, timeout
            )),
            Ok(Ok(CallToolResponse::Complete(result))) => {
                to_tool_result(&result, self.link.max_output_bytes)
            }
            Ok(Ok(_)) => ToolResult::error(format!(
                "MCP server '{server}' asked for client input or started a task; crow does not support that yet"
            )),
            Ok(Err(ServiceError::McpError(e))) => ToolResult::error(format!(
                "MCP server '{server}' refused the call: {}",
                e.message
            )),
            Ok(Err(ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                let reason = self
                    .link
                    .dead_reason()
                    .unwrap_or_else(|| "its connection closed".into());
                ToolResult::error(format!(
                    "MCP server '{server}' stopped during the call ({reason})"
                ))
            }
            Ok(Err(e)) => ToolResult::error(format!("MCP server '{server}': {e}")),
        }
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters_schema(&self) -> Value {
        self.schema.clone()
    }

    fn kind(&self) -> ToolKind {
        self.kind
    }

    fn asks_permission(&self) -> bool {
        !self.read_only
    }

    async fn execute(&self, input: Value, ctx: &ToolContext) -> ToolResult {
        let started = Instant::now();
        if !self.read_only {
            let title = format!("{} (MCP server {})", self.mcp_name, self.link.server);
            if let PermissionDecision::Deny { reason } = ctx
                .ask_permission(&self.name, self.kind, title, &input)
                .await
            {
                return ToolResult::error(format!("permission denied: {reason}"));
            }
        }
        let mut result = self.call(input, ctx).await;
        result.metadata.duration_ms = started.elapsed().as_millis().try_into().unwrap_or(u64::MAX);
        result
    }
}

/// Flattens an MCP result for the model: text as is, structured content as JSON when no
/// text carries it, images/audio/resources as short placeholders (crow's history is text).
pub fn to_tool_result(result: &CallToolResult, max_output_bytes: usize) -> ToolResult {
    let mut parts: Vec<String> = Vec::new();
    // Matched on the wire shape, not rmcp's enum, so new content kinds degrade to a note.
    for block in &result.content {
        let v = serde_json::to_value(block).unwrap_or(Value::Null);
        let field = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default();
        let part = match field("type") {
            "text" => field("text").to_owned(),
            kind @ ("image" | "audio") => format!(
                "[{kind}: {}, {} bytes base64]",
                field("mimeType"),
                field("data").len()
            ),
            "resource" => {
                let res = &v["resource"];
                let uri = res["uri"].as_str().unwrap_or_default();
                match res["text"].as_str() {
                    Some(text) => format!("[resource {uri}]\n{text}"),
                    None => format!(
                        "[resource {uri}: {}, {} bytes base64]",
                        res["mimeType"].as_str().unwrap_or("binary"),
                        res["blob"].as_str().map_or(0, str::len)
                    ),
                }
            }
            "resource_link" => format!("[resource link: {} {}]", field("name"), field("uri")),
            other => format!("[{other} content]"),
        };
        parts.push(part);
    }
    let has_text = result
        .content
        .iter()
        .any(|b| serde_json::to_value(b).is_ok_and(|v| v["type"] == "text"));
    if let Some(structured) = &result.structured_content
        && !has_text
    {
        parts.push(serde_json::to_string_pretty(structured).unwrap_or_default());
    }
    let output = cap_head_tail(&parts.join("\n"), max_output_bytes);
    let metadata = ToolMetadata {
        extra: result.structured_content.clone().unwrap_or(Value::Null),
        ..ToolMetadata::default()
    };
    let base = if result.is_error == Some(true) {
        ToolResult::error(if output.is_empty() {
            "the tool reported an error".to_owned()
        } else {
            output
        })
    } else {
        ToolResult::success(output)
    };
    base.with_metadata(metadata)
}

/// Keeps the first and last halves of `text` within `max_bytes` (the built-in tools' cap),
/// saying how much was left out.
pub fn cap_head_tail(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut head = max_bytes / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - (max_bytes - max_bytes / 2);
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n\n[... {} bytes omitted ...]\n\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_are_namespaced_sanitised_and_bounded() {
        assert_eq!(
            tool_name("time", "get_current_time"),
            "mcp__time__get_current_time"
        );
        assert_eq!(tool_name("a", "get.sum/x"), "mcp__a__get_sum_x");
        let long = "x".repeat(100);
        let a = tool_name("s", &format!("{long}a"));
        let b = tool_name("s", &format!("{long}b"));
        assert_eq!(a.len(), MAX_TOOL_NAME);
        assert_ne!(a, b);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
    }

    #[test]
    fn kinds_follow_annotations() {
        let ann = |r: Option<bool>, d: Option<bool>, o: Option<bool>| {
            let mut a: ToolAnnotations = serde_json::from_value(serde_json::json!({})).unwrap();
            a.read_only_hint = r;
            a.destructive_hint = d;
            a.open_world_hint = o;
            a
        };
        assert_eq!(tool_kind(None), ToolKind::Other);
        assert_eq!(
            tool_kind(Some(&ann(Some(true), None, None))),
            ToolKind::Read
        );
        assert_eq!(
            tool_kind(Some(&ann(Some(true), None, Some(true)))),
            ToolKind::Fetch
        );
        assert_eq!(
            tool_kind(Some(&ann(Some(false), Some(false), None))),
            ToolKind::Edit
        );
        assert_eq!(
            tool_kind(Some(&ann(Some(false), None, None))),
            ToolKind::Execute
        );
        assert_eq!(tool_kind(Some(&ann(None, None, None))), ToolKind::Other);
    }

    #[test]
    fn results_map_every_content_kind() {
        let result: CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}},
                {"type": "resource_link", "uri": "file:///b", "name": "b"}
            ],
            "structuredContent": {"n": 1},
            "isError": true
        }))
        .unwrap();
        let r = to_tool_result(&result, 10_000);
        assert_eq!(r.status, crow_core::ToolStatus::Error);
        assert!(
            r.output
                .starts_with("hello\n[image: image/png, 8 bytes base64]"),
            "{}",
            r.output
        );
        assert!(r.output.contains("[resource file:///a.txt]\ninside"));
        assert!(r.output.contains("[resource link: b file:///b]"));
        assert_eq!(r.metadata.extra["n"], 1);

        let structured_only: CallToolResult = serde_json::from_value(
            serde_json::json!({"content": [], "structuredContent": {"n": 2}}),
        )
        .unwrap();
        let r = to_tool_result(&structured_only, 10_000);
        assert!(
            r.is_success() && r.output.contains("\"n\": 2"),
            "{}",
            r.output
        );
    }

    #[test]
    fn output_is_capped_keeping_head_and_tail() {
        let text = format!("{}{}", "a".repeat(5000), "é".repeat(5000));
        let capped = cap_head_tail(&text, 1000);
        assert!(capped.len() < 1100);
        assert!(capped.starts_with('a') && capped.ends_with('é'));
        assert!(capped.contains("bytes omitted"));
    }
}
