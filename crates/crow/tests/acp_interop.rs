//! `crow acp` driven by the official ACP TypeScript SDK (tests/acp-interop, run with node's
//! test runner) against crow-testkit's mock model, which the node tests script over HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;

use crow_testkit::{MockLlm, Scenario};

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
    let output = tokio::process::Command::new("node")
        .args(["--test", "--test-concurrency=1", "interop.test.mjs"])
        .current_dir(&dir)
        .env("CROW_BIN", env!("CARGO_BIN_EXE_crow"))
        .env("MOCK_URL", mock.base_url())
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
}
