//! ACP's keeper of "always allow in this project" answers.

use std::path::{Path, PathBuf};

use crow_core::Rule;

use crate::permissions::{canonical, save_rule};

/// ACP's keeper of "always allow in this project" answers: [`save_rule`] for the session's
/// project.
pub struct ProjectRules {
    /// Resolved, as the paths in tools' questions are.
    root: PathBuf,
}

impl ProjectRules {
    pub fn new(project_root: &Path) -> Self {
        Self {
            root: canonical(project_root),
        }
    }
}

impl crow_acp::RuleSaver for ProjectRules {
    fn project_root(&self) -> &Path {
        &self.root
    }

    fn target(&self) -> String {
        ".crow/config.toml".to_owned()
    }

    fn save(&self, rule: &Rule) -> Result<(), crow_acp::RunnerError> {
        let saved = save_rule(&self.root, rule)
            .map_err(|e| crow_acp::RunnerError::Failed(format!("{e:#}")))?;
        tracing::info!(
            "saved {} {} to {}",
            rule.action.name(),
            saved.text,
            saved.path.display()
        );
        Ok(())
    }
}
