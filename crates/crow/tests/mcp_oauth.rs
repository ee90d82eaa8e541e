//! MCP over OAuth end to end: the real `crow` binary against crow-testkit's OAuth-protected
//! MCP server on loopback. The test plays the browser: it reads the authorization URL
//! `crow mcp login` prints, GETs it, and follows the redirect to crow's loopback listener.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use crow_testkit::oauth::{OAuthMcp, OAuthOptions, SECRET_WORD};
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

/// `crow mcp login NAME` started, with the URL it printed and a task gathering the rest of
/// its stderr.
struct Login {
    child: tokio::process::Child,
    url: String,
    stderr: tokio::task::JoinHandle<String>,
}

async fn start_login(dir: &Path, name: &str) -> Login {
    let mut cmd = crow(dir);
    // Debug logs everywhere (rmcp's included): the tokens must stay out of them too.
    cmd.args(["mcp", "login", name])
        .env("CROW_NO_BROWSER", "1")
        .env("CROW_LOG", "debug");
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            seen.push_str(&line);
            seen.push('\n');
            let line = line.trim();
            if line.starts_with("http") && line.contains("/authorize?") {
                return Some(line.to_owned());
            }
        }
        None
    })
    .await
    .expect("no authorization URL within 30 s");
    let Some(url) = url else {
        panic!("crow mcp login printed no URL:\n{seen}");
    };
    let stderr = tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push_str(&line);
            seen.push('\n');
        }
        seen
    });
    Login { child, url, stderr }
}

impl Login {
    async fn finish(self) -> Output {
        let out = tokio::time::timeout(Duration::from_secs(30), self.child.wait_with_output())
            .await
            .expect("crow mcp login did not end")
            .unwrap();
        let stderr = self.stderr.await.unwrap();
        parse(out.status.code(), out.stdout, stderr.into_bytes())
    }
}

fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// What the authorization server redirects the browser to.
async fn redirect_of(url: &str) -> String {
    let response = browser().get(url).send().await.unwrap();
    assert_eq!(response.status(), 302, "{:?}", response.text().await);
    response.headers()["location"].to_str().unwrap().to_owned()
}

fn token_files(dir: &Path) -> Vec<PathBuf> {
    let auth = dir.join(".home/.local/share/crow/mcp-auth");
    std::fs::read_dir(auth)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect()
        })
        .unwrap_or_default()
}

