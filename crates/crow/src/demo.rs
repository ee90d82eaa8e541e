//! `crow demo`: a real session — real tools, real files, real HTTP and SSE — driven by the
//! scripted mock model from crow-testkit, so crow can be seen working with nothing set up.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use crow_providers::{ProviderKind, ProviderSettings, RetryPolicy};
use crow_testkit::{DEMO_FILE, MockLlm, demo_scenario};

use crate::agents::load_catalog;
use crate::app::{RunSpec, run_session};
use crate::compose::Composer;
use crate::config::Config;

pub async fn run(json: bool, dir: Option<PathBuf>) -> Result<ExitCode> {
    let dir = match dir {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!("crow-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let dir = dir
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", dir.display()))?;
    let (name, content) = DEMO_FILE;
    std::fs::write(dir.join(name), content)
        .with_context(|| format!("cannot write the demo file in {}", dir.display()))?;

    let mock = MockLlm::start(demo_scenario())
        .await
        .context("cannot start the scripted model")?;
    if !json {
        eprintln!(
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
    };
    let composer = Composer::new(
        Config::default(),
        settings,
        load_catalog(None, &dir),
        crow_tools::builtin_tools(&crow_tools::ToolOptions::default()),
        dir.clone(),
        20,
    );
    let code = run_session(RunSpec {
        prompt: format!("{name} prints the wrong greeting. Fix it and check that it runs."),
        composer: crate::compose::with_subagents(composer),
        agent: Some("build".into()),
        level: None,
        json,
        // The demo's session is stored like any other, so `crow sessions show` can replay it.
        store: crate::sessions::open(&crate::config::Config::default())?,
        resumed: None,
        mcp_servers: Vec::new(),
        resume_hint: false,
        plain_root: false,
    })
    .await?;
    mock.shutdown().await;
    if !json {
        let now = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        eprintln!(
            "\n{} now reads: {}",
            dir.join(name).display(),
            now.trim_end()
        );
    }
    Ok(code)
}
