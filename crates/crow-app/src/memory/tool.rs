//! `memory_search`: the model looks into what earlier sessions of this project learned and
//! said. Read-only, local (the session database), so the policy lets it run like a search.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use crow_core::{Footprint, Tool, ToolContext, ToolKind, ToolResult};
use crow_store::SqliteStore;
use serde_json::{Value, json};

const DEFAULT_LIMIT: usize = 8;
const MAX_LIMIT: usize = 30;

pub struct MemorySearch {
    store: Arc<SqliteStore>,
    project_root: PathBuf,
}

impl MemorySearch {
    pub fn new(store: Arc<SqliteStore>, project_root: PathBuf) -> Self {
        Self {
            store,
            project_root,
        }
    }
}

/// Whether the store holds anything of this project to search: a learning, or a session
/// other than `current` (so resuming a project's first session keeps its tool list).
pub fn worth_offering(
    store: &SqliteStore,
    project_root: &std::path::Path,
    current: Option<&str>,
) -> bool {
    store
        .has_memory(project_root, current)
        .inspect_err(|e| tracing::debug!("memory_search not offered: {e}"))
        .unwrap_or(false)
}

#[async_trait]
impl Tool for MemorySearch {
    fn name(&self) -> &str {
        "memory_search"
    }

    fn description(&self) -> &str {
        "Search what earlier crow sessions in this project learned (conventions, pitfalls, fixes, \
         decisions, session summaries) and, with scope \"sessions\", the text of those sessions \
         (prompts, answers, commands, outputs). Words are matched, best first."
    }

    fn parameters_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to look for"},
                "scope": {
                    "type": "string",
                    "enum": ["learnings", "sessions", "both"],
                    "description": "Default: both"
                },
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}
            },
            "required": ["query"]
        })
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Search
    }

    fn footprint(&self, _input: &Value, _ctx: &ToolContext) -> Footprint {
        Footprint::Nothing
    }

    async fn execute(&self, input: Value, ctx: &ToolContext) -> ToolResult {
        let Some(query) = input.get("query").and_then(Value::as_str) else {
            return ToolResult::error("memory_search needs a \"query\" string");
        };
        let scope = input.get("scope").and_then(Value::as_str).unwrap_or("both");
        if !matches!(scope, "learnings" | "sessions" | "both") {
            return ToolResult::error(format!(
                "unknown scope \"{scope}\": use learnings, sessions or both"
            ));
        }
        let limit = input
            .get("limit")
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(DEFAULT_LIMIT)
            .clamp(1, MAX_LIMIT);
        if crow_store::fts_query(query).is_none() {
            return ToolResult::error(
                "the query has no searchable words (words of three letters or more)",
            );
        }
        let mut out = String::new();
        if scope != "sessions" {
            match self
                .store
                .search_learnings(query, Some(&self.project_root), true, limit)
            {
                Ok(hits) if !hits.is_empty() => {
                    out.push_str("Learnings:\n");
                    for hit in hits {
                        let l = hit.learning;
                        let _ = write!(
                            out,
                            "- #{} ({}, {}) {}",
                            l.id,
                            l.kind,
                            l.updated_at.format("%Y-%m-%d"),
                            l.text
                        );
                        if !l.files.is_empty() {
                            let _ = write!(out, " [files: {}]", l.files.join(", "));
                        }
                        out.push('\n');
                    }
                }
                Ok(_) => out.push_str("Learnings: none match.\n"),
                Err(e) => return ToolResult::error(format!("memory search failed: {e}")),
            }
        }
        if scope != "learnings" {
            match self
                .store
                .search_entries(query, Some(&self.project_root), limit + 5)
            {
                Ok(hits) => {
                    // Not this session's own entries: the model has those.
                    let hits: Vec<_> = hits
                        .into_iter()
                        .filter(|h| h.session_id != ctx.session_id)
                        .take(limit)
                        .collect();
                    if hits.is_empty() {
                        out.push_str("Past sessions: none match.\n");
                    } else {
                        out.push_str("Past sessions:\n");
                        for h in hits {
                            let _ = writeln!(
                                out,
                                "- session {} \"{}\" {} {} ({}): {}",
                                short(&h.session_id),
                                h.session_title,
                                h.ts.format("%Y-%m-%d"),
                                h.kind,
                                h.agent,
                                h.snippet
                            );
                        }
                    }
                }
                Err(e) => return ToolResult::error(format!("session search failed: {e}")),
            }
        }
        ToolResult::success(out)
    }
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}
