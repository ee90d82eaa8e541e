//! External ACP agents in a session (`[acp_agents.NAME]`, `--acp NAME`, `acp:NAME` in a
//! composition): the agent as a [`crow_acp::ExternalAgent`] provider behind a `BaseAgent`
//! whose tools are only what crow serves it (`write_file` for its `fs/write_text_file`,
//! `bash` for its terminals, `task_complete`), and the [`ExternalHost`] that answers its reads and permission
//! questions with the session's policy and gate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Result, anyhow};
use async_trait::async_trait;
use crow_acp::{ExternalAgentSpec, ExternalHost};
use crow_core::policy::{Action, CallFacts};
use crow_core::{AgentConfig, BaseAgent};
use crow_core::{PermissionDecision, PermissionGate, PermissionRequest, Policy, ToolKind};

use crate::compose::{Composer, ProviderKey};
use crate::config::AcpAgentConfig;

/// The prefix that names an external agent where an agent name goes (`acp:claude`).
pub const PREFIX: &str = "acp:";

/// An external file read is refused above this size (the agent asked for a text file).
const READ_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// The crow tools an external agent's seat offers it: what its client requests map to
/// (`fs/write_text_file`, `terminal/create`, crow's `task_complete` over MCP).
pub const SERVED_TOOLS: [&str; 3] = ["write_file", "bash", crow_core::TASK_COMPLETE];

/// The external agent's name in an agent name (`acp:NAME`), if it is one.
pub fn external_name(agent: &str) -> Option<&str> {
    agent.strip_prefix(PREFIX).filter(|n| !n.is_empty())
}

/// Where external agents' session ids are kept (`acp-sessions/` in crow's data directory).
pub fn sessions_dir() -> Option<PathBuf> {
    crow_store::default_path().and_then(|db| db.parent().map(|dir| dir.join("acp-sessions")))
}

pub fn spec(name: &str, config: &AcpAgentConfig) -> ExternalAgentSpec {
    ExternalAgentSpec {
        name: name.to_owned(),
        command: config.command.clone(),
        args: config.args.clone(),
        env: config.env.clone(),
        mode: config.mode.clone(),
    }
}

/// What crow serves an external agent: reads confined to the project and judged by the
/// policy like crow's own `read_file`; its permission questions judged by the policy (its
/// rules, its mode, the sensitive places) and then put to the session's gate.
pub struct Host {
    pub agent: String,
    pub cwd: PathBuf,
    pub project_root: PathBuf,
    pub policy: Arc<Policy>,
    pub gate: Arc<dyn PermissionGate>,
}

impl Host {
    fn verdict(&self, facts: &CallFacts) -> crow_core::policy::Verdict {
        self.policy
            .decide_with(facts, self.gate.mode(), &self.gate.rules())
    }
}

#[async_trait]
impl ExternalHost for Host {
    async fn read_text_file(
        &self,
        path: &Path,
        line: Option<u32>,
        limit: Option<u32>,
    ) -> Result<String, String> {
        let path = self.cwd.join(path);
        let facts = CallFacts {
            tool: "read_file".into(),
            kind: Some(ToolKind::Read),
            command: None,
            paths: vec![std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone())],
            command_paths: Vec::new(),
        };
        let verdict = self.verdict(&facts);
        match verdict.action {
            Action::Deny => return Err(format!("crow's policy refuses it: {}", verdict.reason)),
            Action::Ask => {
                let request = PermissionRequest {
                    session_id: String::new(),
                    agent: self.agent.clone(),
                    call_id: String::new(),
                    tool: "read_file".into(),
                    kind: ToolKind::Read,
                    title: format!("{} reads {}", self.agent, path.display()),
                    input: serde_json::json!({ "path": path.display().to_string() }),
                    preview: None,
                    policy: Some(verdict.reason),
                    unconfined: false,
                };
                if let PermissionDecision::Deny { reason } =
                    crow_core::policy::ask(self.gate.as_ref(), request).await
                {
                    return Err(format!("the read was refused: {reason}"));
                }
            }
            Action::Allow => {}
        }
        let bytes = crow_tools::read_confined(&path, Some(&self.project_root), READ_MAX_BYTES)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("{} is not UTF-8 text", path.display()))?;
        Ok(lines(&text, line, limit))
    }

    async fn permission(&self, mut request: PermissionRequest) -> PermissionDecision {
        request.agent = self.agent.clone();
        let facts = facts_of(&request, &self.cwd);
        let verdict = self.verdict(&facts);
        match verdict.action {
            Action::Deny => PermissionDecision::Deny {
                reason: format!("crow's policy refuses it: {}", verdict.reason),
            },
            Action::Allow => {
                self.gate.allowed(&request).await;
                PermissionDecision::Allow
            }
            Action::Ask => {
                request.policy = Some(verdict.reason);
                crow_core::policy::ask(self.gate.as_ref(), request).await
            }
        }
    }
}

