//! The permission policy: one engine every front end uses, consulted by the loop before each
//! tool call (`agent.rs`, `run_tools`). It answers [`Action::Allow`], [`Action::Ask`] or
//! [`Action::Deny`] for a call described by [`CallFacts`] (tool, kind, command, resolved paths).
//!
//! Order of decision, per command segment or path:
//! 1. a matching `deny` rule denies (deny beats everything);
//! 2. otherwise the most specific matching `allow`/`ask` rule decides (a rule with a pattern
//!    beats one without; then more literal characters in the pattern, then in the tool glob;
//!    on a tie `ask` beats `allow`);
//! 3. otherwise the mode's default for the tool's kind.
//!
//! A compound command (`a && b; c | d`, `a |& b`) is split into segments; the strictest
//! segment decides, so `allow = ["bash(git status*)"]` does not allow `git status && rm -rf
//! x`. The commands inside substitutions (`$(..)`, backticks, `<(..)`, `>(..)`) are segments
//! too, and a command holding one (or `${..}` beyond a plain name, or `coproc`) is never
//! allowed by a rule. An allow rule matches a segment's text as written; deny and ask rules
//! also match it normalised (`shell::normalise`: quotes removed, wrappers such as `sudo` or
//! `env` peeled, the program's basename, single-letter flags un-bundled and sorted), so they
//! match more spellings, never fewer. Last, a sensitive path turns an Allow into Ask: crow's
//! own config and data, `~/.ssh`, `.env` files outside the project, as a command's words read
//! after quote removal (a glob word by what it may match), and for the file tools' writes the
//! project's git directories and policy files ([`PROJECT_POLICY`]).
//!
//! The types: `Mode` (read-only, ask, auto-edit, full-auto), `Rule` (`tool` or `tool(pattern)`,
//! allow/ask/deny, with its file and line), `Policy::decide(CallFacts, mode)` giving a `Verdict`. A
//! `fallback` rule (an opencode pattern map's `"*"`) competes on specificity even when it denies;
//! `floor` is an agent definition's mode, which nothing loosens.
//!
//! `consult` is the loop's policy point in `run_tools`, after the call-order wait and before
//! `execute`, so a mutating tool that forgets to ask is still asked about: Deny is an error result
//! naming the rule (the tool never runs); Allow gives the tool a pre-approved gate (its own
//! question is not put to the user; the front end hears `PermissionGate::allowed`); Ask puts the
//! tool's own question (with its preview, `Tool::asks_permission`), marked
//! `PermissionRequest.policy` so no approval level answers it, or the loop's question for a tool
//! that does not ask. A question a tool marks with `policy` itself (a command that would run
//! unconfined) is never pre-approved. The front end's gate may supply the mode
//! (`PermissionGate::mode`: ACP's approve selector) and rules learned in the session
//! (`PermissionGate::rules`: an "always" kept for the project), judged with the configured ones
//! (`decide_with`).
//!
//! Submodules: `shell.rs` (splitting, `substitutes`, `normalise`, the commands nested in
//! substitutions, `sh -c` and `eval`, judged too up to depth 4), `paths.rs` (the paths a command
//! names), `project.rs` (`PROJECT_POLICY` and the file tools' sensitive writes: any git dir, by a
//! `.git` component or a `HEAD` + `objects` dir on the way), `suggest.rs` (`suggest_rule`:
//! `bash(git status*)`, `write_file(src/a.rs)`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

mod glob;
mod paths;
mod project;
mod reads;
mod session;
mod shell;
mod suggest;

pub use paths::{Expansion, NamedPath, command_paths};
pub use project::PROJECT_POLICY;
pub use reads::reads_only;
pub use session::SessionRules;
pub use shell::{inner_commands, split_command, substitutes};
pub use suggest::suggest_rule;

use crate::hooks::HookPermission;
use crate::tool::{
    Footprint, PermissionDecision, PermissionGate, PermissionPreview, PermissionRequest, Tool,
    ToolContext, ToolKind, ToolResult,
};

