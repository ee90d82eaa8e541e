//! Keeping an "always" answer for the project: the rule is appended to the project's
//! `.crow/config.toml` `[permissions]`, the file's other content and comments kept. Every
//! front end that asks (ACP, the terminal) calls [`save_rule`] once the user chose it, with
//! the rule it showed (crow-core's `suggest_rule`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use crow_core::Rule;

/// Where a rule went, to tell the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedRule {
    /// The project's `.crow/config.toml`.
    pub path: PathBuf,
    /// The rule as written (`bash(git status*)`) under `[permissions] allow|ask|deny`.
    pub text: String,
    /// It was there already: nothing was written.
    pub existed: bool,
}

/// The rule as config spells it.
pub fn rule_text(rule: &Rule) -> String {
    match &rule.pattern {
        Some(pattern) => format!("{}({pattern})", rule.tool),
        None => rule.tool.clone(),
    }
}

/// Appends `rule` to `[permissions] <action>` of `project_root/.crow/config.toml` (created
/// if missing). A file that does not parse is left alone and named in the error.
pub fn save_rule(project_root: &Path, rule: &Rule) -> Result<SavedRule> {
    let path = project_root.join(".crow").join("config.toml");
    let text = crate::config::read_or_empty(&path)?;
    let mut doc: toml_edit::DocumentMut = text.parse().with_context(|| {
        format!(
            "{} is not valid TOML; the rule is not saved",
            path.display()
        )
    })?;
    let rule_text = rule_text(rule);
    let key = rule.action.name();
    let permissions = doc
        .entry("permissions")
        .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()));
    let Some(permissions) = permissions.as_table_like_mut() else {
        bail!("{}: permissions is not a table", path.display());
    };
    let list = permissions
        .entry(key)
        .or_insert(toml_edit::Item::Value(toml_edit::Value::Array(
            toml_edit::Array::new(),
        )));
    let Some(list) = list.as_array_mut() else {
        bail!("{}: permissions.{key} is not a list", path.display());
    };
    let existed = list.iter().any(|v| v.as_str() == Some(rule_text.as_str()));
    if !existed {
        list.push(rule_text.as_str());
        crate::config::write_config_file(&path, &doc.to_string())?;
        crow_tools::sandbox::note_own_write(&path);
    }
    Ok(SavedRule {
        path,
        text: rule_text,
        existed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crow_core::Action;

    #[test]
    fn a_saved_rule_joins_the_file_and_keeps_its_comments() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join(".crow/config.toml");
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        std::fs::write(
            &config,
            "# my settings\nmodel = \"m\" # the model\n\n[permissions]\n# keep these\ndeny = [\"bash(rm *)\"]\n",
        )
        .unwrap();
        let rule = Rule::parse(Action::Allow, "bash(git status*)", "").unwrap();
        let saved = save_rule(dir.path(), &rule).unwrap();
        assert_eq!(saved.text, "bash(git status*)");
        assert!(!saved.existed);
        let text = std::fs::read_to_string(&config).unwrap();
        assert!(
            text.starts_with("# my settings\nmodel = \"m\" # the model\n"),
            "{text}"
        );
        assert!(
            text.contains("# keep these\ndeny = [\"bash(rm *)\"]"),
            "{text}"
        );
        assert!(text.contains("allow = [\"bash(git status*)\"]"), "{text}");
        // Read back as crow reads rules.
        let table: toml::Table = toml::from_str(&text).unwrap();
        let rules =
            crate::permissions::layer_rules(&table, &crate::config::Source::File(config.clone()))
                .unwrap();
        assert!(
            rules
                .iter()
                .any(|r| r.describe().starts_with("allow bash(git status*)"))
        );
        // Twice is once.
        assert!(save_rule(dir.path(), &rule).unwrap().existed);
        assert_eq!(std::fs::read_to_string(&config).unwrap(), text);
        // A new project gets a new file.
        let fresh = tempfile::tempdir().unwrap();
        save_rule(fresh.path(), &rule).unwrap();
        let written = std::fs::read_to_string(fresh.path().join(".crow/config.toml")).unwrap();
        assert!(written.contains("[permissions]"), "{written}");
        // A broken file is not touched.
        std::fs::write(&config, "model = \n").unwrap();
        let e = save_rule(dir.path(), &rule).unwrap_err().to_string();
        assert!(e.contains("config.toml"), "{e}");
        assert_eq!(std::fs::read_to_string(&config).unwrap(), "model = \n");
    }
}
