//! The loop's model call: one request, its deltas streamed out as events and gathered
//! into the response, which is recorded in history; a context overflow is recovered once
//! (`compaction.rs`). A `Retrying` delta with `discard_partial` starts the gathering over.

use super::*;
use crate::fallback::Pick;

impl BaseAgent {
    /// The model call, with the overflow recovery: on a context overflow, compact and retry
    /// once instead of ending the turn. A failure is announced and recorded.
    pub(super) async fn model_call(
        &self,
        session: &mut Session,
        events: &EventSender,
        cancel: &CancellationToken,
    ) -> Result<Response, ProviderError> {
        let mut pick = self.fallback.as_ref().map_or(Pick::Own, |f| f.first());
        let mut result = self.stream_response(session, events, cancel, &pick).await;
        if let Err(error) = &result
            && error.kind == ProviderErrorKind::ContextOverflow
            && self.recover_overflow(session, events, cancel, error).await
        {
            result = self.stream_response(session, events, cancel, &pick).await;
        }
        // A model that failed after its own retries hands the call to the next of the chain.
        while let (Some(chain), Err(error)) = (&self.fallback, &result) {
            let Some(next) = chain.next(&pick, error) else {
                break;
            };
            let from = self.picked(&pick);
            let to = self.picked(&next);
            self.emit(
                events,
                AgentEvent::Notice {
                    agent: self.name.clone(),
                    level: NoticeLevel::Warning,
                    message: format!(
                        "{}/{} failed ({error}); {}/{} answers instead",
                        from.name(),
                        from.model(),
                        to.name(),
                        to.model()
                    ),
                },
            );
            pick = next;
            result = self.stream_response(session, events, cancel, &pick).await;
        }
        if let (Some(chain), Ok(_)) = (&self.fallback, &result) {
            chain.answered(&pick);
        }
        if let Err(error) = &result {
            self.emit(
                events,
                AgentEvent::Error {
                    agent: self.name.clone(),
                    error: error.to_string(),
                },
            );
            session.push(EntryKind::System {
                event: SystemEvent::Error {
                    message: error.to_string(),
                },
            });
        }
        result
    }

    /// One model call: streams deltas out as events and records the response in history.
    async fn stream_response(
        &self,
        session: &mut Session,
        events: &EventSender,
        cancel: &CancellationToken,
        pick: &Pick,
    ) -> Result<Response, ProviderError> {
        let provider = self.picked(pick);
        let mut acc = Accumulator::default();
        let definitions = self.current_definitions();
        let outcome = {
            let request = ChatRequest {
                system: &self.system_prompt,
                messages: session.messages(),
                tools: &definitions,
                max_tokens: self.config.max_tokens,
                temperature: self.config.temperature,
                session_id: &session.id,
            };
            let started = tokio::select! {
                biased;
                () = cancel.cancelled() => None,
                stream = provider.stream(&request) => Some(stream),
            };
            match started {
                None => Outcome::Cancelled,
                Some(Err(error)) => Outcome::Failed(error),
                Some(Ok(mut stream)) => loop {
                    let item = tokio::select! {
                        biased;
                        () = cancel.cancelled() => break Outcome::Cancelled,
                        item = stream.next() => item,
                    };
                    match item {
                        None => break Outcome::Done,
                        Some(Err(error)) => break Outcome::Failed(error),
                        Some(Ok(delta)) => self.on_delta(delta, &mut acc, events),
                    }
                },
            }
            // The stream (and with it the HTTP connection) is dropped here.
        };

        let partial = !matches!(outcome, Outcome::Done);
        if acc.usage.is_empty() && !partial {
            // The server reported no usage (llama-cpp-python): estimate it rather than
            // report nothing, marked so, and not calibrating the budget with it.
            acc.usage = acc.estimated_usage(&session.budget);
        } else if !acc.usage.is_empty() {
            session.budget.observe(acc.usage.input_tokens);
        }
        if !acc.usage.is_empty() {
            let mut usage = AgentEvent::usage(&self.name, &acc.usage);
            if let (AgentEvent::Usage { model, .. }, Pick::Fallback(..)) = (&mut usage, pick) {
                *model = Some(provider.model().to_owned());
            }
            self.emit(events, usage);
        }
        self.record_response(session, events, &mut acc, partial);
        match outcome {
            Outcome::Failed(error) => Err(error),
            Outcome::Cancelled => Ok(acc.into_response(true)),
            Outcome::Done => Ok(acc.into_response(false)),
        }
    }

