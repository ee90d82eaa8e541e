//! Token accounting for one agent's history: how full the context window is before a request.
//!
//! The figure is the last response's real prompt size (its usage) plus an estimate for what
//! changed since, in characters divided by a chars-per-token ratio. The ratio starts at 4 and
//! is calibrated from every real usage report (request characters / prompt tokens), so the
//! estimate follows the model's tokenizer and the wire format's overhead.
//!
//! The window comes from the provider (catalog or config), or from an overflow error's own
//! text ("maximum context length is N tokens"), which is remembered for the session.
//!
//! A response without usage gets an estimate (`last_request_tokens`), flagged `Usage::estimated`
//! and never used to calibrate. `window_from_error` reads the phrasings of OpenAI, vLLM, llama.cpp
//! and Anthropic. The output reserve is `max_tokens`, else a quarter of the window up to 8,192.

use crate::message::{AssistantPart, Message, ToolDefinition};

/// Ratio used until a real usage report arrives.
pub const DEFAULT_CHARS_PER_TOKEN: f64 = 4.0;
/// Largest output reserve when the request sets no `max_tokens`.
const DEFAULT_RESERVE: u64 = 8192;
/// Characters counted per message for roles and framing.
const MESSAGE_OVERHEAD: u64 = 16;

/// Per-history token accounting. Lives in the [`Session`](crate::Session).
#[derive(Debug, Clone)]
pub struct Budget {
    chars_per_token: f64,
    /// Window learned from an overflow error; wins over what the provider says.
    learned_window: Option<u64>,
    /// Characters of the last request built and, once its usage came, its real tokens.
    last_chars: Option<u64>,
    last_tokens: Option<u64>,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            chars_per_token: DEFAULT_CHARS_PER_TOKEN,
            learned_window: None,
            last_chars: None,
            last_tokens: None,
        }
    }
}

impl Budget {
    pub fn chars_per_token(&self) -> f64 {
        self.chars_per_token
    }

    /// The window to plan with: a learned one, else the provider's.
    pub fn window(&self, provider_window: Option<u64>) -> Option<u64> {
        self.learned_window.or(provider_window)
    }

    /// Remembers a window an overflow error named.
    pub fn learn_window(&mut self, window: u64) {
        if window > 0 {
            self.learned_window = Some(window);
        }
    }

    /// A request of `chars` characters is about to be sent.
    pub fn sent(&mut self, chars: u64) {
        self.last_chars = Some(chars);
        self.last_tokens = None;
    }

    /// The last request's usage came back: calibrate the ratio.
    pub fn observe(&mut self, input_tokens: u64) {
        let Some(chars) = self.last_chars else {
            return;
        };
        if input_tokens == 0 {
            return;
        }
        self.last_tokens = Some(input_tokens);
        // Clamped: a provider reporting nonsense must not make the estimate absurd.
        let observed = (chars as f64 / input_tokens as f64).clamp(1.0, 12.0);
        self.chars_per_token = if self.chars_per_token == DEFAULT_CHARS_PER_TOKEN {
            observed
        } else {
            0.5 * self.chars_per_token + 0.5 * observed
        };
    }

    /// Tokens of a request of `chars` characters: the last real figure plus the change since.
    pub fn estimate(&self, chars: u64) -> u64 {
        match (self.last_chars, self.last_tokens) {
            (Some(then), Some(tokens)) => {
                let delta = chars as f64 - then as f64;
                (tokens as f64 + delta / self.chars_per_token)
                    .max(0.0)
                    .ceil() as u64
            }
            _ => self.tokens(chars),
        }
    }

    /// Tokens of the last request sent, estimated: for a server that reports no usage.
    pub fn last_request_tokens(&self) -> Option<u64> {
        self.last_chars.map(|chars| self.estimate(chars))
    }

    /// Characters converted at the calibrated ratio, without the usage anchor.
    pub fn tokens(&self, chars: u64) -> u64 {
        (chars as f64 / self.chars_per_token).ceil() as u64
    }
}

