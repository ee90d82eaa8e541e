//! Configuration: built-in defaults, then the project's `.mcp.json` (MCP servers only), then
//! the user file, then the project's `.crow/config.toml`, then environment variables, then
//! flags — later wins. Every layer is checked on its own so an unknown key or a bad value is
//! reported with the file it came from.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

/// The typed configuration. Every field is optional so that each layer can be partial.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Which `[providers.NAME]` to use.
    pub provider: Option<String>,
    /// Model to ask for (overrides the provider's default model).
    pub model: Option<String>,
    /// The composition (or agent) a new session runs when none is named (`--agent`, an
    /// editor's mode); unset, `build`.
    pub default_agent: Option<String>,
    /// Model calls allowed per turn.
    pub max_iterations: Option<u32>,
    /// Models that take a call the session's model failed after its retries (rate limit,
    /// overload, 5xx, timeout), tried in order: `["provider/model", …]` (`--fallback`). An
    /// agent with a model of its own uses its provider's `fallback` instead.
    #[serde(default)]
    pub fallback: Vec<String>,
    /// How long calls stay with a fallback that answered before the session's model is tried
    /// again, in seconds (default 60).
    pub fallback_cooldown_secs: Option<u64>,
    /// Repeats (same call, cycle, same error) that make a loop; 0 turns loop detection off.
    /// An agent definition's own `doom_loop_threshold` wins.
    pub doom_loop_threshold: Option<u32>,
    #[serde(default)]
    pub tools: ToolsConfig,
    /// The environment of commands crow starts (`bash`, stdio MCP servers).
    #[serde(default)]
    pub shell_environment: ShellEnvironmentConfig,
    #[serde(default)]
    pub store: StoreConfig,
    /// Snapshots of the working tree for change reports and `/undo`.
    #[serde(default)]
    pub snapshots: SnapshotsConfig,
    /// The OS sandbox of commands.
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// What runs without asking: the mode and allow / ask / deny rules.
    #[serde(default)]
    pub permissions: permissions::PermissionsConfig,
    /// Project instruction files (AGENTS.md, CLAUDE.md, ...).
    #[serde(default)]
    pub instructions: crate::instructions::InstructionsConfig,
    /// Learnings across sessions: the finish step, recall, `memory_search`.
    #[serde(default)]
    pub memory: memory::MemoryConfig,
    /// Models for side jobs (`small`).
    #[serde(default)]
    pub models: memory::ModelsConfig,
    /// A model that watches turns for loops, beside the deterministic detector.
    #[serde(default)]
    pub loop_detection: LoopDetectionConfig,
    /// OpenTelemetry traces to a collector (off unless an endpoint is set).
    #[serde(default)]
    pub telemetry: crate::telemetry::TelemetryConfig,
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// MCP servers whose tools crow offers (`[mcp_servers.NAME]`; also read from `.mcp.json`).
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, crow_mcp::McpServerEntry>,
    /// Other agents crow reaches over ACP (`[acp_agents.NAME]`): a whole session (`--acp
    /// NAME`) or a seat of a crew (`primary`/`coagent = "acp:NAME"`). User config, or a
    /// trusted project's: they are programs crow starts.
    #[serde(default)]
    pub acp_agents: BTreeMap<String, AcpAgentConfig>,
    /// Commands run at named points of a session (Claude Code's `hooks`: `[[hooks.PreToolUse]]`
    /// with `matcher` and `[[hooks.PreToolUse.hooks]]`). They add up across files
    /// (`crate::hooks::load` reads each layer's); a project's count only when it is trusted.
    #[serde(default)]
    #[allow(dead_code)]
    pub hooks: hooks::HooksConfig,
    /// Language servers whose diagnostics follow edits (`[lsp]`, `[lsp.NAME]`).
    #[serde(default)]
    pub lsp: lsp::LspConfig,
    /// Projects the user trusts (`[projects."/path"] trusted = true`; `crow trust`). Declared
    /// here so the user's file is validated; trust.rs reads it from the user's layer alone.
    #[serde(default)]
    #[allow(dead_code)]
    pub projects: BTreeMap<String, ProjectEntry>,
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectEntry {
    /// The project's own config may set where requests go, MCP servers and the store.
    #[allow(dead_code)]
    pub trusted: Option<bool>,
    /// What was trusted (`crow trust` writes it): one hash per guarded key and value; a key
    /// added or changed since needs trust again (read by `trust::trust_of`).
    #[allow(dead_code)]
    pub fingerprints: Option<Vec<String>>,
}