/// How much runs without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// No edits, no commands: mutating calls are denied.
    ReadOnly,
    /// Edits and commands ask.
    #[default]
    Ask,
    /// Edits inside the project run; commands ask.
    AutoEdit,
    /// Everything runs (commands inside the OS sandbox).
    FullAuto,
}

impl Mode {
    pub const NAMES: [&'static str; 4] = ["read-only", "ask", "auto-edit", "full-auto"];

    pub fn parse(name: &str) -> Option<Mode> {
        match name {
            "read-only" => Some(Mode::ReadOnly),
            "ask" => Some(Mode::Ask),
            "auto-edit" => Some(Mode::AutoEdit),
            "full-auto" => Some(Mode::FullAuto),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::Ask => "ask",
            Mode::AutoEdit => "auto-edit",
            Mode::FullAuto => "full-auto",
        }
    }

    /// Strictness order, for "a project may only tighten": read-only is the strictest.
    pub fn strictness(self) -> u8 {
        match self {
            Mode::ReadOnly => 3,
            Mode::Ask => 2,
            Mode::AutoEdit => 1,
            Mode::FullAuto => 0,
        }
    }
}

/// What the policy says about a call. Ordered by severity: Allow < Ask < Deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Allow,
    Ask,
    Deny,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Ask => "ask",
            Action::Deny => "deny",
        }
    }
}

/// One rule: `tool` or `tool(pattern)`; the tool part is a glob over tool names
/// (`mcp__server__*`), the pattern a command glob (`*` matches anything) for commands or a
/// path glob (`*` within a segment, `**` across) for file tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub action: Action,
    pub tool: String,
    pub pattern: Option<String>,
    /// Where the rule was written (file and line), shown when it decides.
    pub source: String,
    /// A catch-all of a pattern map (opencode's `"*": "deny"` beside `"git *": "allow"`):
    /// it competes on specificity even when it denies, so the map's own entries beat it.
    pub fallback: bool,
}

/// A rule that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid permission rule '{text}': {problem}")]
pub struct RuleError {
    pub text: String,
    pub problem: String,
}

impl Rule {
    /// Parses `tool`, `tool(pattern)` (Claude Code's syntax: `Bash(npm run test:*)` works,
    /// `Bash`/`Read`/`Edit`/`Write` name crow's tools, a trailing `:*` means a prefix).
    pub fn parse(action: Action, text: &str, source: impl Into<String>) -> Result<Rule, RuleError> {
        let err = |problem: &str| RuleError {
            text: text.to_owned(),
            problem: problem.to_owned(),
        };
        let trimmed = text.trim();
        let (tool, pattern) = match trimmed.find('(') {
            None => (trimmed, None),
            Some(open) => {
                let Some(inner) = trimmed[open + 1..].strip_suffix(')') else {
                    return Err(err("a pattern must end with ')'"));
                };
                let inner = inner.trim();
                if inner.is_empty() {
                    return Err(err("the pattern in '()' is empty"));
                }
                let inner = match inner.strip_suffix(":*") {
                    Some(prefix) => format!("{prefix}*"),
                    None => inner.to_owned(),
                };
                (trimmed[..open].trim(), Some(inner))
            }
        };
        if tool.is_empty() {
            return Err(err("no tool name"));
        }
        if !tool
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*' | '?'))
        {
            return Err(err(
                "a tool name may hold letters, digits, '_', '-' and the wildcards '*', '?'",
            ));
        }
        let tool = match tool {
            "Bash" => "bash",
            "Read" => "read_file",
            "Edit" => "edit_file",
            "Write" => "write_file",
            other => other,
        };
        Ok(Rule {
            action,
            tool: tool.to_owned(),
            pattern,
            source: source.into(),
            fallback: false,
        })
    }

    /// `allow bash(git status*)`, as a denial quotes it.
    pub fn describe(&self) -> String {
        let body = match &self.pattern {
            Some(p) => format!("{}({p})", self.tool),
            None => self.tool.clone(),
        };
        if self.source.is_empty() {
            format!("{} {body}", self.action.name())
        } else {
            format!("{} {body} ({})", self.action.name(), self.source)
        }
    }

