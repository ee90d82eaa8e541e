//! Agent definitions: base agents (a prompt, a model, a tool set) and compositions (a primary,
//! an optional coagent and a control flow). Built-ins ship with crow; user files
//! (`~/.config/crow/agents/`) and project files (`.crow/agents/`) override them by name.
//! Files are TOML, or Markdown with YAML frontmatter (readable from opencode and Claude Code
//! agent files). A broken file is reported with its path and field; the others still load.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crow_core::{Action, CoagentTools, ControlFlow, Handoff, Rule};
use serde::Deserialize;

mod rules;

/// Where a definition came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefSource {
    BuiltIn,
    File(PathBuf),
}

impl fmt::Display for DefSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DefSource::BuiltIn => f.write_str("built-in"),
            DefSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Primary,
    Subagent,
    All,
}

/// One base agent.
#[derive(Debug, Clone)]
pub struct AgentDef {
    pub name: String,
    pub description: String,
    pub mode: Mode,
    /// `model` or `provider/model`; `None` (or "inherit") uses the session's model.
    pub model: Option<String>,
    pub temperature: Option<f32>,
    /// Output token limit of each model call (`max_tokens`, `maxTokens`).
    pub max_tokens: Option<u32>,
    /// How hard this agent's model thinks (a reviewer may think harder than the builder).
    pub reasoning_effort: Option<crow_providers::ReasoningEffort>,
    pub max_iterations: Option<u32>,
    /// Repeats that make a loop for this agent (0: no loop detection); `None` = the config's.
    pub doom_loop_threshold: Option<u32>,
    /// Allowed tools (crow names, `*` suffix wildcards); `None` = all.
    pub tools: Option<Vec<String>>,
    pub disallowed_tools: Vec<String>,
    /// Permission rules of this agent, on top of the session's (`agents/rules.rs`).
    pub rules: Vec<Rule>,
    /// The strictest mode this agent runs in (`permissions.mode`, `permissionMode`).
    pub permission_mode: Option<crow_core::Mode>,
    /// Read from the project's `.crow/agents/`: its allow rules count only in a trusted
    /// project.
    pub from_project: bool,
    /// Why the file's permission rules could not be read: the agent refuses to run rather
    /// than run without them.
    pub policy_error: Option<String>,
    /// The agent's role prompt; the environment section is appended when rendered.
    pub prompt: String,
    pub source: DefSource,
}

impl AgentDef {
    /// Whether this agent may use the tool called `name`.
    pub fn allows(&self, name: &str) -> bool {
        let matches = |pattern: &String| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => pattern == name,
        };
        if self.disallowed_tools.iter().any(matches) {
            return false;
        }
        self.tools
            .as_ref()
            .is_none_or(|allowed| allowed.iter().any(matches))
    }
}

/// A composition: what `--agent NAME` and ACP modes select.
#[derive(Debug, Clone)]
pub struct CompositionDef {
    pub name: String,
    pub description: String,
    pub primary: String,
    pub coagent: Option<String>,
    pub flow: ControlFlow,
    pub handoff: Handoff,
    pub max_rounds: u32,
    pub source: DefSource,
}

/// Every definition crow knows, and what could not be loaded.
#[derive(Debug, Default)]
pub struct Catalog {
    pub agents: BTreeMap<String, AgentDef>,
    pub compositions: BTreeMap<String, CompositionDef>,
    /// One line per broken file: path, field, problem.
    pub problems: Vec<String>,
    /// One line per definition that loaded with something crow cannot honour (a tool it
    /// does not have).
    pub warnings: Vec<String>,
}

/// crow's own tools, as agent files name them after [`canonical_tool`].
const CROW_TOOLS: [&str; 13] = [
    "bash",
    "edit_file",
    "glob",
    "grep",
    "list_directory",
    "python",
    "read_file",
    "task",
    "task_complete",
    "task_status",
    "think",
    "todo_write",
    "write_file",
];

/// Tools an agent's allowlist names that crow does not have (MCP tools and wildcards are
/// left alone: which exist is known only once servers run).
fn unknown_tools(def: &AgentDef) -> Vec<&str> {
    def.tools
        .iter()
        .flatten()
        .map(String::as_str)
        .filter(|t| !t.ends_with('*') && !t.starts_with("mcp__") && !CROW_TOOLS.contains(t))
        .collect()
}

