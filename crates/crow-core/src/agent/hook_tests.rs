//! The loop's hook points, with a scripted provider and scripted hooks (the real runner,
//! with real programs, is tested in crow-app).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::mpsc;

use super::*;
use crate::hooks::{HookInput, HookOutcome, HookPermission};
use crate::policy::{Action, Mode, Policy, Rule};
use crate::testing::{Scripted, act, say};
use crate::tool::{PermissionDecision, PermissionRequest, Tool, ToolKind};

/// Answers each event with what the test scripted, and keeps what it was told.
#[derive(Default)]
struct Scripts {
    answers: Mutex<Vec<(HookEvent, HookOutcome)>>,
    told: Mutex<Vec<HookInput>>,
}

impl Scripts {
    fn answering(answers: Vec<(HookEvent, HookOutcome)>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers),
            told: Mutex::default(),
        })
    }

    fn told(&self, event: HookEvent) -> Vec<HookInput> {
        let told = self.told.lock().unwrap();
        told.iter().filter(|i| i.event == event).cloned().collect()
    }
}

#[async_trait]
impl Hooks for Scripts {
    fn listens(&self, event: HookEvent, _subject: Option<&str>) -> bool {
        self.answers
            .lock()
            .unwrap()
            .iter()
            .any(|(e, _)| *e == event)
    }

    async fn fire(&self, input: HookInput, _cancel: &CancellationToken) -> HookOutcome {
        let event = input.event;
        self.told.lock().unwrap().push(input);
        let mut answers = self.answers.lock().unwrap();
        // Each answer is given once, in order; the last one for an event keeps being given.
        let mut at = answers.iter().enumerate().filter(|(_, (e, _))| *e == event);
        match (at.next(), at.next()) {
            (Some((i, _)), Some(_)) => answers.remove(i).1,
            (Some((_, (_, outcome))), None) => outcome.clone(),
            (None, _) => HookOutcome::default(),
        }
    }
}

/// A command tool that counts its runs (it asks no question of its own).
#[derive(Default)]
struct Shell(AtomicUsize);

#[async_trait]
impl Tool for Shell {
    fn name(&self) -> &str {
        "bash"
    }
    fn description(&self) -> &str {
        "runs"
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    fn kind(&self) -> ToolKind {
        ToolKind::Execute
    }
    async fn execute(&self, input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        self.0.fetch_add(1, Ordering::SeqCst);
        ToolResult::success(format!("ran {}", input["command"]))
    }
}

/// The front end: counts questions, answers with `allow`.
struct Front {
    asked: AtomicUsize,
    allow: bool,
}

#[async_trait]
impl PermissionGate for Front {
    async fn check(&self, _request: PermissionRequest) -> PermissionDecision {
        self.asked.fetch_add(1, Ordering::SeqCst);
        match self.allow {
            true => PermissionDecision::Allow,
            false => PermissionDecision::Deny {
                reason: "the user said no".into(),
            },
        }
    }
}

struct Rig {
    agent: BaseAgent,
    shell: Arc<Shell>,
    front: Arc<Front>,
    hooks: Arc<Scripts>,
    provider: Arc<Scripted>,
}

fn rig(
    script: Vec<crate::testing::Script>,
    hooks: Vec<(HookEvent, HookOutcome)>,
    mode: Mode,
) -> Rig {
    let provider = Scripted::new(script);
    let shell = Arc::new(Shell::default());
    let tools = ToolRegistry::new();
    tools.register(Arc::clone(&shell) as Arc<dyn Tool>);
    let front = Arc::new(Front {
        asked: AtomicUsize::new(0),
        allow: false,
    });
    let hooks = Scripts::answering(hooks);
    let mut policy = Policy::new(mode, "/tmp");
    policy.rules = vec![Rule::parse(Action::Deny, "bash(rm -rf *)", "config.toml:1").unwrap()];
    let agent = BaseAgent::new(
        "builder",
        Arc::clone(&provider) as Arc<dyn Provider>,
        tools,
        "You are a test.",
        Arc::clone(&front) as Arc<dyn PermissionGate>,
        AgentConfig::default(),
    )
    .with_policy(Arc::new(policy))
    .with_hooks(Arc::clone(&hooks) as Arc<dyn Hooks>, Some(HookEvent::Stop));
    Rig {
        agent,
        shell,
        front,
        hooks,
        provider,
    }
}

impl Rig {
    async fn turn(&self) -> (TurnResult, Session, Vec<AgentEvent>) {
        let mut session = Session::new("s1", "builder", "/tmp".into(), "/tmp".into());
        session.add_user_message("do it");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let result = self
            .agent
            .execute_turn(&mut session, &tx, CancellationToken::new())
            .await
            .unwrap();
        drop(tx);
        let mut events = Vec::new();
        while let Some(e) = rx.recv().await {
            events.push(e);
        }
        (result, session, events)
    }