    fn specificity(&self) -> (bool, usize, usize) {
        let literal = |s: &str| s.chars().filter(|c| !matches!(c, '*' | '?')).count();
        (
            self.pattern.is_some(),
            self.pattern.as_deref().map_or(0, literal),
            literal(&self.tool),
        )
    }
}

/// What the loop knows of a call before it runs.
#[derive(Debug, Clone, Default)]
pub struct CallFacts {
    pub tool: String,
    pub kind: Option<ToolKind>,
    /// The command line, for commands.
    pub command: Option<String>,
    /// Files the call reads or writes (absolute, resolved).
    pub paths: Vec<PathBuf>,
    /// Paths a command's words name, as written (made absolute) and resolved: only the
    /// sensitive-place check reads them (rules match the command line).
    pub command_paths: Vec<paths::NamedPath>,
}

/// The policy's answer, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub action: Action,
    /// Human-readable: the rule, the mode, or the sensitive path that decided.
    pub reason: String,
}

/// Modes, rules and sensitive places; cheap to share (`Arc`).
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub mode: Mode,
    pub rules: Vec<Rule>,
    pub project_root: PathBuf,
    /// Directories (or single files) whose contents always ask (crow's config and data,
    /// `~/.ssh`, the project's own policy files).
    pub sensitive_dirs: Vec<PathBuf>,
    /// The strictest mode an agent definition sets: neither the configured mode nor a front
    /// end's choice loosens it.
    pub floor: Option<Mode>,
}

impl Policy {
    pub fn new(mode: Mode, project_root: impl Into<PathBuf>) -> Self {
        Self {
            mode,
            project_root: project_root.into(),
            ..Self::default()
        }
    }

    /// The decision for a call, with `mode` standing for the configured one when a front end
    /// chose another (ACP's approve selector).
    pub fn decide(&self, facts: &CallFacts, mode: Option<Mode>) -> Verdict {
        self.decide_with(facts, mode, &[])
    }

    /// [`Policy::decide`] with `extra` rules beside the configured ones: those the front end
    /// learned while the session runs (an "always" answer saved to the project).
    pub fn decide_with(&self, facts: &CallFacts, mode: Option<Mode>, extra: &[Rule]) -> Verdict {
        let mode = mode.unwrap_or(self.mode);
        let mode = match self.floor {
            Some(floor) if floor.strictness() > mode.strictness() => floor,
            _ => mode,
        };
        let rules: Vec<&Rule> = self.rules.iter().chain(extra).collect();
        let kind = effective_kind(&facts.tool, facts.kind);
        let mut verdicts = Vec::new();
        if let Some(command) = &facts.command {
            let substitution = substitutes(command);
            for segment in command_segments(command) {
                let normal = shell::normalise(&segment);
                let subject = Subject::Command {
                    text: &segment,
                    normal: &normal,
                };
                let mut v = self.judge(&rules, facts, kind, mode, subject);
                if substitution && v.action == Action::Allow && !self.mode_allows(kind, mode) {
                    v = Verdict {
                        action: Action::Ask,
                        reason: "the command runs commands a rule cannot see ($(..), \
                                 backticks, <(..), >(..), ${..} beyond a name, coproc), which \
                                 no allow rule covers"
                            .into(),
                    };
                }
                verdicts.push(v);
            }
        }
        for path in &facts.paths {
            verdicts.push(self.judge(&rules, facts, kind, mode, Subject::Path(path)));
        }
        if verdicts.is_empty() {
            verdicts.push(self.judge(&rules, facts, kind, mode, Subject::Nothing));
        }
        // The strictest part decides; among equals the first (a rule before a mode default).
        let mut verdict = verdicts
            .into_iter()
            .reduce(|a, b| if b.action > a.action { b } else { a })
            .unwrap_or(Verdict {
                action: Action::Ask,
                reason: "nothing decided".into(),
            });
        if verdict.action == Action::Allow
            && let Some(what) = self.sensitive(facts, kind)
        {
            verdict = Verdict {
                action: Action::Ask,
                reason: format!("{what} is sensitive and always asks"),
            };
        }
        verdict
    }

