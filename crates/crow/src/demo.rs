//! `crow demo`: a real session — real tools, real files, real HTTP and SSE — driven by the
//! scripted mock model from crow-testkit, so crow can be seen working with nothing set up.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use crow_providers::{ProviderKind, ProviderSettings, RetryPolicy};
use crow_store::SqliteStore;
use crow_testkit::{DEMO_FILE, MockLlm, demo_scenario};

use crate::agents::load_catalog;
use crate::compose::{Composer, ComposerParts};
use crate::config::Config;
use crate::run::{RunSpec, run_session};

/// Runs the demo in `dir` (which must not hold the demo's file yet), or in a temporary
/// directory removed afterwards. Its session goes to a temporary store, never the user's:
/// it cannot be continued anyway (the scripted model is gone when the demo ends).
pub async fn run(json: bool, dir: Option<PathBuf>) -> Result<ExitCode> {
    let (name, content) = DEMO_FILE;
    let scratch = tempfile::Builder::new()
        .prefix("crow-demo-")
        .tempdir()
        .context("cannot create a temporary directory for the demo")?;
    let kept = dir.is_some();
    let dir = match dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            if dir.join(name).exists() {
                bail!(
                    "{} exists; the demo edits that file, so it will not overwrite yours: give --dir a new or empty directory",
                    dir.join(name).display()
                );
            }
            dir
        }
        None => {
            let dir = scratch.path().join("project");
            std::fs::create_dir(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            dir
        }
    };
    let dir = dir
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", dir.display()))?;
    std::fs::write(dir.join(name), content)
        .with_context(|| format!("cannot write the demo file in {}", dir.display()))?;
    let store = SqliteStore::open(scratch.path().join(crow_store::DB_FILE))
        .map_err(crate::sessions::store_error)?;

    let mock = MockLlm::start(demo_scenario())
        .await
        .context("cannot start the scripted model")?;
    if !json {
        errln!(
            "crow demo: a scripted model on {} drives a real session in {}\n",
            mock.openai_base_url(),
            dir.display()
        );
    }
    let settings = ProviderSettings {
        kind: ProviderKind::OpenAi,
        name: "demo".into(),
        base_url: mock.openai_base_url(),
        model: "crow-demo".into(),
        api_key: None,
        context_window: Some(128_000),
        images: None,
        retry: RetryPolicy::default(),
        headers: Vec::new(),
        max_tokens: None,
        thinking_budget: None,
        keep_alive: None,
        reasoning_effort: None,
        prompt_cache_key: None,
        wire_api: None,
        reasoning_summary: None,
        api_version: None,
        cloud: Default::default(),
    };
    // The demo's project is thrown away: no snapshots of it in the user's data directory.
    let mut config = Config::default();
    config.snapshots.enabled = Some(false);
    // The demo's model is gone when it ends: no finish step to send it anything.
    config.memory.finish = Some(crate::memory::FinishWhen::Off);
    // Its commands run unconfined (`ToolOptions::default()`), and the prompt says what is.
    config.sandbox.mode = Some(crow_tools::SandboxMode::Off);
    // The same engine as any session: full-auto like `crow run`, with crow's sensitive
    // places asking (nobody is there to answer, so they are refused).
    let policy = crow_core::Policy {
        sensitive_dirs: crate::permissions::sensitive_dirs(&config, &dir),
        ..crow_core::Policy::new(crow_core::Mode::FullAuto, dir.clone())
    };
    let composer = Composer::build(ComposerParts {
        config,
        provider: settings,
        catalog: load_catalog(None, &dir),
        tools: crow_tools::builtin_tools(&crow_tools::ToolOptions::default()),
        cwd: dir.clone(),
        max_iterations: 20,
        gate: crate::permissions::headless(false),
        policy: std::sync::Arc::new(policy),
        trusted: false,
        client: None,
        effort: None,
        hooks: None,
    });
    let code = run_session(RunSpec {
        prompt: format!("{name} prints the wrong greeting. Fix it and check that it runs."),
        composer,
        agent: Some("build".into()),
        level: None,
        json,
        store: crate::sessions::Opening::ready(std::sync::Arc::new(store)),
        resumed: None,
        mcp_servers: Vec::new(),
        resume_hint: false,
        plain_root: false,
        output_schema: None,
        output_last_message: None,
        print_result: true,
    })
    .await?;
    mock.shutdown().await;
    if !json {
        let now = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        let gone = if kept {
            ""
        } else {
            "\n(the demo's temporary directory is removed now; `crow demo --dir DIR` keeps it)"
        };
        errln!(
            "\n{} now reads: {}{gone}",
            dir.join(name).display(),
            now.trim_end()
        );
        errln!(
            "next: `crow` in your project opens an interactive session (with OPENAI_API_KEY or \
             ANTHROPIC_API_KEY set, or a local model: see README's \"Use it\")"
        );
    }
    Ok(code)
}
