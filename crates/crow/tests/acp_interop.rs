//! `crow acp` driven by the official ACP TypeScript SDK (tests/acp-interop, run with node's
//! test runner) against crow-testkit's mock model, which the node tests script over HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;

use crow_testkit::{MockLlm, Scenario};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

mod common;

fn interop_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/acp-interop")
}

/// Where .ci/run installs mcp-server-time, for the MCP test (which skips, or with
/// CROW_REQUIRE_MCP_SERVERS fails, without it).
fn mcp_time_pythonpath() -> Option<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp-servers/python");
    dir.join("mcp_server_time")
        .exists()
        .then(|| dir.canonicalize().ok())
        .flatten()
        .map(|d| d.display().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_client_drives_crow_acp() {
    let dir = interop_dir();
    assert!(
        dir.join("node_modules/@agentclientprotocol/sdk").is_dir(),
        "the TypeScript SDK is not installed: run `npm ci` in {} (scripts/test and .ci/run do)",
        dir.display()
    );
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    // CROW_ACP_TEST_PATTERN runs only the tests whose names match (while working on some).
    let pattern = std::env::var("CROW_ACP_TEST_PATTERN")
        .ok()
        .map(|p| format!("--test-name-pattern={p}"));
    let output = tokio::process::Command::new("node")
        .args(["--test", "--test-concurrency=1"])
        .args(pattern)
        .args(["interop.test.mjs", "policy.test.mjs"])
        .current_dir(&dir)
        .env("CROW_BIN", env!("CARGO_BIN_EXE_crow"))
        .env("MOCK_URL", mock.base_url())
        .env("CROW_MEMORY_FINISH", "off")
        // Where the kernel offers no sandbox, commands run unconfined, as in the other tests.
        .envs((!common::sandbox_usable()).then_some(("CROW_SANDBOX_MODE", "off")))
        .envs(mcp_time_pythonpath().map(|p| ("MCP_TIME_PYTHONPATH", p)))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("node is required for the ACP interop tests");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "ACP interop tests failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("# fail 0"), "{stdout}");
    assert!(!stdout.contains("# pass 0"), "no test ran: {stdout}");
    if std::env::var_os("CROW_ACP_TEST_VERBOSE").is_some() {
        eprintln!("{stdout}");
    }
}

/// What an editor's agent log shows of crow: no colour codes when stderr is not a terminal,
/// no line kilobytes long after bad input, and short error replies on stdout.
#[tokio::test]
async fn bad_input_gets_short_replies_and_a_plain_short_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = common::crow(dir.path())
        .arg("acp")
        // Not NO_COLOR: colour must follow whether stderr is a terminal.
        .env_remove("NO_COLOR")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut replies = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = child.stderr.take().unwrap();

    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1,\"clientCapabilities\":{}}}\n")
        .await
        .unwrap();
    let init = replies.next_line().await.unwrap().unwrap();
    assert!(init.contains("\"result\""), "{init}");

    let pad = "p".repeat(200_000);
    let bad_params = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
        "params": {"cwd": 5, "mcpServers": [], "pad": pad}});
    stdin
        .write_all(format!("{bad_params}\n").as_bytes())
        .await
        .unwrap();
    let reply = replies.next_line().await.unwrap().unwrap();
    assert!(
        reply.contains("-32602"),
        "{}",
        &reply[..reply.len().min(300)]
    );
    assert!(
        reply.len() < 600,
        "an invalid-params reply of {} bytes",
        reply.len()
    );

    stdin
        .write_all(b"{\"id\":3,\"x\":\"\xff\"}\n")
        .await
        .unwrap();
    let reply = replies.next_line().await.unwrap().unwrap();
    assert!(reply.contains("-32700"), "{reply}");
    // Still serving.
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"session/list\",\"params\":{}}\n")
        .await
        .unwrap();
    let reply = replies.next_line().await.unwrap().unwrap();
    assert!(reply.contains("\"id\":4"), "{reply}");

    drop(stdin);
    let mut log = String::new();
    stderr.read_to_string(&mut log).await.unwrap();
    assert!(child.wait().await.unwrap().success(), "{log}");
    assert!(!log.is_empty(), "the bad input is logged");
    assert!(
        !log.contains('\x1b'),
        "colour codes in a log that is not a terminal: {log:?}"
    );
    for line in log.lines() {
        assert!(
            line.len() < 2500,
            "a log line of {} bytes: {}…",
            line.len(),
            &line[..200]
        );
    }
}
