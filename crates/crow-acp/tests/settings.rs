//! Session settings that outlive the process: every change is written through to the
//! factory's sink as it is made, a restored session (load, resume, fork) comes back with its
//! mode, model, approval level and "always" answers, and `usage_update` is sent for a model
//! whose context window nobody knows. A scripted factory stands in for the binary's store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client};
use async_trait::async_trait;
use crow_acp::{
    AgentFactory, Choice, ModeInfo, ModelInfo, RestoredSession, RunnerError, SessionRunner,
    SessionSpec, SettingChange, SettingsSink, Stop, TurnInput, TurnOutcome,
};
use crow_core::{AgentEvent, EventSender, PermissionRequest, ToolKind, Usage};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

type Saved = Arc<Mutex<Vec<SettingChange>>>;

struct Sink(Saved);

impl SettingsSink for Sink {
    fn save(&self, change: &SettingChange) -> Result<(), RunnerError> {
        self.0.lock().unwrap().push(change.clone());
        Ok(())
    }
}

/// Reports usage, asks permission for a `bash` call, and echoes its input.
struct Runner {
    spec: SessionSpec,
    saved: Saved,
}

#[async_trait]
impl SessionRunner for Runner {
    async fn prompt(
        &mut self,
        input: TurnInput,
        events: &EventSender,
        _cancel: CancellationToken,
    ) -> Result<TurnOutcome, RunnerError> {
        events
            .send(AgentEvent::Usage {
                agent: "builder".into(),
                input_tokens: 500,
                output_tokens: 20,
                reasoning_tokens: None,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
                estimated: false,
                model: None,
            })
            .unwrap();
        events
            .send(AgentEvent::ToolCallStart {
                agent: "builder".into(),
                call_id: "b1".into(),
                tool: "bash".into(),
                kind: ToolKind::Execute,
                arguments: json!({"command": "true"}),
            })
            .unwrap();
        let decision = crow_core::policy::ask(
            self.spec.permission.as_ref(),
            PermissionRequest {
                session_id: self.spec.session_id.clone(),
                agent: "builder".into(),
                call_id: "b1".into(),
                tool: "bash".into(),
                kind: ToolKind::Execute,
                title: "`true`".into(),
                input: json!({"command": "true"}),
                preview: None,
                // A prompt saying "policy" stands for a question the policy insists on.
                policy: input
                    .text
                    .contains("policy")
                    .then(|| "asks by the rule ask bash(true)".to_owned()),
                unconfined: false,
            },
        )
        .await;
        if input.text.contains("policy") {
            events
                .send(AgentEvent::TextDelta {
                    agent: "builder".into(),
                    delta: format!("mode {:?};", self.spec.permission.mode()),
                })
                .unwrap();
        }
        events
            .send(AgentEvent::TextDelta {
                agent: "builder".into(),
                delta: format!("{}|{}|{decision:?}", input.mode, input.model),
            })
            .unwrap();
        Ok(TurnOutcome {
            stop: Stop::EndTurn,
            usage: Usage::default(),
        })
    }

    fn settings_sink(&self) -> Option<Arc<dyn SettingsSink>> {
        Some(Arc::new(Sink(Arc::clone(&self.saved))))
    }
}

#[derive(Default)]
struct Factory {
    saved: Saved,
    /// Parent and kept turns of each fork.
    forks: Mutex<Vec<(String, Option<usize>)>>,
}

impl Factory {
    fn runner(&self, spec: SessionSpec) -> Box<dyn SessionRunner> {
        Box::new(Runner {
            spec,
            saved: Arc::clone(&self.saved),
        })
    }

    /// A session left in mode `yolo`, model `p/large`, approve `edits`, bash always allowed,
    /// never prompted (no title).
    fn restored(&self, spec: SessionSpec) -> RestoredSession {
        RestoredSession {
            runner: self.runner(spec),
            history: Vec::new(),
            primary: "builder".into(),
            mode: Some("plan".into()),
            model: Some("p/large".into()),
            approve: Some("edits".into()),
            effort: None,
            remembered: BTreeMap::from([("bash".to_owned(), true)]),
            title: None,
        }
    }
}

