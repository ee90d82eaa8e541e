//! Loop detection: the step the loop takes after each batch of tool results.
//!
//! A [`LoopDetector`] watches the tool calls of one turn — tool name, canonicalised arguments,
//! and the result (error or not, and its text) — and recognises three patterns, all governed by
//! one `threshold` (default [`DEFAULT_THRESHOLD`], 3):
//!
//! - **the same call**: the same tool with the same arguments and the same result `threshold`
//!   times in a row;
//! - **a cycle**: a sequence of 2 to 4 calls repeated `threshold` times in a row (A,B,A,B,A,B;
//!   A,B,C,A,B,C,A,B,C). Seed 002's "alternating patterns 6+" is the 2-cycle at the default
//!   (2 × 3 = 6 calls), and its "repeating action cycles" are the longer ones; one setting
//!   instead of three keeps `doom_loop_threshold` a single number to explain;
//! - **the same error**: `threshold` results in a row that are errors with the same text, even
//!   with different arguments or tools (seed 002's "repeating error cycles 3+").
//!
//! A repeat whose *result* changed is not a loop: polling a build until it is done, or reading a
//! file something else is writing, makes progress. A legitimate retry (test, edit, test) breaks
//! every pattern because the edit differs each time.
//!
//! The first detection in a turn steers: a note appended to the last result of the batch tells
//! the model what repeats and to change approach (a note inside the tool result keeps the history
//! valid for every wire format, and it is recorded once, so request prefixes stay byte-stable).
//! Any detection after that stops the turn. A threshold of 0 turns detection off; 1 is read as 2,
//! since a single call cannot repeat.
//!
//! A stop is `TurnStop::DoomLoop` (for the crew, `RunStop::DoomLoop`), with a `DoomLoopDetected`
//! event and system entry. The threshold is `doom_loop_threshold` in config.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::agent::ExecutedToolCall;
use crate::tool::{ToolResult, ToolStatus};

/// Repeats that make a loop unless configured otherwise.
pub const DEFAULT_THRESHOLD: u32 = 3;

/// The longest cycle looked for: longer ones are rare and costly to tell from real work.
const MAX_CYCLE: usize = 4;

/// Error texts quoted in descriptions are cut to this many characters.
const QUOTE_CHARS: usize = 160;

/// A repetition found in a turn's calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// One call, same arguments and result, `times` in a row.
    SameCall { tool: String, times: usize },
    /// The calls of `tools` repeated `times` in a row.
    Cycle { tools: Vec<String>, times: usize },
    /// `times` error results in a row with the same text.
    SameError { error: String, times: usize },
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pattern::SameCall { tool, times } => write!(
                f,
                "{tool} was called {times} times in a row with the same arguments and got the same result"
            ),
            Pattern::Cycle { tools, times } => write!(
                f,
                "the calls {} were repeated {times} times in a row with the same results",
                tools.join(" → ")
            ),
            Pattern::SameError { error, times } => {
                write!(
                    f,
                    "{times} calls in a row failed with the same error: {error}"
                )
            }
        }
    }
}

/// What the loop should do after a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Continue,
    /// First detection: the model was told (the note is in the batch's last result).
    Steered(Pattern),
    /// Detected again after the steer: the turn should stop.
    Stop(Pattern),
}

/// One observed call. `key` identifies call *and* outcome, so a changed result breaks a run.
#[derive(Debug, Clone)]
struct Step {
    tool: String,
    key: u64,
    error: Option<String>,
}

/// Watches one turn's calls. Create one per turn.
#[derive(Debug, Clone)]
pub struct LoopDetector {
    /// 0: off.
    threshold: usize,
    steps: Vec<Step>,
    steered: bool,
}

impl LoopDetector {
    pub fn new(threshold: u32) -> Self {
        let threshold = match threshold {
            0 => 0,
            n => usize::try_from(n).unwrap_or(usize::MAX).max(2),
        };
        Self {
            threshold,
            steps: Vec::new(),
            steered: false,
        }
    }

