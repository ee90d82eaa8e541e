//! Amazon Bedrock end to end: the real binary with `type = "bedrock"` pointed at crow-testkit's
//! mock, which serves ConverseStream in AWS's binary event stream and only to requests with a
//! SigV4 signature for the service `bedrock`. Keys from the environment, then from a profile of
//! the shared files; a throttled first call is retried.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{Fault, MockLlm, Reply, Scenario};
use serde_json::json;

const MODEL: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";

fn session() -> Scenario {
    Scenario::new()
        .reply(
            Reply::tool_call(
                "write_file",
                json!({"path": "a.txt", "content": "from bedrock ✓\n"}),
            )
            .with_thinking("I should write the file."),
        )
        .reply(Reply::text("Written."))
}

fn config(mock: &MockLlm, extra: &str) -> String {
    format!(
        "provider = \"br\"\n[providers.br]\ntype = \"bedrock\"\nbase_url = \"{}\"\nmodel = \"{MODEL}\"\n{extra}",
        mock.base_url()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_from_the_environment_sign_a_tool_session() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(session()).await.unwrap();
    write_user_config(dir.path(), &config(&mock, "region = \"us-west-2\"\n"));
    let mut cmd = crow(dir.path());
    cmd.env("AWS_ACCESS_KEY_ID", "AKIDMOCK")
        .env("AWS_SECRET_ACCESS_KEY", "mock-secret")
        .env("AWS_SESSION_TOKEN", "mock-session-token")
        .args(["run", "--json", "write a.txt"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "from bedrock ✓\n"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            request.path,
            "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
        );
        let auth = request.header("authorization").unwrap();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDMOCK/")
                && auth.contains("/us-west-2/bedrock/aws4_request"),
            "{auth}"
        );
        assert_eq!(
            request.header("x-amz-security-token"),
            Some("mock-session-token")
        );
        assert!(request.header("x-amz-date").is_some());
    }
    // The second request starts with the first's bytes (its moving cache point set aside):
    // the prompt prefix stays cacheable.
    let strip = |raw: &[u8]| {
        String::from_utf8(raw.to_vec())
            .unwrap()
            .replace(r#",{"cachePoint":{"type":"default"}}"#, "")
    };
    let (first, second) = (strip(&requests[0].raw_body), strip(&requests[1].raw_body));
    assert!(
        second.starts_with(&first[..first.len() - 2]),
        "{first}\n{second}"
    );
    // The tool's result and the signed reasoning went back.
    let second = &requests[1].body;
    let messages = second["messages"].as_array().unwrap();
    let assistant = &messages[1]["content"];
    assert_eq!(
        assistant[0]["reasoningContent"]["reasoningText"]["signature"],
        crow_testkit::bedrock::signature("I should write the file.")
    );
    assert!(assistant[1]["toolUse"]["toolUseId"].is_string(), "{second}");
    assert!(
        messages[2]["content"][0]["toolResult"].is_object(),
        "{second}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_profile_of_the_shared_files_and_a_throttled_call() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Scenario::new()
            .fault(Fault::rate_limited(0))
            .reply(Reply::text("Hello from a profile.")),
    )
    .await
    .unwrap();
    write_user_config(dir.path(), &config(&mock, "profile = \"work\"\n"));
    let aws = dir.path().join(".home/.aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(
        aws.join("credentials"),
        "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = x\n[work]\naws_access_key_id = AKIDWORK\naws_secret_access_key = y\n",
    )
    .unwrap();
    std::fs::write(aws.join("config"), "[profile work]\nregion = eu-west-3\n").unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--json", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);
    assert!(
        out.stdout.contains("Hello from a profile."),
        "{}",
        out.stdout
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "the 429 was retried");
    let auth = requests[1].header("authorization").unwrap();
    assert!(
        auth.contains("Credential=AKIDWORK/") && auth.contains("/eu-west-3/bedrock/"),
        "{auth}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_keys_it_says_where_they_are_read_from() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    write_user_config(dir.path(), &config(&mock, "region = \"us-east-1\"\n"));
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--json", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("AWS_ACCESS_KEY_ID") && out.stderr.contains("aws configure"),
        "{}",
        out.stderr
    );
    assert!(mock.requests().is_empty());
}
