//! `crow acp`: the binary's side of crow-acp. Sessions are wired exactly like `crow run`
//! (layered config of the session's project → provider → tools → [`Composer`] → crew); the
//! session modes are the compositions (build, build-judge, plan, ...), the models those of the
//! configured providers.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use async_trait::async_trait;
use crow_acp::{
    AgentFactory, Choice, ModeInfo, ModelInfo, RunnerError, SessionRunner, SessionSpec, TurnInput,
    TurnOutcome,
};
use crow_core::{CrewSession, EventSender, Session, ToolKind, ToolRegistry};
use crow_providers::ProviderSettings;
use tokio_util::sync::CancellationToken;

use crate::app::{find_project_root, provider_settings, select_provider};
use crate::compose::{Composer, with_subagents};
use crate::config::{self, LoadedConfig, Overrides};

/// The mode a session starts in when the catalog has it.
const DEFAULT_MODE: &str = "build";

/// Serves ACP on stdio until the client closes stdin.
pub async fn serve(overrides: Overrides) -> Result<()> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let factory = CrowFactory::new(&cwd, overrides)?;
    crow_acp::serve_stdio(Arc::new(factory))
        .await
        .map_err(|e| anyhow::anyhow!("ACP connection failed: {e}"))
}

/// Models of every provider crow can use: the selected one, and any other whose key is set.
fn models(loaded: &LoadedConfig) -> Result<(Vec<ModelInfo>, String)> {
    let selection = select_provider(loaded)?;
    let default = model_id(&selection.name, &selection.settings.model);
    let mut models = Vec::new();
    for (name, pc) in &loaded.config.providers {
        let selected = *name == selection.name;
        let Ok(settings) = provider_settings(&loaded.config, name, None, None) else {
            continue;
        };
        if !selected && settings.api_key.is_none() {
            continue;
        }
        let mut names: Vec<String> = pc.model.iter().cloned().collect();
        names.extend(pc.models.keys().cloned());
        if selected {
            names.insert(0, selection.settings.model.clone());
        }
        for model in names {
            let id = model_id(name, &model);
            if models.iter().any(|m: &ModelInfo| m.choice.id == id) {
                continue;
            }
            let window = ProviderSettings {
                model: model.clone(),
                context_window: pc.models.get(&model).and_then(|m| m.context_window),
                ..settings.clone()
            }
            .resolved_context_window();
            models.push(ModelInfo {
                choice: Choice::new(id, format!("{model} ({name})")),
                context_window: window,
            });
        }
    }
    Ok((models, default))
}

fn model_id(provider: &str, model: &str) -> String {
    format!("{provider}/{model}")
}

/// The compositions, the default one first.
fn modes(root: &Path) -> Vec<ModeInfo> {
    let catalog = crate::load_agents(root);
    let mut modes: Vec<ModeInfo> = catalog
        .compositions
        .values()
        .map(|c| ModeInfo {
            choice: Choice::new(c.name.clone(), c.name.clone()).describe(c.description.clone()),
            auto_approve: false,
        })
        .collect();
    if let Some(i) = modes.iter().position(|m| m.choice.id == DEFAULT_MODE) {
        let default = modes.remove(i);
        modes.insert(0, default);
    }
    modes
}

/// Creates crow sessions for crow-acp.
pub struct CrowFactory {
    overrides: Overrides,
    modes: Vec<ModeInfo>,
    models: (Vec<ModelInfo>, String),
}

impl CrowFactory {
    /// Reads the configuration as seen from `cwd` (where the editor started crow) for the
    /// lists of modes and models; each session reads its own project's configuration.
    pub fn new(cwd: &Path, overrides: Overrides) -> Result<Self> {
        let (root, _) = find_project_root(cwd);
        let loaded = config::load(&root, &overrides)?;
        Ok(Self {
            models: models(&loaded)?,
            modes: modes(&root),
            overrides,
        })
    }
}

fn failed(e: impl std::fmt::Display) -> RunnerError {
    RunnerError::Failed(e.to_string())
}

#[async_trait]
impl AgentFactory for CrowFactory {
    fn modes(&self) -> Vec<ModeInfo> {
        self.modes.clone()
    }

    fn models(&self) -> (Vec<ModelInfo>, String) {
        self.models.clone()
    }

