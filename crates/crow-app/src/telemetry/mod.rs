//! OpenTelemetry traces of what the agents did, exported over OTLP/HTTP (protobuf) when the
//! user configured a collector, and nothing at all when they did not (no spans are built).
//!
//! Spans follow the GenAI semantic conventions and are built from the `AgentEvent` stream
//! every front end already passes through `sessions::record_usage`, so `crow run`, the
//! interactive terminal and `crow acp` trace alike: one prompt is one trace —
//!
//! ```text
//! invoke_agent {crew}                       the prompt (gen_ai.conversation.id = session)
//! ├─ invoke_agent {agent}                   one turn of the builder, the reviewer, a subagent
//! │  ├─ chat {model}                        one model call: tokens, cache, finish, TTFT
//! │  └─ execute_tool {tool}                 one tool call: kind, status, duration
//! │     └─ invoke_agent {subagent}          a `task` call's subagent turn
//! └─ events: crow.handoff, crow.review.start / .end (the crew's rounds and verdicts),
//!    crow.hook (each hook run, on its agent's turn or the prompt)
//! ```
//!
//! Message content (answers, tool arguments and results, handoff prompts) is left out unless
//! `[telemetry] content = true` (or `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`).
//! A trace is sent when its prompt ends, on a task of its own with a short timeout: a
//! collector that is down costs one warning, never a session.

mod otlp;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crow_core::{AgentEvent, ToolStatus};
use prost::Message as _;
use serde::Deserialize;

use otlp::{Event, KIND_CLIENT, KIND_INTERNAL, STATUS_ERROR, Span, Status, kv};

/// Content attributes are cut to this many bytes.
const CONTENT_BYTES: usize = 4096;
/// One export's time limit (connect included).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// `[telemetry]` in config.toml (the user's own file, or a trusted project's).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector: its base URL (`http://localhost:4318`) or the traces URL itself
    /// (`…/v1/traces`). Else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`; with none, nothing is traced.
    pub endpoint: Option<String>,
    /// Headers sent with every export (a backend's API key). Else
    /// `OTEL_EXPORTER_OTLP_TRACES_HEADERS` / `OTEL_EXPORTER_OTLP_HEADERS` (`k=v,k2=v2`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Put message content in the spans: answers, tool arguments and results, handoff
    /// prompts (default false).
    pub content: Option<bool>,
    /// `false` turns tracing off even when the `OTEL_` variables are set.
    pub enabled: Option<bool>,
}

/// Where and how traces go, resolved once per process.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub content: bool,
    /// `service.name` of the traces: `OTEL_SERVICE_NAME`, else `crow`.
    pub service: String,
}

static SETTINGS: OnceLock<Option<Settings>> = OnceLock::new();
static PENDING: Mutex<Vec<tokio::task::JoinHandle<()>>> = Mutex::new(Vec::new());

/// Resolves the settings from the first configuration loaded (telemetry is the user's
/// choice for the process, like the `OTEL_` variables it reads).
pub fn init(config: &TelemetryConfig) {
    SETTINGS.get_or_init(|| {
        let settings = resolve(config, |name| std::env::var(name).ok());
        if let Some(s) = &settings {
            tracing::debug!("telemetry: traces go to {}", redact_url(&s.url));
        }
        settings
    });
}

fn settings() -> Option<&'static Settings> {
    SETTINGS.get().and_then(Option::as_ref)
}

