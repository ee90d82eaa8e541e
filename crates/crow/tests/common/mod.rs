//! Shared helpers: run the real `crow` binary, isolated from the user's config and keys,
//! against crow-testkit's mock model on loopback.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod acp;
pub mod pty;
pub mod sandbox;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crow_testkit::MockLlm;
use serde_json::Value;
use tokio::process::Command;

/// What a test's `crow` must not inherit from the machine: config, keys, model choices, logs.
pub const UNSET: &[&str] = &[
    "CROW_CONFIG_DIR",
    "CROW_KEYRING",
    "CROW_HOME",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "CLOUDSDK_CONFIG",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_BEARER_TOKEN_BEDROCK",
    "CROW_PROVIDER",
    "CROW_MODEL",
    "CROW_LOG",
    "CROW_SANDBOX_UNSUPPORTED",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SERVICE_NAME",
];

/// A `crow` command in `dir`, with HOME and XDG dirs pointing into `dir` so no real config
/// or key leaks in.
pub fn crow(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_crow"));
    let home = dir.join(".home");
    cmd.current_dir(dir)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("NO_COLOR", "1")
        // No finish step after a test's completed task unless the test asks for one: it
        // would send the mock a request after the test has counted them.
        .env("CROW_MEMORY_FINISH", "off")
        // No system keyring: the session bus is an address where none listens, so a
        // developer's desktop keyring stays out of tests (CI has none either).
        .env(
            "DBUS_SESSION_BUS_ADDRESS",
            format!("unix:path={}", home.join(".no-session-bus").display()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in UNSET {
        cmd.env_remove(var);
    }
    // Commands run sandboxed where the kernel allows it; elsewhere tests that are not about
    // the sandbox still run their commands (tests/sandbox.rs skips or removes this).
    if sandbox_usable() {
        cmd.env_remove("CROW_SANDBOX_MODE");
    } else {
        cmd.env("CROW_SANDBOX_MODE", "off");
    }
    cmd
}

/// What `crow __sandbox --probe` finds on this machine (once per test binary).
pub fn sandbox_support() -> &'static Value {
    static SUPPORT: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    SUPPORT.get_or_init(|| {
        std::process::Command::new(env!("CARGO_BIN_EXE_crow"))
            .args(["__sandbox", "--probe"])
            .output()
            .ok()
            .and_then(|out| serde_json::from_slice(&out.stdout).ok())
            .unwrap_or(Value::Null)
    })
}

/// Whether the default sandbox (Landlock writes, network off) can run commands here. With
/// `CROW_REQUIRE_SANDBOX` set (CI), a machine without one fails the test instead.
pub fn sandbox_usable() -> bool {
    let s = sandbox_support();
    let usable = s["landlock_fs"] == true && (s["landlock_net"] == true || s["namespaces"] == true);
    if !usable {
        require_sandbox("a usable sandbox");
    }
    usable
}

/// Panics when `CROW_REQUIRE_SANDBOX` is set: the caller found no `what` and would skip.
pub fn require_sandbox(what: &str) {
    assert!(
        std::env::var_os("CROW_REQUIRE_SANDBOX").is_none(),
        "CROW_REQUIRE_SANDBOX is set and this kernel lacks {what} (probe: {})",
        sandbox_support()
    );
}

/// A deadline that fails only a hung test.
pub const HUNG: std::time::Duration = std::time::Duration::from_secs(60);

/// Polls `cond` until it holds; panics naming `what` after [`HUNG`].
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + HUNG;
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Whether process `pid` is gone (or a zombie awaiting its reaper).
pub fn gone(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.is_empty() || stat.contains(") Z ")
}

/// `crow run --json` against the mock's OpenAI endpoint.
pub fn crow_run(dir: &Path, mock: &MockLlm, prompt: &str) -> Command {
    let mut cmd = crow(dir);
    cmd.args([
        "run",
        "--json",
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
    ])
    .arg(mock.openai_base_url())
    .arg(prompt);
    cmd
}

/// `crow run --json` against the mock's Anthropic endpoint (a project config selects it).
pub fn crow_run_anthropic(dir: &Path, mock: &MockLlm, prompt: &str) -> Command {
    write_project_config(
        dir,
        &format!(
            "provider = \"claude\"\n[providers.claude]\ntype = \"anthropic\"\nbase_url = \"{}\"\nmodel = \"claude-mock\"\napi_key_env = \"CROW_TEST_ANTHROPIC_KEY\"\n",
            mock.base_url()
        ),
    );
    trust_project(dir);
    let mut cmd = crow(dir);
    cmd.env("CROW_TEST_ANTHROPIC_KEY", "test-key-not-secret")
        .args(["run", "--json"])
        .arg(prompt);
    cmd
}

/// Writes the project's `.crow/config.toml`. Tests that set guarded keys (endpoints, MCP
/// servers) also call [`trust_project`].
pub fn write_project_config(dir: &Path, text: &str) {
    std::fs::create_dir_all(dir.join(".crow")).unwrap();
    std::fs::write(dir.join(".crow/config.toml"), text).unwrap();
}

/// Writes the user's own config.toml (HOME is inside `dir`).
pub fn write_user_config(dir: &Path, text: &str) {
    let config = dir.join(".home/.config/crow");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.toml"), text).unwrap();
}

/// Config text selecting a provider `mock` of the mock's OpenAI endpoint and `mock-model`.
pub fn mock_provider(mock: &MockLlm) -> String {
    format!(
        "provider = \"mock\"\n[providers.mock]\ntype = \"openai\"\nbase_url = \"{}\"\nmodel = \"mock-model\"\n",
        mock.openai_base_url()
    )
}

/// A temporary git repository.
pub fn git_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    dir
}

