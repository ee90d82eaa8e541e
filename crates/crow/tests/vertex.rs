//! Vertex AI end to end: the real binary with `type = "vertex"` pointed at crow-testkit's mock,
//! which issues OAuth tokens at `/token` and serves Vertex's paths only to a token it issued.
//! A Gemini model with a service-account key (`GOOGLE_APPLICATION_CREDENTIALS`: a signed JWT
//! traded for a token, cached across the session's calls) and a Claude model with gcloud's user
//! credentials (a refresh token, found where gcloud writes it) each complete a tool session.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

fn session(name: &str) -> Scenario {
    Scenario::new()
        .reply(Reply::tool_call(
            "write_file",
            json!({"path": "a.txt", "content": format!("from {name}\n")}),
        ))
        .reply(Reply::text("Written."))
}

fn config(mock: &MockLlm, model: &str, extra: &str) -> String {
    format!(
        "provider = \"vx\"\n[providers.vx]\ntype = \"vertex\"\nbase_url = \"{}\"\nproject = \"my-proj\"\nlocation = \"us-east5\"\nmodel = \"{model}\"\n{extra}",
        mock.vertex_base_url()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn gemini_on_vertex_with_a_service_account_runs_a_tool_session() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(session("vertex gemini")).await.unwrap();
    write_user_config(dir.path(), &config(&mock, "gemini-2.5-flash", ""));
    let key = dir.path().join("sa.json");
    std::fs::write(&key, crow_testkit::service_account_json(&mock.token_uri())).unwrap();
    let mut cmd = crow(dir.path());
    cmd.env("GOOGLE_APPLICATION_CREDENTIALS", &key)
        .args(["run", "--json", "write a.txt"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "from vertex gemini\n"
    );
    let grants = mock.token_grants();
    assert_eq!(grants.len(), 1, "one token for the session: {grants:?}");
    assert_eq!(
        grants[0].grant_type,
        "urn:ietf:params:oauth:grant-type:jwt-bearer"
    );
    assert_eq!(
        grants[0].subject,
        "crow-mock@mock-project.iam.gserviceaccount.com"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            request.path,
            "/v1/projects/my-proj/locations/us-east5/publishers/google/models/gemini-2.5-flash:streamGenerateContent"
        );
        assert_eq!(request.header("authorization"), Some("Bearer mock-token-1"));
    }
    // The second request starts with the first's bytes: the prompt prefix stays cacheable.
    let first = &requests[0].raw_body;
    assert!(requests[1].raw_body.starts_with(&first[..first.len() - 2]));
    // The tool's result went back as a function response.
    assert!(
        requests[1]
            .raw_body
            .windows(16)
            .any(|w| w == b"functionResponse"),
        "{}",
        requests[1].body
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_on_vertex_with_gcloud_user_credentials_runs_a_tool_session() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(session("vertex claude")).await.unwrap();
    write_user_config(dir.path(), &config(&mock, "claude-sonnet-4-5@20250929", ""));
    // Where `gcloud auth application-default login` writes them.
    let gcloud = dir.path().join(".home/.config/gcloud");
    std::fs::create_dir_all(&gcloud).unwrap();
    std::fs::write(
        gcloud.join("application_default_credentials.json"),
        crow_testkit::authorized_user_json(&mock.token_uri()),
    )
    .unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--json", "write a.txt"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "from vertex claude\n"
    );
    let grants = mock.token_grants();
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].grant_type, "refresh_token");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            request.path,
            "/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
        );
        assert_eq!(request.body["anthropic_version"], "vertex-2023-10-16");
        assert!(request.body.get("model").is_none());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn without_credentials_or_a_project_it_says_what_to_set() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    write_user_config(dir.path(), &config(&mock, "gemini-2.5-pro", ""));
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--json", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("GOOGLE_APPLICATION_CREDENTIALS")
            && out.stderr.contains("gcloud auth application-default login"),
        "{}",
        out.stderr
    );
    write_user_config(
        dir.path(),
        "provider = \"vx\"\n[providers.vx]\ntype = \"vertex\"\nmodel = \"gemini-2.5-pro\"\n",
    );
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--json", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("providers.vx.project") && out.stderr.contains("GOOGLE_CLOUD_PROJECT"),
        "{}",
        out.stderr
    );
    assert!(mock.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn crow_models_lists_the_publishers_models() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    write_user_config(dir.path(), &config(&mock, "gemini-2.5-pro", ""));
    let key = dir.path().join("sa.json");
    std::fs::write(&key, crow_testkit::service_account_json(&mock.token_uri())).unwrap();
    let mut cmd = crow(dir.path());
    cmd.env("GOOGLE_APPLICATION_CREDENTIALS", &key)
        .args(["models", "--provider", "vx"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(
        out.stdout.contains("mock-model") && out.stdout.contains("mock-small"),
        "{}",
        out.stdout
    );
    assert_eq!(mock.token_grants().len(), 1);
}
