//! A session's language servers: which serves a file, starting it lazily, restarting it once,
//! and the before/after comparison of an edit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crow_core::{Diagnostic, EnvPolicy};
use lsp_types::Url;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::diag;
use crate::server::{self, Server};

/// How long `initialize` may take before the server counts as failed (rust-analyzer answers
/// at once and indexes afterwards; a server silent this long is hung).
const INITIALIZE_LIMIT: Duration = Duration::from_secs(60);

/// One server crow may start.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    /// File extensions it serves, without the dot.
    pub extensions: Vec<String>,
    /// Files or directories marking a project root (`Cargo.toml`); the nearest directory
    /// above the edited file holding one, inside the project, is the server's root.
    pub root_markers: Vec<String>,
    pub initialization_options: Option<Value>,
}

/// Everything the manager needs, resolved by the application from its configuration.
#[derive(Debug, Clone)]
pub struct LspSettings {
    /// In order of preference: for an extension, the first server listing it serves it.
    pub servers: Vec<ServerConfig>,
    /// The bound on the wait for diagnostics after an edit (default 2 s).
    pub wait: Duration,
    /// Report new warnings too, not only errors.
    pub warnings: bool,
    /// The environment the servers see: the commands' policy.
    pub env: EnvPolicy,
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

/// The built-in servers, each only if its command is on `PATH`. Pyright is preferred for
/// Python; pylsp serves it when pyright is missing.
pub fn default_servers() -> Vec<ServerConfig> {
    let python_markers = s(&[
        "pyproject.toml",
        "setup.py",
        "setup.cfg",
        "requirements.txt",
        "pyrightconfig.json",
    ]);
    vec![
        ServerConfig {
            name: "rust-analyzer".into(),
            command: "rust-analyzer".into(),
            args: vec![],
            extensions: s(&["rs"]),
            root_markers: s(&["Cargo.toml"]),
            initialization_options: None,
        },
        ServerConfig {
            name: "pyright".into(),
            command: "pyright-langserver".into(),
            args: s(&["--stdio"]),
            extensions: s(&["py", "pyi"]),
            root_markers: python_markers.clone(),
            initialization_options: None,
        },
        ServerConfig {
            name: "pylsp".into(),
            command: "pylsp".into(),
            args: vec![],
            extensions: s(&["py", "pyi"]),
            root_markers: python_markers,
            initialization_options: None,
        },
        ServerConfig {
            name: "typescript".into(),
            command: "typescript-language-server".into(),
            args: s(&["--stdio"]),
            extensions: s(&["ts", "tsx", "js", "jsx", "mjs", "cjs", "mts", "cts"]),
            root_markers: s(&["tsconfig.json", "jsconfig.json", "package.json"]),
            initialization_options: None,
        },
        ServerConfig {
            name: "gopls".into(),
            command: "gopls".into(),
            args: vec![],
            extensions: s(&["go"]),
            root_markers: s(&["go.mod", "go.work"]),
            initialization_options: None,
        },
        ServerConfig {
            name: "clangd".into(),
            command: "clangd".into(),
            args: vec![],
            extensions: s(&["c", "h", "cc", "cpp", "cxx", "hpp", "hh", "hxx"]),
            root_markers: s(&["compile_commands.json", "compile_flags.txt", ".clangd"]),
            initialization_options: None,
        },
    ]
}

/// Where `command` is found: itself when it names a path, else the first executable of that
/// name on `path` (a `PATH`-style list).
pub fn find_on_path(command: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        let p = PathBuf::from(command);
        return executable(&p).then_some(p);
    }
    let found = std::env::split_paths(path?)
        .map(|dir| dir.join(command))
        .find(|p| executable(p))?;
    (!is_idle_rustup_proxy(&found)).then_some(found)
}

/// Whether `program` is rustup's proxy (the `rustup` beside it, linked or copied) for a component no
/// toolchain has: `~/.cargo/bin/rust-analyzer` exists wherever rustup does, and only says
/// "Unknown binary" until `rustup component add rust-analyzer`. Files only, no process.
fn is_idle_rustup_proxy(program: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Some(dir), Some(name)) = (program.parent(), program.file_name()) else {
        return false;
    };
    // rustup installs its proxies as hard links or as copies of itself.
    let same = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev() == b.dev() && a.ino() == b.ino()) || a.len() == b.len(),
        _ => false,
    };
    if !same(program, &dir.join("rustup")) {
        return false;
    }
    let home = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".rustup")));
    let Some(Ok(toolchains)) = home.map(|h| std::fs::read_dir(h.join("toolchains"))) else {
        return true;
    };
    !toolchains
        .flatten()
        .any(|t| t.path().join("bin").join(name).is_file())
}

