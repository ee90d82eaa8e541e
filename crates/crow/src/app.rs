//! Wiring: turns configuration into a provider, tools and a BaseAgent, and runs one session.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use crow_core::{RunStop, SessionStore};
use crow_providers::{KeySource, ProviderKind, ProviderSettings, RetryPolicy};
use crow_store::SqliteStore;

use crate::compose::Composer;
use crate::config::{Config, LoadedConfig};
use crate::render;
use crate::sessions;

/// The provider crow will talk to and why it was chosen.
pub struct Selection {
    pub name: String,
    pub reason: String,
    pub settings: ProviderSettings,
}

/// Picks the provider: `provider` from config/env/flags, else `openai` when it has a key,
/// else `anthropic` when it has one, else a local Ollama. "Has a key" follows key resolution
/// (env var, then key file, then plain `api_key`), so a key given only in the config counts.
pub fn select_provider(loaded: &LoadedConfig) -> Result<Selection> {
    let config = &loaded.config;
    let keyed = |name: &str| {
        config
            .providers
            .get(name)
            .and_then(|pc| key_source(name, pc))
            .map(|reason| (name.to_owned(), reason))
    };
    let (name, reason) = match &config.provider {
        Some(name) => {
            let source = loaded
                .sources
                .get("provider")
                .map(|(_, s)| s.to_string())
                .unwrap_or_default();
            (name.clone(), format!("provider = \"{name}\" ({source})"))
        }
        None => keyed("openai")
            .or_else(|| keyed("anthropic"))
            .unwrap_or_else(|| {
                (
                    "ollama".to_owned(),
                    "no provider configured and no API key for openai or anthropic".to_owned(),
                )
            }),
    };
    let settings = provider_settings(config, &name, loaded.base_url_override.as_deref(), None)?;
    Ok(Selection {
        name,
        reason,
        settings,
    })
}

fn env_set(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.trim().is_empty())
}

/// Where provider `name`'s key would come from, in resolution order, as a reason for choosing
/// it; `None` without one. A key file counts even if it cannot be read: the user asked for
/// it, and using the provider reports the problem.
fn key_source(name: &str, pc: &crate::config::ProviderConfig) -> Option<String> {
    if let Some(var) = pc.api_key_env.as_deref().filter(|v| env_set(v)) {
        return Some(format!("{var} is set"));
    }
    if pc.api_key_file.is_some() {
        return Some(format!("providers.{name}.api_key_file is set"));
    }
    pc.api_key
        .as_deref()
        .is_some_and(|k| !k.trim().is_empty())
        .then(|| format!("providers.{name}.api_key is set"))
}

