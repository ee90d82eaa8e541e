//! The one place a session is assembled from configuration, for every front end that runs
//! one in this process's project (`crow run`, the interactive terminal): project root →
//! layered config (with the flags, a custom command's model, the resumed session's own
//! choices) → trust → store → provider → tools (language servers around the edit tools), MCP
//! servers, agent catalog, permission
//! policy → [`Composer`]. `crow serve` assembles each of its sessions here too
//! ([`assemble_in`], in the directory the client names). Front ends consume what this returns; they differ only in how they
//! show events and who answers permission questions. (`crow acp` assembles per editor
//! session from the same pieces in `wiring` and `compose`, since each session has its own
//! directory and gate.)

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use crow_core::{Mode, PermissionGate, SessionInfo};

use crate::compose::{Composer, ComposerParts};
use crate::config::{self, LoadedConfig, Overrides};
use crate::{mcp, memory, permissions, sessions, wiring};

/// What a front end asks for.
pub struct Request {
    pub flags: Overrides,
    /// A model named by a custom command (`provider/model` or a model of the provider).
    pub command_model: Option<String>,
    pub allow_root_project: bool,
    pub resume: Option<sessions::Resume>,
    /// `--mode`, else `[permissions] mode`, else `default_mode`.
    pub mode: Option<Mode>,
    pub default_mode: Mode,
    /// Who answers the questions the policy or a tool asks.
    pub gate: Arc<dyn PermissionGate>,
    /// Probe the machine's sandbox support now, on a thread of its own (a child process of
    /// a few milliseconds). Worth it where a person is about to type: the probe is done by
    /// the first command. `crow run` sends its prompt at once and many runs never start a
    /// command, so there the first command probes (see [`crow_tools::LazySandbox`]).
    pub prefetch_sandbox: bool,
}

/// An assembled session, ready for a front end to run turns on.
pub struct Assembled {
    pub loaded: LoadedConfig,
    pub composer: Arc<Composer>,
    /// Still opening: wait for it as late as possible ([`sessions::Opening::get`]).
    pub store: sessions::Opening,
    /// The stored session being continued, if any.
    pub resumed: Option<SessionInfo>,
    pub mcp_servers: Vec<crow_mcp::McpServerConfig>,
    /// The session's language servers, when any is available: shut them down at the end
    /// ([`crow_lsp::LspManager::shutdown`]).
    pub lsp: Option<Arc<crow_lsp::LspManager>>,
    pub root: PathBuf,
    /// The root is a plain directory, not a git repository.
    pub plain_root: bool,
    /// No provider was configured and crow fell back to a local Ollama at this URL: an
    /// error reaching it should say how to configure one.
    pub ollama_fallback: Option<String>,
    /// What changed because a resumed session keeps its own choices ("note: …" lines).
    pub notes: Vec<String>,
}

/// Assembles the session `request` asks for in the current directory.
pub fn assemble(request: Request) -> Result<Assembled> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    assemble_in(cwd, request)
}

/// [`assemble`] for a session working in `cwd`: `crow serve` runs many sessions, each in the
/// project its client names, through this same path (the project's config and trust rules
/// apply to each exactly as to `crow run` there).
pub fn assemble_in(cwd: PathBuf, request: Request) -> Result<Assembled> {
    let (root, in_git) = wiring::find_project_root(&cwd);
    wiring::check_project_root(&root, in_git, request.allow_root_project)?;
    let mut flags = request.flags;
    let mut loaded = config::load(&root, &flags)?;
    if let Some(spec) = request.command_model {
        match spec.split_once('/') {
            // `provider/model`; a --provider flag keeps its provider.
            Some((provider, model)) if loaded.config.providers.contains_key(provider) => {
                flags.provider.get_or_insert_with(|| provider.to_owned());
                flags.model = Some(model.to_owned());
            }
            _ => flags.model = Some(spec),
        }
        loaded = config::load(&root, &flags)?;
    }
    loaded.require_trust(&root)?;
    crate::telemetry::init(&loaded.config.telemetry);
    if request.prefetch_sandbox {
        wiring::prefetch_sandbox_support(&loaded.config);
    }
    // The store opens while the crew's parts are put together.
    let mut opening = sessions::Opening::start(&loaded.config)?;
    let resumed = match &request.resume {
        Some(resume) => Some(sessions::find_resumed(opening.get()?, resume, &root)?),
        None => None,
    };
    let mut notes = Vec::new();
    if let Some(info) = &resumed {
        // A continued session keeps its provider, model and endpoint unless a flag says
        // otherwise: its conversation never goes where the user did not send it.
        let (kept, changed) = sessions::keep_session_choices(&flags, info);
        notes = changed;
        loaded = config::load(&root, &kept)?;
        flags = kept;
    }
    let selection = wiring::select_provider(&loaded)?;
    // The URL actually requested (`--base-url` or OPENAI_BASE_URL may have moved it).
    let ollama_fallback = (selection.name == "ollama" && loaded.config.provider.is_none())
        .then(|| selection.settings.base_url.clone());
    let mcp_servers = mcp::servers(&loaded.config);
    let catalog = wiring::load_agents(&root);
    let options = wiring::tool_options(&loaded.config);
    let tools = crow_tools::builtin_tools(&options);
    let lsp = crate::lsp::attach(&tools, &loaded.config.lsp, &options.env);
    let hooks = crate::hooks::session_runner(&loaded, &root, &options)?;
    let max_iterations = loaded.config.max_iterations.unwrap_or(50);
    let mut policy = permissions::policy(&loaded, &root, request.mode, request.default_mode)?;
    if let Some(runner) = &hooks {
        policy
            .sensitive_dirs
            .extend(crate::hooks::project_scripts(runner.hook_set(), &root));
    }
    tracing::debug!(
        mode = policy.mode.name(),
        rules = policy.rules.len(),
        "permissions"
    );
    let composer = Composer::build(ComposerParts {
        config: loaded.config.clone(),
        provider: selection.settings,
        catalog,
        tools,
        cwd,
        max_iterations,
        gate: request.gate,
        policy: Arc::new(policy),
        trusted: loaded.trusted,
        client: None,
        effort: flags.effort,
        hooks,
    });
    // Once the store is open. The registry is shared and ordered by name: registering after
    // the composer (and the crew) are built changes nothing the model sees.
    let (tools, memory, project) = (
        composer.tools.clone(),
        loaded.config.memory.clone(),
        root.clone(),
    );
    let current = resumed.as_ref().map(|info| info.id.clone());
    opening.then(move |store| {
        memory::register_tool(&tools, store, &memory, &project, current.as_deref());
    });
    Ok(Assembled {
        loaded,
        composer,
        store: opening,
        resumed,
        mcp_servers,
        lsp,
        root,
        plain_root: !in_git,
        ollama_fallback,
        notes,
    })
}

/// The hint for an error reaching the built-in Ollama fallback.
pub fn explain_fallback(e: anyhow::Error, fallback: Option<&str>) -> anyhow::Error {
    match fallback {
        Some(url) => e.context(format!(
            "no provider and no API key are configured, so crow tried the built-in `ollama` \
             provider at {url}; set OPENAI_API_KEY or ANTHROPIC_API_KEY (or api_key_file under \
             [providers.openai]), pass --provider, or try `crow demo`"
        )),
        None => e,
    }
}