    /// The provider a pick names.
    fn picked<'a>(&'a self, pick: &'a Pick) -> &'a Arc<dyn Provider> {
        match pick {
            Pick::Own => &self.provider,
            Pick::Fallback(_, provider) => provider,
        }
    }

    fn on_delta(&self, delta: StreamDelta, acc: &mut Accumulator, events: &EventSender) {
        match delta {
            StreamDelta::Text { text } => {
                if text.is_empty() {
                    return;
                }
                acc.text.push_str(&text);
                self.emit(
                    events,
                    AgentEvent::TextDelta {
                        agent: self.name.clone(),
                        delta: text,
                    },
                );
            }
            StreamDelta::Thinking { text } => {
                if text.is_empty() {
                    return;
                }
                match acc.thinking.last_mut() {
                    Some(block) if block.signature.is_none() => block.text.push_str(&text),
                    _ => acc.thinking.push(ThinkingBlock {
                        text: text.clone(),
                        signature: None,
                    }),
                }
                self.emit(
                    events,
                    AgentEvent::ThinkingDelta {
                        agent: self.name.clone(),
                        delta: text,
                    },
                );
            }
            StreamDelta::ThinkingSignature { signature } => match acc.thinking.last_mut() {
                Some(block) if block.signature.is_none() => block.signature = Some(signature),
                _ => acc.thinking.push(ThinkingBlock {
                    text: String::new(),
                    signature: Some(signature),
                }),
            },
            StreamDelta::RedactedThinking { data } => acc.redacted.push(data),
            StreamDelta::ToolCallStart { index, id, name } => {
                let call = acc.calls.entry(index).or_default();
                call.id = id;
                call.name = name;
            }
            StreamDelta::ToolCallDelta { index, arguments } => {
                acc.calls
                    .entry(index)
                    .or_default()
                    .arguments
                    .push_str(&arguments);
            }
            // Calls are complete when the response is; nothing to do per call.
            StreamDelta::ToolCallEnd { .. } => {}
            StreamDelta::Usage { usage } => acc.usage.merge_max(&usage),
            StreamDelta::Retrying {
                attempt,
                delay_ms,
                reason,
                discard_partial,
            } => {
                if discard_partial {
                    // The retry streams the whole response again: what the failed attempt
                    // said must not reach history twice. Usage stays (it was billed).
                    let usage = acc.usage;
                    *acc = Accumulator {
                        usage,
                        ..Accumulator::default()
                    };
                }
                self.emit(
                    events,
                    AgentEvent::Retry {
                        agent: self.name.clone(),
                        attempt,
                        delay_ms,
                        reason,
                        discard_partial,
                    },
                );
            }
            StreamDelta::Notice { message } => self.emit(
                events,
                AgentEvent::Notice {
                    agent: self.name.clone(),
                    level: NoticeLevel::Warning,
                    message,
                },
            ),
            StreamDelta::ExternalToolStart {
                id,
                title,
                kind,
                arguments,
            } => {
                self.emit(
                    events,
                    AgentEvent::ToolCallStart {
                        agent: self.name.clone(),
                        call_id: id.clone(),
                        tool: title.clone(),
                        kind,
                        arguments: arguments.clone(),
                    },
                );
                acc.external.push(ExternalCall {
                    id,
                    title,
                    arguments,
                    started: std::time::Instant::now(),
                    end: None,
                });
            }
            StreamDelta::ExternalToolUpdate {
                id,
                title,
                arguments,
            } => {
                if let Some(call) = acc
                    .external
                    .iter_mut()
                    .find(|c| c.id == id && c.end.is_none())
                {
                    call.title = title.unwrap_or_else(|| std::mem::take(&mut call.title));
                    call.arguments =
                        arguments.unwrap_or_else(|| std::mem::take(&mut call.arguments));
                }
            }
            StreamDelta::ExternalToolEnd {
                id,
                success,
                output,
            } => {
                let Some(call) = acc
                    .external
                    .iter_mut()
                    .find(|c| c.id == id && c.end.is_none())
                else {
                    return;
                };
                let result = if success {
                    ToolResult::success(output.clone())
                } else {
                    ToolResult::error(output.clone())
                };
                self.emit(
                    events,
                    AgentEvent::ToolCallEnd {
                        agent: self.name.clone(),
                        call_id: id,
                        tool: call.title.clone(),
                        result,
                        duration_ms: u64::try_from(call.started.elapsed().as_millis())
                            .unwrap_or(u64::MAX),
                    },
                );
                call.end = Some((success, output));
            }
            StreamDelta::Finish { reason } => acc.finish = Some(reason),
        }
    }

