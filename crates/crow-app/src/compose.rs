//! Builds the running crew from definitions: each agent gets its provider (its own model if
//! its definition names one), its tools (the definition's allowlist over the shared
//! registry) and its system prompt (role + environment, rendered once).
//!
//! A provider is built once per (provider, model, effort) and shared. The reasoning effort is
//! the session's pick (`--effort`, `/effort`, an editor's selector), else the agent
//! definition's, else the provider's config. A Claude Code model alias (`sonnet`) means that
//! model on Anthropic and the session's model elsewhere (said once). The `skill` tool is
//! registered only when a skill exists, so a project without skills pays no schema bytes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, anyhow, bail};
use crow_core::{
    AgentConfig, BaseAgent, ClientBridge, ControlFlow, Crew, PermissionGate, Provider,
    SubagentFactory, TaskTool, ToolRegistry,
};
use crow_providers::ProviderSettings;

use crate::agents::{AgentDef, Catalog, CompositionDef, DEFAULT_MAX_ROUNDS, DefSource, Mode};
use crate::config::Config;
use crate::prompt::{Asking, PromptFacts, render_system_prompt_from};
use crate::wiring::{find_project_root, provider_settings};

/// Everything needed to turn a composition name into a [`Crew`]. Built whole by
/// [`Composer::build`] from [`ComposerParts`]: who answers permission questions and the
/// policy every call goes through are required, so no front end can build a session that
/// skips them.
pub struct Composer {
    pub config: Config,
    /// The session's provider and model (what agents without their own model use).
    pub default_provider: ProviderSettings,
    pub catalog: Catalog,
    pub tools: ToolRegistry,
    pub(crate) permission: Arc<dyn PermissionGate>,
    /// The permission policy every agent's calls go through.
    pub(crate) policy: Arc<crow_core::Policy>,
    /// The project is trusted: allow rules in its agent files count.
    trusted: bool,
    /// The editor's files and terminals (`crow acp`), handed to every agent's tools.
    client: Option<Arc<dyn ClientBridge>>,
    /// The project's working-tree snapshots (`undo.rs`), given to the crew's agents (not to
    /// subagents: their changes are the calling turn's).
    pub snapshots: Option<Arc<dyn crow_core::Snapshotter>>,
    /// The first snapshot was started ahead ([`Composer::snapshot_ahead`]).
    snapshot_started: std::sync::atomic::AtomicBool,
    pub cwd: PathBuf,
    pub project_root: PathBuf,
    is_git: bool,
    /// Fixed at start so the system prompt is byte-stable for the session.
    date: String,
    /// The project's instruction files, read once.
    pub instructions: crate::instructions::Instructions,
    /// Prompt templates with the user's and the project's overrides.
    pub templates: crate::templates::Templates,
    /// Why an override could not be used; sessions refuse to start with it (`crew`).
    template_error: Option<String>,
    /// The skills' index for the system prompt (empty without skills).
    skill_index: crow_tools::SkillIndex,
    pub max_iterations: u32,
    /// System prompts of a resumed session by agent name, used instead of rendering anew.
    stored_prompts: Mutex<HashMap<String, String>>,
    /// Where subagents' histories go (the session store), once a session is open.
    history_sink: std::sync::OnceLock<Arc<dyn crow_core::HistorySink>>,
    pub(crate) providers: Mutex<HashMap<ProviderKey, Arc<dyn Provider>>>,
    /// Fallback chains by their models: agents with one chain share its state (one 429 moves
    /// them all to the next model).
    fallbacks: Mutex<HashMap<Vec<String>, Arc<crow_core::fallback::Fallback>>>,
    /// The reasoning effort the user picked for this session (an editor's selector, `crow
    /// run --effort`); it wins over agent definitions and the provider's config.
    effort: Option<crow_providers::ReasoningEffort>,
    /// Agents whose model alias could not be mapped and has been warned about.
    alias_warned: Mutex<std::collections::HashSet<String>>,
    /// The user's hooks (`hooks/`), given to every agent; `None`: none configured.
    hooks: Option<Arc<dyn crow_core::Hooks>>,
    runner: Option<Arc<crate::hooks::HookRunner>>,
}

