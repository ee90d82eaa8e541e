//! `web_search`: a query to a search API the user already has — Brave Search, Tavily, or a
//! SearXNG instance — answered as a numbered list of titles, URLs and snippets. One trait,
//! one backend per API; the tool exists only when the user configured one (a query leaves the
//! machine with the user's key).

use std::time::Duration;

use async_trait::async_trait;
use crow_core::{Footprint, Tool, ToolContext, ToolKind, ToolResult};
use serde::Deserialize;
use serde_json::Value;

use crate::args::parse;

const SHAPE: &str = r#"{"query": string, "count"?: integer}"#;
const TIME_LIMIT: Duration = Duration::from_secs(20);

/// Which search API, and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSearchOptions {
    pub backend: SearchBackend,
    /// The API's base URL (a SearXNG instance's; the hosted APIs' own by default).
    pub base_url: String,
    /// The key (Brave, Tavily); never printed.
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchBackend {
    Brave,
    Tavily,
    Searxng,
}

impl SearchBackend {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "brave" => Some(Self::Brave),
            "tavily" => Some(Self::Tavily),
            "searxng" => Some(Self::Searxng),
            _ => None,
        }
    }

    /// The hosted API's base URL (SearXNG has none: the user names the instance).
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            Self::Brave => Some("https://api.search.brave.com/res/v1"),
            Self::Tavily => Some("https://api.tavily.com"),
            Self::Searxng => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Brave => "brave",
            Self::Tavily => "tavily",
            Self::Searxng => "searxng",
        }
    }
}

/// One result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

#[derive(Debug, Deserialize)]
struct Args {
    query: String,
    #[serde(default)]
    count: Option<usize>,
}

pub struct WebSearchTool {
    options: WebSearchOptions,
}

impl WebSearchTool {
    pub fn new(options: WebSearchOptions) -> Self {
        Self { options }
    }
}

#[async_trait]
impl Tool for WebSearchTool {
    fn name(&self) -> &str {
        "web_search"
    }

    fn description(&self) -> &str {
        "Search the web; returns titles, URLs and snippets (read a page with web_fetch)."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "count": {"type": "integer", "description": "Results, 1-10 (default 5)"}
            },
            "required": ["query"]
        })
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Fetch
    }

    fn footprint(&self, _input: &serde_json::Value, _ctx: &ToolContext) -> Footprint {
        Footprint::Nothing
    }

    async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        let args: Args = match parse(&input, SHAPE) {
            Ok(a) => a,
            Err(e) => return e,
        };
        if args.query.trim().is_empty() {
            return ToolResult::error("the query is empty");
        }
        let count = args.count.unwrap_or(5).clamp(1, 10);
        let search = search(&self.options, args.query.trim(), count);
        let hits = tokio::select! {
            result = tokio::time::timeout(TIME_LIMIT, search) => match result {
                Ok(Ok(hits)) => hits,
                Ok(Err(message)) => return ToolResult::error(message),
                Err(_) => return ToolResult::error(format!(
                    "the {} search took longer than {} s",
                    self.options.backend.name(),
                    TIME_LIMIT.as_secs()
                )),
            },
            () = ctx.cancel.cancelled() => return ToolResult::cancelled(),
        };
        if hits.is_empty() {
            return ToolResult::success(format!("no results for \"{}\"", args.query.trim()));
        }
        let text: Vec<String> = hits
            .iter()
            .enumerate()
            .map(|(i, h)| format!("{}. {}\n   {}\n   {}", i + 1, h.title, h.url, h.snippet))
            .collect();
        ToolResult::success(text.join("\n"))
    }
}

