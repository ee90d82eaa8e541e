//! The environment commands see: `bash`, commands run in an editor's terminal, stdio MCP
//! servers. One policy, built by the front end from configuration, so that the keys crow
//! holds (and anything that looks like a credential) never reach a command whose output the
//! model reads, stores and sends on.
//!
//! Order of the rules, later wins:
//! 1. `inherit`: all of crow's environment, the [`CORE_VARS`] only, or nothing;
//! 2. removed: crow's own key variables ([`EnvPolicy::hidden`]), names matching
//!    [`SECRET_PATTERNS`] and values holding a URL with a password
//!    ([`has_url_credentials`], whatever the name), unless they match an `include` pattern;
//! 3. `include`: names passed through even when 1 or 2 would drop them;
//! 4. `exclude`: names always removed (wins over `include`);
//! 5. `set`: fixed values, always passed.
//!
//! Patterns are names with `*` wildcards, matched case-insensitively.
//!
//! crow-tools' `ToolOptions.env` and crow-mcp's `McpOptions.env` carry it; the binary builds it
//! from `[shell_environment]`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;

use serde::{Deserialize, Serialize};

/// Names that look like credentials; removed unless `include`d. A user adds names of their
/// own with `[shell_environment] exclude`. Deliberately not here: `PWD`/`OLDPWD` (the
/// working directories, hence `*_PWD` and not `*PWD*`), `SSH_AUTH_SOCK` (the agent's socket,
/// which git over ssh needs; hence `*_AUTH` and not `*AUTH*`), `SSL_CERT_FILE` and the other
/// CA bundle paths (public certificates, which TLS in commands needs).
pub const SECRET_PATTERNS: [&str; 14] = [
    // The usual names: OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, DB_PASSWORD.
    "*KEY*",
    "*SECRET*",
    "*TOKEN*",
    "*PASSWORD*",
    // Other spellings of a password: MYSQL_PASSWD, PGPASSWD, REDIS_PWD, GPG_PASSPHRASE.
    "*PASSWD*",
    "*_PWD",
    "*PASSPHRASE*",
    // AWS_SHARED_CREDENTIALS_FILE, GOOGLE_APPLICATION_CREDENTIALS, *_PRIVATE_KEY_PATH.
    "*CREDENTIAL*",
    "*PRIVATE*",
    // Personal access tokens and auth strings: GH_PAT, AZURE_DEVOPS_PAT, NPM_CONFIG__AUTH.
    "*_PAT",
    "*_AUTH",
    // Connection strings, which carry their password: DATABASE_URL, SENTRY_DSN,
    // AZURE_STORAGE_CONNECTION_STRING.
    "*DATABASE_URL*",
    "*_DSN",
    "*CONNECTION_STRING*",
];

/// What `inherit = "core"` keeps: enough for a shell, tools and locales to work.
pub const CORE_VARS: [&str; 14] = [
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_*",
    "TERM",
    "TMPDIR",
    "TZ",
    "PWD",
    "COLORTERM",
    "NO_COLOR",
    "XDG_*",
];

/// Which of crow's environment variables a command starts from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Inherit {
    /// Everything (minus what looks secret).
    #[default]
    All,
    /// [`CORE_VARS`] only.
    Core,
    /// Nothing but `include` and `set`.
    None,
}

impl Inherit {
    pub fn as_str(self) -> &'static str {
        match self {
            Inherit::All => "all",
            Inherit::Core => "core",
            Inherit::None => "none",
        }
    }
}

/// The environment policy of commands crow starts.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EnvPolicy {
    pub inherit: Inherit,
    /// Exact names crow itself uses for keys (every provider's `api_key_env`, bearer-token
    /// variables); removed like the secret-looking ones.
    pub hidden: BTreeSet<String>,
    /// Patterns passed through although secret-looking or outside `inherit`.
    pub include: Vec<String>,
    /// Patterns always removed.
    pub exclude: Vec<String>,
    /// Values always set.
    pub set: BTreeMap<String, String>,
}