/// What a [`Composer`] is built from.
pub struct ComposerParts {
    pub config: Config,
    /// The session's provider and model.
    pub provider: ProviderSettings,
    pub catalog: Catalog,
    pub tools: ToolRegistry,
    pub cwd: PathBuf,
    pub max_iterations: u32,
    /// Who answers the questions the policy or a tool asks.
    pub gate: Arc<dyn PermissionGate>,
    pub policy: Arc<crow_core::Policy>,
    pub trusted: bool,
    /// The editor's files and terminals, if the front end has an editor.
    pub client: Option<Arc<dyn ClientBridge>>,
    /// The user's reasoning effort for the session, applied to the provider too.
    pub effort: Option<crow_providers::ReasoningEffort>,
    /// The user's hooks (`hooks::session_runner`); `None` when none are configured (nothing
    /// is wrapped or fired).
    pub hooks: Option<Arc<crate::hooks::HookRunner>>,
}

/// A built provider per provider name, model and reasoning effort.
pub(crate) type ProviderKey = (String, String, Option<crow_providers::ReasoningEffort>);

impl Composer {
    /// Reads the project's instructions, templates and skills, opens its snapshots, and
    /// gives the agents the `task` tool (`with_subagents`).
    pub fn build(parts: ComposerParts) -> Arc<Self> {
        let ComposerParts {
            config,
            mut provider,
            catalog,
            tools,
            cwd,
            max_iterations,
            gate,
            policy,
            trusted,
            client,
            effort,
            hooks: runner,
        } = parts;
        let hooks = runner
            .clone()
            .map(|runner| runner as Arc<dyn crow_core::Hooks>);
        if effort.is_some() {
            provider.reasoning_effort = effort;
        }
        let (project_root, is_git) = find_project_root(&cwd);
        let instructions = crate::instructions::load(
            &config.instructions,
            crate::config::user_config_dir().as_deref(),
            &project_root,
            &cwd,
        );
        for notice in &instructions.notices {
            tracing::warn!("{notice}");
        }
        let (templates, template_error) = match crate::templates::Templates::load(
            crate::config::user_config_dir().as_deref(),
            &project_root,
        ) {
            Ok(templates) => (templates, None),
            Err(e) => (
                crate::templates::Templates::builtin(),
                Some(format!("{e:#}")),
            ),
        };
        let skills = crate::skills::load(&project_root);
        let skill_index = crate::skills::index(&skills);
        // Only with skills: a project without any pays no schema bytes for the tool.
        if !skills.is_empty() {
            tools.register(Arc::new(crow_tools::SkillTool::new(
                Arc::new(skills.skills),
                crate::wiring::tool_options(&config).max_read_bytes,
            )));
        }
        let snapshots = crate::undo::open_snapshots(&config, &project_root);
        with_subagents(Self {
            snapshots,
            snapshot_started: std::sync::atomic::AtomicBool::new(false),
            instructions,
            templates,
            template_error,
            skill_index,
            config,
            default_provider: provider,
            catalog,
            tools,
            // PermissionRequest and Notification hooks stand before the front end's questions.
            permission: crow_core::HookedGate::wrap(gate, hooks.clone(), project_root.clone()),
            policy,
            trusted,
            client,
            cwd,
            project_root,
            is_git,
            date: chrono::Local::now().format("%Y-%m-%d").to_string(),
            max_iterations,
            stored_prompts: Mutex::new(HashMap::new()),
            history_sink: std::sync::OnceLock::new(),
            providers: Mutex::new(HashMap::new()),
            fallbacks: Mutex::new(HashMap::new()),
            effort,
            alias_warned: Mutex::new(std::collections::HashSet::new()),
            hooks,
            runner,
        })
    }

