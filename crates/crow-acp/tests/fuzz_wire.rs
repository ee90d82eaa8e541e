//! Property tests (issue 23) of the ACP line reader through `crow_acp::serve`: arbitrary
//! bytes and malformed JSON-RPC before a real `initialize` get an error reply or nothing,
//! every line out is JSON-RPC, and the connection still answers afterwards (no exit).
//! `PROPTEST_CASES` raises the case count for `./scripts/fuzz`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crow_acp::{
    AgentFactory, Choice, ModeInfo, ModelInfo, RunnerError, SessionRunner, SessionSpec, Stop,
    TurnInput, TurnOutcome,
};
use crow_core::{EventSender, Usage};
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

fn config(cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    config
}

struct Factory;

/// Ends every turn at once.
struct Runner;

#[async_trait]
impl SessionRunner for Runner {
    async fn prompt(
        &mut self,
        _input: TurnInput,
        _events: &EventSender,
        _cancel: CancellationToken,
    ) -> Result<TurnOutcome, RunnerError> {
        Ok(TurnOutcome {
            stop: Stop::EndTurn,
            usage: Usage::default(),
        })
    }
}

#[async_trait]
impl AgentFactory for Factory {
    fn modes(&self) -> Vec<ModeInfo> {
        vec![ModeInfo {
            choice: Choice::new("build", "Build"),
            auto_approve: false,
        }]
    }

    fn models(&self) -> (Vec<ModelInfo>, String) {
        (
            vec![ModelInfo {
                choice: Choice::new("p/m", "m"),
                context_window: None,
            }],
            "p/m".into(),
        )
    }

    fn can_restore(&self) -> bool {
        false
    }

    async fn create(&self, _spec: SessionSpec) -> Result<Box<dyn SessionRunner>, RunnerError> {
        Ok(Box::new(Runner))
    }
}

const PROBE: &str = "probe-after-junk";

/// Sends `junk`, a newline, then `initialize`; closes the input and returns every line the
/// agent wrote and whether `serve` returned (rather than panicked).
fn serve_junk(junk: &[u8]) -> (Vec<String>, bool) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, agent) = tokio::io::duplex(1024 * 1024);
        let (agent_in, agent_out) = tokio::io::split(agent);
        let served = tokio::spawn(crow_acp::serve(Arc::new(Factory), agent_in, agent_out));
        let (mut from_agent, mut to_agent) = tokio::io::split(client);
        let reader = tokio::spawn(async move {
            let mut out = Vec::new();
            from_agent.read_to_end(&mut out).await.map(|_| out)
        });
        let probe = json!({"jsonrpc": "2.0", "id": PROBE, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {}}});
        to_agent.write_all(junk).await.unwrap();
        to_agent
            .write_all(format!("\n{probe}\n").as_bytes())
            .await
            .unwrap();
        to_agent.shutdown().await.unwrap();
        // Bounded so a hang fails the case instead of the whole run; not a speed check.
        let served = tokio::time::timeout(Duration::from_secs(60), served).await;
        let returned = matches!(served, Ok(Ok(_)));
        drop(to_agent);
        let out = tokio::time::timeout(Duration::from_secs(60), reader)
            .await
            .ok()
            .and_then(|r| r.ok())
            .and_then(|r| r.ok())
            .unwrap_or_default();
        let text = String::from_utf8(out).unwrap_or_else(|e| panic!("output not UTF-8: {e}"));
        (text.lines().map(str::to_owned).collect(), returned)
    })
}

/// What every case keeps: each line out is a JSON-RPC message, the probe is answered, and
/// nothing but the probe (and, for generated requests, their replies) got a result.
fn check(lines: &[String], returned: bool, only_errors: bool) -> Result<(), TestCaseError> {
    prop_assert!(returned, "serve did not return: {lines:?}");
    let mut answered = false;
    for line in lines {
        let value: Value =
            serde_json::from_str(line).map_err(|e| TestCaseError::fail(format!("{e}: {line}")))?;
        prop_assert_eq!(&value["jsonrpc"], "2.0", "{}", line);
        prop_assert!(line.len() < 4096, "a reply of {} bytes", line.len());
        if value["id"] == PROBE {
            prop_assert_eq!(&value["result"]["protocolVersion"], 1, "{}", line);
            answered = true;
        } else if value.get("method").is_none() {
            prop_assert!(
                value.get("error").is_some() || !only_errors,
                "a result for junk: {line}"
            );
        }
    }
    prop_assert!(answered, "the probe got no answer: {lines:?}");
    Ok(())
}

/// A JSON-RPC-shaped line with generated parts: methods crow serves and not, ids of every
/// type, params of the wrong shape.
fn rpc_line() -> impl Strategy<Value = String> {
    let method = prop_oneof![
        Just(json!("initialize")),
        Just(json!("session/new")),
        Just(json!("session/prompt")),
        Just(json!("session/cancel")),
        Just(json!("session/load")),
        Just(json!("session/set_mode")),
        Just(json!("$/cancel_request")),
        Just(json!("nope")),
        Just(json!(7)),
        Just(json!(null)),
    ];
    let id = prop_oneof![
        Just(json!(1)),
        Just(json!("x")),
        Just(json!(null)),
        Just(json!(-1)),
        Just(json!(1.5)),
        Just(json!([1])),
        Just(json!({"a": 1})),
        Just(json!(u64::MAX)),
    ];
    let params = prop_oneof![
        Just(json!({})),
        Just(json!([])),
        Just(json!(null)),
        Just(json!("s")),
        Just(json!({"sessionId": "missing", "prompt": [{"type": "text", "text": "hi"}]})),
        Just(json!({"cwd": "relative/dir", "mcpServers": []})),
        Just(json!({"protocolVersion": "one"})),
        Just(json!({"sessionId": 5, "modeId": null})),
    ];
    (method, id, params, any::<bool>(), any::<bool>()).prop_map(|(m, i, p, with_id, v2)| {
        let mut v = json!({"method": m, "params": p});
        if v2 {
            v["jsonrpc"] = json!("2.0");
        }
        if with_id {
            v["id"] = i;
        }
        v.to_string()
    })
}

proptest! {
    #![proptest_config(config(32))]

    #[test]
    fn arbitrary_bytes_get_an_error_or_nothing_and_the_connection_lives(
        junk in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        // A probe id inside the junk would be a request of ours, not junk.
        let (lines, returned) = serve_junk(&junk);
        check(&lines, returned, true)?;
    }

    #[test]
    fn malformed_requests_get_an_error_or_nothing_and_the_connection_lives(
        lines in proptest::collection::vec(
            prop_oneof![
                3 => rpc_line(),
                1 => rpc_line().prop_map(|l| format!("{}\u{ff}", &l[..l.len() / 2])),
                1 => proptest::collection::vec(any::<u8>(), 0..40)
                    .prop_map(|b| String::from_utf8_lossy(&b).replace('\n', " ")),
            ],
            0..8,
        ),
        cut_utf8 in any::<bool>(),
    ) {
        let mut junk = lines.join("\n").into_bytes();
        if cut_utf8 {
            junk.extend_from_slice(b"\n{\"x\":\"\xe2\x82\"}");
        }
        let (out, returned) = serve_junk(&junk);
        // Generated requests may be valid (a second initialize): results are fine there.
        check(&out, returned, false)?;
    }
}
