//! `crow review`: a change (uncommitted work, a branch against its base, a commit, a diff
//! file) put to a reviewer that may read the repository and change nothing, answering with
//! findings and a verdict in a documented JSON shape ([`findings_schema`]).
//!
//! The diff is read with git hardened against the repository it reads: no pager, no external
//! diff or textconv program, no fsmonitor, no signature check — a hostile `.git/config` names
//! no program git runs here.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The diff inlined in the prompt, at most; the rest is named for the reviewer to read.
pub const MAX_INLINE_DIFF: usize = 60 * 1024;

/// Exit status of a review that requests changes (0: it approves).
pub const CHANGES_REQUESTED: u8 = 8;

/// What is reviewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The working tree against HEAD: staged, unstaged and untracked files.
    Uncommitted,
    /// The branch's commits since it left `base` (`git diff base...HEAD`).
    Base(String),
    /// One commit.
    Commit(String),
    /// A diff in a file (a pull request's).
    DiffFile(PathBuf),
}

/// The change as text, and what it touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    pub text: String,
    /// Paths the diff changes (new side).
    pub files: Vec<String>,
    /// For the prompt and the user: "uncommitted changes", "main...HEAD", ...
    pub described: String,
}

/// Reads `change` in the repository at `root`.
pub fn diff(change: &Change, root: &Path) -> Result<Diff> {
    let (text, described) = match change {
        Change::DiffFile(path) => (
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the diff {}", path.display()))?,
            format!("the diff in {}", path.display()),
        ),
        Change::Base(base) => {
            refuse_option(base)?;
            (
                git(root, &["diff", &format!("{base}...HEAD")])?,
                format!("the changes of HEAD since it left {base}"),
            )
        }
        Change::Commit(sha) => {
            refuse_option(sha)?;
            (
                git(
                    root,
                    &["show", "--format=commit %H%nAuthor: %an%n%n%B", sha],
                )?,
                format!("commit {sha}"),
            )
        }
        Change::Uncommitted => (uncommitted(root)?, "the uncommitted changes".to_owned()),
    };
    if text.trim().is_empty() {
        bail!("there is nothing to review: {described} are empty");
    }
    let files = changed_files(&text);
    Ok(Diff {
        text,
        files,
        described,
    })
}

/// A revision that starts with `-` would be read by git as an option.
fn refuse_option(revision: &str) -> Result<()> {
    if revision.starts_with('-') || revision.trim().is_empty() {
        bail!("'{revision}' is not a revision");
    }
    Ok(())
}

/// HEAD against the working tree, and each untracked file as added (a repository without a
/// commit yet: everything as added).
fn uncommitted(root: &Path) -> Result<String> {
    // The empty tree: what a repository without commits is compared with.
    const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
    let base = match git(root, &["rev-parse", "--verify", "--quiet", "HEAD"]) {
        Ok(head) if !head.trim().is_empty() => "HEAD",
        _ => EMPTY_TREE,
    };
    let mut text = git(root, &["diff", base])?;
    let untracked = git(root, &["ls-files", "--others", "--exclude-standard", "-z"])?;
    for file in untracked.split('\0').filter(|f| !f.is_empty()) {
        // `--no-index` exits 1 when the files differ, which they do.
        text.push_str(&git_allowing(
            root,
            &["diff", "--no-index", "--", "/dev/null", file],
            &[1],
        )?);
    }
    Ok(text)
}

fn git(root: &Path, args: &[&str]) -> Result<String> {
    git_allowing(root, args, &[])
}

