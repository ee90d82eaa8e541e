//! The pieces every front end assembles a session from, below all of them: where the
//! project is, which provider and settings a session talks to, the tools' options (the
//! sandbox, the environment), the agent catalog and the store's location. Imports point
//! down only: this module uses config and the libraries, never a front end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use crow_providers::{KeySource, ProviderSettings, RetryPolicy};

use crate::agents;
use crate::config::{self, Config, LoadedConfig};

mod keys;

/// The provider crow will talk to and why it was chosen.
pub struct Selection {
    pub name: String,
    pub reason: String,
    pub settings: ProviderSettings,
}

/// Picks the provider: `provider` from config/env/flags, else `openai` when it has a key,
/// else `anthropic`, else `gemini` when it has one, else a local Ollama. "Has a key" follows key resolution
/// (env var, then the OS keyring, then key file, then plain `api_key`), so a key given only in
/// the config counts.
pub fn select_provider(loaded: &LoadedConfig) -> Result<Selection> {
    let config = &loaded.config;
    let keyed = |name: &str| {
        config
            .providers
            .get(name)
            .and_then(|pc| keys::key_reason(name, pc, crate::keyring::lookup()))
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
        // A server's address without a provider: an OpenAI-compatible server (vLLM,
        // llama.cpp, LM Studio, LiteLLM), which needs no key when it is local.
        None if loaded.base_url_override.is_some() => (
            "openai".to_owned(),
            "--base-url without a provider: an OpenAI-compatible server".to_owned(),
        ),
        None if from_env(loaded, "providers.openai.base_url") => (
            "openai".to_owned(),
            "OPENAI_BASE_URL is set: an OpenAI-compatible server".to_owned(),
        ),
        None => keyed("openai")
            .or_else(|| keyed("anthropic"))
            .or_else(|| keyed("gemini"))
            .unwrap_or_else(|| {
                (
                    "ollama".to_owned(),
                    "no provider configured and no API key for openai, anthropic or gemini"
                        .to_owned(),
                )
            }),
    };
    let settings = provider_settings(config, &name, loaded.base_url_override.as_deref(), None)
        .map_err(|e| {
            // Claude Code's `-p` is print mode: `crow -p hello` meant a prompt.
            let by_flag = matches!(
                loaded.sources.get("provider"),
                Some((_, crate::config::Source::Flag(_)))
            );
            // A name close to a provider's is a typo of it: the did-you-mean is the answer.
            let typo = crate::config::closest(&name, config.providers.keys().map(String::as_str))
                .is_some();
            if by_flag && !typo && provider_problem(config, &name).is_some() {
                anyhow!(
                    "{e:#}; -p is --provider in crow (to run a prompt once: crow run '{}')",
                    name.replace('\'', r"'\''")
                )
            } else {
                e
            }
        })?;
    Ok(Selection {
        name,
        reason,
        settings,
    })
}

/// Whether config key `key` got its value from the environment (rather than a file or flag).
fn from_env(loaded: &LoadedConfig, key: &str) -> bool {
    loaded
        .sources
        .get(key)
        .is_some_and(|(_, source)| matches!(source, crate::config::Source::Env(_)))
}

/// Whether `var` is the key variable crow's own config gives built-in provider `name`.
fn default_key_env(name: &str, var: &str) -> bool {
    matches!(
        (name, var),
        ("openai", "OPENAI_API_KEY")
            | ("anthropic", "ANTHROPIC_API_KEY")
            | ("gemini", "GEMINI_API_KEY")
            | (_, "AZURE_OPENAI_API_KEY")
    )
}

/// What is wrong with provider name `name` in `config`: `None` when `[providers.NAME]` exists,
/// else the message naming the closest one and the others.
pub fn provider_problem(config: &Config, name: &str) -> Option<String> {
    (!config.providers.contains_key(name)).then(|| unknown_provider(config, name))
}