    /// The same session's composer with another provider (a model switch) and effort:
    /// everything else — gate, policy, trust, editor, tools, instructions, templates,
    /// snapshots, stored prompts, history sink — is kept, nothing is read again.
    pub fn switched(
        &self,
        mut provider: ProviderSettings,
        effort: Option<crow_providers::ReasoningEffort>,
    ) -> Arc<Self> {
        if effort.is_some() {
            provider.reasoning_effort = effort;
        }
        let composer = Self {
            config: self.config.clone(),
            default_provider: provider,
            catalog: crate::wiring::load_agents(&self.project_root),
            tools: self.tools.clone(),
            permission: Arc::clone(&self.permission),
            policy: Arc::clone(&self.policy),
            trusted: self.trusted,
            client: self.client.clone(),
            snapshots: self.snapshots.clone(),
            snapshot_started: std::sync::atomic::AtomicBool::new(
                self.snapshot_started
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
            cwd: self.cwd.clone(),
            project_root: self.project_root.clone(),
            is_git: self.is_git,
            date: self.date.clone(),
            instructions: self.instructions.clone(),
            templates: self.templates.clone(),
            template_error: self.template_error.clone(),
            skill_index: self.skill_index.clone(),
            max_iterations: self.max_iterations,
            stored_prompts: Mutex::new(
                self.stored_prompts
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone(),
            ),
            history_sink: std::sync::OnceLock::new(),
            providers: Mutex::new(HashMap::new()),
            fallbacks: Mutex::new(HashMap::new()),
            effort,
            alias_warned: Mutex::new(std::collections::HashSet::new()),
            hooks: self.hooks.clone(),
            runner: self.runner.clone(),
        };
        if let Some(sink) = self.history_sink.get() {
            let _ = composer.history_sink.set(Arc::clone(sink));
        }
        with_subagents(composer)
    }

    /// The user's hooks, if any are configured.
    pub fn hooks(&self) -> Option<&Arc<dyn crow_core::Hooks>> {
        self.hooks.as_ref()
    }

    /// Starts the project's first snapshot on a thread of its own ([`crate::undo::prewarm`]),
    /// once per composer. The driver calls it once the store is open: started with the
    /// composer, its walk competed with the store's opening for a small machine's cores, and
    /// that opening is what the first request waits for.
    pub fn snapshot_ahead(&self) {
        if let Some(snapshots) = &self.snapshots
            && !self
                .snapshot_started
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            crate::undo::prewarm(snapshots);
        }
    }

    /// The hooks' runner, to tell it the session's composition and transcript.
    pub fn hook_runner(&self) -> Option<&Arc<crate::hooks::HookRunner>> {
        self.runner.as_ref()
    }

    /// Who answers permission questions.
    pub fn gate(&self) -> &Arc<dyn PermissionGate> {
        &self.permission
    }

    /// The permission policy of the session.
    pub fn policy(&self) -> &Arc<crow_core::Policy> {
        &self.policy
    }

    /// The project's own configuration counts in full.
    pub fn trusted(&self) -> bool {
        self.trusted
    }

    /// The reasoning effort the user picked for the session, if any.
    pub fn effort(&self) -> Option<crow_providers::ReasoningEffort> {
        self.effort
    }

    /// Subagent histories are written here too.
    pub fn set_history_sink(&self, sink: Arc<dyn crow_core::HistorySink>) {
        let _ = self.history_sink.set(sink);
    }

    /// Makes agents use these system prompts (by agent name) instead of rendering new ones:
    /// a resumed session keeps the prompts it started with.
    pub fn set_stored_prompts(&self, prompts: HashMap<String, String>) {
        *self
            .stored_prompts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = prompts;
    }

    /// The composition called `name` (an agent name runs that agent alone), with its flow
    /// replaced by `level` when given.
    pub fn crew(&self, name: &str, level: Option<i8>) -> Result<Crew> {
        self.crew_under(name, level, None)
    }