    fn mode_allows(&self, kind: ToolKind, mode: Mode) -> bool {
        mode == Mode::FullAuto || !kind.mutates()
    }

    fn judge(
        &self,
        rules: &[&Rule],
        facts: &CallFacts,
        kind: ToolKind,
        mode: Mode,
        subject: Subject,
    ) -> Verdict {
        let relative = match subject {
            Subject::Path(p) => p
                .strip_prefix(&self.project_root)
                .ok()
                .map(Path::to_path_buf),
            _ => None,
        };
        let matches = |rule: &Rule| {
            if !wildcard(&rule.tool, &facts.tool, false) {
                return false;
            }
            match (&rule.pattern, subject) {
                (None, _) => true,
                (Some(p), Subject::Command { text, normal }) => {
                    wildcard(p, text, false)
                        || (rule.action != Action::Allow && matches_normalised(p, normal))
                }
                (Some(p), Subject::Path(path)) => {
                    let absolute = path.to_string_lossy();
                    wildcard(p, &absolute, true)
                        || relative
                            .as_ref()
                            .is_some_and(|r| wildcard(p, &r.to_string_lossy(), true))
                }
                (Some(_), Subject::Nothing) => false,
            }
        };
        if let Some(rule) = rules
            .iter()
            .find(|r| r.action == Action::Deny && !r.fallback && matches(r))
        {
            return Verdict {
                action: Action::Deny,
                reason: format!("denied by the rule {}", rule.describe()),
            };
        }
        let best = rules
            .iter()
            .filter(|r| (r.action != Action::Deny || r.fallback) && matches(r))
            .max_by(|a, b| {
                a.specificity()
                    .cmp(&b.specificity())
                    .then(a.action.cmp(&b.action))
            });
        if let Some(rule) = best {
            let verb = match rule.action {
                Action::Allow => "allowed",
                Action::Ask => "asks",
                Action::Deny => "denied",
            };
            return Verdict {
                action: rule.action,
                reason: format!("{verb} by the rule {}", rule.describe()),
            };
        }
        let inside = match subject {
            Subject::Path(p) => p.starts_with(&self.project_root),
            _ => true,
        };
        let action = match (mode, kind.mutates()) {
            // A fetch sends a URL (and whatever it carries) off the machine: only full-auto
            // or a rule lets it go without asking.
            (Mode::FullAuto, _) if kind == ToolKind::Fetch => Action::Allow,
            (_, false) if kind == ToolKind::Fetch => Action::Ask,
            (_, false) => Action::Allow,
            (Mode::FullAuto, true) => Action::Allow,
            (Mode::ReadOnly, true) => Action::Deny,
            (Mode::Ask, true) => Action::Ask,
            (Mode::AutoEdit, true) => {
                let edit = matches!(kind, ToolKind::Edit | ToolKind::Delete | ToolKind::Move);
                if edit && inside && facts.command.is_none() {
                    Action::Allow
                } else {
                    Action::Ask
                }
            }
        };
        Verdict {
            action,
            reason: format!("the permission mode is {}", mode.name()),
        }
    }

