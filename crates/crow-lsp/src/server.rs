//! One running language server: the child in its own process group, JSON-RPC over its stdio,
//! the documents crow opened in it, and the diagnostics it published.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lsp_types::Url;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::framing::{read_message, write_message};
use crate::{LspError, ServerConfig};

/// A server that has published for a document is done when it stays quiet this long.
pub const SETTLE: Duration = Duration::from_millis(150);
/// `shutdown`'s answer and the exit after `exit` are waited for this long each.
const SHUTDOWN_WAIT: Duration = Duration::from_millis(500);

type Pending = Mutex<HashMap<i64, oneshot::Sender<Result<Value, String>>>>;

/// What the server last published for one document.
#[derive(Default)]
struct Published {
    diagnostics: Vec<lsp_types::Diagnostic>,
    version: Option<i32>,
    /// The value of the publish counter when this arrived.
    seq: u64,
}

/// A document crow opened: its version and a hash of the text last sent.
struct Opened {
    version: i32,
    text_hash: u64,
}

pub struct Server {
    pub name: String,
    /// Messages to the writer task, which owns the server's stdin (one writer, whole frames).
    writer: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    pending: Arc<Pending>,
    next_id: AtomicI64,
    published: Arc<Mutex<HashMap<Url, Published>>>,
    /// Counts publishes; every publish bumps it, so a waiter wakes on each.
    publishes: watch::Receiver<u64>,
    opened: Mutex<HashMap<Url, Opened>>,
    /// Cancelled when the server's output ends (it exited or crashed).
    dead: CancellationToken,
    child: Mutex<Option<Child>>,
    pgid: i32,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Held only for map operations that cannot panic half-way.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Server {
    /// Starts the server's process in `root` with the commands' environment policy; the
    /// handshake is [`Server::initialize`].
    pub fn spawn(
        config: &ServerConfig,
        root: &Path,
        env: &crow_core::EnvPolicy,
    ) -> Result<Arc<Server>, LspError> {
        let mut cmd = tokio::process::Command::new(&config.command);
        cmd.args(&config.args)
            .current_dir(root)
            // What the model's commands may see, and no more: a server is a program too.
            .env_clear()
            .envs(env.environment())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so whatever it starts (pyright's workers) dies with it.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| LspError::Spawn {
            command: config.command.clone(),
            source: e,
        })?;
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .unwrap_or(0);
        track_group(pgid);
        let (Some(stdin), Some(stdout), stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(LspError::Protocol("the server's pipes are missing".into()));
        };
        let (publish_tx, publishes) = watch::channel(0u64);
        let (writer, outbox) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(write_all(stdin, outbox, config.name.clone()));
        let server = Arc::new(Server {
            name: config.name.clone(),
            writer,
            pending: Arc::default(),
            next_id: AtomicI64::new(1),
            published: Arc::default(),
            publishes,
            opened: Mutex::default(),
            dead: CancellationToken::new(),
            child: Mutex::new(Some(child)),
            pgid,
        });
        if let Some(stderr) = stderr {
            let name = config.name.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(server = %name, "{line}");
                }
            });
        }
        // The reader holds only what it needs, not the server: dropping the last handle of
        // the server ends the process, which ends the reader.
        let reader = Reader {
            name: config.name.clone(),
            pending: server.pending.clone(),
            published: server.published.clone(),
            publish_tx,
            dead: server.dead.clone(),
            replies: Arc::downgrade(&server),
        };
        tokio::spawn(reader.run(BufReader::new(stdout)));
        Ok(server)
    }

    /// Whether the server's process has gone (its output ended).
    pub fn is_dead(&self) -> bool {
        self.dead.is_cancelled()
    }

    async fn send(&self, message: &Value) -> Result<(), LspError> {
        let body = serde_json::to_vec(message).map_err(|e| LspError::Protocol(e.to_string()))?;
        self.writer.send(body).map_err(|_| LspError::Exited)
    }

    pub async fn notify(&self, method: &str, params: Value) -> Result<(), LspError> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await
    }

    /// A request and its result, or an error when the server answers with one, dies, or
    /// takes longer than `limit`.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        limit: Duration,
    ) -> Result<Value, LspError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        let sent = self
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let answer = match sent {
            Err(e) => Err(e),
            Ok(()) => tokio::select! {
                r = tokio::time::timeout(limit, rx) => match r {
                    Ok(Ok(Ok(value))) => Ok(value),
                    Ok(Ok(Err(message))) => Err(LspError::Protocol(format!("{method}: {message}"))),
                    Ok(Err(_)) => Err(LspError::Exited),
                    Err(_) => Err(LspError::Timeout(method.to_owned())),
                },
                () = self.dead.cancelled() => Err(LspError::Exited),
            },
        };
        lock(&self.pending).remove(&id);
        answer
    }

    /// The handshake: `initialize` (bounded by `limit`), then `initialized`.
    pub async fn initialize(
        &self,
        root: &Path,
        options: Option<Value>,
        limit: Duration,
    ) -> Result<(), LspError> {
        let root_uri = Url::from_directory_path(root)
            .map_err(|()| LspError::Protocol(format!("bad root {}", root.display())))?;
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let params = json!({
            "processId": std::process::id(),
            "clientInfo": {"name": "crow", "version": env!("CARGO_PKG_VERSION")},
            "rootPath": root.display().to_string(),
            "rootUri": root_uri,
            "workspaceFolders": [{"uri": root_uri, "name": name}],
            "initializationOptions": options,
            "capabilities": {
                "textDocument": {
                    "synchronization": {"didSave": true, "dynamicRegistration": false},
                    "publishDiagnostics": {"relatedInformation": false, "versionSupport": true},
                },
                "workspace": {"workspaceFolders": true, "configuration": true},
                "window": {"workDoneProgress": false},
            },
        });
        self.request("initialize", params, limit).await?;
        self.notify("initialized", json!({})).await
    }

    /// Whether crow has opened this document in the server.
    pub fn is_open(&self, uri: &Url) -> bool {
        lock(&self.opened).contains_key(uri)
    }

    /// The publish counter now: a wait started after a change looks for publishes past it.
    pub fn publish_mark(&self) -> u64 {
        *self.publishes.borrow()
    }

    /// Sends the document's text: `didOpen` the first time, else `didChange` (whole text) when
    /// it differs from what was sent, then `didSave`. Returns the version sent, or `None` when
    /// the text was already the server's.
    pub async fn sync(
        &self,
        uri: &Url,
        language: &str,
        text: &str,
    ) -> Result<Option<i32>, LspError> {
        let hash = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            text.hash(&mut h);
            h.finish()
        };
        let step = {
            let mut opened = lock(&self.opened);
            match opened.get_mut(uri) {
                Some(doc) if doc.text_hash == hash => None,
                Some(doc) => {
                    doc.version += 1;
                    doc.text_hash = hash;
                    Some((false, doc.version))
                }
                None => {
                    opened.insert(
                        uri.clone(),
                        Opened {
                            version: 1,
                            text_hash: hash,
                        },
                    );
                    Some((true, 1))
                }
            }
        };
        let Some((open, version)) = step else {
            return Ok(None);
        };
        if open {
            self.notify(
                "textDocument/didOpen",
                json!({"textDocument": {
                    "uri": uri, "languageId": language, "version": version, "text": text,
                }}),
            )
            .await?;
        } else {
            self.notify(
                "textDocument/didChange",
                json!({
                    "textDocument": {"uri": uri, "version": version},
                    "contentChanges": [{"text": text}],
                }),
            )
            .await?;
        }
        // The file is on disk as sent: servers that lint on save (pylsp's slower linters,
        // gopls' analyses) do it now.
        self.notify(
            "textDocument/didSave",
            json!({"textDocument": {"uri": uri}}),
        )
        .await?;
        Ok(Some(version))
    }

    /// What the server last published for `uri`.
    pub fn diagnostics(&self, uri: &Url) -> Vec<lsp_types::Diagnostic> {
        lock(&self.published)
            .get(uri)
            .map(|p| p.diagnostics.clone())
            .unwrap_or_default()
    }

    /// Every document the server published problems for.
    pub fn all_diagnostics(&self) -> Vec<(Url, Vec<lsp_types::Diagnostic>)> {
        lock(&self.published)
            .iter()
            .filter(|(_, p)| !p.diagnostics.is_empty())
            .map(|(uri, p)| (uri.clone(), p.diagnostics.clone()))
            .collect()
    }

    /// Waits until the server has published for `uri` after `mark` (for `version` or later,
    /// when it says which) and then kept quiet about it for [`SETTLE`], or until `deadline`;
    /// whether it published at all.
    pub async fn wait_settled(
        &self,
        uri: &Url,
        mark: u64,
        version: Option<i32>,
        deadline: Instant,
    ) -> bool {
        let mut rx = self.publishes.clone();
        rx.borrow_and_update();
        let fresh = || -> Option<u64> {
            let published = lock(&self.published);
            let p = published.get(uri)?;
            let current = match (p.version, version) {
                (Some(got), Some(want)) => got >= want,
                _ => true,
            };
            (p.seq > mark && current).then_some(p.seq)
        };
        let mut seen: Option<u64> = None;
        let mut quiet_until = deadline;
        loop {
            let now = fresh();
            if now.is_some() && now != seen {
                // Something (more) arrived: from now, wait only the settle window for more.
                seen = now;
                quiet_until = deadline.min(Instant::now() + SETTLE);
            }
            let until = if seen.is_some() {
                quiet_until
            } else {
                deadline
            };
            let woke = tokio::select! {
                r = tokio::time::timeout_at(until, rx.changed()) => matches!(r, Ok(Ok(()))),
                () = self.dead.cancelled() => false,
            };
            if !woke {
                return seen.is_some();
            }
        }
    }

    /// `shutdown` then `exit`, each briefly waited for, then the group killed whatever it did.
    pub async fn shutdown(&self) {
        if !self.is_dead() {
            let _ = self.request("shutdown", Value::Null, SHUTDOWN_WAIT).await;
            let _ = self.notify("exit", Value::Null).await;
            let child = lock(&self.child).take();
            if let Some(mut child) = child {
                let _ = tokio::time::timeout(SHUTDOWN_WAIT, child.wait()).await;
                kill_group(self.pgid);
                let _ = child.kill().await;
            }
        }
        kill_group(self.pgid);
    }

    pub fn pid(&self) -> i32 {
        self.pgid
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        kill_group(self.pgid);
    }
}

