//! Tools with a client bridge: reads see the editor's buffer, writes and edits go through the
//! editor, new files work whatever the client says about missing files, bash runs in the
//! editor's terminal.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use crow_core::{
    BridgeError, ClientBridge, CommandEnding, CommandOutcome, CommandRequest, Tool, ToolContext,
    ToolStatus,
};

use crate::test_support::TestEnv;
use crate::{BashTool, EditFileTool, ReadFileTool, ToolOptions, WriteFileTool};

/// An editor: buffers in memory, writes recorded, a terminal that "runs" commands.
#[derive(Default)]
struct FakeEditor {
    buffers: Mutex<Vec<(PathBuf, String)>>,
    writes: Mutex<Vec<(PathBuf, String)>>,
    commands: Mutex<Vec<CommandRequest>>,
}

#[async_trait]
impl ClientBridge for FakeEditor {
    fn offers_read(&self) -> bool {
        true
    }
    fn offers_write(&self) -> bool {
        true
    }
    fn offers_terminal(&self) -> bool {
        true
    }
    async fn read_text_file(&self, _ctx: &ToolContext, path: &Path) -> Result<String, BridgeError> {
        let buffers = self.buffers.lock().unwrap();
        match buffers.iter().rev().find(|(p, _)| p == path) {
            Some((_, text)) => Ok(text.clone()),
            // Clients word "missing" in their own way; crow must not depend on it.
            None => Err(BridgeError::Client(
                "Internal error: entity not found".into(),
            )),
        }
    }
    async fn write_text_file(
        &self,
        _ctx: &ToolContext,
        path: &Path,
        content: &str,
    ) -> Result<(), BridgeError> {
        self.writes
            .lock()
            .unwrap()
            .push((path.to_path_buf(), content.to_owned()));
        self.buffers
            .lock()
            .unwrap()
            .push((path.to_path_buf(), content.to_owned()));
        Ok(())
    }
    async fn run_command(
        &self,
        _ctx: &ToolContext,
        request: CommandRequest,
    ) -> Result<CommandOutcome, BridgeError> {
        let failing = request.command.contains("false");
        self.commands.lock().unwrap().push(request);
        Ok(CommandOutcome {
            output: "from the editor's terminal\n".into(),
            truncated: false,
            exit_code: Some(if failing { 1 } else { 0 }),
            signal: None,
            ending: CommandEnding::Exited,
            terminal_id: Some("term-1".into()),
        })
    }
}

fn with_editor() -> (TestEnv, Arc<FakeEditor>) {
    let mut env = TestEnv::new();
    let editor = Arc::new(FakeEditor::default());
    env.ctx.client = Some(editor.clone());
    (env, editor)
}

#[tokio::test]
async fn read_sees_the_unsaved_buffer_and_falls_back_to_disk() {
    let (env, editor) = with_editor();
    let path = env.write("a.txt", "on disk\n");
    editor
        .buffers
        .lock()
        .unwrap()
        .push((path, "unsaved edit\n".into()));
    env.write("b.txt", "only on disk\n");
    let tool = ReadFileTool::new(ToolOptions::default());
    let r = tool
        .execute(serde_json::json!({"path": "a.txt"}), &env.ctx)
        .await;
    assert_eq!(r.output, "     1\tunsaved edit\n");
    let r = tool
        .execute(serde_json::json!({"path": "b.txt"}), &env.ctx)
        .await;
    assert_eq!(r.output, "     1\tonly on disk\n");
}

#[tokio::test]
async fn new_files_are_created_through_the_editor() {
    let (env, editor) = with_editor();
    let r = WriteFileTool::new(ToolOptions::default())
        .execute(
            serde_json::json!({"path": "src/new.rs", "content": "fn main() {}\n"}),
            &env.ctx,
        )
        .await;
    assert_eq!(r.status, ToolStatus::Success, "{}", r.output);
    let target = env.root().join("src/new.rs");
    assert_eq!(
        *editor.writes.lock().unwrap(),
        vec![(target.clone(), "fn main() {}\n".to_owned())]
    );
    assert!(
        env.root().join("src").is_dir(),
        "parent directories are made"
    );
    let edit = &r.metadata.edits[0];
    assert_eq!(
        (edit.path.as_path(), edit.old_text.as_deref()),
        (target.as_path(), None)
    );
}