/// The settings of provider `name`; `model` overrides the configured model (an agent
/// definition's own model).
pub fn provider_settings(
    config: &Config,
    name: &str,
    base_url: Option<&str>,
    model: Option<&str>,
) -> Result<ProviderSettings> {
    let Some(pc) = config.providers.get(name) else {
        let known: Vec<_> = config.providers.keys().map(String::as_str).collect();
        bail!(
            "unknown provider '{name}': define [providers.{name}] in config.toml or use one of: {}",
            known.join(", ")
        );
    };
    let kind = pc.kind.ok_or_else(|| {
        anyhow!("providers.{name}.type is missing: set it to \"openai\" (any OpenAI-compatible server) or \"anthropic\"")
    })?;
    let base_url = base_url
        .map(str::to_owned)
        .or_else(|| pc.base_url.clone())
        .unwrap_or_else(|| match kind {
            ProviderKind::Anthropic => crow_providers::ANTHROPIC_DEFAULT_BASE_URL.to_owned(),
            _ => crow_providers::OPENAI_DEFAULT_BASE_URL.to_owned(),
        });
    let model = model.map(str::to_owned).or_else(|| config.model.clone()).or_else(|| pc.model.clone()).ok_or_else(|| {
        anyhow!("no model for provider '{name}': pass --model or set providers.{name}.model in config.toml")
    })?;
    let key = crow_providers::resolve_api_key(
        pc.api_key_env.as_deref(),
        pc.api_key_file.as_deref(),
        pc.api_key.as_deref(),
    )
    .with_context(|| format!("cannot read the API key of provider '{name}'"))?;
    let api_key = match key {
        Some((key, source)) => {
            if source == KeySource::Plaintext {
                tracing::warn!(
                    "providers.{name}.api_key is stored in plain text; prefer api_key_env or api_key_file"
                );
            }
            Some(key)
        }
        None => {
            let hosted =
                base_url.contains("api.openai.com") || base_url.contains("api.anthropic.com");
            if hosted {
                let var = pc
                    .api_key_env
                    .as_deref()
                    .unwrap_or("the provider's key variable");
                bail!(
                    "no API key for provider '{name}': set {var} or providers.{name}.api_key_file in ~/.config/crow/config.toml"
                );
            }
            None
        }
    };
    let mut retry = RetryPolicy::default();
    if let Some(n) = pc.max_retries {
        retry.max_attempts = n.saturating_add(1);
    }
    if let Some(secs) = pc.response_timeout_secs {
        retry.response_timeout = Duration::from_secs(secs);
    }
    if let Some(secs) = pc.idle_timeout_secs {
        retry.idle_timeout = Duration::from_secs(secs);
    }
    if let Some(secs) = pc.deadline_secs {
        retry.deadline = Duration::from_secs(secs);
    }
    Ok(ProviderSettings {
        kind,
        name: name.to_owned(),
        base_url,
        context_window: pc.models.get(&model).and_then(|m| m.context_window),
        images: pc.models.get(&model).and_then(|m| m.images),
        model,
        api_key,
        retry,
        headers: pc
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        max_tokens: pc.max_tokens,
        thinking_budget: pc.thinking_budget,
    })
}

/// The project root: the nearest ancestor holding `.git`, else the working directory.
pub fn find_project_root(cwd: &Path) -> (PathBuf, bool) {
    cwd.ancestors()
        .find(|dir| dir.join(".git").exists())
        .map_or_else(
            || (cwd.to_path_buf(), false),
            |dir| (dir.to_path_buf(), true),
        )
}

/// Refuses `/` and the home directory as a project root (no repository above them, so every
/// file of the machine or the user would be the project's) unless the user asked for it or
/// made it a crow project (a `.crow` directory).
pub fn check_project_root(root: &Path, in_git: bool, allowed: bool) -> Result<()> {
    if in_git {
        return Ok(());
    }
    let home = dirs::home_dir().and_then(|h| h.canonicalize().ok());
    let root_real = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let too_wide = root_real.parent().is_none() || home.as_deref() == Some(root_real.as_path());
    if too_wide && !allowed && !root.join(".crow").is_dir() {
        bail!(
            "{} is not in a git repository and would make the project root, so crow's tools could change any file below it; run crow in a project directory, or pass --allow-root-project",
            root.display()
        );
    }
    Ok(())
}

/// Everything one `crow run` needs.
pub struct RunSpec {
    pub prompt: String,
    pub composer: std::sync::Arc<Composer>,
    /// Composition (or agent) to run, e.g. `build`, `build-judge`; `None`: the resumed
    /// session's, else `build`.
    pub agent: Option<String>,
    /// Autonomy level overriding the composition's flow.
    pub level: Option<i8>,
    pub json: bool,
    pub store: Arc<SqliteStore>,
    /// The stored session this run continues, if any.
    pub resumed: Option<crow_core::SessionInfo>,
    /// Started in the background; their tools join the registry when ready.
    pub mcp_servers: Vec<crow_mcp::McpServerConfig>,
    /// End with how to continue the session (not for the demo, whose model is gone then).
    pub resume_hint: bool,
    /// The project root is a directory outside any git repository: say so.
    pub plain_root: bool,
}

