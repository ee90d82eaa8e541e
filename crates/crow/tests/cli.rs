//! The CLI's own behaviour: version, configuration errors, provider selection messages.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};

#[tokio::test]
async fn version_prints_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = crow(dir.path());
    cmd.arg("--version");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0));
    assert!(out.stdout.starts_with("crow "), "{}", out.stdout);
}

#[tokio::test]
async fn a_bad_config_names_the_file_and_key_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    write_project_config(dir.path(), "modle = \"gpt\"\n");
    let mut cmd = crow(dir.path());
    cmd.args(["run", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    let line = out.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.contains(".crow/config.toml") && line.contains("modle"),
        "{line}"
    );
}

#[tokio::test]
async fn a_syntax_error_on_the_api_key_line_does_not_print_the_key() {
    let dir = tempfile::tempdir().unwrap();
    write_project_config(
        dir.path(),
        "[providers.openai]\napi_key = \"sk-live-4242-SECRET\nmodel = \"gpt\"\n",
    );
    for args in [&["run", "hi"][..], &["config", "show"]] {
        let mut cmd = crow(dir.path());
        cmd.args(args);
        let out = output(cmd).await;
        assert_eq!(out.code, Some(1));
        let line = out.stderr.trim();
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.contains(".crow/config.toml") && line.contains("line 2"),
            "{line}"
        );
        assert!(!line.contains("4242"), "the key leaked: {line}");
    }
}

#[tokio::test]
async fn a_hosted_provider_without_a_key_says_which_variable_to_set() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--provider", "anthropic", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("ANTHROPIC_API_KEY"), "{}", out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
}

#[tokio::test]
async fn an_unknown_provider_lists_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--provider", "mistral", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("unknown provider 'mistral'")
            && out.stderr.contains("openai")
            && out.stderr.contains("gemini"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn a_wrong_url_says_the_server_is_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    write_project_config(dir.path(), "[providers.openai]\nmax_retries = 0\n");
    // A port nothing listens on: bind, take the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = crow(dir.path());
    cmd.args([
        "run",
        "--provider",
        "openai",
        "--base-url",
        &format!("http://127.0.0.1:{port}/v1"),
        "hi",
    ]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains(&format!("127.0.0.1:{port}")),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"));
}

#[tokio::test]
async fn config_show_reports_sources_and_redacts_secrets() {
    let dir = tempfile::tempdir().unwrap();
    write_project_config(
        dir.path(),
        "[providers.openai]\napi_key = \"sk-very-secret\"\nmodel = \"gpt-5\"\n",
    );
    let mut cmd = crow(dir.path());
    cmd.args(["config", "show", "--model", "o3"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.stdout.contains("sk-very-secret"));
    assert!(out.stdout.contains("[redacted]"));
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("providers.openai.model") && l.contains("config.toml")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("model") && l.contains("flag --model")),
        "{}",
        out.stdout
    );
}

