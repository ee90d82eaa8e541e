//! API keys: a redacting newtype and resolution from env var, keyring, key file or plaintext
//! config.
//!
//! Order: the environment variables, then the OS keyring (a [`KeyStore`] the application
//! passes in: this crate knows no concrete keyring), then a key file, then a plaintext key in
//! config (with a warning). `ApiKey`'s Debug and Display print `[redacted]`, so errors and
//! logs never hold a key.

use std::fmt;
use std::path::{Path, PathBuf};

/// An API key. Debug and Display print `[redacted]` so a key never reaches a log or an error
/// by accident; [`ApiKey::expose`] is the one door to the secret, used for request headers.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The secret itself. Only for building auth headers; never format it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Keys kept by provider name outside crow's files: the OS keyring (crow-app's `keyring.rs`).
/// A store that cannot be reached, or holds nothing for `provider`, answers `None`: a keyring
/// is never required, and its failures are the store's to log (without the key).
pub trait KeyStore: Send + Sync {
    fn key(&self, provider: &str) -> Option<ApiKey>;
}

/// No keyring at all.
pub struct NoKeyStore;

impl KeyStore for NoKeyStore {
    fn key(&self, _provider: &str) -> Option<ApiKey> {
        None
    }
}

/// Where a resolved key came from. `Plaintext` means the config file holds the secret; the
/// caller should warn (`tracing::warn!`) and suggest an env var, the keyring or a key file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    Env(String),
    /// The OS keyring, under the provider's name.
    Keyring,
    File(PathBuf),
    Plaintext,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("could not read API key file {}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("API key file {} is empty", path.display())]
    Empty { path: PathBuf },
}

/// Where a provider's key may be, each place optional; [`resolve_api_key`] tries them in the
/// order of the fields.
#[derive(Clone, Copy, Default)]
pub struct KeyPlaces<'a> {
    /// Environment variables, in order (Gemini's key may be in either of two).
    pub env: &'a [&'a str],
    /// The keyring, and the provider's name in it.
    pub keyring: Option<(&'a dyn KeyStore, &'a str)>,
    pub file: Option<&'a Path>,
    pub plaintext: Option<&'a str>,
}

/// Resolves a key: the first set, non-empty variable of `env` wins; then the keyring's entry;
/// then `file` (read and trimmed, `~/` expanded; a missing, unreadable or empty file is an
/// error naming the path, because the user asked for it explicitly); then `plaintext`.
/// `Ok(None)` when nothing is configured, which is normal for local servers.
pub fn resolve_api_key(places: KeyPlaces<'_>) -> Result<Option<(ApiKey, KeySource)>, KeyError> {
    for var in places.env {
        if let Ok(value) = std::env::var(var) {
            let value = value.trim();
            if !value.is_empty() {
                return Ok(Some((
                    ApiKey::new(value),
                    KeySource::Env((*var).to_owned()),
                )));
            }
        }
    }
    if let Some((store, provider)) = places.keyring
        && let Some(key) = store.key(provider)
        && !key.expose().trim().is_empty()
    {
        let key = ApiKey::new(key.expose().trim());
        return Ok(Some((key, KeySource::Keyring)));
    }
    if let Some(file) = places.file {
        let path = expand_home(file);
        let text = std::fs::read_to_string(&path).map_err(|source| KeyError::Unreadable {
            path: path.clone(),
            source,
        })?;
        let key = text.trim();
        if key.is_empty() {
            return Err(KeyError::Empty { path });
        }
        return Ok(Some((ApiKey::new(key), KeySource::File(path))));
    }
    if let Some(text) = places.plaintext {
        let key = text.trim();
        if !key.is_empty() {
            return Ok(Some((ApiKey::new(key), KeySource::Plaintext)));
        }
    }
    Ok(None)
}

