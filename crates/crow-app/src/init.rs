//! `crow init` and the terminal's `/init`: a commented `.crow/config.toml` and, where the
//! project has no instructions, an `AGENTS.md` skeleton with the build and test commands
//! crow can see.

use std::path::Path;

use anyhow::{Context, Result};

use crate::config;

/// What `crow init` does in `root`, asking `confirm` before each file and telling `say` what
/// happened (the terminal's `/init` shows it above its prompt).
pub fn init_project(
    root: &Path,
    mut confirm: impl FnMut(&str) -> Result<bool>,
    mut say: impl FnMut(&str),
) -> Result<()> {
    let config_file = root.join(".crow/config.toml");
    if config_file.exists() {
        say(&format!("{} exists; left as it is", config_file.display()));
    } else if confirm(&format!("write {}?", config_file.display()))? {
        config::write_config_file(&config_file, PROJECT_CONFIG_TEMPLATE)?;
        say(&format!("wrote {}", config_file.display()));
    }
    let has_instructions = ["AGENTS.md", "AGENTS.override.md", "CLAUDE.md"]
        .iter()
        .any(|n| root.join(n).exists());
    let agents_file = root.join("AGENTS.md");
    if has_instructions {
        say("the project has instructions already; AGENTS.md not written");
    } else if confirm(&format!("write {}?", agents_file.display()))? {
        std::fs::write(&agents_file, agents_skeleton(root))
            .with_context(|| format!("cannot write {}", agents_file.display()))?;
        say(&format!("wrote {}", agents_file.display()));
    }
    Ok(())
}

const PROJECT_CONFIG_TEMPLATE: &str = r#"# crow's settings for this project; your own ~/.config/crow/config.toml is read first and
# this file wins where both set a key. `crow config validate` checks it, `crow config show`
# prints the result. Endpoints, key variables, MCP servers and the store only take effect
# once you trust the project (`crow trust`).

# model = "gpt-4.1"            # the model sessions here use
# default_agent = "build-judge" # the composition new sessions run without --agent
# max_iterations = 50          # model calls per turn
# doom_loop_threshold = 3      # repeats before crow steers the model (0: off)

# [tools]
# bash_timeout_secs = 120

# [instructions]
# fallback_names = ["CLAUDE.md"]   # read where a directory has no AGENTS.md
# max_bytes = 32768
"#;

/// An AGENTS.md skeleton with the commands the project's build files name.
fn agents_skeleton(root: &Path) -> String {
    let mut commands: Vec<(&str, String)> = Vec::new();
    if root.join("Cargo.toml").exists() {
        commands.push(("Build", "cargo build".into()));
        commands.push(("Test", "cargo test".into()));
        commands.push(("Lint", "cargo clippy --all-targets -- -D warnings".into()));
    }
    if let Ok(text) = std::fs::read_to_string(root.join("package.json"))
        && let Ok(json) = serde_json::from_str::<serde_json::Value>(&text)
        && let Some(scripts) = json.get("scripts").and_then(|s| s.as_object())
    {
        for (what, script) in [("Build", "build"), ("Test", "test"), ("Lint", "lint")] {
            if scripts.contains_key(script) {
                commands.push((what, format!("npm run {script}")));
            }
        }
    }
    if root.join("pyproject.toml").exists() || root.join("setup.py").exists() {
        commands.push(("Test", "python -m pytest".into()));
    }
    if root.join("go.mod").exists() {
        commands.push(("Build", "go build ./...".into()));
        commands.push(("Test", "go test ./...".into()));
    }
    if let Ok(text) = std::fs::read_to_string(root.join("Makefile")) {
        for target in ["build", "test", "check", "lint"] {
            if text.lines().any(|l| l.starts_with(&format!("{target}:"))) {
                commands.push(("Make", format!("make {target}")));
            }
        }
    }
    let mut out = String::from(
        "# AGENTS.md\n\nInstructions for coding agents working in this project.\n\n## Commands\n\n",
    );
    if commands.is_empty() {
        out.push_str("- (add the commands that build and test the project)\n");
    }
    for (what, command) in commands {
        out.push_str(&format!("- {what}: `{command}`\n"));
    }
    out.push_str(
        "\n## Conventions\n\n- (code style, naming, where things live)\n\n## Before finishing\n\n\
         - Run the tests and fix what fails.\n",
    );
    out
}