    /// The sensitive place the call touches, if any.
    fn sensitive(&self, facts: &CallFacts, kind: ToolKind) -> Option<String> {
        // A file tool's write to the project's policy or git (a command's writes are the
        // sandbox's: it keeps them read-only).
        let file_write = facts.command.is_none()
            && matches!(kind, ToolKind::Edit | ToolKind::Delete | ToolKind::Move);
        if file_write
            && let Some(what) = facts
                .paths
                .iter()
                .find_map(|p| project::sensitive_write(p, &self.project_root))
        {
            return Some(what);
        }
        for path in &facts.paths {
            if let Some(dir) = self.sensitive_dirs.iter().find(|d| path.starts_with(d)) {
                return Some(format!("{} (under {})", path.display(), dir.display()));
            }
            let is_env = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == ".env" || n.starts_with(".env."));
            if is_env && !path.starts_with(&self.project_root) {
                return Some(format!(
                    "{} (a .env file outside the project)",
                    path.display()
                ));
            }
        }
        for named in &facts.command_paths {
            if let Some(what) =
                paths::sensitive_word(named, &self.project_root, &self.sensitive_dirs)
            {
                return Some(what);
            }
        }
        // Naming a sensitive place anywhere is enough to ask: in the text as written, and
        // as the shell reads it (`.ss''h` is `.ssh`).
        let command = facts.command.as_deref()?;
        let read: Vec<String> = shell::words(command)
            .iter()
            .map(shell::Word::text)
            .collect();
        let read = read.join(" ");
        for text in [command, read.as_str()] {
            if text.contains(".ssh") {
                return Some("a command naming .ssh".into());
            }
            if let Some(dir) = self
                .sensitive_dirs
                .iter()
                .find(|d| text.contains(&*d.to_string_lossy()))
            {
                return Some(format!("a command naming {}", dir.display()));
            }
        }
        None
    }
}

/// The loop's consultation of the policy for one call, right before it runs: `Err` is the
/// error result of a denied call; `Ok` the gate the tool gets (pre-approved when the policy
/// allows, the front end's own when it asks and the tool asks itself). Whenever the policy
/// asks, an "always" the session already gave ([`SessionRules`]) answers first ([`ask`]).
pub async fn consult(
    policy: &Policy,
    tool: &dyn Tool,
    input: &serde_json::Value,
    ctx: &ToolContext,
    footprint: &Footprint,
    hook: Option<&HookPermission>,
) -> Result<Arc<dyn PermissionGate>, ToolResult> {
    let kind = tool.kind();
    let command = (kind == ToolKind::Execute)
        .then(|| {
            input
                .get("command")
                .and_then(|c| c.as_str())
                .map(str::to_owned)
        })
        .flatten();
    let paths = match footprint {
        Footprint::Reads(paths) | Footprint::Writes(paths) => paths.clone(),
        Footprint::Nothing | Footprint::Anything => Vec::new(),
    };
    let command_paths = command
        .as_deref()
        .map(|c| paths::command_paths(c, &ctx.cwd))
        .unwrap_or_default();
    let facts = CallFacts {
        tool: tool.name().to_owned(),
        kind: Some(kind),
        command,
        paths,
        command_paths,
    };
    let inner = Arc::clone(&ctx.permission);
    let verdict = policy.decide_with(&facts, inner.mode(), &inner.rules());
    let verdict = with_hook(verdict, hook, || {
        policy.decide_with(&facts, Some(Mode::FullAuto), &inner.rules())
    });
    tracing::debug!(tool = %facts.tool, action = verdict.action.name(), reason = %verdict.reason, "policy");
    match verdict.action {
        Action::Deny => Err(ToolResult::error(format!(
            "permission denied: {}. Do not retry this call; do something else or ask the user.",
            verdict.reason
        ))),
        Action::Allow => Ok(Arc::new(PreApproved { inner })),
        Action::Ask if tool.asks_permission() => Ok(Arc::new(PolicyAsks {
            inner,
            reason: verdict.reason,
        })),
        Action::Ask => {
            let request = PermissionRequest {
                session_id: ctx.session_id.clone(),
                agent: ctx.agent.clone(),
                call_id: ctx.call_id.clone(),
                tool: facts.tool.clone(),
                kind,
                title: format!("{} ({})", facts.tool, verdict.reason),
                input: input.clone(),
                preview: None,
                policy: Some(verdict.reason),
                unconfined: false,
            };
            match ask(inner.as_ref(), request).await {
                PermissionDecision::Allow => Ok(Arc::new(PreApproved { inner })),
                PermissionDecision::Deny { reason } => Err(ToolResult::error(format!(
                    "permission denied: {reason}. Do not retry the same call."
                ))),
            }
        }
    }
}