/// `[acp_agents.NAME]`: an agent that speaks ACP on stdin/stdout (`claude-agent-acp`,
/// `codex-acp`, `gemini --experimental-acp`, `crow acp`).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcpAgentConfig {
    /// The program (looked up on PATH).
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Set for the agent on top of crow's environment (its own keys, say).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The agent's session mode, set on each of its sessions: one where it asks before it
    /// acts (Claude Code's `default`) puts its questions to crow's policy.
    pub mode: Option<String>,
    /// One line for `crow agents list`.
    pub description: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    pub bash_timeout_secs: Option<u64>,
    pub max_output_bytes: Option<usize>,
    /// How long the first model call of a run waits for MCP servers still starting, so
    /// their tools are offered from the start (a tool list that changes mid-run breaks the
    /// provider's prompt cache).
    pub mcp_startup_wait_ms: Option<u64>,
    /// Background subagents (`task` with `background: true`) running at once; a call over
    /// the bound is refused. Default 4.
    pub max_background_tasks: Option<usize>,
    /// Offer `web_fetch` (HTTP(S) GET of a URL, HTML as markdown). Default true.
    pub web_fetch: Option<bool>,
    /// Let `web_fetch` reach loopback and private-network addresses (a local dev server);
    /// off by default so a prompt cannot read your router or cloud metadata. User config,
    /// or a trusted project's.
    pub web_fetch_allow_private: Option<bool>,
    /// `web_search`: offered only when a search API is configured here.
    pub web_search: Option<WebSearchConfig>,
    /// Offer `python`: one persistent Python 3 interpreter per session (variables and
    /// imports survive across calls), in the `bash` sandbox and environment, when a
    /// `python3` is found on PATH. Default false.
    pub python: Option<bool>,
}

/// `[tools.web_search]`: the search API queries go to, with your key. User config, or a
/// trusted project's.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebSearchConfig {
    /// "brave", "tavily" or "searxng".
    pub provider: String,
    /// The variable holding the key (default BRAVE_API_KEY / TAVILY_API_KEY; SearXNG needs none).
    pub api_key_env: Option<String>,
    /// The API's base URL: your SearXNG instance (required for it); the hosted APIs' own by
    /// default.
    pub base_url: Option<String>,
}

/// `[shell_environment]`: see [`crow_core::env`] for the order of the rules.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellEnvironmentConfig {
    /// "all" (default), "core" or "none".
    #[schemars(schema_with = "inherit_schema")]
    pub inherit: Option<crow_core::Inherit>,
    /// Name patterns (`*` wildcards, any case) passed even if they look secret.
    #[serde(default)]
    pub include: Vec<String>,
    /// Name patterns always removed.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Variables set for every command.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
}

/// `[sandbox]`: where commands may write and whether they reach the network.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// "workspace-write" (default), "read-only" or "off".
    #[schemars(schema_with = "sandbox_mode_schema")]
    pub mode: Option<crow_tools::SandboxMode>,
    /// Writable besides the project and the temp dirs (`~/` is the home directory; a
    /// relative path is relative to the project root).
    #[serde(default)]
    pub writable_roots: Vec<PathBuf>,
    /// Whether commands may use the network (default false).
    pub network: Option<bool>,
}

/// Key variables crow reads itself, hidden from commands even if a provider names another.
const CROW_KEY_VARS: [&str; 4] = [
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
];

