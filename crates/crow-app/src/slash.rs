//! Custom slash commands: Markdown prompt templates users already keep for Claude Code
//! (`.claude/commands/`), opencode (`.opencode/command/`) or crow (`.crow/commands/`, crow's
//! config dir `commands/`). The file name is the command; the body is the prompt, with
//! `$ARGUMENTS` and `$1`..`$9` filled in; optional frontmatter gives a `description`,
//! `argument-hint`, `agent` and `model`. `crow run /name args` and an editor's `/name args`
//! (ACP) send the expanded body to the model.
//!
//! A project's command file is read only inside the project and only as a regular file
//! (`crow_tools::read_confined`); one that links out, or is a FIFO, is a reported problem.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// One command file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomCommand {
    pub name: String,
    pub description: Option<String>,
    pub argument_hint: Option<String>,
    /// The agent or composition to run it with (unless the user picked one).
    pub agent: Option<String>,
    /// `model` or `provider/model` (unless the user picked one).
    pub model: Option<String>,
    pub body: String,
    pub file: PathBuf,
}

/// What was found: commands by name (the highest-precedence folder's), and broken files.
#[derive(Debug, Default)]
pub struct Commands {
    pub commands: BTreeMap<String, CustomCommand>,
    pub problems: Vec<String>,
}

/// A command file larger than this is not a prompt.
const MAX_COMMAND_BYTES: u64 = 1024 * 1024;

/// A folder of command files, and what its files may not lead out of (symlinks resolved):
/// the project for the project's folders, nothing for the user's own.
#[derive(Debug, Clone)]
pub struct Folder {
    pub path: PathBuf,
    pub within: Option<PathBuf>,
}

/// The folders, highest precedence first: the project's, then the user's.
pub fn folders(project_root: &Path, config_dir: Option<&Path>, home: Option<&Path>) -> Vec<Folder> {
    let mut folders: Vec<Folder> = [
        ".crow/commands",
        ".claude/commands",
        ".opencode/command",
        ".opencode/commands",
    ]
    .iter()
    .map(|rel| Folder {
        path: project_root.join(rel),
        within: Some(project_root.to_path_buf()),
    })
    .collect();
    let user = |path: PathBuf| Folder { path, within: None };
    folders.extend(config_dir.map(|d| user(d.join("commands"))));
    folders.extend(home.map(|h| user(h.join(".claude/commands"))));
    folders
}

/// The commands of the project at `project_root` and of the user.
pub fn load(project_root: &Path) -> Commands {
    load_from(&folders(
        project_root,
        crate::config::user_config_dir().as_deref(),
        dirs::home_dir().as_deref(),
    ))
}

pub fn load_from(folders: &[Folder]) -> Commands {
    let mut found = Commands::default();
    for folder in folders {
        let Ok(entries) = std::fs::read_dir(&folder.path) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            // Not `is_file`: a FIFO or a link to a device is reported, not silently passed.
            .filter(|p| p.extension().is_some_and(|e| e == "md") && !p.is_dir())
            .collect();
        files.sort();
        for file in files {
            let Some(name) = file.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
                continue;
            };
            if !valid_name(&name) {
                tracing::debug!(file = %file.display(), "not a command name; skipped");
                continue;
            }
            if let Some(kept) = found.commands.get(&name) {
                tracing::debug!(
                    "command /{name} in {} is shadowed by {}",
                    file.display(),
                    kept.file.display()
                );
                continue;
            }
            let parsed =
                crow_tools::read_confined(&file, folder.within.as_deref(), MAX_COMMAND_BYTES)
                    .map_err(|e| format!("not read: {e}"))
                    .and_then(|bytes| parse(&String::from_utf8_lossy(&bytes), &name, &file));
            match parsed {
                Ok(command) => {
                    found.commands.insert(name, command);
                }
                Err(e) => found.problems.push(format!("{}: {e}", file.display())),
            }
        }
    }
    found
}

