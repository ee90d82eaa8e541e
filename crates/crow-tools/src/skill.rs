//! Agent Skills (the open SKILL.md format, agentskills.io): a folder named like the skill
//! holding `SKILL.md` — YAML frontmatter (`name`, `description`, optional `license`,
//! `compatibility`, `metadata`, `allowed-tools`), instructions as the body — plus any
//! resources (scripts, references, assets).
//!
//! Progressive disclosure: only names and descriptions go into the system prompt
//! ([`index`]); the `skill` tool ([`SkillTool`]) returns a skill's instructions and the list
//! of its files when the model decides it needs it, and one resource file on request. The
//! tool reads resources itself so skill folders outside the project (the user's own) stay
//! readable while every other tool keeps its project-root confinement.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use crow_core::{Tool, ToolContext, ToolKind, ToolResult};
use serde::Deserialize;

use crate::args::parse;

/// The spec's limits.
const MAX_NAME_CHARS: usize = 64;
const MAX_DESCRIPTION_CHARS: usize = 1024;
const MAX_COMPATIBILITY_CHARS: usize = 500;
/// A SKILL.md larger than this is not instructions.
const MAX_SKILL_MD_BYTES: u64 = 1024 * 1024;
/// Files listed when a skill is loaded; a skill with more says how many were left out.
const MAX_LISTED_FILES: usize = 100;
/// How deep the listing looks below the skill folder.
const MAX_LIST_DEPTH: usize = 4;
/// An index entry's description is cut here (the whole one is in `crow skills show`).
const MAX_INDEX_DESCRIPTION: usize = 300;

/// Where a skills folder is: the project's own, or the user's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SkillScope {
    Project,
    User,
}

impl fmt::Display for SkillScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkillScope::Project => "project",
            SkillScope::User => "user",
        })
    }
}

/// A folder whose sub-folders are skills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillRoot {
    pub path: PathBuf,
    pub scope: SkillScope,
    /// What its files may not lead out of (symlinks resolved): the project, for a project's
    /// folder; `None` for the user's own, where linking skills in from anywhere is how
    /// people install them.
    pub within: Option<PathBuf>,
}

/// The folders crow looks in, highest precedence first: the project's `.crow/skills`,
/// `.agents/skills`, `.claude/skills`, then crow's config dir `skills/`, `~/.agents/skills`,
/// `~/.claude/skills`. A project skill wins over a user skill of the same name.
pub fn standard_roots(
    project_root: &Path,
    config_dir: Option<&Path>,
    home: Option<&Path>,
) -> Vec<SkillRoot> {
    let mut roots: Vec<SkillRoot> = [".crow", ".agents", ".claude"]
        .iter()
        .map(|dir| SkillRoot {
            path: project_root.join(dir).join("skills"),
            scope: SkillScope::Project,
            within: Some(project_root.to_path_buf()),
        })
        .collect();
    if let Some(dir) = config_dir {
        roots.push(SkillRoot {
            path: dir.join("skills"),
            scope: SkillScope::User,
            within: None,
        });
    }
    if let Some(home) = home {
        for dir in [".agents", ".claude"] {
            roots.push(SkillRoot {
                path: home.join(dir).join("skills"),
                scope: SkillScope::User,
                within: None,
            });
        }
    }
    // The same folder twice (a project inside HOME's own dot-folders) is read once.
    let mut seen = Vec::new();
    roots.retain(|r| {
        let key = std::fs::canonicalize(&r.path).unwrap_or_else(|_| r.path.clone());
        if seen.contains(&key) {
            false
        } else {
            seen.push(key);
            true
        }
    });
    roots
}