    /// The loop's entry point after a batch of results, before they enter history: observes
    /// the batch, and on a detection appends the note for the model to the last result.
    pub fn after_batch(&mut self, batch: &mut [ExecutedToolCall]) -> Verdict {
        if self.threshold == 0 {
            return Verdict::Continue;
        }
        // A pattern may end mid-batch (three identical calls in one response, then another).
        let mut found = None;
        for call in batch.iter() {
            self.observe(&call.name, &call.arguments, &call.result);
            found = self.detect().or(found);
        }
        let verdict = self.judge(found);
        let note = match &verdict {
            Verdict::Continue => return verdict,
            Verdict::Steered(pattern) => steering_note(pattern),
            Verdict::Stop(pattern) => format!(
                "[crow: loop detected] {pattern}. You were told to change approach and did not, \
                 so crow stopped this turn. Explain to the user what is blocking you."
            ),
        };
        if let Some(last) = batch.last_mut() {
            last.result.output.push_str("\n\n");
            last.result.output.push_str(&note);
        }
        verdict
    }

    /// Records one call and its result.
    pub fn observe(&mut self, tool: &str, arguments: &serde_json::Value, result: &ToolResult) {
        if self.threshold == 0 {
            return;
        }
        let mut hasher = DefaultHasher::new();
        tool.hash(&mut hasher);
        canonical(arguments).hash(&mut hasher);
        status_tag(result.status).hash(&mut hasher);
        result.output.hash(&mut hasher);
        let error = (result.status != ToolStatus::Success).then(|| result.output.trim().to_owned());
        self.steps.push(Step {
            tool: tool.to_owned(),
            key: hasher.finish(),
            error,
        });
        // Only the most recent calls can form a pattern.
        let keep = self.threshold.saturating_mul(MAX_CYCLE);
        if self.steps.len() > keep {
            self.steps.drain(..self.steps.len() - keep);
        }
    }

    /// Looks for a pattern at the end of what was observed; steers once, then stops.
    pub fn check(&mut self) -> Verdict {
        let found = self.detect();
        self.judge(found)
    }

    fn judge(&mut self, found: Option<Pattern>) -> Verdict {
        let Some(pattern) = found else {
            return Verdict::Continue;
        };
        if self.steered {
            Verdict::Stop(pattern)
        } else {
            self.steered = true;
            Verdict::Steered(pattern)
        }
    }

    fn detect(&self) -> Option<Pattern> {
        let t = self.threshold;
        if t == 0 || self.steps.len() < t {
            return None;
        }
        let last = self.steps.last()?;

        let same = self
            .steps
            .iter()
            .rev()
            .take_while(|s| s.key == last.key)
            .count();
        if same >= t {
            return Some(Pattern::SameCall {
                tool: last.tool.clone(),
                times: same,
            });
        }

        for k in 2..=MAX_CYCLE {
            let span = k.saturating_mul(t);
            if self.steps.len() < span {
                break;
            }
            let window = &self.steps[self.steps.len() - span..];
            let periodic = (k..span).all(|i| window[i].key == window[i - k].key);
            let block = &window[span - k..];
            // A block of one repeated call is the same-call pattern, reported above when long enough.
            let varied = block.iter().any(|s| s.key != block[0].key);
            if periodic && varied {
                return Some(Pattern::Cycle {
                    tools: block.iter().map(|s| s.tool.clone()).collect(),
                    times: t,
                });
            }
        }

        let error = last.error.as_ref()?;
        let failing = self
            .steps
            .iter()
            .rev()
            .take_while(|s| s.error.as_ref() == Some(error))
            .count();
        (failing >= t).then(|| Pattern::SameError {
            error: quote(error),
            times: failing,
        })
    }
}

fn steering_note(pattern: &Pattern) -> String {
    format!(
        "[crow: loop detected] {pattern}. Repeating it will not change the outcome. Change your \
         approach: use different arguments or another tool, re-read the error, or explain what is \
         blocking you. If the pattern continues, crow will stop this turn."
    )
}

fn status_tag(status: ToolStatus) -> u8 {
    match status {
        ToolStatus::Success => 0,
        ToolStatus::Error => 1,
        ToolStatus::Cancelled => 2,
    }
}