#[tokio::test]
async fn edits_apply_to_the_buffer_and_report_whole_texts() {
    let (env, editor) = with_editor();
    let path = env.write("m.txt", "disk version\n");
    editor
        .buffers
        .lock()
        .unwrap()
        .push((path.clone(), "alpha\nbeta\n".into()));
    let r = EditFileTool::new(ToolOptions::default())
        .execute(
            serde_json::json!({"path": "m.txt", "old_string": "beta", "new_string": "gamma"}),
            &env.ctx,
        )
        .await;
    assert_eq!(r.status, ToolStatus::Success, "{}", r.output);
    assert_eq!(
        editor.writes.lock().unwrap().last().unwrap().1,
        "alpha\ngamma\n"
    );
    assert_eq!(
        env.read("m.txt"),
        "disk version\n",
        "the editor saves, not crow"
    );
    let edit = &r.metadata.edits[0];
    assert_eq!(edit.old_text.as_deref(), Some("alpha\nbeta\n"));
    assert_eq!(edit.new_text, "alpha\ngamma\n");
}

#[tokio::test]
async fn bash_runs_in_the_editor_terminal() {
    let (env, editor) = with_editor();
    let tool = BashTool::new(ToolOptions::default());
    let r = tool
        .execute(serde_json::json!({"command": "echo hi"}), &env.ctx)
        .await;
    assert_eq!(r.status, ToolStatus::Success, "{}", r.output);
    assert_eq!(r.output, "from the editor's terminal");
    assert_eq!(r.metadata.extra["terminal_id"], "term-1");
    let r = tool
        .execute(serde_json::json!({"command": "false"}), &env.ctx)
        .await;
    assert_eq!(r.status, ToolStatus::Error);
    assert!(r.output.ends_with("[exit code: 1]"), "{}", r.output);
    let commands = editor.commands.lock().unwrap();
    assert_eq!(commands[0].command, "echo hi");
    assert_eq!(commands[0].cwd, env.ctx.cwd);
    assert!(
        commands[0]
            .env
            .iter()
            .any(|(k, v)| k == "PAGER" && v == "cat")
    );
}

#[tokio::test]
async fn the_editor_terminal_gets_removed_variables_blanked_and_set_values() {
    let (env, editor) = with_editor();
    // HOME stands in for a key crow uses (a test cannot set variables safely).
    let tool = BashTool::new(ToolOptions {
        env: crow_core::EnvPolicy {
            hidden: ["HOME".to_owned()].into(),
            set: [("CROW_SET".to_owned(), "v".to_owned())].into(),
            ..crow_core::EnvPolicy::default()
        },
        ..ToolOptions::default()
    });
    tool.execute(serde_json::json!({"command": "echo hi"}), &env.ctx)
        .await;
    let commands = editor.commands.lock().unwrap();
    let sent = &commands[0].env;
    assert!(
        sent.iter().any(|(k, v)| k == "HOME" && v.is_empty()),
        "{sent:?}"
    );
    assert!(
        sent.iter().any(|(k, v)| k == "CROW_SET" && v == "v"),
        "{sent:?}"
    );
    assert!(!sent.iter().any(|(k, _)| k == "PATH"), "{sent:?}");
}

#[test]
fn a_command_in_the_editors_terminal_may_change_files_whatever_it_says() {
    // The editor's environment (its PATH) is not crow's to check: no reading command there
    // goes without its snapshots.
    let (env, _editor) = with_editor();
    let mut options = ToolOptions::default();
    options
        .env
        .set
        .insert("PATH".into(), "/usr/bin:/bin".into());
    let bash = BashTool::new(options);
    assert!(bash.may_change(&serde_json::json!({"command": "ls"}), &env.ctx));
}