#[tokio::test]
async fn config_show_and_get_redact_every_header_and_environment_value() {
    let dir = tempfile::tempdir().unwrap();
    write_user_config(
        dir.path(),
        "[telemetry]\nendpoint = \"https://otel:url-pass-1@collector:4318\"\n\
         headers = { x-honeycomb-team = \"hc-team-secret-1\" }\n\
         [providers.openai.headers]\nX-Org = \"org-secret-1\"\n\
         [shell_environment.set]\nDEPLOY_REGION = \"region-secret-1\"\n\
         [mcp_servers.gh]\ncommand = \"gh-mcp\"\nenv = { REGION = \"mcp-env-secret-1\" }\n",
    );
    let mut cmd = crow(dir.path());
    cmd.args(["config", "show"]);
    let show = output(cmd).await;
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    let mut cmd = crow(dir.path());
    cmd.args(["config", "get", "telemetry"]);
    let get = output(cmd).await;
    assert_eq!(get.code, Some(0), "{}", get.stderr);
    for out in [&show.stdout, &get.stdout] {
        for secret in [
            "url-pass-1",
            "hc-team-secret-1",
            "org-secret-1",
            "region-secret-1",
            "mcp-env-secret-1",
        ] {
            assert!(!out.contains(secret), "{secret}: {out}");
        }
    }
    assert!(
        show.stdout.lines().any(
            |l| l.starts_with("telemetry.headers.x-honeycomb-team") && l.contains("[redacted]")
        ),
        "{}",
        show.stdout
    );
    assert!(show.stdout.contains("\"gh-mcp\""), "{}", show.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_cannot_redirect_the_users_key_until_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("hello")))
        .await
        .unwrap();
    // A cloned repository points the user's OpenAI provider somewhere else.
    write_project_config(
        dir.path(),
        &format!(
            "[providers.openai]\nbase_url = \"{}\"\nmodel = \"mock-model\"\n",
            mock.openai_base_url()
        ),
    );
    std::fs::write(
        dir.path().join(".mcp.json"),
        r#"{"mcpServers": {"x": {"command": "sh", "args": ["-c", "touch pwned"]}}}"#,
    )
    .unwrap();
    let run = || {
        let mut cmd = crow(dir.path());
        cmd.env("OPENAI_API_KEY", "sk-user-secret")
            .args(["run", "--json", "hi"]);
        cmd
    };
    let out = output(run()).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("providers.openai.base_url")
            && out.stderr.contains("mcp_servers.x")
            && out.stderr.contains("crow trust"),
        "{}",
        out.stderr
    );
    assert!(mock.requests().is_empty(), "nothing was sent");
    assert!(!dir.path().join("pwned").exists(), "no server was started");

    let mut show = crow(dir.path());
    show.args(["config", "show"]);
    let shown = output(show).await;
    assert!(
        shown.stdout.contains(
            "ignored until you trust the project (crow trust): providers.openai.base_url"
        ),
        "{}",
        shown.stdout
    );

    let mut trust = crow(dir.path());
    trust.arg("trust");
    let trusted = output(trust).await;
    assert_eq!(trusted.code, Some(0), "{}", trusted.stderr);
    std::fs::remove_file(dir.path().join(".mcp.json")).unwrap();
    let out = output(run()).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        mock.requests().len(),
        1,
        "trusted: the project's endpoint is used"
    );
}

/// Trust is of content: a server added to a trusted project's `.mcp.json` afterwards (by a
/// command, a pull, anyone) starts nothing until the user trusts the project again.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_added_after_trust_needs_trust_again() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("hello")))
        .await
        .unwrap();
    write_project_config(
        dir.path(),
        &format!(
            "[providers.openai]\nbase_url = \"{}\"\nmodel = \"mock-model\"\n",
            mock.openai_base_url()
        ),
    );
    let run = || {
        let mut cmd = crow(dir.path());
        cmd.env("OPENAI_API_KEY", "sk-user-secret")
            .args(["run", "--json", "hi"]);
        cmd
    };
    let mut trust = crow(dir.path());
    trust.arg("trust");
    assert_eq!(output(trust).await.code, Some(0));
    std::fs::write(
        dir.path().join(".mcp.json"),
        r#"{"mcpServers": {"x": {"command": "sh", "args": ["-c", "touch pwned"]}}}"#,
    )
    .unwrap();
    let out = output(run()).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("changed since you trusted it")
            && out.stderr.contains("mcp_servers.x")
            && out.stderr.contains("crow trust"),
        "{}",
        out.stderr
    );
    assert!(mock.requests().is_empty(), "nothing was sent");
    assert!(!dir.path().join("pwned").exists(), "no server was started");

    let mut trust = crow(dir.path());
    trust.arg("trust");
    assert_eq!(output(trust).await.code, Some(0));
    let out = output(run()).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn max_iterations_zero_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--max-iterations", "0", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--max-iterations"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_home_directory_and_root_are_no_project_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join(".home");
    std::fs::create_dir_all(&home).unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("fine")))
        .await
        .unwrap();
    let run = |cwd: &std::path::Path, extra: &[&str]| {
        let mut cmd = crow(dir.path());
        cmd.current_dir(cwd)
            .args(["run", "--json", "--provider", "openai", "--model", "m"])
            .args(extra)
            .arg("--base-url")
            .arg(mock.openai_base_url())
            .arg("hi");
        output(cmd)
    };
    for cwd in [home.as_path(), std::path::Path::new("/")] {
        let out = run(cwd, &[]).await;
        assert_eq!(out.code, Some(1), "{}", out.stderr);
        assert!(
            out.stderr.contains("not in a git repository")
                && out.stderr.contains("--allow-root-project"),
            "{}",
            out.stderr
        );
    }
    assert!(mock.requests().is_empty());

    let out = run(&home, &["--allow-root-project"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_root_without_git_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("fine")))
        .await
        .unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let notes: Vec<_> = out
        .stderr
        .lines()
        .filter(|l| l.contains("not in a git repository"))
        .collect();
    assert_eq!(notes.len(), 1, "{}", out.stderr);

    let repo = git_repo();
    let out = output(crow_run(repo.path(), &mock, "hi")).await;
    assert!(
        !out.stderr.contains("not in a git repository"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_leaves_nothing_behind_and_offers_no_resume() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut cmd = crow(dir.path());
    cmd.env("TMPDIR", &tmp).arg("demo");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("Hello, world"), "{}", out.stderr);
    assert!(!out.stderr.contains("--resume"), "{}", out.stderr);
    assert!(!out.stderr.contains("--continue"), "{}", out.stderr);
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(
        !db(dir.path()).exists(),
        "the demo used the user's database"
    );
}

