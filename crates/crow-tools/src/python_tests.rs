//! Tests of the python tool against a real `python3`: state across calls, reprs, errors,
//! interrupts, a dead interpreter, `!` lines, the output cap.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::test_support::TestEnv;

/// A deadline that fails only a hung test.
const HUNG: Duration = Duration::from_secs(60);

/// Whether a `python3` is there to test with; without one the test is skipped, unless
/// `CROW_REQUIRE_SANDBOX` is set (CI), where a missing interpreter fails it instead.
fn have_python() -> bool {
    if python_available(&EnvPolicy::default()) {
        return true;
    }
    assert!(
        std::env::var_os("CROW_REQUIRE_SANDBOX").is_none(),
        "CROW_REQUIRE_SANDBOX is set and no python3 is on PATH"
    );
    eprintln!("skipped: no python3 on PATH");
    false
}

fn tool() -> PythonTool {
    PythonTool::new(ToolOptions::default())
}

async fn py(tool: &PythonTool, ctx: &ToolContext, input: serde_json::Value) -> ToolResult {
    tokio::time::timeout(HUNG, tool.execute(input, ctx))
        .await
        .expect("the call hung")
}

async fn code(tool: &PythonTool, ctx: &ToolContext, code: &str) -> ToolResult {
    py(tool, ctx, serde_json::json!({ "code": code })).await
}

#[tokio::test]
async fn state_survives_across_calls() {
    if !have_python() {
        return;
    }
    let env = TestEnv::new();
    let tool = tool();
    let first = code(&tool, &env.ctx, "x = 41").await;
    assert_eq!(first.status, ToolStatus::Success, "{}", first.output);
    assert!(first.output.contains(NEW_SESSION), "{}", first.output);
    let second = code(&tool, &env.ctx, "x + 1").await;
    assert_eq!(second.status, ToolStatus::Success, "{}", second.output);
    assert_eq!(second.output, "42");
    // Another session has an interpreter of its own.
    let other = ToolContext {
        session_id: "other".into(),
        ..env.ctx.clone()
    };
    let there = code(&tool, &other, "x").await;
    assert_eq!(there.status, ToolStatus::Error, "{}", there.output);
    assert!(there.output.contains("NameError"), "{}", there.output);
}

#[tokio::test]
async fn prints_and_the_last_expression_repr() {
    if !have_python() {
        return;
    }
    let env = TestEnv::new();
    let tool = tool();
    let out = code(&tool, &env.ctx, "import sys\nprint('hello')\n'a' + 'b'").await;
    assert_eq!(out.status, ToolStatus::Success, "{}", out.output);
    assert!(out.output.ends_with("hello\n'ab'"), "{}", out.output);
    // A statement last prints nothing more; None is not shown.
    let out = code(&tool, &env.ctx, "y = [1, 2]\nNone").await;
    assert!(out.output.ends_with("(no output)"), "{}", out.output);
    // What user code prints cannot end the cell early.
    let out = code(
        &tool,
        &env.ctx,
        "print('\\x1ecrow-python-end-0123456789abcdef:{\"error\": null}')\ny",
    )
    .await;
    assert!(out.output.ends_with("[1, 2]"), "{}", out.output);
}

#[tokio::test]
async fn an_exception_is_an_error_and_state_survives() {
    if !have_python() {
        return;
    }
    let env = TestEnv::new();
    let tool = tool();
    code(&tool, &env.ctx, "kept = 'yes'").await;
    let failed = code(&tool, &env.ctx, "print('before')\n1 / 0").await;
    assert_eq!(failed.status, ToolStatus::Error, "{}", failed.output);
    assert!(failed.output.contains("before"), "{}", failed.output);
    assert!(
        failed.output.contains("Traceback") && failed.output.contains("ZeroDivisionError"),
        "{}",
        failed.output
    );
    // The driver's own frames are not shown.
    assert!(!failed.output.contains("_crow_driver"), "{}", failed.output);
    assert_eq!(failed.metadata.extra["error"], "ZeroDivisionError");
    let syntax = code(&tool, &env.ctx, "def (").await;
    assert!(syntax.output.contains("SyntaxError"), "{}", syntax.output);
    let after = code(&tool, &env.ctx, "kept").await;
    assert_eq!(after.output, "'yes'");
}

#[tokio::test]
async fn a_hung_cell_is_interrupted_and_state_is_kept() {
    if !have_python() {
        return;
    }
    let env = TestEnv::new();
    let tool = tool();
    code(&tool, &env.ctx, "earlier = 7").await;
    let hung = py(
        &tool,
        &env.ctx,
        serde_json::json!({"code": "print('spinning')\nwhile True: pass", "timeout": 1}),
    )
    .await;
    assert_eq!(hung.status, ToolStatus::Error, "{}", hung.output);
    assert!(hung.output.contains("spinning"), "{}", hung.output);
    assert!(hung.output.contains("KeyboardInterrupt"), "{}", hung.output);
    assert!(
        hung.output
            .contains("[timed out after 1 s; the cell was interrupted"),
        "{}",
        hung.output
    );
    assert_eq!(hung.metadata.extra["timed_out"], true);
    let after = code(&tool, &env.ctx, "earlier * 6").await;
    assert_eq!(after.output, "42");
}

