//! Opening a connection: a stdio child in its own process group (so shutdown can kill its
//! whole tree) with stderr captured, a streamable-HTTP session or a legacy SSE one; then the
//! MCP handshake. A url server whose config carries no token of its own uses the OAuth tokens
//! `crow mcp login` stored for its URL, if any; a 401 becomes "run `crow mcp login NAME`".

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use process_wrap::tokio::{CommandWrap, ProcessGroup};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use crate::config::McpTransport;
use crate::manager::McpOptions;

/// Lines of a server's stderr kept to explain why it failed.
const STDERR_TAIL: usize = 8;

/// crow's side of the MCP session: it only needs to hear about tool-list changes.
pub(crate) struct Handler {
    pub list_changed: mpsc::UnboundedSender<()>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.list_changed.send(());
    }

    fn get_info(&self) -> ClientConfig {
        // The initialize handshake: every server we test speaks it, and rmcp negotiates down.
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("crow", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

pub(crate) type Service = RunningService<RoleClient, Handler>;

/// The last lines a stdio server wrote to stderr.
#[derive(Debug, Clone, Default)]
pub(crate) struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: String) {
        let mut lines = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if lines.len() == STDERR_TAIL {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// `"; stderr: ..."` for error messages, or nothing.
    pub fn suffix(&self) -> String {
        let lines = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let text: Vec<&str> = lines
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .collect();
        if text.is_empty() {
            String::new()
        } else {
            format!("; stderr: {}", text.join(" | "))
        }
    }
}

/// A transport ready for the handshake, plus what shutdown and diagnostics need.
pub(crate) enum Opened {
    Stdio {
        transport: TokioChildProcess,
        pgid: Option<i32>,
    },
    Http {
        config: StreamableHttpClientTransportConfig,
        oauth: Option<OAuth>,
    },
    Sse {
        url: String,
        headers: http::HeaderMap,
        oauth: Option<OAuth>,
    },
}

/// Where a url server's stored OAuth tokens would be: used when the config gives no token of
/// its own (`bearer_token_env_var` or an `Authorization` header).
pub(crate) struct OAuth {
    url: String,
    data_dir: std::path::PathBuf,
}

/// Spawns the child or prepares the HTTP session. Errors are one-line messages.
pub(crate) fn open(
    server: &str,
    transport: &McpTransport,
    options: &McpOptions,
    stderr_tail: &StderrTail,
) -> Result<Opened, String> {
    match transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            // crow's keys stay with crow; the entry's own `env` was put there on purpose.
            cmd.env_clear()
                .envs(options.env.environment())
                .envs(env)
                .args(args)
                .current_dir(cwd.as_deref().unwrap_or(&options.cwd));
            let mut wrapped = CommandWrap::from(cmd);
            // Own process group: `npx`/`uvx` wrappers spawn the real server as a grandchild,
            // and killing the group on shutdown is the only way to leave no orphan.
            wrapped.wrap(ProcessGroup::leader());
            let (transport, stderr) = TokioChildProcess::builder(wrapped)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start `{command}`: {e}"))?;
            let pgid = transport.id().and_then(|id| i32::try_from(id).ok());
            if let Some(stderr) = stderr {
                let tail = stderr_tail.clone();
                let server = server.to_owned();
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::debug!(target: "crow_mcp::stderr", server = %server, "{line}");
                        tail.push(line);
                    }
                });
            }
            Ok(Opened::Stdio { transport, pgid })
        }
        McpTransport::Http { .. } | McpTransport::Sse { .. } => {
            let Some((url, headers, bearer_token_env_var)) = transport.remote() else {
                return Err("not a url server".to_owned());
            };
            install_crypto_provider();
            let mut map = http::HeaderMap::new();
            for (name, value) in headers {
                let name = http::HeaderName::try_from(name.as_str())
                    .map_err(|e| format!("bad header name '{name}': {e}"))?;
                let value = http::HeaderValue::try_from(value.as_str())
                    .map_err(|_| format!("bad value for header '{name}'"))?;
                map.insert(name, value);
            }
            let token = match bearer_token_env_var {
                Some(var) => Some(
                    std::env::var(var)
                        .ok()
                        .filter(|t| !t.trim().is_empty())
                        .ok_or_else(|| format!("bearer_token_env_var {var} is not set"))?,
                ),
                None => None,
            };
            let oauth = match (&token, map.contains_key(http::header::AUTHORIZATION)) {
                (None, false) => options.auth_dir.as_ref().map(|dir| OAuth {
                    url: url.to_owned(),
                    data_dir: dir.clone(),
                }),
                _ => None,
            };
            if matches!(transport, McpTransport::Sse { .. }) {
                if let Some(token) = token {
                    let value = http::HeaderValue::try_from(format!("Bearer {token}"))
                        .map_err(|_| "the bearer token is not a valid header value".to_owned())?;
                    map.insert(http::header::AUTHORIZATION, value);
                }
                return Ok(Opened::Sse {
                    url: url.to_owned(),
                    headers: map,
                    oauth,
                });
            }
            let mut config = StreamableHttpClientTransportConfig::with_uri(url)
                .custom_headers(map.into_iter().filter_map(|(k, v)| Some((k?, v))).collect())
                .reinit_on_expired_session(true);
            if let Some(token) = token {
                config = config.auth_header(token);
            }
            Ok(Opened::Http { config, oauth })
        }
    }
}