    /// Like [`Composer::crew`]; under a `parent` agent the crew's agents are named
    /// `parent/name` (subagents).
    fn crew_under(&self, name: &str, level: Option<i8>, parent: Option<&str>) -> Result<Crew> {
        if let Some(error) = &self.template_error {
            bail!("{error}");
        }
        let mut def = self.composition(name)?;
        if let Some(level) = level {
            def.flow = ControlFlow::from_level(level)
                .ok_or_else(|| anyhow!("--level {level} is not an autonomy level: use -1 to 5"))?;
            if def.flow.needs_coagent() && def.coagent.is_none() {
                def.coagent = Some("reviewer".into());
            }
            if def.max_rounds <= 1 {
                def.max_rounds = DEFAULT_MAX_ROUNDS;
            }
        }
        let primary_name = match parent {
            Some(parent) => format!("{parent}/{}", def.name),
            None => def.primary.clone(),
        };
        let snapshots = self.snapshots.as_ref().filter(|_| parent.is_none());
        // The end of the primary's turn is the session's Stop (a subagent's, its
        // SubagentStop); the reviewer's end is told as its verdict (ReviewVerdict).
        let stop = match parent {
            Some(_) => crow_core::HookEvent::SubagentStop,
            None => crow_core::HookEvent::Stop,
        };
        let side = self.side_models()?;
        let with_snapshots = |agent: BaseAgent, stop: Option<crow_core::HookEvent>| {
            let agent = agent.with_side_models(side.clone());
            let agent = match &self.hooks {
                Some(hooks) => agent.with_hooks(Arc::clone(hooks), stop),
                None => agent,
            };
            match snapshots {
                Some(s) => agent.with_snapshots(Arc::clone(s)),
                None => agent,
            }
        };
        // Where the reviewer ends the run (or Loop(n) runs its rounds), the builder's
        // task_complete is a claim: it is told.
        let reviewed = matches!(
            def.flow,
            ControlFlow::Coagent {
                can_terminate: true,
                ..
            } | ControlFlow::Coagent {
                rounds: Some(_),
                ..
            }
        ) && def.coagent.is_some();
        // Only a top-level primary in a flow that hands back to the user after each turn has
        // someone to answer its questions.
        let asking = if parent.is_none() && def.flow == ControlFlow::Hitl {
            Asking::User
        } else {
            Asking::NoOne
        };
        let seat = Seat {
            reviewed,
            commands: true,
            asking,
        };
        let primary = with_snapshots(
            self.agent_in(&def.primary, &primary_name, seat)?,
            Some(stop),
        );
        let coagent = match &def.coagent {
            Some(coagent) if def.flow.needs_coagent() => {
                // Events are told apart by agent name, so two copies of one agent need two.
                let shown = match parent {
                    Some(_) => format!("{primary_name}/{coagent}"),
                    None if *coagent == def.primary => format!("{coagent}-review"),
                    None => coagent.clone(),
                };
                // A coagent without every tool runs no commands: no word on their sandbox.
                let commands = matches!(
                    def.flow,
                    ControlFlow::Coagent {
                        tools: crow_core::CoagentTools::Full,
                        ..
                    }
                );
                let seat = Seat {
                    commands,
                    ..Seat::default()
                };
                Some(with_snapshots(self.agent_in(coagent, &shown, seat)?, None))
            }
            _ => None,
        };
        // Overridden templates replace the built-in handoff and nudge, not a definition's own.
        let handoff = match self.templates.get("handoff") {
            Some(t) if t.is_overridden() && def.handoff == crow_core::Handoff::default() => {
                crow_core::Handoff::Template {
                    template: t.text.clone(),
                }
            }
            _ => def.handoff.clone(),
        };
        let flow = match (&def.flow, self.templates.get("nudge")) {
            (ControlFlow::Generated { generator_prompt }, Some(t))
                if t.is_overridden()
                    && generator_prompt == crow_core::crew::DEFAULT_GENERATOR_PROMPT =>
            {
                ControlFlow::Generated {
                    generator_prompt: t.text.clone(),
                }
            }
            (flow, _) => flow.clone(),
        };
        Crew::new(
            def.name.clone(),
            primary,
            coagent,
            flow,
            handoff,
            def.max_rounds,
        )
        .map_err(|e| anyhow!("{e}"))
    }