const BUILTIN_AGENTS: [(&str, &str); 3] = [
    ("builder.md", include_str!("../agents/builder.md")),
    ("reviewer.md", include_str!("../agents/reviewer.md")),
    ("planner.md", include_str!("../agents/planner.md")),
];

/// Rounds a composition may run when its definition gives no bound.
pub const DEFAULT_MAX_ROUNDS: u32 = 10;

fn builtin_compositions() -> Vec<CompositionDef> {
    let c =
        |name: &str, description: &str, primary: &str, coagent: Option<&str>, flow: ControlFlow| {
            CompositionDef {
                name: name.into(),
                description: description.into(),
                primary: primary.into(),
                coagent: coagent.map(Into::into),
                flow,
                handoff: Handoff::default(),
                max_rounds: DEFAULT_MAX_ROUNDS,
                source: DefSource::BuiltIn,
            }
        };
    vec![
        c(
            "build",
            "The builder works; control returns to you after each turn (level -1).",
            "builder",
            None,
            ControlFlow::Hitl,
        ),
        c(
            "build-loop",
            "The builder keeps going until it calls task_complete (level 0).",
            "builder",
            None,
            ControlFlow::Loop,
        ),
        c(
            "build-judge",
            "The builder works, a read-only reviewer approves or sends it back (level 4).",
            "builder",
            Some("reviewer"),
            ControlFlow::judge(),
        ),
        c(
            "build-smart",
            "The builder works, a reviewer with every tool fixes or approves (level 5).",
            "builder",
            Some("reviewer"),
            ControlFlow::smart(),
        ),
        c(
            "pair",
            "Builder and reviewer talk it through until the reviewer is satisfied (chat).",
            "builder",
            Some("reviewer"),
            ControlFlow::chat(),
        ),
        c(
            "plan",
            "The planner studies the project and writes a plan; nothing is changed.",
            "planner",
            None,
            ControlFlow::Hitl,
        ),
    ]
}

/// Loads built-ins, then `user_dir`, then `project_dir` (each `agents/` folder; later wins).
pub fn load_catalog(user_dir: Option<&Path>, project_dir: &Path) -> Catalog {
    let mut catalog = Catalog::default();
    for (file, text) in BUILTIN_AGENTS {
        match parse_markdown(text, Path::new(file), DefSource::BuiltIn) {
            Ok(def) => {
                catalog.agents.insert(def.name.clone(), def);
            }
            Err(e) => catalog.problems.push(format!("built-in {file}: {e}")),
        }
    }
    for def in builtin_compositions() {
        catalog.compositions.insert(def.name.clone(), def);
    }
    if let Some(dir) = user_dir {
        load_dir(&dir.join("agents"), &mut catalog, None);
    }
    // `project_dir` is the project's `.crow`: its files may link within the project only.
    let project = project_dir.parent().unwrap_or(project_dir);
    load_dir(&project_dir.join("agents"), &mut catalog, Some(project));
    catalog
}

/// An agent file larger than this is not one.
const MAX_AGENT_BYTES: u64 = 1024 * 1024;

/// `project` is the project root for the project's folder (its files may not lead out of
/// it, nor be FIFOs or /proc files: `crow_tools::read_confined`), `None` for the user's.
fn load_dir(dir: &Path, catalog: &mut Catalog, project: Option<&Path>) {
    let from_project = project.is_some();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !matches!(ext, "md" | "toml") {
            continue;
        }
        let text = crow_tools::read_confined(&path, project, MAX_AGENT_BYTES)
            .map_err(|e| format!("not read: {e}"))
            .and_then(|bytes| String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned()));
        let text = match text {
            Ok(t) => t,
            Err(why) => {
                catalog.problems.push(format!("{}: {why}", path.display()));
                continue;
            }
        };
        let source = DefSource::File(path.clone());
        let parsed = if ext == "md" {
            parse_markdown(&text, &path, source).map(Def::Agent)
        } else {
            parse_toml(&text, &path, source)
        };
        match parsed {
            Ok(Def::Agent(mut def)) => {
                def.from_project = from_project;
                if let Some(e) = &def.policy_error {
                    catalog.problems.push(format!(
                        "{}: {e}; agent '{}' refuses to run until it is fixed",
                        path.display(),
                        def.name
                    ));
                }
                let unknown = unknown_tools(&def);
                if !unknown.is_empty() {
                    catalog.warnings.push(format!(
                        "{}: tools {} are not crow tools; agent '{}' runs without them",
                        path.display(),
                        unknown.join(", "),
                        def.name
                    ));
                }
                catalog.agents.insert(def.name.clone(), def);
            }
            Ok(Def::Composition(def)) => {
                catalog.compositions.insert(def.name.clone(), def);
            }
            Err(e) => catalog.problems.push(format!("{}: {e}", path.display())),
        }
    }
}