/// The policy's view of an agent's own tool call: a command is judged as crow's `bash`, a
/// change as crow's `edit`, by the paths and the command line its input names.
fn facts_of(request: &PermissionRequest, cwd: &Path) -> CallFacts {
    let input = &request.input;
    let text = |key: &str| input.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    let command = (request.kind == ToolKind::Execute)
        .then(|| text("command").or_else(|| text("cmd")))
        .flatten();
    let paths: Vec<PathBuf> = ["path", "file_path", "filePath", "abs_path"]
        .iter()
        .filter_map(|k| text(k))
        .map(|p| cwd.join(p))
        .collect();
    let tool = match request.kind {
        ToolKind::Execute => "bash",
        ToolKind::Edit | ToolKind::Delete | ToolKind::Move => "edit",
        ToolKind::Read | ToolKind::Search => "read_file",
        ToolKind::Fetch => "web_fetch",
        _ => request.tool.as_str(),
    };
    CallFacts {
        tool: tool.to_owned(),
        kind: Some(request.kind),
        command_paths: command
            .as_deref()
            .map(|c| crow_core::policy::command_paths(c, cwd))
            .unwrap_or_default(),
        command,
        paths,
    }
}

impl Composer {
    pub(crate) fn external_config(&self, name: &str) -> Result<&AcpAgentConfig> {
        self.config.acp_agents.get(name).ok_or_else(|| {
            anyhow!(
                "unknown external agent '{name}': add [acp_agents.{name}] with its command to config.toml (crow agents list shows the configured ones)"
            )
        })
    }

    /// An external ACP agent in a seat: its own process and session (one per seat: the
    /// builder and the reviewer are two conversations), offered only the tools crow serves
    /// it — the crew narrows them further for a read-only reviewer, which then cannot
    /// write through crow. Its own tools are its own: crow sees and keeps them, but only
    /// their permission questions and its client requests pass through crow's policy.
    pub(crate) fn external_agent(&self, name: &str, shown: &str) -> Result<BaseAgent> {
        let config = self.external_config(name)?;
        let key: ProviderKey = (format!("{}{name}", PREFIX), shown.to_owned(), None);
        let provider = {
            let mut cache = self
                .providers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let provider = cache.entry(key).or_insert_with(|| {
                let host = Host {
                    agent: shown.to_owned(),
                    cwd: self.cwd.clone(),
                    project_root: self.project_root.clone(),
                    policy: Arc::clone(&self.policy),
                    gate: Arc::clone(&self.permission),
                };
                let agent = crow_acp::ExternalAgent::new(
                    spec(name, config),
                    self.cwd.clone(),
                    Arc::new(host),
                );
                // Its session ids beside crow's database, so a resume loads the agent's own.
                Arc::new(match sessions_dir() {
                    Some(dir) => agent.remembering(dir, shown),
                    None => agent,
                })
            });
            Arc::clone(provider)
        };
        let tools = self.tools.filtered(|t| SERVED_TOOLS.contains(&t.name()));
        let agent = BaseAgent::new(
            shown,
            provider,
            tools,
            String::new(),
            Arc::clone(&self.permission),
            AgentConfig {
                max_iterations: self.max_iterations,
                temperature: None,
                max_tokens: None,
                doom_loop_threshold: self
                    .config
                    .doom_loop_threshold
                    .unwrap_or(crow_core::doom_loop::DEFAULT_THRESHOLD),
                compaction: crow_core::compaction::CompactionConfig::default(),
            },
        )
        .with_policy(Arc::clone(&self.policy));
        Ok(agent)
    }
}