    /// What a new session runs when none is named: config.toml's `default_agent`, else
    /// `build`. A name that is neither a composition nor an agent is an error naming the key.
    pub fn default_composition(&self) -> Result<String> {
        let Some(name) = &self.config.default_agent else {
            return Ok(DEFAULT_COMPOSITION.to_owned());
        };
        if self.composition(name).is_ok() {
            return Ok(name.clone());
        }
        let known: Vec<&str> = self
            .catalog
            .compositions
            .keys()
            .chain(self.catalog.agents.keys())
            .map(String::as_str)
            .collect();
        bail!(
            "default_agent = \"{name}\" in config.toml: no composition or agent by that name; use one of: {}",
            known.join(", ")
        )
    }

    pub fn composition(&self, name: &str) -> Result<CompositionDef> {
        if let Some(def) = self.catalog.compositions.get(name) {
            return Ok(def.clone());
        }
        if let Some(external) = crate::external::external_name(name) {
            let config = self.external_config(external)?;
            return Ok(CompositionDef {
                name: name.to_owned(),
                description: config.description.clone().unwrap_or_default(),
                primary: name.to_owned(),
                coagent: None,
                flow: ControlFlow::Hitl,
                handoff: crow_core::Handoff::default(),
                max_rounds: 1,
                source: crate::agents::DefSource::BuiltIn,
            });
        }
        if let Some(agent) = self.catalog.agents.get(name) {
            return Ok(CompositionDef {
                name: agent.name.clone(),
                description: agent.description.clone(),
                primary: agent.name.clone(),
                coagent: None,
                flow: ControlFlow::Hitl,
                handoff: crow_core::Handoff::default(),
                max_rounds: 1,
                source: agent.source.clone(),
            });
        }
        let mut known: Vec<&str> = self
            .catalog
            .compositions
            .keys()
            .map(String::as_str)
            .collect();
        known.extend(self.catalog.agents.keys().map(String::as_str));
        bail!(
            "unknown agent '{name}': crow agents list shows what exists ({})",
            known.join(", ")
        )
    }

    /// One base agent from its definition; `shown` is the name its events carry.
    pub fn agent(&self, name: &str, shown: &str) -> Result<BaseAgent> {
        let seat = Seat {
            commands: true,
            ..Seat::default()
        };
        self.agent_in(name, shown, seat)
    }

    /// [`Composer::agent`] in its seat of a crew (what its system prompt tells it). An agent
    /// as deep as subagents may nest is not offered `task`, which could only fail for it.
    fn agent_in(&self, name: &str, shown: &str, seat: Seat) -> Result<BaseAgent> {
        if let Some(external) = crate::external::external_name(name) {
            return self.external_agent(external, shown);
        }
        let def =
            self.catalog.agents.get(name).ok_or_else(|| {
                anyhow!("unknown agent '{name}' (crow agents list shows the agents)")
            })?;
        let provider = self.provider_for(def)?;
        let fallback = self.fallback_for(def, provider.name())?;
        let tools = if def.tools.is_some() || !def.disallowed_tools.is_empty() {
            let def = def.clone();
            self.tools.filtered(move |t| def.allows(t.name()))
        } else {
            self.tools.clone()
        };
        let tools = if shown.matches('/').count() >= MAX_SUBAGENT_DEPTH {
            tools.filtered(|t| t.name() != crow_core::TASK)
        } else {
            tools
        };
        let stored = self
            .stored_prompts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(shown)
            .cloned();
        let no_skills = crow_tools::SkillIndex::default();
        let system_prompt = match stored {
            Some(stored) => stored,
            None => render_system_prompt_from(
                self.templates.text("system"),
                &PromptFacts {
                    role: &def.prompt,
                    cwd: &self.cwd,
                    project_root: &self.project_root,
                    is_git: self.is_git,
                    date: self.date.clone(),
                    instructions: &self.instructions.files,
                    // An agent whose tools leave out `skill` is not told of skills it cannot load.
                    skills: if tools.get("skill").is_some() {
                        &self.skill_index
                    } else {
                        &no_skills
                    },
                    reviewed: seat.reviewed,
                    asking: seat.asking,
                    sandbox: tools.get("bash").filter(|_| seat.commands).and_then(|_| {
                        crate::prompt::sandbox_note(&self.config.sandbox, &self.project_root)
                    }),
                },
            )?,
        };
        let config = AgentConfig {
            max_iterations: def.max_iterations.unwrap_or(self.max_iterations),
            temperature: def.temperature,
            max_tokens: def.max_tokens,
            doom_loop_threshold: def
                .doom_loop_threshold
                .or(self.config.doom_loop_threshold)
                .unwrap_or(crow_core::doom_loop::DEFAULT_THRESHOLD),
            compaction: crow_core::compaction::CompactionConfig {
                template: self
                    .templates
                    .get("compaction")
                    .filter(|t| t.is_overridden())
                    .map(|t| t.text.clone()),
                ..Default::default()
            },
        };
        let mut agent = BaseAgent::new(
            shown,
            provider,
            tools,
            system_prompt,
            Arc::clone(&self.permission),
            config,
        );
        if let Some(chain) = fallback {
            agent = agent.with_fallback(chain);
        }
        // A subagent is shown under its callers (`planner/explore`): theirs count too.
        let ancestors: Vec<&AgentDef> = shown
            .split('/')
            .rev()
            .skip(1)
            .filter_map(|name| self.ancestor(name))
            .collect();
        let agent = agent.with_policy(crate::permissions::for_agent(
            &self.policy,
            def,
            &ancestors,
            self.trusted,
        )?);
        Ok(match &self.client {
            Some(client) => agent.with_client(Arc::clone(client)),
            None => agent,
        })
    }