/// Expands a leading `~` or `~/` to the home directory; other paths are returned unchanged.
pub fn expand_home(path: &Path) -> PathBuf {
    let Some(home) = dirs::home_dir() else {
        return path.to_path_buf();
    };
    if path == Path::new("~") {
        return home;
    }
    match path.strip_prefix("~") {
        Ok(rest) => home.join(rest),
        Err(_) => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_redacted_in_debug_and_display() {
        let key = ApiKey::new("sk-secret-123");
        assert_eq!(format!("{key}"), "[redacted]");
        assert_eq!(format!("{key:?}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(key.clone())), "Some([redacted])");
        assert_eq!(key.expose(), "sk-secret-123");
    }

    /// A keyring holding one key, for `provider`.
    struct OneKey(&'static str, &'static str);

    impl KeyStore for OneKey {
        fn key(&self, provider: &str) -> Option<ApiKey> {
            (provider == self.0).then(|| ApiKey::new(self.1))
        }
    }

    fn places<'a>(
        env: &'a [&'a str],
        keyring: Option<&'a OneKey>,
        file: Option<&'a Path>,
        plaintext: Option<&'a str>,
    ) -> KeyPlaces<'a> {
        KeyPlaces {
            env,
            keyring: keyring.map(|k| (k as &dyn KeyStore, "p")),
            file,
            plaintext,
        }
    }

    #[test]
    fn env_var_wins_then_keyring_then_file_then_plaintext() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "  file-key\n").unwrap();
        let keyring = OneKey("p", " ring-key ");
        let other = OneKey("someone-else", "theirs");

        // A variable name nobody sets, so the keyring comes next.
        let var = "CROW_PROVIDERS_TEST_KEY_UNSET_9f2c";
        fn found(places: KeyPlaces<'_>) -> (ApiKey, KeySource) {
            resolve_api_key(places).unwrap().unwrap()
        }
        let (key, source) = found(places(&[var], Some(&keyring), Some(&file), Some("plain")));
        assert_eq!(key.expose(), "ring-key");
        assert_eq!(source, KeySource::Keyring);

        // Nothing in the keyring for this provider: the file.
        let (key, source) = found(places(&[var], Some(&other), Some(&file), Some("plain")));
        assert_eq!(key.expose(), "file-key");
        assert_eq!(source, KeySource::File(file.clone()));

        let (key, source) = found(places(&[var], None, None, Some(" plain ")));
        assert_eq!(key.expose(), "plain");
        assert_eq!(source, KeySource::Plaintext);

        // PATH is always set and non-empty: it stands in for a key variable without mutating
        // the process environment (which is unsafe in edition 2024). The second variable
        // counts when the first is unset.
        let (key, source) = found(places(&[var, "PATH"], Some(&keyring), Some(&file), None));
        assert_eq!(key.expose(), std::env::var("PATH").unwrap().trim());
        assert_eq!(source, KeySource::Env("PATH".into()));

        assert!(
            resolve_api_key(places(&[var], None, None, None))
                .unwrap()
                .is_none()
        );
        assert!(
            resolve_api_key(places(&[], Some(&other), None, Some("  ")))
                .unwrap()
                .is_none()
        );
        assert!(resolve_api_key(KeyPlaces::default()).unwrap().is_none());
    }

    #[test]
    fn missing_or_empty_file_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let err = resolve_api_key(places(&[], None, Some(&missing), Some("plain"))).unwrap_err();
        assert!(err.to_string().contains(&missing.display().to_string()));

        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let err = resolve_api_key(places(&[], None, Some(&empty), None)).unwrap_err();
        assert!(err.to_string().contains("empty"));
    }

    #[test]
    fn tilde_expands_to_home() {
        let home = dirs::home_dir().unwrap();
        assert_eq!(expand_home(Path::new("~/k")), home.join("k"));
        assert_eq!(expand_home(Path::new("/abs/k")), PathBuf::from("/abs/k"));
        assert_eq!(expand_home(Path::new("~other")), PathBuf::from("~other"));
    }
}