/// Every file under `dir` except the token files, as bytes.
fn other_files(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.ends_with("mcp-auth") {
            continue;
        }
        if path.is_dir() {
            other_files(&path, out);
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path, bytes));
        }
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn configure(dir: &Path, server: &OAuthMcp) {
    write_user_config(
        dir,
        &format!("[mcp_servers.secure]\nurl = \"{}\"\n", server.url()),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn login_stores_a_private_token_and_a_run_calls_the_tool_refreshing_it() {
    let server = OAuthMcp::start(OAuthOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    configure(dir.path(), &server);

    // Before any login: the session goes on without the server and says what to do.
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("no tools today")))
        .await
        .unwrap();
    let out = output(crow_run(dir.path(), &mock, "hello")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("run `crow mcp login secure`"),
        "{}",
        out.stderr
    );
    assert_eq!(server.stats().tool_calls, 0);

    // The login: discovery, registration, the browser's round trip, the exchange.
    let login = start_login(dir.path(), "secure").await;
    let base = server.url().trim_end_matches("/mcp").to_owned();
    assert!(
        login.url.starts_with(&format!("{base}/authorize?")),
        "{}",
        login.url
    );
    assert!(
        login.url.contains("code_challenge_method=S256"),
        "{}",
        login.url
    );
    let callback = redirect_of(&login.url).await;
    assert!(callback.starts_with("http://127.0.0.1:"), "{callback}");
    let page = browser().get(&callback).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("signed in"));
    let login_out = login.finish().await;
    assert_eq!(login_out.code, Some(0), "{}", login_out.stderr);
    assert!(
        login_out
            .stdout
            .contains("signed in to MCP server 'secure'"),
        "{}",
        login_out.stdout
    );
    let stats = server.stats();
    assert_eq!((stats.registrations, stats.code_grants), (1, 1));
    assert!(
        stats
            .redirect_uris
            .iter()
            .all(|u| u.starts_with("http://127.0.0.1:") && u.ends_with("/callback")),
        "{:?}",
        stats.redirect_uris
    );
    let files = token_files(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&files[0]).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    let stored = std::fs::read_to_string(&files[0]).unwrap();
    assert!(
        stored.contains(&stats.issued[0]),
        "the file holds the token"
    );

    // The server now calls those tokens expired: crow refreshes and the call goes through.
    server.expire_access_tokens();
    let scenario = Scenario::new()
        .reply(Reply::tool_call("mcp__secure__secret_word", json!({})))
        .reply(Reply::text("The word is known."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "what is the secret word?");
    cmd.env("CROW_LOG", "debug");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let stats = server.stats();
    assert_eq!(stats.tool_calls, 1, "{}", out.stderr);
    assert!(stats.refresh_grants >= 1, "{stats:?}");
    assert!(out.stdout.contains(SECRET_WORD), "{}", out.stdout);
    let last = mock.requests().last().unwrap().body.to_string();
    assert!(last.contains(SECRET_WORD), "{last}");

    // No token, in any log or any file crow wrote besides the token file.
    let mut files = Vec::new();
    other_files(dir.path(), &mut files);
    for token in &stats.issued {
        for (what, text) in [
            ("login stderr", &login_out.stderr),
            ("login stdout", &login_out.stdout),
            ("run stderr", &out.stderr),
            ("run stdout", &out.stdout),
        ] {
            assert!(!text.contains(token.as_str()), "{what} holds a token");
        }
        for (path, bytes) in &files {
            assert!(!contains(bytes, token), "{} holds a token", path.display());
        }
    }

    // Logout forgets the tokens.
    let mut cmd = crow(dir.path());
    cmd.args(["mcp", "logout", "secure"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(token_files(dir.path()).is_empty());
}

/// The same over the legacy SSE transport: login from the GET's 401, then a run whose stored
/// token the server refuses (refreshed on the GET) calls the tool.
#[tokio::test(flavor = "multi_thread")]
async fn an_sse_server_signs_in_and_refreshes_too() {
    let server = OAuthMcp::start(OAuthOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_user_config(
        dir.path(),
        &format!(
            "[mcp_servers.legacy]\ntype = \"sse\"\nurl = \"{}\"\n",
            server.sse_url()
        ),
    );
    let login = start_login(dir.path(), "legacy").await;
    let callback = redirect_of(&login.url).await;
    assert_eq!(browser().get(&callback).send().await.unwrap().status(), 200);
    let login_out = login.finish().await;
    assert_eq!(login_out.code, Some(0), "{}", login_out.stderr);
    assert_eq!(token_files(dir.path()).len(), 1);

    server.expire_access_tokens();
    let scenario = Scenario::new()
        .reply(Reply::tool_call("mcp__legacy__secret_word", json!({})))
        .reply(Reply::text("The word is known."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "what is the secret word?")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let stats = server.stats();
    assert_eq!(stats.tool_calls, 1, "{}", out.stderr);
    assert!(stats.refresh_grants >= 1, "{stats:?}");
    let last = mock.requests().last().unwrap().body.to_string();
    assert!(last.contains(SECRET_WORD), "{last}");
    for token in &stats.issued {
        assert!(!out.stderr.contains(token.as_str()) && !out.stdout.contains(token.as_str()));
    }
}

/// A token about to expire (the server grants 5 s) is refreshed before it is sent: the server
/// never has to refuse one.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_near_its_expiry_is_refreshed_before_use() {
    let server = OAuthMcp::start(OAuthOptions {
        token_lifetime: Some(5),
        ..OAuthOptions::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    configure(dir.path(), &server);
    let login = start_login(dir.path(), "secure").await;
    let callback = redirect_of(&login.url).await;
    assert_eq!(browser().get(&callback).send().await.unwrap().status(), 200);
    assert_eq!(login.finish().await.code, Some(0));
    let refused_before = server.stats().unauthorized;
    let scenario = Scenario::new()
        .reply(Reply::tool_call("mcp__secure__secret_word", json!({})))
        .reply(Reply::text("The word is known."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "what is the secret word?")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let stats = server.stats();
    assert_eq!(stats.tool_calls, 1, "{}", out.stderr);
    assert!(stats.refresh_grants >= 1, "{stats:?}");
    assert_eq!(stats.unauthorized, refused_before, "{stats:?}");
    // The file holds the refreshed token, not the first one.
    let stored = std::fs::read_to_string(&token_files(dir.path())[0]).unwrap();
    assert!(!stored.contains(&stats.issued[0]));
    assert!(stored.contains(&stats.issued[stats.issued.len() - 2]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_with_another_state_is_refused() {
    let server = OAuthMcp::start(OAuthOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    configure(dir.path(), &server);
    let login = start_login(dir.path(), "secure").await;
    let callback = redirect_of(&login.url).await;
    let (before, after) = callback.split_once("state=").unwrap();
    let rest = after.split_once('&').map(|(_, r)| r).unwrap_or("");
    let forged = format!("{before}state=forged&{rest}");
    let page = browser().get(&forged).send().await.unwrap();
    assert_eq!(page.status(), 400);
    let out = login.finish().await;
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("state does not match"),
        "{}",
        out.stderr
    );
    assert_eq!(server.stats().code_grants, 0);
    assert!(token_files(dir.path()).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn metadata_sending_the_code_to_another_origin_is_refused() {
    let server = OAuthMcp::start(OAuthOptions {
        token_endpoint: Some("http://127.0.0.2:9/token".into()),
        ..OAuthOptions::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    configure(dir.path(), &server);
    let mut cmd = crow(dir.path());
    cmd.args(["mcp", "login", "secure"])
        .env("CROW_NO_BROWSER", "1");
    let out = output(cmd).await;
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("not on its own origin"),
        "{}",
        out.stderr
    );
    assert_eq!(server.stats().registrations, 0);
    assert!(token_files(dir.path()).is_empty());
}