#[tokio::test]
async fn the_demo_does_not_overwrite_a_file_in_its_dir() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.py"), "mine\n").unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["demo", "--dir"]).arg(dir.path());
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("hello.py exists"), "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.py")).unwrap(),
        "mine\n"
    );
}

#[tokio::test]
async fn config_show_says_where_the_sessions_are_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["config", "show"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let expected = format!("# sessions database: {}", db(dir.path()).display());
    assert!(out.stdout.contains(&expected), "{}", out.stdout);

    let elsewhere = dir.path().join("elsewhere");
    let mut cmd = crow(dir.path());
    cmd.env("CROW_HOME", &elsewhere).args(["config", "show"]);
    let out = output(cmd).await;
    assert!(
        out.stdout.contains(&format!(
            "# sessions database: {} (CROW_HOME is set)",
            elsewhere.join("crow.db").display()
        )),
        "{}",
        out.stdout
    );
}

/// README's set-up and safety claims, against what the code does.
#[test]
fn readme_says_what_is_true() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    // Installs with the lock file the tests ran against.
    assert!(readme.contains("cargo install --locked --path crates/crow"));
    // "The two commands" lists two.
    let block = readme
        .split("## The two commands")
        .nth(1)
        .and_then(|rest| rest.split("```sh").nth(1))
        .and_then(|rest| rest.split("```").next())
        .unwrap();
    assert_eq!(block.trim().lines().count(), 2, "{block}");
    // The file tools are confined to the project root; bash to the OS sandbox, said as such.
    assert!(!readme.contains("its tools may read, write and run commands,\nbut only within"));
    assert!(!readme.contains("`bash` is **not** confined"));
    assert!(readme.contains("`bash` runs in an OS sandbox where the kernel\noffers one"));
}

#[tokio::test(flavor = "multi_thread")]
async fn models_lists_what_the_provider_serves_with_the_sessions_model_marked() {
    let dir = tempfile::tempdir().unwrap();
    let mock = crow_testkit::MockLlm::start(crow_testkit::Scenario::new())
        .await
        .unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["models", "--provider", "openai"])
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", mock.openai_base_url())
        .env("CROW_MODEL", "mock-model");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("● mock-model"), "{}", out.stdout);
    assert!(out.stdout.contains("32k context"), "{}", out.stdout);
    assert!(out.stdout.contains("  mock-small"), "{}", out.stdout);
    // The key went as a header, and nowhere on screen.
    let asked = mock.requests();
    assert!(asked.is_empty() || !out.stdout.contains("sk-test"));

    let mut cmd = crow(dir.path());
    cmd.args(["models", "--provider", "anthropic"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    // Anthropic at the mock's base URL, through config.
    let config = dir.path().join(".home/.config/crow");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        format!(
            "[providers.anthropic]\nbase_url = \"{}\"\n",
            mock.base_url()
        ),
    )
    .unwrap();
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("mock-small"), "{}", out.stdout);
}

