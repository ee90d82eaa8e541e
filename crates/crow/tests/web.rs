//! The web tools end to end: the real binary, the mock model, and a search API (SearXNG's
//! shape) on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn tool_names(request: &serde_json::Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A SearXNG-shaped search API on loopback.
async fn searxng() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = vec![0u8; 4096];
            let _ = socket.read(&mut buf).await;
            let body = r#"{"results":[{"title":"crow docs","url":"https://example.org/crow","content":"How crow works"}]}"#;
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(reply.as_bytes()).await;
        }
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread")]
async fn web_search_is_offered_only_when_configured_and_its_results_reach_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("No search here.")))
        .await
        .unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let names = tool_names(&mock.requests()[0].body);
    assert!(!names.contains(&"web_search".to_owned()), "{names:?}");
    assert!(names.contains(&"web_fetch".to_owned()), "{names:?}");

    let api = searxng().await;
    let config = dir.path().join(".home/.config/crow");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        format!("[tools.web_search]\nprovider = \"searxng\"\nbase_url = \"{api}\"\n"),
    )
    .unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "web_search",
            json!({"query": "crow agent"}),
        ))
        .reply(Reply::text("Found the docs."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "search")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let requests = mock.requests();
    assert!(tool_names(&requests[0].body).contains(&"web_search".to_owned()));
    let result = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        result,
        "1. crow docs\n   https://example.org/crow\n   How crow works"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn web_fetch_of_a_loopback_address_is_refused_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let api = searxng().await;
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "web_fetch",
            json!({"url": format!("{api}/")}),
        ))
        .reply(Reply::text("Could not."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "fetch it")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let end = out
        .of_type("tool_call_end")
        .into_iter()
        .find(|e| e["tool"] == "web_fetch")
        .unwrap()
        .clone();
    assert_eq!(end["result"]["status"], "error");
    let text = end["result"]["output"].as_str().unwrap();
    assert!(text.contains("loopback or private"), "{text}");
}
