//! crow-lsp against a real language server: pylsp with pyflakes (PyPI), installed by
//! scripts/test into tests/lsp-servers/python. With CROW_REQUIRE_LSP_SERVERS set (CI), a
//! missing server fails the test; otherwise the test prints a note and passes. A fake server
//! that never answers shows the bound.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crow_core::{
    AllowAll, FileEdit, Severity, Tool, ToolContext, ToolKind, ToolMetadata, ToolResult,
};
use crow_lsp::{LspManager, LspSettings, ServerConfig, WithDiagnostics};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn pylsp_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/lsp-servers/python");
    if dir.join("pylsp").exists() {
        return Some(dir.canonicalize().unwrap());
    }
    let help = "run scripts/test, or: python3 -m pip install --target tests/lsp-servers/python -r tests/lsp-servers/requirements.txt";
    if std::env::var_os("CROW_REQUIRE_LSP_SERVERS").is_some() {
        panic!("{} is missing: {help}", dir.display());
    }
    eprintln!("note: skipped, pylsp is not installed ({help})");
    None
}

/// A stand-in edit tool: writes `text` to `path` and reports it as the built-in tools do.
struct Write;

#[async_trait]
impl Tool for Write {
    fn name(&self) -> &str {
        "write_file"
    }
    fn description(&self) -> &str {
        "write"
    }
    fn parameters_schema(&self) -> Value {
        json!({})
    }
    fn kind(&self) -> ToolKind {
        ToolKind::Edit
    }
    async fn execute(&self, input: Value, ctx: &ToolContext) -> ToolResult {
        let path = ctx.cwd.join(input["path"].as_str().unwrap());
        let text = input["text"].as_str().unwrap().to_owned();
        let old_text = std::fs::read_to_string(&path).ok();
        std::fs::write(&path, &text).unwrap();
        ToolResult::success(format!("Wrote {}", path.display())).with_metadata(ToolMetadata {
            files_modified: vec![path.clone()],
            edits: vec![FileEdit {
                path,
                old_text,
                new_text: text,
            }],
            ..ToolMetadata::default()
        })
    }
}

fn ctx(root: &Path) -> ToolContext {
    ToolContext {
        session_id: "s".into(),
        agent: "build".into(),
        call_id: "c".into(),
        cwd: root.to_path_buf(),
        project_root: root.to_path_buf(),
        cancel: CancellationToken::new(),
        permission: Arc::new(AllowAll),
        events: tokio::sync::mpsc::unbounded_channel().0,
        client: None,
        steering: None,
    }
}

fn settings(server: ServerConfig, wait: Duration, pythonpath: Option<&Path>) -> LspSettings {
    let mut env = crow_core::EnvPolicy::default();
    if let Some(p) = pythonpath {
        env.set.insert("PYTHONPATH".into(), p.display().to_string());
    }
    LspSettings {
        servers: vec![server],
        wait,
        warnings: false,
        env,
    }
}

