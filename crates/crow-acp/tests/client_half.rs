//! crow-acp driven in-process by the crate's own client half: every AgentEvent kind becomes
//! the right `session/update`, stop reasons map, permissions and client files round-trip,
//! slash commands and config options work. A scripted runner stands in for the agent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client};
use async_trait::async_trait;
use crow_acp::{
    AgentFactory, Choice, ModeInfo, ModelInfo, RunnerError, SessionRunner, SessionSpec, Stop,
    TurnInput, TurnOutcome,
};
use crow_core::{
    AgentEvent, EventSender, FileEdit, PermissionDecision, PermissionPreview, PermissionRequest,
    ToolKind, ToolMetadata, ToolResult, ToolStatus, Usage,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// What the scripted runner does on a prompt.
#[derive(Clone)]
enum Script {
    Events(Vec<AgentEvent>, Stop),
    /// Asks the permission gate for a write; reports the decision as text.
    AskPermission,
    /// Reads and writes through the client bridge; reports what it read.
    UseClient(PathBuf),
    /// Echoes the input it got.
    Echo,
    /// The builder's turn in which the reviewer asks to write a file.
    ReviewerAsks,
}

struct Factory {
    script: Script,
    specs: Mutex<Vec<SessionSpec>>,
}

struct Runner {
    script: Script,
    spec: SessionSpec,
}

fn text(agent: &str, delta: &str) -> AgentEvent {
    AgentEvent::TextDelta {
        agent: agent.into(),
        delta: delta.into(),
    }
}

#[async_trait]
impl SessionRunner for Runner {
    async fn prompt(
        &mut self,
        input: TurnInput,
        events: &EventSender,
        _cancel: CancellationToken,
    ) -> Result<TurnOutcome, RunnerError> {
        let done = |stop| {
            Ok(TurnOutcome {
                stop,
                usage: Usage::default(),
            })
        };
        match &self.script {
            Script::Events(list, stop) => {
                for e in list {
                    events.send(e.clone()).unwrap();
                }
                done(*stop)
            }
            Script::Echo => {
                events
                    .send(text(
                        "builder",
                        &format!("{}|{}|{}", input.text, input.mode, input.model),
                    ))
                    .unwrap();
                done(Stop::EndTurn)
            }
            Script::ReviewerAsks => {
                for event in [
                    AgentEvent::TurnStart {
                        agent: "builder".into(),
                    },
                    AgentEvent::ToolCallStart {
                        agent: "reviewer".into(),
                        call_id: "r1".into(),
                        tool: "write_file".into(),
                        kind: ToolKind::Edit,
                        arguments: json!({"path": "a.txt"}),
                    },
                ] {
                    events.send(event).unwrap();
                }
                crow_core::policy::ask(
                    self.spec.permission.as_ref(),
                    PermissionRequest {
                        session_id: self.spec.session_id.clone(),
                        agent: "reviewer".into(),
                        call_id: "r1".into(),
                        tool: "write_file".into(),
                        kind: ToolKind::Edit,
                        title: "Create a.txt".into(),
                        input: json!({"path": "a.txt"}),
                        preview: None,
                        policy: None,
                        unconfined: false,
                    },
                )
                .await;
                done(Stop::EndTurn)
            }
            Script::AskPermission => {
                let mut answers = Vec::new();
                for call in ["c1", "c2"] {
                    events
                        .send(AgentEvent::ToolCallStart {
                            agent: "builder".into(),
                            call_id: call.into(),
                            tool: "write_file".into(),
                            kind: ToolKind::Edit,
                            arguments: json!({"path": "a.txt"}),
                        })
                        .unwrap();
                    let decision = crow_core::policy::ask(
                        self.spec.permission.as_ref(),
                        PermissionRequest {
                            session_id: self.spec.session_id.clone(),
                            agent: "builder".into(),
                            call_id: call.into(),
                            tool: "write_file".into(),
                            kind: ToolKind::Edit,
                            title: "Create a.txt".into(),
                            input: json!({"path": "a.txt"}),
                            preview: Some(PermissionPreview::Edit(FileEdit {
                                path: "/p/a.txt".into(),
                                old_text: Some("old\n".into()),
                                new_text: "new\n".into(),
                            })),
                            policy: None,
                            unconfined: false,
                        },
                    )
                    .await;
                    answers.push(match decision {
                        PermissionDecision::Allow => "allow".to_owned(),
                        PermissionDecision::Deny { reason } => reason,
                    });
                }
                events.send(text("builder", &answers.join(";"))).unwrap();
                done(Stop::EndTurn)
            }
            Script::UseClient(path) => {
                let client = self.spec.client.clone().expect("the client offers fs");
                let ctx = crow_core::ToolContext {
                    session_id: self.spec.session_id.clone(),
                    agent: "builder".into(),
                    call_id: "c".into(),
                    cwd: self.spec.cwd.clone(),
                    project_root: self.spec.cwd.clone(),
                    cancel: CancellationToken::new(),
                    permission: Arc::clone(&self.spec.permission),
                    events: events.clone(),
                    client: Some(Arc::clone(&client)),
                    steering: None,
                };
                let read = client.read_text_file(&ctx, path).await.unwrap();
                client
                    .write_text_file(&ctx, path, "new text")
                    .await
                    .unwrap();
                events.send(text("builder", &read)).unwrap();
                done(Stop::EndTurn)
            }
        }
    }
}

#[async_trait]
impl AgentFactory for Factory {
    fn modes(&self) -> Vec<ModeInfo> {
        vec![
            ModeInfo {
                choice: Choice::new("build", "Build"),
                auto_approve: false,
            },
            ModeInfo {
                choice: Choice::new("yolo", "Yolo"),
                auto_approve: true,
            },
        ]
    }

    fn models(&self) -> (Vec<ModelInfo>, String) {
        (
            vec![
                ModelInfo {
                    choice: Choice::new("p/small", "small"),
                    context_window: Some(1000),
                },
                ModelInfo {
                    choice: Choice::new("p/large", "large"),
                    context_window: None,
                },
            ],
            "p/small".into(),
        )
    }

    async fn create(&self, spec: SessionSpec) -> Result<Box<dyn SessionRunner>, RunnerError> {
        self.specs.lock().unwrap().push(spec.clone());
        Ok(Box::new(Runner {
            script: self.script.clone(),
            spec,
        }))
    }
}

type Log = Arc<Mutex<Vec<Value>>>;

/// The sessions' working directory: it must exist (session/new refuses a missing one).
fn project() -> PathBuf {
    let dir = std::env::temp_dir().join("crow-acp-client-half");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `script` for one prompt of a fresh session; returns the updates and the stop reason.
async fn run(
    script: Script,
    fs: bool,
    answer: &'static str,
    prompt: Vec<acp::ContentBlock>,
) -> (Vec<Value>, acp::StopReason, Arc<Factory>) {
    let factory = Arc::new(Factory {
        script,
        specs: Mutex::new(Vec::new()),
    });
    let updates: Log = Arc::default();
    let seen = Arc::clone(&updates);
    // Permission questions go into the same log, so their order among updates shows.
    let asked = Arc::clone(&updates);
    let agent = crow_acp::agent(factory.clone());
    let stop = Client
        .v1()
        .on_receive_notification(
            async move |n: acp::SessionNotification, _cx: ConnectionTo<Agent>| {
                seen.lock()
                    .unwrap()
                    .push(serde_json::to_value(&n.update).unwrap());
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |r: acp::RequestPermissionRequest,
                        responder: Responder<acp::RequestPermissionResponse>,
                        _cx: ConnectionTo<Agent>| {
                asked
                    .lock()
                    .unwrap()
                    .push(json!({"permission": serde_json::to_value(&r.tool_call).unwrap()}));
                let option = r
                    .options
                    .iter()
                    .find(|o| serde_json::to_value(o.kind).unwrap() == answer)
                    .unwrap();
                responder.respond(acp::RequestPermissionResponse::new(
                    acp::RequestPermissionOutcome::Selected(acp::SelectedPermissionOutcome::new(
                        option.option_id.clone(),
                    )),
                ))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: acp::ReadTextFileRequest,
                        responder: Responder<acp::ReadTextFileResponse>,
                        _cx: ConnectionTo<Agent>| {
                responder.respond(acp::ReadTextFileResponse::new(format!(
                    "buffer of {}",
                    r.path.display()
                )))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_r: acp::WriteTextFileRequest,
                        responder: Responder<acp::WriteTextFileResponse>,
                        _cx: ConnectionTo<Agent>| {
                responder.respond(acp::WriteTextFileResponse::new())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(agent, async |cx: ConnectionTo<Agent>| {
            let caps = acp::ClientCapabilities::new().fs(acp::FileSystemCapabilities::new()
                .read_text_file(fs)
                .write_text_file(fs));
            cx.send_request(
                acp::InitializeRequest::new(ProtocolVersion::V1).client_capabilities(caps),
            )
            .block_task()
            .await?;
            let session = cx
                .send_request(acp::NewSessionRequest::new(project()))
                .block_task()
                .await?;
            let response = cx
                .send_request(acp::PromptRequest::new(session.session_id, prompt))
                .block_task()
                .await?;
            Ok(response.stop_reason)
        })
        .await
        .unwrap();
    let updates = updates.lock().unwrap().clone();
    (updates, stop, factory)
}

fn user(text: &str) -> Vec<acp::ContentBlock> {
    vec![acp::ContentBlock::Text(acp::TextContent::new(text))]
}

/// The updates other than the commands list sent after session/new.
fn turn_updates(updates: &[Value]) -> Vec<Value> {
    updates
        .iter()
        .filter(|u| {
            u["sessionUpdate"] != "available_commands_update"
                && u["sessionUpdate"] != "session_info_update"
        })
        .cloned()
        .collect()
}

fn end(call: &str, tool: &str, result: ToolResult) -> AgentEvent {
    AgentEvent::ToolCallEnd {
        agent: "builder".into(),
        call_id: call.into(),
        tool: tool.into(),
        result,
        duration_ms: 1,
    }
}

fn start(call: &str, tool: &str, kind: ToolKind, arguments: Value) -> AgentEvent {
    AgentEvent::ToolCallStart {
        agent: "builder".into(),
        call_id: call.into(),
        tool: tool.into(),
        kind,
        arguments,
    }
}

#[tokio::test]
async fn every_event_kind_translates() {
    let edit = ToolResult::success("Edited a.rs").with_metadata(ToolMetadata {
        files_modified: vec!["/project/a.rs".into()],
        edits: vec![FileEdit {
            path: "/project/a.rs".into(),
            old_text: Some("old\n".into()),
            new_text: "new\n".into(),
        }],
        ..ToolMetadata::default()
    });
    let todos = ToolResult::success("Todos").with_metadata(ToolMetadata {
        extra: json!({"todos": [{"content": "a", "status": "completed"}, {"content": "b", "status": "pending", "priority": "high"}]}),
        ..ToolMetadata::default()
    });
    let events = vec![
        AgentEvent::TurnStart {
            agent: "builder".into(),
        },
        AgentEvent::ModelCallStart {
            agent: "builder".into(),
            iteration: 1,
        },
        AgentEvent::ThinkingDelta {
            agent: "builder".into(),
            delta: "hmm".into(),
        },
        AgentEvent::ThinkingComplete {
            agent: "builder".into(),
            text: "hmm".into(),
        },
        text("builder", "Hello"),
        AgentEvent::TextComplete {
            agent: "builder".into(),
            text: "Hello".into(),
        },
        AgentEvent::Usage {
            agent: "builder".into(),
            input_tokens: 300,
            output_tokens: 20,
            reasoning_tokens: None,
            cache_read_tokens: 100,
            cache_write_tokens: 0,
            estimated: false,
            model: None,
        },
        start("e1", "edit_file", ToolKind::Edit, json!({"path": "a.rs"})),
        start("b1", "bash", ToolKind::Execute, json!({"command": "false"})),
        start("t1", "todo_write", ToolKind::Think, json!({"todos": []})),
        end("e1", "edit_file", edit),
        end(
            "b1",
            "bash",
            ToolResult {
                status: ToolStatus::Error,
                output: "boom\n[exit code: 1]".into(),
                metadata: ToolMetadata {
                    extra: json!({"exit_code": 1}),
                    ..ToolMetadata::default()
                },
            },
        ),
        end("t1", "todo_write", todos),
        AgentEvent::FilesChanged {
            agent: "builder".into(),
            files: vec!["/project/a.rs".into()],
            changes: Vec::new(),
            snapshot: None,
        },
        AgentEvent::CoagentStart {
            primary: "builder".into(),
            coagent: "reviewer".into(),
        },
        AgentEvent::Handoff {
            from: "builder".into(),
            to: "reviewer".into(),
            prompt: "review it".into(),
        },
        text("reviewer", "Looks good"),
        AgentEvent::CoagentEnd {
            primary: "builder".into(),
            coagent: "reviewer".into(),
        },
        AgentEvent::SubagentStart {
            parent: "builder".into(),
            subagent: "builder/explore".into(),
            task: "find x".into(),
        },
        AgentEvent::SubagentEnd {
            parent: "builder".into(),
            subagent: "builder/explore".into(),
            result: "x is here".into(),
        },
        AgentEvent::Retry {
            agent: "builder".into(),
            attempt: 2,
            delay_ms: 10,
            reason: "429".into(),
            discard_partial: false,
        },
        AgentEvent::Notice {
            agent: "crow".into(),
            level: crow_core::NoticeLevel::Warning,
            message: "MCP server 'x' failed to start".into(),
        },
        AgentEvent::Error {
            agent: "builder".into(),
            error: "nothing shown".into(),
        },
        AgentEvent::TaskComplete {
            agent: "builder".into(),
            summary: "All done.".into(),
        },
        AgentEvent::Cancelled {
            agent: "builder".into(),
        },
        AgentEvent::TurnComplete {
            agent: "builder".into(),
        },
    ];
    let (updates, stop, _) = run(
        Script::Events(events, Stop::EndTurn),
        false,
        "allow_once",
        user("go"),
    )
    .await;
    assert_eq!(stop, acp::StopReason::EndTurn);
    let got = turn_updates(&updates);
    let expected = json!([
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hello"}},
        {"sessionUpdate": "usage_update", "used": 320, "size": 1000},
        // Calls that may ask the user are announced pending (the default status, so absent
        // on the wire); the gate marks them in_progress once allowed.
        {"sessionUpdate": "tool_call", "toolCallId": "e1", "title": "Edit a.rs", "kind": "edit",
         "locations": [{"path": project().join("a.rs")}], "rawInput": {"path": "a.rs"},
         "_meta": {"crow": {"agent": "builder"}}},
        {"sessionUpdate": "tool_call", "toolCallId": "b1", "title": "`false`", "kind": "execute",
         "rawInput": {"command": "false"}, "_meta": {"crow": {"agent": "builder"}}},
        {"sessionUpdate": "tool_call_update", "toolCallId": "e1", "status": "completed",
         "content": [{"type": "diff", "path": "/project/a.rs", "oldText": "old\n", "newText": "new\n"}]},
        {"sessionUpdate": "tool_call_update", "toolCallId": "b1", "status": "failed",
         "content": [{"type": "content", "content": {"type": "text", "text": "```\nboom\n[exit code: 1]\n```"}}],
         "rawOutput": {"exit_code": 1}},
        {"sessionUpdate": "plan", "entries": [
            {"content": "a", "priority": "medium", "status": "completed"},
            {"content": "b", "priority": "high", "status": "pending"}]},
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "\nbuilder hands over to reviewer\n"}},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "\n\n**reviewer:** "}},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Looks good"}},
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "\nbuilder/explore started: find x\n"}},
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "\nbuilder/explore finished\n"}},
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "\nℹ 429 — retry 1 in 0.0s\n"}},
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "\n⚠ MCP server 'x' failed to start\n"}},
        // The builder's words after the reviewer's are labelled, or they would read as its.
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "\n\n**builder:** "}},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "\n\nAll done."}},
    ]);
    let mut got_value = Value::Array(got);
    // Empty lists and absent fields serialise differently across schema versions; compare
    // the fields the editor relies on.
    strip_empty(&mut got_value);
    assert_eq!(got_value, expected, "{:#}", got_value);
}