// `set` may hold a credential the user hands to commands on purpose: never print values.
impl std::fmt::Debug for EnvPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvPolicy")
            .field("inherit", &self.inherit)
            .field("hidden", &self.hidden)
            .field("include", &self.include)
            .field("exclude", &self.exclude)
            .field("set", &self.set.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Whether `name` matches `pattern` (`*` matches any run of characters), ignoring case.
/// Compared byte by byte, nothing allocated: every command's environment passes each of its
/// variables through the secret patterns (a few hundred calls for each command). Bytes are
/// as good as characters here: a part of a pattern, itself UTF-8, can only match a name at a
/// character's start, and only ASCII letters are folded.
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let name = name.as_bytes();
    let Some((first, rest)) = pattern.split_once('*') else {
        return pattern.as_bytes().eq_ignore_ascii_case(name);
    };
    let (middle, last) = rest.rsplit_once('*').unwrap_or(("", rest));
    let (first, last) = (first.as_bytes(), last.as_bytes());
    if name.len() < first.len() + last.len()
        || !name[..first.len()].eq_ignore_ascii_case(first)
        || !name[name.len() - last.len()..].eq_ignore_ascii_case(last)
    {
        return false;
    }
    let mut between = &name[first.len()..name.len() - last.len()];
    for part in middle
        .split('*')
        .map(str::as_bytes)
        .filter(|p| !p.is_empty())
    {
        match between
            .windows(part.len())
            .position(|w| w.eq_ignore_ascii_case(part))
        {
            Some(at) => between = &between[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Whether a variable's name looks like a credential ([`SECRET_PATTERNS`]).
pub fn looks_secret(name: &str) -> bool {
    SECRET_PATTERNS.iter().any(|p| name_matches(p, name))
}

/// Whether `value` holds a URL with a password (`scheme://user:pass@host`), as in
/// `DATABASE_URL`, `PIP_EXTRA_INDEX_URL` or a git remote with a token: such a value is a
/// credential whatever its variable is called. Every URL in the value is looked at.
pub fn has_url_credentials(value: &str) -> bool {
    // A byte scan: `str::find` with a string sets up a searcher at each call, and every
    // variable of every command's environment is looked at.
    let scheme_end = |text: &str| text.as_bytes().windows(3).position(|w| w == b"://");
    let mut rest = value;
    while let Some(at) = scheme_end(rest) {
        let after = &rest[at + 3..];
        // The authority ends at the path, query, fragment or the end of the word.
        let end = after
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..end];
        if let Some(userinfo) = authority.rsplit_once('@').map(|(u, _)| u)
            && let Some((_, password)) = userinfo.split_once(':')
            && !password.is_empty()
        {
            return true;
        }
        rest = after;
    }
    false
}

fn any_match(patterns: &[impl AsRef<str>], name: &str) -> bool {
    patterns.iter().any(|p| name_matches(p.as_ref(), name))
}

impl EnvPolicy {
    /// Whether a variable of the parent environment is passed on, by its name alone (the
    /// value's own rule is [`EnvPolicy::passes_var`]'s).
    pub fn passes(&self, name: &str) -> bool {
        self.passes_var(name, "")
    }

    /// Whether a variable of the parent environment, with its value, is passed on.
    pub fn passes_var(&self, name: &str, value: &str) -> bool {
        if any_match(&self.exclude, name) {
            return false;
        }
        if any_match(&self.include, name) {
            return true;
        }
        if self.hidden.contains(name) || looks_secret(name) || has_url_credentials(value) {
            return false;
        }
        match self.inherit {
            Inherit::All => true,
            Inherit::Core => any_match(&CORE_VARS, name),
            Inherit::None => false,
        }
    }

    /// The environment of a command, from the parent environment `vars`.
    pub fn apply(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> BTreeMap<OsString, OsString> {
        let mut out: BTreeMap<OsString, OsString> = vars
            .into_iter()
            .filter(|(name, value)| {
                self.passes_var(&name.to_string_lossy(), &value.to_string_lossy())
            })
            .collect();
        for (name, value) in &self.set {
            out.insert(name.into(), value.into());
        }
        out
    }

    /// The environment of a command started by this process.
    pub fn environment(&self) -> BTreeMap<OsString, OsString> {
        self.apply(std::env::vars_os())
    }

    /// What a command started by this process sees for `name`: one variable of
    /// [`Self::environment`] without checking all the others (a session's start needs only
    /// the commands' PATH, and the whole environment cost ~0.8M instructions of its ~10M).
    pub fn var(&self, name: &str) -> Option<OsString> {
        self.pick(name, std::env::var_os(name))
    }

    fn pick(&self, name: &str, value: Option<OsString>) -> Option<OsString> {
        if let Some(set) = self.set.get(name) {
            return Some(set.into());
        }
        value.filter(|value| self.passes_var(name, &value.to_string_lossy()))
    }

    /// Names of this process's variables the policy keeps from commands (for `crow config
    /// show`; names only, never values).
    pub fn removed_names(&self) -> Vec<String> {
        removed(self, std::env::vars_os())
    }

    /// What to send to a terminal crow does not start itself (an editor's): it can only add
    /// variables on top of the editor's environment, so every variable the policy removes
    /// from crow's own environment (usually the editor's too) is set empty, then `set`.
    pub fn client_overrides(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .removed_names()
            .into_iter()
            .filter(|name| !self.set.contains_key(name))
            .map(|name| (name, String::new()))
            .collect();
        out.extend(self.set.iter().map(|(k, v)| (k.clone(), v.clone())));
        out
    }
}

fn removed(
    policy: &EnvPolicy,
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<String> {
    let mut names: Vec<String> = vars
        .into_iter()
        .filter(|(name, value)| {
            !policy.passes_var(&name.to_string_lossy(), &value.to_string_lossy())
        })
        .filter_map(|(name, _)| name.to_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    fn names(env: &BTreeMap<OsString, OsString>) -> Vec<String> {
        env.keys()
            .map(|k| k.to_string_lossy().into_owned())
            .collect()
    }

    const PARENT: &[(&str, &str)] = &[
        ("PATH", "/bin"),
        ("HOME", "/home/u"),
        ("LC_ALL", "C"),
        ("OPENAI_API_KEY", "sk-1"),
        ("github_token", "gh-1"),
        ("DB_PASSWORD", "pw"),
        ("AWS_SECRET_ACCESS_KEY", "aws"),
        ("MY_LLM", "llm-key"),
        ("EDITOR", "vi"),
    ];

    /// The matcher before it compared bytes: uppercased copies and `str::find`.
    fn name_matches_by_copies(pattern: &str, name: &str) -> bool {
        let pattern = pattern.to_ascii_uppercase();
        let name = name.to_ascii_uppercase();
        let parts: Vec<&str> = pattern.split('*').collect();
        if parts.len() == 1 {
            return pattern == name;
        }
        let (first, last) = (parts[0], parts[parts.len() - 1]);
        if !name.starts_with(first)
            || !name.ends_with(last)
            || name.len() < first.len() + last.len()
        {
            return false;
        }
        let Some(mut rest) = name.get(first.len()..name.len() - last.len()) else {
            return false;
        };
        for part in &parts[1..parts.len() - 1] {
            match rest.find(part) {
                Some(i) => rest = &rest[i + part.len()..],
                None => return false,
            }
        }
        true
    }

    proptest::proptest! {
        #[test]
        fn matching_bytes_agrees_with_matching_copies(
            pattern in "[aAbB_*É]{0,8}",
            name in "[aAbB_éÉ]{0,10}",
        ) {
            proptest::prop_assert_eq!(
                name_matches(&pattern, &name),
                name_matches_by_copies(&pattern, &name)
            );
        }
    }

    #[test]
    fn patterns_match_ignoring_case() {
        assert!(name_matches("*KEY*", "openai_api_key"));
        assert!(name_matches("*KEY*", "KEY"));
        assert!(name_matches("LC_*", "LC_ALL"));
        assert!(name_matches("A*B*C", "AxxBxxC"));
        assert!(!name_matches("A*B*C", "AxxC"));
        assert!(!name_matches("LC_*", "XLC_ALL"));
        assert!(name_matches("PATH", "path"));
        assert!(!name_matches("PATH", "PATHS"));
        assert!(!name_matches("*AB*BA*", "ABA"));
        // Not ASCII: no slicing inside a character.
        assert!(!name_matches("*_PWD", "ⳜÔȺ"));
        assert!(name_matches("*_PWD", "É_PWD"));
        assert!(!looks_secret("ⳜÔȺ"));
    }

    #[test]
    fn the_default_removes_crows_keys_and_secret_looking_names() {
        let policy = EnvPolicy {
            hidden: ["MY_LLM".to_owned()].into(),
            ..EnvPolicy::default()
        };
        let env = policy.apply(vars(PARENT));
        assert_eq!(names(&env), ["EDITOR", "HOME", "LC_ALL", "PATH"]);
    }

    #[test]
    fn one_variable_is_what_the_whole_environment_has() {
        let policies = [
            EnvPolicy {
                hidden: ["MY_LLM".to_owned()].into(),
                ..EnvPolicy::default()
            },
            EnvPolicy {
                inherit: Inherit::Core,
                ..EnvPolicy::default()
            },
            EnvPolicy {
                inherit: Inherit::None,
                include: vec!["GITHUB_*".into()],
                set: [("PATH".to_owned(), "/set".to_owned())].into(),
                ..EnvPolicy::default()
            },
            EnvPolicy {
                exclude: vec!["PATH".into()],
                ..EnvPolicy::default()
            },
        ];
        for policy in policies {
            let env = policy.apply(vars(PARENT));
            for (name, value) in PARENT.iter().chain([&("UNSET", "")]) {
                let given = (*name != "UNSET").then(|| OsString::from(value));
                assert_eq!(
                    policy.pick(name, given).as_ref(),
                    env.get(OsStr::new(name)),
                    "{name} under {policy:?}"
                );
            }
        }
    }

    #[test]
    fn core_none_include_exclude_and_set() {
        let core = EnvPolicy {
            inherit: Inherit::Core,
            ..EnvPolicy::default()
        };
        assert_eq!(names(&core.apply(vars(PARENT))), ["HOME", "LC_ALL", "PATH"]);

        let none = EnvPolicy {
            inherit: Inherit::None,
            include: vec!["GITHUB_*".into(), "path".into()],
            set: [("CI".to_owned(), "1".to_owned())].into(),
            ..EnvPolicy::default()
        };
        let env = none.apply(vars(PARENT));
        assert_eq!(names(&env), ["CI", "PATH", "github_token"]);
        assert_eq!(env[OsStr::new("CI")], "1");

        let exclude = EnvPolicy {
            include: vec!["*".into()],
            exclude: vec!["*_API_KEY".into(), "EDITOR".into()],
            ..EnvPolicy::default()
        };
        let env = exclude.apply(vars(PARENT));
        assert!(
            env.contains_key(OsStr::new("DB_PASSWORD")),
            "include * lets it through"
        );
        assert!(
            !env.contains_key(OsStr::new("OPENAI_API_KEY")),
            "exclude wins"
        );
        assert!(!env.contains_key(OsStr::new("EDITOR")));
    }

    #[test]
    fn editor_terminals_get_removed_names_blanked_and_debug_hides_values() {
        let policy = EnvPolicy {
            set: [("DEPLOY_TOKEN".to_owned(), "t-123".to_owned())].into(),
            ..EnvPolicy::default()
        };
        assert_eq!(
            removed(&policy, vars(PARENT)),
            [
                "AWS_SECRET_ACCESS_KEY",
                "DB_PASSWORD",
                "OPENAI_API_KEY",
                "github_token"
            ]
        );
        assert!(!format!("{policy:?}").contains("t-123"));
    }

    #[test]
    fn connection_strings_passwords_and_credential_urls_are_removed_but_pwd_passes() {
        let parent = vars(&[
            ("DATABASE_URL", "postgres://app:hunter2@db:5432/app"),
            ("MYSQL_PASSWD", "pw"),
            ("REDIS_PWD", "pw"),
            ("GH_PAT", "ghp_x"),
            ("SENTRY_DSN", "https://abc@o1.ingest.sentry.io/1"),
            ("NPM_CONFIG__AUTH", "dXNlcjpwYXNz"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "/home/u/creds.json"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/home/u/.aws/credentials"),
            ("SIGNING_PRIVATE_KEY_PATH", "/k"),
            ("GPG_PASSPHRASE", "pp"),
            ("AZURE_STORAGE_CONNECTION_STRING", "AccountKey=abc"),
            // Innocent names, credentials in the value.
            (
                "PIP_EXTRA_INDEX_URL",
                "https://pypi.org/simple https://user:s3cret@pypi.corp/simple",
            ),
            (
                "UPSTREAM",
                "https://x-access-token:ghs_abc@github.com/o/r.git",
            ),
            // What must pass.
            ("PWD", "/work/p"),
            ("OLDPWD", "/work"),
            ("SSH_AUTH_SOCK", "/tmp/ssh-agent.sock"),
            ("SSL_CERT_FILE", "/etc/ssl/cert.pem"),
            ("PATH", "/bin"),
            ("HOMEPAGE", "https://example.com/a:b@c"),
            ("GIT_REMOTE", "ssh://git@github.com/o/r.git"),
            ("PROXY", "http://proxy:3128"),
        ]);
        let env = EnvPolicy::default().apply(parent.clone());
        assert_eq!(
            names(&env),
            [
                "GIT_REMOTE",
                "HOMEPAGE",
                "OLDPWD",
                "PATH",
                "PROXY",
                "PWD",
                "SSH_AUTH_SOCK",
                "SSL_CERT_FILE"
            ]
        );
        // The names said to an editor's terminal are the same ones.
        let policy = EnvPolicy::default();
        let removed = removed(&policy, parent);
        assert!(removed.contains(&"UPSTREAM".to_owned()), "{removed:?}");
        assert!(!removed.contains(&"PWD".to_owned()), "{removed:?}");
        // The user's `include` still wins, and their `exclude` adds names.
        let policy = EnvPolicy {
            include: vec!["UPSTREAM".into()],
            exclude: vec!["PROXY".into()],
            ..EnvPolicy::default()
        };
        let env = policy.apply(vars(&[("UPSTREAM", "https://u:p@h/"), ("PROXY", "x")]));
        assert_eq!(names(&env), ["UPSTREAM"]);
    }
}