async fn search(options: &WebSearchOptions, query: &str, count: usize) -> Result<Vec<Hit>, String> {
    let client = reqwest::Client::builder()
        .user_agent(concat!("crow/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
    let base = options.base_url.trim_end_matches('/');
    let key = options.api_key.clone().unwrap_or_default();
    let request = match options.backend {
        SearchBackend::Brave => client
            .get(format!("{base}/web/search"))
            .query(&[("q", query), ("count", &count.to_string())])
            .header("X-Subscription-Token", key)
            .header("Accept", "application/json"),
        SearchBackend::Tavily => client
            .post(format!("{base}/search"))
            .bearer_auth(key)
            .json(&serde_json::json!({"query": query, "max_results": count})),
        SearchBackend::Searxng => client
            .get(format!("{base}/search"))
            .query(&[("q", query), ("format", "json")]),
    };
    let name = options.backend.name();
    let response = request
        .send()
        .await
        .map_err(|e| format!("the {name} search failed: {}", e.without_url()))?;
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .map_err(|e| format!("the {name} search answered {status} with no JSON: {e}"))?;
    if !status.is_success() {
        let detail = body
            .pointer("/error/detail")
            .or_else(|| body.pointer("/detail"))
            .or_else(|| body.get("error"))
            .map(|d| d.as_str().map_or_else(|| d.to_string(), str::to_owned))
            .unwrap_or_default();
        let hint = if status.as_u16() == 401 || status.as_u16() == 403 {
            " (check the key: [tools.web_search] api_key_env)"
        } else {
            ""
        };
        return Err(format!(
            "the {name} search answered {status}: {detail}{hint}"
        ));
    }
    Ok(hits(options.backend, &body, count))
}

/// The results of an answer, whatever each API calls its fields.
fn hits(backend: SearchBackend, body: &Value, count: usize) -> Vec<Hit> {
    let (list, snippet) = match backend {
        SearchBackend::Brave => (body.pointer("/web/results"), "description"),
        SearchBackend::Tavily => (body.get("results"), "content"),
        SearchBackend::Searxng => (body.get("results"), "content"),
    };
    let text = |v: &Value, key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim()
            .to_owned()
    };
    list.and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter(|item| !text(item, "url").is_empty())
                .take(count)
                .map(|item| Hit {
                    title: text(item, "title"),
                    url: text(item, "url"),
                    snippet: crate::output::truncate_line(&text(item, snippet), 400),
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::test_support::TestEnv;
    use crow_core::ToolStatus;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback server answering every request with `status` and `body`, returning what
    /// it was asked (the request head and body).
    async fn serve(
        status: &'static str,
        body: &'static str,
    ) -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = vec![0u8; 8192];
                let n = socket.read(&mut buf).await.unwrap_or(0);
                let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            }
        });
        (format!("http://{addr}"), rx)
    }

    fn tool(backend: SearchBackend, base_url: String) -> WebSearchTool {
        WebSearchTool::new(WebSearchOptions {
            backend,
            base_url,
            api_key: Some("sekret-key".into()),
        })
    }

    #[tokio::test]
    async fn each_backend_is_asked_its_way_and_answers_as_a_numbered_list() {
        let env = TestEnv::new();
        let cases = [
            (
                SearchBackend::Brave,
                r#"{"web":{"results":[{"title":"Rust","url":"https://rust-lang.org","description":"A language"}]}}"#,
                "GET /web/search?q=rust+lang",
                "x-subscription-token: sekret-key",
            ),
            (
                SearchBackend::Tavily,
                r#"{"results":[{"title":"Rust","url":"https://rust-lang.org","content":"A language"}]}"#,
                "POST /search",
                "authorization: Bearer sekret-key",
            ),
            (
                SearchBackend::Searxng,
                r#"{"results":[{"title":"Rust","url":"https://rust-lang.org","content":"A language"}]}"#,
                "GET /search?q=rust+lang&format=json",
                "",
            ),
        ];
        for (backend, body, line, header) in cases {
            let (base, mut asked) = serve("200 OK", body).await;
            let r = tool(backend, base)
                .execute(serde_json::json!({"query": "rust lang"}), &env.ctx)
                .await;
            assert_eq!(r.status, ToolStatus::Success, "{backend:?}: {}", r.output);
            assert_eq!(r.output, "1. Rust\n   https://rust-lang.org\n   A language");
            let request = asked.recv().await.unwrap();
            assert!(request.starts_with(line), "{backend:?}: {request}");
            assert!(
                request.to_lowercase().contains(&header.to_lowercase()),
                "{backend:?}: {request}"
            );
        }
    }

    #[tokio::test]
    async fn a_refused_key_is_an_error_that_names_the_setting_and_not_the_key() {
        let env = TestEnv::new();
        let (base, _asked) = serve("401 Unauthorized", r#"{"error":{"detail":"bad token"}}"#).await;
        let r = tool(SearchBackend::Brave, base)
            .execute(serde_json::json!({"query": "x"}), &env.ctx)
            .await;
        assert_eq!(r.status, ToolStatus::Error);
        assert!(
            r.output.contains("401") && r.output.contains("bad token"),
            "{}",
            r.output
        );
        assert!(r.output.contains("api_key_env"), "{}", r.output);
        assert!(!r.output.contains("sekret-key"), "{}", r.output);
    }
}
