//! Which API key a provider gets, and from where: its environment variable(s), then the OS
//! keyring (`keyring.rs`, passed in as a [`KeyStore`]), then its key file, then a plaintext
//! `api_key` (warned about by the caller).

use anyhow::{Context, Result};
use crow_providers::{ApiKey, KeyPlaces, KeySource, KeyStore, ProviderKind};

use crate::config::ProviderConfig;

/// The variables provider `name`'s key may be in, in order: its `api_key_env`; Azure's
/// conventional variable when it names no key of its own; Gemini's `GOOGLE_API_KEY` too
/// (Google's SDKs read both) unless it names a variable of its own.
pub(super) fn key_vars(pc: &ProviderConfig) -> Vec<&str> {
    let mut vars = Vec::with_capacity(2);
    match pc.api_key_env.as_deref() {
        Some(var) => vars.push(var),
        None if pc.kind == Some(ProviderKind::Azure)
            && pc.api_key_file.is_none()
            && pc.api_key.is_none() =>
        {
            vars.push(crow_providers::AZURE_OPENAI_API_KEY_ENV);
        }
        None => {}
    }
    if pc.kind == Some(ProviderKind::Gemini)
        && pc
            .api_key_env
            .as_deref()
            .is_none_or(|v| v == crow_providers::GEMINI_API_KEY_ENV)
    {
        vars.push(crow_providers::GOOGLE_API_KEY_ENV);
    }
    vars
}

/// Provider `name`'s key and where it came from; `None` when it has none anywhere.
pub(super) fn provider_key(
    name: &str,
    pc: &ProviderConfig,
    keys: &dyn KeyStore,
) -> Result<Option<(ApiKey, KeySource)>> {
    let vars = key_vars(pc);
    crow_providers::resolve_api_key(KeyPlaces {
        env: &vars,
        keyring: Some((keys, name)),
        file: pc.api_key_file.as_deref(),
        plaintext: pc.api_key.as_deref(),
    })
    .with_context(|| format!("cannot read the API key of provider '{name}'"))
}

/// Where provider `name`'s key would come from, in resolution order, as a reason for choosing
/// it; `None` without one. A key file counts even if it cannot be read: the user asked for
/// it, and using the provider reports the problem.
pub(super) fn key_reason(name: &str, pc: &ProviderConfig, keys: &dyn KeyStore) -> Option<String> {
    if let Some(var) = key_vars(pc).into_iter().find(|v| env_set(v)) {
        return Some(format!("{var} is set"));
    }
    if keys
        .key(name)
        .is_some_and(|k| !k.expose().trim().is_empty())
    {
        return Some(format!("the keyring holds a key for {name}"));
    }
    if pc.api_key_file.is_some() {
        return Some(format!("providers.{name}.api_key_file is set"));
    }
    pc.api_key
        .as_deref()
        .is_some_and(|k| !k.trim().is_empty())
        .then(|| format!("providers.{name}.api_key is set"))
}

fn env_set(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyring::Keyring;

    /// A variable nobody sets.
    const UNSET: &str = "CROW_APP_TEST_KEY_UNSET_51ad";

    fn provider(env: &str, file: Option<&std::path::Path>, plain: Option<&str>) -> ProviderConfig {
        ProviderConfig {
            kind: Some(ProviderKind::OpenAi),
            api_key_env: Some(env.to_owned()),
            api_key_file: file.map(std::path::Path::to_path_buf),
            api_key: plain.map(str::to_owned),
            ..ProviderConfig::default()
        }
    }

    fn found(name: &str, pc: &ProviderConfig, keys: &dyn KeyStore) -> (String, KeySource) {
        let (key, source) = provider_key(name, pc, keys).unwrap().unwrap();
        (key.expose().to_owned(), source)
    }

    /// env → keyring → file → plaintext, with keyring-core's in-memory store for the keyring.
    #[test]
    fn env_then_keyring_then_file_then_plaintext() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "file-key\n").unwrap();
        let keyring = Keyring::with_store(keyring_core::mock::Store::new().unwrap());
        keyring.set("work", &ApiKey::new("ring-key")).unwrap();
        let path = std::env::var("PATH").unwrap();

        // PATH stands in for a set key variable (the environment is not changed in tests).
        let all = provider("PATH", Some(&file), Some("plain"));
        assert_eq!(
            found("work", &all, &keyring),
            (path.trim().to_owned(), KeySource::Env("PATH".into()))
        );
        assert_eq!(key_reason("work", &all, &keyring).unwrap(), "PATH is set");

        let unset = provider(UNSET, Some(&file), Some("plain"));
        assert_eq!(
            found("work", &unset, &keyring),
            ("ring-key".into(), KeySource::Keyring)
        );
        assert_eq!(
            key_reason("work", &unset, &keyring).unwrap(),
            "the keyring holds a key for work"
        );

        // The keyring holds nothing for this provider: its file.
        assert_eq!(
            found("home", &unset, &keyring),
            ("file-key".into(), KeySource::File(file.clone()))
        );
        assert_eq!(
            key_reason("home", &unset, &keyring).unwrap(),
            "providers.home.api_key_file is set"
        );

        let plain = provider(UNSET, None, Some("plain"));
        assert_eq!(
            found("home", &plain, &keyring),
            ("plain".into(), KeySource::Plaintext)
        );

        // A deleted key is gone from the lookup; no keyring at all is the same.
        assert!(keyring.delete("work").unwrap());
        let nothing = provider(UNSET, None, None);
        assert!(provider_key("work", &nothing, &keyring).unwrap().is_none());
        assert!(key_reason("work", &nothing, &keyring).is_none());
        let none = crow_providers::NoKeyStore;
        assert!(provider_key("work", &nothing, &none).unwrap().is_none());
    }

    /// Gemini reads GOOGLE_API_KEY too, as a variable (before the keyring); a provider with a
    /// variable of its own does not.
    #[test]
    fn gemini_reads_both_variables_before_the_keyring() {
        let gemini = ProviderConfig {
            kind: Some(ProviderKind::Gemini),
            ..ProviderConfig::default()
        };
        assert_eq!(key_vars(&gemini), [crow_providers::GOOGLE_API_KEY_ENV]);
        let named = ProviderConfig {
            api_key_env: Some("MINE".into()),
            ..gemini.clone()
        };
        assert_eq!(key_vars(&named), ["MINE"]);
        let default = ProviderConfig {
            api_key_env: Some(crow_providers::GEMINI_API_KEY_ENV.into()),
            ..gemini
        };
        assert_eq!(
            key_vars(&default),
            [
                crow_providers::GEMINI_API_KEY_ENV,
                crow_providers::GOOGLE_API_KEY_ENV
            ]
        );
        let azure = ProviderConfig {
            kind: Some(ProviderKind::Azure),
            ..ProviderConfig::default()
        };
        assert_eq!(key_vars(&azure), [crow_providers::AZURE_OPENAI_API_KEY_ENV]);
    }
}