/// Runs git in `root`, hardened: whatever the repository's config says, git starts no other
/// program (pager, external diff, textconv, fsmonitor, gpg) and prompts for nothing.
fn git_allowing(root: &Path, args: &[&str], ok_codes: &[i32]) -> Result<String> {
    let mut cmd = Command::new("git");
    cmd.current_dir(root)
        .args([
            "--no-pager",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.untrackedCache=false",
            "-c",
            "log.showSignature=false",
            "-c",
            "diff.external=",
            "-c",
            "color.ui=false",
        ])
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_PAGER", "cat")
        .env_remove("GIT_EXTERNAL_DIFF");
    let (command, rest) = args.split_first().context("no git command")?;
    cmd.arg(command);
    if matches!(*command, "diff" | "show") {
        cmd.args(["--no-ext-diff", "--no-textconv", "--no-color"]);
    }
    cmd.args(rest);
    let out = cmd.output().context("cannot run git (is it installed?)")?;
    let code = out.status.code().unwrap_or(-1);
    if !out.status.success() && !ok_codes.contains(&code) {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The new-side paths of a unified diff (`+++ b/path`).
fn changed_files(diff: &str) -> Vec<String> {
    let mut files = Vec::new();
    for line in diff.lines() {
        let Some(path) = line.strip_prefix("+++ ") else {
            continue;
        };
        let path = path.trim();
        let path = path.strip_prefix("b/").unwrap_or(path);
        if path != "/dev/null" && !files.iter().any(|f| f == path) {
            files.push(path.to_owned());
        }
    }
    files
}

/// The JSON Schema of a review's answer.
pub fn findings_schema() -> Value {
    json!({
        "type": "object",
        "required": ["verdict", "summary", "findings"],
        "properties": {
            "verdict": {"enum": ["approve", "request_changes"]},
            "summary": {"type": "string", "description": "What the change does and what you found, in a few sentences (Markdown)"},
            "findings": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["file", "line", "severity", "title", "body"],
                    "properties": {
                        "file": {"type": ["string", "null"], "description": "Path from the repository root; null for a general finding"},
                        "line": {"type": ["integer", "null"], "minimum": 1, "description": "Line in the new version of the file; null for the whole file"},
                        "end_line": {"type": ["integer", "null"], "minimum": 1},
                        "severity": {"enum": ["high", "medium", "low"]},
                        "title": {"type": "string"},
                        "body": {"type": "string", "description": "What is wrong, why, and how to fix it (Markdown)"}
                    }
                }
            }
        }
    })
}