fn unknown_provider(config: &Config, name: &str) -> String {
    let known: Vec<_> = config.providers.keys().map(String::as_str).collect();
    let guess = crate::config::closest(name, known.iter().copied())
        .map(|best| format!(" (did you mean `{best}`?)"))
        .unwrap_or_default();
    format!(
        "unknown provider '{name}'{guess}: define [providers.{name}] in config.toml or use one of: {}",
        known.join(", ")
    )
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
        bail!("{}", unknown_provider(config, name));
    };
    let kind = pc.kind.ok_or_else(|| {
        anyhow!("providers.{name}.type is missing: set it to \"openai\" (any OpenAI-compatible server), \"anthropic\", \"gemini\", \"azure\", \"vertex\", \"bedrock\" or \"ollama\"")
    })?;
    let azure = kind == crow_providers::ProviderKind::Azure;
    let base_url = base_url
        .map(str::to_owned)
        .or_else(|| pc.base_url.clone())
        .or_else(|| {
            azure
                .then(|| std::env::var("AZURE_OPENAI_ENDPOINT").ok())
                .flatten()
                .filter(|v| !v.trim().is_empty())
        })
        .unwrap_or_else(|| kind.default_base_url().to_owned());
    if azure && base_url.is_empty() {
        bail!(
            "provider '{name}' is Azure OpenAI: set providers.{name}.base_url to the resource's endpoint (https://RESOURCE.openai.azure.com) or AZURE_OPENAI_ENDPOINT"
        );
    }
    let model = model.map(str::to_owned).or_else(|| config.model.clone()).or_else(|| pc.model.clone()).ok_or_else(|| {
        anyhow!("no model for provider '{name}': pass --model or set providers.{name}.model in config.toml")
    })?;
    let key = keys::provider_key(name, pc, crate::keyring::lookup())?;
    let api_key = match key {
        Some((key, source)) => {
            if source == KeySource::Plaintext {
                tracing::warn!(
                    "providers.{name}.api_key is stored in plain text; prefer api_key_env, the keyring (crow config set-key {name}) or api_key_file"
                );
            }
            Some(key)
        }
        None => {
            // A variable the user named but did not set is a mistake to say now: a proxy
            // answers the keyless request with a 500, retried. The built-in providers'
            // default variables stay optional, so a local server with no key works.
            if let Some(var) = pc.api_key_env.as_deref()
                && !default_key_env(name, var)
            {
                bail!(
                    "{var} is not set (or empty): provider '{name}' reads its API key from it (providers.{name}.api_key_env); set it, or remove api_key_env if the server needs no key"
                );
            }
            let hosted = azure
                || base_url.contains("api.openai.com")
                || base_url.contains("api.anthropic.com")
                || base_url.contains("generativelanguage.googleapis.com");
            if hosted {
                let vars = keys::key_vars(pc);
                let var = vars
                    .first()
                    .copied()
                    .unwrap_or("the provider's key variable");
                bail!(
                    "no API key for provider '{name}': set {var}, store one with `crow config set-key {name}`, or set providers.{name}.api_key_file in ~/.config/crow/config.toml"
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
    if let Some(secs) = pc.max_retry_secs {
        retry.max_retry_time = Duration::from_secs(secs);
    }
    let model_name = model.clone();
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
        keep_alive: pc.keep_alive.clone(),
        reasoning_effort: pc
            .models
            .get(&model_name)
            .and_then(|m| m.reasoning_effort)
            .or(pc.reasoning_effort),
        prompt_cache_key: pc.prompt_cache_key,
        wire_api: pc.wire_api,
        reasoning_summary: pc.reasoning_summary.clone(),
        api_version: pc.api_version.clone(),
        cloud: cloud_settings(pc),
    })
}

/// Vertex AI's project and location, Bedrock's region and profile: the config, else the
/// variables Google's tools read (Bedrock's region is resolved by the provider, which also
/// reads the profile's).
fn cloud_settings(pc: &crate::config::ProviderConfig) -> crow_providers::CloudSettings {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let vertex = pc.kind == Some(crow_providers::ProviderKind::Vertex);
    crow_providers::CloudSettings {
        project: pc.project.clone().or_else(|| {
            vertex
                .then(|| var(crow_providers::vertex::GOOGLE_CLOUD_PROJECT_ENV))
                .flatten()
        }),
        location: pc.location.clone().or_else(|| {
            vertex
                .then(|| var(crow_providers::vertex::GOOGLE_CLOUD_LOCATION_ENV))
                .flatten()
        }),
        publisher: pc.publisher,
        region: pc.region.clone(),
        profile: pc.profile.clone(),
        credentials_file: pc.credentials_file.clone(),
    }
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

/// The database file: `CROW_HOME`, else `[store] path`, else `[store] data_dir`, else XDG.
pub fn db_path(config: &Config) -> Result<PathBuf> {
    db_location(config).map(|(path, _)| path)
}

/// [`db_path`] and which setting chose it, for `crow config show`.
pub fn db_location(config: &Config) -> Result<(PathBuf, &'static str)> {
    if std::env::var_os("CROW_HOME").is_some_and(|v| !v.is_empty()) {
        let path = crow_store::default_path().context("CROW_HOME is not a usable path")?;
        return Ok((path, "CROW_HOME is set"));
    }
    if let Some(path) = &config.store.path {
        return Ok((expand_home(path), "[store] path"));
    }
    if let Some(dir) = &config.store.data_dir {
        return Ok((
            expand_home(dir).join(crow_store::DB_FILE),
            "[store] data_dir",
        ));
    }
    let path = crow_store::default_path()
        .context("cannot find a data directory for the session database: set CROW_HOME")?;
    Ok((path, "the default: $XDG_DATA_HOME/crow"))
}

fn expand_home(path: &Path) -> PathBuf {
    match (path.strip_prefix("~"), dirs::home_dir()) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => path.to_path_buf(),
    }
}

/// Agent definitions for a project; broken files are warned about, the rest load.
pub fn load_agents(project_root: &std::path::Path) -> agents::Catalog {
    let catalog = agents::load_catalog(
        config::user_config_dir().as_deref(),
        &project_root.join(".crow"),
    );
    report_agent_problems(&catalog);
    catalog
}

/// Definitions that did not load, or loaded without something: once, in one format.
pub fn report_agent_problems(catalog: &agents::Catalog) {
    for problem in &catalog.problems {
        errln!("warning: skipped agent definition {problem}");
    }
    for warning in &catalog.warnings {
        errln!("warning: {warning}");
    }
}

pub fn tool_options(config: &config::Config) -> crow_tools::ToolOptions {
    let mut options = crow_tools::ToolOptions::default();
    if let Some(secs) = config.tools.bash_timeout_secs {
        options.bash_timeout = Duration::from_secs(secs);
    }
    if let Some(bytes) = config.tools.max_output_bytes {
        options.max_output_bytes = bytes;
    }
    options.env = config::env_policy(config);
    options.sandbox = sandbox_spec(config);
    options.web_search = config.tools.web_search.as_ref().and_then(web_search);
    options.python = config.tools.python == Some(true);
    options.web_fetch =
        (config.tools.web_fetch != Some(false)).then(|| crow_tools::WebFetchOptions {
            allow_private: config.tools.web_fetch_allow_private == Some(true),
            ..crow_tools::WebFetchOptions::default()
        });
    options
}

/// The launcher (the small `crow-sandbox` beside crow when it is there, else crow itself)
/// and the machine's sandbox support, probed once (a child process: `LAUNCHER --probe`).
fn sandbox_support() -> &'static (crow_tools::sandbox::Launcher, crow_tools::SandboxSupport) {
    use crow_tools::SandboxSupport;
    use crow_tools::sandbox::Launcher;
    static SUPPORT: std::sync::OnceLock<(Launcher, SandboxSupport)> = std::sync::OnceLock::new();
    SUPPORT.get_or_init(|| match std::env::current_exe() {
        Ok(exe) => crow_tools::sandbox::choose_launcher(&exe),
        Err(e) => (
            Launcher::at("crow"),
            SandboxSupport::none(format!("cannot find crow's own executable: {e}")),
        ),
    })
}