#[tokio::test]
async fn an_interpreter_deaf_to_the_interrupt_is_killed_and_restarted() {
    if !have_python() {
        return;
    }
    let env = TestEnv::new();
    let tool = tool();
    code(&tool, &env.ctx, "gone = 1").await;
    let deaf = py(
        &tool,
        &env.ctx,
        serde_json::json!({
            "code": "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass",
            "timeout": 1
        }),
    )
    .await;
    assert_eq!(deaf.status, ToolStatus::Error, "{}", deaf.output);
    assert!(
        deaf.output
            .contains("did not answer the interrupt and was killed"),
        "{}",
        deaf.output
    );
    let next = code(&tool, &env.ctx, "'gone' in globals()").await;
    assert_eq!(next.status, ToolStatus::Success, "{}", next.output);
    assert!(next.output.contains("state was lost"), "{}", next.output);
    assert!(next.output.ends_with("False"), "{}", next.output);
}

#[tokio::test]
async fn a_crashed_interpreter_is_restarted_with_a_note() {
    if !have_python() {
        return;
    }
    let env = TestEnv::new();
    let tool = tool();
    code(&tool, &env.ctx, "lost = 1").await;
    let crash = code(&tool, &env.ctx, "import os; os._exit(3)").await;
    assert_eq!(crash.status, ToolStatus::Error, "{}", crash.output);
    assert!(crash.output.contains("exited"), "{}", crash.output);
    assert!(crash.output.contains("state is lost"), "{}", crash.output);
    let next = code(&tool, &env.ctx, "'lost' in globals(), 2 + 2").await;
    assert_eq!(next.status, ToolStatus::Success, "{}", next.output);
    assert!(next.output.contains("state was lost"), "{}", next.output);
    assert!(next.output.ends_with("(False, 4)"), "{}", next.output);
}

#[tokio::test]
async fn bang_lines_run_in_the_shell() {
    if !have_python() {
        return;
    }
    let env = TestEnv::new();
    let tool = tool();
    let out = code(&tool, &env.ctx, "!echo hi\nprint('after')\n!exit 3").await;
    assert_eq!(out.status, ToolStatus::Success, "{}", out.output);
    assert!(
        out.output.ends_with("hi\nafter\n[exit code: 3]"),
        "{}",
        out.output
    );
    // Indented, inside a block.
    let out = code(&tool, &env.ctx, "for i in range(2):\n    !echo loop").await;
    assert!(out.output.ends_with("loop\nloop"), "{}", out.output);
}

#[tokio::test]
async fn output_over_the_cap_keeps_both_ends() {
    if !have_python() {
        return;
    }
    let env = TestEnv::new();
    let tool = PythonTool::new(ToolOptions {
        max_output_bytes: 1000,
        ..ToolOptions::default()
    });
    let out = code(
        &tool,
        &env.ctx,
        "print('START' + 'x' * 100000 + 'END')\n'done'",
    )
    .await;
    assert_eq!(out.status, ToolStatus::Success, "{}", out.output);
    assert!(out.output.contains("bytes omitted"), "{}", out.output);
    assert!(out.output.contains("START"), "{}", out.output);
    assert!(out.output.ends_with("END\n'done'"), "{}", out.output);
    assert!(out.output.len() < 1300, "{}", out.output.len());
}

#[tokio::test]
async fn cancel_interrupts_the_cell() {
    if !have_python() {
        return;
    }
    let env = TestEnv::new();
    let tool = tool();
    code(&tool, &env.ctx, "kept = 'still'").await;
    let marker = env.root().join("running");
    let cancel = CancellationToken::new();
    let ctx = ToolContext {
        cancel: cancel.clone(),
        ..env.ctx.clone()
    };
    let cell = format!(
        "open({:?}, 'w').close()\nimport time\nwhile True: time.sleep(0.05)",
        marker.display().to_string()
    );
    let call = code(&tool, &ctx, &cell);
    let cancel_when_running = async {
        let deadline = tokio::time::Instant::now() + HUNG;
        while !marker.exists() {
            assert!(tokio::time::Instant::now() < deadline, "the cell never ran");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cancel.cancel();
    };
    let (out, ()) = tokio::join!(call, cancel_when_running);
    assert_eq!(out.status, ToolStatus::Cancelled, "{}", out.output);
    assert!(out.output.contains("KeyboardInterrupt"), "{}", out.output);
    let after = code(&tool, &env.ctx, "kept").await;
    assert_eq!(after.output, "'still'");
}

#[test]
fn offered_only_when_enabled() {
    let off = crate::builtin_tools(&ToolOptions::default());
    assert!(off.get("python").is_none());
    let on = crate::builtin_tools(&ToolOptions {
        python: true,
        ..ToolOptions::default()
    });
    assert_eq!(
        on.get("python").is_some(),
        python_available(&EnvPolicy::default())
    );
    assert!(
        tool().description().len() <= 400,
        "{}",
        tool().description()
    );
}

#[tokio::test]
async fn a_hung_shell_line_is_interrupted_too() {
    if !have_python() {
        return;
    }
    let env = TestEnv::new();
    let tool = tool();
    code(&tool, &env.ctx, "kept = 3").await;
    let hung = py(
        &tool,
        &env.ctx,
        serde_json::json!({"code": "!echo waiting; sleep 600", "timeout": 1}),
    )
    .await;
    assert_eq!(hung.status, ToolStatus::Error, "{}", hung.output);
    assert!(hung.output.contains("waiting"), "{}", hung.output);
    assert!(hung.output.contains("state is kept"), "{}", hung.output);
    // A job a cell leaves behind does not hold the next cell up.
    let background = code(&tool, &env.ctx, "!sleep 600 &\nkept").await;
    assert_eq!(background.output, "3");
}
