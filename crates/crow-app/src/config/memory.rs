//! `[memory]` and `[models]` in config.toml (read by `crate::memory`).

use serde::Deserialize;

/// When the finish step runs after a completed task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FinishWhen {
    /// After every completed task.
    On,
    /// Never.
    Off,
    /// Only when the session changed files (the default).
    #[default]
    Changes,
}

/// `[memory]` in config.toml.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// "changes" (default: after a completed task that changed files), "on" or "off".
    pub finish: Option<FinishWhen>,
    /// Give matching learnings to the model before a new session's first prompt (default true).
    pub recall: Option<bool>,
    /// At most this many learnings recalled (default 5).
    pub recall_max: Option<usize>,
    /// Bytes of learnings recalled at most (default 2048).
    pub recall_max_bytes: Option<usize>,
    /// Offer the `memory_search` tool when there is something to search (default true).
    pub search_tool: Option<bool>,
    /// Let the finish step write draft skills to .crow/skills/drafts/ (default true; never
    /// activated by themselves).
    pub skill_drafts: Option<bool>,
}

/// `[models]`: models for side jobs.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelsConfig {
    /// A small, cheap model for side jobs — the finish step, compaction summaries, level-2
    /// generated nudges: a model of the session's provider, or `provider/model`. Default: the
    /// session's own model.
    pub small: Option<String>,
    /// The model that writes compaction summaries (default: `small`, else the agent's own).
    pub compaction: Option<String>,
    /// The model that writes level-2 generated nudges (default: `small`, else the builder's).
    pub nudge: Option<String>,
    /// Prices in US dollars per million tokens, by model name or name prefix (the longest
    /// wins), over the built-in list: `[models.prices."gpt-4.1"] input = 2.0, output = 8.0`.
    #[serde(default)]
    pub prices: std::collections::BTreeMap<String, crow_providers::prices::Price>,
}

impl ModelsConfig {
    /// The price of `model`: the config's, else the built-in list's.
    pub fn price(&self, model: &str) -> Option<crow_providers::prices::Price> {
        let lower = model.to_ascii_lowercase();
        let base = lower.rsplit('/').next().unwrap_or(&lower).to_owned();
        self.prices
            .iter()
            .filter(|(name, _)| {
                let name = name.to_ascii_lowercase();
                lower.starts_with(&name) || base.starts_with(&name)
            })
            .max_by_key(|(name, _)| name.len())
            .map(|(_, price)| *price)
            .or_else(|| crow_providers::prices::price(model))
    }
}