/// The protocol's language id for an extension.
fn language_id(ext: &str) -> &str {
    match ext {
        "rs" => "rust",
        "py" | "pyi" => "python",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "typescriptreact",
        "js" | "mjs" | "cjs" => "javascript",
        "jsx" => "javascriptreact",
        "go" => "go",
        "c" | "h" => "c",
        "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => "cpp",
        other => other,
    }
}

#[derive(Clone)]
enum Phase {
    Starting,
    Ready(Arc<Server>),
    Failed,
}

struct Slot {
    phase: watch::Receiver<Phase>,
    /// Starts so far: a server that dies is started once more, then left off.
    starts: u32,
    /// The one notice of it being left off was given.
    noticed: bool,
}

/// A file an edit changed, as the edit tool reported it.
#[derive(Debug, Clone)]
pub struct EditedFile {
    pub path: PathBuf,
    /// Before the edit; `None` for a new file.
    pub old_text: Option<String>,
    /// After the edit; `None` reads the disk.
    pub new_text: Option<String>,
}

/// What an edit's files got: the new problems, and notices (a server left off).
#[derive(Debug, Default)]
pub struct EditOutcome {
    pub diagnostics: Vec<Diagnostic>,
    pub notices: Vec<String>,
}

/// A session's language servers.
pub struct LspManager {
    settings: LspSettings,
    /// Extension → index in `settings.servers`.
    by_ext: HashMap<String, usize>,
    slots: Mutex<HashMap<usize, Slot>>,
    /// Cancelled at shutdown: a server still in its handshake is killed, not waited for.
    closing: tokio_util::sync::CancellationToken,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The managers of this process, for [`shutdown_all`].
static MANAGERS: Mutex<Vec<std::sync::Weak<LspManager>>> = Mutex::new(Vec::new());

/// Shuts down the servers of every manager of this process still alive (a front end's end:
/// one call, whatever session opened them).
pub async fn shutdown_all() {
    let managers: Vec<Arc<LspManager>> = {
        let mut list = lock(&MANAGERS);
        list.retain(|m| m.strong_count() > 0);
        list.iter().filter_map(std::sync::Weak::upgrade).collect()
    };
    for manager in managers {
        manager.shutdown().await;
    }
}

impl LspManager {
    /// A manager known to [`shutdown_all`].
    pub fn shared(settings: LspSettings) -> Arc<Self> {
        let manager = Arc::new(Self::new(settings));
        let mut list = lock(&MANAGERS);
        list.retain(|m| m.strong_count() > 0);
        list.push(Arc::downgrade(&manager));
        manager
    }

    pub fn new(settings: LspSettings) -> Self {
        let mut by_ext = HashMap::new();
        for (i, server) in settings.servers.iter().enumerate() {
            for ext in &server.extensions {
                by_ext
                    .entry(ext.trim_start_matches('.').to_owned())
                    .or_insert(i);
            }
        }
        Self {
            settings,
            by_ext,
            slots: Mutex::default(),
            closing: tokio_util::sync::CancellationToken::new(),
        }
    }

    pub fn settings(&self) -> &LspSettings {
        &self.settings
    }

    /// Which server serves `path`, by its extension: one map lookup.
    fn server_index(&self, path: &Path) -> Option<usize> {
        let ext = path.extension()?.to_str()?;
        self.by_ext.get(ext).copied()
    }

    /// Whether any server serves `path`.
    pub fn serves(&self, path: &Path) -> bool {
        self.server_index(path).is_some()
    }

    /// The server's root for a file: the nearest directory holding a root marker, at or
    /// below `project`; else `project`.
    fn root_for(&self, index: usize, file: &Path, project: &Path) -> PathBuf {
        let markers = &self.settings.servers[index].root_markers;
        let mut dir = file.parent();
        while let Some(d) = dir {
            if !d.starts_with(project) {
                break;
            }
            if markers.iter().any(|m| d.join(m).exists()) {
                return d.to_path_buf();
            }
            if d == project {
                break;
            }
            dir = d.parent();
        }
        project.to_path_buf()
    }

