//! A small model catalog: context windows of well-known models, matched by name prefix.

/// `(prefix, context window in tokens)`. The longest matching prefix wins, so `gpt-4o` beats
/// `gpt-4` and `o1-mini` beats `o1`; order in the table does not matter.
const CONTEXT_WINDOWS: &[(&str, u64)] = &[
    // OpenAI
    ("gpt-5", 400_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-oss", 131_072),
    ("o1", 200_000),
    ("o1-mini", 128_000),
    ("o1-preview", 128_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    // Anthropic: every Claude 3.x and 4.x model has 200k by default (1M is a beta opt-in).
    ("claude", 200_000),
    // Open-weight models as commonly served (vLLM, llama.cpp, Ollama).
    ("llama3", 8_192),
    ("llama-3", 8_192),
    ("llama3.1", 131_072),
    ("llama3.2", 131_072),
    ("llama3.3", 131_072),
    ("llama-3.1", 131_072),
    ("llama-3.2", 131_072),
    ("llama-3.3", 131_072),
    ("llama4", 1_048_576),
    ("qwen2.5-coder", 32_768),
    ("qwen2.5", 32_768),
    ("qwen3-coder", 262_144),
    ("qwen3", 40_960),
    ("deepseek-chat", 128_000),
    ("deepseek-reasoner", 128_000),
    ("deepseek-coder-v2", 163_840),
    ("deepseek-r1", 128_000),
    ("deepseek-v3", 128_000),
    ("gemini-1.5-pro", 2_097_152),
    ("gemini", 1_048_576),
    ("mistral-large", 131_072),
    ("codestral", 262_144),
];

/// Context window of `model` in tokens, if it is a well-known model. Accepts router-style
/// names (`openai/gpt-4o`, `anthropic/claude-sonnet-4`) and Ollama tags (`qwen2.5-coder:7b`);
/// matching ignores case.
pub fn context_window(model: &str) -> Option<u64> {
    let base = base_name(model);
    CONTEXT_WINDOWS
        .iter()
        .filter(|(prefix, _)| base.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|&(_, window)| window)
}

/// Model families known to read images. Unknown models are assumed not to (sending an
/// image to a text-only model fails the whole request); config can say otherwise.
const VISION: &[&str] = &[
    "gpt-4o",
    "gpt-4.1",
    "gpt-4-turbo",
    "gpt-5",
    "o1",
    "o3",
    "o4",
    "chatgpt-4o",
    "claude-3",
    "claude-sonnet-4",
    "claude-opus-4",
    "claude-haiku-4",
    "gemini",
    "llava",
    "bakllava",
    "llama3.2-vision",
    "llama-3.2-11b-vision",
    "llama-3.2-90b-vision",
    "llama4",
    "qwen2.5-vl",
    "qwen2-vl",
    "qwen3-vl",
    "gemma3",
    "pixtral",
    "mistral-small3.1",
    "minicpm-v",
    "moondream",
];

/// Whether `model` is known to read images (same name rules as [`context_window`]).
pub fn accepts_images(model: &str) -> bool {
    let base = base_name(model);
    VISION.iter().any(|prefix| base.starts_with(prefix))
}

/// The model's own name, lower-cased: without a router's `vendor/` (or an ARN's path) and
/// without Bedrock's `region.` and `vendor.` prefixes (`us.anthropic.claude-sonnet-4-5-…` →
/// `claude-sonnet-4-5-…`).
fn base_name(model: &str) -> String {
    const BEDROCK_PREFIXES: &[&str] = &[
        "us.",
        "eu.",
        "apac.",
        "global.",
        "us-gov.",
        "jp.",
        "au.",
        "ca.",
        "anthropic.",
        "meta.",
        "amazon.",
        "mistral.",
        "cohere.",
        "ai21.",
        "deepseek.",
        "qwen.",
        "openai.",
        "writer.",
    ];
    let mut base = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    while let Some(rest) = BEDROCK_PREFIXES
        .iter()
        .find_map(|prefix| base.strip_prefix(prefix))
    {
        base = rest.to_owned();
    }
    base
}

#[cfg(test)]
mod tests {
    use super::context_window;

    #[test]
    fn bedrock_ids_and_profile_arns_name_their_model() {
        for id in [
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "anthropic.claude-3-7-sonnet-20250219-v1:0",
            "arn:aws:bedrock:eu-west-1:1:inference-profile/eu.anthropic.claude-sonnet-4-20250514-v1:0",
        ] {
            assert_eq!(context_window(id), Some(200_000), "{id}");
            assert!(super::accepts_images(id), "{id}");
        }
        // Names with dots of their own are left alone.
        assert_eq!(
            context_window("qwen2.5-coder:7b"),
            context_window("qwen2.5-coder")
        );
    }

    #[test]
    fn longest_prefix_wins() {
        assert_eq!(context_window("gpt-4o-mini"), Some(128_000));
        assert!(
            super::accepts_images("openai/gpt-4o") && super::accepts_images("claude-sonnet-4-5")
        );
        assert!(!super::accepts_images("qwen2.5-coder:7b"));
        assert_eq!(context_window("gpt-4-0613"), Some(8_192));
        assert_eq!(context_window("gpt-4.1-nano"), Some(1_047_576));
        assert_eq!(context_window("gpt-5-mini"), Some(400_000));
        assert_eq!(context_window("o1-mini"), Some(128_000));
        assert_eq!(context_window("o3-mini"), Some(200_000));
        assert_eq!(context_window("claude-sonnet-4-5-20250929"), Some(200_000));
        assert_eq!(context_window("claude-3-5-haiku-latest"), Some(200_000));
        assert_eq!(context_window("llama3.1:8b"), Some(131_072));
        assert_eq!(context_window("llama3:8b"), Some(8_192));
        assert_eq!(context_window("qwen2.5-coder:7b"), Some(32_768));
        assert_eq!(context_window("deepseek-chat"), Some(128_000));
    }

    #[test]
    fn router_prefixes_and_case_are_ignored() {
        assert_eq!(context_window("openai/GPT-4o"), Some(128_000));
        assert_eq!(context_window("anthropic/claude-opus-4.1"), Some(200_000));
        assert_eq!(context_window("some-local-model"), None);
    }
}
