//! `think` (a scratchpad without side effects) and `task_complete` (ends the turn).

use async_trait::async_trait;
use crow_core::{Tool, ToolContext, ToolKind, ToolResult};
use serde::Deserialize;

use crate::args::parse;

#[derive(Debug, Deserialize)]
struct ThinkArgs {
    thought: String,
}

/// Lets the model reason in the open between tool calls; returns the thought unchanged.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThinkTool;

#[async_trait]
impl Tool for ThinkTool {
    fn name(&self) -> &str {
        "think"
    }

    fn description(&self) -> &str {
        "Think step by step: write down reasoning or a plan. No side effects."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {"thought": {"type": "string"}},
            "required": ["thought"]
        })
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Think
    }

    async fn execute(&self, input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        match parse::<ThinkArgs>(&input, r#"{"thought": string}"#) {
            Ok(a) => ToolResult::success(a.thought),
            Err(e) => e,
        }
    }
}

#[derive(Debug, Deserialize)]
struct CompleteArgs {
    summary: String,
}

/// Signals that the task is done; the core's loop ends the turn when this succeeds.
#[derive(Debug, Clone, Copy, Default)]
pub struct TaskCompleteTool;

#[async_trait]
impl Tool for TaskCompleteTool {
    fn name(&self) -> &str {
        crow_core::TASK_COMPLETE
    }

    fn description(&self) -> &str {
        "Call when the task is fully done, with a short summary for the user: what you did, \
         what you verified (commands and their results) and what you did not verify."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {"summary": {"type": "string"}},
            "required": ["summary"]
        })
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Other
    }

    async fn execute(&self, input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        match parse::<CompleteArgs>(&input, r#"{"summary": string}"#) {
            Ok(a) => ToolResult::success(a.summary),
            Err(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TestEnv;

    #[tokio::test]
    async fn think_and_complete_echo_their_input() {
        let env = TestEnv::new();
        let r = ThinkTool
            .execute(serde_json::json!({"thought": "hmm"}), &env.ctx)
            .await;
        assert_eq!((r.is_success(), r.output.as_str()), (true, "hmm"));
        let r = TaskCompleteTool
            .execute(serde_json::json!({"summary": "did it"}), &env.ctx)
            .await;
        assert_eq!((r.is_success(), r.output.as_str()), (true, "did it"));
        let r = TaskCompleteTool
            .execute(serde_json::json!({}), &env.ctx)
            .await;
        assert!(!r.is_success() && r.output.contains("summary"));
    }
}
