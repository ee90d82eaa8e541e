//! The loop's snapshot step against an in-memory "disk" and snapshotter.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::mpsc;

use super::*;
use crate::snapshot::{ChangeKind, Reverted, SnapshotError};
use crate::testing::{Scripted, act, say};
use crate::tool::{AllowAll, Tool, ToolKind, ToolRegistry};

type Disk = Arc<Mutex<BTreeMap<String, String>>>;

/// Snapshots are copies of the disk, by number.
#[derive(Default)]
struct Memory {
    disk: Disk,
    taken: Mutex<Vec<BTreeMap<String, String>>>,
}

impl Snapshotter for Memory {
    fn take(&self) -> Result<String, SnapshotError> {
        let mut taken = self.taken.lock().unwrap();
        taken.push(self.disk.lock().unwrap().clone());
        Ok((taken.len() - 1).to_string())
    }
    fn diff(&self, from: &str, to: &str) -> Result<Vec<FileChange>, SnapshotError> {
        let taken = self.taken.lock().unwrap();
        let (a, b) = (
            &taken[from.parse::<usize>().unwrap()],
            &taken[to.parse::<usize>().unwrap()],
        );
        let mut out = Vec::new();
        for (path, content) in a {
            match b.get(path) {
                None => out.push((path, ChangeKind::Deleted)),
                Some(other) if other != content => out.push((path, ChangeKind::Modified)),
                _ => {}
            }
        }
        for path in b.keys().filter(|p| !a.contains_key(*p)) {
            out.push((path, ChangeKind::Created));
        }
        let mut out: Vec<FileChange> = out
            .into_iter()
            .map(|(path, kind)| FileChange {
                path: path.into(),
                kind,
            })
            .collect();
        out.sort();
        Ok(out)
    }
    fn revert_only(
        &self,
        _: &str,
        _: &str,
        _: Option<&std::collections::HashSet<PathBuf>>,
        _: bool,
    ) -> Result<Reverted, SnapshotError> {
        Ok(Reverted::default())
    }
}

/// The builder with `memory` for its snapshots.
fn builder(provider: Arc<dyn Provider>, tools: ToolRegistry, memory: &Arc<Memory>) -> BaseAgent {
    BaseAgent::new(
        "builder",
        provider,
        tools,
        "test",
        Arc::new(AllowAll),
        AgentConfig::default(),
    )
    .with_snapshots(Arc::clone(memory) as Arc<dyn Snapshotter>)
}

/// A session in `/p` whose user asked `prompt`.
fn asked(prompt: &str) -> Session {
    let mut session = Session::new("s", "builder", "/p".into(), "/p".into());
    session.add_user_message(prompt);
    session
}

/// A command: writes `{"write": {path: content}}` and removes `{"remove": [path]}`, and
/// reports nothing in `files_modified` (as `bash` does not).
struct Shell(Disk);