enum Def {
    Agent(AgentDef),
    Composition(CompositionDef),
}

/// `tools:` as Claude Code (`Read, Grep`), a list, or opencode's `{write: false}` map.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ToolsSpec {
    List(Vec<String>),
    Csv(String),
    Map(BTreeMap<String, bool>),
}

/// Frontmatter keys crow reads; others (color, hooks, permissionMode, ...) are ignored so
/// files written for other agents still load.
#[derive(Debug, Default, Deserialize)]
struct Frontmatter {
    name: Option<String>,
    description: Option<String>,
    mode: Option<Mode>,
    model: Option<String>,
    temperature: Option<f32>,
    #[serde(alias = "maxTokens", alias = "maxOutputTokens")]
    max_tokens: Option<u32>,
    #[serde(alias = "reasoningEffort", alias = "effort")]
    reasoning_effort: Option<crow_providers::ReasoningEffort>,
    #[serde(alias = "steps", alias = "maxTurns", alias = "max_steps")]
    max_iterations: Option<u32>,
    #[serde(alias = "doomLoopThreshold")]
    doom_loop_threshold: Option<u32>,
    tools: Option<ToolsSpec>,
    #[serde(alias = "disallowedTools")]
    disallowed_tools: Option<ToolsSpec>,
    /// crow's rules: `{mode, allow, ask, deny}`.
    permissions: Option<serde_json::Value>,
    /// opencode's `permission` map.
    permission: Option<serde_json::Value>,
    /// Claude Code's `permissionMode`.
    #[serde(alias = "permissionMode")]
    permission_mode: Option<String>,
}