pub struct Output {
    pub code: Option<i32>,
    pub events: Vec<Value>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn of_type(&self, ty: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["type"] == ty).collect()
    }

    pub fn position(&self, pred: impl Fn(&Value) -> bool) -> Option<usize> {
        self.events.iter().position(pred)
    }
}

pub async fn output(mut cmd: Command) -> Output {
    let out = cmd.output().await.unwrap();
    parse(out.status.code(), out.stdout, out.stderr)
}

pub fn parse(code: Option<i32>, stdout: Vec<u8>, stderr: Vec<u8>) -> Output {
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    let stderr = String::from_utf8_lossy(&stderr).into_owned();
    let events = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    Output {
        code,
        events,
        stdout,
        stderr,
    }
}

pub fn path(dir: &Path, rel: &str) -> PathBuf {
    dir.join(rel)
}

// ---- the session store, as the `crow` of `crow(dir)` sees it ----

/// The database a `crow` started by [`crow`] uses.
pub fn db(dir: &Path) -> PathBuf {
    dir.join(".home/.local/share/crow/crow.db")
}

pub fn store(dir: &Path) -> crow_store::SqliteStore {
    crow_store::SqliteStore::open(db(dir)).unwrap()
}

/// The one stored session (of any project).
pub fn only_session(dir: &Path) -> crow_core::SessionInfo {
    use crow_core::SessionStore;
    let sessions = store(dir)
        .list_sessions(&crow_core::SessionFilter::default())
        .unwrap();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    sessions.into_iter().next().unwrap()
}

pub fn kinds(history: &[crow_core::HistoryEntry]) -> Vec<&'static str> {
    history.iter().map(|e| e.kind.name()).collect()
}

/// Lists `dir` as a trusted project in the test's user config (appended, so a test's own
/// user settings stay), as `crow trust` would.
pub fn trust_project(dir: &Path) {
    use std::io::Write;
    let config = dir.join(".home/.config/crow");
    std::fs::create_dir_all(&config).unwrap();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(config.join("config.toml"))
        .unwrap();
    let root = std::fs::canonicalize(dir).unwrap();
    writeln!(file, "\n[projects.\"{}\"]\ntrusted = true", root.display()).unwrap();
}

/// The text of every user message of an OpenAI-style request body, in order.
pub fn user_texts(body: &serde_json::Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| {
            m["content"]
                .as_str()
                .map_or_else(|| m["content"].to_string(), str::to_owned)
        })
        .collect()
}

/// A reply that says `text` and reads notes.txt with call id `id`.
pub fn read_reply(text: &str, id: &str) -> crow_testkit::Reply {
    crow_testkit::Reply::text(text).with_call(
        crow_testkit::ToolCall::new("read_file", serde_json::json!({"path": "notes.txt"}))
            .with_id(id),
    )
}

/// `bash -c script` with `crow`'s test environment, the binary as `$0`: a shell pipeline
/// around crow (`"$0" run … | head -1`).
pub fn crow_in_shell(dir: &Path, script: &str) -> Command {
    let mut cmd = crow(dir);
    let envs: Vec<(std::ffi::OsString, Option<std::ffi::OsString>)> = cmd
        .as_std_mut()
        .get_envs()
        .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
        .collect();
    let mut shell = Command::new("bash");
    shell
        .current_dir(dir)
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_crow"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in envs {
        match value {
            Some(v) => shell.env(key, v),
            None => shell.env_remove(key),
        };
    }
    shell
}

/// git in `dir` with a throwaway identity; its stdout. Fails the test on an error.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `crow` working in `cwd` with its home in `dir/home` (beside a repository rather than in
/// it: crow's worktrees go under the home's state directory).
pub fn crow_beside(dir: &Path, cwd: &Path) -> Command {
    let mut cmd = crow(cwd);
    let home = dir.join("home");
    cmd.env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"));
    cmd
}
