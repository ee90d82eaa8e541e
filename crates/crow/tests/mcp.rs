//! End-to-end MCP: the real `crow` binary, the mock model, and the real `mcp-server-time`
//! (PyPI, installed by `.ci/run` into tests/mcp-servers/python).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

/// tests/mcp-servers/python, or None (with a note) when absent and CI does not require it.
fn time_server_path() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp-servers/python");
    if dir.join("mcp_server_time").exists() {
        return Some(dir.canonicalize().unwrap());
    }
    let help = "run .ci/run, or: python3 -m pip install --target tests/mcp-servers/python -r tests/mcp-servers/requirements.txt";
    if std::env::var_os("CROW_REQUIRE_MCP_SERVERS").is_some() {
        panic!("mcp-server-time is missing: {help}");
    }
    eprintln!("note: skipped, mcp-server-time is not installed ({help})");
    None
}

/// Processes whose working directory is `dir` (the MCP servers crow started there).
fn processes_in(dir: &Path) -> Vec<String> {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd == dir))
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            !stat.contains(") Z ")
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn crow_run_calls_a_tool_of_a_server_from_mcp_json_and_uses_its_result() {
    let Some(python) = time_server_path() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".mcp.json"),
        json!({"mcpServers": {"time": {
            "command": "python3",
            "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
            "env": {"PYTHONPATH": python.display().to_string()}
        }}})
        .to_string(),
    )
    .unwrap();
    trust_project(dir.path());
    // The server starts in the background; the first request waits for it a few seconds at
    // most. The first tool call waits for a flag the test sets when crow logs the server
    // ready, so the second request advertises the MCP tool even on a slow machine.
    let wait = "for i in $(seq 600); do [ -f ready.flag ] && exit 0; sleep 0.05; done; exit 1";
    let scenario = Scenario::new()
        .reply(Reply::tool_call("bash", json!({"command": wait})))
        .reply(Reply::tool_call(
            "mcp__time__get_current_time",
            json!({"timezone": "Asia/Tokyo"}),
        ))
        .reply(Reply::text("It is late in Tokyo."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "what time is it in Tokyo?");
    cmd.env("CROW_LOG", "crow_mcp=info");
    let out = run_flagging_ready(cmd, &dir.path().join("ready.flag")).await;
    assert_eq!(
        out.code,
        Some(0),
        "stderr: {}\nstdout: {}",
        out.stderr,
        out.stdout
    );
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
    assert_eq!(
        out.of_type("tool_call_end")[0]["result"]["status"],
        "success"
    );

    let ends = out.of_type("tool_call_end");
    assert_eq!(ends[1]["tool"], "mcp__time__get_current_time");
    assert_eq!(ends[1]["result"]["status"], "success", "{}", ends[1]);
    let output = ends[1]["result"]["output"].as_str().unwrap();
    assert!(
        output.contains("Asia/Tokyo") && output.contains("datetime"),
        "{output}"
    );

    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    let tools: Vec<&str> = requests[1].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"mcp__time__get_current_time"), "{tools:?}");
    assert!(
        String::from_utf8_lossy(&requests[2].raw_body).contains("Asia/Tokyo"),
        "the model saw the tool's result"
    );
    assert!(
        processes_in(dir.path()).is_empty(),
        "the MCP server outlived crow: {:?}",
        processes_in(dir.path())
    );
}

