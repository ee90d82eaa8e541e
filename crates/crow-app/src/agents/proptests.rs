//! Property tests (issue 23) of agent files: any `.md` or `.toml` in an `agents/` folder
//! loads or becomes a problem line that names the file (and the key at fault); never a
//! panic. `PROPTEST_CASES` raises the case count.

use proptest::prelude::*;

use super::load_catalog;

fn config(cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    config
}

const MD: &str = "---\nname: helper\ndescription: helps\nmode: subagent\nmodel: inherit\n\
temperature: 0.2\nmax_tokens: 100\ntools: Read, Grep\n---\nYou help.\n";
const TOML: &str = "name = \"duo\"\nprimary = \"builder\"\ncoagent = \"reviewer\"\n\
flow = \"judge\"\nmax_rounds = 3\n[handoff]\ntext = \"look\"\n";

fn damaged(valid: &'static str) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        (
            any::<usize>(),
            any::<usize>(),
            "[-:\"'=\\[\\]{}\n \ta-z0-9#\u{feff}\r]{0,4}",
        ),
        1..5,
    )
    .prop_map(move |edits| {
        let mut text = valid.to_owned();
        for (at, len, insert) in edits {
            let at = at % (text.len() + 1);
            let end = (at + len % 8).min(text.len());
            if text.is_char_boundary(at) && text.is_char_boundary(end) {
                text.replace_range(at..end, &insert);
            }
        }
        text
    })
}

/// Loads a project whose only agent file is `name` with `text`; returns its problems and
/// the file's path.
fn load(name: &str, text: &str) -> Result<(Vec<String>, String), TestCaseError> {
    let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let agents = dir.path().join("agents");
    std::fs::create_dir_all(&agents).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let path = agents.join(name);
    std::fs::write(&path, text).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let catalog = load_catalog(None, dir.path());
    Ok((catalog.problems, path.display().to_string()))
}

const WRONG_MD: &[(&str, &str)] = &[
    ("temperature", "hot"),
    ("max_tokens", "-5"),
    ("max_tokens", "lots"),
    ("max_iterations", "[1]"),
    ("mode", "sideways"),
    ("doom_loop_threshold", "{a: 1}"),
];

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn any_markdown_agent_loads_or_names_its_file(
        text in prop_oneof![damaged(MD), "(?s).{0,100}", "---\n(?s).{0,60}"],
    ) {
        let (problems, path) = load("a.md", &text)?;
        for p in &problems {
            prop_assert!(p.starts_with(&path), "the file is not named: {p}");
        }
    }

    #[test]
    fn any_toml_definition_loads_or_names_its_file(text in prop_oneof![damaged(TOML), "(?s).{0,100}"]) {
        let (problems, path) = load("d.toml", &text)?;
        for p in &problems {
            prop_assert!(p.starts_with(&path), "the file is not named: {p}");
        }
    }

    #[test]
    fn a_frontmatter_value_of_the_wrong_type_names_its_key(wrong in proptest::sample::select(WRONG_MD)) {
        let (key, value) = wrong;
        let (problems, path) = load("w.md", &format!("---\nname: w\n{key}: {value}\n---\nbody\n"))?;
        prop_assert_eq!(problems.len(), 1, "{:?}", problems);
        prop_assert!(problems[0].starts_with(&path), "{}", problems[0]);
        prop_assert!(problems[0].contains(key), "{key} not named: {}", problems[0]);
    }
}