    /// The agent a segment of a shown name stands for: an agent, or a composition's primary.
    fn ancestor(&self, name: &str) -> Option<&AgentDef> {
        self.catalog.agents.get(name).or_else(|| {
            let primary = &self.catalog.compositions.get(name)?.primary;
            self.catalog.agents.get(primary)
        })
    }

    fn provider_for(&self, def: &AgentDef) -> Result<Arc<dyn Provider>> {
        let settings = match def.model.as_deref() {
            None => self.default_provider.clone(),
            Some(alias) if claude_alias(alias).is_some() => self.alias_settings(def, alias),
            Some(spec) => self
                .spec_settings(spec)
                .with_context(|| format!("agent '{}' ({})", def.name, def.source))?,
        };
        let mut settings = settings;
        // The session's own pick, then the agent's definition, then the provider's config.
        if let Some(effort) = self.effort.or(def.reasoning_effort) {
            settings.reasoning_effort = Some(effort);
        }
        self.built(settings)
    }

    /// The models that take an agent's failed calls: the session's `fallback` (`--fallback`,
    /// the config's top level) for an agent on the session's model, else its provider's
    /// `fallback`; `None` when there are none.
    fn fallback_for(
        &self,
        def: &AgentDef,
        provider: &str,
    ) -> Result<Option<Arc<crow_core::fallback::Fallback>>> {
        let specs = match (&def.model, self.config.fallback.is_empty()) {
            (None, false) => &self.config.fallback,
            _ => match self.config.providers.get(provider) {
                Some(config) if !config.fallback.is_empty() => &config.fallback,
                _ => return Ok(None),
            },
        };
        let mut chains = self
            .fallbacks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(chain) = chains.get(specs) {
            return Ok(Some(Arc::clone(chain)));
        }
        let mut models = Vec::with_capacity(specs.len());
        for spec in specs {
            let model = self
                .spec_settings(spec)
                .and_then(|settings| self.built(settings))
                .with_context(|| format!("fallback model '{spec}'"))?;
            models.push(model);
        }
        let cooldown = self.config.fallback_cooldown_secs.map_or(
            crow_core::fallback::DEFAULT_COOLDOWN,
            std::time::Duration::from_secs,
        );
        let chain = Arc::new(crow_core::fallback::Fallback::new(models, cooldown));
        chains.insert(specs.clone(), Arc::clone(&chain));
        Ok(Some(chain))
    }

    /// `provider/model` (a configured provider), else a model of the session's provider.
    fn spec_settings(&self, spec: &str) -> Result<ProviderSettings> {
        Ok(match spec.split_once('/') {
            Some((provider, model)) if self.config.providers.contains_key(provider) => {
                provider_settings(&self.config, provider, None, Some(model))?
            }
            _ => ProviderSettings {
                model: spec.to_owned(),
                ..self.default_provider.clone()
            },
        })
    }