/// Runs the prompt through a new or resumed session of the chosen crew, rendering as it
/// goes. Every history entry is written to the store as it is appended. Ctrl-C, SIGTERM,
/// SIGHUP and a closed stdout or stderr cancel the run (the partial answer is kept; see
/// [`crate::stop`]); a second signal exits at once.
pub async fn run_session(spec: RunSpec) -> Result<ExitCode> {
    let started = Instant::now();
    let store = Arc::clone(&spec.store);
    let resumed = spec.resumed;
    let composition = spec
        .agent
        .clone()
        .or_else(|| resumed.as_ref().map(|info| info.agent.clone()))
        .unwrap_or_else(|| "build".to_owned());
    if let Some(info) = &resumed {
        // The stored prompts, not fresh renderings: the date, the directory or a template
        // may have changed since, and the requests must continue byte for byte.
        spec.composer
            .set_stored_prompts(sessions::stored_prompts(&store, &info.id)?);
    }
    // A level given for the session (`--level`) stays with it when it is resumed.
    let level = spec
        .level
        .or_else(|| resumed.as_ref().and_then(|info| info.level));
    let crew = spec.composer.crew(&composition, level)?;
    spec.composer
        .set_history_sink(Arc::clone(&store) as Arc<dyn crow_core::HistorySink>);
    let resumed_run = resumed.is_some();
    let command = crate::session_cmd::parse(&spec.prompt);
    if command.is_some() && !resumed_run {
        bail!(
            "{} works on a stored session: add --continue, or --resume ID",
            spec.prompt.trim()
        );
    }
    let (info, mut session) = match resumed {
        Some(info) => sessions::resume(&store, &crew, &spec.composer, info)?,
        None => sessions::create(&store, &crew, &spec.composer, &spec.prompt)?,
    };
    if spec.level.is_some() {
        store
            .set_level(&info.id, spec.level)
            .map_err(sessions::store_error)?;
    }
    if spec.plain_root {
        // Said once the session exists, so a configuration or store error stays one line.
        errln!(
            "note: {} is not in a git repository; it is the project root",
            spec.composer.project_root.display()
        );
    }
    let mcp = crate::mcp::start(
        spec.mcp_servers,
        spec.composer.tools.clone(),
        &spec.composer.cwd,
        &crate::tool_options(&spec.composer.config),
    );
    if let Some(command) = command {
        let instructions = &spec.composer.instructions;
        return session_command(
            &command,
            &crew,
            &mut session,
            &store,
            &info.id,
            instructions,
        )
        .await;
    }
    session.primary.add_user_message(spec.prompt);

    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (render_tx, render_rx) = tokio::sync::mpsc::unbounded_channel();
    let recorder = tokio::spawn(sessions::record_usage(
        rx,
        render_tx,
        Arc::clone(&store),
        info.id.clone(),
        sessions::models(&crew),
    ));
    let show_agents = crew.coagent().is_some();
    let chosen = &spec.composer.default_provider;
    let session_line = render::SessionLine {
        kind: "session",
        id: info.id.clone(),
        project_root: spec.composer.project_root.clone(),
        cwd: session.primary.cwd.clone(),
        provider: chosen.name.clone(),
        model: chosen.model.clone(),
        base_url: chosen.base_url.clone(),
        agent: crew.name.clone(),
        resumed: resumed_run,
    };
    let renderer = if spec.json {
        tokio::spawn(render::json_lines(session_line, render_rx))
    } else {
        tokio::spawn(render::terminal(render_rx, show_agents))
    };
    // Ctrl-C, SIGTERM, SIGHUP or a closed stdout/stderr cancel the run alike (crate::stop).
    let signals = tokio::spawn(crate::stop::watch_signals());
    let cancel = crate::stop::token().child_token();
    let wait = spec
        .composer
        .config
        .tools
        .mcp_startup_wait_ms
        .unwrap_or(3000);
    tokio::select! {
        () = mcp.wait_started(Duration::from_millis(wait)) => {}
        // Stopped while waiting: the run starts and ends cancelled at once.
        () = cancel.cancelled() => {}
    }

    let outcome = crew.run(&mut session, &tx, cancel).await;
    drop(tx);
    let _ = recorder.await;
    mcp.finish().await;
    let totals = renderer.await.unwrap_or_default();
    sessions::finish(&store, &info.id, &outcome);
    // A new session whose first model call failed holds the prompt and the error alone:
    // nothing to continue, and `--continue` would pick it over the last useful one.
    let kept = resumed_run || outcome.is_ok() || !sessions::only_prompt(&session);
    if !kept && let Err(e) = store.delete_session(&info.id) {
        tracing::warn!("cannot delete the failed session: {e}");
    }
    // A second signal still exits at once until here; from now on crow is only closing.
    signals.abort();
    // Nobody reads the rest: end quietly (the session is saved).
    if crate::stop::exit_status() == Some(crate::stop::Cause::ReaderGone as u8) {
        return Ok(ExitCode::from(crate::stop::Cause::ReaderGone as u8));
    }
    if !spec.json {
        errln!("{}", render::usage_line(&totals, started.elapsed()));
    }
    if !spec.json && kept && spec.resume_hint {
        // --continue only finds it from the same project; --resume works from anywhere.
        let here = std::env::current_dir()
            .ok()
            .map(|d| find_project_root(&d).0);
        if here.as_deref() == Some(spec.composer.project_root.as_path()) {
            errln!(
                "session {} · continue it with crow run --continue \"…\"",
                info.id
            );
        } else {
            errln!(
                "session {} · continue it with crow run --resume {} \"…\"",
                info.id,
                info.id
            );
        }
    }
    let result = outcome.map_err(|e| anyhow!("{e}"))?;
    Ok(match result.stop {
        RunStop::Complete { .. } | RunStop::NeedsInput => ExitCode::SUCCESS,
        RunStop::Cancelled => ExitCode::from(
            crate::stop::exit_status().unwrap_or(crate::stop::Cause::Interrupt as u8),
        ),
        RunStop::MaxTurns => {
            errln!(
                "crow stopped at its bound ({} round{}, at most {} model calls each); raise --max-iterations or the composition's max_rounds",
                result.rounds,
                if result.rounds == 1 { "" } else { "s" },
                crew.primary().config.max_iterations
            );
            ExitCode::from(3)
        }
        RunStop::MaxTokens => {
            errln!("the model hit its output token limit; raise max_tokens in the provider config");
            ExitCode::from(4)
        }
        RunStop::Refusal => {
            errln!("the model refused to answer");
            ExitCode::from(5)
        }
        RunStop::DoomLoop { description } => {
            errln!(
                "crow stopped the model for repeating itself ({description}); rephrase the task, or set doom_loop_threshold (0 turns the check off)"
            );
            ExitCode::from(6)
        }
    })
}