#[async_trait]
impl AgentFactory for Factory {
    fn modes(&self) -> Vec<ModeInfo> {
        ["build", "plan"]
            .into_iter()
            .map(|id| ModeInfo {
                choice: Choice::new(id, id),
                auto_approve: false,
            })
            .collect()
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

    fn can_restore(&self) -> bool {
        true
    }

    fn can_fork(&self) -> bool {
        true
    }

    async fn create(&self, spec: SessionSpec) -> Result<Box<dyn SessionRunner>, RunnerError> {
        Ok(self.runner(spec))
    }

    async fn restore(&self, spec: SessionSpec) -> Result<RestoredSession, RunnerError> {
        Ok(self.restored(spec))
    }

    async fn fork(
        &self,
        spec: SessionSpec,
        parent: String,
        keep_turns: Option<usize>,
    ) -> Result<RestoredSession, RunnerError> {
        self.forks.lock().unwrap().push((parent, keep_turns));
        Ok(self.restored(spec))
    }
}

fn project() -> PathBuf {
    let dir = std::env::temp_dir().join("crow-acp-settings");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn user(text: &str) -> Vec<acp::ContentBlock> {
    vec![acp::ContentBlock::Text(acp::TextContent::new(text))]
}

type Log = Arc<Mutex<Vec<Value>>>;

/// Connects a client (every permission question answered `allow_always`, and logged) and
/// runs `body` with it.
async fn with_client<F, Fut, T>(factory: Arc<Factory>, body: F) -> (T, Vec<Value>)
where
    F: FnOnce(ConnectionTo<Agent>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, agent_client_protocol::Error>> + Send,
    T: Send + 'static,
{
    let log: Log = Arc::default();
    let seen = Arc::clone(&log);
    let asked = Arc::clone(&log);
    let result = Client
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
                    .push(json!({"asked": r.tool_call.tool_call_id.0.to_string()}));
                let option = r
                    .options
                    .iter()
                    .find(|o| o.kind == acp::PermissionOptionKind::AllowAlways)
                    .unwrap();
                responder.respond(acp::RequestPermissionResponse::new(
                    acp::RequestPermissionOutcome::Selected(acp::SelectedPermissionOutcome::new(
                        option.option_id.clone(),
                    )),
                ))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(crow_acp::agent(factory), async |cx: ConnectionTo<Agent>| {
            cx.send_request(acp::InitializeRequest::new(ProtocolVersion::V1))
                .block_task()
                .await?;
            body(cx).await
        })
        .await
        .unwrap();
    let log = log.lock().unwrap().clone();
    (result, log)
}

fn set_option(
    id: &acp::SessionId,
    option: &str,
    value: &str,
) -> acp::SetSessionConfigOptionRequest {
    acp::SetSessionConfigOptionRequest::new(id.clone(), option.to_owned(), value)
}

#[tokio::test]
async fn every_change_is_written_through_as_it_is_made() {
    let factory = Arc::new(Factory::default());
    let ((), log) = with_client(Arc::clone(&factory), async |cx| {
        let id = cx
            .send_request(acp::NewSessionRequest::new(project()))
            .block_task()
            .await?
            .session_id;
        cx.send_request(acp::SetSessionModeRequest::new(id.clone(), "plan"))
            .block_task()
            .await?;
        cx.send_request(set_option(&id, "approve", "all"))
            .block_task()
            .await?;
        cx.send_request(set_option(&id, "model", "p/large"))
            .block_task()
            .await?;
        cx.send_request(acp::PromptRequest::new(id.clone(), user("/mode build")))
            .block_task()
            .await?;
        // Refused changes are not saved.
        let refused = cx
            .send_request(set_option(&id, "approve", "sometimes"))
            .block_task()
            .await;
        assert!(refused.is_err());
        cx.send_request(set_option(&id, "approve", "ask"))
            .block_task()
            .await?;
        cx.send_request(acp::PromptRequest::new(id.clone(), user("go")))
            .block_task()
            .await?;
        Ok(())
    })
    .await;
    assert_eq!(
        *factory.saved.lock().unwrap(),
        [
            SettingChange::Mode("plan".into()),
            SettingChange::Approve("all".into()),
            SettingChange::Model("p/large".into()),
            SettingChange::Mode("build".into()),
            SettingChange::Approve("ask".into()),
            SettingChange::Remember {
                tool: "bash(true)".into(),
                allow: true
            },
        ]
    );
    assert!(
        log.iter()
            .any(|u| u["content"]["text"] == "build|p/large|Allow")
    );
}

#[tokio::test]
async fn load_and_resume_give_back_mode_model_approval_and_remembered_answers() {
    let factory = Arc::new(Factory::default());
    let ((loaded, resumed), log) = with_client(Arc::clone(&factory), async |cx| {
        let id = acp::SessionId::new("stored");
        let loaded = cx
            .send_request(acp::LoadSessionRequest::new(id.clone(), project()))
            .block_task()
            .await?;
        cx.send_request(acp::PromptRequest::new(id.clone(), user("first words")))
            .block_task()
            .await?;
        let resumed = cx
            .send_request(acp::ResumeSessionRequest::new("other", project()))
            .block_task()
            .await?;
        Ok((loaded, resumed))
    })
    .await;
    for (modes, options) in [
        (loaded.modes, loaded.config_options),
        (resumed.modes, resumed.config_options),
    ] {
        assert_eq!(modes.unwrap().current_mode_id.0.as_ref(), "plan");
        let options = serde_json::to_value(options.unwrap()).unwrap();
        let current = |id: &str| {
            options
                .as_array()
                .unwrap()
                .iter()
                .find(|o| o["id"] == id)
                .unwrap()["currentValue"]
                .clone()
        };
        assert_eq!(
            (current("mode"), current("model"), current("approve")),
            (json!("plan"), json!("p/large"), json!("edits"))
        );
    }
    // The runner got the restored mode and model; bash was allowed by the remembered answer.
    assert!(
        log.iter()
            .any(|u| u["content"]["text"] == "plan|p/large|Allow"),
        "{log:#?}"
    );
    assert!(!log.iter().any(|u| u.get("asked").is_some()), "{log:#?}");
    // A session never prompted is named by its first prompt.
    assert!(
        log.iter()
            .any(|u| u["sessionUpdate"] == "session_info_update" && u["title"] == "first words")
    );
    // Restoring is not a change: nothing was written.
    assert!(factory.saved.lock().unwrap().is_empty());
}

#[tokio::test]
async fn usage_is_reported_for_a_model_without_a_known_window() {
    let factory = Arc::new(Factory::default());
    let ((), log) = with_client(factory, async |cx| {
        let id = cx
            .send_request(acp::NewSessionRequest::new(project()))
            .block_task()
            .await?
            .session_id;
        cx.send_request(acp::PromptRequest::new(id.clone(), user("small")))
            .block_task()
            .await?;
        cx.send_request(set_option(&id, "model", "p/large"))
            .block_task()
            .await?;
        cx.send_request(acp::PromptRequest::new(id.clone(), user("large")))
            .block_task()
            .await?;
        Ok(())
    })
    .await;
    let usage: Vec<&Value> = log
        .iter()
        .filter(|u| u["sessionUpdate"] == "usage_update")
        .collect();
    assert_eq!(usage.len(), 2, "{log:#?}");
    assert_eq!(
        (&usage[0]["used"], &usage[0]["size"]),
        (&json!(520), &json!(1000))
    );
    assert!(usage[0].get("_meta").is_none_or(Value::is_null));
    assert_eq!(
        (&usage[1]["used"], &usage[1]["size"]),
        (&json!(520), &json!(crow_acp::DEFAULT_CONTEXT_WINDOW))
    );
    assert_eq!(usage[1]["_meta"]["crow"]["sizeEstimated"], true);
}

#[tokio::test]
async fn fork_opens_a_new_session_from_the_parent_with_its_settings() {
    let factory = Arc::new(Factory::default());
    let ((all, some, bad), _) = with_client(Arc::clone(&factory), async |cx| {
        let all = cx
            .send_request(acp::ForkSessionRequest::new("parent", project()))
            .block_task()
            .await?;
        let meta = json!({"crow": {"keepTurns": 2}}).as_object().cloned();
        let some = cx
            .send_request(acp::ForkSessionRequest::new("parent", project()).meta(meta))
            .block_task()
            .await?;
        let meta = json!({"crow": {"keepTurns": "two"}}).as_object().cloned();
        let bad = cx
            .send_request(acp::ForkSessionRequest::new("parent", project()).meta(meta))
            .block_task()
            .await;
        // The fork is a session of its own: it takes prompts.
        cx.send_request(acp::PromptRequest::new(
            all.session_id.clone(),
            user("go on"),
        ))
        .block_task()
        .await?;
        Ok((all, some, bad.is_err()))
    })
    .await;
    assert_ne!(all.session_id, some.session_id);
    assert_ne!(all.session_id.0.as_ref(), "parent");
    assert_eq!(all.modes.unwrap().current_mode_id.0.as_ref(), "plan");
    assert!(bad, "a keepTurns that is not a number is refused");
    assert_eq!(
        *factory.forks.lock().unwrap(),
        [("parent".to_owned(), None), ("parent".to_owned(), Some(2))]
    );
}

#[tokio::test]
async fn fork_is_advertised() {
    let factory = Arc::new(Factory::default());
    let (init, _) = with_client(factory, async |cx| {
        cx.send_request(acp::InitializeRequest::new(ProtocolVersion::V1))
            .block_task()
            .await
    })
    .await;
    let caps = serde_json::to_value(init.agent_capabilities).unwrap();
    assert!(caps["sessionCapabilities"]["fork"].is_object(), "{caps}");
}

#[tokio::test]
async fn the_approve_selector_is_the_mode_and_a_policy_question_is_asked_under_all() {
    let factory = Arc::new(Factory::default());
    let ((), log) = with_client(factory, async |cx| {
        let id = cx
            .send_request(acp::NewSessionRequest::new(project()))
            .block_task()
            .await?
            .session_id;
        cx.send_request(set_option(&id, "approve", "all"))
            .block_task()
            .await?;
        cx.send_request(acp::PromptRequest::new(id.clone(), user("plain")))
            .block_task()
            .await?;
        cx.send_request(acp::PromptRequest::new(id.clone(), user("policy")))
            .block_task()
            .await?;
        Ok(())
    })
    .await;
    // Under "all" the plain question is answered by the setting; the policy's is asked.
    let asked = log.iter().filter(|u| u.get("asked").is_some()).count();
    assert_eq!(asked, 1, "{log:#?}");
    assert!(
        log.iter()
            .any(|u| u["content"]["text"] == "mode Some(FullAuto);"),
        "{log:#?}"
    );
}