    /// The models of the side jobs (`[models] compaction`, `nudge`, else `small`); a job
    /// with none keeps the agent's own model.
    fn side_models(&self) -> Result<crow_core::SideModels> {
        let models = &self.config.models;
        let job = |name: &str, spec: Option<&String>| -> Result<Option<Arc<dyn Provider>>> {
            spec.or(models.small.as_ref())
                .map(|spec| {
                    self.spec_settings(spec)
                        .and_then(|settings| self.built(settings))
                        .with_context(|| format!("[models] {name} = \"{spec}\""))
                })
                .transpose()
        };
        let watching = &self.config.loop_detection;
        let watcher = match watching.watcher.as_deref() {
            None => None,
            Some(spec) => {
                let provider = match (spec, models.small.as_ref()) {
                    ("small", Some(small)) => self.spec_settings(small),
                    ("small", None) => Ok(self.default_provider.clone()),
                    (spec, _) => self.spec_settings(spec),
                }
                .and_then(|settings| self.built(settings))
                .with_context(|| format!("[loop_detection] watcher = \"{spec}\""))?;
                Some(crow_core::LoopWatcher {
                    provider,
                    every: watching
                        .every
                        .unwrap_or(crow_core::watcher::DEFAULT_EVERY)
                        .max(1),
                })
            }
        };
        Ok(crow_core::SideModels {
            compaction: job("compaction", models.compaction.as_ref())?,
            nudge: job("nudge", models.nudge.as_ref())?,
            watcher,
        })
    }

    /// The session's own model, as the crew's agents without a model of their own use it
    /// (`crow run --attempts`' judge).
    pub fn session_provider(&self) -> Result<Arc<dyn Provider>> {
        self.built(self.default_provider.clone())
    }

    /// A provider for `settings`, built once per provider, model and effort.
    fn built(&self, settings: ProviderSettings) -> Result<Arc<dyn Provider>> {
        let key = (
            settings.name.clone(),
            settings.model.clone(),
            settings.reasoning_effort,
        );
        let mut cache = self
            .providers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(provider) = cache.get(&key) {
            return Ok(Arc::clone(provider));
        }
        let provider = crow_providers::build(settings).map_err(|e| anyhow!("{e}"))?;
        cache.insert(key, Arc::clone(&provider));
        Ok(provider)
    }
}

impl Composer {
    /// A Claude Code model alias (`sonnet`, `opus`, `haiku`): that model when the session talks
    /// to Anthropic; otherwise it means nothing here, so the session's model, said once.
    fn alias_settings(&self, def: &AgentDef, alias: &str) -> ProviderSettings {
        let chosen = &self.default_provider;
        match claude_alias(alias) {
            Some(model) if chosen.kind == crow_providers::ProviderKind::Anthropic => {
                ProviderSettings {
                    model: model.to_owned(),
                    ..chosen.clone()
                }
            }
            _ => {
                let mut warned = self
                    .alias_warned
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if warned.insert(def.name.clone()) {
                    errln!(
                        "warning: agent '{}' ({}) asks for model '{alias}', a Claude model alias that provider '{}' cannot map; it uses the session's model {}",
                        def.name,
                        def.source,
                        chosen.name,
                        chosen.model
                    );
                }
                chosen.clone()
            }
        }
    }
}

/// The model a Claude Code alias names (as its documentation lists them).
fn claude_alias(alias: &str) -> Option<&'static str> {
    match alias.to_ascii_lowercase().as_str() {
        "sonnet" => Some("claude-sonnet-4-5"),
        "opus" => Some("claude-opus-4-1"),
        "haiku" => Some("claude-haiku-4-5"),
        _ => None,
    }
}

/// Subagents for the `task` tool: agents that may run as subagents, and compositions.
impl SubagentFactory for Composer {
    fn available(&self) -> Vec<(String, String)> {
        subagents(&self.catalog)
    }

    fn history_sink(&self) -> Option<Arc<dyn crow_core::HistorySink>> {
        self.history_sink.get().cloned()
    }