/// `crow run --continue "/compact"` or `"/context"`: the session command, answered on stdout;
/// the summary call's usage is recorded like any model call.
async fn session_command(
    command: &crate::session_cmd::SessionCommand,
    crew: &crow_core::Crew,
    session: &mut crow_core::CrewSession,
    store: &Arc<SqliteStore>,
    id: &str,
    instructions: &crate::instructions::Instructions,
) -> Result<ExitCode> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (render_tx, mut render_rx) = tokio::sync::mpsc::unbounded_channel();
    let recorder = tokio::spawn(sessions::record_usage(
        rx,
        render_tx,
        Arc::clone(store),
        id.to_owned(),
        sessions::models(crew),
    ));
    let drain = tokio::spawn(async move { while render_rx.recv().await.is_some() {} });
    let cancel = crate::stop::token().child_token();
    let reply = crate::session_cmd::run(
        command,
        crew.primary(),
        session,
        Some(store.as_ref() as &dyn crow_core::SessionStore),
        &tx,
        &cancel,
        instructions,
    )
    .await;
    drop(tx);
    let _ = recorder.await;
    let _ = drain.await;
    if let Err(e) = store.set_status(id, crow_core::SessionStatus::Completed) {
        tracing::warn!("cannot record the session's status: {e}");
    }
    {
        use std::io::Write as _;
        let _ = writeln!(crate::stop::stdout(), "{reply}");
    }
    Ok(ExitCode::SUCCESS)
}