/// Starts the sandbox probe on a thread of its own, so that it is done by the time a
/// person has typed a prompt and the model asked for a command; the first `sandbox_spec`
/// waits for it.
pub fn prefetch_sandbox_support(config: &config::Config) {
    if config.sandbox.mode.unwrap_or_default() != crow_tools::SandboxMode::Off {
        std::thread::spawn(|| {
            sandbox_support();
        });
    }
}

/// `[tools.web_search]` as the tool's options; a problem (unknown provider, missing key or
/// URL) is said once and leaves the tool out.
fn web_search(section: &config::WebSearchConfig) -> Option<crow_tools::WebSearchOptions> {
    use crow_tools::SearchBackend;
    static WARNED: std::sync::Once = std::sync::Once::new();
    let warn = |text: String| WARNED.call_once(|| tracing::warn!("web_search is off: {text}"));
    let Some(backend) = SearchBackend::parse(&section.provider) else {
        warn(format!(
            "tools.web_search.provider \"{}\" is none of brave, tavily, searxng",
            section.provider
        ));
        return None;
    };
    let Some(base_url) = section
        .base_url
        .clone()
        .or_else(|| backend.default_base_url().map(str::to_owned))
    else {
        warn("tools.web_search.base_url must name your SearXNG instance".into());
        return None;
    };
    let var = section.api_key_env.clone().or(match backend {
        SearchBackend::Brave => Some("BRAVE_API_KEY".to_owned()),
        SearchBackend::Tavily => Some("TAVILY_API_KEY".to_owned()),
        SearchBackend::Searxng => None,
    });
    let api_key = var
        .as_deref()
        .and_then(|v| std::env::var(v).ok())
        .filter(|k| !k.trim().is_empty());
    if backend != SearchBackend::Searxng && api_key.is_none() {
        warn(format!(
            "{} is not set (the key of the {} search API)",
            var.as_deref().unwrap_or("its key variable"),
            backend.name()
        ));
        return None;
    }
    Some(crow_tools::WebSearchOptions {
        backend,
        base_url,
        api_key,
    })
}