/// Arguments as text with object keys sorted at every level, so `{"a":1,"b":2}` and
/// `{"b":2,"a":1}` are the same call whatever map order serde_json was built with.
fn canonical(value: &serde_json::Value) -> String {
    fn sorted(value: &serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => {
                let ordered: BTreeMap<&String, serde_json::Value> =
                    map.iter().map(|(k, v)| (k, sorted(v))).collect();
                serde_json::Value::Object(
                    ordered.into_iter().map(|(k, v)| (k.clone(), v)).collect(),
                )
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.iter().map(sorted).collect())
            }
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// The first line of an error, cut short, for a one-line description.
fn quote(error: &str) -> String {
    let line = error.lines().next().unwrap_or_default();
    let mut out: String = line.chars().take(QUOTE_CHARS).collect();
    if out.len() < line.len() || error.lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ok(output: &str) -> ToolResult {
        ToolResult::success(output)
    }

    fn err(output: &str) -> ToolResult {
        ToolResult::error(output)
    }

    /// Feeds calls one batch each and returns the verdict after each.
    fn run(threshold: u32, calls: &[(&str, serde_json::Value, ToolResult)]) -> Vec<Verdict> {
        let mut detector = LoopDetector::new(threshold);
        calls
            .iter()
            .map(|(tool, args, result)| {
                detector.observe(tool, args, result);
                detector.check()
            })
            .collect()
    }

    fn read(path: &str) -> (&'static str, serde_json::Value, ToolResult) {
        ("read_file", json!({ "path": path }), ok("fn main() {}"))
    }

    fn first_detection(verdicts: &[Verdict]) -> Option<(usize, Pattern)> {
        verdicts.iter().enumerate().find_map(|(i, v)| match v {
            Verdict::Steered(p) | Verdict::Stop(p) => Some((i + 1, p.clone())),
            Verdict::Continue => None,
        })
    }

    #[test]
    fn the_same_call_is_steered_at_the_threshold_and_stopped_after() {
        let verdicts = run(3, &vec![read("a.rs"); 5]);
        assert_eq!(verdicts[0], Verdict::Continue);
        assert_eq!(verdicts[1], Verdict::Continue);
        assert_eq!(
            verdicts[2],
            Verdict::Steered(Pattern::SameCall {
                tool: "read_file".into(),
                times: 3
            })
        );
        assert!(matches!(
            verdicts[3],
            Verdict::Stop(Pattern::SameCall { times: 4, .. })
        ));
    }

    #[test]
    fn argument_key_order_does_not_hide_a_repeat() {
        let a = json!({"path": "a.rs", "offset": 1});
        let b: serde_json::Value = serde_json::from_str(r#"{"offset":1,"path":"a.rs"}"#).unwrap();
        let calls = [
            ("read_file", a.clone(), ok("x")),
            ("read_file", b, ok("x")),
            ("read_file", a, ok("x")),
        ];
        assert!(matches!(
            first_detection(&run(3, &calls)),
            Some((3, Pattern::SameCall { .. }))
        ));
    }

    #[test]
    fn reading_different_files_is_not_a_loop() {
        let calls: Vec<_> = (0..12).map(|i| read(&format!("src/{i}.rs"))).collect();
        assert_eq!(first_detection(&run(3, &calls)), None);
    }

    #[test]
    fn a_retry_after_an_edit_is_not_a_loop() {
        let test = || {
            (
                "bash",
                json!({"command": "cargo test"}),
                err("test failed: x"),
            )
        };
        let edit = |n: u32| {
            (
                "edit_file",
                json!({"path": "a.rs", "old": format!("v{n}"), "new": format!("v{}", n + 1)}),
                ok("edited"),
            )
        };
        let calls = [test(), edit(1), test(), edit(2), test(), edit(3), test()];
        assert_eq!(first_detection(&run(3, &calls)), None);
    }

    #[test]
    fn a_repeat_whose_result_changes_is_progress() {
        let calls: Vec<_> = (0..6)
            .map(|i| {
                (
                    "bash",
                    json!({"command": "gh run view 42"}),
                    ok(&format!("in progress, step {i}")),
                )
            })
            .collect();
        assert_eq!(first_detection(&run(3, &calls)), None);
    }

    #[test]
    fn an_alternating_pair_is_a_cycle_at_six_calls() {
        let a = read("a.rs");
        let b = ("grep", json!({"pattern": "main"}), ok("a.rs:1"));
        let calls = [a.clone(), b.clone(), a.clone(), b.clone(), a.clone(), b];
        let verdicts = run(3, &calls);
        assert_eq!(
            first_detection(&verdicts),
            Some((
                6,
                Pattern::Cycle {
                    tools: vec!["read_file".into(), "grep".into()],
                    times: 3
                }
            ))
        );
        // The next call continues the cycle (in a new phase): stopped.
        let mut detector = LoopDetector::new(3);
        for (tool, args, result) in calls.iter().chain([&a]) {
            detector.observe(tool, args, result);
            let _ = detector.check();
        }
        assert!(matches!(
            detector.check(),
            Verdict::Stop(Pattern::Cycle { .. })
        ));
    }

    #[test]
    fn a_cycle_of_three_and_of_four_is_found() {
        let a = read("a.rs");
        let b = ("grep", json!({"pattern": "x"}), ok("none"));
        let c = ("list_directory", json!({"path": "."}), ok("a.rs"));
        let d = ("glob", json!({"pattern": "*.rs"}), ok("a.rs"));
        let three: Vec<_> = [&a, &b, &c].repeat(3).into_iter().cloned().collect();
        assert!(matches!(
            first_detection(&run(3, &three)),
            Some((9, Pattern::Cycle { ref tools, times: 3 })) if tools.len() == 3
        ));
        let four: Vec<_> = [&a, &b, &c, &d].repeat(3).into_iter().cloned().collect();
        assert!(matches!(
            first_detection(&run(3, &four)),
            Some((12, Pattern::Cycle { ref tools, times: 3 })) if tools.len() == 4
        ));
    }

    #[test]
    fn a_cycle_repeated_fewer_times_than_the_threshold_is_not_a_loop() {
        let a = read("a.rs");
        let b = ("grep", json!({"pattern": "x"}), ok("none"));
        let calls = [a.clone(), b.clone(), a, b];
        assert_eq!(first_detection(&run(3, &calls)), None);
    }

    #[test]
    fn the_same_error_with_different_arguments_is_a_loop() {
        let calls: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|s| {
                (
                    "bash",
                    json!({ "command": format!("npm run {s}") }),
                    err("bash: npm: command not found\nexit status 127"),
                )
            })
            .collect();
        assert_eq!(
            first_detection(&run(3, &calls)),
            Some((
                3,
                Pattern::SameError {
                    error: "bash: npm: command not found…".into(),
                    times: 3
                }
            ))
        );
    }

    #[test]
    fn different_errors_are_not_a_loop() {
        let calls: Vec<_> = (0..6)
            .map(|i| {
                (
                    "read_file",
                    json!({ "path": format!("{i}.rs") }),
                    err(&format!("error: {i}.rs does not exist")),
                )
            })
            .collect();
        assert_eq!(first_detection(&run(3, &calls)), None);
    }

    #[test]
    fn changing_approach_after_the_steer_goes_on() {
        let mut calls = vec![read("a.rs"); 3];
        calls.extend((0..6).map(|i| read(&format!("{i}.rs"))));
        let verdicts = run(3, &calls);
        assert!(matches!(verdicts[2], Verdict::Steered(_)));
        assert!(verdicts[3..].iter().all(|v| *v == Verdict::Continue));
    }

    #[test]
    fn zero_turns_detection_off_and_one_means_two() {
        assert_eq!(first_detection(&run(0, &vec![read("a.rs"); 20])), None);
        assert!(matches!(
            first_detection(&run(1, &vec![read("a.rs"); 3])),
            Some((2, Pattern::SameCall { times: 2, .. }))
        ));
    }

    #[test]
    fn a_higher_threshold_waits_longer() {
        let verdicts = run(5, &vec![read("a.rs"); 5]);
        assert_eq!(first_detection(&verdicts).map(|(at, _)| at), Some(5));
    }

    #[test]
    fn the_note_goes_on_the_last_result_of_the_batch() {
        let call = |id: &str, path: &str| ExecutedToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: json!({ "path": path }),
            result: ok("same"),
            duration_ms: 0,
        };
        let mut detector = LoopDetector::new(3);
        let mut batch = vec![call("1", "a"), call("2", "a"), call("3", "b")];
        assert_eq!(detector.after_batch(&mut batch), Verdict::Continue);
        // The third `b` ends a run mid-batch: steered, the note rides on the batch's last result.
        let mut batch = vec![call("4", "b"), call("5", "b"), call("6", "c")];
        assert!(matches!(
            detector.after_batch(&mut batch),
            Verdict::Steered(Pattern::SameCall { .. })
        ));
        assert_eq!(batch[0].result.output, "same");
        assert!(
            batch[2]
                .result
                .output
                .starts_with("same\n\n[crow: loop detected] read_file was called 3 times"),
            "{}",
            batch[2].result.output
        );
        let mut batch = vec![call("7", "c")];
        assert_eq!(detector.after_batch(&mut batch), Verdict::Continue);
        let mut batch = vec![call("8", "c")];
        assert!(matches!(detector.after_batch(&mut batch), Verdict::Stop(_)));
        assert!(batch[0].result.output.contains("crow stopped this turn"));
    }
}
