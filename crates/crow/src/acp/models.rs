//! The editor's model selector: the models the configuration names, then those the providers
//! themselves list (the same lists `crow models` prints), fetched once in the background so
//! no session waits for a provider's answer.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Result;
use crow_acp::{Choice, ModelInfo};
use crow_providers::ProviderSettings;

use crate::config::{Config, LoadedConfig};
use crate::wiring::{provider_settings, select_provider};

/// How long one provider's list may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(5);

/// Models of every provider crow can use: the selected one, and any other whose key is set.
pub(super) fn models(loaded: &LoadedConfig) -> Result<(Vec<ModelInfo>, String)> {
    let selection = select_provider(loaded)?;
    let default = model_id(&selection.name, &selection.settings.model);
    let mut models = Vec::new();
    for (name, pc) in &loaded.config.providers {
        let selected = *name == selection.name;
        let Ok(settings) = provider_settings(&loaded.config, name, None, None) else {
            continue;
        };
        if !selected && settings.api_key.is_none() {
            continue;
        }
        let mut names: Vec<String> = pc.model.iter().cloned().collect();
        names.extend(pc.models.keys().cloned());
        if selected {
            names.insert(0, selection.settings.model.clone());
        }
        for model in names {
            let id = model_id(name, &model);
            if models.iter().any(|m: &ModelInfo| m.choice.id == id) {
                continue;
            }
            let window = ProviderSettings {
                model: model.clone(),
                context_window: pc.models.get(&model).and_then(|m| m.context_window),
                ..settings.clone()
            }
            .resolved_context_window();
            models.push(ModelInfo {
                choice: Choice::new(id, format!("{model} ({name})")),
                context_window: window,
            });
        }
    }
    Ok((models, default))
}

pub(super) fn model_id(provider: &str, model: &str) -> String {
    format!("{provider}/{model}")
}

/// The providers' own lists, filled in by a background task.
#[derive(Clone, Default)]
pub(super) struct Listed(Arc<Mutex<Vec<ModelInfo>>>);

impl Listed {
    /// Starts asking every usable provider (the selected one, and any other with a key) for
    /// its models. Without a runtime (never in `crow acp`) nothing is asked.
    pub(super) fn fetch(config: &Config) -> Self {
        let listed = Self::default();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return listed;
        };
        let selected = config.provider.clone();
        let providers: Vec<(String, ProviderSettings)> = config
            .providers
            .keys()
            .filter_map(|name| {
                let settings = provider_settings(config, name, None, None).ok()?;
                // A local Ollama needs no key; asking a closed port costs nothing.
                let usable = selected.as_deref() == Some(name.as_str())
                    || settings.api_key.is_some()
                    || settings.kind == crow_providers::ProviderKind::Ollama;
                usable.then(|| (name.clone(), settings))
            })
            .collect();
        let into = listed.clone();
        runtime.spawn(async move {
            for (name, settings) in providers {
                match tokio::time::timeout(LIST_TIMEOUT, crow_providers::list_models(&settings))
                    .await
                {
                    Ok(Ok(found)) => {
                        let mut models = into.0.lock().unwrap_or_else(PoisonError::into_inner);
                        models.extend(found.into_iter().map(|m| ModelInfo {
                            choice: Choice::new(
                                model_id(&name, &m.id),
                                format!("{} ({name})", m.id),
                            ),
                            context_window: m.context_window,
                        }));
                    }
                    Ok(Err(e)) => tracing::debug!("models of {name} not listed: {e}"),
                    Err(_) => tracing::debug!("models of {name} not listed: no answer in time"),
                }
            }
        });
        listed
    }

    /// Appends the listed models `models` does not have yet.
    pub(super) fn add_to(&self, models: &mut Vec<ModelInfo>) {
        let listed = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for model in listed.iter() {
            if !models.iter().any(|m| m.choice.id == model.choice.id) {
                models.push(model.clone());
            }
        }
    }
}
