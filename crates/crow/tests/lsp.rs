//! End-to-end language servers: the real `crow` binary, the mock model, and the real pylsp
//! with pyflakes (PyPI, installed by scripts/test into tests/lsp-servers/python). The server is
//! started through a wrapper script that logs each start, so the test counts them; the
//! mock's recorded requests show what the model read.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};

/// tests/lsp-servers/python, or None (with a note) when absent and CI does not require it.
fn pylsp_path() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/lsp-servers/python");
    if dir.join("pylsp").exists() {
        return Some(dir.canonicalize().unwrap());
    }
    let help = "run scripts/test, or: python3 -m pip install --target tests/lsp-servers/python -r tests/lsp-servers/requirements.txt";
    if std::env::var_os("CROW_REQUIRE_LSP_SERVERS").is_some() {
        panic!("pylsp is missing: {help}");
    }
    eprintln!("note: skipped, pylsp is not installed ({help})");
    None
}

/// An executable script `name` in `dir` that appends its pid to `starts.log` there, then
/// execs `command`.
fn wrapper(dir: &Path, name: &str, command: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    let log = dir.join("starts.log");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\necho $$ >> '{}'\nexec {command}\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn starts(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("starts.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The text of the last tool message of an OpenAI request: the result the model just got.
fn last_tool_result(body: &Value) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edits_new_error_is_in_its_result_and_a_fix_or_a_text_file_add_nothing() {
    let Some(python) = pylsp_path() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let server = wrapper(
        bin.path(),
        "pylsp.sh",
        &format!("env PYTHONPATH='{}' python3 -m pylsp", python.display()),
    );
    // The bound is generous: it is for a stuck server, and a loaded CI machine may take
    // seconds to start python; a healthy server settles long before.
    write_user_config(
        dir.path(),
        &format!(
            "[lsp]\nwait_ms = 30000\n[lsp.python-test]\ncommand = \"{}\"\nextensions = [\"py\"]\n",
            server.display()
        ),
    );
    std::fs::write(dir.path().join("a.py"), "x = 1\nprint(x)\n").unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "edit_file",
            json!({"path": "a.py", "old_string": "print(x)", "new_string": "print(undefined_thing)"}),
        ))
        .reply(Reply::tool_call(
            "edit_file",
            json!({"path": "a.py", "old_string": "print(undefined_thing)", "new_string": "print(x)"}),
        ))
        .reply(Reply::tool_call(
            "write_file",
            json!({"path": "notes.txt", "content": "print(nothing_here)\n"}),
        ))
        .reply(Reply::text("Done."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "break it, then fix it");
    cmd.args(["--mode", "full-auto"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);

    let requests = mock.requests();
    assert_eq!(requests.len(), 4);
    // The edit that introduced the undefined name: the server's error, in the same result.
    let first = last_tool_result(&requests[1].body);
    assert!(
        first.contains("a.py:2:7 error: undefined name 'undefined_thing'"),
        "{first}"
    );
    // The fix, and a file no server serves: nothing added.
    let second = last_tool_result(&requests[2].body);
    assert!(!second.contains("language server"), "{second}");
    assert!(!second.contains("undefined"), "{second}");
    let third = last_tool_result(&requests[3].body);
    assert!(!third.contains("language server"), "{third}");

    // --json carries them in the result's metadata.
    let ends = out.of_type("tool_call_end");
    let problems = &ends[0]["result"]["metadata"]["diagnostics"];
    assert_eq!(problems.as_array().map(Vec::len), Some(1), "{}", ends[0]);
    assert_eq!(problems[0]["severity"], "error");
    assert_eq!(problems[0]["line"], 2);
    assert!(ends[1]["result"]["metadata"].get("diagnostics").is_none());
    assert!(ends[2]["result"]["metadata"].get("diagnostics").is_none());

    // One server for the session, gone once crow has exited.
    let pids = starts(bin.path());
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert!(gone(&pids[0]), "the language server outlived crow");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_never_answers_does_not_hold_the_edit_past_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    // Reads its input, answers nothing, ever.
    let server = wrapper(bin.path(), "hang.sh", "cat > /dev/null");
    write_user_config(
        dir.path(),
        &format!(
            "[lsp]\nwait_ms = 300\n[lsp.hang]\ncommand = \"{}\"\nextensions = [\"py\"]\n",
            server.display()
        ),
    );
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "write_file",
            json!({"path": "a.py", "content": "print(nope)\n"}),
        ))
        .reply(Reply::text("Done."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "write it");
    cmd.args(["--mode", "full-auto"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let ends = out.of_type("tool_call_end");
    assert_eq!(ends[0]["result"]["status"], "success", "{}", ends[0]);
    assert!(ends[0]["result"]["metadata"].get("diagnostics").is_none());
    // The edit's own recorded time: the 300 ms bound plus the write, far from a hang.
    let took = ends[0]["duration_ms"].as_u64().unwrap();
    assert!(took < 10_000, "the edit waited {took} ms");
    let pids = starts(bin.path());
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert!(gone(&pids[0]), "the hung server outlived crow");
}