/// The environment policy of commands: `[shell_environment]`, plus every variable that holds
/// a key crow uses (providers' `api_key_env`, MCP servers' `bearer_token_env_var`).
pub fn env_policy(config: &Config) -> crow_core::EnvPolicy {
    let shell = &config.shell_environment;
    let mut hidden: std::collections::BTreeSet<String> =
        CROW_KEY_VARS.iter().map(|v| (*v).to_owned()).collect();
    hidden.extend(
        config
            .providers
            .values()
            .filter_map(|p| p.api_key_env.clone()),
    );
    hidden.extend(
        config
            .mcp_servers
            .values()
            .filter_map(|s| s.bearer_token_env_var.clone()),
    );
    crow_core::EnvPolicy {
        inherit: shell.inherit.unwrap_or_default(),
        hidden,
        include: shell.include.clone(),
        exclude: shell.exclude.clone(),
        set: shell.set.clone(),
    }
}

/// Where sessions are kept. `CROW_HOME` (the directory of `crow.db`) wins over both paths.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The database file itself.
    pub path: Option<PathBuf>,
    /// Directory of `crow.db` (default `$XDG_DATA_HOME/crow`).
    pub data_dir: Option<PathBuf>,
    /// How long a write waits for another crow process's lock.
    pub busy_timeout_ms: Option<u64>,
    /// Size limit of the database in MiB; past it, writes fail as on a full disk.
    pub max_size_mb: Option<u64>,
}

/// `[snapshots]`: the working tree is snapshotted around the agent's changing calls (beside
/// the session database, in `snapshots/`), for what-changed reports and `/undo`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotsConfig {
    /// Take snapshots (default true).
    pub enabled: Option<bool>,
    /// Larger files are not stored, only noted (default 4 MiB).
    pub max_file_bytes: Option<u64>,
    /// Snapshots not seen for this many days are removed (default 7).
    pub max_age_days: Option<u64>,
}