    /// Appends what the model said. A cut-off response keeps its text and thinking, marked
    /// partial; its tool calls are dropped, since none of them ran.
    fn record_response(
        &self,
        session: &mut Session,
        events: &EventSender,
        acc: &mut Accumulator,
        partial: bool,
    ) {
        for block in &acc.thinking {
            if !block.text.is_empty() {
                self.emit(
                    events,
                    AgentEvent::ThinkingComplete {
                        agent: self.name.clone(),
                        text: block.text.clone(),
                    },
                );
            }
            session.push(EntryKind::Thinking {
                content: block.text.clone(),
                signature: block.signature.clone(),
                partial: partial && block.signature.is_none(),
            });
        }
        for data in &acc.redacted {
            session.push(EntryKind::RedactedThinking { data: data.clone() });
        }
        if !acc.text.is_empty() {
            self.emit(
                events,
                AgentEvent::TextComplete {
                    agent: self.name.clone(),
                    text: acc.text.clone(),
                },
            );
            session.push(EntryKind::AssistantText {
                content: acc.text.clone(),
                partial,
            });
        }
        // What an external agent ran is its own record, kept for the timeline whether or
        // not its answer was finished.
        for call in acc.external.drain(..) {
            let (success, output) = call.end.unwrap_or((false, "(did not finish)".to_owned()));
            session.push(EntryKind::System {
                event: SystemEvent::ExternalTool {
                    agent: self.name.clone(),
                    title: call.title,
                    arguments: call.arguments,
                    success,
                    output,
                },
            });
        }
        if partial {
            acc.calls.clear();
            return;
        }
        for (index, call) in &mut acc.calls {
            if call.id.is_empty() {
                // Some OpenAI-compatible servers omit ids; the model must still be able to
                // match results to calls.
                call.id = format!("call_{}_{index}", session.entries().len());
            }
            session.push(EntryKind::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
    }
}

enum Outcome {
    Done,
    Cancelled,
    Failed(ProviderError),
}

#[derive(Default)]
struct ThinkingBlock {
    text: String,
    signature: Option<String>,
}

/// A tool call as the response streamed it; run by `run_tools`.
#[derive(Default)]
pub(super) struct PendingCall {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) arguments: String,
}

#[derive(Default)]
struct Accumulator {
    text: String,
    thinking: Vec<ThinkingBlock>,
    redacted: Vec<String>,
    calls: BTreeMap<usize, PendingCall>,
    /// Tools an external agent ran itself, by id: started, and ended once its end came.
    external: Vec<ExternalCall>,
    usage: Usage,
    finish: Option<FinishReason>,
}

/// A tool an external agent reported running (`StreamDelta::ExternalToolStart`/`End`).
struct ExternalCall {
    id: String,
    title: String,
    arguments: serde_json::Value,
    started: std::time::Instant,
    end: Option<(bool, String)>,
}

/// One model call's response, as the loop's next steps read it.
pub(super) struct Response {
    pub(super) text: String,
    pub(super) calls: Vec<PendingCall>,
    pub(super) usage: Usage,
    pub(super) finish: Option<FinishReason>,
    pub(super) cancelled: bool,
}

impl Accumulator {
    /// Usage estimated the way the budget estimates requests: the request sent, and what
    /// the model said, in characters over the calibrated ratio.
    fn estimated_usage(&self, budget: &crate::budget::Budget) -> Usage {
        let thinking: usize = self.thinking.iter().map(|b| b.text.len()).sum();
        let calls: usize = self
            .calls
            .values()
            .map(|c| c.name.len() + c.arguments.len())
            .sum();
        let output_chars = (self.text.len() + thinking + calls) as u64;
        Usage {
            input_tokens: budget.last_request_tokens().unwrap_or(0),
            output_tokens: budget.tokens(output_chars),
            estimated: true,
            ..Usage::default()
        }
    }

    fn into_response(self, cancelled: bool) -> Response {
        Response {
            text: self.text,
            calls: self.calls.into_values().collect(),
            usage: self.usage,
            finish: self.finish,
            cancelled,
        }
    }
}