/// The task writing to the server's input, until every sender is gone or a write fails.
async fn write_all(
    mut stdin: ChildStdin,
    mut outbox: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    name: String,
) {
    while let Some(body) = outbox.recv().await {
        if let Err(e) = write_message(&mut stdin, &body).await {
            tracing::debug!(server = %name, "writing to the language server: {e}");
            return;
        }
    }
}

/// The task reading the server's output.
struct Reader {
    name: String,
    pending: Arc<Pending>,
    published: Arc<Mutex<HashMap<Url, Published>>>,
    publish_tx: watch::Sender<u64>,
    dead: CancellationToken,
    replies: std::sync::Weak<Server>,
}

impl Reader {
    async fn run(self, mut out: BufReader<tokio::process::ChildStdout>) {
        loop {
            match read_message(&mut out).await {
                Ok(Some(body)) => match serde_json::from_slice::<Value>(&body) {
                    Ok(message) => self.handle(message).await,
                    Err(e) => tracing::debug!(server = %self.name, "not JSON: {e}"),
                },
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(server = %self.name, "language server output unreadable: {e}");
                    break;
                }
            }
        }
        self.dead.cancel();
        // Waiting requests learn at once (their senders drop).
        lock(&self.pending).clear();
    }

    async fn handle(&self, message: Value) {
        let method = message.get("method").and_then(Value::as_str);
        let id = message.get("id").cloned();
        match (method, id) {
            // A response to one of crow's requests.
            (None, Some(id)) => {
                let Some(id) = id.as_i64() else { return };
                let Some(tx) = lock(&self.pending).remove(&id) else {
                    return;
                };
                let answer = match message.get("error") {
                    Some(error) => Err(error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("error")
                        .to_owned()),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                let _ = tx.send(answer);
            }
            // A request from the server: crow has no settings or UI to offer, so it answers
            // each harmlessly rather than leave the server waiting.
            (Some(method), Some(id)) => {
                let result = match method {
                    "workspace/configuration" => {
                        let n = message
                            .pointer("/params/items")
                            .and_then(Value::as_array)
                            .map_or(0, Vec::len);
                        Value::Array(vec![Value::Null; n])
                    }
                    "workspace/workspaceFolders" => Value::Null,
                    _ => Value::Null,
                };
                if let Some(server) = self.replies.upgrade() {
                    let _ = server
                        .send(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
                        .await;
                }
            }
            (Some("textDocument/publishDiagnostics"), None) => {
                let Some(params) = message.get("params").cloned() else {
                    return;
                };
                let Ok(params) =
                    serde_json::from_value::<lsp_types::PublishDiagnosticsParams>(params)
                else {
                    tracing::debug!(server = %self.name, "malformed publishDiagnostics");
                    return;
                };
                // This task is the only writer of the counter.
                let seq = *self.publish_tx.borrow() + 1;
                lock(&self.published).insert(
                    params.uri,
                    Published {
                        diagnostics: params.diagnostics,
                        version: params.version,
                        seq,
                    },
                );
                // Waiters wake once the store holds it.
                self.publish_tx.send_replace(seq);
            }
            _ => {}
        }
    }
}

/// A document's path from its URI, when it is a file.
pub fn uri_path(uri: &Url) -> Option<PathBuf> {
    uri.to_file_path().ok()
}

/// Process groups of the servers alive in this process, for [`kill_all_servers`].
static LIVE_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn track_group(pgid: i32) {
    if pgid > 1 {
        lock(&LIVE_GROUPS).insert(pgid);
    }
}

fn kill_group(pgid: i32) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    // Only a group crow started and has not killed yet: the id could be reused after.
    if lock(&LIVE_GROUPS).remove(&pgid) {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// Kills every language server of this process at once, for a front end about to exit
/// without running destructors.
pub fn kill_all_servers() {
    let groups: Vec<i32> = lock(&LIVE_GROUPS).iter().copied().collect();
    for pgid in groups {
        kill_group(pgid);
    }
}