/// Letters, digits, `-`, `_`, `.` and `:`; no leading punctuation.
fn valid_name(name: &str) -> bool {
    name.chars().next().is_some_and(char::is_alphanumeric)
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

/// Parses a command file: optional YAML frontmatter, then the prompt.
pub fn parse(text: &str, name: &str, file: &Path) -> Result<CustomCommand, String> {
    let text = text.trim_start_matches('\u{feff}');
    let (front, body) = match text.strip_prefix("---") {
        Some(rest) => {
            let end = rest
                .find("\n---")
                .ok_or("its frontmatter starts with --- but never ends")?;
            let after = &rest[end + 4..];
            (&rest[..end], after.split_once('\n').map_or("", |(_, b)| b))
        }
        None => ("", text),
    };
    let map = if front.trim().is_empty() {
        serde_yaml_ng::Mapping::new()
    } else {
        match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(front) {
            Ok(serde_yaml_ng::Value::Mapping(map)) => map,
            Ok(_) => return Err("its frontmatter is not a mapping of keys to values".into()),
            Err(e) => return Err(format!("its frontmatter is not valid YAML: {e}")),
        }
    };
    let get = |key: &str| map.get(key).and_then(text_of).filter(|v| !v.is_empty());
    let body = body.trim().to_owned();
    if body.is_empty() {
        return Err("the command has no text".into());
    }
    Ok(CustomCommand {
        name: name.to_owned(),
        description: get("description"),
        argument_hint: get("argument-hint").or_else(|| get("argument_hint")),
        agent: get("agent"),
        model: get("model"),
        body,
        file: file.to_path_buf(),
    })
}

/// A value as text; Claude Code's `argument-hint: [file]` reads as a YAML list.
fn text_of(value: &serde_yaml_ng::Value) -> Option<String> {
    match value {
        serde_yaml_ng::Value::String(s) => Some(s.trim().to_owned()),
        serde_yaml_ng::Value::Number(n) => Some(n.to_string()),
        serde_yaml_ng::Value::Bool(b) => Some(b.to_string()),
        serde_yaml_ng::Value::Sequence(items) => Some(
            items
                .iter()
                .filter_map(text_of)
                .map(|i| format!("[{i}]"))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

/// The body with `$ARGUMENTS` (all of `args`) and `$1`..`$9` (shell-style words; the highest
/// one used takes the rest, as opencode does) filled in. A body without placeholders gets the
/// arguments appended (as Claude Code does), so they are never lost.
pub fn expand(body: &str, args: &str) -> String {
    let args = args.trim();
    let words = split_words(args);
    let highest = (1..=9u8)
        .rev()
        .find(|n| body.contains(&format!("${n}")))
        .map_or(0, usize::from);
    let has_all = body.contains("$ARGUMENTS");
    if !has_all && highest == 0 {
        return if args.is_empty() {
            body.to_owned()
        } else {
            format!("{body}\n\nARGUMENTS: {args}")
        };
    }
    let positional = |n: usize| -> String {
        if n == highest && words.len() > n {
            words[n - 1..].join(" ")
        } else {
            words.get(n - 1).cloned().unwrap_or_default()
        }
    };
    let mut out = String::with_capacity(body.len() + args.len());
    let mut rest = body;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix("ARGUMENTS") {
            out.push_str(args);
            rest = tail;
        } else if let Some(d) = after
            .chars()
            .next()
            .and_then(|c| c.to_digit(10))
            .filter(|d| *d > 0)
        {
            out.push_str(&positional(d as usize));
            rest = &after[1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Words split on whitespace; `"..."` and `'...'` keep their spaces.
fn split_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in text.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// `/name args` → `("name", "args")` when `name` could be a command (not a path).
pub fn invocation(prompt: &str) -> Option<(&str, &str)> {
    let rest = prompt.trim_start().strip_prefix('/')?;
    let (name, args) = rest
        .split_once(char::is_whitespace)
        .map_or((rest, ""), |(n, a)| (n, a));
    valid_name(name).then_some((name, args))
}

/// A command invoked by the user, expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invoked {
    pub prompt: String,
    pub agent: Option<String>,
    pub model: Option<String>,
}

/// Expands `prompt` if it invokes a command of `commands`; `None` if it does not look like one.
pub fn expand_invocation(prompt: &str, commands: &Commands) -> Option<Result<Invoked, String>> {
    let (name, args) = invocation(prompt)?;
    Some(match commands.commands.get(name) {
        Some(command) => Ok(Invoked {
            prompt: expand(&command.body, args),
            agent: command.agent.clone(),
            model: command.model.clone(),
        }),
        None => Err(unknown(name, commands)),
    })
}

fn unknown(name: &str, commands: &Commands) -> String {
    if commands.commands.is_empty() {
        format!(
            "unknown command /{name}: there are no custom commands (put NAME.md in .crow/commands/ \
             or .claude/commands/)"
        )
    } else {
        let names: Vec<String> = commands.commands.keys().map(|n| format!("/{n}")).collect();
        format!(
            "unknown command /{name}; the commands are: {}",
            names.join(", ")
        )
    }
}

/// `crow run`'s prompt: a `/name args` of a known command becomes its expanded body; an
/// unknown `/name` is an error, unless it names an existing file (then it is just text).
pub fn for_run(prompt: &str, project_root: &Path) -> Result<Option<Invoked>> {
    let Some((name, _)) = invocation(prompt) else {
        return Ok(None);
    };
    // An absolute path is a prompt; `/compact` and `/context` are the session's own commands.
    if Path::new("/").join(name).exists() || crate::session_cmd::parse(prompt).is_some() {
        return Ok(None);
    }
    let commands = load(project_root);
    for problem in &commands.problems {
        tracing::warn!("skipped command: {problem}");
    }
    match expand_invocation(prompt, &commands) {
        None => Ok(None),
        Some(Ok(invoked)) => Ok(Some(invoked)),
        Some(Err(e)) => bail!("{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_and_positionals_are_filled_in() {
        assert_eq!(
            expand("Review $ARGUMENTS now.", " src/a.rs b.rs "),
            "Review src/a.rs b.rs now."
        );
        assert_eq!(
            expand("Fix issue #$1 with priority $2.", "123 high extra words"),
            "Fix issue #123 with priority high extra words."
        );
        assert_eq!(expand("$1 and $3", "a 'b c' d"), "a and d");
        assert_eq!(expand("$1|$2", "\"one two\""), "one two|");
        assert_eq!(
            expand("Costs $5 or $$ and $x", "a b c d e f"),
            "Costs e f or $$ and $x"
        );
        assert_eq!(
            expand("No placeholders.", "x y"),
            "No placeholders.\n\nARGUMENTS: x y"
        );
        assert_eq!(expand("No placeholders.", "  "), "No placeholders.");
        assert_eq!(expand("$ARGUMENTS", ""), "");
    }

    #[test]
    fn frontmatter_is_optional_and_read_leniently() {
        let file = Path::new("/p/.claude/commands/review.md");
        let c = parse(
            "---\ndescription: Review a file\nargument-hint: [file]\nallowed-tools: Bash(gh pr diff:*), Read\nmodel: anthropic/claude-x\nagent: plan\n---\nReview $ARGUMENTS.\n",
            "review",
            file,
        )
        .unwrap();
        assert_eq!(c.description.as_deref(), Some("Review a file"));
        assert_eq!(c.argument_hint.as_deref(), Some("[file]"));
        assert_eq!(c.model.as_deref(), Some("anthropic/claude-x"));
        assert_eq!(c.agent.as_deref(), Some("plan"));
        assert_eq!(c.body, "Review $ARGUMENTS.");
        let plain = parse("Just text.", "t", file).unwrap();
        assert_eq!(
            (plain.description, plain.body.as_str()),
            (None, "Just text.")
        );
        assert!(
            parse("---\ndescription: x\n", "t", file)
                .unwrap_err()
                .contains("never ends")
        );
        assert!(
            parse("---\ndescription: [x\n---\nb", "t", file)
                .unwrap_err()
                .contains("YAML")
        );
        assert!(
            parse("---\ndescription: x\n---\n  \n", "t", file)
                .unwrap_err()
                .contains("no text")
        );
    }

    #[test]
    fn project_folders_win_and_names_come_from_files() {
        let project = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let write = |path: PathBuf, text: &str| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        let p = project.path();
        write(p.join(".claude/commands/review.md"), "project review");
        write(
            home.path().join(".claude/commands/review.md"),
            "user review",
        );
        write(home.path().join(".claude/commands/deploy.md"), "deploy $1");
        write(p.join(".opencode/command/test.md"), "run tests");
        write(p.join(".crow/commands/broken.md"), "---\nx: [\n---\nbody");
        write(p.join(".crow/commands/notes.txt"), "not markdown");
        let found = load_from(&folders(p, None, Some(home.path())));
        let names: Vec<&str> = found.commands.keys().map(String::as_str).collect();
        assert_eq!(names, ["deploy", "review", "test"]);
        assert_eq!(found.commands["review"].body, "project review");
        assert_eq!(found.problems.len(), 1, "{:?}", found.problems);
        assert!(found.problems[0].contains("broken.md"));
    }

    #[test]
    fn invocations_are_recognised_and_unknown_ones_listed() {
        assert_eq!(
            invocation("/review src/lib.rs"),
            Some(("review", "src/lib.rs"))
        );
        assert_eq!(invocation(" /review"), Some(("review", "")));
        assert_eq!(invocation("/usr/bin/env is broken"), None);
        assert_eq!(invocation("review /x"), None);
        let mut commands = Commands::default();
        commands.commands.insert(
            "review".into(),
            parse("Review $ARGUMENTS", "review", Path::new("r.md")).unwrap(),
        );
        let invoked = expand_invocation("/review a.rs", &commands)
            .unwrap()
            .unwrap();
        assert_eq!(invoked.prompt, "Review a.rs");
        let err = expand_invocation("/nope", &commands).unwrap().unwrap_err();
        assert!(err.contains("/nope") && err.contains("/review"), "{err}");
    }

    #[test]
    fn a_project_command_leading_out_of_the_project_is_a_problem() {
        let outer = tempfile::tempdir().unwrap();
        let p = outer.path().join("project");
        let commands = p.join(".claude/commands");
        std::fs::create_dir_all(&commands).unwrap();
        std::fs::write(outer.path().join("secret"), "password=hunter2").unwrap();
        std::os::unix::fs::symlink("../../../secret", commands.join("up.md")).unwrap();
        std::os::unix::fs::symlink("/proc/self/environ", commands.join("env.md")).unwrap();
        nix::unistd::mkfifo(&commands.join("pipe.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let found = load_from(&folders(&p, None, None));
        assert!(found.commands.is_empty(), "{:?}", found.commands);
        let problems = found.problems.join("\n");
        assert_eq!(found.problems.len(), 3, "{problems}");
        assert!(
            problems.contains("up.md: not read: it leads outside"),
            "{problems}"
        );
        assert!(
            problems.contains("env.md: not read: it leads to /proc/"),
            "{problems}"
        );
        assert!(
            problems.contains("pipe.md: not read: it is a FIFO"),
            "{problems}"
        );
        assert!(!problems.contains("hunter2"), "{problems}");
    }
}
