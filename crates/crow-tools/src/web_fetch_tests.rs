use std::net::Ipv4Addr;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::test_support::TestEnv;
use crow_core::ToolStatus;

/// A loopback HTTP server answering a few paths, one connection at a time.
async fn serve() -> String {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = vec![0u8; 4096];
            let n = socket.read(&mut buf).await.unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]).into_owned();
            let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
            let (status, kind, body, extra): (&str, &str, Vec<u8>, &str) = match path.as_str() {
                "/page" => (
                    "200 OK",
                    "text/html; charset=utf-8",
                    b"<html><body><h1>Title</h1><p>Some <b>bold</b> text.</p></body></html>"
                        .to_vec(),
                    "",
                ),
                "/image" => (
                    "200 OK",
                    "image/png",
                    vec![0x89, b'P', b'N', b'G', 0, 0],
                    "",
                ),
                "/redirect" => ("302 Found", "text/plain", Vec::new(), "Location: /page\r\n"),
                "/loop" => ("302 Found", "text/plain", Vec::new(), "Location: /loop\r\n"),
                "/big" => ("200 OK", "text/plain", vec![b'x'; 100_000], ""),
                _ => ("404 Not Found", "text/plain", b"nothing here".to_vec(), ""),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(&body).await;
        }
    });
    format!("http://{addr}")
}

fn tool(allow_private: bool) -> WebFetchTool {
    WebFetchTool::new(WebFetchOptions {
        allow_private,
        max_download_bytes: 10_000,
        ..WebFetchOptions::default()
    })
}

#[tokio::test]
async fn loopback_is_refused_unless_allowed() {
    let base = serve().await;
    let env = TestEnv::new();
    let r = tool(false)
        .execute(json!({"url": format!("{base}/page")}), &env.ctx)
        .await;
    assert_eq!(r.status, ToolStatus::Error);
    assert!(r.output.contains("loopback or private"), "{}", r.output);
    assert!(r.output.contains("web_fetch_allow_private"), "{}", r.output);
}

#[tokio::test]
async fn html_comes_back_as_markdown_after_a_redirect() {
    let base = serve().await;
    let env = TestEnv::new();
    let r = tool(true)
        .execute(json!({"url": format!("{base}/redirect")}), &env.ctx)
        .await;
    assert_eq!(r.status, ToolStatus::Success, "{}", r.output);
    assert!(r.output.contains("# Title"), "{}", r.output);
    assert!(r.output.contains("**bold**"), "{}", r.output);
    assert!(
        r.output.starts_with(&format!("{base}/page")),
        "{}",
        r.output
    );
}

#[tokio::test]
async fn binary_errors_redirect_loops_and_other_schemes_are_refused() {
    let base = serve().await;
    let env = TestEnv::new();
    let t = tool(true);
    let image = t
        .execute(json!({"url": format!("{base}/image")}), &env.ctx)
        .await;
    assert!(
        image.output.contains("image/png, not text"),
        "{}",
        image.output
    );
    let looped = t
        .execute(json!({"url": format!("{base}/loop")}), &env.ctx)
        .await;
    assert!(
        looped.output.contains("redirects more than"),
        "{}",
        looped.output
    );
    let missing = t
        .execute(json!({"url": format!("{base}/nope")}), &env.ctx)
        .await;
    assert_eq!(missing.status, ToolStatus::Error);
    assert!(missing.output.contains("404"), "{}", missing.output);
    let file = t
        .execute(json!({"url": "file:///etc/passwd"}), &env.ctx)
        .await;
    assert!(
        file.output.contains("only http and https"),
        "{}",
        file.output
    );
}

#[tokio::test]
async fn a_large_body_is_cut_at_the_download_cap() {
    let base = serve().await;
    let env = TestEnv::new();
    let r = tool(true)
        .execute(json!({"url": format!("{base}/big")}), &env.ctx)
        .await;
    assert_eq!(r.status, ToolStatus::Success);
    assert!(
        r.output.contains("the rest was not fetched"),
        "{}",
        r.output
    );
    assert!(r.output.contains(&"x".repeat(10_000)));
    assert!(!r.output.contains(&"x".repeat(10_001)));
}

#[test]
fn public_and_private_addresses_are_told_apart() {
    for private in [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fd00::1",
        "fe80::1",
        "::ffff:127.0.0.1",
    ] {
        assert!(!is_public(private.parse().unwrap()), "{private}");
    }
    for public in ["93.184.216.34", "1.1.1.1", "2606:4700::1111"] {
        assert!(is_public(public.parse().unwrap()), "{public}");
    }
}