/// The sandbox of commands from `[sandbox]`, or `None` for `mode = "off"`. The machine is
/// probed (and what is missing said, once) when the first command needs the spec, not here:
/// a session's first request never waits for the probe.
pub fn sandbox_spec(config: &config::Config) -> Option<crow_tools::LazySandbox> {
    use crow_tools::SandboxMode;
    let section = &config.sandbox;
    let mode = section.mode.unwrap_or_default();
    if mode == SandboxMode::Off {
        return None;
    }
    let home = dirs::home_dir();
    let writable_roots: Vec<std::path::PathBuf> = section
        .writable_roots
        .iter()
        .map(|p| match (p.strip_prefix("~"), &home) {
            (Ok(rest), Some(home)) => home.join(rest),
            _ => p.clone(),
        })
        .collect();
    // crow's own files: a command must not rewrite its config, trust list or sessions.
    let mut protected: Vec<std::path::PathBuf> = config::user_config_dir().into_iter().collect();
    if let Some(dir) = db_path(config)
        .ok()
        .and_then(|db| db.parent().map(std::path::Path::to_path_buf))
    {
        protected.push(dir);
    }
    let network = section.network.unwrap_or(false);
    Some(crow_tools::LazySandbox::new(move || {
        static WARNED: std::sync::Once = std::sync::Once::new();
        let (launcher, support) = sandbox_support();
        let spec = crow_tools::SandboxSpec {
            launcher: launcher.clone(),
            mode,
            writable_roots: writable_roots.clone(),
            protected: protected.clone(),
            network,
            support: support.clone(),
        };
        WARNED.call_once(|| {
            if let Some(reason) = spec.unavailable() {
                tracing::warn!(
                    "the sandbox is unavailable on this machine: {reason}; each command asks \
                     before it runs unconfined (crow run: refused unless --approve; set \
                     [sandbox] mode = \"off\" to run them unconfined without asking)"
                );
            }
            for note in spec.weaker() {
                tracing::warn!("sandbox: {note}");
            }
        });
        spec
    }))
}
