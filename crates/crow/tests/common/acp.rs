//! A raw JSON-RPC client on one real `crow acp` process.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::crow;

/// A raw JSON-RPC client on one `crow acp` process.
pub struct Acp {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next: i64,
    /// Every message read (notifications and answers), for tests that look at updates.
    pub seen: Vec<Value>,
}

impl Acp {
    pub async fn start(dir: &Path) -> Self {
        let mut cmd = crow(dir);
        cmd.arg("acp").stdin(Stdio::piped());
        Self::spawn(cmd).await
    }

    /// Starts `cmd` (a `crow acp` command with piped stdin) and initializes the connection.
    pub async fn spawn(mut cmd: tokio::process::Command) -> Self {
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut acp = Self {
            child,
            stdin,
            lines,
            next: 1,
            seen: Vec::new(),
        };
        acp.call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
        acp
    }

    /// Sends a request without waiting for its answer; returns its id.
    #[allow(dead_code)]
    pub async fn send(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next;
        self.next += 1;
        self.write(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// Answers a request crow made (a permission question).
    #[allow(dead_code)]
    pub async fn respond(&mut self, id: &Value, result: Value) {
        self.write(json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await;
    }

    /// The next message crow sends (kept in `seen` too).
    #[allow(dead_code)]
    pub async fn next_message(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("a message in time")
            .unwrap()
            .expect("crow acp is still running");
        let msg: Value = serde_json::from_str(&line).unwrap();
        self.seen.push(msg.clone());
        msg
    }

    async fn write(&mut self, msg: Value) {
        let mut text = msg.to_string();
        text.push('\n');
        self.stdin.write_all(text.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Sends a request and returns its response, skipping notifications.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .expect("an answer in time")
                .unwrap()
                .expect("crow acp is still running");
            let msg: Value = serde_json::from_str(&line).unwrap();
            self.seen.push(msg.clone());
            if msg["id"].as_i64() == Some(id) && msg.get("method").is_none() {
                return msg;
            }
        }
    }

    pub async fn stop(mut self) {
        drop(self.stdin);
        let _ = self.child.wait().await;
    }
}
