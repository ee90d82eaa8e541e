//! Test helpers: a temp project with a ToolContext, allow-all or deny-all permissions.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use crow_core::{AllowAll, PermissionDecision, PermissionGate, PermissionRequest, ToolContext};
use tokio_util::sync::CancellationToken;

/// Denies everything and records what was asked.
#[derive(Default)]
pub(crate) struct DenyAll {
    pub asked: Mutex<Vec<PermissionRequest>>,
}

#[async_trait]
impl PermissionGate for DenyAll {
    async fn check(&self, request: PermissionRequest) -> PermissionDecision {
        if let Ok(mut asked) = self.asked.lock() {
            asked.push(request);
        }
        PermissionDecision::Deny {
            reason: "user said no".into(),
        }
    }
}

pub(crate) struct TestEnv {
    /// Kept so the directory lives as long as the environment.
    _dir: tempfile::TempDir,
    pub ctx: ToolContext,
    root: PathBuf,
}

impl TestEnv {
    pub fn new() -> Self {
        Self::with_gate(Arc::new(AllowAll))
    }

    pub fn with_gate(permission: Arc<dyn PermissionGate>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // Canonical so assertions compare equal to resolved paths (/tmp may be a symlink).
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let ctx = ToolContext {
            session_id: "s".into(),
            agent: "primary".into(),
            call_id: "c".into(),
            cwd: root.clone(),
            project_root: root.clone(),
            cancel: CancellationToken::new(),
            permission,
            // Nobody listens: the tools under test report progress into the void.
            events: tokio::sync::mpsc::unbounded_channel().0,
            client: None,
            steering: None,
        };
        Self {
            _dir: dir,
            ctx,
            root,
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.root.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, content).unwrap();
        p
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root.join(rel)).unwrap()
    }
}
