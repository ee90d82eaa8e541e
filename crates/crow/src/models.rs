//! `crow models`: the models each configured provider serves (asked from the provider), with
//! context windows, the session's model marked.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use crate::config::{self, Overrides};
use crate::wiring;

/// `crow models`: each provider's list, the session's model marked.
pub async fn command(
    only: Option<String>,
    base_url: Option<String>,
    trust_project: bool,
) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = wiring::find_project_root(&cwd);
    let flags = Overrides {
        trust_project,
        // Selects the provider as `crow run` would: --provider, else the base URL's.
        provider: only.clone(),
        base_url,
        ..Overrides::default()
    };
    let loaded = config::load(&root, &flags)?;
    loaded.require_trust(&root)?;
    let selected = wiring::select_provider(&loaded).ok();
    let names: Vec<String> = match (&only, &loaded.base_url_override, &selected) {
        (Some(name), _, _) => vec![name.clone()],
        // One server asked for: only the provider that goes there.
        (None, Some(_), Some(selected)) => vec![selected.name.clone()],
        _ => loaded.config.providers.keys().cloned().collect(),
    };
    let mut failed = false;
    let mut shown = 0;
    for name in names {
        let is_selected = selected.as_ref().is_some_and(|s| s.name == name);
        let pc = loaded.config.providers.get(&name);
        // The listing needs no model: a placeholder stands in where none is configured.
        let model = pc
            .and_then(|p| p.model.clone())
            .unwrap_or_else(|| "(any)".to_owned());
        let url_override = is_selected
            .then(|| loaded.base_url_override.clone())
            .flatten();
        let settings = match wiring::provider_settings(
            &loaded.config,
            &name,
            url_override.as_deref(),
            Some(&model),
        ) {
            Ok(settings) => settings,
            Err(e) if only.is_some() => return Err(e),
            Err(_) => continue,
        };
        // Without --provider, only providers one could use: the selected one, or with a key.
        if only.is_none() && !is_selected && settings.api_key.is_none() {
            continue;
        }
        shown += 1;
        outln!("{name} ({})", settings.base_url);
        match crow_providers::list_models(&settings).await {
            Ok(models) if models.is_empty() => outln!("  (no models listed)"),
            Ok(models) => {
                let current = selected
                    .as_ref()
                    .filter(|_| is_selected)
                    .map(|s| s.settings.model.as_str());
                for m in models {
                    let mark = if current == Some(m.id.as_str()) {
                        "●"
                    } else {
                        " "
                    };
                    // What compaction plans with: the configured window, else the server's
                    // or the catalog's.
                    let configured = pc
                        .and_then(|p| p.models.get(&m.id))
                        .and_then(|c| c.context_window);
                    let window = configured
                        .or(m.context_window)
                        .map(|w| format!("{} context", tokens(w)))
                        .unwrap_or_default();
                    outln!("  {mark} {:<48} {window}", m.id);
                }
            }
            Err(e) => {
                failed = true;
                outln!("  cannot list: {e}");
            }
        }
    }
    if shown == 0 {
        bail!(
            "no provider to ask: configure one ([providers.NAME]) or set OPENAI_API_KEY / ANTHROPIC_API_KEY"
        );
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// 8192 → "8k", 128000 → "128k", 1048576 → "1049k": what windows are called.
fn tokens(n: u64) -> String {
    if n >= 1000 && n.is_multiple_of(1024) && n < 1_000_000 {
        format!("{}k", n / 1024)
    } else {
        format!("{}k", (n + 500) / 1000)
    }
}