    async fn create(&self, spec: SessionSpec) -> Result<Box<dyn SessionRunner>, RunnerError> {
        if !spec.mcp_servers.is_empty() {
            tracing::warn!(
                servers = spec.mcp_servers.len(),
                "MCP servers from the editor are recorded but not started yet"
            );
        }
        let runner =
            CrowRunner::new(&spec, &self.overrides).map_err(|e| failed(format!("{e:#}")))?;
        Ok(Box::new(runner))
    }
}

/// One ACP session: its composer (rebuilt when the model changes) and its histories.
pub struct CrowRunner {
    spec: SessionSpec,
    loaded: LoadedConfig,
    tools: ToolRegistry,
    composer: Arc<Composer>,
    model: String,
    session: CrewSession,
}

impl CrowRunner {
    fn new(spec: &SessionSpec, overrides: &Overrides) -> Result<Self> {
        let (root, _) = find_project_root(&spec.cwd);
        let loaded = config::load(&root, overrides)?;
        let tools = crow_tools::builtin_tools(&crate::tool_options(&loaded.config));
        let composer = compose(spec, &loaded, &tools, &spec.model)?;
        let session = CrewSession {
            primary: Session::new(
                spec.session_id.clone(),
                "builder",
                spec.cwd.clone(),
                composer.project_root.clone(),
            ),
            coagent: None,
        };
        Ok(Self {
            spec: spec.clone(),
            loaded,
            tools,
            composer,
            model: spec.model.clone(),
            session,
        })
    }
}

/// Provider settings for a model id `provider/model` (or the configured default).
fn settings_for(loaded: &LoadedConfig, model: &str) -> Result<ProviderSettings> {
    match model.split_once('/') {
        Some((provider, name)) if loaded.config.providers.contains_key(provider) => {
            provider_settings(
                &loaded.config,
                provider,
                loaded.base_url_override.as_deref(),
                Some(name),
            )
        }
        _ => Ok(select_provider(loaded)?.settings),
    }
}

/// The session's composer: its tools (shared across model switches, so the todo list
/// survives), the editor's permission gate and client bridge.
fn compose(
    spec: &SessionSpec,
    loaded: &LoadedConfig,
    tools: &ToolRegistry,
    model: &str,
) -> Result<Arc<Composer>> {
    let settings = settings_for(loaded, model)?;
    let (root, _) = find_project_root(&spec.cwd);
    let mut composer = Composer::new(
        loaded.config.clone(),
        settings,
        crate::load_agents(&root),
        tools.clone(),
        spec.cwd.clone(),
        loaded.config.max_iterations.unwrap_or(50),
    );
    composer.permission = Arc::clone(&spec.permission);
    composer.client = spec.client.clone();
    Ok(with_subagents(composer))
}

#[async_trait]
impl SessionRunner for CrowRunner {
    async fn prompt(
        &mut self,
        input: TurnInput,
        events: &EventSender,
        cancel: CancellationToken,
    ) -> Result<TurnOutcome, RunnerError> {
        if input.model != self.model {
            self.composer = compose(&self.spec, &self.loaded, &self.tools, &input.model)
                .map_err(|e| failed(format!("{e:#}")))?;
            self.model = input.model.clone();
        }
        let mode = if self.composer.composition(&input.mode).is_ok() {
            input.mode.as_str()
        } else {
            DEFAULT_MODE
        };
        let crew = self
            .composer
            .crew(mode, None)
            .map_err(|e| failed(format!("{e:#}")))?;
        // A mode with a reviewer gets the reviewer's history the first time it is used; the
        // builder's history carries on across modes.
        if let Some(coagent) = crew.coagent() {
            let fresh = self
                .session
                .coagent
                .as_ref()
                .is_none_or(|s| s.agent != coagent.name);
            if fresh {
                self.session.coagent = Some(Session::new(
                    self.spec.session_id.clone(),
                    coagent.name.clone(),
                    self.spec.cwd.clone(),
                    self.composer.project_root.clone(),
                ));
            }
        }
        self.session.primary.add_user_message(input.text);
        let run = crew
            .run(&mut self.session, events, cancel)
            .await
            .map_err(failed)?;
        Ok(TurnOutcome {
            stop: (&run.stop).into(),
            usage: run.usage,
        })
    }

    fn tool_kind(&self, tool: &str) -> Option<ToolKind> {
        self.tools.get(tool).map(|t| t.kind())
    }
}
