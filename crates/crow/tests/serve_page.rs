//! `crow serve`'s page in a real browser: Debian's headless `chromium`, driven through
//! `chromedriver` (W3C WebDriver, plain HTTP with reqwest), against the real binary and the
//! scripted mock. It creates a session, sends a prompt, sees the streamed answer, approves an
//! edit shown as a diff, and sees the stats chart; screenshots are written to the target
//! directory (`CARGO_TARGET_TMPDIR/serve-*.png`) as artifacts. Without chromium the test
//! skips with a message, unless `CROW_REQUIRE_BROWSER` is set (CI), where it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod serve_common;

use std::path::PathBuf;
use std::process::Stdio;

use base64::Engine as _;
use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};
use serve_common::*;

/// The W3C WebDriver element key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// `chromium` and `chromedriver`, when both are installed.
fn browser() -> Option<(PathBuf, PathBuf)> {
    let find = |names: &[&str]| {
        names.iter().find_map(|name| {
            std::env::var_os("PATH").and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join(name))
                    .find(|p| p.is_file())
            })
        })
    };
    let chromium = find(&["chromium", "chromium-browser", "google-chrome"])?;
    let driver = find(&["chromedriver"])?;
    Some((chromium, driver))
}

struct WebDriver {
    child: tokio::process::Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

impl WebDriver {
    async fn start(chromium: &std::path::Path, driver: &std::path::Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = tokio::process::Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // chromedriver says on stdout when it listens.
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
        tokio::time::timeout(HUNG, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("started successfully") {
                    return;
                }
            }
            panic!("chromedriver ended before it listened");
        })
        .await
        .expect("chromedriver never started");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": chromium,
                    "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--window-size=1400,1000"]
                }
            }}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {created}"))
            .to_owned();
        Self {
            child,
            base,
            session,
            http,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let value: Value = request.send().await.unwrap().json().await.unwrap();
        assert!(
            value["value"]["error"].is_null() || path == "/element",
            "WebDriver {path}: {value}"
        );
        value["value"].clone()
    }

    async fn go(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    async fn find(&self, css: &str) -> String {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        match found[ELEMENT].as_str() {
            Some(id) => id.to_owned(),
            None => {
                let page = self.call(reqwest::Method::GET, "/source", None).await;
                panic!("no element {css}: {found}\npage: {page}")
            }
        }
    }

    async fn click(&self, css: &str) {
        let id = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            Some(json!({})),
        )
        .await;
    }

    async fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    async fn script(&self, script: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Waits until `script` returns something truthy in the page (the DOM changing is the
    /// event waited for; the deadline only fails a hung test).
    async fn until(&self, what: &str, script: &str) -> Value {
        let deadline = tokio::time::Instant::now() + HUNG;
        loop {
            let value = self.script(script).await;
            if !(value.is_null() || value == false || value == "" || value == 0) {
                return value;
            }
            assert!(tokio::time::Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    async fn screenshot(&self, name: &str) -> PathBuf {
        let data = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap())
            .unwrap();
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
        std::fs::write(&path, png).unwrap();
        path
    }

    async fn quit(mut self) {
        let _ = self
            .http
            .delete(format!("{}/session/{}", self.base, self.session))
            .send()
            .await;
        let _ = self.child.start_kill();
    }
}

#[tokio::test]
async fn the_page_runs_a_session_approves_an_edit_and_charts_the_stats() {
    let Some((chromium, driver)) = browser() else {
        assert!(
            std::env::var_os("CROW_REQUIRE_BROWSER").is_none(),
            "CROW_REQUIRE_BROWSER is set and chromium or chromedriver is missing \
             (apt-get install chromium chromium-driver)"
        );
        eprintln!("skipped: chromium and chromedriver are not installed");
        return;
    };
    let dir = git_repo();
    let scenario = Scenario::new()
        .reply(Reply::text("I will write the greeting.").with_tool_call(
            "write_file",
            json!({"path": "greeting.txt", "content": "hello from crow\n"}),
        ))
        .reply(Reply::text("**Done**: greeting.txt holds the greeting.").with_chunk_size(5));
    let mock = MockLlm::start(scenario).await.unwrap();
    let server = Server::start(dir.path(), &mock).await;
    let browser = WebDriver::start(&chromium, &driver).await;
    browser.go(&server.url(&format!("/?token={TOKEN}"))).await;
    // The token went into the cookie and out of the address bar.
    let address = browser.script("return location.href").await;
    assert!(!address.to_string().contains(TOKEN), "{address}");
    browser
        .type_into("#new-cwd", &dir.path().display().to_string())
        .await;
    browser.click("#new-session").await;
    browser
        .until(
            "the session opens",
            "return !document.querySelector('#controls').classList.contains('hidden')",
        )
        .await;
    browser.type_into("#prompt", "write a greeting").await;
    browser.click("#send").await;
    // The edit waits for approval, shown as a diff.
    let diff = browser
        .until(
            "the permission question with its diff",
            "const d = document.querySelector('.permission .diff .add'); return d && d.textContent",
        )
        .await;
    assert!(diff.as_str().unwrap().contains("hello from crow"), "{diff}");
    assert!(!dir.path().join("greeting.txt").exists());
    browser.screenshot("serve-permission.png").await;
    browser.click(".permission button.allow").await;
    let answer = browser
        .until(
            "the streamed answer",
            "const a = [...document.querySelectorAll('.answer')].map(e => e.textContent).join(' | '); \
             return a.includes('greeting.txt holds') && document.querySelector('.result') && a",
        )
        .await;
    assert!(answer.as_str().unwrap().contains("Done"), "{answer}");
    // Markdown is rendered as elements, not as text.
    browser
        .until(
            "bold text",
            "return document.querySelector('.answer strong')",
        )
        .await;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("greeting.txt")).unwrap(),
        "hello from crow\n"
    );
    let shot = browser.screenshot("serve-session.png").await;
    browser.click("#tab-stats").await;
    let bars = browser
        .until(
            "the stats chart",
            "return document.querySelectorAll('#stats svg.chart rect[data-series]').length",
        )
        .await;
    assert!(bars.as_u64().unwrap() > 0);
    let stats = browser.screenshot("serve-stats.png").await;
    eprintln!("screenshots: {} {}", shot.display(), stats.display());
    browser.quit().await;
}