/// Removes empty arrays and nulls so the comparison is about content.
fn strip_empty(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|_, x| !(x.is_null() || x.as_array().is_some_and(Vec::is_empty)));
            map.values_mut().for_each(strip_empty);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_empty),
        _ => {}
    }
}

#[tokio::test]
async fn stop_reasons_map() {
    for (stop, reason) in [
        (Stop::EndTurn, acp::StopReason::EndTurn),
        (Stop::MaxTokens, acp::StopReason::MaxTokens),
        (Stop::MaxTurnRequests, acp::StopReason::MaxTurnRequests),
        (Stop::Refusal, acp::StopReason::Refusal),
        (Stop::Cancelled, acp::StopReason::Cancelled),
    ] {
        let (_, got, _) = run(Script::Events(vec![], stop), false, "allow_once", user("x")).await;
        assert_eq!(got, reason);
    }
    assert_eq!(
        Stop::from(crow_core::TurnStop::MaxIterations),
        Stop::MaxTurnRequests
    );
    assert_eq!(Stop::from(&crow_core::RunStop::NeedsInput), Stop::EndTurn);
}

/// Issue 31 item 20: the question about another agent's call names it, as its card does.
#[tokio::test]
async fn a_question_about_the_reviewers_call_names_the_reviewer() {
    let (updates, _, _) = run(Script::ReviewerAsks, false, "allow_once", user("x")).await;
    let card = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap();
    assert_eq!(card["title"], "reviewer: Write a.txt");
    assert_eq!(card["_meta"]["crow"]["agent"], "reviewer");
    let asked = updates
        .iter()
        .find_map(|u| u.get("permission"))
        .expect("asked");
    assert_eq!(asked["title"], "reviewer: Create a.txt");
}

