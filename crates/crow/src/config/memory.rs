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
    /// A small, cheap model for side calls such as the finish step: a model of the session's
    /// provider, or `provider/model`. Default: the session's own model.
    pub small: Option<String>,
}
