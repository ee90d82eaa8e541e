//! Shared directory walking for glob, grep and list_directory: .gitignore-aware, no symlink
//! following (a link could lead outside the project), hidden files skipped by default.

use std::path::Path;

use globset::{GlobBuilder, GlobMatcher};
use ignore::WalkBuilder;

/// A walker honouring .gitignore/.ignore even outside a git repository.
pub(crate) fn walker(base: &Path) -> WalkBuilder {
    let mut builder = WalkBuilder::new(base);
    builder
        .hidden(true)
        .git_ignore(true)
        .git_exclude(true)
        .ignore(true)
        .parents(true)
        .require_git(false)
        .follow_links(false);
    builder
}

/// A file-name filter: patterns without `/` match the file name at any depth (`*.rs`),
/// others match the path relative to the search base (`src/**/*.rs`).
#[derive(Debug, Clone)]
pub(crate) struct NameFilter {
    matcher: GlobMatcher,
    basename_only: bool,
}

impl NameFilter {
    pub fn new(pattern: &str) -> Result<Self, String> {
        let pattern = pattern.trim();
        let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
        if pattern.is_empty() {
            return Err("the glob pattern is empty".into());
        }
        let basename_only = !pattern.contains('/');
        let matcher = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("invalid glob pattern '{pattern}': {e}"))?
            .compile_matcher();
        Ok(Self {
            matcher,
            basename_only,
        })
    }

    /// `rel` is the path relative to the search base.
    pub fn matches(&self, rel: &Path) -> bool {
        if self.basename_only {
            rel.file_name().is_some_and(|n| self.matcher.is_match(n))
        } else {
            self.matcher.is_match(rel)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basename_and_path_patterns() {
        let f = NameFilter::new("*.rs").unwrap();
        assert!(f.matches(Path::new("a/b/c.rs")));
        assert!(!f.matches(Path::new("a/b/c.rsx")));
        let f = NameFilter::new("src/**/*.{rs,toml}").unwrap();
        assert!(f.matches(Path::new("src/x/y.toml")));
        assert!(f.matches(Path::new("src/y.rs")));
        assert!(!f.matches(Path::new("tests/y.rs")));
        let f = NameFilter::new("./src/*.rs").unwrap();
        assert!(f.matches(Path::new("src/y.rs")));
        assert!(!f.matches(Path::new("src/a/y.rs")));
        assert!(NameFilter::new("a[").is_err());
    }
}
