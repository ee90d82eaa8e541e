//! Server configuration: the `[mcp_servers.NAME]` TOML shape (Codex-like), the project's
//! `.mcp.json` (`mcpServers`, Claude Code's format), and the normalised [`McpServerConfig`]
//! every front end (CLI, ACP) hands to the manager.
//!
//! `McpServerEntry` is also used to write `.mcp.json` entries into a config layer. `parse_mcp_json`
//! expands `${VAR:-default}`. Defaults: startup 30 s, tool call 60 s; allow and deny lists filter a
//! server's tools.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Startup bound when the config names none: long enough for `npx`/`uvx` with a warm cache.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one tool call when the config names none (rmcp has no default; Codex uses 60 s).
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// A problem with one server's configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("mcp server '{server}': {message}")]
    Invalid { server: String, message: String },
    #[error("cannot parse {file}: {message}")]
    Parse { file: String, message: String },
}

fn invalid(server: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        server: server.to_owned(),
        message: message.into(),
    }
}

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        /// Working directory; the session's cwd when unset.
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        /// Environment variable holding a bearer token (sent as `Authorization: Bearer ...`).
        bearer_token_env_var: Option<String>,
    },
    /// The legacy HTTP+SSE transport (`type = "sse"`): GET `url` for the event stream, POST
    /// to the endpoint it names.
    Sse {
        url: String,
        headers: BTreeMap<String, String>,
        bearer_token_env_var: Option<String>,
    },
}

impl McpTransport {
    /// A url server's URL, headers and token variable.
    pub fn remote(&self) -> Option<(&str, &BTreeMap<String, String>, Option<&str>)> {
        match self {
            McpTransport::Http {
                url,
                headers,
                bearer_token_env_var,
            }
            | McpTransport::Sse {
                url,
                headers,
                bearer_token_env_var,
            } => Some((url, headers, bearer_token_env_var.as_deref())),
            McpTransport::Stdio { .. } => None,
        }
    }
}

/// One server, normalised from whichever config format named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    pub name: String,
    pub transport: McpTransport,
    pub enabled: bool,
    pub startup_timeout: Duration,
    pub tool_timeout: Duration,
    /// When set, only these tools (by their MCP name) are exposed.
    pub enabled_tools: Option<Vec<String>>,
    /// Tools never exposed (applied after `enabled_tools`).
    pub disabled_tools: Vec<String>,
}

impl McpServerConfig {
    /// A stdio server with default settings (what ACP clients and tests mostly need).
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: Vec<String>) -> Self {
        Self::with_transport(
            name,
            McpTransport::Stdio {
                command: command.into(),
                args,
                env: BTreeMap::new(),
                cwd: None,
            },
        )
    }

    /// A streamable-HTTP server with default settings.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::with_transport(
            name,
            McpTransport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
                bearer_token_env_var: None,
            },
        )
    }

    /// A legacy HTTP+SSE server with default settings.
    pub fn sse(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::with_transport(
            name,
            McpTransport::Sse {
                url: url.into(),
                headers: BTreeMap::new(),
                bearer_token_env_var: None,
            },
        )
    }

    pub fn with_transport(name: impl Into<String>, transport: McpTransport) -> Self {
        Self {
            name: name.into(),
            transport,
            enabled: true,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            tool_timeout: DEFAULT_TOOL_TIMEOUT,
            enabled_tools: None,
            disabled_tools: Vec::new(),
        }
    }

    /// Whether the server's tool `tool` (MCP name) passes the allow/deny lists.
    pub fn exposes(&self, tool: &str) -> bool {
        self.enabled_tools
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|t| t == tool))
            && !self.disabled_tools.iter().any(|t| t == tool)
    }
}

/// `[mcp_servers.NAME]` as written in crow's config.toml. Every field is optional so config
/// layers can be partial; [`McpServerEntry::resolve`] checks the merged entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerEntry {
    /// Transport: `stdio` (with `command`), `http` (streamable HTTP, the default with `url`)
    /// or `sse` (the legacy HTTP+SSE transport, with `url`).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Program of a stdio server.
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// URL of a streamable-HTTP server.
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    pub bearer_token_env_var: Option<String>,
    pub enabled: Option<bool>,
    pub startup_timeout_sec: Option<f64>,
    pub tool_timeout_sec: Option<f64>,
    pub enabled_tools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled_tools: Vec<String>,
}

