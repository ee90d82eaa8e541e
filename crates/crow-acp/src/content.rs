//! Prompt content → what the model reads: resource links become mentions the model can open
//! with its tools, embedded resources are inlined in `<context>` blocks, images travel beside
//! the text (the runner sends them when the model reads images), audio is named, not sent.

use agent_client_protocol::v1::schema as acp;

/// A `file://` URI as a path; other URIs as they are.
fn uri_label(uri: &str) -> &str {
    uri.strip_prefix("file://").unwrap_or(uri)
}

/// The user's message for the model.
pub fn prompt_text(blocks: &[acp::ContentBlock]) -> String {
    let mut text = String::new();
    let mut context = String::new();
    for block in blocks {
        match block {
            acp::ContentBlock::Text(t) => text.push_str(&t.text),
            acp::ContentBlock::ResourceLink(link) => {
                text.push_str(&format!("@{}", uri_label(&link.uri)));
            }
            acp::ContentBlock::Resource(resource) => match &resource.resource {
                acp::EmbeddedResourceResource::TextResourceContents(r) => {
                    text.push_str(&format!("@{}", uri_label(&r.uri)));
                    context.push_str(&format!(
                        "\n\n<context ref=\"{}\">\n{}\n</context>",
                        r.uri,
                        r.text.trim_end_matches('\n')
                    ));
                }
                acp::EmbeddedResourceResource::BlobResourceContents(r) => {
                    text.push_str(&format!("@{} (binary, not shown)", uri_label(&r.uri)));
                }
                _ => text.push_str("[an attachment crow cannot read]"),
            },
            // Carried by `prompt_images`; the text keeps its place.
            acp::ContentBlock::Image(_) => text.push_str("[image]"),
            acp::ContentBlock::Audio(_) => {
                text.push_str("[an audio clip was attached; crow cannot pass audio to the model]");
            }
            _ => text.push_str("[an attachment crow cannot read]"),
        }
    }
    text.push_str(&context);
    text
}

/// The attached images as `(mime type, base64 data)`, in order.
pub fn prompt_images(blocks: &[acp::ContentBlock]) -> Vec<(String, String)> {
    blocks
        .iter()
        .filter_map(|b| match b {
            acp::ContentBlock::Image(image) => Some((image.mime_type.clone(), image.data.clone())),
            _ => None,
        })
        .collect()
}

/// Text blocks only, for slash-command detection.
pub fn plain_text(blocks: &[acp::ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            acp::ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_mentioned_and_inlined() {
        let blocks = vec![
            acp::ContentBlock::Text(acp::TextContent::new("Explain ")),
            acp::ContentBlock::ResourceLink(acp::ResourceLink::new("a.rs", "file:///p/a.rs")),
            acp::ContentBlock::Text(acp::TextContent::new(" and ")),
            acp::ContentBlock::Resource(acp::EmbeddedResource::new(
                acp::EmbeddedResourceResource::TextResourceContents(
                    acp::TextResourceContents::new("fn b() {}\n", "file:///p/b.rs"),
                ),
            )),
            acp::ContentBlock::Image(acp::ImageContent::new("AAAA", "image/png")),
        ];
        let text = prompt_text(&blocks);
        assert!(
            text.starts_with("Explain @/p/a.rs and @/p/b.rs[image]"),
            "{text}"
        );
        assert!(
            text.ends_with("<context ref=\"file:///p/b.rs\">\nfn b() {}\n</context>"),
            "{text}"
        );
        assert_eq!(
            prompt_images(&blocks),
            [("image/png".to_owned(), "AAAA".to_owned())]
        );
    }
}
