//! API keys in the OS keyring: the [`KeyStore`] key resolution asks after the environment
//! (crow-providers' `key.rs` knows no concrete keyring), and what `crow config set-key` /
//! `delete-key` write to. One entry per provider: service `crow`, user the provider's name.
//!
//! The stores, on keyring-core (the `keyring` crate's API since its v4): the Secret Service
//! over D-Bus on Linux and the BSDs (zbus, pure Rust: no libdbus), the Keychain on macOS, the
//! Credential Manager on Windows. The Linux kernel's keyutils store is not used: its keys live
//! only until logout or reboot, so a key "stored" there would vanish unannounced; where there
//! is no Secret Service (headless machines, CI) the 0600 key file is the store, and lookup
//! skips the keyring without a word.
//!
//! No keyring error ever carries the key: errors are rewritten in [`describe`] (keyring-core's
//! `BadEncoding` holds the secret's bytes in its Debug form), and [`ApiKey`] never prints.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crow_providers::{ApiKey, KeyStore};
use keyring_core::{CredentialStore, Entry, Error};

/// The keyring's service name for crow's entries.
pub const SERVICE: &str = "crow";

/// `CROW_KEYRING=off`: never touch the OS keyring (lookup skips it, `set-key` writes the file).
pub const SWITCH_ENV: &str = "CROW_KEYRING";

/// How long connecting to the keyring may take: a D-Bus that starts a Secret Service which
/// never answers would otherwise hold every start for D-Bus's own 25 s.
const CONNECT_LIMIT: Duration = Duration::from_secs(3);

/// Why there is no keyring to use.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(String);

/// A keyring operation that failed; the message never holds the key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct KeyringError(String);

/// A credential store holding crow's keys.
pub struct Keyring {
    store: Arc<CredentialStore>,
}

impl Keyring {
    /// Keys in `store` (the OS's, or keyring-core's mock in tests).
    pub fn with_store(store: Arc<CredentialStore>) -> Self {
        Self { store }
    }

    /// The system's keyring, connected on first use and kept for the process.
    pub fn system() -> Result<&'static Keyring, Unavailable> {
        static SYSTEM: OnceLock<Result<Keyring, Unavailable>> = OnceLock::new();
        SYSTEM.get_or_init(connect).as_ref().map_err(Clone::clone)
    }

    /// Where the keys are, in words (`crow config set-key` says it).
    pub fn place(&self) -> &'static str {
        if cfg!(target_os = "macos") {
            "the macOS Keychain"
        } else if cfg!(windows) {
            "the Windows Credential Manager"
        } else {
            "the Secret Service"
        }
    }

    fn entry(&self, provider: &str) -> Result<Entry, KeyringError> {
        self.store
            .build(SERVICE, provider, None)
            .map_err(|e| KeyringError(describe(&e)))
    }

    /// `provider`'s key; `Ok(None)` when the keyring holds none.
    pub fn get(&self, provider: &str) -> Result<Option<ApiKey>, KeyringError> {
        match self.entry(provider)?.get_password() {
            Ok(key) => Ok(Some(ApiKey::new(key))),
            Err(Error::NoEntry) => Ok(None),
            Err(e) => Err(KeyringError(describe(&e))),
        }
    }

    /// Stores `key` as `provider`'s, replacing any.
    pub fn set(&self, provider: &str, key: &ApiKey) -> Result<(), KeyringError> {
        self.entry(provider)?
            .set_password(key.expose())
            .map_err(|e| KeyringError(describe(&e)))
    }

    /// Removes `provider`'s key; `Ok(false)` when there was none.
    pub fn delete(&self, provider: &str) -> Result<bool, KeyringError> {
        match self.entry(provider)?.delete_credential() {
            Ok(()) => Ok(true),
            Err(Error::NoEntry) => Ok(false),
            Err(e) => Err(KeyringError(describe(&e))),
        }
    }
}

impl KeyStore for Keyring {
    /// A keyring that fails is skipped: the key may still be in a file, and the run says
    /// which key it lacks. The failure is logged, never the key.
    fn key(&self, provider: &str) -> Option<ApiKey> {
        match self.get(provider) {
            Ok(key) => key,
            Err(e) => {
                tracing::warn!("the keyring's entry for provider '{provider}' is unusable: {e}");
                None
            }
        }
    }
}

/// The keyring key resolution consults: the system's, connected only when a key is asked of
/// it — a key in the environment comes first, and a start should not pay a D-Bus connection
/// it does not use. Unavailable or switched off, it holds nothing, silently: most machines
/// without one keep keys in the environment or a file.
pub fn lookup() -> &'static dyn KeyStore {
    static SYSTEM: SystemOnUse = SystemOnUse;
    &SYSTEM
}

struct SystemOnUse;

impl KeyStore for SystemOnUse {
    fn key(&self, provider: &str) -> Option<ApiKey> {
        match Keyring::system() {
            Ok(keyring) => keyring.key(provider),
            Err(why) => {
                tracing::debug!("no keyring: {why}");
                None
            }
        }
    }
}