/// Why a skill could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
    #[error("it was not read: {0}")]
    Refused(crate::path::ConfinedReadError),
    #[error("it is over 1 MiB")]
    TooLarge,
    #[error("it must start with a YAML frontmatter block between --- lines")]
    NoFrontmatter,
    #[error("its frontmatter starts with --- but never ends")]
    Unclosed,
    #[error("its frontmatter is not valid YAML: {0}")]
    Yaml(String),
    #[error("its frontmatter is not a mapping of keys to values")]
    NotMapping,
    #[error("`{0}` is missing")]
    Missing(&'static str),
    #[error("`{0}` must be a string")]
    NotString(&'static str),
    #[error("name '{name}' is invalid: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("name '{name}' must equal its folder's name '{dir}'")]
    NameMismatch { name: String, dir: String },
    #[error("description must be 1 to 1024 characters (it has {0})")]
    Description(usize),
    #[error("compatibility must be at most 500 characters (it has {0})")]
    Compatibility(usize),
    #[error("no skill named '{0}'")]
    Unknown(String),
}

/// A skill that failed to load: its file and why.
#[derive(Debug)]
pub struct SkillProblem {
    pub path: PathBuf,
    pub error: SkillError,
}

impl fmt::Display for SkillProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.error)
    }
}

/// One skill's frontmatter and where it lives. The body is read when the skill is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    pub compatibility: Option<String>,
    /// Experimental in the spec; shown, not enforced (it grants nothing in crow).
    pub allowed_tools: Vec<String>,
    pub metadata: BTreeMap<String, String>,
    /// The skill's folder.
    pub dir: PathBuf,
    /// Its SKILL.md.
    pub file: PathBuf,
    /// The skills folder it was found in.
    pub root: SkillRoot,
}

impl Skill {
    /// The instructions, read from SKILL.md now (the file may have changed since discovery).
    pub fn body(&self) -> Result<String, SkillError> {
        let text = read_limited(&self.file, self.root.within.as_deref())?;
        let (_, body) = split_frontmatter(&text)?;
        Ok(body.trim().to_owned())
    }

    /// The skill's other files, relative to its folder, sorted; and how many more there were.
    pub fn files(&self) -> (Vec<String>, usize) {
        let mut files = Vec::new();
        list_files(&self.dir, &self.dir, 0, &mut files);
        files.retain(|f| f != "SKILL.md" && f != "skill.md");
        files.sort();
        let more = files.len().saturating_sub(MAX_LISTED_FILES);
        files.truncate(MAX_LISTED_FILES);
        (files, more)
    }

    /// One file of the skill by its path relative to the skill folder; nothing outside it.
    pub fn resource(&self, rel: &str, max_bytes: u64) -> Result<String, String> {
        let rel_path = Path::new(rel);
        if rel_path
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(format!(
                "'{rel}' must be a path inside the skill's folder, relative to it"
            ));
        }
        let dir = std::fs::canonicalize(&self.dir)
            .map_err(|e| format!("cannot open the skill's folder: {e}"))?;
        // A symlink inside the skill may not lead out of it, nor to a FIFO or /proc.
        let bytes = crate::path::read_confined(&dir.join(rel_path), Some(&dir), max_bytes)
            .map_err(|e| match e {
                crate::path::ConfinedReadError::TooLarge { len, max } => format!(
                    "'{rel}' is {len} bytes, over the {max}-byte limit; run or search it with other tools at {}",
                    dir.join(rel_path).display()
                ),
                crate::path::ConfinedReadError::Outside { .. } => {
                    format!("'{rel}' leads outside the skill's folder")
                }
                e => format!("cannot read '{rel}': {e}"),
            })?;
        let path = dir.join(rel_path);
        String::from_utf8(bytes).map_err(|_| {
            format!(
                "'{rel}' is not text; it is at {} for other tools",
                path.display()
            )
        })
    }
}

/// What discovery found: skills sorted by name (one per name, the highest-precedence
/// folder's), and the ones that failed to load.
#[derive(Debug, Default)]
pub struct Skills {
    pub skills: Vec<Skill>,
    pub problems: Vec<SkillProblem>,
}

impl Skills {
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }
}

