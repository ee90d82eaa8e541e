//! `crow serve` for tests: the real binary on a free port, its address read from the line it
//! prints, and a small client for its API and its Server-Sent Events.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use crow_testkit::MockLlm;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::{HUNG, crow, mock_provider, write_user_config};

pub const TOKEN: &str = "test-token-7f3a";

pub struct Server {
    child: tokio::process::Child,
    pub base: String,
    stderr: Arc<Mutex<String>>,
    client: reqwest::Client,
}

impl Server {
    /// `crow serve --port 0` in `dir` with the mock as the user's configured model.
    pub async fn start(dir: &Path, mock: &MockLlm) -> Self {
        write_user_config(dir, &mock_provider(mock));
        let mut child = crow(dir)
            .args(["serve", "--port", "0", "--token", TOKEN])
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (found, address) = tokio::sync::oneshot::channel();
        let kept = Arc::clone(&log);
        // Drained for the server's whole life: a full pipe would stop it.
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut found = Some(found);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.split("listening on ").nth(1)
                    && let Some(url) = rest.split_whitespace().next()
                    && let Some(found) = found.take()
                {
                    let _ = found.send(url.trim_end_matches('/').to_owned());
                }
                let mut log = kept.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let base = tokio::time::timeout(HUNG, address)
            .await
            .expect("crow serve never said where it listens")
            .unwrap_or_else(|_| panic!("crow serve ended: {}", log.lock().unwrap()));
        Self {
            child,
            base,
            stderr: log,
            client: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub async fn get(&self, path: &str) -> Value {
        let response = self
            .client
            .get(self.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "GET {path}: {}",
            response.status()
        );
        response.json().await.unwrap()
    }

    pub async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// A new session working in `cwd`; its id.
    pub async fn create(&self, cwd: &Path) -> String {
        let response = self.post("/api/sessions", json!({ "cwd": cwd })).await;
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, 201, "{body}\n{}", self.stderr());
        body["id"].as_str().unwrap().to_owned()
    }

    pub async fn prompt(&self, id: &str, text: &str) -> Value {
        let response = self
            .post(
                &format!("/api/sessions/{id}/prompt"),
                json!({ "text": text }),
            )
            .await;
        assert_eq!(response.status(), 202);
        response.json().await.unwrap()
    }

    /// The session's event stream, after event `after` (by `Last-Event-ID`).
    pub async fn events(&self, id: &str, after: Option<u64>) -> Events {
        let mut request = self
            .client
            .get(self.url(&format!("/api/sessions/{id}/events")))
            .bearer_auth(TOKEN);
        if let Some(after) = after {
            request = request.header("Last-Event-ID", after.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Events {
            body: Box::pin(response.bytes_stream().map(|r| r.map(|b| b.to_vec()))),
            buffer: String::new(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

type Body = std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<Vec<u8>>> + Send>>;

/// One SSE connection, read event by event.
pub struct Events {
    body: Body,
    buffer: String,
}

impl Events {
    /// The next event: its id and its JSON.
    pub async fn next(&mut self) -> (u64, Value) {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut id = None;
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                // Keep-alive comments carry no event.
                if let Some(id) = id {
                    return (id, serde_json::from_str(&data).unwrap());
                }
                continue;
            }
            let chunk = tokio::time::timeout(HUNG, self.body.next())
                .await
                .expect("no event in time")
                .expect("the event stream ended")
                .unwrap();
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Events up to and including the next one of type `kind`.
    pub async fn until_type(&mut self, kind: &str) -> Vec<(u64, Value)> {
        let mut seen = Vec::new();
        loop {
            let event = self.next().await;
            let done = event.1["type"] == kind;
            seen.push(event);
            if done {
                return seen;
            }
        }
    }
}
