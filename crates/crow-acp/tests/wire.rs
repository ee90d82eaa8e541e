//! crow-acp on the wire: raw bytes in, raw lines out, through `crow_acp::serve` (the transport
//! `crow acp` uses on stdio). For what a typed client cannot send or cannot see: bytes that
//! are not UTF-8, huge malformed lines, the size of error replies, protocol-level
//! notifications such as `$/cancel_request`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use crow_acp::{
    AgentFactory, Choice, ModeInfo, ModelInfo, RunnerError, SessionRunner, SessionSpec, Stop,
    TurnInput, TurnOutcome,
};
use crow_core::{AgentEvent, EventSender, PermissionRequest, ToolKind, Usage};
use serde_json::{Value, json};
use tokio::io::{
    AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf,
};
use tokio_util::sync::CancellationToken;

struct Factory;

/// Asks permission for a write and gives up when the turn is cancelled (dropping the
/// question, as the core drops a tool's future after its grace period).
struct Runner {
    spec: SessionSpec,
}

#[async_trait]
impl SessionRunner for Runner {
    async fn prompt(
        &mut self,
        input: TurnInput,
        events: &EventSender,
        cancel: CancellationToken,
    ) -> Result<TurnOutcome, RunnerError> {
        match input.text.as_str() {
            "create" => return Ok(create_a_file(events)),
            "work" => return Ok(work_until_cancelled(events, cancel).await),
            _ => {}
        }
        events
            .send(AgentEvent::ToolCallStart {
                agent: "builder".into(),
                call_id: "c1".into(),
                tool: "write_file".into(),
                kind: ToolKind::Edit,
                arguments: json!({"path": "a.txt", "content": "x"}),
            })
            .unwrap();
        let request = PermissionRequest {
            session_id: self.spec.session_id.clone(),
            agent: "builder".into(),
            call_id: "c1".into(),
            tool: "write_file".into(),
            kind: ToolKind::Edit,
            title: "Create a.txt".into(),
            input: json!({"path": "a.txt", "content": "x"}),
            preview: None,
            policy: None,
            unconfined: false,
        };
        tokio::select! {
            _ = self.spec.permission.check(request) => {}
            () = cancel.cancelled() => {}
        }
        Ok(TurnOutcome {
            stop: Stop::Cancelled,
            usage: Usage::default(),
        })
    }
}

/// Set once a cancelled "work" turn has saved what it did.
static SAVED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Says it is working, then waits for a cancel and takes a while to save.
async fn work_until_cancelled(events: &EventSender, cancel: CancellationToken) -> TurnOutcome {
    events
        .send(AgentEvent::TextDelta {
            agent: "builder".into(),
            delta: "working".into(),
        })
        .unwrap();
    cancel.cancelled().await;
    // A slow save is the behaviour under test (the reply waits for it), not a wait.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    SAVED.store(true, std::sync::atomic::Ordering::SeqCst);
    TurnOutcome {
        stop: Stop::Cancelled,
        usage: Usage::default(),
    }
}

/// Writes a new file (its diff has no old text).
fn create_a_file(events: &EventSender) -> TurnOutcome {
    let edit = crow_core::FileEdit {
        path: "/p/new.txt".into(),
        old_text: None,
        new_text: "hi\n".into(),
    };
    let start = AgentEvent::ToolCallStart {
        agent: "builder".into(),
        call_id: "w1".into(),
        tool: "write_file".into(),
        kind: ToolKind::Edit,
        arguments: json!({"path": "new.txt", "content": "hi\n"}),
    };
    let end = AgentEvent::ToolCallEnd {
        agent: "builder".into(),
        call_id: "w1".into(),
        tool: "write_file".into(),
        result: crow_core::ToolResult {
            metadata: crow_core::ToolMetadata {
                edits: vec![edit],
                ..crow_core::ToolMetadata::default()
            },
            ..crow_core::ToolResult::success("Created new.txt")
        },
        duration_ms: 1,
    };
    events.send(start).unwrap();
    events.send(end).unwrap();
    TurnOutcome {
        stop: Stop::EndTurn,
        usage: Usage::default(),
    }
}

#[async_trait]
impl AgentFactory for Factory {
    fn modes(&self) -> Vec<ModeInfo> {
        vec![ModeInfo {
            choice: Choice::new("build", "Build"),
            auto_approve: false,
        }]
    }

    fn models(&self) -> (Vec<ModelInfo>, String) {
        (
            vec![ModelInfo {
                choice: Choice::new("p/m", "m"),
                context_window: None,
            }],
            "p/m".into(),
        )
    }

    fn can_restore(&self) -> bool {
        true
    }

    async fn create(&self, spec: SessionSpec) -> Result<Box<dyn SessionRunner>, RunnerError> {
        Ok(Box::new(Runner { spec }))
    }
}