/// Tokens kept free for the answer: the request's `max_tokens`, else a quarter of the window
/// up to `DEFAULT_RESERVE`.
pub fn output_reserve(window: u64, max_tokens: Option<u32>) -> u64 {
    match max_tokens {
        Some(max) => u64::from(max).min(window / 2),
        None => (window / 4).min(DEFAULT_RESERVE),
    }
}

/// One tool result takes at most this fraction (1/n) of the usable window: a bigger one is
/// cut when it enters history, so a single command or file can never fill the context.
pub const RESULT_SHARE: u64 = 4;

/// Most characters one tool result may keep in history for a usable window of
/// `usable_tokens`, at the calibrated ratio.
pub fn result_cap_chars(usable_tokens: u64, chars_per_token: f64) -> usize {
    ((usable_tokens / RESULT_SHARE) as f64 * chars_per_token) as usize
}

/// Characters of the tool schemas a request advertises (agents count them once per tool
/// set, not at every step).
pub fn tools_chars(tools: &[ToolDefinition]) -> u64 {
    tools
        .iter()
        .map(|t| (t.name.len() + t.description.len() + json_len(&t.parameters)) as u64)
        .map(|chars| chars + MESSAGE_OVERHEAD)
        .sum()
}

/// The length of `value` as compact JSON, counted as it is written rather than built.
fn json_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => 0,
    }
}

