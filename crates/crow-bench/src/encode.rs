//! What encoding a request costs as a conversation grows (issue 21): the provider keeps the
//! encoded prefix of a conversation and serialises only what is new, so encoding at step
//! 200 should cost about what it costs at step 10; a fresh provider (the whole history
//! serialised, as before the cache) is measured beside it. In process, no I/O: the figures
//! are crow's own work and nothing else.

use std::time::Instant;

use anyhow::{Context, Result};
use crow_core::{AssistantPart, ChatRequest, Message, ToolDefinition, ToolResultMessage};
use crow_providers::{OpenAiProvider, ProviderKind, ProviderSettings, WireApi};

use crate::stats::summarize;
use crate::table::{Row, Unit};

/// One echo step's call and output, about what `bash echo` leaves in a real session.
struct Step {
    id: String,
    arguments: String,
    output: String,
}

fn steps(n: usize) -> Vec<Step> {
    (0..n)
        .map(|i| Step {
            id: format!("call_{i:04}"),
            arguments: format!(r#"{{"command":"echo step {i} of the long session"}}"#),
            output: format!("step {i} of the long session\n\n[exit code 0, 2 ms]"),
        })
        .collect()
}

fn request<'a>(
    system: &'a str,
    tools: &'a [ToolDefinition],
    task: &'a str,
    done: &'a [Step],
) -> ChatRequest<'a> {
    let mut messages = vec![Message::User {
        text: task,
        images: vec![],
    }];
    for step in done {
        messages.push(Message::Assistant {
            parts: vec![AssistantPart::ToolCall {
                id: &step.id,
                name: "bash",
                arguments: &step.arguments,
            }],
        });
        messages.push(Message::ToolResults {
            results: vec![ToolResultMessage {
                call_id: &step.id,
                name: "bash",
                content: &step.output,
                is_error: false,
            }],
        });
    }
    ChatRequest {
        system,
        messages,
        tools,
        max_tokens: None,
        temperature: None,
        session_id: "bench",
    }
}

/// Microseconds per encode at `early` and at `n` steps, with the prefix kept, and at `n`
/// encoded whole; `runs` sessions each.
pub fn rows(n: usize, early: usize, runs: usize) -> Result<Vec<Row>> {
    let system = "You are crow. ".repeat(400);
    let tools = vec![ToolDefinition {
        name: "bash".into(),
        description: "Runs a command. ".repeat(20),
        parameters: serde_json::json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    }];
    let task = "Run echo two hundred times, one step at a time.";
    let all = steps(n);
    let settings = ProviderSettings::new(ProviderKind::OpenAi, "mock-model");
    let (mut at_early, mut at_end, mut whole, mut bytes) = (vec![], vec![], vec![], 0usize);
    for _ in 0..runs {
        let provider = OpenAiProvider::new(&settings).context("provider")?;
        for k in 0..=n {
            let req = request(&system, &tools, task, &all[..k]);
            let start = Instant::now();
            let body = provider.encode(&req).context("encode")?;
            let us = start.elapsed().as_secs_f64() * 1e6;
            if k == early {
                at_early.push(us);
            }
            if k == n {
                at_end.push(us);
                bytes = body.len();
                let fresh = OpenAiProvider::new(&settings).context("provider")?;
                let start = Instant::now();
                fresh.encode(&req).context("encode")?;
                whole.push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    Ok(vec![
        Row::stats(
            format!("encode a request at step {early}, prefix kept"),
            summarize(&at_early),
            Unit::Us,
        )
        .note("in process: crow's own serialisation, no I/O"),
        Row::stats(
            format!("encode a request at step {n}, prefix kept"),
            summarize(&at_end),
            Unit::Us,
        )
        .note(format!("body {bytes} bytes")),
        Row::stats(
            format!("encode the same request at step {n} whole"),
            summarize(&whole),
            Unit::Us,
        )
        .note("a fresh provider: what every step cost before the prefix was kept"),
    ])
}