    /// The running server for `index`, starting it (or once more) when needed, waiting for
    /// its handshake until `deadline`. `None` when it is not ready by then, or is off.
    async fn server(
        &self,
        index: usize,
        root: &Path,
        deadline: Instant,
        notices: &mut Vec<String>,
    ) -> Option<Arc<Server>> {
        let mut phase = {
            let mut slots = lock(&self.slots);
            let slot = slots.get_mut(&index);
            let current = slot.as_ref().map(|s| s.phase.borrow().clone());
            match (slot, current) {
                (Some(slot), Some(Phase::Ready(server))) if !server.is_dead() => {
                    let _ = &slot;
                    return Some(server);
                }
                (Some(slot), Some(Phase::Starting)) => slot.phase.clone(),
                (Some(slot), _) => {
                    // Dead or failed.
                    if slot.starts >= 2 {
                        if !slot.noticed {
                            slot.noticed = true;
                            let name = &self.settings.servers[index].name;
                            let note = format!(
                                "language server `{name}` stopped again; its diagnostics are off for this session"
                            );
                            tracing::warn!("{note}");
                            notices.push(note);
                        }
                        return None;
                    }
                    slot.starts += 1;
                    let name = &self.settings.servers[index].name;
                    tracing::warn!(server = %name, "language server stopped; starting it again");
                    slot.phase = self.launch(index, root);
                    slot.phase.clone()
                }
                (None, _) => {
                    let phase = self.launch(index, root);
                    slots.insert(
                        index,
                        Slot {
                            phase: phase.clone(),
                            starts: 1,
                            noticed: false,
                        },
                    );
                    phase
                }
            }
        };
        loop {
            match &*phase.borrow_and_update() {
                Phase::Ready(server) if !server.is_dead() => return Some(server.clone()),
                Phase::Ready(_) | Phase::Failed => return None,
                Phase::Starting => {}
            }
            match tokio::time::timeout_at(deadline, phase.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }

    /// Starts a server in the background: the handshake goes on even when the edit that
    /// asked stops waiting for it.
    fn launch(&self, index: usize, root: &Path) -> watch::Receiver<Phase> {
        let (tx, rx) = watch::channel(Phase::Starting);
        let config = self.settings.servers[index].clone();
        let env = self.settings.env.clone();
        let root = root.to_path_buf();
        let closing = self.closing.clone();
        tokio::spawn(async move {
            let started = match Server::spawn(&config, &root, &env) {
                Ok(server) => match tokio::select! {
                    r = server.initialize(
                        &root,
                        config.initialization_options.clone(),
                        INITIALIZE_LIMIT,
                    ) => r,
                    () = closing.cancelled() => Err(crate::LspError::Exited),
                } {
                    Ok(()) => {
                        tracing::debug!(server = %config.name, root = %root.display(), "language server ready");
                        Phase::Ready(server)
                    }
                    // The session ended first: dropping it kills its group.
                    Err(_) if closing.is_cancelled() => Phase::Failed,
                    Err(e) => {
                        tracing::warn!(server = %config.name, "language server failed to start: {e}");
                        server.shutdown().await;
                        Phase::Failed
                    }
                },
                Err(e) => {
                    tracing::warn!(server = %config.name, "{e}");
                    Phase::Failed
                }
            };
            let _ = tx.send(started);
        });
        rx
    }

    /// Syncs `files` (absolute paths with their text before the edit, when known) with their
    /// servers and returns the problems the edit introduced, waiting at most
    /// `settings.wait` in all. Paths are shown relative to `cwd`.
    pub async fn after_edit(
        &self,
        files: &[EditedFile],
        project: &Path,
        cwd: &Path,
    ) -> EditOutcome {
        let deadline = Instant::now() + self.settings.wait;
        let mut outcome = EditOutcome::default();
        for EditedFile {
            path,
            old_text,
            new_text,
        } in files
        {
            let Some(index) = self.server_index(path) else {
                continue;
            };
            let root = self.root_for(index, path, project);
            let Some(server) = self
                .server(index, &root, deadline, &mut outcome.notices)
                .await
            else {
                continue;
            };
            let Ok(uri) = Url::from_file_path(path) else {
                continue;
            };
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            let language = language_id(ext);
            // Before: what the server has for the file; a file it never saw is opened with
            // its old text first, within half the bound, so its old problems are not "new".
            if !server.is_open(&uri)
                && let Some(old) = old_text
            {
                let mark = server.publish_mark();
                if let Ok(version) = server.sync(&uri, language, old).await {
                    let half = Instant::now() + self.settings.wait / 2;
                    server
                        .wait_settled(&uri, mark, version, half.min(deadline))
                        .await;
                }
            }
            let before = self.converted(&server.diagnostics(&uri), path, cwd);
            let text = match new_text {
                Some(text) => text.clone(),
                None => match tokio::fs::read_to_string(path).await {
                    Ok(text) => text,
                    Err(_) => continue,
                },
            };
            let mark = server.publish_mark();
            match server.sync(&uri, language, &text).await {
                Ok(version) => {
                    server.wait_settled(&uri, mark, version, deadline).await;
                }
                Err(e) => {
                    tracing::debug!(server = %server.name, "sync failed: {e}");
                    continue;
                }
            }
            let after = self.converted(&server.diagnostics(&uri), path, cwd);
            outcome
                .diagnostics
                .extend(diag::introduced(&before, &after));
        }
        diag::sort(&mut outcome.diagnostics);
        outcome
    }

    fn converted(
        &self,
        list: &[lsp_types::Diagnostic],
        path: &Path,
        cwd: &Path,
    ) -> Vec<Diagnostic> {
        let shown = path.strip_prefix(cwd).unwrap_or(path);
        list.iter()
            .map(|d| diag::convert(shown, d))
            .filter(|d| diag::wanted(d.severity, self.settings.warnings))
            .collect()
    }

    /// The current errors and warnings of `path` (synced from disk first), or, without a
    /// path, of every document the running servers published problems for.
    pub async fn current(
        &self,
        path: Option<&Path>,
        project: &Path,
        cwd: &Path,
    ) -> (Vec<Diagnostic>, Vec<String>) {
        let mut notices = Vec::new();
        let mut out = Vec::new();
        let keep = |d: &Diagnostic| diag::wanted(d.severity, true);
        match path {
            Some(path) => {
                let deadline = Instant::now() + self.settings.wait;
                if let Some(index) = self.server_index(path) {
                    let root = self.root_for(index, path, project);
                    if let (Some(server), Ok(uri), Ok(text)) = (
                        self.server(index, &root, deadline, &mut notices).await,
                        Url::from_file_path(path),
                        tokio::fs::read_to_string(path).await,
                    ) {
                        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
                        let mark = server.publish_mark();
                        let sent = server.sync(&uri, language_id(ext), &text).await;
                        if let Ok(Some(version)) = sent {
                            server
                                .wait_settled(&uri, mark, Some(version), deadline)
                                .await;
                        }
                        let shown = path.strip_prefix(cwd).unwrap_or(path);
                        out.extend(
                            server
                                .diagnostics(&uri)
                                .iter()
                                .map(|d| diag::convert(shown, d))
                                .filter(keep),
                        );
                    }
                }
            }
            None => {
                for server in self.running() {
                    for (uri, list) in server.all_diagnostics() {
                        let Some(file) = server::uri_path(&uri) else {
                            continue;
                        };
                        let shown = file.strip_prefix(cwd).unwrap_or(&file).to_path_buf();
                        out.extend(list.iter().map(|d| diag::convert(&shown, d)).filter(keep));
                    }
                }
            }
        }
        diag::sort(&mut out);
        (out, notices)
    }

    fn running(&self) -> Vec<Arc<Server>> {
        lock(&self.slots)
            .values()
            .filter_map(|slot| match &*slot.phase.borrow() {
                Phase::Ready(server) if !server.is_dead() => Some(server.clone()),
                _ => None,
            })
            .collect()
    }

    /// The process ids of the running servers (for tests and `crow` diagnostics).
    pub fn pids(&self) -> Vec<i32> {
        self.running().iter().map(|s| s.pid()).collect()
    }

    /// Shuts every running server down cleanly (`shutdown`, `exit`), then kills what is left;
    /// one after another, each bounded to about a second (a session runs a few at most).
    pub async fn shutdown(&self) {
        self.closing.cancel();
        let servers = self.running();
        lock(&self.slots).clear();
        for server in servers {
            server.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn commands_are_found_on_the_given_path_only_when_executable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let ls = dir.path().join("my-ls");
        std::fs::write(&ls, "#!/bin/sh\n").unwrap();
        let path = Some(dir.path().as_os_str());
        assert_eq!(find_on_path("my-ls", path), None, "not executable");
        std::fs::set_permissions(&ls, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_on_path("my-ls", path), Some(ls.clone()));
        assert_eq!(find_on_path(ls.to_str().unwrap(), None), Some(ls));
        assert_eq!(find_on_path("absent-ls", path), None);
    }

    #[test]
    fn an_edit_of_a_file_no_server_serves_is_a_lookup() {
        let manager = LspManager::new(LspSettings {
            servers: default_servers(),
            wait: Duration::from_secs(2),
            warnings: false,
            env: EnvPolicy::default(),
        });
        assert!(manager.serves(Path::new("/p/a.rs")));
        assert!(manager.serves(Path::new("/p/a.tsx")));
        assert!(!manager.serves(Path::new("/p/notes.txt")));
        assert!(!manager.serves(Path::new("/p/Makefile")));
        // pyright is listed before pylsp: it serves .py when both are configured.
        let index = manager.server_index(Path::new("a.py")).unwrap();
        assert_eq!(manager.settings().servers[index].name, "pyright");
    }
}