/// `[loop_detection]`: the loop watcher (opt-in). `doom_loop_threshold` at the top sets the
/// deterministic detector.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoopDetectionConfig {
    /// The model that reads a digest of the recent calls and says whether the agent is
    /// stuck: "small" (`[models] small`, else the session's model), a model of the session's
    /// provider, or "provider/model". Unset: no watcher.
    pub watcher: Option<String>,
    /// Batches of tool calls between two looks (default 8).
    pub every: Option<u32>,
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// Wire API: "openai" (any OpenAI-compatible server), "anthropic", "gemini" (Google's
    /// Gemini API), "azure" (Azure OpenAI), "vertex" (Vertex AI), "bedrock" (Amazon
    /// Bedrock) or "ollama" (Ollama's native API, which sets the model's context per
    /// request).
    #[serde(rename = "type")]
    pub kind: Option<crow_providers::ProviderKind>,
    pub base_url: Option<String>,
    /// Default model of this provider.
    pub model: Option<String>,
    /// Models that take a call this provider's model failed after its retries (rate limit,
    /// overload, 5xx, timeout): `["provider/model", …]`.
    #[serde(default)]
    pub fallback: Vec<String>,
    /// Environment variable holding the key (checked first).
    pub api_key_env: Option<String>,
    /// File holding the key (checked second).
    pub api_key_file: Option<PathBuf>,
    /// The key itself (checked last; crow warns, prefer the other two).
    pub api_key: Option<String>,
    pub max_tokens: Option<u32>,
    pub thinking_budget: Option<u32>,
    /// Ollama: how long the model stays loaded after a request ("30m", "-1" for ever).
    pub keep_alive: Option<String>,
    /// How hard reasoning models think: "minimal", "low", "medium" or "high" (OpenAI-style
    /// `reasoning_effort`; Anthropic: a thinking budget; Ollama: `think`).
    pub reasoning_effort: Option<crow_providers::ReasoningEffort>,
    /// Send the session id as `prompt_cache_key` (default: only to api.openai.com).
    pub prompt_cache_key: Option<bool>,
    /// `type = "openai"`: "responses" (OpenAI's Responses API) or "chat" (Chat Completions);
    /// default: responses for api.openai.com, chat for every other server.
    pub wire_api: Option<crow_providers::OpenAiWire>,
    /// Responses API: "auto" (default), "concise", "detailed", or "none" for no summary of
    /// the model's reasoning.
    pub reasoning_summary: Option<String>,
    /// Azure OpenAI: the dated API's `api-version` (e.g. "2024-10-21"); unset, Azure's v1 API.
    pub api_version: Option<String>,
    /// Vertex AI: the Google Cloud project (default: GOOGLE_CLOUD_PROJECT).
    pub project: Option<String>,
    /// Vertex AI: the location ("us-east5", "europe-west1", "global"; default:
    /// GOOGLE_CLOUD_LOCATION, else "global").
    pub location: Option<String>,
    /// Vertex AI: "google" (Gemini models) or "anthropic" (Claude models); default: by the
    /// model's name.
    pub publisher: Option<crow_providers::VertexPublisher>,
    /// Amazon Bedrock: the AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, the profile's).
    pub region: Option<String>,
    /// Amazon Bedrock: the profile of ~/.aws/credentials and ~/.aws/config (default:
    /// AWS_PROFILE, else "default").
    pub profile: Option<String>,
    /// Vertex AI: a service-account key or gcloud user credentials file (over
    /// GOOGLE_APPLICATION_CREDENTIALS); Bedrock: a shared credentials file (over the AWS_*
    /// variables and ~/.aws/credentials).
    pub credentials_file: Option<PathBuf>,
    pub max_retries: Option<u32>,
    /// Longest wait for the server to start answering a request (default 60).
    pub response_timeout_secs: Option<u64>,
    /// Longest silence between two pieces of streamed data (default 60).
    pub idle_timeout_secs: Option<u64>,
    /// Longest one model call may stream (default 600).
    pub deadline_secs: Option<u64>,
    /// No retry starts once this long has passed since a call's first attempt (default 180).
    pub max_retry_secs: Option<u64>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub models: BTreeMap<String, ModelConfig>,
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub context_window: Option<u64>,
    /// This model's reasoning effort (over the provider's).
    pub reasoning_effort: Option<crow_providers::ReasoningEffort>,
    /// Whether the model reads images (default: crow's catalog of known vision models).
    pub images: Option<bool>,
}

/// `[sandbox] mode` as editors should offer it (crow-tools' type carries no schema).
fn sandbox_mode_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Where commands may write: the project and temp dirs, nowhere, or anywhere.",
        "enum": ["workspace-write", "read-only", "off"]
    })
}

/// `inherit` as editors should offer it (crow-core's type carries no schema).
fn inherit_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "How much of crow's environment commands inherit before the other rules.",
        "enum": ["all", "core", "none"]
    })
}