    fn runs(&self) -> usize {
        self.shell.0.load(Ordering::SeqCst)
    }

    fn asked(&self) -> usize {
        self.front.asked.load(Ordering::SeqCst)
    }
}

fn result_of(session: &Session) -> String {
    session
        .entries()
        .iter()
        .find_map(|e| match &e.kind {
            EntryKind::ToolResult { output, .. } => Some(output.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

fn run_make() -> Vec<crate::testing::Script> {
    vec![act("c1", "bash", r#"{"command":"make"}"#), say("done")]
}

#[tokio::test]
async fn a_blocking_pre_tool_use_hook_keeps_the_call_from_running_and_the_model_reads_why() {
    let block = HookOutcome {
        block: Some("no builds on Fridays".into()),
        ..HookOutcome::default()
    };
    let rig = rig(
        run_make(),
        vec![(HookEvent::PreToolUse, block)],
        Mode::FullAuto,
    );
    let (_, session, _) = rig.turn().await;
    assert_eq!(rig.runs(), 0);
    assert!(result_of(&session).contains("no builds on Fridays"));
    let told = rig.hooks.told(HookEvent::PreToolUse);
    assert_eq!(told[0].subject.as_deref(), Some("bash"));
    assert_eq!(told[0].fields["tool_input"], json!({"command": "make"}));
    assert!(
        rig.provider.requests()[1]
            .messages
            .contains("no builds on Fridays"),
        "the model's next request carries the reason"
    );
}

#[tokio::test]
async fn a_hook_that_asks_makes_a_full_auto_call_ask_the_user() {
    let ask = HookOutcome {
        permission: Some(HookPermission::Ask {
            reason: "builds are slow".into(),
        }),
        ..HookOutcome::default()
    };
    let rig = rig(
        run_make(),
        vec![(HookEvent::PreToolUse, ask)],
        Mode::FullAuto,
    );
    let (_, session, _) = rig.turn().await;
    assert_eq!(
        (rig.asked(), rig.runs()),
        (1, 0),
        "asked, and the user said no"
    );
    assert!(result_of(&session).contains("the user said no"));
}

#[tokio::test]
async fn a_hooks_allow_answers_the_modes_question_but_never_a_deny_rule() {
    let allow = || HookOutcome {
        permission: Some(HookPermission::Allow {
            reason: "CI box".into(),
        }),
        ..HookOutcome::default()
    };
    let asked = rig(
        run_make(),
        vec![(HookEvent::PreToolUse, allow())],
        Mode::Ask,
    );
    asked.turn().await;
    assert_eq!(
        (asked.asked(), asked.runs()),
        (0, 1),
        "the mode's question is answered"
    );

    let script = vec![act("c1", "bash", r#"{"command":"rm -rf /"}"#), say("done")];
    let rig = rig(
        script,
        vec![(HookEvent::PreToolUse, allow())],
        Mode::FullAuto,
    );
    let (_, session, _) = rig.turn().await;
    assert_eq!(rig.runs(), 0);
    assert!(result_of(&session).contains("denied by the rule"));
}

#[tokio::test]
async fn updated_input_replaces_the_arguments_and_is_judged_again() {
    let rewrite = |command: &str| HookOutcome {
        updated_input: Some(json!({ "command": command })),
        ..HookOutcome::default()
    };
    let rewritten = rig(
        run_make(),
        vec![(HookEvent::PreToolUse, rewrite("make -j2"))],
        Mode::FullAuto,
    );
    let (_, session, _) = rewritten.turn().await;
    assert_eq!(result_of(&session), "ran \"make -j2\"");
    // A rewrite into what a rule denies is denied.
    let rig = rig(
        run_make(),
        vec![(HookEvent::PreToolUse, rewrite("rm -rf /"))],
        Mode::FullAuto,
    );
    let (_, session, _) = rig.turn().await;
    assert_eq!(rig.runs(), 0);
    assert!(result_of(&session).contains("denied by the rule"));
}

#[tokio::test]
async fn a_post_tool_use_hook_sees_the_result_and_its_words_reach_the_model() {
    let said = HookOutcome {
        block: Some("lint failed: unused import".into()),
        context: vec!["formatted 1 file".into()],
        ..HookOutcome::default()
    };
    let rig = rig(
        run_make(),
        vec![(HookEvent::PostToolUse, said)],
        Mode::FullAuto,
    );
    let (_, session, _) = rig.turn().await;
    let told = rig.hooks.told(HookEvent::PostToolUse);
    assert_eq!(told[0].fields["tool_response"]["output"], "ran \"make\"");
    assert_eq!(told[0].fields["tool_response"]["success"], true);
    let output = result_of(&session);
    assert!(output.starts_with("ran \"make\""), "{output}");
    assert!(output.contains("lint failed: unused import"), "{output}");
    assert!(output.contains("formatted 1 file"), "{output}");
}

#[tokio::test]
async fn a_blocking_stop_hook_keeps_the_agent_working_with_its_reason() {
    let keep_going = HookOutcome {
        block: Some("tests are failing; fix them".into()),
        ..HookOutcome::default()
    };
    let rig = rig(
        vec![say("all done"), say("fixed the tests")],
        vec![
            (HookEvent::Stop, keep_going),
            (HookEvent::Stop, HookOutcome::default()),
        ],
        Mode::FullAuto,
    );
    let (result, _, _) = rig.turn().await;
    assert_eq!(result.stop, TurnStop::Text);
    assert_eq!(result.text.as_deref(), Some("fixed the tests"));
    let requests = rig.provider.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].messages.contains("tests are failing; fix them"));
    let told = rig.hooks.told(HookEvent::Stop);
    let active: Vec<&serde_json::Value> =
        told.iter().map(|t| &t.fields["stop_hook_active"]).collect();
    assert_eq!(active, [&json!(false), &json!(true)]);
    assert_eq!(told[0].fields["last_assistant_message"], "all done");
}

#[tokio::test]
async fn continue_false_halts_the_turn_with_the_hooks_reason() {
    let halt = HookOutcome {
        halt: Some("budget reached".into()),
        ..HookOutcome::default()
    };
    let rig = rig(
        vec![
            act("c1", "bash", r#"{"command":"make"}"#),
            say("never asked"),
        ],
        vec![(HookEvent::PostToolUse, halt)],
        Mode::FullAuto,
    );
    let (result, _, events) = rig.turn().await;
    assert_eq!(result.stop, TurnStop::Halted);
    assert_eq!(result.halted.as_deref(), Some("budget reached"));
    assert_eq!(rig.runs(), 1);
    assert_eq!(
        rig.provider.requests().len(),
        1,
        "no model call after the halt"
    );
    assert!(events.iter().any(
        |e| matches!(e, AgentEvent::Notice { message, .. } if message.contains("budget reached"))
    ));
}

#[tokio::test]
async fn hooks_that_fail_are_named_to_the_user() {
    let failed = HookOutcome {
        notices: vec!["hook `./lint.sh` (PostToolUse) exited with 1".into()],
        ..HookOutcome::default()
    };
    let rig = rig(
        run_make(),
        vec![(HookEvent::PostToolUse, failed)],
        Mode::FullAuto,
    );
    let (_, _, events) = rig.turn().await;
    assert!(events.iter().any(|e| matches!(e, AgentEvent::Notice { message, level: NoticeLevel::Warning, .. } if message.contains("lint.sh"))));
}

#[tokio::test]
async fn no_hook_for_an_event_means_no_input_is_built() {
    let rig = rig(
        run_make(),
        vec![(HookEvent::SessionEnd, HookOutcome::default())],
        Mode::FullAuto,
    );
    rig.turn().await;
    assert!(rig.hooks.told.lock().unwrap().is_empty());
    assert_eq!(rig.runs(), 1);
}