/// The settings `config` and the environment ask for; `None` when tracing is off.
pub fn resolve(config: &TelemetryConfig, env: impl Fn(&str) -> Option<String>) -> Option<Settings> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if config.enabled == Some(false)
        || set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
    {
        return None;
    }
    let traces_url = |base: &str| {
        let base = base.trim().trim_end_matches('/');
        if base.ends_with("/v1/traces") {
            base.to_owned()
        } else {
            format!("{base}/v1/traces")
        }
    };
    let url = match &config.endpoint {
        Some(endpoint) => traces_url(endpoint),
        None => match set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            // The signal-specific variable is the URL as it is.
            Some(url) => url.trim().to_owned(),
            None => traces_url(&set("OTEL_EXPORTER_OTLP_ENDPOINT")?),
        },
    };
    let protocol =
        set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"));
    if let Some(p) = protocol.filter(|p| !p.eq_ignore_ascii_case("http/protobuf")) {
        tracing::warn!(
            "telemetry is off: crow exports OTLP over http/protobuf, and OTEL_EXPORTER_OTLP_PROTOCOL asks for {p}"
        );
        return None;
    }
    let headers = if config.headers.is_empty() {
        set("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            .or_else(|| set("OTEL_EXPORTER_OTLP_HEADERS"))
            .map(|h| parse_headers(&h))
            .unwrap_or_default()
    } else {
        config
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let content = config.content.unwrap_or(false)
        || set("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let service = set("OTEL_SERVICE_NAME").unwrap_or_else(|| "crow".to_owned());
    Some(Settings {
        url,
        headers,
        content,
        service,
    })
}

/// `k=v,k2=v2` with percent-encoded values, as the OTLP exporter spec writes them.
fn parse_headers(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_owned(), percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The URL without credentials or query (a token can ride in either), for messages.
fn redact_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    if scheme.is_empty() {
        rest.to_owned()
    } else {
        format!("{scheme}://{rest}")
    }
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn cut(text: &str) -> String {
    if text.len() <= CONTENT_BYTES {
        return text.to_owned();
    }
    let mut end = CONTENT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The agents of a crew, as the trace names them.
#[derive(Debug, Clone, Default)]
pub struct Agents {
    pub crew: String,
    /// Agent → model.
    pub models: HashMap<String, String>,
    /// Agent → provider.
    pub providers: HashMap<String, String>,
    /// Model → its price (config's, else the built-in list's), for the prompt's cost.
    pub prices: HashMap<String, crow_providers::prices::Price>,
}

/// A span being built.
struct Open {
    span: Span,
    /// The agent it belongs to (tool spans: the caller).
    agent: String,
    first_token: Option<u64>,
    /// A model call's stream ended (its usage arrived); the call stays open for what is
    /// said of it afterwards (its tool calls, its whole text), and ends at this time.
    ended: Option<u64>,
    saw_tool_calls: bool,
    output: String,
}

impl Open {
    fn close(mut self, at: u64) -> Span {
        let end = self.ended.unwrap_or(at);
        self.span.end_time_unix_nano = end.max(self.span.start_time_unix_nano);
        self.span
    }

    fn event(&mut self, name: &str, attributes: Vec<otlp::KeyValue>) {
        self.span.events.push(Event {
            time_unix_nano: now_nanos(),
            name: name.to_owned(),
            attributes,
        });
    }

    fn fail(&mut self, message: &str) {
        self.span.status = Some(Status {
            message: cut(message),
            code: STATUS_ERROR,
        });
    }
}

/// One prompt's trace, fed the prompt's events in order.
pub struct Trace {
    settings: &'static Settings,
    trace_id: Vec<u8>,
    agents: Agents,
    root: Open,
    turns: HashMap<String, Open>,
    calls: HashMap<String, Open>,
    tools: HashMap<String, Open>,
    /// A subagent's turns hang under the `task` call that started it.
    subagent_parents: HashMap<String, Vec<u8>>,
    rounds: u64,
    /// The prompt's totals, put on the root at the end: every agent's and side job's tokens,
    /// their cost where the models' prices are known, the tool calls made.
    usage: crow_core::Usage,
    cost: Option<f64>,
    tool_calls: u64,
    /// The reviewer of the crew, once a round started: its handoff back is a verdict.
    coagent: Option<String>,
    done: Vec<Span>,
}

impl Trace {
    /// A trace for one prompt of `session`, or `None` when tracing is off.
    pub fn start(session: &str, agents: Agents) -> Option<Self> {
        let settings = settings()?;
        let trace_id = rand::random::<[u8; 16]>().to_vec();
        let root = Open {
            span: Span {
                trace_id: trace_id.clone(),
                span_id: span_id(),
                name: format!("invoke_agent {}", agents.crew),
                kind: KIND_INTERNAL,
                start_time_unix_nano: now_nanos(),
                attributes: vec![
                    kv("gen_ai.operation.name", "invoke_agent"),
                    kv("gen_ai.agent.name", agents.crew.as_str()),
                    kv("gen_ai.conversation.id", session),
                    kv("crow.composition", agents.crew.as_str()),
                ],
                ..Span::default()
            },
            agent: agents.crew.clone(),
            first_token: None,
            ended: None,
            saw_tool_calls: false,
            output: String::new(),
        };
        Some(Self {
            settings,
            trace_id,
            agents,
            root,
            turns: HashMap::new(),
            calls: HashMap::new(),
            tools: HashMap::new(),
            subagent_parents: HashMap::new(),
            rounds: 0,
            usage: crow_core::Usage::default(),
            cost: None,
            tool_calls: 0,
            coagent: None,
            done: Vec::new(),
        })
    }

    fn open(
        &self,
        name: String,
        kind: i32,
        parent: &[u8],
        agent: &str,
        attributes: Vec<otlp::KeyValue>,
    ) -> Open {
        Open {
            span: Span {
                trace_id: self.trace_id.clone(),
                span_id: span_id(),
                parent_span_id: parent.to_vec(),
                name,
                kind,
                start_time_unix_nano: now_nanos(),
                attributes,
                ..Span::default()
            },
            agent: agent.to_owned(),
            first_token: None,
            ended: None,
            saw_tool_calls: false,
            output: String::new(),
        }
    }

    /// The span an agent's work hangs under: its open turn, else the root.
    fn turn_id(&self, agent: &str) -> Vec<u8> {
        self.turns.get(agent).map_or_else(
            || self.root.span.span_id.clone(),
            |t| t.span.span_id.clone(),
        )
    }

    fn close_call(&mut self, agent: &str, at: u64) {
        if let Some(mut call) = self.calls.remove(agent) {
            let start = call.span.start_time_unix_nano;
            if let Some(first) = call.first_token {
                call.span.attributes.push(kv(
                    "crow.time_to_first_token_ms",
                    first.saturating_sub(start) / 1_000_000,
                ));
            }
            let reason = if call.span.status.is_some() {
                "error"
            } else if call.saw_tool_calls {
                "tool_calls"
            } else {
                "stop"
            };
            call.span.attributes.push(kv(
                "gen_ai.response.finish_reasons",
                vec![reason.to_owned()],
            ));
            if self.settings.content && !call.output.is_empty() {
                let text = cut(&call.output);
                call.span.attributes.push(kv("gen_ai.output.text", text));
            }
            self.done.push(call.close(at));
        }
    }

    fn close_turn(&mut self, agent: &str, at: u64) {
        self.close_call(agent, at);
        if let Some(turn) = self.turns.remove(agent) {
            self.done.push(turn.close(at));
        }
    }

    /// Takes one event of the prompt.
    pub fn observe(&mut self, event: &AgentEvent) {
        let at = now_nanos();
        let content = self.settings.content;
        match event {
            AgentEvent::TurnStart { agent } => {
                self.close_turn(agent, at);
                let parent = self
                    .subagent_parents
                    .get(agent)
                    .cloned()
                    .unwrap_or_else(|| self.root.span.span_id.clone());
                let turn = self.open(
                    format!("invoke_agent {agent}"),
                    KIND_INTERNAL,
                    &parent,
                    agent,
                    vec![
                        kv("gen_ai.operation.name", "invoke_agent"),
                        kv("gen_ai.agent.name", agent.as_str()),
                    ],
                );
                self.turns.insert(agent.clone(), turn);
            }
            AgentEvent::ModelCallStart { agent, iteration } => {
                self.close_call(agent, at);
                let model = self.agents.models.get(agent).cloned().unwrap_or_default();
                let provider = self
                    .agents
                    .providers
                    .get(agent)
                    .cloned()
                    .unwrap_or_default();
                let parent = self.turn_id(agent);
                let call = self.open(
                    format!("chat {model}"),
                    KIND_CLIENT,
                    &parent,
                    agent,
                    vec![
                        kv("gen_ai.operation.name", "chat"),
                        kv("gen_ai.provider.name", provider),
                        kv("gen_ai.request.model", model),
                        kv("gen_ai.agent.name", agent.as_str()),
                        kv("crow.iteration", u64::from(*iteration)),
                    ],
                );
                self.calls.insert(agent.clone(), call);
            }
            AgentEvent::TextDelta { agent, .. } | AgentEvent::ThinkingDelta { agent, .. } => {
                if let Some(call) = self.calls.get_mut(agent) {
                    call.first_token.get_or_insert(at);
                }
            }
            AgentEvent::TextComplete { agent, text } => {
                if let Some(call) = self.calls.get_mut(agent)
                    && content
                {
                    call.output.push_str(text);
                }
            }
            AgentEvent::ToolCallStart {
                agent,
                call_id,
                tool,
                kind,
                arguments,
            } => {
                if let Some(call) = self.calls.get_mut(agent) {
                    if call.ended.is_none() {
                        call.first_token.get_or_insert(at);
                    }
                    call.saw_tool_calls = true;
                }
                let kind_name = serde_json::to_value(kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let mut attributes = vec![
                    kv("gen_ai.operation.name", "execute_tool"),
                    kv("gen_ai.tool.name", tool.as_str()),
                    kv("gen_ai.tool.call.id", call_id.as_str()),
                    kv("gen_ai.tool.type", "function"),
                    kv("gen_ai.agent.name", agent.as_str()),
                    kv("crow.tool.kind", kind_name),
                ];
                if content {
                    attributes.push(kv(
                        "gen_ai.tool.call.arguments",
                        cut(&arguments.to_string()),
                    ));
                }
                let parent = self.turn_id(agent);
                let span = self.open(
                    format!("execute_tool {tool}"),
                    KIND_INTERNAL,
                    &parent,
                    agent,
                    attributes,
                );
                self.tools.insert(call_id.clone(), span);
            }
            AgentEvent::ToolCallEnd {
                call_id,
                result,
                duration_ms,
                ..
            } => {
                self.tool_calls += 1;
                if let Some(mut span) = self.tools.remove(call_id) {
                    let status = match result.status {
                        ToolStatus::Success => "success",
                        ToolStatus::Error => "error",
                        ToolStatus::Cancelled => "cancelled",
                    };
                    span.span.attributes.push(kv("crow.tool.status", status));
                    span.span
                        .attributes
                        .push(kv("crow.tool.duration_ms", *duration_ms));
                    // A language server's problems the call introduced (or reported): counts.
                    let problems = &result.metadata.diagnostics;
                    if !problems.is_empty() {
                        let errors = problems
                            .iter()
                            .filter(|d| d.severity == crow_core::Severity::Error)
                            .count();
                        let attributes = &mut span.span.attributes;
                        attributes.push(kv("crow.tool.diagnostics", problems.len() as u64));
                        attributes.push(kv("crow.tool.diagnostics.errors", errors as u64));
                    }
                    if result.status != ToolStatus::Success {
                        span.span.attributes.push(kv("error.type", status));
                        span.fail(status);
                    }
                    if content {
                        span.span
                            .attributes
                            .push(kv("gen_ai.tool.call.result", cut(&result.output)));
                    }
                    self.done.push(span.close(at));
                }
            }
            AgentEvent::Usage {
                agent,
                input_tokens,
                output_tokens,
                reasoning_tokens,
                cache_read_tokens,
                cache_write_tokens,
                ..
            } => {
                let usage = crow_core::Usage {
                    input_tokens: *input_tokens,
                    output_tokens: *output_tokens,
                    reasoning_tokens: reasoning_tokens.unwrap_or(0),
                    cache_read_tokens: *cache_read_tokens,
                    cache_write_tokens: *cache_write_tokens,
                    ..crow_core::Usage::default()
                };
                self.add_usage(agent, &usage);
                if let Some(call) = self.calls.get_mut(agent) {
                    let attributes = &mut call.span.attributes;
                    attributes.push(kv("gen_ai.usage.input_tokens", *input_tokens));
                    attributes.push(kv("gen_ai.usage.output_tokens", *output_tokens));
                    attributes.push(kv(
                        "gen_ai.usage.cache_read.input_tokens",
                        *cache_read_tokens,
                    ));
                    attributes.push(kv(
                        "gen_ai.usage.cache_creation.input_tokens",
                        *cache_write_tokens,
                    ));
                    if let Some(reasoning) = reasoning_tokens {
                        attributes.push(kv("gen_ai.usage.reasoning.output_tokens", *reasoning));
                    }
                    // The stream is over; its tool calls and whole text are told next.
                    call.ended = Some(at);
                }
            }
            AgentEvent::TurnComplete { agent } => self.close_turn(agent, at),
            AgentEvent::Error { agent, error } => {
                match self.calls.get_mut(agent) {
                    Some(call) => call.fail(error),
                    None => {
                        if let Some(turn) = self.turns.get_mut(agent) {
                            turn.fail(error);
                        }
                    }
                }
                self.close_call(agent, at);
                if let Some(turn) = self.turns.get_mut(agent) {
                    turn.fail(error);
                }
            }
            AgentEvent::Cancelled { agent } => {
                if let Some(turn) = self.turns.get_mut(agent) {
                    turn.fail("cancelled");
                }
                self.close_turn(agent, at);
            }
            AgentEvent::Retry {
                agent,
                attempt,
                delay_ms,
                reason,
                ..
            } => {
                if let Some(call) = self.calls.get_mut(agent) {
                    call.event(
                        "crow.retry",
                        vec![
                            kv("crow.retry.attempt", u64::from(*attempt)),
                            kv("crow.retry.delay_ms", *delay_ms),
                            kv("crow.retry.reason", cut(reason)),
                        ],
                    );
                }
            }
            AgentEvent::Handoff { from, to, prompt } => {
                let mut attributes =
                    vec![kv("crow.from", from.as_str()), kv("crow.to", to.as_str())];
                if content {
                    attributes.push(kv("crow.prompt", cut(prompt)));
                }
                self.root.event("crow.handoff", attributes);
                // The reviewer handing work back is its verdict: changes asked for.
                if self.coagent.as_ref() == Some(from) {
                    self.verdict("changes_requested");
                }
            }
            AgentEvent::TaskComplete { agent, .. } if self.coagent.as_ref() == Some(agent) => {
                self.verdict("approved");
            }
            AgentEvent::CoagentStart { primary, coagent } => {
                self.rounds += 1;
                self.coagent = Some(coagent.clone());
                self.root.event(
                    "crow.review.start",
                    vec![
                        kv("crow.primary", primary.as_str()),
                        kv("crow.coagent", coagent.as_str()),
                        kv("crow.round", self.rounds),
                    ],
                );
            }
            AgentEvent::CoagentEnd { primary, coagent } => {
                self.root.event(
                    "crow.review.end",
                    vec![
                        kv("crow.primary", primary.as_str()),
                        kv("crow.coagent", coagent.as_str()),
                        kv("crow.round", self.rounds),
                    ],
                );
            }
            AgentEvent::SubagentStart {
                parent, subagent, ..
            } => {
                // Under the caller's open `task` call, else its turn.
                let under = self
                    .tools
                    .values()
                    .filter(|t| &t.agent == parent)
                    .max_by_key(|t| t.span.start_time_unix_nano)
                    .map(|t| t.span.span_id.clone())
                    .unwrap_or_else(|| self.turn_id(parent));
                self.subagent_parents.insert(subagent.clone(), under);
            }
            AgentEvent::SubagentEnd { subagent, .. } => {
                self.close_turn(subagent, at);
                self.subagent_parents.remove(subagent);
            }
            AgentEvent::Compacted {
                agent,
                tokens_before,
                tokens_after,
                ..
            } => {
                if let Some(turn) = self.turns.get_mut(agent) {
                    turn.event(
                        "crow.compaction",
                        vec![
                            kv("crow.tokens_before", *tokens_before),
                            kv("crow.tokens_after", *tokens_after),
                        ],
                    );
                }
            }
            AgentEvent::DoomLoopDetected { agent, .. } => {
                if let Some(turn) = self.turns.get_mut(agent) {
                    turn.event("crow.doom_loop", Vec::new());
                }
            }
            AgentEvent::HookRan { agent, event, run } => {
                let mut attributes = vec![
                    kv("crow.hook.event", event.as_str()),
                    kv("crow.hook.command", cut(&run.command)),
                    kv("crow.hook.result", run.result.as_str()),
                    kv("crow.hook.duration_ms", run.duration_ms),
                ];
                if let Some(code) = run.exit_code {
                    attributes.push(kv("crow.hook.exit_code", otlp::Value::Int(i64::from(code))));
                }
                // On the agent's turn when one is open (the hooks of its calls), else the
                // prompt's (a prompt's own hooks run before any turn).
                match self.turns.get_mut(agent) {
                    Some(turn) => turn.event("crow.hook", attributes),
                    None => self.root.event("crow.hook", attributes),
                }
            }
            AgentEvent::FilesChanged { agent, files, .. } => {
                if let Some(turn) = self.turns.get_mut(agent) {
                    turn.event(
                        "crow.files_changed",
                        vec![kv("crow.files", files.len() as u64)],
                    );
                }
            }
            _ => {}
        }
    }

    /// Adds one call's usage to the prompt's totals, and its cost when its model is priced.
    fn add_usage(&mut self, agent: &str, usage: &crow_core::Usage) {
        let total = &mut self.usage;
        total.input_tokens += usage.input_tokens;
        total.output_tokens += usage.output_tokens;
        total.reasoning_tokens += usage.reasoning_tokens;
        total.cache_read_tokens += usage.cache_read_tokens;
        total.cache_write_tokens += usage.cache_write_tokens;
        let price = self
            .agents
            .models
            .get(agent)
            .and_then(|model| self.agents.prices.get(model));
        if let Some(price) = price {
            *self.cost.get_or_insert(0.0) += price.cost(usage);
        }
    }

    /// A review round's outcome, as an event of the root.
    fn verdict(&mut self, verdict: &str) {
        let round = self.rounds;
        self.root.event(
            "crow.review.verdict",
            vec![kv("crow.verdict", verdict), kv("crow.round", round)],
        );
    }

    /// Ends every open span and sends the trace on a task of its own.
    pub fn finish(mut self) {
        let at = now_nanos();
        let tools: Vec<Open> = self.tools.drain().map(|(_, t)| t).collect();
        self.done.extend(tools.into_iter().map(|t| t.close(at)));
        let agents: Vec<String> = self
            .calls
            .keys()
            .chain(self.turns.keys())
            .cloned()
            .collect();
        for agent in agents {
            self.close_turn(&agent, at);
        }
        let totals = &self.usage;
        let attributes = &mut self.root.span.attributes;
        attributes.push(kv("crow.review.rounds", self.rounds));
        attributes.push(kv("crow.tool_calls", self.tool_calls));
        attributes.push(kv("gen_ai.usage.input_tokens", totals.input_tokens));
        attributes.push(kv("gen_ai.usage.output_tokens", totals.output_tokens));
        attributes.push(kv(
            "gen_ai.usage.cache_read.input_tokens",
            totals.cache_read_tokens,
        ));
        attributes.push(kv(
            "gen_ai.usage.cache_creation.input_tokens",
            totals.cache_write_tokens,
        ));
        if totals.reasoning_tokens > 0 {
            attributes.push(kv(
                "gen_ai.usage.reasoning.output_tokens",
                totals.reasoning_tokens,
            ));
        }
        if let Some(cost) = self.cost {
            attributes.push(kv("crow.cost_usd", cost));
        }
        let Self {
            settings,
            root,
            mut done,
            ..
        } = self;
        done.push(root.close(at));
        let request = otlp::ExportTraceServiceRequest {
            resource_spans: vec![otlp::ResourceSpans {
                resource: Some(otlp::Resource {
                    attributes: vec![
                        kv("service.name", settings.service.as_str()),
                        kv("service.version", env!("CARGO_PKG_VERSION")),
                    ],
                }),
                scope_spans: vec![otlp::ScopeSpans {
                    scope: Some(otlp::InstrumentationScope {
                        name: "crow".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                    }),
                    spans: done,
                }],
            }],
        };
        export(settings, request.encode_to_vec());
    }
}

fn span_id() -> Vec<u8> {
    rand::random::<[u8; 8]>().to_vec()
}

fn client() -> Option<&'static reqwest::Client> {
    static CLIENT: OnceLock<Option<reqwest::Client>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(1))
                .timeout(EXPORT_TIMEOUT)
                .user_agent(concat!("crow/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| tracing::warn!("telemetry is off: {e}"))
                .ok()
        })
        .as_ref()
}

/// Posts one encoded trace; a failure is said once per process and nothing else happens.
fn export(settings: &'static Settings, body: Vec<u8>) {
    let Some(client) = client() else { return };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let mut request = client
        .post(&settings.url)
        .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
        .body(body);
    for (name, value) in &settings.headers {
        request = request.header(name, value);
    }
    let handle = runtime.spawn(async move {
        let failure = match request.send().await {
            Ok(response) if response.status().is_success() => None,
            Ok(response) => Some(format!("it answered {}", response.status())),
            // The error's own text can carry the URL; say only what kind of failure it was.
            Err(e) if e.is_timeout() => Some("no answer in time".to_owned()),
            Err(e) if e.is_connect() => Some("cannot connect".to_owned()),
            Err(e) if e.is_builder() => Some("the endpoint or a header is not valid".to_owned()),
            Err(_) => Some("the request failed".to_owned()),
        };
        if let Some(why) = failure {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    "telemetry: the collector at {} did not take the trace ({why}); crow goes on without it",
                    redact_url(&settings.url)
                );
            });
        }
    });
    let mut pending = PENDING.lock().unwrap_or_else(PoisonError::into_inner);
    pending.retain(|h| !h.is_finished());
    pending.push(handle);
}

/// Waits, at most `limit`, for traces still being sent (called once before the process
/// exits, so a one-shot `crow run` does not drop its trace).
pub async fn flush(limit: Duration) {
    let handles: Vec<_> =
        std::mem::take(&mut *PENDING.lock().unwrap_or_else(PoisonError::into_inner));
    if handles.is_empty() {
        return;
    }
    let all = futures::future::join_all(handles);
    let _ = tokio::time::timeout(limit, all).await;
}

#[cfg(test)]
mod tests;