/// The configuration's JSON Schema (`crow config schema`), for editors that check config.toml.
pub fn json_schema() -> String {
    let schema = schemars::schema_for!(Config);
    serde_json::to_string_pretty(&schema).unwrap_or_default()
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    File(PathBuf),
    Env(String),
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(path) => write!(f, "{}", path.display()),
            Source::Env(var) => write!(f, "env {var}"),
            Source::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

/// Built-in defaults: the providers crow knows without any configuration.
const DEFAULTS: &str = r#"
max_iterations = 50
doom_loop_threshold = 3

[tools]
bash_timeout_secs = 120
max_output_bytes = 30720
mcp_startup_wait_ms = 3000

[shell_environment]
inherit = "all"

[sandbox]
mode = "workspace-write"
network = false
writable_roots = []

[snapshots]
enabled = true
max_file_bytes = 4194304
max_age_days = 7

[providers.openai]
type = "openai"
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"
model = "gpt-4.1"

[providers.anthropic]
type = "anthropic"
base_url = "https://api.anthropic.com"
api_key_env = "ANTHROPIC_API_KEY"
model = "claude-sonnet-4-5"

[providers.gemini]
type = "gemini"
base_url = "https://generativelanguage.googleapis.com/v1beta"
api_key_env = "GEMINI_API_KEY"
model = "gemini-2.5-pro"

[providers.ollama]
type = "ollama"
base_url = "http://localhost:11434"
model = "qwen2.5-coder"
"#;

/// Values given on the command line (the last layer).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub max_iterations: Option<u32>,
    pub base_url: Option<String>,
    /// Trust the project's own config for this run (`--trust-project`).
    pub trust_project: bool,
    /// `--effort`: how hard the session's models think (over agent definitions and config).
    pub effort: Option<crow_providers::ReasoningEffort>,
    /// `--fallback`: the session's fallback models (over the config's `fallback`).
    pub fallback: Option<Vec<String>>,
}

/// The merged configuration and, for `crow config show`, where each value came from.
#[derive(Debug)]
pub struct LoadedConfig {
    pub config: Config,
    pub sources: BTreeMap<String, (toml::Value, Source)>,
    /// `--base-url`, applied to whichever provider is selected.
    pub base_url_override: Option<String>,
    /// `--effort`, for front ends that build providers per session (`crow acp`).
    pub effort_override: Option<crow_providers::ReasoningEffort>,
    /// Keys of the project's own config left out because the project is not trusted, each
    /// with its file.
    pub untrusted: Vec<String>,
    /// Each layer's `[permissions]` section with its source, in layer order: the rules add
    /// up, never replace (`crate::permissions::rules` reads them).
    pub rule_layers: Vec<(toml::Table, Source)>,
    /// Each layer's `[hooks]` section with its source, in layer order (an untrusted
    /// project's is left out): hooks add up (`crate::hooks::load` reads them).
    pub hook_layers: Vec<(toml::Table, Source)>,
    /// The hooks of the project's `.claude/settings.json` and `settings.local.json`, as read
    /// when trust was decided (used only when `trusted`).
    pub claude_hooks: Vec<hooks::ClaudeHooksFile>,
    /// The project's own config counts in full (`crow trust`, `--trust-project`).
    pub trusted: bool,
    /// The project is in the trust list, but its guarded keys changed since it was trusted.
    pub trust_changed: bool,
}

impl LoadedConfig {
    /// Refuses to go on when the project's config sets what only a trusted project may:
    /// running without those keys would surprise the user, running with them could send
    /// their key or conversation somewhere they never chose.
    pub fn require_trust(&self, project_root: &Path) -> Result<()> {
        if self.untrusted.is_empty() {
            return Ok(());
        }
        if self.trust_changed {
            bail!(
                "this project's configuration changed since you trusted it: {} (MCP servers, hooks, endpoints, the sandbox or what commands see); \
                 look at them, then run `crow trust` in {} again to accept them (or pass --trust-project for one run)",
                self.untrusted.join(", "),
                project_root.display()
            );
        }
        bail!(
            "this project's configuration sets {}, which could send your API key or conversation elsewhere, run commands or loosen their sandbox or permissions; \
             if you trust {}, run `crow trust` there (or pass --trust-project for one run); otherwise remove those keys",
            self.untrusted.join(", "),
            project_root.display()
        )
    }
}

