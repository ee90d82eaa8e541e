//! `crow config set|get|unset|validate|path|edit` and `crow init` through the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

fn user_config(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join(".home/.config/crow/config.toml")
}

async fn crow_ok(dir: &std::path::Path, args: &[&str]) -> Output {
    let mut cmd = crow(dir);
    cmd.args(args);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn set_get_unset_round_trip_a_commented_file() {
    let dir = tempfile::tempdir().unwrap();
    let original = "# my settings\nmodel = \"a\"  # keep this comment\n\n[tools]\n# why 5\nbash_timeout_secs = 5\n";
    std::fs::create_dir_all(user_config(dir.path()).parent().unwrap()).unwrap();
    std::fs::write(user_config(dir.path()), original).unwrap();

    crow_ok(dir.path(), &["config", "set", "model", "gpt-4.1"]).await;
    let text = std::fs::read_to_string(user_config(dir.path())).unwrap();
    assert_eq!(
        text,
        original.replace("\"a\"", "\"gpt-4.1\""),
        "only the value changed"
    );

    crow_ok(
        dir.path(),
        &[
            "config",
            "set",
            "providers.local.base_url",
            "http://127.0.0.1:8000/v1",
        ],
    )
    .await;
    crow_ok(
        dir.path(),
        &["config", "set", "providers.local.type", "openai"],
    )
    .await;
    let out = crow_ok(dir.path(), &["config", "get", "providers.local"]).await;
    assert!(
        out.stdout
            .contains("providers.local.base_url = \"http://127.0.0.1:8000/v1\""),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("config.toml"),
        "the source is named: {}",
        out.stdout
    );

    crow_ok(dir.path(), &["config", "unset", "providers.local.base_url"]).await;
    let out = crow_ok(dir.path(), &["config", "get", "model"]).await;
    assert!(
        out.stdout.starts_with("model = \"gpt-4.1\""),
        "{}",
        out.stdout
    );

    // A typo is refused with the closest key, and the file is untouched.
    let before = std::fs::read_to_string(user_config(dir.path())).unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["config", "set", "max_iteratons", "5"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("did you mean `max_iterations`?"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_to_string(user_config(dir.path())).unwrap(),
        before
    );
    // So is a bad value.
    let mut cmd = crow(dir.path());
    cmd.args(["config", "set", "max_iterations", "many"]);
    assert_eq!(output(cmd).await.code, Some(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_key_is_never_written_in_plain_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["config", "set", "providers.openai.api_key", "sk-secret-123"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("api_key_env") && !out.stderr.contains("sk-secret-123"),
        "{}",
        out.stderr
    );
    assert!(!user_config(dir.path()).exists());

    crow_ok(
        dir.path(),
        &[
            "config",
            "set",
            "providers.openai.api_key",
            "sk-secret-123",
            "--key-file",
        ],
    )
    .await;
    let key = dir.path().join(".home/.config/crow/keys/openai");
    assert_eq!(std::fs::read_to_string(&key).unwrap(), "sk-secret-123");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let text = std::fs::read_to_string(user_config(dir.path())).unwrap();
    assert!(
        text.contains("api_key_file") && !text.contains("sk-secret"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn validate_names_file_line_and_key_and_sets_the_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    crow_ok(dir.path(), &["config", "validate"]).await;
    write_project_config(dir.path(), "model = \"m\"\n[tools]\nbash_timeout = 3\n");
    std::fs::create_dir_all(dir.path().join(".crow/agents")).unwrap();
    std::fs::write(
        dir.path().join(".crow/agents/bad.toml"),
        "primary = \"builder\"\nlevel = 9\n",
    )
    .unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["config", "validate"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stdout.contains(".crow/config.toml")
            && out.stdout.contains("line 3")
            && out.stdout.contains("bash_timeout"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("bad.toml"), "{}", out.stdout);

    let mut cmd = crow(dir.path());
    cmd.args(["config", "validate"])
        .arg(dir.path().join(".crow/agents/bad.toml"));
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stdout.contains("bad.toml") && out.stdout.contains("level"),
        "{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn path_edit_and_init() {
    let dir = tempfile::tempdir().unwrap();
    let out = crow_ok(dir.path(), &["config", "path"]).await;
    assert!(
        out.stdout.contains(".home/.config/crow/config.toml"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("crow.db"), "{}", out.stdout);

    // An "editor" that writes an invalid key: refused, the file unchanged, the edit kept.
    let mut cmd = crow(dir.path());
    cmd.env("EDITOR", "sh -c 'echo \"modl = 1\" > \"$0\"'")
        .args(["config", "edit"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(!user_config(dir.path()).exists());
    let mut cmd = crow(dir.path());
    cmd.env("EDITOR", "sh -c 'echo \"model = \\\"x\\\"\" > \"$0\"'")
        .args(["config", "edit"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(user_config(dir.path())).unwrap(),
        "model = \"x\"\n"
    );

    std::fs::write(dir.path().join("Cargo.toml"), "[package]\nname = \"x\"\n").unwrap();
    crow_ok(dir.path(), &["init", "--yes"]).await;
    let agents = std::fs::read_to_string(dir.path().join("AGENTS.md")).unwrap();
    assert!(agents.contains("`cargo test`"), "{agents}");
    crow_ok(dir.path(), &["config", "validate"]).await;
    // A second init changes nothing.
    std::fs::write(dir.path().join("AGENTS.md"), "mine\n").unwrap();
    crow_ok(dir.path(), &["init", "--yes"]).await;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("AGENTS.md")).unwrap(),
        "mine\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_schema_describes_every_section_and_refuses_unknown_keys() {
    let dir = tempfile::tempdir().unwrap();
    let out = crow_ok(dir.path(), &["config", "schema"]).await;
    let schema: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    for key in [
        "model",
        "providers",
        "mcp_servers",
        "shell_environment",
        "instructions",
    ] {
        assert!(schema["properties"].get(key).is_some(), "{key}");
    }
    assert_eq!(schema["additionalProperties"], false);
    let text = out.stdout;
    assert!(
        text.contains("api_key_env") && text.contains("\"anthropic\""),
        "provider keys and kinds"
    );
}

/// `provider = NAME` without a `[providers.NAME]` fails every run: `set` refuses it with the
/// closest name, `validate` flags one written by hand, and the run's error guesses too.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_that_is_not_defined_is_refused_with_the_closest_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["config", "set", "provider", "opnai"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("unknown provider 'opnai' (did you mean `openai`?)")
            && out.stderr.contains("nothing was written"),
        "{}",
        out.stderr
    );
    assert!(!user_config(dir.path()).exists());
    // Defined in the same file: accepted.
    std::fs::create_dir_all(user_config(dir.path()).parent().unwrap()).unwrap();
    std::fs::write(
        user_config(dir.path()),
        "[providers.mock]\ntype = \"openai\"\n",
    )
    .unwrap();
    crow_ok(dir.path(), &["config", "set", "provider", "mock"]).await;
    crow_ok(dir.path(), &["config", "validate"]).await;

    // Written by hand: validate says so, with the file.
    std::fs::write(user_config(dir.path()), "provider = \"mokc\"\n").unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["config", "validate"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("provider = \"mokc\"")
            && out.stdout.contains("config.toml")
            && out.stdout.contains("unknown provider 'mokc'"),
        "{}",
        out.stdout
    );
    // The run's error guesses as well.
    std::fs::write(user_config(dir.path()), "provider = \"olama\"\n").unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["run", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("(did you mean `ollama`?)"),
        "{}",
        out.stderr
    );
}

/// `crow config set-key PROVIDER` with the key piped in.
async fn set_key(dir: &std::path::Path, provider: &str, stdin: &str) -> Output {
    use tokio::io::AsyncWriteExt;
    let mut cmd = crow(dir);
    cmd.args(["config", "set-key", provider])
        .stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    // A refusal (an unknown provider) can exit before reading: its closed pipe is no failure.
    if let Err(e) = input.write_all(stdin.as_bytes()).await {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    drop(input);
    let out = child.wait_with_output().await.unwrap();
    parse(out.status.code(), out.stdout, out.stderr)
}

/// No keyring here (nor in CI): `set-key` says so, writes the key to a file only the user can
/// read and prints the config line; with that line a run sends the key; `delete-key` removes
/// it. The key is never in an argument nor in anything crow prints.
#[tokio::test(flavor = "multi_thread")]
async fn set_key_without_a_keyring_keeps_a_private_file_that_a_run_uses() {
    const KEY: &str = "sk-piped-secret-4711";
    let dir = tempfile::tempdir().unwrap();
    let mock = crow_testkit::MockLlm::start(
        crow_testkit::Scenario::new().reply(crow_testkit::Reply::text("hello")),
    )
    .await
    .unwrap();
    write_user_config(dir.path(), &mock_provider(&mock));

    let out = set_key(
        dir.path(),
        "mock",
        &format!("  {KEY}\nignored second line\n"),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("no system keyring is available"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains(KEY) && !out.stdout.contains(KEY));
    let file = dir.path().join(".home/.config/crow/keys/mock");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), KEY);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let line = format!("api_key_file = \"{}\"", file.display());
    assert_eq!(out.stdout, format!("[providers.mock]\n{line}\n"));
    // Nothing was written to the config: the lines are the user's to add.
    let config = std::fs::read_to_string(user_config(dir.path())).unwrap();
    assert!(!config.contains("api_key_file"), "{config}");

    // The printed line, under the provider's table, makes the run send the key.
    write_user_config(dir.path(), &format!("{}{line}\n", mock_provider(&mock)));
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--json", "say hello"]);
    let run = output(cmd).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let requests = mock.requests();
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert!(!run.stderr.contains(KEY) && !run.stdout.contains(KEY));

    let out = crow_ok(dir.path(), &["config", "delete-key", "mock"]).await;
    assert!(out.stderr.contains("removed"), "{}", out.stderr);
    assert!(!file.exists());
    let mut cmd = crow(dir.path());
    cmd.args(["config", "delete-key", "mock"]);
    let again = output(cmd).await;
    assert_eq!(again.code, Some(1), "{}", again.stderr);
    assert!(again.stderr.contains("no key"), "{}", again.stderr);
}

/// A provider no layer defines, or nothing on standard input: an error, and nothing stored.
#[tokio::test(flavor = "multi_thread")]
async fn set_key_refuses_an_unknown_provider_and_an_empty_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = set_key(dir.path(), "opnai", "sk-x\n").await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("openai") && out.stderr.contains("nothing was stored"),
        "{}",
        out.stderr
    );
    let out = set_key(dir.path(), "openai", "\n").await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("no key"), "{}", out.stderr);
    assert!(!dir.path().join(".home/.config/crow/keys").exists());
}

/// On a terminal the key is typed without echo: it is never on the screen, and it is stored.
#[test]
fn set_key_on_a_terminal_does_not_show_the_key() {
    const KEY: &str = "sk-typed-secret-8842";
    let dir = tempfile::tempdir().unwrap();
    let mut pty = common::pty::spawn(dir.path(), &["config", "set-key", "openai"], 24, 120);
    pty.wait_for("not shown as you type", 30);
    pty.line(KEY);
    assert_eq!(pty.wait_exit(30), 0, "{}", pty.screen());
    let screen = pty.screen();
    assert!(!screen.contains(KEY), "{screen}");
    assert!(screen.contains("api_key_file"), "{screen}");
    let file = dir.path().join(".home/.config/crow/keys/openai");
    assert_eq!(std::fs::read_to_string(file).unwrap(), KEY);
}