/// Runs `cmd`, creating `flag` as soon as crow logs that the MCP server is ready.
async fn run_flagging_ready(mut cmd: tokio::process::Command, flag: &Path) -> Output {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
    let mut child = cmd.spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let flag = flag.to_path_buf();
    let watcher = tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("MCP server 'time' ready") {
                std::fs::write(&flag, "").unwrap();
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        seen
    });
    let mut out = Vec::new();
    stdout.read_to_end(&mut out).await.unwrap();
    let status = child.wait().await.unwrap();
    let err = watcher.await.unwrap();
    parse(status.code(), out, err.into_bytes())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_cannot_start_is_a_warning_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    write_project_config(
        dir.path(),
        "[mcp_servers.ghost]\ncommand = \"/nonexistent/mcp-server\"\n",
    );
    trust_project(dir.path());
    // The turn outlasts the failed start (a server failing after the turn is not reported).
    let scenario = Scenario::new()
        .reply(Reply::tool_call("bash", json!({"command": "sleep 1"})))
        .reply(Reply::text("fine without it"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(
        out.stderr
            .contains("warning: MCP server 'ghost' failed to start"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_add_list_remove_edit_the_user_config() {
    let Some(python) = time_server_path() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config_dir = dir.path().join(".home/.config/crow");
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::write(
        config_dir.join("config.toml"),
        "# mine\nmax_iterations = 7 # keep\n",
    )
    .unwrap();

    let mut add = crow(dir.path());
    add.args(["mcp", "add", "time", "--env"])
        .arg(format!("PYTHONPATH={}", python.display()))
        .args(["--", "python3", "-m", "mcp_server_time"]);
    let out = output(add).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let text = std::fs::read_to_string(config_dir.join("config.toml")).unwrap();
    assert!(
        text.starts_with("# mine\nmax_iterations = 7 # keep\n"),
        "{text}"
    );

    let mut list = crow(dir.path());
    list.args(["mcp", "list"]);
    let out = output(list).await;
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("time  (ready, 2 tools)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("mcp__time__convert_time"),
        "{}",
        out.stdout
    );

    let mut show = crow(dir.path());
    show.args(["config", "show"]);
    let out = output(show).await;
    assert!(
        out.stdout.contains("mcp_servers.time.command"),
        "{}",
        out.stdout
    );
    let env_line = out
        .stdout
        .lines()
        .find(|l| l.contains("mcp_servers.time.env.PYTHONPATH"));
    assert!(
        env_line.unwrap().contains("\"[redacted]\""),
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.contains(&python.display().to_string()),
        "env values are redacted"
    );

    let mut remove = crow(dir.path());
    remove.args(["mcp", "remove", "time"]);
    assert_eq!(output(remove).await.code, Some(0));
    let text = std::fs::read_to_string(config_dir.join("config.toml")).unwrap();
    assert!(!text.contains("mcp_servers.time"), "{text}");
    assert!(text.starts_with("# mine\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_user_config_overrides_mcp_json_and_unusable_entries_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".mcp.json"),
        json!({"mcpServers": {
            "time": {"command": "python3", "args": ["-m", "mcp_server_time"]},
            "old": {"type": "ws", "url": "ws://127.0.0.1:9/ws"},
            "legacy": {"type": "sse", "url": "http://127.0.0.1:9/sse"}
        }})
        .to_string(),
    )
    .unwrap();
    let config_dir = dir.path().join(".home/.config/crow");
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::write(
        config_dir.join("config.toml"),
        "[mcp_servers.time]\nenabled = false\n",
    )
    .unwrap();
    trust_project(dir.path());
    let mut list = crow(dir.path());
    list.args(["mcp", "list", "--json"]);
    let out = output(list).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let statuses: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(statuses.as_array().unwrap().len(), 2, "{statuses}");
    // An SSE entry is a server like any other (nothing listens on port 9 here).
    assert_eq!(statuses[0]["name"], "legacy");
    assert_eq!(statuses[0]["transport"], "sse: http://127.0.0.1:9/sse");
    assert_eq!(statuses[0]["state"], "failed");
    assert_eq!(statuses[1]["name"], "time");
    assert_eq!(statuses[1]["state"], "disabled");
    assert!(
        out.stderr.contains("'ws'"),
        "the skipped entry is named: {}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_request_already_offers_the_tools_of_a_server_that_starts_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_echo.py");
    // A generous bound, so a slow machine does not make the test flaky: the wait ends as soon
    // as the server is ready.
    write_project_config(
        dir.path(),
        &format!(
            "[tools]\nmcp_startup_wait_ms = 30000\n[mcp_servers.echo]\ncommand = \"python3\"\nargs = [\"{}\"]\n",
            server.display()
        ),
    );
    trust_project(dir.path());
    let scenario = Scenario::new()
        .reply(Reply::tool_call("mcp__echo__echo", json!({"text": "ping"})))
        .reply(Reply::text("it said ping"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "echo ping")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let requests = mock.requests();
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"mcp__echo__echo"), "{tools:?}");
    // The tool list does not change within the run: the prompt cache keeps its prefix.
    assert_eq!(requests[0].body["tools"], requests[1].body["tools"]);
    let end = out.of_type("tool_call_end")[0];
    assert_eq!(end["result"]["output"], "ping", "{end}");
}

#[tokio::test(flavor = "multi_thread")]
async fn crow_acp_also_offers_a_starting_servers_tools_in_its_first_request() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_echo.py");
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("hello")))
        .await
        .unwrap();
    write_project_config(
        dir.path(),
        &format!(
            "provider = \"mock\"\n[providers.mock]\ntype = \"openai\"\nbase_url = \"{}\"\nmodel = \"mock-model\"\n[tools]\nmcp_startup_wait_ms = 30000\n[mcp_servers.echo]\ncommand = \"python3\"\nargs = [\"{}\"]\n",
            mock.openai_base_url(),
            server.display()
        ),
    );
    trust_project(dir.path());
    let mut child = crow(dir.path())
        .arg("acp")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let cwd = dir.path().display().to_string();
    // Each request once the one before is answered (initialize must complete first).
    let mut answers = Vec::new();
    for msg in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
            "params": {"cwd": cwd, "mcpServers": []}}),
    ] {
        let id = msg["id"].clone();
        stdin
            .write_all(format!("{msg}\n").as_bytes())
            .await
            .unwrap();
        loop {
            let line = lines.next_line().await.unwrap().unwrap();
            let value: serde_json::Value = serde_json::from_str(&line).unwrap();
            if value["id"] == id {
                answers.push(value);
                break;
            }
        }
    }
    let session = answers[1]["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", answers[1]))
        .to_owned();
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}});
    stdin
        .write_all(format!("{prompt}\n").as_bytes())
        .await
        .unwrap();
    loop {
        let line = lines.next_line().await.unwrap().unwrap();
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        if value["id"] == 3 {
            assert_eq!(value["result"]["stopReason"], "end_turn", "{value}");
            break;
        }
    }
    let tools: Vec<String> = mock.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(tools.contains(&"mcp__echo__echo".to_owned()), "{tools:?}");
    drop(stdin);
    let _ = child.wait().await;
}