#[tokio::test]
async fn allow_always_is_remembered_and_reject_reaches_the_runner() {
    let (updates, _, _) = run(Script::AskPermission, false, "allow_always", user("x")).await;
    let answer: Vec<_> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(answer, ["allow;allow"]);
    // Each call is announced pending, the first is asked about with the diff it would
    // make, and each runs (in_progress) once allowed: by the user, then by the remembered
    // answer.
    let flow: Vec<Value> = updates
        .iter()
        .filter(|u| u.get("permission").is_some() || u["toolCallId"].is_string())
        .map(|u| match u.get("permission") {
            Some(p) => json!(["asked", p["toolCallId"], p["content"]]),
            // `pending` is the default status and is left out on the wire.
            None => json!([
                u["sessionUpdate"],
                u["toolCallId"],
                u.get("status").unwrap_or(&json!("pending"))
            ]),
        })
        .collect();
    let diff =
        json!([{"type": "diff", "path": "/p/a.txt", "oldText": "old\n", "newText": "new\n"}]);
    assert_eq!(
        flow,
        [
            json!(["tool_call", "c1", "pending"]),
            json!(["asked", "c1", diff]),
            json!(["tool_call_update", "c1", "in_progress"]),
            json!(["tool_call", "c2", "pending"]),
            json!(["tool_call_update", "c2", "in_progress"]),
        ]
    );

    let (updates, _, _) = run(Script::AskPermission, false, "reject_always", user("x")).await;
    let answer = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "agent_message_chunk")
        .unwrap()["content"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        answer.starts_with("the user rejected this and every further write_file"),
        "{answer}"
    );
    assert!(
        answer.contains(";the user rejects every write_file(/p/a.txt) call"),
        "{answer}"
    );
}

