//! Azure OpenAI end to end: a tool-calling session against crow-testkit's mock serving Azure's
//! paths — the v1 API over Chat Completions and Responses, and the dated API with its
//! deployment path and required `api-version`; the key in `api-key`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

fn session() -> Scenario {
    Scenario::new()
        .reply(Reply::tool_call(
            "write_file",
            json!({"path": "a.txt", "content": "from azure\n"}),
        ))
        .reply(Reply::text("Written."))
}

async fn run_with(extra: &str) -> (MockLlm, Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(session()).await.unwrap();
    write_user_config(
        dir.path(),
        &format!(
            "provider = \"az\"\n[providers.az]\ntype = \"azure\"\nbase_url = \"{}\"\nmodel = \"my-deployment\"\n{extra}",
            mock.base_url()
        ),
    );
    let mut cmd = crow(dir.path());
    cmd.env("AZURE_OPENAI_API_KEY", "azure-test-key")
        .args(["run", "--json", "write a.txt"]);
    let out = output(cmd).await;
    (mock, out, dir)
}

fn header<'a>(request: &'a crow_testkit::RecordedRequest, name: &str) -> Option<&'a str> {
    request
        .headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_v1_api_runs_a_tool_session_with_the_key_in_api_key() {
    let (mock, out, dir) = run_with("").await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "from azure\n"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.path, "/openai/v1/chat/completions");
        assert_eq!(header(request, "api-key"), Some("azure-test-key"));
        assert_eq!(
            header(request, "authorization"),
            None,
            "no bearer with a key"
        );
        assert_eq!(request.body["model"], "my-deployment");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dated_api_names_the_deployment_and_its_version() {
    let (mock, out, _dir) = run_with("api_version = \"2024-10-21\"\n").await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].path,
        "/openai/deployments/my-deployment/chat/completions"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_responses_api_on_azure() {
    let (mock, out, _dir) = run_with("wire_api = \"responses\"\n").await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);
    let requests = mock.requests();
    assert_eq!(requests[0].path, "/openai/v1/responses");
    assert_eq!(header(&requests[0], "api-key"), Some("azure-test-key"));
}

#[tokio::test(flavor = "multi_thread")]
async fn without_an_endpoint_or_a_key_it_says_what_to_set() {
    let dir = tempfile::tempdir().unwrap();
    write_user_config(
        dir.path(),
        "provider = \"az\"\n[providers.az]\ntype = \"azure\"\nmodel = \"d\"\n",
    );
    let mut cmd = crow(dir.path());
    cmd.env_remove("AZURE_OPENAI_ENDPOINT")
        .args(["run", "--json", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("AZURE_OPENAI_ENDPOINT") && out.stderr.contains("base_url"),
        "{}",
        out.stderr
    );
    write_user_config(
        dir.path(),
        "provider = \"az\"\n[providers.az]\ntype = \"azure\"\nbase_url = \"https://r.openai.azure.com\"\nmodel = \"d\"\n",
    );
    let mut cmd = crow(dir.path());
    cmd.env_remove("AZURE_OPENAI_API_KEY")
        .args(["run", "--json", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("AZURE_OPENAI_API_KEY"),
        "{}",
        out.stderr
    );
}