fn parse_markdown(text: &str, path: &Path, source: DefSource) -> Result<AgentDef, String> {
    let text = text.trim_start_matches('\u{feff}');
    let (front, body) = match text.strip_prefix("---") {
        Some(rest) => match rest.find("\n---") {
            Some(end) => {
                let after = &rest[end + 4..];
                (
                    &rest[..end],
                    after
                        .strip_prefix('\n')
                        .or_else(|| after.strip_prefix("\r\n"))
                        .unwrap_or(after),
                )
            }
            None => return Err("frontmatter starts with --- but never ends".into()),
        },
        None => ("", text),
    };
    let meta: Frontmatter = if front.trim().is_empty() {
        Frontmatter::default()
    } else {
        serde_yaml_ng::from_str(front).map_err(|e| format!("frontmatter: {e}"))?
    };
    let permissions = rules::RawPermissions {
        own: meta.permissions,
        opencode: meta.permission,
        claude_mode: meta.permission_mode,
    };
    let checked = tools_and_rules(meta.tools, meta.disallowed_tools, permissions, path, text);
    Ok(AgentDef {
        name: meta.name.unwrap_or_else(|| stem(path)),
        description: meta.description.unwrap_or_default(),
        mode: meta.mode.unwrap_or(Mode::All),
        model: meta.model.filter(|m| m != "inherit"),
        temperature: meta.temperature,
        max_tokens: meta.max_tokens,
        reasoning_effort: meta.reasoning_effort,
        max_iterations: meta.max_iterations,
        doom_loop_threshold: meta.doom_loop_threshold,
        tools: checked.tools,
        disallowed_tools: checked.disallowed,
        rules: checked.rules,
        permission_mode: checked.mode,
        from_project: false,
        policy_error: checked.error,
        prompt: body.trim().to_owned(),
        source,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlAgent {
    name: Option<String>,
    description: Option<String>,
    mode: Option<Mode>,
    model: Option<String>,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    reasoning_effort: Option<crow_providers::ReasoningEffort>,
    max_iterations: Option<u32>,
    doom_loop_threshold: Option<u32>,
    tools: Option<ToolsSpec>,
    disallowed_tools: Option<ToolsSpec>,
    permissions: Option<toml::Value>,
    permission: Option<toml::Value>,
    permission_mode: Option<String>,
    prompt: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlComposition {
    name: Option<String>,
    description: Option<String>,
    primary: String,
    coagent: Option<String>,
    /// hitl | loop | static | generated | chat | judge | smart | coagent
    flow: Option<String>,
    /// -1..5, an alternative to `flow`
    level: Option<i8>,
    message: Option<String>,
    generator_prompt: Option<String>,
    coagent_tools: Option<CoagentTools>,
    can_terminate: Option<bool>,
    max_rounds: Option<u32>,
    /// Loop(n): the number of primary → coagent cycles (with `flow = "loop"` and a coagent,
    /// or any coagent flow).
    rounds: Option<u32>,
    handoff: Option<TomlHandoff>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlHandoff {
    text: Option<String>,
    template: Option<String>,
    generator_prompt: Option<String>,
}

fn parse_toml(text: &str, path: &Path, source: DefSource) -> Result<Def, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| flat(&e.to_string()))?;
    if table.contains_key("primary") {
        let raw: TomlComposition = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| flat(&e.to_string()))?;
        let name = raw.name.clone().unwrap_or_else(|| stem(path));
        let flow = flow_of(&raw)?;
        let handoff = match raw.handoff {
            None => Handoff::default(),
            Some(TomlHandoff {
                text: Some(text),
                template: None,
                generator_prompt: None,
            }) => Handoff::Static { text },
            Some(TomlHandoff {
                text: None,
                template: Some(template),
                generator_prompt: None,
            }) => {
                minijinja::Environment::new()
                    .template_from_str(&template)
                    .map_err(|e| format!("handoff.template: {e}"))?;
                Handoff::Template { template }
            }
            Some(TomlHandoff {
                text: None,
                template: None,
                generator_prompt: Some(generator_prompt),
            }) => Handoff::Generated { generator_prompt },
            Some(_) => {
                return Err("handoff: give exactly one of text, template, generator_prompt".into());
            }
        };
        if flow.needs_coagent() && raw.coagent.is_none() {
            let rounds = if raw.rounds.is_some() {
                " with rounds"
            } else {
                ""
            };
            return Err(format!(
                "coagent: flow '{}'{rounds} needs a coagent agent",
                raw.flow.as_deref().unwrap_or("level")
            ));
        }
        // Loop(n)'s rounds are its bound unless a larger one is given.
        let max_rounds = match (raw.max_rounds, flow.fixed_rounds()) {
            (Some(max), Some(rounds)) if max < rounds => {
                return Err(format!(
                    "max_rounds: {max} is below rounds = {rounds}; drop max_rounds or raise it"
                ));
            }
            (Some(max), _) => max,
            (None, rounds) => rounds.unwrap_or(0).max(DEFAULT_MAX_ROUNDS),
        };
        Ok(Def::Composition(CompositionDef {
            name,
            description: raw.description.unwrap_or_default(),
            primary: raw.primary,
            coagent: raw.coagent,
            flow,
            handoff,
            max_rounds,
            source,
        }))
    } else {
        let raw: TomlAgent = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| flat(&e.to_string()))?;
        let json = |v: Option<toml::Value>| v.and_then(|v| serde_json::to_value(v).ok());
        let permissions = rules::RawPermissions {
            own: json(raw.permissions),
            opencode: json(raw.permission),
            claude_mode: raw.permission_mode,
        };
        let checked = tools_and_rules(raw.tools, raw.disallowed_tools, permissions, path, text);
        Ok(Def::Agent(AgentDef {
            name: raw.name.unwrap_or_else(|| stem(path)),
            description: raw.description.unwrap_or_default(),
            mode: raw.mode.unwrap_or(Mode::All),
            model: raw.model.filter(|m| m != "inherit"),
            temperature: raw.temperature,
            max_tokens: raw.max_tokens,
            reasoning_effort: raw.reasoning_effort,
            max_iterations: raw.max_iterations,
            doom_loop_threshold: raw.doom_loop_threshold,
            tools: checked.tools,
            disallowed_tools: checked.disallowed,
            rules: checked.rules,
            permission_mode: checked.mode,
            from_project: false,
            policy_error: checked.error,
            prompt: raw
                .prompt
                .ok_or("prompt: missing (the agent's system prompt)")?,
            source,
        }))
    }
}

fn flow_of(raw: &TomlComposition) -> Result<ControlFlow, String> {
    let flow = base_flow_of(raw)?;
    let Some(n) = raw.rounds else {
        return Ok(flow);
    };
    if n == 0 {
        return Err("rounds: must be at least 1".into());
    }
    match flow {
        // `flow = "loop"` with a coagent is Loop(n): a judge-like reviewer after each round,
        // unless coagent_tools / can_terminate say otherwise.
        ControlFlow::Loop => Ok(ControlFlow::Coagent {
            tools: raw.coagent_tools.unwrap_or(CoagentTools::ReadOnly),
            can_terminate: raw.can_terminate.unwrap_or(true),
            rounds: Some(n),
        }),
        ControlFlow::Coagent {
            tools,
            can_terminate,
            ..
        } => Ok(ControlFlow::Coagent {
            tools,
            can_terminate,
            rounds: Some(n),
        }),
        _ => Err(format!(
            "rounds: flow '{}' has no coagent to review each round (use flow = \"loop\" with a coagent)",
            raw.flow.as_deref().unwrap_or("level")
        )),
    }
}

fn base_flow_of(raw: &TomlComposition) -> Result<ControlFlow, String> {
    if let Some(level) = raw.level {
        return ControlFlow::from_level(level)
            .ok_or_else(|| format!("level: {level} is not in -1..5"));
    }
    Ok(match raw.flow.as_deref().unwrap_or("hitl") {
        "hitl" => ControlFlow::Hitl,
        "loop" => ControlFlow::Loop,
        "static" => ControlFlow::Static {
            message: raw
                .message
                .clone()
                .unwrap_or_else(|| crow_core::crew::DEFAULT_STATIC_NUDGE.into()),
        },
        "generated" => ControlFlow::Generated {
            generator_prompt: raw
                .generator_prompt
                .clone()
                .unwrap_or_else(|| crow_core::crew::DEFAULT_GENERATOR_PROMPT.into()),
        },
        "judge" => ControlFlow::judge(),
        "smart" => ControlFlow::smart(),
        "chat" => ControlFlow::chat(),
        "coagent" => ControlFlow::Coagent {
            tools: raw
                .coagent_tools
                .ok_or("coagent_tools: required for flow 'coagent' (none, read_only, full)")?,
            can_terminate: raw.can_terminate.unwrap_or(false),
            rounds: None,
        },
        other => {
            return Err(format!(
                "flow: unknown '{other}' (expected hitl, loop, static, generated, chat, judge, smart or coagent)"
            ));
        }
    })
}

/// An agent's tool set and permission rules, checked together: pattern entries of its tool
/// lists are rules, not tools.
struct Checked {
    tools: Option<Vec<String>>,
    disallowed: Vec<String>,
    rules: Vec<Rule>,
    mode: Option<crow_core::Mode>,
    error: Option<String>,
}

fn tools_and_rules(
    tools: Option<ToolsSpec>,
    disallowed: Option<ToolsSpec>,
    permissions: rules::RawPermissions,
    path: &Path,
    text: &str,
) -> Checked {
    let source = path.display().to_string();
    let checked = (|| {
        let (tools, mut found) = rules::split_patterns(tools, Action::Allow, true, &source, text)?;
        let (disallowed, deny) =
            rules::split_patterns(disallowed, Action::Deny, false, &source, text)?;
        found.extend(deny);
        let parsed = rules::parse(permissions, &source, text)?;
        found.extend(parsed.rules);
        let (tools, disallowed) = tool_lists(tools, disallowed);
        Ok::<_, String>(Checked {
            tools,
            disallowed,
            rules: found,
            mode: parsed.mode,
            error: None,
        })
    })();
    checked.unwrap_or_else(|error| Checked {
        tools: Some(Vec::new()),
        disallowed: Vec::new(),
        rules: Vec::new(),
        mode: None,
        error: Some(error),
    })
}

fn tool_lists(
    allow: Option<ToolsSpec>,
    deny: Option<ToolsSpec>,
) -> (Option<Vec<String>>, Vec<String>) {
    let mut allowed: Option<Vec<String>> = None;
    let mut denied = Vec::new();
    match allow {
        Some(ToolsSpec::List(list)) => {
            allowed = Some(list.iter().map(|t| canonical_tool(t)).collect())
        }
        Some(ToolsSpec::Csv(csv)) => {
            allowed = Some(
                csv.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(canonical_tool)
                    .collect(),
            );
        }
        // opencode: `{write: false}` turns a tool off, the rest stay on.
        Some(ToolsSpec::Map(map)) => {
            denied.extend(
                map.iter()
                    .filter(|(_, on)| !**on)
                    .map(|(t, _)| canonical_tool(t)),
            );
        }
        None => {}
    }
    match deny {
        Some(ToolsSpec::List(list)) => denied.extend(list.iter().map(|t| canonical_tool(t))),
        Some(ToolsSpec::Csv(csv)) => denied.extend(
            csv.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(canonical_tool),
        ),
        Some(ToolsSpec::Map(map)) => denied.extend(
            map.iter()
                .filter(|(_, on)| **on)
                .map(|(t, _)| canonical_tool(t)),
        ),
        None => {}
    }
    (allowed, denied)
}

/// Maps Claude Code and opencode tool names onto crow's.
pub fn canonical_tool(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    let mapped = match lower.as_str() {
        "read" => "read_file",
        "write" => "write_file",
        "edit" | "multiedit" | "patch" => "edit_file",
        "ls" | "list" => "list_directory",
        "todowrite" => "todo_write",
        // Writing the plan shows it back: the separate reading tool is gone, and an agent
        // file that names it (ours did) keeps a plan.
        "todoread" | "todo_read" => "todo_write",
        "task" | "agent" => "task",
        "webfetch" => "web_fetch",
        // crow's own names, in any case (`Grep`, `Bash`).
        "bash" | "glob" | "grep" | "think" | "read_file" | "write_file" | "edit_file"
        | "list_directory" | "todo_write" | "task_complete" | "web_fetch" | "python" => {
            lower.as_str()
        }
        // Anything else (an MCP tool) keeps its exact name.
        _ => return name.trim().to_owned(),
    };
    mapped.to_owned()
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("agent")
        .to_owned()
}

fn flat(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_load_without_problems() {
        let dir = tempfile::tempdir().unwrap();
        let c = load_catalog(None, dir.path());
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert!(c.agents.contains_key("builder") && c.agents.contains_key("reviewer"));
        assert!(c.agents["planner"].allows("read_file") && !c.agents["planner"].allows("bash"));
        for comp in c.compositions.values() {
            assert!(c.agents.contains_key(&comp.primary), "{}", comp.name);
        }
    }

    #[test]
    fn loop_n_compositions_load_and_bad_ones_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let agents = dir.path().join("agents");
        std::fs::create_dir_all(&agents).unwrap();
        let write = |name: &str, text: &str| std::fs::write(agents.join(name), text).unwrap();
        write(
            "three.toml",
            "primary = \"builder\"\ncoagent = \"reviewer\"\nflow = \"loop\"\nrounds = 3\n",
        );
        write(
            "long.toml",
            "primary = \"builder\"\ncoagent = \"reviewer\"\nflow = \"loop\"\nrounds = 12\ncoagent_tools = \"none\"\ncan_terminate = false\n",
        );
        write(
            "alone.toml",
            "primary = \"builder\"\nflow = \"loop\"\nrounds = 3\n",
        );
        write(
            "nudged.toml",
            "primary = \"builder\"\ncoagent = \"reviewer\"\nflow = \"static\"\nrounds = 3\n",
        );
        write(
            "tight.toml",
            "primary = \"builder\"\ncoagent = \"reviewer\"\nflow = \"loop\"\nrounds = 5\nmax_rounds = 2\n",
        );
        let c = load_catalog(None, dir.path());
        let three = &c.compositions["three"];
        assert_eq!(three.flow, ControlFlow::rounds(3));
        assert_eq!(three.max_rounds, DEFAULT_MAX_ROUNDS);
        let long = &c.compositions["long"];
        assert_eq!(
            long.flow,
            ControlFlow::Coagent {
                tools: CoagentTools::None,
                can_terminate: false,
                rounds: Some(12)
            }
        );
        assert_eq!(long.max_rounds, 12, "the rounds are the bound");
        for (file, field) in [
            ("alone.toml", "coagent"),
            ("nudged.toml", "rounds"),
            ("tight.toml", "max_rounds"),
        ] {
            assert!(
                c.problems
                    .iter()
                    .any(|p| p.contains(file) && p.contains(field)),
                "{file}: {:?}",
                c.problems
            );
        }
    }

    #[test]
    fn claude_and_opencode_files_load_and_bad_files_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let agents = dir.path().join("agents");
        std::fs::create_dir_all(&agents).unwrap();
        std::fs::write(
            agents.join("code-reviewer.md"),
            "---\nname: code-reviewer\ndescription: Reviews code\ntools: Read, Grep, Glob\nmodel: inherit\ncolor: red\n---\nBe strict.\n",
        )
        .unwrap();
        std::fs::write(
            agents.join("docs.md"),
            "---\ndescription: Writes docs\nmode: subagent\ntemperature: 0.1\nmaxTokens: 900\nsteps: 7\ndoomLoopThreshold: 5\ntools:\n  bash: false\n  write: true\n---\nWrite docs.\n",
        )
        .unwrap();
        std::fs::write(
            agents.join("broken.toml"),
            "primary = \"builder\"\nflow = \"judgy\"\n",
        )
        .unwrap();
        std::fs::write(
            agents.join("patient.toml"),
            "prompt = \"Poll the build.\"\ndoom_loop_threshold = 0\n",
        )
        .unwrap();
        std::fs::write(
            agents.join("typo.toml"),
            "prompt = \"x\"\ntempurature = 1\n",
        )
        .unwrap();
        std::fs::write(agents.join("review-loop.toml"), "primary = \"builder\"\ncoagent = \"code-reviewer\"\nlevel = 4\nmax_rounds = 3\n[handoff]\ntemplate = \"Check: {{ task }}\"\n").unwrap();
        let c = load_catalog(None, dir.path());

        let claude = &c.agents["code-reviewer"];
        assert_eq!(
            claude.tools.as_deref().unwrap(),
            ["read_file", "grep", "glob"]
        );
        assert!(claude.model.is_none() && claude.prompt == "Be strict.");
        let opencode = &c.agents["docs"];
        assert_eq!(opencode.mode, Mode::Subagent);
        assert_eq!(opencode.max_iterations, Some(7));
        assert_eq!(opencode.max_tokens, Some(900));
        assert_eq!(opencode.doom_loop_threshold, Some(5));
        assert_eq!(c.agents["patient"].doom_loop_threshold, Some(0));
        assert_eq!(claude.doom_loop_threshold, None);
        assert!(!opencode.allows("bash") && opencode.allows("write_file"));
        let comp = &c.compositions["review-loop"];
        assert_eq!(comp.flow, ControlFlow::judge());
        assert_eq!(comp.max_rounds, 3);

        assert_eq!(c.problems.len(), 2, "{:?}", c.problems);
        assert!(
            c.problems
                .iter()
                .any(|p| p.contains("broken.toml") && p.contains("flow") && p.contains("judgy"))
        );
        assert!(
            c.problems
                .iter()
                .any(|p| p.contains("typo.toml") && p.contains("tempurature"))
        );
    }

    #[test]
    fn a_project_agent_file_leading_out_or_a_fifo_is_a_problem_not_a_hang() {
        let outer = tempfile::tempdir().unwrap();
        let agents = outer.path().join("project/.crow/agents");
        std::fs::create_dir_all(&agents).unwrap();
        std::fs::write(
            outer.path().join("secret.md"),
            "---\ndescription: x\n---\nkey",
        )
        .unwrap();
        std::os::unix::fs::symlink("../../../secret.md", agents.join("leak.md")).unwrap();
        nix::unistd::mkfifo(&agents.join("pipe.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let c = load_catalog(None, &outer.path().join("project/.crow"));
        assert!(!c.agents.contains_key("leak") && !c.agents.contains_key("pipe"));
        let problems = c.problems.join("\n");
        assert!(
            problems.contains("leak.md: not read: it leads outside"),
            "{problems}"
        );
        assert!(
            problems.contains("pipe.md: not read: it is a FIFO"),
            "{problems}"
        );
    }
}