/// Characters of the messages of a request.
pub fn messages_chars(messages: &[Message<'_>]) -> u64 {
    messages.iter().map(message_chars).sum()
}

pub fn message_chars(message: &Message<'_>) -> u64 {
    MESSAGE_OVERHEAD
        + match message {
            Message::User { text, images } => {
                text.len() as u64 + images.iter().map(|i| i.data.len() as u64).sum::<u64>()
            }
            Message::Assistant { parts } => parts
                .iter()
                .map(|p| match p {
                    AssistantPart::Text(t) | AssistantPart::RedactedThinking(t) => t.len() as u64,
                    AssistantPart::Thinking { text, signature } => {
                        (text.len() + signature.map_or(0, str::len)) as u64
                    }
                    AssistantPart::ToolCall {
                        id,
                        name,
                        arguments,
                    } => (id.len() + name.len() + arguments.len()) as u64 + MESSAGE_OVERHEAD,
                })
                .sum(),
            Message::ToolResults { results } => results
                .iter()
                .map(|r| (r.call_id.len() + r.content.len()) as u64 + MESSAGE_OVERHEAD)
                .sum(),
        }
}

/// The window an overflow error names, in the phrasings of OpenAI, vLLM, llama.cpp, Ollama
/// and Anthropic. `None` when the text names no plausible window.
pub fn window_from_error(message: &str) -> Option<u64> {
    let lower = message.to_ascii_lowercase();
    // (phrase before the number, phrase after it): the number between is the window.
    const AFTER: &[&str] = &[
        "maximum context length is ",           // OpenAI, vLLM
        "context length of ",                   // vLLM: "model's context length of 8192"
        "context window of ",                   // assorted
        "exceeds the available context size (", // llama.cpp: "... context size (4096 tokens)"
        "context size of ",
        "maximum model length of ", // newer vLLM: "... longer than the maximum model length of 32768"
        "n_ctx: ",                  // llama.cpp server error fields
        "n_ctx = ",
        "> ", // Anthropic: "210000 tokens > 200000 maximum"
        "maximum of ",
        "limit of ",
    ];
    for phrase in AFTER {
        let mut from = 0;
        while let Some(i) = lower[from..].find(phrase) {
            let start = from + i + phrase.len();
            if let Some(n) = leading_number(&lower[start..])
                && n >= 256
            {
                // "> N maximum" (Anthropic) must be followed by "maximum".
                if *phrase != "> " || lower[start..].contains("maximum") {
                    return Some(n);
                }
            }
            from = start;
        }
    }
    None
}

/// The integer at the start of `text` (digits with optional `,` or `_` separators).
fn leading_number(text: &str) -> Option<u64> {
    let digits: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '_')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_schemas_count_as_their_compact_json() {
        let tools = vec![
            ToolDefinition {
                name: "bash".into(),
                description: "Run a command".into(),
                parameters: serde_json::json!({
                    "type": "object",
                    "properties": {"command": {"type": "string", "description": "« quoted \"text\" »\n"}},
                    "required": ["command"],
                }),
            },
            ToolDefinition {
                name: "none".into(),
                description: String::new(),
                parameters: serde_json::Value::Null,
            },
        ];
        let built: u64 = tools
            .iter()
            .map(|t| {
                (t.name.len() + t.description.len() + t.parameters.to_string().len()) as u64
                    + MESSAGE_OVERHEAD
            })
            .sum();
        assert_eq!(tools_chars(&tools), built);
        assert_eq!(tools_chars(&[]), 0);
    }

    #[test]
    fn estimate_starts_at_four_chars_per_token() {
        let b = Budget::default();
        assert_eq!(b.estimate(4000), 1000);
    }

    #[test]
    fn real_usage_anchors_the_estimate_and_calibrates_the_ratio() {
        let mut b = Budget::default();
        b.sent(3000);
        b.observe(1000); // this tokenizer: 3 chars per token
        assert!((b.chars_per_token() - 3.0).abs() < 1e-9);
        // 300 more characters since: 100 more tokens on top of the real 1000.
        assert_eq!(b.estimate(3300), 1100);
        // A shorter request after a compaction goes down from the anchor.
        assert_eq!(b.estimate(1500), 500);
        // Later reports are smoothed, not jumped to.
        b.sent(4000);
        b.observe(1000);
        assert!((b.chars_per_token() - 3.5).abs() < 1e-9);
    }

    #[test]
    fn nonsense_usage_is_clamped() {
        let mut b = Budget::default();
        b.sent(10);
        b.observe(1_000_000);
        assert!(b.chars_per_token() >= 1.0);
        b.observe(0); // ignored
        assert!(b.chars_per_token() >= 1.0);
    }

    #[test]
    fn learned_window_wins() {
        let mut b = Budget::default();
        assert_eq!(b.window(Some(128_000)), Some(128_000));
        b.learn_window(8192);
        assert_eq!(b.window(Some(128_000)), Some(8192));
        assert_eq!(b.window(None), Some(8192));
    }

    #[test]
    fn a_result_takes_at_most_a_quarter_of_the_usable_window() {
        // 8k window, 2k kept for the answer: a result keeps about 1,536 tokens.
        assert_eq!(result_cap_chars(6144, 4.0), 6144);
        assert_eq!(result_cap_chars(6144, 3.0), 4608);
    }

    #[test]
    fn reserve_is_max_tokens_or_a_default() {
        assert_eq!(output_reserve(16_000, None), 4000);
        assert_eq!(output_reserve(200_000, None), 8192);
        assert_eq!(output_reserve(16_000, Some(1000)), 1000);
        assert_eq!(output_reserve(16_000, Some(64_000)), 8000);
    }

    #[test]
    fn windows_are_read_from_overflow_errors() {
        let cases = [
            (
                "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
                Some(8192),
            ),
            (
                "request rejected (HTTP 400): This model's maximum context length is 16,384 tokens",
                Some(16_384),
            ),
            (
                "The decoder prompt (length 40000) is longer than the maximum model length of 32768.",
                Some(32_768),
            ),
            (
                "This model's context length of 32768 is exceeded by your request",
                Some(32_768),
            ),
            (
                "the request exceeds the available context size (4096 tokens), try increasing it",
                Some(4096),
            ),
            (
                "prompt is too long: 210000 tokens > 200000 maximum",
                Some(200_000),
            ),
            ("input length and `max_tokens` exceed context limit", None),
            ("rate limited", None),
        ];
        for (text, want) in cases {
            assert_eq!(window_from_error(text), want, "{text}");
        }
    }
}