impl McpServerEntry {
    /// Checks the entry (exactly one transport, sane timeouts, a usable name).
    pub fn resolve(&self, name: &str) -> Result<McpServerConfig, ConfigError> {
        check_server_name(name)?;
        let transport = match (&self.command, &self.url) {
            (Some(command), None) => {
                if self.kind.as_deref().is_some_and(|k| k != "stdio") {
                    return Err(invalid(
                        name,
                        "a `command` server has type \"stdio\"; http and sse servers take `url`",
                    ));
                }
                if !self.headers.is_empty() || self.bearer_token_env_var.is_some() {
                    return Err(invalid(
                        name,
                        "headers and bearer_token_env_var apply to `url` servers, not `command` ones",
                    ));
                }
                if command.trim().is_empty() {
                    return Err(invalid(name, "`command` is empty"));
                }
                McpTransport::Stdio {
                    command: command.clone(),
                    args: self.args.clone(),
                    env: self.env.clone(),
                    cwd: self.cwd.clone(),
                }
            }
            (None, Some(url)) => {
                if !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some() {
                    return Err(invalid(
                        name,
                        "args, env and cwd apply to `command` servers, not `url` ones",
                    ));
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid(
                        name,
                        format!("url must be http(s)://..., got '{url}'"),
                    ));
                }
                let url = url.clone();
                let headers = self.headers.clone();
                let bearer_token_env_var = self.bearer_token_env_var.clone();
                match self.kind.as_deref() {
                    None | Some("http" | "streamable-http" | "streamableHttp") => {
                        McpTransport::Http {
                            url,
                            headers,
                            bearer_token_env_var,
                        }
                    }
                    Some("sse") => McpTransport::Sse {
                        url,
                        headers,
                        bearer_token_env_var,
                    },
                    Some(other) => {
                        return Err(invalid(
                            name,
                            format!(
                                "type must be \"http\" or \"sse\" for a `url` server, got '{other}'"
                            ),
                        ));
                    }
                }
            }
            (Some(_), Some(_)) => {
                return Err(invalid(
                    name,
                    "set either `command` (stdio) or `url` (HTTP), not both",
                ));
            }
            (None, None) => {
                return Err(invalid(
                    name,
                    "set `command` (stdio server) or `url` (HTTP server)",
                ));
            }
        };
        Ok(McpServerConfig {
            name: name.to_owned(),
            transport,
            enabled: self.enabled.unwrap_or(true),
            startup_timeout: seconds(name, "startup_timeout_sec", self.startup_timeout_sec)?
                .unwrap_or(DEFAULT_STARTUP_TIMEOUT),
            tool_timeout: seconds(name, "tool_timeout_sec", self.tool_timeout_sec)?
                .unwrap_or(DEFAULT_TOOL_TIMEOUT),
            enabled_tools: self.enabled_tools.clone(),
            disabled_tools: self.disabled_tools.clone(),
        })
    }
}

fn seconds(server: &str, key: &str, value: Option<f64>) -> Result<Option<Duration>, ConfigError> {
    match value {
        None => Ok(None),
        Some(v) if v.is_finite() && v > 0.0 && v < 86_400.0 => Ok(Some(Duration::from_secs_f64(v))),
        Some(v) => Err(invalid(
            server,
            format!("{key} must be between 0 and 86400, got {v}"),
        )),
    }
}

/// Server names become part of tool names, so they are limited to what providers accept.
pub fn check_server_name(name: &str) -> Result<(), ConfigError> {
    if name.is_empty()
        || name.len() > 40
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(invalid(
            name,
            "server names use letters, digits, '_' and '-' (at most 40)",
        ));
    }
    Ok(())
}

/// One `.mcp.json` server: its name and its entry, or why crow cannot use it.
pub type McpJsonServer = (String, Result<McpServerEntry, ConfigError>);

/// A usable server name from any text (names given by editors can hold spaces or dots):
/// other characters become `_`, at most 40 are kept.
pub fn server_name_from(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    if clean.is_empty() {
        "server".to_owned()
    } else {
        clean
    }
}

/// Reads the `mcpServers` of a project's `.mcp.json` into entries of crow's own shape.
/// `${VAR}` and `${VAR:-default}` are expanded in command, args, env, url and headers.
/// Unsupported entries (`ws`) are returned as errors next to the good ones so the
/// caller can warn and go on.
pub fn parse_mcp_json(text: &str, file: &str) -> Result<Vec<McpJsonServer>, ConfigError> {
    #[derive(Deserialize)]
    struct File {
        #[serde(default, rename = "mcpServers")]
        mcp_servers: BTreeMap<String, serde_json::Value>,
    }
    #[derive(Deserialize)]
    struct Entry {
        #[serde(rename = "type")]
        kind: Option<String>,
        command: Option<String>,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
        url: Option<String>,
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// Claude Code's per-server tool timeout, in milliseconds.
        timeout: Option<u64>,
    }
    let parsed: File = serde_json::from_str(text).map_err(|e| ConfigError::Parse {
        file: file.to_owned(),
        message: e.to_string(),
    })?;
    let mut out = Vec::new();
    for (name, value) in parsed.mcp_servers {
        let entry = serde_json::from_value::<Entry>(value)
            .map_err(|e| invalid(&name, format!("in {file}: {e}")))
            .and_then(|e| {
                let kind = e.kind.as_deref().unwrap_or(if e.url.is_some() { "http" } else { "stdio" });
                let (command, url, kind) = match kind {
                    "stdio" => (e.command.as_deref().map(expand_env), None, None),
                    "http" | "streamable-http" | "streamableHttp" => {
                        (None, e.url.as_deref().map(expand_env), None)
                    }
                    "sse" => (None, e.url.as_deref().map(expand_env), Some("sse".to_owned())),
                    other => {
                        return Err(invalid(
                            &name,
                            format!("in {file}: transport type '{other}' is not supported (use stdio, http or sse)"),
                        ));
                    }
                };
                Ok(McpServerEntry {
                    kind,
                    command,
                    args: e.args.iter().map(|a| expand_env(a)).collect(),
                    env: e.env.iter().map(|(k, v)| (k.clone(), expand_env(v))).collect(),
                    cwd: e.cwd,
                    url,
                    headers: e.headers.iter().map(|(k, v)| (k.clone(), expand_env(v))).collect(),
                    tool_timeout_sec: e
                        .timeout
                        .filter(|ms| *ms >= 1000)
                        .map(|ms| ms as f64 / 1000.0),
                    ..McpServerEntry::default()
                })
            });
        out.push((name, entry));
    }
    Ok(out)
}