/// Where crow reads its user configuration: `$XDG_CONFIG_HOME/crow` (or `~/.config/crow`).
pub fn user_config_dir() -> Option<PathBuf> {
    std::env::var_os("CROW_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| dirs::config_dir().map(|d| d.join("crow")))
}

/// The user's config.toml (`crow config set`, `crow mcp add`, `crow trust` write it).
pub fn user_config_file() -> Result<PathBuf> {
    user_config_dir()
        .map(|d| d.join("config.toml"))
        .context("cannot find the user config directory (set CROW_CONFIG_DIR or HOME)")
}

/// Loads every layer for a project rooted at `project_root`.
/// Levenshtein distance, for "did you mean".
pub fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The candidate nearest `word`, when near enough to be what was meant (a typo, not another
/// word).
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .min_by_key(|c| distance(word, c))
        .filter(|c| distance(word, c) <= word.chars().count().max(3) / 2)
}

pub fn load(project_root: &Path, flags: &Overrides) -> Result<LoadedConfig> {
    let mut layers: Vec<(toml::Table, Source)> = Vec::new();
    // Read as a table only: the schema check is the tests' (`defaults_parse`), not every
    // start's.
    let defaults = toml::from_str(DEFAULTS).context("crow's built-in defaults do not parse")?;
    layers.push((defaults, Source::Default));
    let user = match user_config_dir() {
        Some(dir) => read_layer(&dir.join("config.toml"))?,
        None => None,
    };
    // The project's own layers: `.mcp.json` (servers only) and `.crow/config.toml`.
    let mcp_json = mcp_json_layer(project_root)?;
    let project_layer = read_layer(&project_root.join(".crow").join("config.toml"))?;
    // Claude Code's project hooks run programs too: part of what trust is given to.
    let claude_hooks = hooks::claude_project_hooks(project_root)?;
    let claude_layer = hooks::fingerprint_layer(&claude_hooks);
    let trust = crate::trust::trust_of(user.as_ref().map(|(table, _)| table), project_root);
    let current = crate::trust::fingerprint(
        mcp_json
            .iter()
            .chain(&project_layer)
            .map(|(t, _)| t)
            .chain(&claude_layer),
    );
    let trust_changed =
        !flags.trust_project && trust != crate::trust::Trust::No && !trust.covers(&current);
    let trusted = flags.trust_project || trust.covers(&current);
    let user_mode = user
        .as_ref()
        .and_then(|(table, _)| table.get("permissions")?.get("mode")?.as_str())
        .and_then(crow_core::Mode::parse);
    // The project's layers: guarded keys count only in a trusted project.
    let mut untrusted = Vec::new();
    let mut guard = |(mut table, source): (toml::Table, Source)| {
        if trusted {
            table.remove("projects");
        } else {
            let mut removed = crate::trust::strip_guarded(&mut table);
            removed.extend(crate::trust::strip_loosening_permissions(
                &mut table, user_mode,
            ));
            untrusted.extend(removed.into_iter().map(|key| format!("{key} ({source})")));
        }
        (table, source)
    };
    // The project's .mcp.json ranks below crow's own files, which can override its entries.
    if let Some(layer) = mcp_json {
        layers.push(guard(layer));
    }
    layers.extend(user);
    if let Some(layer) = project_layer {
        layers.push(guard(layer));
    }
    for (var, key) in [("CROW_PROVIDER", "provider"), ("CROW_MODEL", "model")] {
        if let Some(value) = env_nonempty(var) {
            layers.push((
                single(key, toml::Value::String(value)),
                Source::Env(var.into()),
            ));
        }
    }
    // The user's own environment (never a project's) may pick the sandbox's mode.
    if let Some(value) = env_nonempty("CROW_SANDBOX_MODE") {
        layers.push((
            single("sandbox", toml::Value::Table(single("mode", value.into()))),
            Source::Env("CROW_SANDBOX_MODE".into()),
        ));
    }
    if let Some(value) = env_nonempty("CROW_MAX_ITERATIONS") {
        let n: i64 = value
            .parse()
            .with_context(|| format!("CROW_MAX_ITERATIONS must be a number, got '{value}'"))?;
        layers.push((
            single("max_iterations", n.into()),
            Source::Env("CROW_MAX_ITERATIONS".into()),
        ));
    }
    if let Some(url) = env_nonempty("OPENAI_BASE_URL") {
        let mut openai = toml::Table::new();
        openai.insert("base_url".into(), toml::Value::String(url));
        let mut providers = toml::Table::new();
        providers.insert("openai".into(), toml::Value::Table(openai));
        layers.push((
            single("providers", toml::Value::Table(providers)),
            Source::Env("OPENAI_BASE_URL".into()),
        ));
    }
    if let Some(p) = &flags.provider {
        layers.push((
            single("provider", p.clone().into()),
            Source::Flag("--provider".into()),
        ));
    }
    if let Some(m) = &flags.model {
        layers.push((
            single("model", m.clone().into()),
            Source::Flag("--model".into()),
        ));
    }
    if let Some(models) = &flags.fallback {
        let list = models.iter().cloned().map(toml::Value::String).collect();
        layers.push((
            single("fallback", toml::Value::Array(list)),
            Source::Flag("--fallback".into()),
        ));
    }
    if let Some(n) = flags.max_iterations {
        layers.push((
            single("max_iterations", i64::from(n).into()),
            Source::Flag("--max-iterations".into()),
        ));
    }

    let mut merged = toml::Table::new();
    let mut sources = BTreeMap::new();
    let mut rule_layers = Vec::new();
    let mut hook_layers = Vec::new();
    for (table, source) in layers {
        if let Some(section) = table.get("permissions") {
            rule_layers.push((single("permissions", section.clone()), source.clone()));
        }
        if let Some(section) = table.get("hooks") {
            hook_layers.push((single("hooks", section.clone()), source.clone()));
        }
        flatten("", &table, &source, &mut sources);
        deep_merge(&mut merged, table);
    }
    let config: Config = toml::Value::Table(merged)
        .try_into()
        .context("the merged configuration is invalid")?;
    Ok(LoadedConfig {
        config,
        sources,
        base_url_override: flags.base_url.clone(),
        effort_override: flags.effort,
        untrusted,
        rule_layers,
        hook_layers,
        claude_hooks,
        trusted,
        trust_changed,
    })
}

/// Reads `<project>/.mcp.json` (Claude Code's `mcpServers`) as a config layer. Entries crow
/// cannot use (e.g. `sse`) are skipped with a warning.
pub fn mcp_json_layer(project_root: &Path) -> Result<Option<(toml::Table, Source)>> {
    let path = project_root.join(".mcp.json");
    let Some(text) = files::read_bounded(&path)? else {
        return Ok(None);
    };
    let entries = crow_mcp::parse_mcp_json(&text, &path.display().to_string())?;
    let mut servers = toml::Table::new();
    for (name, entry) in entries {
        match entry {
            Ok(entry) => {
                let value = toml::Value::try_from(&entry)
                    .with_context(|| format!("{}: server '{name}'", path.display()))?;
                servers.insert(name, value);
            }
            Err(e) => tracing::warn!("{e}; skipped"),
        }
    }
    if servers.is_empty() {
        return Ok(None);
    }
    let mut layer = toml::Table::new();
    layer.insert("mcp_servers".into(), toml::Value::Table(servers));
    Ok(Some((layer, Source::File(path))))
}

/// One config file as a layer; `None` when it does not exist.
/// The fingerprints of the project's guarded keys as they are now (what `crow trust` records).
pub fn project_fingerprint(project_root: &Path) -> Result<Vec<String>> {
    let mcp_json = mcp_json_layer(project_root)?;
    let project_layer = read_layer(&project_root.join(".crow").join("config.toml"))?;
    let claude_layer = hooks::fingerprint_layer(&hooks::claude_project_hooks(project_root)?);
    Ok(crate::trust::fingerprint(
        mcp_json
            .iter()
            .chain(&project_layer)
            .map(|(t, _)| t)
            .chain(&claude_layer),
    ))
}

fn env_nonempty(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

fn single(key: &str, value: toml::Value) -> toml::Table {
    let mut t = toml::Table::new();
    t.insert(key.into(), value);
    t
}

fn deep_merge(into: &mut toml::Table, from: toml::Table) {
    for (key, value) in from {
        match (into.get_mut(&key), value) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => deep_merge(a, b),
            (_, value) => {
                into.insert(key, value);
            }
        }
    }
}

fn flatten(
    prefix: &str,
    table: &toml::Table,
    source: &Source,
    out: &mut BTreeMap<String, (toml::Value, Source)>,
) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) if !inner.is_empty() => flatten(&path, inner, source, out),
            _ => {
                out.insert(path, (value.clone(), source.clone()));
            }
        }
    }
}