fn pylsp() -> ServerConfig {
    ServerConfig {
        name: "pylsp".into(),
        command: "python3".into(),
        args: vec!["-m".into(), "pylsp".into()],
        extensions: vec!["py".into()],
        root_markers: vec![],
        initialization_options: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edit_gets_the_errors_it_introduced_and_a_fix_gets_none() {
    let Some(python) = pylsp_dir() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.py"), "x = 1\nprint(x)\n").unwrap();
    // Generous: the bound is for a stuck server; a loaded CI machine may start python slowly.
    let lsp = Arc::new(LspManager::new(settings(
        pylsp(),
        Duration::from_secs(30),
        Some(&python),
    )));
    let tool = WithDiagnostics::new(Arc::new(Write), lsp.clone());
    let ctx = ctx(&root);

    let r = tool
        .execute(
            json!({"path": "a.py", "text": "x = 1\nprint(undefined_thing)\n"}),
            &ctx,
        )
        .await;
    assert_eq!(r.metadata.diagnostics.len(), 1, "{}", r.output);
    let d = &r.metadata.diagnostics[0];
    assert_eq!(
        (d.path.as_path(), d.line, d.severity),
        (Path::new("a.py"), 2, Severity::Error)
    );
    assert!(d.message.contains("undefined_thing"), "{d:?}");
    assert!(
        r.output
            .contains("a.py:2:7 error: undefined name 'undefined_thing'"),
        "{}",
        r.output
    );
    let pids = lsp.pids();
    assert_eq!(pids.len(), 1);

    // The fix: nothing new, nothing appended.
    let r = tool
        .execute(json!({"path": "a.py", "text": "x = 1\nprint(x)\n"}), &ctx)
        .await;
    assert!(r.metadata.diagnostics.is_empty(), "{}", r.output);
    assert!(r.output.starts_with("Wrote ") && !r.output.contains('\n'));

    // A file the server does not serve: untouched, no server asked.
    let r = tool
        .execute(json!({"path": "notes.txt", "text": "hello"}), &ctx)
        .await;
    assert!(r.metadata.diagnostics.is_empty());
    assert_eq!(lsp.pids(), pids, "the same server for the whole session");

    lsp.shutdown().await;
    assert!(lsp.pids().is_empty());
    let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pids[0]), None).is_err()
        || std::fs::read_to_string(format!("/proc/{}/stat", pids[0]))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true);
    assert!(gone, "the server outlived shutdown");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_never_answers_does_not_hold_the_edit() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    // Reads everything, answers nothing.
    let hang = ServerConfig {
        name: "hang".into(),
        command: "sh".into(),
        args: vec!["-c".into(), "exec cat > /dev/null".into()],
        extensions: vec!["py".into()],
        root_markers: vec![],
        initialization_options: None,
    };
    let lsp = Arc::new(LspManager::new(settings(
        hang,
        Duration::from_millis(200),
        None,
    )));
    let tool = WithDiagnostics::new(Arc::new(Write), lsp.clone());
    let r = tool
        .execute(
            json!({"path": "a.py", "text": "print(nope)\n"}),
            &ctx(&root),
        )
        .await;
    assert!(r.output.starts_with("Wrote "), "{}", r.output);
    assert!(r.metadata.diagnostics.is_empty());
    lsp.shutdown().await;
}

/// A server that answers `initialize`, then exits after `initialized`: a crash after start.
const CRASHING: &str = r#"
import sys, json
def read():
    length = 0
    while True:
        line = sys.stdin.buffer.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return json.loads(sys.stdin.buffer.read(length))
request = read()
body = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"capabilities": {}}}).encode()
sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
sys.stdout.buffer.flush()
read()
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_dies_is_restarted_once_then_left_off_with_one_notice() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let log = root.join("starts.log");
    let crash = ServerConfig {
        name: "crash".into(),
        command: "sh".into(),
        args: vec![
            "-c".into(),
            format!("echo $$ >> '{}'; exec python3 -c \"$0\"", log.display()),
            CRASHING.into(),
        ],
        extensions: vec!["py".into()],
        root_markers: vec![],
        initialization_options: None,
    };
    let lsp = Arc::new(LspManager::new(settings(
        crash,
        Duration::from_secs(30),
        None,
    )));
    let tool = WithDiagnostics::new(Arc::new(Write), lsp.clone());
    let ctx = ctx(&root);
    let mut outputs = Vec::new();
    for i in 0..4 {
        let r = tool
            .execute(json!({"path": "a.py", "text": format!("x = {i}\n")}), &ctx)
            .await;
        assert!(r.output.starts_with("Wrote "), "{}", r.output);
        outputs.push(r.output);
    }
    let starts = std::fs::read_to_string(&log).unwrap();
    assert_eq!(starts.lines().count(), 2, "started once, restarted once");
    let notices: Vec<&String> = outputs.iter().filter(|o| o.contains("note:")).collect();
    assert_eq!(notices.len(), 1, "{outputs:?}");
    assert!(
        notices[0].contains("`crash` stopped again"),
        "{}",
        notices[0]
    );
    lsp.shutdown().await;
}