/// A client that writes bytes and reads lines.
struct Wire {
    to_agent: WriteHalf<DuplexStream>,
    from_agent: Lines<BufReader<ReadHalf<DuplexStream>>>,
    /// Every line read so far.
    seen: Vec<String>,
    served: tokio::task::JoinHandle<Result<(), agent_client_protocol::Error>>,
}

impl Wire {
    fn start() -> Self {
        let (client, agent) = tokio::io::duplex(64 * 1024);
        let (agent_in, agent_out) = tokio::io::split(agent);
        let served = tokio::spawn(crow_acp::serve(Arc::new(Factory), agent_in, agent_out));
        let (from_agent, to_agent) = tokio::io::split(client);
        Self {
            to_agent,
            from_agent: BufReader::new(from_agent).lines(),
            seen: Vec::new(),
            served,
        }
    }

    async fn send_bytes(&mut self, bytes: &[u8]) {
        self.to_agent.write_all(bytes).await.unwrap();
        self.to_agent.flush().await.unwrap();
    }

    async fn send(&mut self, message: Value) {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        self.send_bytes(&line).await;
    }

    /// Reads lines until one matches; returns it (raw) and its JSON.
    async fn until(&mut self, pred: impl Fn(&Value) -> bool) -> (String, Value) {
        loop {
            let line = self
                .from_agent
                .next_line()
                .await
                .unwrap()
                .expect("the agent closed its output");
            self.seen.push(line.clone());
            let value: Value = serde_json::from_str(&line).unwrap();
            if pred(&value) {
                return (line, value);
            }
        }
    }

    async fn reply_to(&mut self, id: i64) -> (String, Value) {
        self.until(|v| v["id"] == id && v.get("method").is_none())
            .await
    }

    async fn initialize(&mut self) {
        self.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {}}}))
            .await;
        let (_, reply) = self.reply_to(0).await;
        assert_eq!(reply["result"]["protocolVersion"], 1);
    }

    async fn new_session(&mut self, id: i64, cwd: &str) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "session/new",
            "params": {"cwd": cwd, "mcpServers": []}}))
            .await;
        self.reply_to(id).await.1
    }
}

fn existing_dir() -> String {
    let dir: PathBuf = std::env::temp_dir();
    dir.canonicalize().unwrap().display().to_string()
}

#[tokio::test]
async fn a_line_that_is_not_utf8_is_a_parse_error_and_the_connection_lives() {
    let mut wire = Wire::start();
    wire.initialize().await;
    wire.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"session/new\",\"params\":{\"cwd\":\"/tmp/\xff\xfe\"}}\n")
        .await;
    let (_, reply) = wire.until(|v| v.get("error").is_some()).await;
    assert_eq!(reply["id"], Value::Null);
    assert_eq!(reply["error"]["code"], -32700);
    // The next request is served: the connection and its sessions live on.
    let opened = wire.new_session(8, &existing_dir()).await;
    assert!(opened["result"]["sessionId"].is_string(), "{opened}");
}

#[tokio::test]
async fn error_replies_quote_little_of_what_they_refuse() {
    let mut wire = Wire::start();
    wire.initialize().await;
    let filler = "a".repeat(2 * 1024 * 1024);

    // Not JSON at all: 2 MB in, a short parse error out.
    wire.send_bytes(format!("{{not json {filler}\n").as_bytes())
        .await;
    let (line, reply) = wire.until(|v| v.get("error").is_some()).await;
    assert_eq!(reply["error"]["code"], -32700);
    assert!(line.len() < 600, "a parse error of {} bytes", line.len());

    // Not UTF-8 and long.
    let mut bad = filler.clone().into_bytes();
    bad.extend_from_slice(b"\xff\n");
    wire.send_bytes(&bad).await;
    let (line, reply) = wire.until(|v| v.get("error").is_some()).await;
    assert_eq!(reply["error"]["code"], -32700);
    assert!(line.len() < 600, "a parse error of {} bytes", line.len());

    // Invalid params echo the params: cut short too.
    wire.send(json!({"jsonrpc": "2.0", "id": 3, "method": "session/new",
        "params": {"cwd": 5, "mcpServers": [], "pad": filler}}))
        .await;
    let (line, reply) = wire.reply_to(3).await;
    assert_eq!(reply["error"]["code"], -32602);
    assert!(
        line.len() < 600,
        "an invalid-params error of {} bytes",
        line.len()
    );
}

