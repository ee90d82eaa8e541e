//! The prefix cache never changes what is sent: over arbitrary edits of a conversation
//! (growth, a rewritten message as a compaction makes, a cut tail, another conversation in
//! between), a provider that reuses its encoded prefix sends the same bytes as a fresh one.

use crow_core::{AssistantPart, ChatRequest, Message, ToolResultMessage};
use proptest::prelude::*;

use crate::http::WireApi;
use crate::{AnthropicProvider, GeminiProvider, OpenAiProvider, ProviderKind, ProviderSettings};

/// A message drawn from a small alphabet, so equal messages (and hash-equal prefixes of
/// different conversations) actually occur.
#[derive(Debug, Clone)]
enum Gen {
    User(String),
    Text(String),
    Call(String, String),
    Result(String, String),
}

#[derive(Debug, Clone)]
enum Edit {
    Push(Gen),
    Replace(usize, Gen),
    Truncate(usize),
    /// Encode another conversation (a reviewer's) in between.
    Other,
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("\"quoted\"\n".to_owned()),
        Just("ünï ✓".to_owned()),
        "[a-z{}:,\"]{0,12}",
    ]
}

fn message() -> impl Strategy<Value = Gen> {
    prop_oneof![
        word().prop_map(Gen::User),
        word().prop_map(Gen::Text),
        (word(), word()).prop_map(|(id, args)| Gen::Call(id, format!("{{\"x\":{args:?}}}"))),
        (word(), word()).prop_map(|(id, out)| Gen::Result(id, out)),
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        6 => message().prop_map(Edit::Push),
        1 => (0usize..16, message()).prop_map(|(i, m)| Edit::Replace(i, m)),
        1 => (0usize..16).prop_map(Edit::Truncate),
        1 => Just(Edit::Other),
    ]
}

fn messages(gens: &[Gen]) -> Vec<Message<'_>> {
    gens.iter()
        .map(|g| match g {
            Gen::User(text) => Message::User {
                text,
                images: vec![],
            },
            Gen::Text(text) => Message::Assistant {
                parts: vec![AssistantPart::Text(text)],
            },
            Gen::Call(id, arguments) => Message::Assistant {
                parts: vec![AssistantPart::ToolCall {
                    id,
                    name: "bash",
                    arguments,
                }],
            },
            Gen::Result(id, content) => Message::ToolResults {
                results: vec![ToolResultMessage {
                    call_id: id,
                    name: "bash",
                    content,
                    is_error: false,
                }],
            },
        })
        .collect()
}

fn request<'a>(system: &'a str, messages: Vec<Message<'a>>) -> ChatRequest<'a> {
    ChatRequest {
        system,
        messages,
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "s",
    }
}

fn check(make: &dyn Fn() -> Box<dyn WireApi>, edits: &[Edit]) -> Result<(), TestCaseError> {
    let cached = make();
    let mut conversation: Vec<Gen> = Vec::new();
    let other = [Gen::User("review".into()), Gen::Text("ok".into())];
    for edit in edits {
        match edit {
            Edit::Push(m) => conversation.push(m.clone()),
            Edit::Replace(i, m) => {
                if let Some(slot) = conversation.get_mut(*i) {
                    *slot = m.clone();
                }
            }
            Edit::Truncate(n) => conversation.truncate(*n),
            Edit::Other => {
                let theirs = request("reviewer", messages(&other));
                prop_assert_eq!(body(&*cached, &theirs)?, body(&*make(), &theirs)?);
            }
        }
        let ours = request("builder", messages(&conversation));
        prop_assert_eq!(body(&*cached, &ours)?, body(&*make(), &ours)?);
    }
    Ok(())
}

fn body(api: &dyn WireApi, request: &ChatRequest<'_>) -> Result<bytes::Bytes, TestCaseError> {
    api.encode(request)
        .map_err(|e| TestCaseError::fail(e.to_string()))
}

proptest! {
    #![proptest_config(crate::proptests::config(64))]

    #[test]
    fn openai_bodies_with_a_reused_prefix_equal_fresh_ones(edits in prop::collection::vec(edit(), 1..40)) {
        let make = || -> Box<dyn WireApi> {
            Box::new(OpenAiProvider::new(&ProviderSettings::new(ProviderKind::OpenAi, "m")).unwrap())
        };
        check(&make, &edits)?;
    }

    #[test]
    fn anthropic_bodies_with_a_reused_prefix_equal_fresh_ones(edits in prop::collection::vec(edit(), 1..40)) {
        let make = || -> Box<dyn WireApi> {
            Box::new(AnthropicProvider::new(&ProviderSettings::new(ProviderKind::Anthropic, "m")).unwrap())
        };
        check(&make, &edits)?;
    }

    #[test]
    fn gemini_bodies_with_a_reused_prefix_equal_fresh_ones(edits in prop::collection::vec(edit(), 1..40)) {
        let make = || -> Box<dyn WireApi> {
            Box::new(GeminiProvider::new(&ProviderSettings::new(ProviderKind::Gemini, "gemini-2.5-flash")).unwrap())
        };
        check(&make, &edits)?;
    }
}
