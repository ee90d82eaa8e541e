//! The step of the loop that runs one response's tool calls: order them by footprint
//! (`schedule.rs`), consult the permission policy, run them concurrently, and record their
//! results in call order.

use super::*;

impl BaseAgent {
    /// What a tool knows of the call `call_id` it serves.
    pub(super) fn tool_context(
        &self,
        session: &Session,
        call_id: &str,
        events: &EventSender,
        cancel: &CancellationToken,
    ) -> ToolContext {
        ToolContext {
            session_id: session.id.clone(),
            agent: self.name.clone(),
            call_id: call_id.to_owned(),
            cwd: session.cwd.clone(),
            project_root: session.project_root.clone(),
            cancel: cancel.child_token(),
            permission: Arc::clone(&self.permission),
            events: events.clone(),
            client: self.client.clone(),
            steering: session.steering.clone(),
        }
    }

    /// Runs one response's tool calls concurrently, except that calls touching the same files
    /// run one after another in call order (`schedule.rs`); returns results in call order.
    pub(super) async fn run_tools(
        &self,
        session: &mut Session,
        events: &EventSender,
        cancel: &CancellationToken,
        calls: Vec<PendingCall>,
        truncated: bool,
        halt: &Halt,
    ) -> Vec<ExecutedToolCall> {
        let mut slots: Vec<(PendingCall, serde_json::Value, Option<ToolResult>, u64)> = Vec::new();
        let mut running = FuturesUnordered::new();
        let mut order = CallOrder::default();

        for (index, call) in calls.into_iter().enumerate() {
            let tool = self.tools.get(&call.name);
            let kind = tool.as_ref().map_or(ToolKind::Other, |t| t.kind());
            let parsed = parse_arguments(&call.arguments);
            let shown = parsed
                .clone()
                .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
            self.emit(
                events,
                AgentEvent::ToolCallStart {
                    agent: self.name.clone(),
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    kind,
                    arguments: shown.clone(),
                },
            );
            let early = match (&tool, parsed) {
                (None, _) => Some(ToolResult::error(format!(
                    "error: unknown tool '{}'. Available tools: {}.",
                    call.name,
                    self.tools.names().join(", ")
                ))),
                (Some(_), Err(problem)) => Some(ToolResult::error(if truncated {
                    format!(
                        "error: the arguments of '{}' were cut off at the output token limit ({problem}). \
                         Send a smaller call, e.g. write the file in parts.",
                        call.name
                    )
                } else {
                    format!(
                        "error: the arguments of '{}' are not valid JSON ({problem}). Call it again \
                         with a JSON object matching its schema.",
                        call.name
                    )
                })),
                (Some(tool), Ok(input)) => {
                    let ctx = self.tool_context(session, &call.id, events, cancel);
                    let tool = Arc::clone(tool);
                    let footprint = tool.footprint(&input, &ctx);
                    let (turn_comes, finished) = order.admit(footprint.clone());
                    let policy = self.policy.clone();
                    let halt = Arc::clone(halt);
                    running.push(async move {
                        turn_comes.await;
                        let started = Instant::now();
                        // The policy point: after the call-order wait, before it runs.
                        let result = policy
                            .run(tool.as_ref(), input, ctx, &footprint, &halt)
                            .await;
                        drop(finished);
                        (index, result, started.elapsed().as_millis() as u64)
                    });
                    None
                }
            };
            slots.push((call, shown, early, 0));
        }

        // Results stream out as tools finish; history gets them in call order below.
        let mut grace: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        while !running.is_empty() {
            let next = match grace.as_mut() {
                None => tokio::select! {
                    biased;
                    () = cancel.cancelled() => {
                        grace = Some(Box::pin(tokio::time::sleep(CANCEL_GRACE)));
                        continue;
                    }
                    next = running.next() => next,
                },
                Some(deadline) => tokio::select! {
                    () = deadline => break,
                    next = running.next() => next,
                },
            };
            let Some((index, mut result, elapsed)) = next else {
                break;
            };
            if result.metadata.duration_ms == 0 {
                result.metadata.duration_ms = elapsed;
            }
            slots[index].2 = Some(result);
            slots[index].3 = elapsed;
        }
        drop(running); // whatever did not finish in the grace period is dropped (and killed)

        slots
            .into_iter()
            .map(|(call, arguments, result, duration_ms)| ExecutedToolCall {
                id: call.id,
                name: call.name,
                arguments,
                result: result.unwrap_or_else(ToolResult::cancelled),
                duration_ms,
            })
            .collect()
    }

    /// Announces a batch's results and appends them to history, in call order.
    pub(super) fn record_results(
        &self,
        session: &mut Session,
        events: &EventSender,
        executed: &[ExecutedToolCall],
    ) {
        for call in executed {
            self.emit(
                events,
                AgentEvent::ToolCallEnd {
                    agent: self.name.clone(),
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    result: call.result.clone(),
                    duration_ms: call.duration_ms,
                },
            );
            // The user saw it whole (above); the model gets at most its share of the window.
            let output = self
                .fit_result(session, &call.result.output)
                .unwrap_or_else(|| call.result.output.clone());
            session.push(EntryKind::ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                status: call.result.status,
                output,
                metadata: call.result.metadata.clone(),
            });
        }
    }
}