#[async_trait]
impl Tool for Shell {
    fn name(&self) -> &str {
        "shell"
    }
    fn description(&self) -> &str {
        "changes the disk"
    }
    fn kind(&self) -> ToolKind {
        ToolKind::Execute
    }
    /// `{"look": true}` only reads, as `bash` says of `ls`.
    fn may_change(&self, input: &serde_json::Value, _ctx: &ToolContext) -> bool {
        input["look"] != true
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    async fn execute(&self, input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        let mut disk = self.0.lock().unwrap();
        for (path, content) in input["write"].as_object().into_iter().flatten() {
            disk.insert(
                path.clone(),
                content.as_str().unwrap_or_default().to_owned(),
            );
        }
        for path in input["remove"].as_array().into_iter().flatten() {
            disk.remove(path.as_str().unwrap_or_default());
        }
        ToolResult::success("ok")
    }
}

struct Look;

#[async_trait]
impl Tool for Look {
    fn name(&self) -> &str {
        "look"
    }
    fn description(&self) -> &str {
        "reads"
    }
    fn kind(&self) -> ToolKind {
        ToolKind::Read
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        ToolResult::success("nothing to see")
    }
}

#[tokio::test]
async fn changes_come_from_snapshots_and_read_only_batches_take_none() {
    let memory = Arc::new(Memory::default());
    memory
        .disk
        .lock()
        .unwrap()
        .insert("old.txt".into(), "old".into());
    let provider = Scripted::new(vec![
        act("r", "look", "{}"),
        act(
            "w1",
            "shell",
            r#"{"write": {"new.txt": "x", "old.txt": "changed"}}"#,
        ),
        act("w2", "shell", r#"{"remove": ["old.txt"]}"#),
        say("done"),
    ]);
    let tools = ToolRegistry::new();
    tools.register(Arc::new(Shell(Arc::clone(&memory.disk))));
    tools.register(Arc::new(Look));
    let agent = builder(provider, tools, &memory);
    let mut session = asked("go");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let turn = agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();

    // One before and one after each changing batch: none for the read.
    assert_eq!(memory.taken.lock().unwrap().len(), 4);
    assert_eq!(
        turn.files_changed,
        [PathBuf::from("/p/new.txt"), PathBuf::from("/p/old.txt")]
    );
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let AgentEvent::FilesChanged {
            changes, snapshot, ..
        } = event
        {
            events.push((changes, snapshot));
        }
    }
    let kinds: Vec<Vec<(String, ChangeKind)>> = events
        .iter()
        .map(|(c, _)| {
            c.iter()
                .map(|c| (c.path.display().to_string(), c.kind))
                .collect()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            vec![
                ("new.txt".to_owned(), ChangeKind::Created),
                ("old.txt".to_owned(), ChangeKind::Modified)
            ],
            vec![("old.txt".to_owned(), ChangeKind::Deleted)],
        ]
    );
    assert_eq!(events[1].1.as_deref(), Some("3"));

    // The history records one turn: before = snapshot 0, after = snapshot 3, in two steps.
    let stack = crate::snapshot::undo_stack(session.entries().iter().map(|e| ("builder", &e.kind)));
    assert_eq!(stack.done.len(), 1);
    assert_eq!(
        (stack.done[0].before.as_str(), stack.done[0].after.as_str()),
        ("0", "3")
    );
    let steps: Vec<(&str, &str)> = stack.done[0]
        .steps
        .iter()
        .map(|s| (s.before.as_str(), s.after.as_str()))
        .collect();
    assert_eq!(steps, [("0", "1"), ("2", "3")]);
    assert_eq!(
        stack.done[0].files,
        [
            FileChange {
                path: "new.txt".into(),
                kind: ChangeKind::Created
            },
            FileChange {
                path: "old.txt".into(),
                kind: ChangeKind::Deleted
            }
        ]
    );
}

/// Stands for another session (or the user) changing the tree while the agent's model
/// thinks: a read-only call, so the loop takes no snapshot around it.
struct Meanwhile(Disk);

#[async_trait]
impl Tool for Meanwhile {
    fn name(&self) -> &str {
        "meanwhile"
    }
    fn description(&self) -> &str {
        "someone else writes theirs.txt"
    }
    fn kind(&self) -> ToolKind {
        ToolKind::Read
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        self.0
            .lock()
            .unwrap()
            .insert("theirs.txt".into(), "z".into());
        ToolResult::success("ok")
    }
}

#[tokio::test]
async fn what_others_change_between_batches_is_not_the_agents() {
    let memory = Arc::new(Memory::default());
    let provider = Scripted::new(vec![
        act("w1", "shell", r#"{"write": {"mine.txt": "x"}}"#),
        act("m", "meanwhile", "{}"),
        act("w2", "shell", r#"{"write": {"mine2.txt": "y"}}"#),
        say("done"),
    ]);
    let tools = ToolRegistry::new();
    tools.register(Arc::new(Shell(Arc::clone(&memory.disk))));
    tools.register(Arc::new(Meanwhile(Arc::clone(&memory.disk))));
    let agent = builder(provider, tools, &memory);
    let mut session = asked("go");
    let (tx, _rx) = mpsc::unbounded_channel();
    let turn = agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        turn.files_changed,
        [PathBuf::from("/p/mine.txt"), PathBuf::from("/p/mine2.txt")]
    );
    let stack = crate::snapshot::undo_stack(session.entries().iter().map(|e| ("builder", &e.kind)));
    let files: Vec<_> = stack.done[0].files.iter().map(|f| f.path.clone()).collect();
    assert_eq!(
        files,
        [PathBuf::from("mine.txt"), PathBuf::from("mine2.txt")]
    );
}

/// A step whose end was never recorded (crow stopped during it) is still on the undo stack,
/// ending where the next step began, or open (the tree now) when it was the last.
#[test]
fn a_step_that_never_recorded_its_end_is_still_undoable() {
    let started = |turn: &str, before: &str| EntryKind::System {
        event: SystemEvent::SnapshotStarted {
            turn: turn.into(),
            before: before.into(),
        },
    };
    let timeline = [started("0", "0")];
    let stack = crate::snapshot::undo_stack(timeline.iter().map(|e| ("builder", e)));
    assert_eq!(stack.done.len(), 1);
    assert!(stack.done[0].open_end());
    assert_eq!(stack.done[0].before, "0");

    // Resumed after the kill: the next turn's first step began on tree 5.
    let timeline = [started("0", "0"), started("5", "5")];
    let stack = crate::snapshot::undo_stack(timeline.iter().map(|e| ("builder", e)));
    assert_eq!(stack.done.len(), 2);
    assert_eq!(
        (stack.done[0].before.as_str(), stack.done[0].after.as_str()),
        ("0", "5")
    );
    assert!(stack.done[1].open_end());
}

/// The step alone, without a loop: what it records and announces around two batches.
#[tokio::test]
async fn the_step_records_each_batch_against_the_turns_first_snapshot() {
    let memory = Arc::new(Memory::default());
    let mut step = SnapshotStep::new(Some(Arc::clone(&memory) as Arc<dyn Snapshotter>));
    let mut session = Session::new("s", "builder", "/p".into(), "/p".into());
    let (tx, mut rx) = mpsc::unbounded_channel();

    step.before_batch(&mut session).await;
    memory
        .disk
        .lock()
        .unwrap()
        .insert("a.txt".into(), "a".into());
    let seen = step.after_batch(&mut session, &tx, "builder").await;
    assert_eq!(seen, Some(vec![PathBuf::from("/p/a.txt")]));
    match rx.try_recv() {
        Ok(AgentEvent::FilesChanged {
            agent, snapshot, ..
        }) => assert_eq!(
            (agent.as_str(), snapshot.as_deref()),
            ("builder", Some("1"))
        ),
        other => panic!("{other:?}"),
    }

    // A batch that changed nothing still closes its step, and announces nothing.
    step.before_batch(&mut session).await;
    let seen = step.after_batch(&mut session, &tx, "builder").await;
    assert_eq!(seen, Some(Vec::new()));
    assert!(rx.try_recv().is_err());

    let events: Vec<&SystemEvent> = session
        .entries()
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::System { event } => Some(event),
            _ => None,
        })
        .collect();
    let turns: Vec<(&str, &str)> = events
        .iter()
        .map(|e| match e {
            SystemEvent::SnapshotStarted { turn, before } => (turn.as_str(), before.as_str()),
            SystemEvent::Snapshot { turn, after, .. } => (turn.as_str(), after.as_str()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(turns, [("0", "0"), ("0", "1"), ("0", "2"), ("0", "3")]);
}

#[tokio::test]
async fn without_a_snapshotter_or_a_before_the_step_sees_nothing() {
    let mut session = Session::new("s", "builder", "/p".into(), "/p".into());
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut none = SnapshotStep::new(None);
    none.before_batch(&mut session).await;
    assert_eq!(none.after_batch(&mut session, &tx, "builder").await, None);

    // An after without its before has no pair to compare.
    let memory = Arc::new(Memory::default());
    let mut step = SnapshotStep::new(Some(memory as Arc<dyn Snapshotter>));
    assert_eq!(step.after_batch(&mut session, &tx, "builder").await, None);
    assert!(session.entries().is_empty());
}

/// A snapshotter that cannot take snapshots.
struct Broken;

impl Snapshotter for Broken {
    fn take(&self) -> Result<String, SnapshotError> {
        Err(SnapshotError("disk gone".into()))
    }
    fn diff(&self, _: &str, _: &str) -> Result<Vec<FileChange>, SnapshotError> {
        Err(SnapshotError("disk gone".into()))
    }
    fn revert_only(
        &self,
        _: &str,
        _: &str,
        _: Option<&std::collections::HashSet<PathBuf>>,
        _: bool,
    ) -> Result<Reverted, SnapshotError> {
        Ok(Reverted::default())
    }
}

#[tokio::test]
async fn a_failed_snapshot_costs_the_report_never_the_turn() {
    let mut session = Session::new("s", "builder", "/p".into(), "/p".into());
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut step = SnapshotStep::new(Some(Arc::new(Broken) as Arc<dyn Snapshotter>));
    step.before_batch(&mut session).await;
    assert_eq!(step.after_batch(&mut session, &tx, "builder").await, None);
    assert!(session.entries().is_empty(), "no step begun, none recorded");
}

/// A `PreToolUse` hook that rewrites every call of `shell` into a write.
struct Rewrites;

#[async_trait]
impl crate::hooks::Hooks for Rewrites {
    fn listens(&self, event: HookEvent, subject: Option<&str>) -> bool {
        event == HookEvent::PreToolUse && subject == Some("shell")
    }
    async fn fire(
        &self,
        _input: crate::hooks::HookInput,
        _cancel: &CancellationToken,
    ) -> crate::hooks::HookOutcome {
        crate::hooks::HookOutcome {
            updated_input: Some(json!({"write": {"hooked.txt": "h"}})),
            ..Default::default()
        }
    }
}

#[tokio::test]
async fn a_command_that_only_reads_takes_no_snapshot_unless_a_hook_may_rewrite_it() {
    let run = |hooks: Option<Arc<dyn crate::hooks::Hooks>>| async move {
        let memory = Arc::new(Memory::default());
        let provider = Scripted::new(vec![act("r", "shell", r#"{"look": true}"#), say("done")]);
        let tools = ToolRegistry::new();
        tools.register(Arc::new(Shell(Arc::clone(&memory.disk))));
        let mut agent = builder(provider, tools, &memory);
        if let Some(hooks) = hooks {
            agent = agent.with_hooks(hooks, None);
        }
        let mut session = asked("go");
        let (tx, _rx) = mpsc::unbounded_channel();
        let turn = agent
            .execute_turn(&mut session, &tx, CancellationToken::new())
            .await
            .unwrap();
        let taken = memory.taken.lock().unwrap().len();
        (taken, turn.files_changed)
    };
    assert_eq!(run(None).await, (0, vec![]), "a look costs no snapshot");
    // The hook turns the look into a write after the loop judged the batch: judged by the
    // tool's kind instead, so the write is seen and can be undone.
    assert_eq!(
        run(Some(Arc::new(Rewrites))).await,
        (2, vec![PathBuf::from("/p/hooked.txt")])
    );
}