/// A `PreToolUse` hook's answer over the policy's verdict: a hook may make a call ask that
/// would have run, or run one the mode alone would have asked about (its allow counts as the
/// full-auto mode for this call), never run one that a rule denies or asks about or that
/// touches a sensitive place.
fn with_hook(
    verdict: Verdict,
    hook: Option<&HookPermission>,
    full_auto: impl FnOnce() -> Verdict,
) -> Verdict {
    match (hook, verdict.action) {
        (_, Action::Deny) | (None, _) => verdict,
        (Some(HookPermission::Deny { reason }), _) => Verdict {
            action: Action::Deny,
            reason: format!("a PreToolUse hook denied it ({reason})"),
        },
        (Some(HookPermission::Ask { reason }), _) => Verdict {
            action: Action::Ask,
            reason: format!("a PreToolUse hook asks ({reason})"),
        },
        (Some(HookPermission::Allow { .. }), Action::Allow) => verdict,
        (Some(HookPermission::Allow { reason }), Action::Ask) => match full_auto().action {
            Action::Allow => Verdict {
                action: Action::Allow,
                reason: format!("a PreToolUse hook allowed it ({reason})"),
            },
            _ => verdict,
        },
    }
}

/// Puts `request` to the front end's `gate`, unless the session already answered it
/// "always" (the gate's [`PermissionGate::session_rules`]: a remembered yes is reported to the
/// gate as [`PermissionGate::allowed`]). What the policy point does when the policy asks; a
/// runner that asks a gate itself, with no policy, asks through it too.
pub async fn ask(gate: &dyn PermissionGate, request: PermissionRequest) -> PermissionDecision {
    if let Some(decision) = gate
        .session_rules()
        .and_then(|rules| rules.answer(&request))
    {
        if decision == PermissionDecision::Allow {
            gate.allowed(&request).await;
        }
        return decision;
    }
    gate.check(request).await
}

/// The policy allowed the call: the tool's own question is answered without asking, unless
/// the tool insists (`PermissionRequest.policy` set, or `unconfined`: it would run without
/// the sandbox).
struct PreApproved {
    inner: Arc<dyn PermissionGate>,
}

#[async_trait]
impl PermissionGate for PreApproved {
    async fn check(&self, request: PermissionRequest) -> PermissionDecision {
        if request.policy.is_some() || request.unconfined {
            return ask(self.inner.as_ref(), request).await;
        }
        self.inner.allowed(&request).await;
        PermissionDecision::Allow
    }

    fn mode(&self) -> Option<Mode> {
        self.inner.mode()
    }

    fn rules(&self) -> Vec<Rule> {
        self.inner.rules()
    }

    fn session_rules(&self) -> Option<Arc<SessionRules>> {
        self.inner.session_rules()
    }
}

/// The policy asks: the tool's question (with its preview) goes to the front end, marked so
/// that its approval level cannot answer it in the user's place.
struct PolicyAsks {
    inner: Arc<dyn PermissionGate>,
    reason: String,
}

#[async_trait]
impl PermissionGate for PolicyAsks {
    async fn check(&self, mut request: PermissionRequest) -> PermissionDecision {
        if request.policy.is_none() {
            request.policy = Some(self.reason.clone());
        }
        ask(self.inner.as_ref(), request).await
    }

    fn mode(&self) -> Option<Mode> {
        self.inner.mode()
    }

    fn rules(&self) -> Vec<Rule> {
        self.inner.rules()
    }

    fn session_rules(&self) -> Option<Arc<SessionRules>> {
        self.inner.session_rules()
    }

    async fn allowed(&self, request: &PermissionRequest) {
        self.inner.allowed(request).await;
    }
}

#[derive(Clone, Copy)]
enum Subject<'a> {
    /// A simple command: as written, and [`shell::normalise`]d.
    Command {
        text: &'a str,
        normal: &'a [String; 2],
    },
    Path(&'a Path),
    Nothing,
}

