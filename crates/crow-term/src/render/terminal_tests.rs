//! The rendered shape of a fixed event sequence: what a terminal shows (both streams, in
//! order) and what stdout alone carries.

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use crow_core::{AgentEvent, NoticeLevel, ToolKind, ToolMetadata, ToolResult, ToolStatus};
use serde_json::json;

use super::*;

/// One stream of a shared screen: both write into `screen`; `own` keeps this stream alone.
struct Stream {
    screen: Rc<RefCell<Vec<u8>>>,
    own: Vec<u8>,
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.screen.borrow_mut().extend_from_slice(buf);
        self.own.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// (screen, stdout, stderr) after rendering `events`.
fn render(events: &[AgentEvent], show_agent: bool) -> (String, String, String) {
    let screen = Rc::new(RefCell::new(Vec::new()));
    let mut out = Stream {
        screen: Rc::clone(&screen),
        own: Vec::new(),
    };
    let mut err = Stream {
        screen: Rc::clone(&screen),
        own: Vec::new(),
    };
    let mut renderer = Renderer::new(Style::new(false), Style::new(false), show_agent);
    for event in events {
        renderer.event(event, &mut out, &mut err);
    }
    renderer.finish(&mut out, &mut err);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let screen = text(&screen.borrow());
    (screen, text(&out.own), text(&err.own))
}

fn start(id: &str, tool: &str, arguments: serde_json::Value) -> AgentEvent {
    AgentEvent::ToolCallStart {
        agent: "builder".into(),
        call_id: id.into(),
        tool: tool.into(),
        kind: ToolKind::Other,
        arguments,
    }
}

fn end(id: &str, tool: &str, result: ToolResult, duration_ms: u64) -> AgentEvent {
    AgentEvent::ToolCallEnd {
        agent: "builder".into(),
        call_id: id.into(),
        tool: tool.into(),
        result,
        duration_ms,
    }
}

fn exited(status: ToolStatus, output: &str, code: Option<i32>) -> ToolResult {
    ToolResult {
        status,
        output: output.into(),
        metadata: ToolMetadata {
            extra: json!({"exit_code": code, "signal": null, "timed_out": false}),
            ..ToolMetadata::default()
        },
    }
}

fn text(delta: &str) -> AgentEvent {
    AgentEvent::TextDelta {
        agent: "builder".into(),
        delta: delta.into(),
    }
}

fn session() -> Vec<AgentEvent> {
    let numbers: String = (1..=200_000).map(|i| format!("{i}\n")).collect();
    vec![
        AgentEvent::ModelCallStart {
            agent: "builder".into(),
            iteration: 1,
        },
        AgentEvent::ThinkingDelta {
            agent: "builder".into(),
            delta: "Let me look.".into(),
        },
        text("I will check the "),
        text("files."),
        start("1", "read_file", json!({"path": "notes.txt"})),
        end(
            "1",
            "read_file",
            ToolResult::success("     1\tcolour = red\n     2\tsize = 3\n"),
            3,
        ),
        start("2", "bash", json!({"command": "seq 1 200000"})),
        end(
            "2",
            "bash",
            exited(ToolStatus::Success, numbers.trim_end(), Some(0)),
            2450,
        ),
        start("3", "bash", json!({"command": "echo hi; exit 3"})),
        end(
            "3",
            "bash",
            exited(ToolStatus::Error, "hi\n[exit code: 3]", Some(3)),
            12,
        ),
        AgentEvent::Retry {
            agent: "builder".into(),
            attempt: 2,
            delay_ms: 500,
            reason: "server error (502)".into(),
            discard_partial: false,
        },
        // Two calls at once: the second result does not follow its start line.
        start("4", "grep", json!({"pattern": "colour"})),
        start(
            "5",
            "bash",
            json!({"command": "for i in 1 2 3 4 5 6; do echo step $i; done; sleep 60"}),
        ),
        end(
            "4",
            "grep",
            ToolResult::success("notes.txt:1:colour = red"),
            5,
        ),
        end(
            "5",
            "bash",
            exited(
                ToolStatus::Cancelled,
                "cancelled by the user; output so far:\nstep 1\nstep 2\nstep 3\nstep 4\nstep 5\nstep 6",
                None,
            ),
            3100,
        ),
        AgentEvent::Notice {
            agent: "builder".into(),
            level: NoticeLevel::Warning,
            message: "MCP server 'time' exited".into(),
        },
        text("Done: the colour is red."),
        start("6", "task_complete", json!({"summary": "checked"})),
        end("6", "task_complete", ToolResult::success("checked"), 0),
        AgentEvent::TaskComplete {
            agent: "builder".into(),
            summary: "the colour is red".into(),
        },
    ]
}

#[test]
fn a_session_on_the_terminal() {
    let (screen, _, _) = render(&session(), false);
    insta::assert_snapshot!(screen);
}

#[test]
fn stdout_carries_the_answer_alone() {
    let (_, stdout, stderr) = render(&session(), false);
    assert_eq!(
        stdout,
        "I will check the files.\nDone: the colour is red.\nthe colour is red\n"
    );
    assert!(stderr.contains("● bash seq 1 200000"), "{stderr}");
    assert!(stderr.contains("Let me look."), "{stderr}");
}

#[test]
fn a_cancelled_command_shows_the_end_of_its_output_so_far() {
    let (_, _, stderr) = render(
        &[
            start("1", "bash", json!({"command": "make"})),
            end(
                "1",
                "bash",
                exited(
                    ToolStatus::Cancelled,
                    "cancelled by the user; output so far:\ncompiling a\ncompiling b",
                    None,
                ),
                40,
            ),
        ],
        false,
    );
    assert_eq!(
        stderr,
        "● bash make\n  ⊘ cancelled\n    compiling a\n    compiling b\n"
    );
}

#[test]
fn a_reviewers_task_complete_is_an_approval() {
    let events = [
        AgentEvent::TaskComplete {
            agent: "builder".into(),
            summary: "built it".into(),
        },
        AgentEvent::CoagentStart {
            primary: "builder".into(),
            coagent: "reviewer".into(),
        },
        AgentEvent::TaskComplete {
            agent: "reviewer".into(),
            summary: String::new(),
        },
        AgentEvent::CoagentEnd {
            primary: "builder".into(),
            coagent: "reviewer".into(),
        },
    ];
    let (screen, stdout, _) = render(&events, true);
    assert_eq!(
        screen,
        "[builder] ✔ done: built it\n── reviewer reviews ──\n[reviewer] ✔ approved\n"
    );
    assert_eq!(stdout, "built it\n");
}

#[test]
fn an_edits_new_problems_are_a_count_under_its_line() {
    let problem = crow_core::Diagnostic {
        path: "a.py".into(),
        line: 2,
        column: 7,
        severity: crow_core::Severity::Error,
        message: "undefined name 'y'".into(),
        code: None,
        source: Some("pyflakes".into()),
    };
    let result = ToolResult {
        status: ToolStatus::Success,
        output: format!(
            "Edited a.py\n\n{} (1 error):\na.py:2:7 error: undefined name 'y'",
            crow_app::lsp::REPORT_HEADING
        ),
        metadata: ToolMetadata {
            diagnostics: vec![problem.clone(), problem],
            ..ToolMetadata::default()
        },
    };
    let (screen, stdout, _) = render(
        &[
            start("1", "edit_file", json!({"path": "a.py"})),
            end("1", "edit_file", result, 5),
        ],
        false,
    );
    assert!(stdout.is_empty());
    assert!(
        screen.contains("✓ Edited a.py\n    ⚠ 2 new errors\n"),
        "{screen}"
    );
    assert!(!screen.contains("undefined name"), "{screen}");
}