/// The prompt: what to look for, the verdict rule, the focus, the diff (cut at
/// [`MAX_INLINE_DIFF`], the rest of the files named).
pub fn prompt(diff: &Diff, focus: Option<&str>) -> String {
    let mut text = format!(
        "Review {}. You cannot change anything: read the repository with your tools to check \
         the change in context (callers, tests, types, docs). Report real problems — bugs, \
         security issues, broken or untested behaviour, misleading names or docs — each with \
         the file and the line in the new version. Do not report style a formatter would fix. \
         The verdict is request_changes when any finding is high or medium, else approve.\n",
        diff.described
    );
    if let Some(focus) = focus.filter(|f| !f.trim().is_empty()) {
        text.push_str(&format!("Pay particular attention to: {}\n", focus.trim()));
    }
    let (shown, cut) = match diff.text.len() > MAX_INLINE_DIFF {
        true => {
            let mut end = MAX_INLINE_DIFF;
            while !diff.text.is_char_boundary(end) {
                end -= 1;
            }
            let end = diff.text[..end].rfind('\n').map_or(end, |i| i + 1);
            (&diff.text[..end], true)
        }
        false => (diff.text.as_str(), false),
    };
    text.push_str(&format!(
        "Files changed ({}): {}\n<diff>\n{shown}</diff>\n",
        diff.files.len(),
        diff.files.join(", ")
    ));
    if cut {
        let seen = changed_files(shown);
        let rest: Vec<&String> = diff.files.iter().filter(|f| !seen.contains(f)).collect();
        text.push_str(&format!(
            "The diff was cut at {} KiB of {} KiB. Read the files it does not show with your \
             tools: {}\n",
            MAX_INLINE_DIFF / 1024,
            diff.text.len() / 1024,
            rest.iter()
                .map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    text
}

/// A review's answer, as [`findings_schema`] shapes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Review {
    pub verdict: Verdict,
    pub summary: String,
    pub findings: Vec<Finding>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Approve,
    RequestChanges,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub file: Option<String>,
    pub line: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u64>,
    pub severity: String,
    pub title: String,
    pub body: String,
}

impl Review {
    /// The exit status: 0 approves, [`CHANGES_REQUESTED`] does not.
    pub fn exit_code(&self) -> u8 {
        match self.verdict {
            Verdict::Approve => 0,
            Verdict::RequestChanges => CHANGES_REQUESTED,
        }
    }

    /// For a person: the verdict, the summary, each finding at its place.
    pub fn render(&self) -> String {
        let verdict = match self.verdict {
            Verdict::Approve => "approve",
            Verdict::RequestChanges => "changes requested",
        };
        let mut out = format!("verdict: {verdict}\n\n{}\n", self.summary.trim());
        if !self.findings.is_empty() {
            out.push('\n');
        }
        for finding in &self.findings {
            let at = match (&finding.file, finding.line, finding.end_line) {
                (Some(file), Some(line), Some(end)) if end > line => {
                    format!("{file}:{line}-{end}")
                }
                (Some(file), Some(line), _) => format!("{file}:{line}"),
                (Some(file), None, _) => file.clone(),
                (None, _, _) => "(general)".to_owned(),
            };
            out.push_str(&format!(
                "[{}] {at} — {}\n",
                finding.severity,
                finding.title.trim()
            ));
            for line in finding.body.trim().lines() {
                out.push_str(&format!("    {line}\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            let out = Command::new("git")
                .current_dir(dir.path())
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&["init", "-q", "-b", "main"]);
        run(&["config", "user.email", "t@example.com"]);
        run(&["config", "user.name", "t"]);
        std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
        run(&["add", "."]);
        run(&["commit", "-qm", "first"]);
        dir
    }

    #[test]
    fn uncommitted_changes_include_new_files() {
        let dir = repo();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
        std::fs::write(dir.path().join("new.txt"), "fresh\n").unwrap();
        let diff = diff(&Change::Uncommitted, dir.path()).unwrap();
        assert_eq!(diff.files, ["a.txt", "new.txt"]);
        assert!(diff.text.contains("+two"), "{}", diff.text);
        assert!(diff.text.contains("+fresh"), "{}", diff.text);
    }

    #[test]
    fn nothing_to_review_is_said() {
        let dir = repo();
        let error = diff(&Change::Uncommitted, dir.path()).unwrap_err();
        assert!(error.to_string().contains("nothing to review"), "{error}");
    }

    #[test]
    fn a_revision_cannot_smuggle_an_option() {
        let dir = repo();
        let error = diff(&Change::Base("--output=/tmp/x".into()), dir.path()).unwrap_err();
        assert!(error.to_string().contains("is not a revision"), "{error}");
    }

    /// A repository whose config names programs for git to run (an external diff, a textconv
    /// driver, an fsmonitor hook): reading its diff runs none of them.
    #[test]
    fn a_hostile_git_config_runs_nothing() {
        let dir = repo();
        let marker = dir.path().join("ran");
        let evil = format!("sh -c 'touch {}'", marker.display());
        let config = dir.path().join(".git/config");
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str(&format!(
            "[diff]\n\texternal = {evil}\n[diff \"t\"]\n\ttextconv = {evil}\n[core]\n\tfsmonitor = {evil}\n\tpager = {evil}\n"
        ));
        std::fs::write(&config, text).unwrap();
        std::fs::write(dir.path().join(".gitattributes"), "*.txt diff=t\n").unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
        let diff = diff(&Change::Uncommitted, dir.path()).unwrap();
        assert!(diff.text.contains("+two"), "{}", diff.text);
        assert!(!marker.exists(), "git ran a program the repository named");
    }

    #[test]
    fn a_long_diff_is_cut_and_the_rest_named() {
        let mut text = String::new();
        for i in 0..40 {
            text.push_str(&format!("--- a/f{i}.rs\n+++ b/f{i}.rs\n@@ -1 +1 @@\n"));
            text.push_str(&format!("+{}\n", "x".repeat(4000)));
        }
        let diff = Diff {
            files: changed_files(&text),
            text,
            described: "a big change".into(),
        };
        let prompt = prompt(&diff, Some("error handling"));
        assert!(prompt.len() < MAX_INLINE_DIFF + 4096, "{}", prompt.len());
        assert!(prompt.contains("Pay particular attention to: error handling"));
        assert!(prompt.contains("The diff was cut"), "the cut is said");
        assert!(
            prompt.contains("f39.rs"),
            "the files past the cut are named"
        );
    }

    #[test]
    fn the_schema_accepts_what_the_review_type_reads() {
        let answer = json!({
            "verdict": "request_changes",
            "summary": "Adds a parser.",
            "findings": [
                {"file": "src/a.rs", "line": 3, "end_line": 5, "severity": "high", "title": "Overflow", "body": "..."},
                {"file": null, "line": null, "severity": "low", "title": "Docs", "body": "..."}
            ]
        });
        let schema = crate::structured::OutputSchema::new(findings_schema()).unwrap();
        let value = schema.check(&answer.to_string()).unwrap();
        let review: Review = serde_json::from_value(value).unwrap();
        assert_eq!(review.exit_code(), CHANGES_REQUESTED);
        let text = review.render();
        assert!(text.contains("[high] src/a.rs:3-5 — Overflow"), "{text}");
        assert!(text.contains("[low] (general) — Docs"), "{text}");
    }
}
