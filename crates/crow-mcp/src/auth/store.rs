//! Where OAuth credentials live: one JSON file per server URL under crow's data directory
//! (`mcp-auth/<sha256 of the URL>.json`), owner-only (0600, in a 0700 directory), written
//! whole through a temporary file and a rename so a crash never leaves half a token. The file
//! names the URL it belongs to; a file for another URL (a hash collision, a copied file) is
//! ignored rather than sending one server's token to another.
//!
//! rmcp's `AuthorizationManager` reads and writes it through [`CredentialStore`]; the
//! refresh guard is an in-process mutex per file (one crow process refreshes one server's
//! token at a time; two processes racing both get a valid token from the server).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use rmcp::transport::auth::{
    AuthError, CredentialRefreshGuard, CredentialStore, StoredCredentials,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The directory below crow's data directory that holds the token files.
pub const AUTH_DIR: &str = "mcp-auth";

/// The token file of `server_url` under `data_dir`.
pub fn token_path(data_dir: &Path, server_url: &str) -> PathBuf {
    let digest = Sha256::digest(server_url.as_bytes());
    let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    data_dir.join(AUTH_DIR).join(format!("{name}.json"))
}

#[derive(Serialize, Deserialize)]
struct TokenFile {
    server_url: String,
    credentials: StoredCredentials,
}

/// One server's credentials on disk.
#[derive(Clone)]
pub struct FileCredentialStore {
    path: PathBuf,
    server_url: String,
}

impl std::fmt::Debug for FileCredentialStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileCredentialStore")
            .field("path", &self.path)
            .finish()
    }
}

/// Refresh guards, one per token file, shared by every manager of this process.
static GUARDS: LazyLock<Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(Default::default);

fn store_error(path: &Path, e: impl std::fmt::Display) -> AuthError {
    AuthError::CredentialStoreError(format!("{}: {e}", path.display()))
}

impl FileCredentialStore {
    pub fn new(data_dir: &Path, server_url: &str) -> Self {
        Self {
            path: token_path(data_dir, server_url),
            server_url: server_url.to_owned(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored credentials, if a file for this URL exists.
    pub fn read(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(store_error(&self.path, e)),
        };
        // A damaged file means "log in again", not a failed session; the error never quotes
        // the file (it holds tokens).
        match serde_json::from_str::<TokenFile>(&text) {
            Ok(file) if file.server_url == self.server_url => Ok(Some(file.credentials)),
            Ok(_) => {
                tracing::warn!("{} belongs to another server; ignored", self.path.display());
                Ok(None)
            }
            Err(_) => {
                tracing::warn!("{} is not a token file; ignored", self.path.display());
                Ok(None)
            }
        }
    }

    fn write(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let file = TokenFile {
            server_url: self.server_url.clone(),
            credentials,
        };
        let text = serde_json::to_vec_pretty(&file).map_err(|e| store_error(&self.path, e))?;
        write_private(&self.path, &text).map_err(|e| store_error(&self.path, e))
    }

    /// Removes the file; `Ok(false)` when there was none.
    pub fn remove(&self) -> std::io::Result<bool> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Writes `bytes` to `path` readable by the owner only, atomically.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("a token file needs a directory"))?;
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("token"),
        std::process::id()
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Created 0600: there is no moment where the token is readable by others.
        options.mode(0o600);
    }
    let result = (|| {
        let mut file = options.open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[async_trait::async_trait]
impl CredentialStore for FileCredentialStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.read()
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.write(credentials)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.remove()
            .map(|_| ())
            .map_err(|e| store_error(&self.path, e))
    }

    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let lock = {
            let mut guards = GUARDS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Arc::clone(guards.entry(self.path.clone()).or_default())
        };
        Ok(Some(CredentialRefreshGuard::new(lock.lock_owned().await)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn tokens_are_owner_only_and_keyed_by_url() {
        let dir = tempfile::tempdir().unwrap();
        let a = FileCredentialStore::new(dir.path(), "https://a.example/mcp");
        let b = FileCredentialStore::new(dir.path(), "https://b.example/mcp");
        assert_ne!(a.path(), b.path());
        assert!(a.load().await.unwrap().is_none());
        a.save(StoredCredentials::new(
            "client".into(),
            None,
            vec![],
            Some(1),
        ))
        .await
        .unwrap();
        let loaded = a.load().await.unwrap().unwrap();
        assert_eq!(loaded.client_id, "client");
        assert!(b.load().await.unwrap().is_none());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            let dir_mode = std::fs::metadata(a.path().parent().unwrap())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(dir_mode & 0o777, 0o700);
        }
        // A file copied over another server's name is not that server's token.
        std::fs::copy(a.path(), b.path()).unwrap();
        assert!(b.load().await.unwrap().is_none());
        a.clear().await.unwrap();
        assert!(a.load().await.unwrap().is_none());
        assert!(!a.remove().unwrap());
    }
}
