//! `@path` mentions in a prompt: each names a file of the project whose content goes with
//! the message (text files, up to a size), or an image attached as one (PNG, JPEG, GIF,
//! WebP). Paths are resolved from the working directory, then the project root, and must
//! stay inside the project; what cannot be attached is said, not silently dropped.

use std::path::{Path, PathBuf};

/// A mentioned text file is attached up to this size (the model can read the rest).
const MAX_TEXT_BYTES: usize = 100 * 1024;
/// Images larger than this are not attached.
const MAX_IMAGE_BYTES: u64 = 5 * 1024 * 1024;

pub struct Expanded {
    /// The message: the prompt, then each mentioned file's content.
    pub text: String,
    /// Attached images: MIME type and base64 data.
    pub images: Vec<(String, String)>,
    /// What the user should know (a mention not found, a file cut).
    pub notes: Vec<String>,
}

pub fn expand(prompt: &str, root: &Path, cwd: &Path) -> Expanded {
    let mut out = Expanded {
        text: prompt.to_owned(),
        images: Vec::new(),
        notes: Vec::new(),
    };
    let mut seen: Vec<PathBuf> = Vec::new();
    for word in prompt.split_whitespace() {
        let Some(mention) = word.strip_prefix('@') else {
            continue;
        };
        // Punctuation after a mention ("see @a.rs.") is not part of it.
        let mention = mention.trim_end_matches([',', '.', ';', ':', ')', '?', '!']);
        if mention.is_empty() {
            continue;
        }
        let Some(path) = resolve(mention, root, cwd) else {
            // An email address or a handle, not a file: nothing to say.
            if mention.contains('/') || mention.contains('.') {
                out.notes
                    .push(format!("@{mention}: no such file in the project"));
            }
            continue;
        };
        if seen.contains(&path) {
            continue;
        }
        seen.push(path.clone());
        let shown = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        if let Some(mime) = image_type(&path) {
            match std::fs::metadata(&path) {
                Ok(meta) if meta.len() > MAX_IMAGE_BYTES => out
                    .notes
                    .push(format!("@{shown}: image over 5 MiB, not attached")),
                Ok(_) => match std::fs::read(&path) {
                    Ok(bytes) => {
                        use base64::Engine as _;
                        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
                        out.images.push((mime.to_owned(), data));
                    }
                    Err(e) => out.notes.push(format!("@{shown}: cannot read it: {e}")),
                },
                Err(e) => out.notes.push(format!("@{shown}: cannot read it: {e}")),
            }
            continue;
        }
        match std::fs::read(&path) {
            Ok(bytes) if bytes.contains(&0) => out
                .notes
                .push(format!("@{shown}: a binary file, not attached")),
            Ok(bytes) => {
                let mut text = String::from_utf8_lossy(&bytes).into_owned();
                if text.len() > MAX_TEXT_BYTES {
                    let mut end = MAX_TEXT_BYTES;
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.truncate(end);
                    text.push_str(
                        "\n[… cut: the rest of the file is not shown; read it with read_file]",
                    );
                    out.notes
                        .push(format!("@{shown}: over 100 KiB, the start is attached"));
                }
                out.text
                    .push_str(&format!("\n\n<file path=\"{shown}\">\n{text}\n</file>"));
            }
            Err(e) => out.notes.push(format!("@{shown}: cannot read it: {e}")),
        }
    }
    out
}

/// The file a mention names: relative to the working directory, else to the root; only
/// inside the project (symlinks resolved).
fn resolve(mention: &str, root: &Path, cwd: &Path) -> Option<PathBuf> {
    let root_real = root.canonicalize().ok()?;
    [cwd.join(mention), root.join(mention)]
        .into_iter()
        .filter_map(|p| p.canonicalize().ok())
        .find(|p| p.is_file() && p.starts_with(&root_real))
}

fn image_type(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_mentioned_file_goes_with_the_message_and_outside_files_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("p");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.rs"), "fn a() {}\n").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "no").unwrap();
        std::fs::write(root.join("logo.png"), [0x89, b'P', b'N', b'G']).unwrap();
        let got = expand(
            "look at @src/a.rs, and @../secret.txt and @logo.png and mail me@host",
            &root,
            &root,
        );
        assert!(
            got.text.contains("<file path=\"src/a.rs\">\nfn a() {}\n"),
            "{}",
            got.text
        );
        assert!(!got.text.contains("no\n"), "{}", got.text);
        assert_eq!(got.images.len(), 1);
        assert_eq!(got.images[0].0, "image/png");
        assert_eq!(
            got.notes,
            vec!["@../secret.txt: no such file in the project"]
        );
    }
}
