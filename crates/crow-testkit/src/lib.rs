//! crow-testkit: a scripted mock LLM server speaking OpenAI Chat Completions and Anthropic
//! Messages over real HTTP/1.1 + SSE on loopback.
//!
//! A [`Scenario`] is a list of [`Step`]s served in order, one per request, whichever API path
//! the request uses: a [`Reply`] (thinking, text, tool calls, streamed in small deltas) or a
//! [`Fault`] (an error status, a connection dropped mid-stream, a stalled stream). Every request
//! is recorded ([`RecordedRequest`]) so tests can assert on what the client sent, down to the
//! exact bytes. The crate depends on no other crow crate: crow's provider tests, `crow demo`
//! and the benchmark harness (through the `crow-mock` binary) all use it as an outside fixture.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use crow_testkit::{MockLlm, Reply, Scenario};
//! let mock = MockLlm::start(Scenario::new().reply(Reply::text("hello"))).await?;
//! let url = format!("{}/chat/completions", mock.openai_base_url());
//! # let _ = url;
//! # Ok(()) }
//! ```
//!
//! Also served: OpenAI's Responses API (encrypted reasoning is `responses::encrypted(thinking)`,
//! checkable when it comes back), Google's Gemini API (`…/models/M:streamGenerateContent`, thought
//! signatures `gemini::signature(thinking)`) and Ollama's `/api/chat`, `/api/show` and `/api/tags` over NDJSON
//! (a `missing_models` list answered 404). Faults include status codes with Retry-After, malformed
//! tool arguments and a `context_window` that refuses larger requests with the API's own overflow
//! error. `Quirks` of particular servers (llama-cpp-python, LiteLLM in front of Anthropic) make a
//! scenario refuse as they do; a refusal consumes no step. `MockLlm::connections` counts accepted
//! TCP connections, and each request is stamped on arrival and when the answer was chosen, so
//! benchmarks can time the client without the mock's parsing.
//!
//! Not a model: `oauth::OAuthMcp` is an OAuth-protected MCP server (metadata, registration, an
//! `/authorize` that redirects straight back, PKCE-checked `/token`, streamable HTTP and legacy
//! SSE behind the bearer token) for `crow mcp login`'s tests.

mod anthropic;
pub mod bedrock;
pub mod cloud;
mod frames;
pub mod gemini;
pub mod oauth;
pub mod ollama;
mod openai;
#[cfg(feature = "pty")]
pub mod pty;
pub mod responses;
mod scenario;
mod server;

pub use cloud::{TEST_SERVICE_ACCOUNT_KEY, TokenGrant, authorized_user_json, service_account_json};
pub use scenario::{
    DEFAULT_CHUNK_SIZE, DEFAULT_EXHAUSTED_TEXT, Fault, Quirks, Reply, Scenario, Step, ToolCall,
};
pub use server::{MockLlm, RecordedRequest};

use serde_json::json;

/// The file `crow demo` creates before running [`demo_scenario`]: a script with a typo.
pub const DEMO_FILE: (&str, &str) = ("hello.py", "print(\"Hello, wrld\")\n");

/// A short, realistic coding session for `crow demo`: look around, read the file, fix the
/// typo, run it, report. Paced so the streaming is visible.
pub fn demo_scenario() -> Scenario {
    Scenario::new()
        .chunk_size(6)
        .chunk_delay(15)
        .reply(
            Reply::thinking(
                "The user wants the greeting script fixed. I don't know the layout yet, \
                 so I should list the project before touching anything.",
            )
            .with_text("I'll look at the project first.")
            .with_tool_call("list_directory", json!({"path": "."})),
        )
        .reply(
            Reply::text("There is a hello.py here; let me read it.")
                .with_tool_call("read_file", json!({"path": "hello.py"})),
        )
        .reply(
            Reply::thinking("The string says \"wrld\"; it should say \"world\".")
                .with_text("Found it: the greeting is misspelled. Fixing the typo.")
                .with_tool_call(
                    "edit_file",
                    json!({
                        "path": "hello.py",
                        "old_string": "print(\"Hello, wrld\")",
                        "new_string": "print(\"Hello, world\")",
                    }),
                ),
        )
        .reply(
            Reply::text("Now let me run it to make sure it prints the right thing.")
                .with_tool_call("bash", json!({"command": "python3 hello.py"})),
        )
        .reply(
            Reply::text("It prints \"Hello, world\" now.").with_tool_call(
                "task_complete",
                json!({"summary": "Fixed the typo in hello.py; it now prints Hello, world."}),
            ),
        )
}