pub use shown::shown;

mod files;
pub mod hooks;
pub mod lsp;
pub mod memory;
pub mod permissions;
#[cfg(test)]
mod proptests;
mod shown;

pub use files::{open_private, read_or_empty, write_config_file};
pub use files::{parse_layer, read_bounded, read_layer};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse() {
        let t = parse_layer(DEFAULTS, &Source::Default).unwrap();
        assert!(t.contains_key("providers"));
    }

    #[test]
    fn unknown_keys_name_the_file() {
        let err =
            parse_layer("modle = \"x\"\n", &Source::File("/p/config.toml".into())).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/p/config.toml"), "{msg}");
        assert!(msg.contains("modle"), "{msg}");
        assert!(!msg.contains('\n'), "one line: {msg}");
    }

    #[test]
    fn a_syntax_error_never_quotes_a_secret() {
        let source = Source::File("/p/config.toml".into());
        for text in [
            "[providers.openai]\nmodel = \"x\"\napi_key = \"sk-live-SECRET123\n",
            "[providers.openai]\napi_key = sk-live-SECRET123\n",
            "[providers.openai]\napi_key = \"sk-live-SECRET123\" x\n",
            "[providers.openai]\napi_key = 12345678\n",
            "[providers.x]\nheaders = { Authorization = \"Bearer SECRET123\" \n",
            "[shell_environment]\nset = { GH_TOKEN = SECRET123 }\n",
        ] {
            let msg = parse_layer(text, &source).unwrap_err().to_string();
            assert!(
                !msg.contains("SECRET123") && !msg.contains("12345678"),
                "{msg}"
            );
            assert!(
                msg.contains("/p/config.toml") && msg.contains("line "),
                "{msg}"
            );
            assert!(!msg.contains('\n'), "one line: {msg}");
        }
        // Other lines are still quoted: they help find the mistake.
        let msg = parse_layer("model = gpt\n", &source)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("line 1") && msg.contains("`model = gpt`"),
            "{msg}"
        );
        let msg = parse_layer("[providers.x]\nmax_tokens = \"x\"\n", &source).unwrap_err();
        assert!(msg.to_string().contains("`max_tokens = \"x\"`"), "{msg}");
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = parse_layer("[providers.x]\ntype = \"bard\"\n", &Source::Default).unwrap_err();
        assert!(err.to_string().contains("bard"), "{err}");
        // Gemini is a wire API of its own.
        assert!(parse_layer("[providers.x]\ntype = \"gemini\"\n", &Source::Default).is_ok());
        let err = parse_layer("max_iterations = \"ten\"\n", &Source::Default).unwrap_err();
        assert!(err.to_string().contains("max_iterations"), "{err}");
    }

    #[test]
    fn later_layers_win_and_sources_are_kept() {
        let mut merged = parse_layer(DEFAULTS, &Source::Default).unwrap();
        let user = parse_layer(
            "[providers.openai]\nmodel = \"gpt-5\"\napi_key = \"sk-secret\"\n",
            &Source::Default,
        )
        .unwrap();
        deep_merge(&mut merged, user);
        let cfg: Config = toml::Value::Table(merged).try_into().unwrap();
        let openai = &cfg.providers["openai"];
        assert_eq!(openai.model.as_deref(), Some("gpt-5"));
        assert_eq!(
            openai.base_url.as_deref(),
            Some("https://api.openai.com/v1")
        );
    }
}