#[tokio::test]
async fn a_cwd_that_does_not_exist_is_refused() {
    let mut wire = Wire::start();
    wire.initialize().await;
    let missing = format!("{}/crow-no-such-dir/deeper", existing_dir());
    let reply = wire.new_session(1, &missing).await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    let data = reply["error"]["data"].as_str().unwrap();
    assert!(
        data.contains("does not exist") && data.contains("crow-no-such-dir"),
        "{data}"
    );

    let file = format!("{}/Cargo.toml", env!("CARGO_MANIFEST_DIR"));
    let reply = wire.new_session(2, &file).await;
    assert!(
        reply["error"]["data"]
            .as_str()
            .unwrap()
            .contains("not a directory"),
        "{reply}"
    );

    for (id, method) in [(3, "session/load"), (4, "session/resume")] {
        wire.send(json!({"jsonrpc": "2.0", "id": id, "method": method,
            "params": {"sessionId": "s", "cwd": missing, "mcpServers": []}}))
            .await;
        let (_, reply) = wire.reply_to(id).await;
        assert_eq!(reply["error"]["code"], -32602, "{method}: {reply}");
    }
}

#[tokio::test]
async fn a_dropped_client_request_sends_no_cancel_request() {
    let mut wire = Wire::start();
    wire.initialize().await;
    let opened = wire.new_session(1, &existing_dir()).await;
    let session = opened["result"]["sessionId"].clone();
    wire.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}}),
    )
    .await;
    let (_, ask) = wire
        .until(|v| v["method"] == "session/request_permission")
        .await;
    // The user does not answer; the turn is cancelled and the runner drops the question.
    wire.send(
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}),
    )
    .await;
    let (_, answered) = wire.reply_to(2).await;
    assert_eq!(answered["result"]["stopReason"], "cancelled");
    // The client answers the question as cancelled, as the protocol asks; a round trip
    // after it shows everything crow sent in between.
    wire.send(
        json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "cancelled"}}}),
    )
    .await;
    wire.new_session(3, &existing_dir()).await;
    let sent: Vec<&String> = wire
        .seen
        .iter()
        .filter(|l| l.contains("$/cancel_request"))
        .collect();
    assert!(sent.is_empty(), "crow sent {sent:?}");
}

#[tokio::test]
async fn a_malformed_request_with_a_readable_id_is_answered_with_that_id() {
    let mut wire = Wire::start();
    wire.initialize().await;
    let cases = [
        (
            11,
            r#"{"id":11,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}"#,
        ),
        (
            12,
            r#"{"jsonrpc":"1.0","id":12,"method":"session/new","params":{}}"#,
        ),
        (13, r#"{"jsonrpc":"2.0","id":13,"method":5}"#),
        (14, r#"{"jsonrpc":"2.0","id":14}"#),
        (
            15,
            r#"{"jsonrpc":"2.0","id":15,"method":"session/new","params":5}"#,
        ),
    ];
    for (id, line) in cases {
        wire.send_bytes(format!("{line}\n").as_bytes()).await;
        // Bounded: the defect was a reply with `id: null`, which a client waits for forever.
        let (_, reply) =
            tokio::time::timeout(std::time::Duration::from_secs(60), wire.reply_to(id))
                .await
                .unwrap_or_else(|_| panic!("{line}: no reply with its id"));
        assert_eq!(reply["error"]["code"], -32600, "{line}: {reply}");
    }
    // Still answered as before: an id that cannot be read, and a valid request.
    wire.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":{\"a\":1},\"method\":\"x\"}\n")
        .await;
    let (_, reply) = wire.until(|v| v.get("error").is_some()).await;
    assert_eq!(reply["id"], Value::Null);
    let opened = wire.new_session(16, &existing_dir()).await;
    assert!(opened["result"]["sessionId"].is_string(), "{opened}");
}

#[tokio::test]
async fn a_created_file_diff_says_its_old_text_is_null() {
    let mut wire = Wire::start();
    wire.initialize().await;
    let opened = wire.new_session(1, &existing_dir()).await;
    let session = opened["result"]["sessionId"].clone();
    wire.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "create"}]}}),
    )
    .await;
    let (line, update) = wire
        .until(|v| v["params"]["update"]["sessionUpdate"] == "tool_call_update")
        .await;
    let diff = &update["params"]["update"]["content"][0];
    assert_eq!(diff["type"], "diff", "{line}");
    assert!(
        diff.as_object().unwrap().contains_key("oldText") && diff["oldText"].is_null(),
        "{line}"
    );
    wire.reply_to(2).await;
}

#[tokio::test]
async fn a_turn_running_when_the_input_ends_is_cancelled_and_saved_first() {
    let mut wire = Wire::start();
    wire.initialize().await;
    let opened = wire.new_session(1, &existing_dir()).await;
    let session = opened["result"]["sessionId"].clone();
    wire.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "work"}]}}),
    )
    .await;
    wire.until(|v| v["params"]["update"]["content"]["text"] == "working")
        .await;
    // The editor goes away mid-turn.
    wire.to_agent.shutdown().await.unwrap();
    let served = tokio::time::timeout(std::time::Duration::from_secs(60), &mut wire.served)
        .await
        .expect("serve returned");
    assert!(served.is_ok());
    assert!(
        SAVED.load(std::sync::atomic::Ordering::SeqCst),
        "serve returned before the cancelled turn saved"
    );
}