/// MCP tools without annotations (kind Other) may do anything: they count as commands.
fn effective_kind(tool: &str, kind: Option<ToolKind>) -> ToolKind {
    match kind {
        Some(ToolKind::Other) | None if tool.starts_with("mcp__") => ToolKind::Execute,
        Some(kind) => kind,
        None => ToolKind::Other,
    }
}

/// The simple commands a rule judges: the command line's segments, then those of every
/// command it runs from text (`echo $(rm -rf x)`, `sh -c 'rm -rf x'`, `eval rm -rf x`).
fn command_segments(command: &str) -> Vec<String> {
    let mut segments = Vec::new();
    add_segments(command, &mut segments, 0);
    segments
}

/// Adds `command`'s segments and, to a bounded depth, those of the commands it carries.
fn add_segments(command: &str, segments: &mut Vec<String>, depth: usize) {
    for segment in split_command(command) {
        if segment.is_empty() {
            continue;
        }
        segments.push(segment.to_owned());
        if depth < 4
            && let Some(script) = shell::script_of(segment)
        {
            add_segments(&script, segments, depth + 1);
        }
    }
    if depth < 4 {
        for inner in inner_commands(command) {
            add_segments(&inner, segments, depth + 1);
        }
    }
}

/// Whether a deny or ask rule's `pattern` matches a command in a spelling the text missed:
/// the pattern, as written or normalised the same way, against either normalised spelling
/// of the command (so `rm -rf *` meets `sudo /bin/rm -r -f x`); a pattern ending in ` *`
/// also matches nothing there (`rm -rf`).
fn matches_normalised(pattern: &str, normal: &[String; 2]) -> bool {
    let [inline, hoisted] = shell::normalise(pattern);
    let candidates = [
        (pattern, &normal[0]),
        (pattern, &normal[1]),
        (inline.as_str(), &normal[0]),
        (hoisted.as_str(), &normal[1]),
    ];
    candidates.iter().any(|(p, text)| {
        wildcard(p, text, false)
            || p.strip_suffix(" *")
                .is_some_and(|p| wildcard(p, text, false))
    })
}

/// Glob matching: `?` one character, `*` any run; with `path`, `*` and `?` stay within a
/// segment and `**` crosses segments (`src/**` matches `src/a/b.rs`; `**/x` matches `x`).
///
/// Linear in the text: the pattern is read as a small automaton whose live states are
/// carried along the text together, so a rule of many `*` (an untrusted project's deny rules
/// apply too) costs at most `2·(pattern+1)·(text+1)` steps, never a backtracking search.
pub fn wildcard(pattern: &str, text: &str, path: bool) -> bool {
    glob::matches(pattern, text, path, &mut 0)
}

/// What an "always" answer covers: `bash(PROGRAM)` for a simple command, `TOOL(PATH)` for an
/// edit, else the tool; `None` for a command "always" must not cover (compound, or running
/// another command's output), which is asked about every time.
pub fn always_key(request: &PermissionRequest) -> Option<String> {
    let command = match &request.preview {
        Some(PermissionPreview::Command { command, .. }) => Some(command.as_str()),
        _ if request.kind == ToolKind::Execute => {
            request.input.get("command").and_then(|c| c.as_str())
        }
        _ => None,
    };
    if let Some(command) = command {
        let segments = split_command(command);
        if segments.len() != 1 || substitutes(command) {
            return None;
        }
        let program = segments.first()?.split_whitespace().next()?;
        return Some(format!("{}({program})", request.tool));
    }
    let path = match &request.preview {
        Some(PermissionPreview::Edit(edit)) => Some(edit.path.display().to_string()),
        _ => request
            .input
            .get("path")
            .and_then(|p| p.as_str())
            .map(str::to_owned),
    };
    Some(match path {
        Some(path) => format!("{}({path})", request.tool),
        None => request.tool.clone(),
    })
}

#[cfg(test)]
mod tests;
