//! `todo_write` / `todo_read`: each agent's own plan, kept by both tools of one registry. The
//! builder, its reviewer and every subagent share the registry but not a plan: a subagent's
//! plan must not replace its caller's (agents are told apart by their shown name).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use crow_core::{Tool, ToolContext, ToolKind, ToolMetadata, ToolResult};
use serde::{Deserialize, Deserializer, Serialize};

use crate::args::parse;

const SHAPE: &str = r#"{"todos": [{"content": string, "status": "pending"|"in_progress"|"completed", "id"?: string, "priority"?: string}]}"#;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    #[serde(alias = "in-progress", alias = "doing")]
    InProgress,
    #[serde(alias = "done", alias = "complete")]
    Completed,
}

/// One item of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    pub content: String,
    pub status: TodoStatus,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_or_number"
    )]
    pub id: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_or_number"
    )]
    pub priority: Option<String>,
}

/// Models send ids as `1` as often as `"1"`.
fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<serde_json::Value>::deserialize(d)? {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    })
}

/// The plans of one session's agents, by agent name, kept by its todo tools.
#[derive(Debug, Clone, Default)]
pub struct TodoList(Arc<Mutex<HashMap<String, Vec<Todo>>>>);

impl TodoList {
    /// `agent`'s plan (empty if it has none).
    pub fn get(&self, agent: &str) -> Vec<Todo> {
        self.0
            .lock()
            .map(|plans| plans.get(agent).cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Replaces `agent`'s plan.
    pub fn set(&self, agent: &str, todos: Vec<Todo>) {
        // A poisoned lock only means a panic elsewhere mid-write; the data is replaced anyway.
        let mut plans = self.0.lock().unwrap_or_else(|p| p.into_inner());
        plans.insert(agent.to_owned(), todos);
    }
}

fn render(todos: &[Todo]) -> String {
    if todos.is_empty() {
        return "No todos.".to_owned();
    }
    let done = todos
        .iter()
        .filter(|t| t.status == TodoStatus::Completed)
        .count();
    let mut out = format!("Todos ({done}/{} completed):\n", todos.len());
    for (i, t) in todos.iter().enumerate() {
        let mark = match t.status {
            TodoStatus::Pending => "[ ]",
            TodoStatus::InProgress => "[>]",
            TodoStatus::Completed => "[x]",
        };
        out.push_str(&format!("{mark} {}. {}\n", i + 1, t.content));
    }
    out.trim_end().to_owned()
}

fn result(todos: &[Todo]) -> ToolResult {
    ToolResult::success(render(todos)).with_metadata(ToolMetadata {
        extra: serde_json::json!({ "todos": todos }),
        ..ToolMetadata::default()
    })
}

#[derive(Debug, Deserialize)]
struct WriteArgs {
    todos: Vec<Todo>,
}

/// Replaces the plan.
#[derive(Debug, Clone)]
pub struct TodoWriteTool {
    list: TodoList,
}

impl TodoWriteTool {
    pub fn new(list: TodoList) -> Self {
        Self { list }
    }
}

#[async_trait]
impl Tool for TodoWriteTool {
    fn name(&self) -> &str {
        "todo_write"
    }

    fn description(&self) -> &str {
        "Replace your todo list (the plan for multi-step work). Keep one item in_progress and \
         mark items completed as soon as they are done."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string"},
                            "status": {"enum": ["pending", "in_progress", "completed"]},
                            "id": {"type": "string"},
                            "priority": {"type": "string"}
                        },
                        "required": ["content", "status"]
                    }
                }
            },
            "required": ["todos"]
        })
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Think
    }

    async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        let args: WriteArgs = match parse(&input, SHAPE) {
            Ok(a) => a,
            Err(e) => return e,
        };
        if let Some(i) = args.todos.iter().position(|t| t.content.trim().is_empty()) {
            return ToolResult::error(format!("todos[{i}].content is empty"));
        }
        self.list.set(&ctx.agent, args.todos.clone());
        result(&args.todos)
    }
}

/// Shows the plan.
#[derive(Debug, Clone)]
pub struct TodoReadTool {
    list: TodoList,
}

impl TodoReadTool {
    pub fn new(list: TodoList) -> Self {
        Self { list }
    }
}

#[async_trait]
impl Tool for TodoReadTool {
    fn name(&self) -> &str {
        "todo_read"
    }

    fn description(&self) -> &str {
        "Show your current todo list."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {}})
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Think
    }

    async fn execute(&self, _input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        result(&self.list.get(&ctx.agent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TestEnv;

    #[tokio::test]
    async fn round_trip_through_the_shared_list() {
        let env = TestEnv::new();
        let list = TodoList::default();
        let write = TodoWriteTool::new(list.clone());
        let read = TodoReadTool::new(list);
        let r = read.execute(serde_json::json!({}), &env.ctx).await;
        assert_eq!(r.output, "No todos.");
        let r = write
            .execute(
                serde_json::json!({"todos": [
                    {"content": "read code", "status": "completed", "id": 1},
                    {"content": "fix bug", "status": "in_progress", "priority": "high"},
                    {"content": "run tests", "status": "pending"}
                ]}),
                &env.ctx,
            )
            .await;
        assert!(r.is_success(), "{}", r.output);
        let expected = "Todos (1/3 completed):\n[x] 1. read code\n[>] 2. fix bug\n[ ] 3. run tests";
        assert_eq!(r.output, expected);
        assert_eq!(r.metadata.extra["todos"][0]["id"], "1");
        assert_eq!(r.metadata.extra["todos"][1]["status"], "in_progress");
        let r = read.execute(serde_json::Value::Null, &env.ctx).await;
        assert_eq!(r.output, expected);
        assert_eq!(r.metadata.extra["todos"].as_array().map(Vec::len), Some(3));
    }

    #[tokio::test]
    async fn each_agent_keeps_its_own_plan() {
        let builder = TestEnv::new();
        let mut explore = TestEnv::new();
        explore.ctx.agent = "builder/explore".into();
        let list = TodoList::default();
        let write = TodoWriteTool::new(list.clone());
        let read = TodoReadTool::new(list);
        let plan =
            |what: &str| serde_json::json!({"todos": [{"content": what, "status": "pending"}]});
        assert!(
            write
                .execute(plan("fix the bug"), &builder.ctx)
                .await
                .is_success()
        );
        // A subagent's plan does not replace its caller's.
        assert!(
            write
                .execute(plan("list the files"), &explore.ctx)
                .await
                .is_success()
        );
        let r = read.execute(serde_json::json!({}), &builder.ctx).await;
        assert!(
            r.output.contains("fix the bug") && !r.output.contains("list the files"),
            "{}",
            r.output
        );
        let r = read.execute(serde_json::json!({}), &explore.ctx).await;
        assert!(
            r.output.contains("list the files") && !r.output.contains("fix the bug"),
            "{}",
            r.output
        );
    }

    #[tokio::test]
    async fn bad_status_names_the_field() {
        let env = TestEnv::new();
        let write = TodoWriteTool::new(TodoList::default());
        let r = write
            .execute(
                serde_json::json!({"todos": [{"content": "x", "status": "started"}]}),
                &env.ctx,
            )
            .await;
        assert!(!r.is_success());
        assert!(
            r.output.contains("unknown variant `started`"),
            "{}",
            r.output
        );
        assert!(r.output.contains("in_progress"), "{}", r.output);
    }
}
