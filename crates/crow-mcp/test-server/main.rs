//! A small rmcp MCP server (stdio) that misbehaves on request, for crow-mcp's fault tests.
//!
//! Flags: `--slow-start-ms N` (sleep before answering anything), `--die-at-start` (exit 2
//! after a line on stderr), `--grandchild-pid-file PATH` (start a `sleep 300` grandchild and
//! write its pid, to prove shutdown leaves no orphan). Tools: `echo`, `readonly_echo`,
//! `crash` (exits mid-call), `sleep` (`ms`; writes `$CROW_FAULT_STARTED_FILE` when it starts
//! and `$CROW_FAULT_CANCEL_FILE` when the client cancels it), `huge` (`bytes` of text), `fail` (isError), `mixed` (image, resource and
//! structured content), `add_tool` (adds `added` and sends tools/list_changed), `bad_schema`
//! (an input schema that is not an object).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

fn tool(name: &str, description: &str, schema: Value, annotations: Option<Value>) -> Tool {
    let mut v = json!({"name": name, "description": description, "inputSchema": schema});
    if let Some(a) = annotations {
        v["annotations"] = a;
    }
    // The JSON is written above by hand; a mistake is a bug in this test server.
    serde_json::from_value(v).unwrap_or_else(|e| panic!("bad tool {name}: {e}"))
}

fn object(props: Value) -> Value {
    json!({"type": "object", "properties": props})
}

fn result(v: Value) -> Result<CallToolResponse, ErrorData> {
    serde_json::from_value::<CallToolResult>(v)
        .map(CallToolResponse::Complete)
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

struct Faults {
    tools: Arc<Mutex<Vec<Tool>>>,
}

impl Faults {
    fn new() -> Self {
        let tools = vec![
            tool(
                "echo",
                "Echoes text",
                object(json!({"text": {"type": "string"}})),
                None,
            ),
            tool(
                "readonly_echo",
                "Echoes text, touching nothing",
                object(json!({"text": {"type": "string"}})),
                Some(json!({"readOnlyHint": true})),
            ),
            tool("crash", "Exits mid-call", object(json!({})), None),
            tool(
                "sleep",
                "Sleeps ms milliseconds",
                object(json!({"ms": {"type": "integer"}})),
                None,
            ),
            tool(
                "huge",
                "Returns `bytes` bytes of text",
                object(json!({"bytes": {"type": "integer"}})),
                None,
            ),
            tool("fail", "Always reports an error", object(json!({})), None),
            tool("mixed", "Returns every content kind", json!({}), None),
            tool("add_tool", "Adds the tool `added`", object(json!({})), None),
            tool(
                "bad_schema",
                "Has a non-object schema",
                json!({"type": "string"}),
                None,
            ),
        ];
        Self {
            tools: Arc::new(Mutex::new(tools)),
        }
    }
}

impl ServerHandler for Faults {
    fn get_info(&self) -> ServerConfig {
        let caps: ServerCapabilities =
            serde_json::from_value(json!({"tools": {"listChanged": true}})).unwrap_or_default();
        ServerConfig::new(caps).with_server_info(Implementation::new("crow-fault-server", "0.1.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.tools.lock().map(|t| t.clone()).unwrap_or_default();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        match request.name.as_ref() {
            "echo" | "readonly_echo" | "added" => {
                let text = args["text"].as_str().unwrap_or_default();
                result(json!({"content": [{"type": "text", "text": format!("echo: {text}")}]}))
            }
            "crash" => {
                eprintln!("crashing on purpose");
                std::process::exit(3);
            }
            "sleep" => {
                let ms = args["ms"].as_u64().unwrap_or(1000);
                if let Ok(path) = std::env::var("CROW_FAULT_STARTED_FILE") {
                    let _ = std::fs::write(path, "sleeping");
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ms)) => {
                        result(json!({"content": [{"type": "text", "text": format!("slept {ms} ms")}]}))
                    }
                    () = context.ct.cancelled() => {
                        if let Ok(path) = std::env::var("CROW_FAULT_CANCEL_FILE") {
                            let _ = std::fs::write(path, "cancelled");
                        }
                        Err(ErrorData::internal_error("cancelled", None))
                    }
                }
            }
            "huge" => {
                let n = usize::try_from(args["bytes"].as_u64().unwrap_or(1_000_000)).unwrap_or(0);
                let text: String = "0123456789abcdef\n".chars().cycle().take(n).collect();
                result(json!({"content": [{"type": "text", "text": text}]}))
            }
            "fail" => result(json!({
                "content": [{"type": "text", "text": "the thing went wrong"}],
                "isError": true
            })),
            "mixed" => result(json!({
                "content": [
                    {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
                    {"type": "resource", "resource": {"uri": "mem://note", "mimeType": "text/plain", "text": "a note"}}
                ],
                "structuredContent": {"answer": 42}
            })),
            "add_tool" => {
                if let Ok(mut tools) = self.tools.lock() {
                    tools.push(tool(
                        "added",
                        "Added at runtime",
                        object(json!({"text": {"type": "string"}})),
                        None,
                    ));
                }
                let _ = context.peer.notify_tool_list_changed().await;
                result(json!({"content": [{"type": "text", "text": "added"}]}))
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    if args.iter().any(|a| a == "--die-at-start") {
        eprintln!("fault server: refusing to start");
        std::process::exit(2);
    }
    if let Some(path) = flag("--grandchild-pid-file") {
        match std::process::Command::new("sleep").arg("300").spawn() {
            Ok(child) => {
                let _ = std::fs::write(path, format!("{}\n", child.id()));
            }
            Err(e) => eprintln!("cannot spawn the grandchild: {e}"),
        }
    }
    if let Some(ms) = flag("--slow-start-ms").and_then(|v| v.parse().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    match Faults::new()
        .serve((tokio::io::stdin(), tokio::io::stdout()))
        .await
    {
        Ok(service) => {
            let _ = service.waiting().await;
        }
        Err(e) => eprintln!("fault server: {e}"),
    }
}