/// Reads every skill in `roots` (highest precedence first). A later skill whose name is
/// taken is shadowed (said at debug level); a broken one becomes a problem and the rest load.
pub fn discover(roots: &[SkillRoot]) -> Skills {
    let mut found = Skills::default();
    for root in roots {
        let Ok(entries) = std::fs::read_dir(&root.path) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            // Follows symlinks: linking a skill in is how people install them.
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        for dir in dirs {
            let Some(file) = ["SKILL.md", "skill.md"]
                .iter()
                .map(|n| dir.join(n))
                .find(|p| p.is_file())
            else {
                tracing::debug!(dir = %dir.display(), "no SKILL.md: not a skill");
                continue;
            };
            match load_skill(&dir, &file, root) {
                Ok(skill) => match found.get(&skill.name) {
                    Some(kept) => tracing::debug!(
                        "skill '{}' in {} is shadowed by the one in {}",
                        skill.name,
                        skill.dir.display(),
                        kept.dir.display()
                    ),
                    None => found.skills.push(skill),
                },
                Err(error) => found.problems.push(SkillProblem { path: file, error }),
            }
        }
    }
    found.skills.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// Reads and validates one skill folder.
pub fn load_skill(dir: &Path, file: &Path, root: &SkillRoot) -> Result<Skill, SkillError> {
    let text = read_limited(file, root.within.as_deref())?;
    let front = parse_frontmatter(&text)?;
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    validate(&front, &dir_name)?;
    Ok(Skill {
        name: front.name,
        description: front.description,
        license: front.license,
        compatibility: front.compatibility,
        allowed_tools: front.allowed_tools,
        metadata: front.metadata,
        dir: dir.to_path_buf(),
        file: file.to_path_buf(),
        root: root.clone(),
    })
}

/// A SKILL.md, through the one confinement rule for files a project names.
fn read_limited(path: &Path, within: Option<&Path>) -> Result<String, SkillError> {
    use crate::path::ConfinedReadError as E;
    match crate::path::read_confined(path, within, MAX_SKILL_MD_BYTES) {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(E::TooLarge { .. }) => Err(SkillError::TooLarge),
        Err(E::Io(e)) => Err(SkillError::Io(e)),
        Err(e) => Err(SkillError::Refused(e)),
    }
}

/// The frontmatter fields crow reads; other keys (client extensions) are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontmatter {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    pub compatibility: Option<String>,
    pub allowed_tools: Vec<String>,
    pub metadata: BTreeMap<String, String>,
}

/// Splits `---\nYAML\n---\nbody`.
fn split_frontmatter(text: &str) -> Result<(&str, &str), SkillError> {
    let text = text.trim_start_matches('\u{feff}');
    let rest = text.strip_prefix("---").ok_or(SkillError::NoFrontmatter)?;
    let end = rest.find("\n---").ok_or(SkillError::Unclosed)?;
    let after = &rest[end + 4..];
    // The closing line is `---` and its line break.
    let body = after.split_once('\n').map_or("", |(_, body)| body);
    Ok((&rest[..end], body))
}

/// Parses the frontmatter leniently about YAML (an unquoted `: ` in a value, common in
/// descriptions like `Use when: ...`, is retried quoted) and strictly about types.
pub fn parse_frontmatter(text: &str) -> Result<Frontmatter, SkillError> {
    let (yaml, _) = split_frontmatter(text)?;
    let value: serde_yaml_ng::Value = match serde_yaml_ng::from_str(yaml) {
        Ok(value) => value,
        Err(first) => serde_yaml_ng::from_str(&quote_colon_values(yaml))
            .map_err(|_| SkillError::Yaml(first.to_string()))?,
    };
    let map = match value {
        serde_yaml_ng::Value::Mapping(map) => map,
        serde_yaml_ng::Value::Null => serde_yaml_ng::Mapping::new(),
        _ => return Err(SkillError::NotMapping),
    };
    let get = |key: &'static str| -> Result<Option<String>, SkillError> {
        match map.get(key) {
            None | Some(serde_yaml_ng::Value::Null) => Ok(None),
            Some(value) => scalar(value).map(Some).ok_or(SkillError::NotString(key)),
        }
    };
    let allowed_tools = match map.get("allowed-tools") {
        None | Some(serde_yaml_ng::Value::Null) => Vec::new(),
        // The spec's space-separated string; Claude Code also writes commas or a list.
        Some(serde_yaml_ng::Value::Sequence(items)) => items.iter().filter_map(scalar).collect(),
        Some(value) => split_tools(&scalar(value).ok_or(SkillError::NotString("allowed-tools"))?),
    };
    let metadata = match map.get("metadata") {
        Some(serde_yaml_ng::Value::Mapping(m)) => m
            .iter()
            .filter_map(|(k, v)| Some((scalar(k)?, scalar(v)?)))
            .collect(),
        _ => BTreeMap::new(),
    };
    Ok(Frontmatter {
        name: get("name")?.ok_or(SkillError::Missing("name"))?,
        description: get("description")?.ok_or(SkillError::Missing("description"))?,
        license: get("license")?,
        compatibility: get("compatibility")?,
        allowed_tools,
        metadata,
    })
}

