use std::path::PathBuf;

use crow_core::{AssistantPart, ToolKind};

use super::connection::permission_answer;
use super::mapping::*;
use super::*;

fn user(text: &str) -> Message<'_> {
    Message::User {
        text,
        images: Vec::new(),
    }
}

fn request<'a>(messages: Vec<Message<'a>>) -> ChatRequest<'a> {
    ChatRequest {
        system: "",
        messages,
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "s",
    }
}

#[test]
fn a_prompt_is_the_users_words_since_the_last_answer() {
    let r = request(vec![
        user("first"),
        Message::Assistant {
            parts: vec![AssistantPart::Text("done")],
        },
        user("second"),
        user("and a steer"),
    ]);
    assert_eq!(prompt_text(&r, false), "second\n\nand a steer");
}

#[test]
fn the_first_prompt_of_a_resumed_session_carries_the_earlier_conversation() {
    let r = request(vec![
        user("fix the bug"),
        Message::Assistant {
            parts: vec![
                AssistantPart::Text("looking"),
                AssistantPart::ToolCall {
                    id: "c",
                    name: "read_file",
                    arguments: "{\"path\":\"a.rs\"}",
                },
            ],
        },
        Message::ToolResults {
            results: vec![crow_core::ToolResultMessage {
                call_id: "c",
                name: "read_file",
                content: "fn main() {}",
                is_error: false,
            }],
        },
        user("go on"),
    ]);
    let text = prompt_text(&r, true);
    assert!(text.starts_with("<earlier_conversation>\nuser: fix the bug\nassistant: looking\n"));
    assert!(text.contains("read_file returned: fn main() {}"));
    assert!(text.ends_with("go on"));
    // A new session's first prompt has no earlier conversation.
    assert_eq!(prompt_text(&request(vec![user("hi")]), true), "hi");
}

#[test]
fn a_long_transcript_keeps_its_end() {
    let long = "x".repeat(TRANSCRIPT_MAX_BYTES * 2);
    let text = transcript(&[user(&long), user("the end")]);
    assert!(text.starts_with("[… earlier part cut]"));
    assert!(text.ends_with("user: the end"));
    assert!(text.len() < TRANSCRIPT_MAX_BYTES + 100);
}

fn option(id: &str, kind: acp::PermissionOptionKind) -> acp::PermissionOption {
    acp::PermissionOption::new(id.to_owned(), id.to_owned(), kind)
}

#[test]
fn a_decision_picks_the_matching_option() {
    let options = vec![
        option("yes-always", acp::PermissionOptionKind::AllowAlways),
        option("yes", acp::PermissionOptionKind::AllowOnce),
        option("no", acp::PermissionOptionKind::RejectOnce),
    ];
    let selected = |d: &PermissionDecision| {
        serde_json::to_value(permission_answer(&options, d)).unwrap_or_default()["outcome"]
            ["optionId"]
            .clone()
    };
    assert_eq!(selected(&PermissionDecision::Allow), "yes");
    assert_eq!(
        selected(&PermissionDecision::Deny { reason: "r".into() }),
        "no"
    );
    // Nothing to reject with: the question is cancelled, never allowed.
    let only_allow = vec![option("yes", acp::PermissionOptionKind::AllowOnce)];
    let outcome = serde_json::to_value(permission_answer(
        &only_allow,
        &PermissionDecision::Deny { reason: "r".into() },
    ))
    .unwrap_or_default();
    assert_eq!(outcome["outcome"]["outcome"], "cancelled");
}

#[test]
fn updates_become_text_thinking_and_the_agents_own_tools() {
    let chunk = |t: &str| acp::ContentChunk::new(acp::ContentBlock::Text(acp::TextContent::new(t)));
    assert_eq!(
        update_deltas(acp::SessionUpdate::AgentMessageChunk(chunk("hi"))),
        vec![StreamDelta::Text { text: "hi".into() }]
    );
    assert_eq!(
        update_deltas(acp::SessionUpdate::AgentThoughtChunk(chunk("hm"))),
        vec![StreamDelta::Thinking { text: "hm".into() }]
    );
    let call = acp::ToolCall::new("t1".to_owned(), "Read a.rs")
        .kind(acp::ToolKind::Read)
        .status(acp::ToolCallStatus::Completed)
        .raw_input(serde_json::json!({"path": "a.rs"}))
        .content(vec![acp::ToolCallContent::Content(acp::Content::new(
            acp::ContentBlock::Text(acp::TextContent::new("fn main() {}")),
        ))]);
    assert_eq!(
        update_deltas(acp::SessionUpdate::ToolCall(call)),
        vec![
            StreamDelta::ExternalToolStart {
                id: "t1".into(),
                title: "Read a.rs".into(),
                kind: ToolKind::Read,
                arguments: serde_json::json!({"path": "a.rs"}),
            },
            StreamDelta::ExternalToolEnd {
                id: "t1".into(),
                success: true,
                output: "fn main() {}".into(),
            }
        ]
    );
}

#[test]
fn a_bash_result_becomes_a_terminals_output_and_exit_status() {
    let ran = ran_of("hello\n[exit code: 3]", true);
    assert_eq!(ran.output, "hello");
    assert_eq!(ran.exit_code, Some(3));
    let ran = ran_of("(no output)", false);
    assert_eq!((ran.output.as_str(), ran.exit_code), ("", Some(0)));
    let ran = ran_of("partial\n[killed by signal SIGKILL]", true);
    assert_eq!(ran.signal.as_deref(), Some("SIGKILL"));
    assert_eq!(ran.exit_code, None);
    // crow refused the command: the reason is the output, and it failed.
    let ran = ran_of("permission denied: rule deny bash(rm *)", true);
    assert_eq!(ran.exit_code, Some(1));
    assert!(ran.output.contains("bash(rm *)"));
}

#[test]
fn a_terminals_command_line_is_quoted_for_the_shell() {
    let create = |command: &str, args: &[&str]| {
        acp::CreateTerminalRequest::new("s".to_owned(), command)
            .args(args.iter().map(|a| (*a).to_owned()).collect())
    };
    assert_eq!(
        command_line(&create("bash", &["-c", "ls | wc -l"])),
        "ls | wc -l"
    );
    assert_eq!(
        command_line(&create("grep", &["-r", "it's here", "src/"])),
        "grep -r 'it'\\''s here' src/"
    );
    assert_eq!(
        command_line(&create("make", &[]).cwd(PathBuf::from("/p/a b"))),
        "cd '/p/a b' && make"
    );
    // Quoting is what the shell reads back: no word runs as code.
    assert_eq!(quote("$(touch x)"), "'$(touch x)'");
    assert_eq!(quote(""), "''");
}
