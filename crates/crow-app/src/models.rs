//! Which models the providers serve (asked from each provider, bounded in time): `crow
//! models` and the terminal's `/model` list them.

use std::time::Duration;

use crow_providers::{ListedModel, ProviderSettings};

use crate::config::Config;
use crate::wiring;

/// How long a listing may take in the terminal, where the prompt waits for it.
const LIST_TIMEOUT: Duration = Duration::from_secs(8);

/// One provider's answer to "which models do you serve".
pub struct Served {
    pub name: String,
    pub models: Result<Vec<ListedModel>, String>,
}

/// What the session's provider (`current`, as the session has it) and every other configured
/// provider with a key serve, as `crow models` lists them; asked at once.
pub async fn served(config: &Config, current: &ProviderSettings) -> Vec<Served> {
    let mut asked = vec![current.clone()];
    for name in config.providers.keys().filter(|n| **n != current.name) {
        // The listing needs no model: a placeholder stands in where none is configured.
        if let Ok(settings) = wiring::provider_settings(config, name, None, Some("(any)"))
            && settings.api_key.is_some()
        {
            asked.push(settings);
        }
    }
    futures::future::join_all(asked.into_iter().map(|settings| async move {
        Served {
            models: list(&settings).await,
            name: settings.name,
        }
    }))
    .await
}

/// `crow_providers::list_models`, bounded for a prompt that waits on it.
pub async fn list(settings: &ProviderSettings) -> Result<Vec<ListedModel>, String> {
    tokio::time::timeout(LIST_TIMEOUT, crow_providers::list_models(settings))
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no answer from {} in {} s",
                settings.base_url,
                LIST_TIMEOUT.as_secs()
            ))
        })
}