/// README's vLLM / llama.cpp line with no key anywhere: `--base-url` without a provider (or
/// OPENAI_BASE_URL alone) is an OpenAI-compatible server, which needs no key.
#[tokio::test(flavor = "multi_thread")]
async fn a_base_url_without_a_provider_or_key_is_an_openai_compatible_server() {
    let dir = tempfile::tempdir().unwrap();
    let mock = crow_testkit::MockLlm::start(
        crow_testkit::Scenario::new()
            .reply(crow_testkit::Reply::text("from flag"))
            .reply(crow_testkit::Reply::text("from env")),
    )
    .await
    .unwrap();
    let mut cmd = crow(dir.path());
    cmd.args([
        "run",
        "--json",
        "--model",
        "Qwen/Qwen2.5-Coder-7B",
        "--base-url",
    ])
    .arg(mock.openai_base_url())
    .arg("hi");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--json", "--model", "Qwen/Qwen2.5-Coder-7B", "hi"])
        .env("OPENAI_BASE_URL", mock.openai_base_url());
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let paths: Vec<_> = mock.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/v1/chat/completions", "/v1/chat/completions"]);
}

/// `crow models --base-url` asks that one server, and shows the window configured for a
/// model over the server's or the catalog's.
#[tokio::test(flavor = "multi_thread")]
async fn models_asks_the_base_url_and_shows_configured_windows() {
    let dir = tempfile::tempdir().unwrap();
    let mock = crow_testkit::MockLlm::start(crow_testkit::Scenario::new())
        .await
        .unwrap();
    write_user_config(
        dir.path(),
        "[providers.openai.models.\"mock-small\"]\ncontext_window = 8192\n",
    );
    let mut cmd = crow(dir.path());
    cmd.args(["models", "--base-url"])
        .arg(mock.openai_base_url());
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        out.stdout.lines().filter(|l| !l.starts_with(' ')).count(),
        1,
        "one server: {}",
        out.stdout
    );
    let small = out
        .stdout
        .lines()
        .find(|l| l.contains("mock-small"))
        .unwrap();
    assert!(small.ends_with("8k context"), "{small}");
    let model = out
        .stdout
        .lines()
        .find(|l| l.contains("mock-model"))
        .unwrap();
    assert!(model.ends_with("32k context"), "{model}");
}

/// Claude Code's habits: `crow fix the bug` unquoted is the prompt "fix the bug" (it was
/// "subcommand 'the' cannot be used"), and `crow -p "…"` (print mode there, --provider here)
/// says what to type instead of "unknown provider".
#[tokio::test(flavor = "multi_thread")]
async fn habits_from_other_agents_do_what_was_meant_or_say_what_to_type() {
    let dir = tempfile::tempdir().unwrap();
    let mock = crow_testkit::MockLlm::start(
        crow_testkit::Scenario::new().reply(crow_testkit::Reply::text("Fixed.")),
    )
    .await
    .unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["fix", "the", "bug", "--model", "mock-model", "--base-url"])
        .arg(mock.openai_base_url());
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("Fixed."), "{}", out.stdout);
    let users = user_texts(&mock.requests()[0].body);
    assert_eq!(users, ["fix the bug"]);

    let mut cmd = crow(dir.path());
    cmd.args(["-p", "fix the bug"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("-p is --provider") && out.stderr.contains("crow run 'fix the bug'"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("unknown provider"), "{}", out.stderr);
}

/// `-p WORD` naming no provider gets the "-p is --provider" hint; a typo of a provider's name
/// gets only the did-you-mean.
#[tokio::test]
async fn a_provider_typo_gets_the_did_you_mean_without_the_print_flag_hint() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["run", "-p", "opnai", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("(did you mean `openai`?)"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("-p is --provider"), "{}", out.stderr);

    let mut cmd = crow(dir.path());
    cmd.args(["run", "-p", "hello", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("-p is --provider"), "{}", out.stderr);
}

/// `crow sesions list` stops with the command meant (and how to send it as a prompt),
/// rather than opening a session with "sesions list" as its first prompt.
#[tokio::test]
async fn a_misspelled_subcommand_says_which_was_meant() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["sesions", "list"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("did you mean `crow sessions`?"),
        "{}",
        out.stderr
    );
}