/// A scalar as a string (YAML may read `version: 1.0` as a number).
fn scalar(value: &serde_yaml_ng::Value) -> Option<String> {
    match value {
        serde_yaml_ng::Value::String(s) => Some(s.clone()),
        serde_yaml_ng::Value::Number(n) => Some(n.to_string()),
        serde_yaml_ng::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `Bash(git:*) Read` or `Read, Grep`: parentheses keep their spaces.
fn split_tools(text: &str) -> Vec<String> {
    let mut tools = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && (c == ',' || c.is_whitespace()) {
            if !current.is_empty() {
                tools.push(std::mem::take(&mut current));
            }
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        tools.push(current);
    }
    tools
}

/// Quotes top-level `key: value` lines whose value holds another `: `.
fn quote_colon_values(yaml: &str) -> String {
    yaml.lines()
        .map(|line| {
            let Some((key, value)) = line.split_once(": ") else {
                return line.to_owned();
            };
            let value = value.trim();
            let plain_key = !key.is_empty()
                && !key.starts_with([' ', '\t', '-', '#'])
                && !key.contains(['"', '\'']);
            if plain_key && value.contains(": ") && !value.starts_with(['"', '\'', '|', '>']) {
                format!("{key}: '{}'", value.replace('\'', "''"))
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The spec's rules: name (lowercase letters, digits, single hyphens, ≤ 64, equal to the
/// folder's name), description 1..=1024 characters, compatibility ≤ 500.
pub fn validate(front: &Frontmatter, dir_name: &str) -> Result<(), SkillError> {
    let name = front.name.trim();
    validate_name(name)?;
    if name != dir_name {
        return Err(SkillError::NameMismatch {
            name: name.to_owned(),
            dir: dir_name.to_owned(),
        });
    }
    let chars = front.description.trim().chars().count();
    if chars == 0 || chars > MAX_DESCRIPTION_CHARS {
        return Err(SkillError::Description(chars));
    }
    if let Some(c) = &front.compatibility {
        let chars = c.chars().count();
        if chars > MAX_COMPATIBILITY_CHARS {
            return Err(SkillError::Compatibility(chars));
        }
    }
    Ok(())
}

/// Letters are those Unicode calls alphanumeric and lowercase-stable (as skills-ref does).
pub fn validate_name(name: &str) -> Result<(), SkillError> {
    let invalid = |reason| {
        Err(SkillError::InvalidName {
            name: name.to_owned(),
            reason,
        })
    };
    let chars = name.chars().count();
    if chars == 0 {
        return invalid("it is empty");
    }
    if chars > MAX_NAME_CHARS {
        return invalid("it is longer than 64 characters");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return invalid("it starts or ends with a hyphen");
    }
    if name.contains("--") {
        return invalid("it has two hyphens in a row");
    }
    let allowed =
        |c: char| c == '-' || (c.is_alphanumeric() && c.to_lowercase().eq(std::iter::once(c)));
    if !name.chars().all(allowed) {
        return invalid("only lowercase letters, digits and hyphens are allowed");
    }
    Ok(())
}

/// The part of the skills that goes into the system prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillIndex {
    /// `(name, description)`, descriptions on one line and cut to a few hundred bytes.
    pub entries: Vec<(String, String)>,
    /// Skills left out to keep within the budget.
    pub omitted: usize,
}

/// Names and descriptions, sorted by name, within `max_bytes` (as `- name: description`
/// lines) and `max_count` entries. Deterministic, so the prompt is byte-stable.
pub fn index(skills: &[Skill], max_bytes: usize, max_count: usize) -> SkillIndex {
    let mut out = SkillIndex::default();
    let mut used = 0;
    for skill in skills {
        let description = one_line(&skill.description, MAX_INDEX_DESCRIPTION);
        let cost = skill.name.len() + description.len() + 5;
        if out.entries.len() >= max_count || used + cost > max_bytes {
            out.omitted += 1;
            continue;
        }
        used += cost;
        out.entries.push((skill.name.clone(), description));
    }
    out
}

/// Whitespace collapsed to single spaces, cut to `max` bytes on a character boundary.
fn one_line(text: &str, max: usize) -> String {
    let mut line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.len() > max {
        let mut end = max.saturating_sub('…'.len_utf8());
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push('…');
    }
    line
}

fn list_files(base: &Path, dir: &Path, depth: usize, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "node_modules" || name == "__pycache__" {
            continue;
        }
        let path = entry.path();
        // Not following symlinked folders: no cycles.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if depth < MAX_LIST_DEPTH {
                list_files(base, &path, depth + 1, out);
            }
        } else if let Ok(rel) = path.strip_prefix(base) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

#[derive(Debug, Deserialize)]
struct Args {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    file: Option<String>,
}

const SHAPE: &str = r#"{"name"?: string, "file"?: string}"#;

/// `skill`: a skill's instructions and file list by name; with `file`, one of its files.
/// Registered only when there are skills, so a project without any pays nothing.
#[derive(Debug, Clone)]
pub struct SkillTool {
    skills: Arc<Vec<Skill>>,
    max_read_bytes: u64,
}

impl SkillTool {
    pub fn new(skills: Arc<Vec<Skill>>, max_read_bytes: u64) -> Self {
        Self {
            skills,
            max_read_bytes,
        }
    }

    fn catalog(&self) -> String {
        let mut out = String::from("Skills:\n");
        for skill in self.skills.iter() {
            out.push_str(&format!(
                "- {}: {}\n",
                skill.name,
                one_line(&skill.description, MAX_INDEX_DESCRIPTION)
            ));
        }
        out
    }

    fn load(&self, skill: &Skill) -> ToolResult {
        let body = match skill.body() {
            Ok(body) => body,
            Err(e) => {
                return ToolResult::error(format!(
                    "skill '{}' ({}): {e}",
                    skill.name,
                    skill.file.display()
                ));
            }
        };
        let mut out = format!(
            "<skill_content name=\"{}\">\n{body}\n</skill_content>\n\nSkill folder: {}\n",
            skill.name,
            skill.dir.display()
        );
        let (files, more) = skill.files();
        if !files.is_empty() {
            out.push_str(
                "Files (paths relative to the folder; read one with `skill` and `file`):\n",
            );
            for file in files {
                out.push_str(&format!("- {file}\n"));
            }
            if more > 0 {
                out.push_str(&format!("- … and {more} more\n"));
            }
        }
        ToolResult::success(out)
    }
}

#[async_trait]
impl Tool for SkillTool {
    fn name(&self) -> &str {
        "skill"
    }

    fn description(&self) -> &str {
        "Load a skill listed under Skills: its instructions and its files. With `file`, read \
         one of the skill's files (a path relative to its folder). Without `name`, list every skill."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "file": {"type": "string"}
            }
        })
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Read
    }

    async fn execute(&self, input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        let args: Args = match parse(&input, SHAPE) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let Some(name) = args.name.filter(|n| !n.trim().is_empty()) else {
            return ToolResult::success(self.catalog());
        };
        let Some(skill) = self.skills.iter().find(|s| s.name == name.trim()) else {
            return ToolResult::error(format!("{}\n{}", SkillError::Unknown(name), self.catalog()));
        };
        match args.file.filter(|f| !f.trim().is_empty()) {
            None => self.load(skill),
            Some(file) => match skill.resource(file.trim(), self.max_read_bytes) {
                Ok(text) => ToolResult::success(text),
                Err(e) => ToolResult::error(format!("skill '{}': {e}", skill.name)),
            },
        }
    }
}

#[cfg(test)]
#[path = "skill_tests.rs"]
mod tests;