/// Connects to the platform's store, within [`CONNECT_LIMIT`] (on a thread of its own: a
/// store that never answers is left behind, not waited for).
fn connect() -> Result<Keyring, Unavailable> {
    if std::env::var(SWITCH_ENV).is_ok_and(|v| matches!(v.trim(), "off" | "0" | "false")) {
        return Err(Unavailable(format!("{SWITCH_ENV}=off")));
    }
    #[cfg(all(unix, not(target_os = "macos")))]
    if let Some(missing) = no_session_bus() {
        return Err(Unavailable(format!(
            "no Secret Service: there is no D-Bus session bus ({} does not exist)",
            missing.display()
        )));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("crow-keyring".into())
        .spawn(move || {
            let _ = tx.send(platform_store());
        })
        .map_err(|e| Unavailable(format!("cannot start the keyring's thread: {e}")))?;
    match rx.recv_timeout(CONNECT_LIMIT) {
        Ok(store) => store.map(Keyring::with_store),
        Err(_) => Err(Unavailable(format!(
            "the keyring did not answer within {} s",
            CONNECT_LIMIT.as_secs()
        ))),
    }
}

/// The session bus's socket when it plainly does not exist: the address zbus would connect
/// to (`DBUS_SESSION_BUS_ADDRESS`, else `$XDG_RUNTIME_DIR/bus`, else `/run/user/UID/bus`) is
/// one `unix:path=` whose file is missing. Connecting would then fail anyway, but only after
/// three threads (the keyring's, zbus's reactor and its blocking pool) and a wait on them —
/// about a millisecond of every start without a key in the environment on a machine with no
/// desktop session (servers, containers, CI). Any other address is left to zbus.
#[cfg(all(unix, not(target_os = "macos")))]
fn no_session_bus() -> Option<std::path::PathBuf> {
    // As zbus reads them: variables that are not UTF-8 count as unset.
    missing_bus(
        std::env::var_os("DBUS_SESSION_BUS_ADDRESS"),
        std::env::var("XDG_RUNTIME_DIR").ok(),
        nix::unistd::geteuid().as_raw(),
    )
}

/// [`no_session_bus`] for the given `DBUS_SESSION_BUS_ADDRESS`, `XDG_RUNTIME_DIR` and user.
#[cfg(all(unix, not(target_os = "macos")))]
fn missing_bus(
    address: Option<std::ffi::OsString>,
    runtime_dir: Option<String>,
    euid: u32,
) -> Option<std::path::PathBuf> {
    let path = match address {
        Some(address) => {
            let address = address.into_string().ok()?;
            let path = address.strip_prefix("unix:path=")?;
            // Escaped bytes, other keys (`guid=`) or a list of addresses: zbus's to read.
            if path.is_empty() || path.contains(['%', ',', ';']) {
                return None;
            }
            std::path::PathBuf::from(path)
        }
        None => {
            let dir = runtime_dir.unwrap_or_else(|| format!("/run/user/{euid}"));
            std::path::PathBuf::from(format!("{dir}/bus"))
        }
    };
    // `symlink_metadata`, not `exists`: a dangling link is left to zbus to report.
    std::fs::symlink_metadata(&path).is_err().then_some(path)
}

#[cfg(all(unix, not(target_os = "macos")))]
fn platform_store() -> Result<Arc<CredentialStore>, Unavailable> {
    zbus_secret_service_keyring_store::Store::new()
        .map(|s| s as Arc<CredentialStore>)
        .map_err(|e| {
            Unavailable(format!(
                "no Secret Service on this session's D-Bus (a desktop keyring such as GNOME \
                 Keyring or KWallet provides one): {}",
                describe(&e)
            ))
        })
}

#[cfg(target_os = "macos")]
fn platform_store() -> Result<Arc<CredentialStore>, Unavailable> {
    apple_native_keyring_store::keychain::Store::new()
        .map(|s| s as Arc<CredentialStore>)
        .map_err(|e| Unavailable(format!("the Keychain cannot be used: {}", describe(&e))))
}

#[cfg(windows)]
fn platform_store() -> Result<Arc<CredentialStore>, Unavailable> {
    windows_native_keyring_store::Store::new()
        .map(|s| s as Arc<CredentialStore>)
        .map_err(|e| {
            Unavailable(format!(
                "the Credential Manager cannot be used: {}",
                describe(&e)
            ))
        })
}

#[cfg(not(any(unix, windows)))]
fn platform_store() -> Result<Arc<CredentialStore>, Unavailable> {
    Err(Unavailable("crow knows no keyring on this system".into()))
}

/// An error of the keyring in words, never with the secret (`BadEncoding` and
/// `BadDataFormat` hold its bytes).
pub fn describe(error: &Error) -> String {
    match error {
        Error::PlatformFailure(e) => e.to_string(),
        Error::NoStorageAccess(e) => format!("the keyring is locked or refused access: {e}"),
        Error::NoEntry => "no such entry".into(),
        Error::BadEncoding(_) => "the stored key is not UTF-8 text".into(),
        Error::BadDataFormat(..) => "the stored key is not in the expected format".into(),
        Error::BadStoreFormat(why) => format!("the keyring's data is malformed: {why}"),
        Error::TooLong(what, limit) => format!("{what} is longer than the keyring's {limit}"),
        Error::Invalid(what, why) => format!("{what} is invalid: {why}"),
        Error::Ambiguous(entries) => format!("{} keyring entries match", entries.len()),
        Error::NoDefaultStore => "no keyring".into(),
        Error::NotSupportedByStore(why) => format!("the keyring does not support it: {why}"),
        _ => "the keyring failed".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keyring_core::api::CredentialStoreApi;

    fn mock() -> Keyring {
        Keyring::with_store(keyring_core::mock::Store::new().unwrap())
    }

    /// A session bus that plainly is not there is seen without connecting; one that is, or an
    /// address crow does not read itself, is left to zbus.
    #[cfg(all(unix, not(target_os = "macos")))]
    #[test]
    fn a_missing_session_bus_is_seen_without_connecting() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().to_str().unwrap().to_owned();
        let bus = dir.path().join("bus");
        let address = |a: &str| Some(std::ffi::OsString::from(a));
        // No variable: $XDG_RUNTIME_DIR/bus, then /run/user/UID/bus.
        assert_eq!(missing_bus(None, Some(run.clone()), 0), Some(bus.clone()));
        assert_eq!(
            missing_bus(None, None, 4_000_000_000),
            Some("/run/user/4000000000/bus".into())
        );
        let named = format!("unix:path={}", bus.display());
        assert_eq!(missing_bus(address(&named), None, 0), Some(bus.clone()));
        // Other addresses are zbus's to read.
        for other in [
            format!("{named},guid=0123"),
            format!("{named};unix:path=/elsewhere"),
            "unix:abstract=/tmp/dbus-x".to_owned(),
            "tcp:host=localhost,port=1".to_owned(),
            "unix:path=/tmp/with%20space".to_owned(),
        ] {
            assert_eq!(missing_bus(address(&other), None, 0), None, "{other}");
        }
        // There: connected to as before.
        std::fs::write(&bus, "").unwrap();
        assert_eq!(missing_bus(None, Some(run), 0), None);
        assert_eq!(missing_bus(address(&named), None, 0), None);
    }

    #[test]
    fn set_get_delete_round_trip_per_provider() {
        let keyring = mock();
        assert_eq!(keyring.get("openai").unwrap(), None);
        keyring.set("openai", &ApiKey::new("sk-one")).unwrap();
        keyring.set("anthropic", &ApiKey::new("sk-two")).unwrap();
        assert_eq!(keyring.get("openai").unwrap(), Some(ApiKey::new("sk-one")));
        assert_eq!(keyring.key("anthropic"), Some(ApiKey::new("sk-two")));
        keyring.set("openai", &ApiKey::new("sk-three")).unwrap();
        assert_eq!(keyring.key("openai"), Some(ApiKey::new("sk-three")));
        assert!(keyring.delete("openai").unwrap());
        assert!(!keyring.delete("openai").unwrap());
        assert_eq!(keyring.key("openai"), None);
        assert_eq!(keyring.key("anthropic"), Some(ApiKey::new("sk-two")));
    }

    /// A failing entry is skipped by lookup, and no error names the key.
    #[test]
    fn a_failing_keyring_is_skipped_and_its_errors_hold_no_key() {
        let store = keyring_core::mock::Store::new().unwrap();
        let keyring = Keyring::with_store(store.clone());
        keyring.set("openai", &ApiKey::new("sk-secret-9")).unwrap();
        let entry = store.build(SERVICE, "openai", None).unwrap();
        let cred: &keyring_core::mock::Cred = entry.as_any().downcast_ref().unwrap();
        cred.set_error(Error::BadEncoding(b"sk-secret-9".to_vec()));
        assert_eq!(keyring.key("openai"), None);
        cred.set_error(Error::BadDataFormat(
            b"sk-secret-9".to_vec(),
            "bad".to_owned().into(),
        ));
        let err = keyring.get("openai").unwrap_err();
        assert!(!format!("{err} {err:?}").contains("sk-secret"), "{err:?}");
        cred.set_error(Error::NoStorageAccess("locked".to_owned().into()));
        let err = keyring
            .set("openai", &ApiKey::new("sk-secret-9"))
            .unwrap_err();
        assert!(err.to_string().contains("locked"), "{err}");
        assert!(!format!("{err} {err:?}").contains("sk-secret"));
        // The error was used up; the key is still there.
        assert_eq!(keyring.key("openai"), Some(ApiKey::new("sk-secret-9")));
    }
}
