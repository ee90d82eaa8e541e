//! `todo_write`: each agent's own plan. The builder, its reviewer and every subagent share the
//! registry but not a plan: a subagent's plan must not replace its caller's (agents are told
//! apart by their shown name). Writing the plan shows it back, so no separate read tool is
//! advertised (one tool definition less in every request).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use crow_core::{Tool, ToolContext, ToolKind, ToolMetadata, ToolResult};
use serde::{Deserialize, Deserializer, Serialize};

use crate::args::parse;

const SHAPE: &str =
    r#"{"todos": [{"content": string, "status": "pending"|"in_progress"|"completed"}]}"#;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    #[serde(alias = "in-progress", alias = "doing")]
    InProgress,
    #[serde(alias = "done", alias = "complete")]
    Completed,
}

/// One item of the plan. Items are numbered by position; an `id` a model sends (as models
/// trained on other agents' todo tools do) is ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    pub content: String,
    pub status: TodoStatus,
    /// Not advertised; kept when a model sends it anyway (ACP plans show it).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_or_number"
    )]
    pub priority: Option<String>,
}

/// Models send `1` as often as `"1"`.
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
                            "status": {"enum": ["pending", "in_progress", "completed"]}
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TestEnv;

    #[tokio::test]
    async fn writing_the_plan_shows_it_back() {
        let env = TestEnv::new();
        let list = TodoList::default();
        let write = TodoWriteTool::new(list.clone());
        assert!(list.get(&env.ctx.agent).is_empty());
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
        // An id a model sends is dropped; a priority is kept for editors' plans.
        assert!(r.metadata.extra["todos"][0].get("id").is_none());
        assert_eq!(r.metadata.extra["todos"][1]["priority"], "high");
        assert_eq!(r.metadata.extra["todos"][1]["status"], "in_progress");
        assert_eq!(list.get(&env.ctx.agent).len(), 3);
    }

    #[tokio::test]
    async fn each_agent_keeps_its_own_plan() {
        let builder = TestEnv::new();
        let mut explore = TestEnv::new();
        explore.ctx.agent = "builder/explore".into();
        let list = TodoList::default();
        let write = TodoWriteTool::new(list.clone());
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
        let mine = list.get(&builder.ctx.agent);
        let theirs = list.get(&explore.ctx.agent);
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].content, "fix the bug");
        assert_eq!(theirs.len(), 1);
        assert_eq!(theirs[0].content, "list the files");
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