/// Expands `${VAR}` and `${VAR:-default}`; an unset variable without default stays as written.
pub fn expand_env(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &after[..end];
        let (var, default) = match inner.split_once(":-") {
            Some((v, d)) => (v, Some(d)),
            None => (inner, None),
        };
        match (std::env::var(var).ok().filter(|v| !v.is_empty()), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                tracing::warn!("${{{var}}} is not set; left as written");
                out.push_str(&rest[start..start + 3 + end]);
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn entries_need_exactly_one_transport() {
        let stdio = McpServerEntry {
            command: Some("python3".into()),
            args: vec!["-m".into(), "mcp_server_time".into()],
            tool_timeout_sec: Some(5.0),
            ..Default::default()
        };
        let cfg = stdio.resolve("time").unwrap();
        assert_eq!(cfg.tool_timeout, Duration::from_secs(5));
        assert_eq!(cfg.startup_timeout, DEFAULT_STARTUP_TIMEOUT);
        assert!(matches!(cfg.transport, McpTransport::Stdio { .. }));
        let both = McpServerEntry {
            url: Some("http://x".into()),
            ..stdio.clone()
        };
        assert!(
            both.resolve("time")
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
        assert!(McpServerEntry::default().resolve("x").is_err());
        assert!(stdio.resolve("bad name").is_err());
        let http = McpServerEntry {
            url: Some("ftp://x".into()),
            ..Default::default()
        };
        assert!(http.resolve("h").unwrap_err().to_string().contains("http"));
        let sse = McpServerEntry {
            kind: Some("sse".into()),
            url: Some("http://127.0.0.1:1/sse".into()),
            ..Default::default()
        };
        assert!(matches!(
            sse.resolve("s").unwrap().transport,
            McpTransport::Sse { .. }
        ));
        let odd = McpServerEntry {
            kind: Some("ws".into()),
            ..sse.clone()
        };
        assert!(odd.resolve("s").is_err());
        let stdio_typed = McpServerEntry {
            kind: Some("sse".into()),
            ..stdio.clone()
        };
        assert!(stdio_typed.resolve("s").is_err());
    }

    #[test]
    fn any_text_becomes_a_server_name() {
        assert_eq!(server_name_from("My Files.v2"), "My_Files_v2");
        assert_eq!(server_name_from(""), "server");
        assert!(check_server_name(&server_name_from(&"é".repeat(100))).is_ok());
    }

    #[test]
    fn allow_and_deny_lists() {
        let mut cfg = McpServerConfig::stdio("s", "x", vec![]);
        assert!(cfg.exposes("a"));
        cfg.enabled_tools = Some(vec!["a".into(), "b".into()]);
        cfg.disabled_tools = vec!["b".into()];
        assert!(cfg.exposes("a") && !cfg.exposes("b") && !cfg.exposes("c"));
    }

    #[test]
    fn mcp_json_is_read_with_env_expansion() {
        // SAFETY-free: a variable name no one else uses in this process.
        let json = r#"{"mcpServers": {
            "time": {"command": "uvx", "args": ["mcp-server-time", "${CROW_MCP_TEST_UNSET_VAR:-UTC}"]},
            "api": {"type": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer ${CROW_MCP_TEST_UNSET_VAR}"}, "timeout": 120000},
            "old": {"type": "ws", "url": "ws://x/ws"},
            "legacy": {"type": "sse", "url": "http://127.0.0.1:1/sse"}
        }}"#;
        let entries = parse_mcp_json(json, ".mcp.json").unwrap();
        assert_eq!(entries.len(), 4);
        let legacy = entries[1].1.as_ref().unwrap().resolve("legacy").unwrap();
        assert!(matches!(legacy.transport, McpTransport::Sse { .. }));
        let api = entries[0].1.as_ref().unwrap();
        assert_eq!(
            api.headers["Authorization"],
            "Bearer ${CROW_MCP_TEST_UNSET_VAR}"
        );
        assert_eq!(api.tool_timeout_sec, Some(120.0));
        assert!(
            entries[2]
                .1
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("'ws'")
        );
        let time = entries[3].1.as_ref().unwrap();
        assert_eq!(time.args, ["mcp-server-time", "UTC"]);
        assert!(time.resolve("time").is_ok());
    }
}