#[tokio::test]
async fn client_files_round_trip_only_when_offered() {
    let (updates, _, factory) = run(
        Script::UseClient("/project/a.txt".into()),
        true,
        "allow_once",
        user("x"),
    )
    .await;
    assert!(
        updates
            .iter()
            .any(|u| u["content"]["text"] == "buffer of /project/a.txt")
    );
    {
        let specs = factory.specs.lock().unwrap();
        let client = specs[0].client.as_ref().unwrap();
        assert!(client.offers_read() && client.offers_write() && !client.offers_terminal());
    }

    let (_, _, factory) = run(Script::Echo, false, "allow_once", user("x")).await;
    assert!(
        factory.specs.lock().unwrap()[0].client.is_none(),
        "no fs, no terminal: no bridge"
    );
}

#[tokio::test]
async fn prompt_text_mode_and_model_reach_the_runner_and_commands_are_local() {
    let prompt = vec![
        acp::ContentBlock::Text(acp::TextContent::new("look at ")),
        acp::ContentBlock::ResourceLink(acp::ResourceLink::new("a.rs", "file:///project/a.rs")),
    ];
    let (updates, _, _) = run(Script::Echo, false, "allow_once", prompt).await;
    assert!(
        updates
            .iter()
            .any(|u| u["content"]["text"] == "look at @/project/a.rs|build|p/small")
    );
    assert_eq!(updates[0]["sessionUpdate"], "available_commands_update");
    assert_eq!(updates[1]["sessionUpdate"], "session_info_update");
    assert_eq!(
        updates[1]["title"], "look at @/project/a.rs",
        "the first prompt names the session"
    );

    let (updates, stop, _) = run(Script::Echo, false, "allow_once", user("/mode")).await;
    assert_eq!(stop, acp::StopReason::EndTurn);
    let listed = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "agent_message_chunk")
        .unwrap()["content"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        listed.contains("`build` — Build (current)") && listed.contains("`yolo`"),
        "{listed}"
    );
}