/// The MCP handshake over an opened transport. A server that wants a login crow does not
/// have fails with the `crow mcp login NAME` hint.
pub(crate) async fn handshake(
    server: &str,
    opened: Opened,
    handler: Handler,
) -> Result<Service, String> {
    let login_hint = || format!("authorization required: run `crow mcp login {server}`");
    let stored = |oauth: Option<OAuth>| async move {
        match oauth {
            Some(o) => crate::auth::stored_manager(&o.url, &o.data_dir).await,
            None => Ok(None),
        }
    };
    let result = match opened {
        Opened::Stdio { transport, .. } => handler.serve(transport).await,
        Opened::Http { config, oauth } => match stored(oauth).await {
            Err(e) => return Err(format!("cannot use the stored OAuth tokens: {e}")),
            // rmcp's `AuthClient` adds the token, refreshes it before it expires and once
            // more on a 401. Redirects are not followed with a token on the request.
            Ok(Some(manager)) => {
                let client = reqwest013::Client::builder()
                    .pool_max_idle_per_host(0)
                    .redirect(reqwest013::redirect::Policy::none())
                    .build()
                    .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
                let client = rmcp::transport::auth::AuthClient::new(client, manager);
                handler
                    .serve(StreamableHttpClientTransport::with_client(client, config))
                    .await
            }
            // rmcp's default client (same-origin redirects only, no idle pooling); it can
            // only fail to build without a TLS provider, which `open` installed.
            Ok(None) => {
                handler
                    .serve(StreamableHttpClientTransport::from_config(config))
                    .await
            }
        },
        Opened::Sse {
            url,
            headers,
            oauth,
        } => {
            let manager = stored(oauth)
                .await
                .map_err(|e| format!("cannot use the stored OAuth tokens: {e}"))?
                .map(std::sync::Arc::new);
            let transport = match crate::sse::SseTransport::connect(&url, headers, manager).await {
                Ok(t) => t,
                Err(e) if crate::auth::is_auth_required(&e) => return Err(login_hint()),
                Err(e) => return Err(format!("cannot open the SSE stream: {e}")),
            };
            handler.serve(transport).await
        }
    };
    result.map_err(|e| match &e {
        rmcp::service::ClientInitializeError::TransportError { error, .. } => {
            if crate::auth::is_auth_required(error) {
                login_hint()
            } else {
                format!("MCP handshake failed: {}", root_cause(error))
            }
        }
        other => format!("MCP handshake failed: {other}"),
    })
}

/// The innermost cause of an error: rmcp's outer messages name generic transport types,
/// the innermost one says what happened ("Connection refused", "connection closed").
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = error;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}

/// reqwest inside rmcp is built without a bundled crypto backend (it would compile aws-lc);
/// the workspace already uses rustls with ring, so that is installed as the process default.
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: some provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Process groups of the stdio servers alive in this process, for [`kill_all_servers`].
static LIVE_GROUPS: std::sync::Mutex<std::collections::BTreeSet<i32>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

fn live_groups() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<i32>> {
    LIVE_GROUPS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Remembers a server's process group until it is killed.
pub(crate) fn track_group(pgid: i32) {
    live_groups().insert(pgid);
}

/// Kills a process group (the server and everything it started). A group that is already
/// gone is not an error.
pub(crate) fn kill_group(pgid: i32) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    live_groups().remove(&pgid);
    if pgid > 1 {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// Kills every stdio server of every manager in this process at once, for a front end that
/// is about to exit without running destructors (`std::process::exit` on a second Ctrl-C).
pub fn kill_all_servers() {
    let groups: Vec<i32> = live_groups().iter().copied().collect();
    for pgid in groups {
        kill_group(pgid);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::collections::BTreeMap;

    #[tokio::test]
    async fn a_stdio_server_gets_the_policy_plus_its_own_env() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env.txt");
        let transport = McpTransport::Stdio {
            command: "sh".into(),
            args: vec!["-c".into(), "env > env.tmp && mv env.tmp env.txt".into()],
            env: BTreeMap::from([
                ("FROM_ENTRY".to_owned(), "entry".to_owned()),
                ("ENTRY_TOKEN".to_owned(), "given-on-purpose".to_owned()),
            ]),
            cwd: None,
        };
        let options = McpOptions {
            max_output_bytes: 1024,
            cwd: dir.path().to_path_buf(),
            // HOME stands in for a key crow uses (a test cannot set variables safely).
            env: crow_core::EnvPolicy {
                hidden: ["HOME".to_owned()].into(),
                ..crow_core::EnvPolicy::default()
            },
            auth_dir: None,
        };
        let opened = open("s", &transport, &options, &StderrTail::default()).unwrap();
        // The marker file appears once the child wrote its whole environment (the minute
        // of polling only fails a hung test).
        let mut text = None;
        for _ in 0..6000 {
            if let Ok(t) = std::fs::read_to_string(&out) {
                text = Some(t);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        drop(opened);
        let text = text.expect("the server never wrote its environment");
        let names: Vec<&str> = text.lines().filter_map(|l| l.split('=').next()).collect();
        assert!(!names.contains(&"HOME"), "{text}");
        assert!(names.contains(&"PATH"), "{text}");
        assert!(text.contains("FROM_ENTRY=entry\n"), "{text}");
        assert!(text.contains("ENTRY_TOKEN=given-on-purpose\n"), "{text}");
    }
}