    fn build(&self, name: &str, parent: &str) -> Result<Crew, String> {
        self.crew_under(name, None, Some(parent))
            .map_err(|e| format!("{e:#}"))
    }

    fn isolate(
        &self,
        project_root: &std::path::Path,
    ) -> Result<Box<dyn crow_core::Isolated>, String> {
        crate::worktree::for_subagent(&self.config, project_root)
            .map(|tree| Box::new(tree) as Box<dyn crow_core::Isolated>)
            .map_err(|e| format!("{e:#}"))
    }
}

/// An agent's seat in its crew: what its system prompt says about it.
#[derive(Debug, Clone, Copy, Default)]
struct Seat {
    /// A reviewer checks its work and ends the run: its `task_complete` is a claim.
    reviewed: bool,
    /// It may run commands (a coagent without every tool runs none): told their sandbox
    /// when `bash` is among its tools.
    commands: bool,
    asking: Asking,
}

/// What the `task` tool offers: agents that may run as subagents, the user's and project's
/// compositions, and of the built-in ones those that give a subagent its own reviewer
/// (`build-judge`, `build-smart`) — described for the calling model, which knows nothing of
/// levels. (`build`, `plan` are their agent under another name; a loop or a chat adds
/// nothing when no person takes part.)
fn subagents(catalog: &Catalog) -> Vec<(String, String)> {
    let agents = catalog
        .agents
        .values()
        .filter(|a| a.mode != Mode::Primary)
        .map(|a| (a.name.clone(), a.description.clone()));
    let compositions = catalog.compositions.values().filter_map(|c| {
        if c.source != DefSource::BuiltIn {
            return Some((c.name.clone(), c.description.clone()));
        }
        let reviewed = if c.flow == ControlFlow::judge() {
            "the builder, and a reviewer that reads its work and sends it back until it is \
             right (slower; for changes that must be correct)"
        } else if c.flow == ControlFlow::smart() {
            "the builder, and a reviewer that may run and fix the work itself before it \
             returns (slowest, most thorough)"
        } else {
            return None;
        };
        Some((c.name.clone(), reviewed.to_owned()))
    });
    agents.chain(compositions).collect()
}

/// Subagents may nest this deep below a top-level agent.
/// What a new session runs when neither the caller nor config.toml's `default_agent` names
/// a composition.
pub const DEFAULT_COMPOSITION: &str = "build";

pub const MAX_SUBAGENT_DEPTH: usize = 2;
/// Subagents running at once; more calls wait.
pub const MAX_PARALLEL_SUBAGENTS: usize = 4;

/// Shares the composer and gives its agents the `task` tool (which holds it weakly, so the
/// composer and its registry do not keep each other alive) and `task_status`, over the
/// background subagents `task` starts (at most `[tools] max_background_tasks` at once).
fn with_subagents(composer: Composer) -> Arc<Composer> {
    let composer = Arc::new(composer);
    let weak: std::sync::Weak<Composer> = Arc::downgrade(&composer);
    let factory: std::sync::Weak<dyn SubagentFactory> = weak;
    let background = composer
        .config
        .tools
        .max_background_tasks
        .unwrap_or(crow_core::subagent::DEFAULT_MAX_BACKGROUND);
    let task = TaskTool::new(factory, MAX_SUBAGENT_DEPTH, MAX_PARALLEL_SUBAGENTS)
        .with_background_limit(background);
    // `task_status` is offered exactly where `task` is (`Tool::offered_with`).
    composer.tools.register(Arc::new(task.status_tool()));
    composer.tools.register(Arc::new(task));
    composer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_compositions_with_a_reviewer_are_offered_as_subagents() {
        let empty = tempfile::tempdir().unwrap();
        let catalog = crate::agents::load_catalog(None, empty.path());
        let names: Vec<String> = subagents(&catalog).into_iter().map(|(n, _)| n).collect();
        for offered in ["build-judge", "build-smart"] {
            assert!(names.iter().any(|n| n == offered), "{offered} in {names:?}");
        }
        for hidden in ["build", "plan", "build-loop", "pair"] {
            assert!(!names.iter().any(|n| n == hidden), "{hidden} in {names:?}");
        }
    }
}
