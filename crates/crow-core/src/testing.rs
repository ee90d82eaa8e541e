//! Test support: a scripted in-process provider that records what it was asked.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::message::ChatRequest;
use crate::provider::{DeltaStream, FinishReason, Provider, ProviderError, StreamDelta};

/// One scripted response; `None` stalls the stream forever at that point.
pub type Script = Vec<Option<Result<StreamDelta, ProviderError>>>;

/// What one call carried, rendered for assertions.
#[derive(Debug, Clone)]
pub struct Asked {
    pub system: String,
    pub messages: String,
    pub tools: Vec<String>,
    /// The whole request, readable (for snapshots): system prompt, tools, limits, messages.
    pub request: String,
}

/// Each call pops one scripted response (an empty script once they run out).
pub struct Scripted {
    responses: Mutex<VecDeque<Script>>,
    asked: Mutex<Vec<Asked>>,
    /// Told of every request, so a test can wait for one instead of sleeping.
    asked_signal: tokio::sync::Notify,
    window: Mutex<Option<u64>>,
}

impl Scripted {
    pub fn new(responses: Vec<Script>) -> Arc<Self> {
        Arc::new(Self {
            responses: Mutex::new(responses.into()),
            asked: Mutex::new(Vec::new()),
            asked_signal: tokio::sync::Notify::new(),
            window: Mutex::new(None),
        })
    }

    /// The context window the provider reports.
    pub fn set_window(&self, window: Option<u64>) {
        *self.window.lock().unwrap() = window;
    }

    pub fn requests(&self) -> Vec<Asked> {
        self.asked.lock().unwrap().clone()
    }

    /// Returns once a request has been made since the last wait (at once if one was).
    pub async fn asked(&self) {
        self.asked_signal.notified().await;
    }
}

#[async_trait]
impl Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    fn model(&self) -> &str {
        "scripted-1"
    }
    fn context_window(&self) -> Option<u64> {
        *self.window.lock().unwrap()
    }
    async fn stream(&self, request: &ChatRequest<'_>) -> Result<DeltaStream, ProviderError> {
        self.asked.lock().unwrap().push(Asked {
            system: request.system.to_owned(),
            messages: format!("{:?}", request.messages),
            tools: request.tools.iter().map(|t| t.name.clone()).collect(),
            request: render(request),
        });
        self.asked_signal.notify_one();
        let script = self
            .responses
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_default();
        let stream = futures::stream::unfold(script.into_iter(), |mut it| async move {
            match it.next()? {
                Some(item) => Some((item, it)),
                None => futures::future::pending().await,
            }
        });
        Ok(Box::pin(stream))
    }
}

pub fn text(s: &str) -> Option<Result<StreamDelta, ProviderError>> {
    Some(Ok(StreamDelta::Text { text: s.into() }))
}

pub fn call(index: usize, id: &str, name: &str, args: &str) -> Script {
    vec![
        Some(Ok(StreamDelta::ToolCallStart {
            index,
            id: id.into(),
            name: name.into(),
        })),
        Some(Ok(StreamDelta::ToolCallDelta {
            index,
            arguments: args.into(),
        })),
        Some(Ok(StreamDelta::ToolCallEnd { index })),
    ]
}

pub fn finish(reason: FinishReason) -> Option<Result<StreamDelta, ProviderError>> {
    Some(Ok(StreamDelta::Finish { reason }))
}

/// A complete text-only reply.
pub fn say(s: &str) -> Script {
    vec![text(s), finish(FinishReason::Stop)]
}

/// A complete reply that is one tool call.
pub fn act(id: &str, name: &str, args: &str) -> Script {
    let mut script = call(0, id, name, args);
    script.push(finish(FinishReason::ToolCalls));
    script
}

/// A request as text: the system prompt, tool names, limits and the messages (pretty
/// `Debug`), a line longer than 400 characters shortened to its ends and its length.
fn render(request: &ChatRequest<'_>) -> String {
    let tools: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    let messages = format!("{:#?}", request.messages);
    let messages: Vec<String> = messages
        .lines()
        .map(|line| {
            let chars: Vec<char> = line.chars().collect();
            if chars.len() <= 400 {
                return line.to_owned();
            }
            let head: String = chars[..240].iter().collect();
            let tail: String = chars[chars.len() - 80..].iter().collect();
            format!("{head} …({} chars)… {tail}", chars.len())
        })
        .collect();
    format!(
        "session: {}\nsystem: {}\ntools: {tools:?}\nmax_tokens: {:?}\ntemperature: {:?}\nmessages: {}\n",
        request.session_id,
        request.system,
        request.max_tokens,
        request.temperature,
        messages.join("\n")
    )
}