/// A host that serves nothing (`crow agents list` only asks `initialize`).
pub struct Refusing;

#[async_trait]
impl ExternalHost for Refusing {
    async fn read_text_file(
        &self,
        _path: &Path,
        _line: Option<u32>,
        _limit: Option<u32>,
    ) -> Result<String, String> {
        Err("crow is only checking that the agent answers".into())
    }

    async fn permission(&self, _request: PermissionRequest) -> PermissionDecision {
        PermissionDecision::Deny {
            reason: "crow is only checking that the agent answers".into(),
        }
    }
}

/// `line` (1-based) and `limit` of ACP's read.
fn lines(text: &str, line: Option<u32>, limit: Option<u32>) -> String {
    if line.is_none() && limit.is_none() {
        return text.to_owned();
    }
    let skip = line.map_or(0, |l| l.saturating_sub(1) as usize);
    let take = limit.map_or(usize::MAX, |l| l as usize);
    text.split_inclusive('\n').skip(skip).take(take).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_keep_acps_line_and_limit() {
        let text = "a\nb\nc\n";
        assert_eq!(lines(text, None, None), text);
        assert_eq!(lines(text, Some(2), None), "b\nc\n");
        assert_eq!(lines(text, Some(2), Some(1)), "b\n");
        assert_eq!(lines(text, None, Some(1)), "a\n");
    }

    #[test]
    fn an_agents_command_is_judged_as_crows_bash() {
        let request = PermissionRequest {
            session_id: String::new(),
            agent: "claude".into(),
            call_id: "t".into(),
            tool: "Run rm -rf x".into(),
            kind: ToolKind::Execute,
            title: "Run".into(),
            input: serde_json::json!({"command": "rm -rf x"}),
            preview: None,
            policy: None,
            unconfined: false,
        };
        let facts = facts_of(&request, Path::new("/p"));
        assert_eq!(facts.tool, "bash");
        assert_eq!(facts.command.as_deref(), Some("rm -rf x"));
        let edit = PermissionRequest {
            kind: ToolKind::Edit,
            input: serde_json::json!({"file_path": "src/a.rs"}),
            ..request
        };
        let facts = facts_of(&edit, Path::new("/p"));
        assert_eq!(facts.tool, "edit");
        assert_eq!(facts.paths, vec![PathBuf::from("/p/src/a.rs")]);
    }

    fn host(root: &Path) -> Host {
        Host {
            agent: "acp:x".into(),
            cwd: root.to_path_buf(),
            project_root: root.to_path_buf(),
            policy: Arc::new(Policy::new(crow_core::Mode::FullAuto, root)),
            gate: Arc::new(crow_core::AllowAll),
        }
    }

    /// What an external agent reads through crow stays in the project, as crow's own reads do:
    /// a symlink out, `..` and an absolute path elsewhere are refused.
    #[tokio::test]
    async fn an_agents_reads_cannot_leave_the_project() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.txt");
        std::fs::write(&secret, "the user's secret\n").unwrap();
        let project = tempfile::tempdir().unwrap();
        let root = project.path();
        std::fs::write(root.join("a.txt"), "one\ntwo\n").unwrap();
        std::os::unix::fs::symlink(&secret, root.join("link.txt")).unwrap();
        let host = host(root);
        let read = |p: &str| {
            let host = &host;
            let p = PathBuf::from(p);
            async move { host.read_text_file(&p, None, None).await }
        };
        assert_eq!(read("a.txt").await.unwrap(), "one\ntwo\n");
        for escape in [
            "link.txt".to_owned(),
            format!(
                "../{}/secret.txt",
                outside.path().file_name().unwrap().to_string_lossy()
            ),
            secret.display().to_string(),
        ] {
            let refused = read(&escape).await;
            assert!(refused.is_err(), "{escape} was read: {refused:?}");
            assert!(!format!("{refused:?}").contains("the user's secret"));
        }
    }

    #[test]
    fn only_acp_prefixed_names_are_external() {
        assert_eq!(external_name("acp:claude"), Some("claude"));
        assert_eq!(external_name("acp:"), None);
        assert_eq!(external_name("build"), None);
    }
}
