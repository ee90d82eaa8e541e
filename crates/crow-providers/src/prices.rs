//! What model calls cost: list prices of well-known hosted models in US dollars per million
//! tokens, matched by name prefix like the context windows (the longest prefix wins). Prices
//! change; `[models.prices."NAME"]` in the config overrides or adds one. Local models have
//! none, so their cost is not shown rather than shown as zero.
//!
//! `Price::cost(&Usage)`: input counts the whole prompt, so the cached parts are taken out of it
//! and priced apart (cache read, cache write). `crow stats` and the terminal's status use it.

use crow_core::Usage;
use serde::Deserialize;

/// US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Prompt tokens not read from the cache.
    pub input: f64,
    pub output: f64,
    /// Prompt tokens read from the provider's cache (default: the input price).
    pub cache_read: Option<f64>,
    /// Prompt tokens written to the cache (Anthropic; default: the input price).
    pub cache_write: Option<f64>,
}

impl Price {
    const fn new(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Self {
        Self {
            input,
            output,
            cache_read: Some(cache_read),
            cache_write: Some(cache_write),
        }
    }

    /// The cost of one call (or a sum of calls) in US dollars. `usage.input_tokens` counts
    /// the whole prompt, cached parts included (crow normalises both wire APIs to that).
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage
            .cache_read_tokens
            .saturating_add(usage.cache_write_tokens);
        let fresh = usage.input_tokens.saturating_sub(cached);
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per(fresh, self.input)
            + per(
                usage.cache_read_tokens,
                self.cache_read.unwrap_or(self.input),
            )
            + per(
                usage.cache_write_tokens,
                self.cache_write.unwrap_or(self.input),
            )
            + per(usage.output_tokens, self.output)
    }
}

/// `(prefix, price)`, list prices as published by the providers in 2025.
const PRICES: &[(&str, Price)] = &[
    // OpenAI: cached input is discounted; writing the cache costs nothing extra.
    ("gpt-5", Price::new(1.25, 10.0, 0.125, 1.25)),
    ("gpt-5-mini", Price::new(0.25, 2.0, 0.025, 0.25)),
    ("gpt-5-nano", Price::new(0.05, 0.40, 0.005, 0.05)),
    ("gpt-4.1", Price::new(2.0, 8.0, 0.50, 2.0)),
    ("gpt-4.1-mini", Price::new(0.40, 1.60, 0.10, 0.40)),
    ("gpt-4.1-nano", Price::new(0.10, 0.40, 0.025, 0.10)),
    ("gpt-4o", Price::new(2.50, 10.0, 1.25, 2.50)),
    ("gpt-4o-mini", Price::new(0.15, 0.60, 0.075, 0.15)),
    ("o1", Price::new(15.0, 60.0, 7.50, 15.0)),
    ("o3", Price::new(2.0, 8.0, 0.50, 2.0)),
    ("o3-mini", Price::new(1.10, 4.40, 0.55, 1.10)),
    ("o4-mini", Price::new(1.10, 4.40, 0.275, 1.10)),
    // Anthropic: cache reads at a tenth, 5-minute cache writes at 1.25× the input price.
    ("claude-opus-4", Price::new(15.0, 75.0, 1.50, 18.75)),
    ("claude-opus-4-5", Price::new(5.0, 25.0, 0.50, 6.25)),
    ("claude-sonnet-4", Price::new(3.0, 15.0, 0.30, 3.75)),
    ("claude-3-7-sonnet", Price::new(3.0, 15.0, 0.30, 3.75)),
    ("claude-3-5-sonnet", Price::new(3.0, 15.0, 0.30, 3.75)),
    ("claude-haiku-4", Price::new(1.0, 5.0, 0.10, 1.25)),
    ("claude-3-5-haiku", Price::new(0.80, 4.0, 0.08, 1.0)),
    // Google (prompts up to 200k tokens).
    ("gemini-2.5-pro", Price::new(1.25, 10.0, 0.31, 1.25)),
    ("gemini-2.5-flash", Price::new(0.30, 2.50, 0.075, 0.30)),
    ("gemini-2.5-flash-lite", Price::new(0.10, 0.40, 0.025, 0.10)),
    ("gemini-2.0-flash", Price::new(0.10, 0.40, 0.025, 0.10)),
];

/// The list price of `model`, if it is a well-known hosted model. Router-style names
/// (`openai/gpt-4.1`) and any case are accepted; dated suffixes match their family.
pub fn price(model: &str) -> Option<Price> {
    let base = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    PRICES
        .iter()
        .filter(|(prefix, _)| base.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|&(_, price)| price)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_match_by_the_longest_prefix() {
        assert_eq!(
            price("gpt-4.1-mini-2025-04-14").map(|p| p.input),
            Some(0.40)
        );
        assert_eq!(price("openai/GPT-4.1").map(|p| p.output), Some(8.0));
        assert_eq!(
            price("claude-sonnet-4-5-20250929").map(|p| p.input),
            Some(3.0)
        );
        assert_eq!(price("claude-opus-4-5").map(|p| p.input), Some(5.0));
        assert_eq!(price("claude-opus-4-1").map(|p| p.input), Some(15.0));
        assert_eq!(price("qwen2.5-coder:7b"), None);
        assert_eq!(price("gemini-2.5-flash-lite").map(|p| p.input), Some(0.10));
        assert_eq!(
            price("models/gemini-2.5-flash").map(|p| p.input),
            Some(0.30)
        );
    }

    #[test]
    fn cached_tokens_cost_their_own_price() {
        let p = price("claude-sonnet-4").unwrap();
        // 1M prompt tokens of which 800k read from the cache and 100k written to it.
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            reasoning_tokens: 0,
            cache_read_tokens: 800_000,
            cache_write_tokens: 100_000,
            estimated: false,
        };
        let expected = 0.1 * 3.0 + 0.8 * 0.30 + 0.1 * 3.75 + 0.1 * 15.0;
        assert!(
            (p.cost(&usage) - expected).abs() < 1e-9,
            "{}",
            p.cost(&usage)
        );
        // No cache prices given: cached tokens cost the input price.
        let plain = Price {
            input: 1.0,
            output: 2.0,
            cache_read: None,
            cache_write: None,
        };
        assert!((plain.cost(&usage) - (1.0 + 0.2)).abs() < 1e-9);
    }
}
