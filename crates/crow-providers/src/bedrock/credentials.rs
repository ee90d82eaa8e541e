//! AWS credentials and region, read the way the AWS CLI reads static ones: the environment
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), then the profile
//! (`profile` setting, `AWS_PROFILE`, `default`) of the shared credentials file
//! (`AWS_SHARED_CREDENTIALS_FILE`, `~/.aws/credentials`), then of the config file
//! (`AWS_CONFIG_FILE`, `~/.aws/config`, sections `[profile NAME]` and `[default]`).
//!
//! Not `aws-config`: it would bring the AWS SDK's HTTP stack (a second hyper client with its
//! own TLS setup) for SSO, role assumption and instance metadata, none of which a static
//! key needs. A profile that uses those is named as such, with the command that exports its
//! keys. The secret and the session token are [`ApiKey`]s: they never print.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::key::{ApiKey, expand_home};

pub const AWS_ACCESS_KEY_ID_ENV: &str = "AWS_ACCESS_KEY_ID";
pub const AWS_SECRET_ACCESS_KEY_ENV: &str = "AWS_SECRET_ACCESS_KEY";
pub const AWS_SESSION_TOKEN_ENV: &str = "AWS_SESSION_TOKEN";

/// A static key pair, perhaps temporary (with a session token).
#[derive(Clone, Debug)]
pub(crate) struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: ApiKey,
    pub session_token: Option<ApiKey>,
    /// Where they came from, for messages.
    pub origin: String,
}

/// Where to look: the process environment and the two shared files.
pub(crate) struct Lookup<'a> {
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub profile: Option<&'a str>,
    /// The provider's own shared credentials file: read instead of the environment's keys
    /// and `AWS_SHARED_CREDENTIALS_FILE`.
    pub file: Option<&'a Path>,
}

impl Lookup<'_> {
    fn var(&self, name: &str) -> Option<String> {
        (self.env)(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// The profile: the setting, `AWS_PROFILE`, else `default`.
    pub fn profile(&self) -> String {
        self.profile
            .map(str::to_owned)
            .or_else(|| self.var("AWS_PROFILE"))
            .unwrap_or_else(|| "default".to_owned())
    }

    fn file(&self, var: &str, default: &str) -> Option<PathBuf> {
        match self.var(var) {
            Some(path) => Some(expand_home(Path::new(&path))),
            None => dirs::home_dir().map(|home| home.join(".aws").join(default)),
        }
    }

    fn credentials_file(&self) -> Option<PathBuf> {
        match self.file {
            Some(path) => Some(expand_home(path)),
            None => self.file("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
        }
    }

    fn config_file(&self) -> Option<PathBuf> {
        self.file("AWS_CONFIG_FILE", "config")
    }

    /// The credentials, or what to do to have some.
    pub fn credentials(&self) -> Result<AwsCredentials, String> {
        if self.file.is_none()
            && let Some(id) = self.var(AWS_ACCESS_KEY_ID_ENV)
        {
            let Some(secret) = self.var(AWS_SECRET_ACCESS_KEY_ENV) else {
                return Err(format!(
                    "{AWS_ACCESS_KEY_ID_ENV} is set but {AWS_SECRET_ACCESS_KEY_ENV} is not"
                ));
            };
            return Ok(AwsCredentials {
                access_key_id: id,
                secret_access_key: ApiKey::new(secret),
                session_token: self.var(AWS_SESSION_TOKEN_ENV).map(ApiKey::new),
                origin: "the environment".to_owned(),
            });
        }
        let profile = self.profile();
        let files = [
            (self.credentials_file(), profile.clone()),
            (
                self.config_file(),
                if profile == "default" {
                    profile.clone()
                } else {
                    format!("profile {profile}")
                },
            ),
        ];
        for (path, section) in files {
            let Some(path) = path else { continue };
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let sections = parse_ini(&text);
            let Some(values) = sections.get(&section) else {
                continue;
            };
            let shown = path.display();
            if let (Some(id), Some(secret)) = (
                values.get("aws_access_key_id"),
                values.get("aws_secret_access_key"),
            ) {
                return Ok(AwsCredentials {
                    access_key_id: id.clone(),
                    secret_access_key: ApiKey::new(secret.clone()),
                    session_token: values.get("aws_session_token").cloned().map(ApiKey::new),
                    origin: format!("profile '{profile}' of {shown}"),
                });
            }
            let dynamic = [
                "sso_session",
                "sso_start_url",
                "role_arn",
                "credential_process",
            ];
            if let Some(how) = dynamic.iter().find(|k| values.contains_key(**k)) {
                return Err(format!(
                    "profile '{profile}' of {shown} gets its keys through `{how}`, which crow does \
                     not run: export them first (`eval \"$(aws configure export-credentials \
                     --profile {profile} --format env)\"`)"
                ));
            }
        }
        Err(format!(
            "no AWS credentials: set {AWS_ACCESS_KEY_ID_ENV} and {AWS_SECRET_ACCESS_KEY_ENV} (and \
             {AWS_SESSION_TOKEN_ENV} for temporary ones), or give profile '{profile}' keys in \
             ~/.aws/credentials (`aws configure`)"
        ))
    }

    /// The region: `AWS_REGION`, `AWS_DEFAULT_REGION`, else the profile's in the config file.
    pub fn region(&self) -> Option<String> {
        if let Some(region) = self
            .var("AWS_REGION")
            .or_else(|| self.var("AWS_DEFAULT_REGION"))
        {
            return Some(region);
        }
        let profile = self.profile();
        let section = if profile == "default" {
            profile
        } else {
            format!("profile {profile}")
        };
        let text = std::fs::read_to_string(self.config_file()?).ok()?;
        parse_ini(&text).get(&section)?.get("region").cloned()
    }
}

/// The sections of an AWS shared file: `[name]` → `key = value` (keys lower-cased, comments
/// and indented continuation lines skipped).
fn parse_ini(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut sections: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue; // a nested (s3 = …) setting's lines
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            sections.entry(name.clone()).or_default();
            current = Some(name);
            continue;
        }
        if let (Some(section), Some((key, value))) = (&current, line.split_once('='))
            && let Some(values) = sections.get_mut(section)
        {
            values.insert(key.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(env: &'a dyn Fn(&str) -> Option<String>, profile: Option<&'a str>) -> Lookup<'a> {
        Lookup {
            env,
            profile,
            file: None,
        }
    }

    #[test]
    fn the_environment_comes_first() {
        let env = |name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("AKIDENV".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("secret".to_owned()),
            "AWS_SESSION_TOKEN" => Some("tok".to_owned()),
            "AWS_REGION" => Some("eu-west-1".to_owned()),
            _ => None,
        };
        let creds = lookup(&env, None).credentials().unwrap();
        assert_eq!(creds.access_key_id, "AKIDENV");
        assert_eq!(creds.secret_access_key.expose(), "secret");
        assert_eq!(creds.session_token.unwrap().expose(), "tok");
        assert_eq!(lookup(&env, None).region().as_deref(), Some("eu-west-1"));
        let half = |name: &str| (name == "AWS_ACCESS_KEY_ID").then(|| "AKID".to_owned());
        let err = lookup(&half, None).credentials().unwrap_err();
        assert!(err.contains("AWS_SECRET_ACCESS_KEY"), "{err}");
    }

    #[test]
    fn profiles_of_both_shared_files() {
        let dir = tempfile::tempdir().unwrap();
        let credentials = dir.path().join("credentials");
        let config = dir.path().join("config");
        std::fs::write(
            &credentials,
            "# keys\n[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = s1\n\n[work]\naws_access_key_id=AKIDWORK\naws_secret_access_key=s2\naws_session_token = t2\n",
        )
        .unwrap();
        std::fs::write(
            &config,
            "[default]\nregion = us-west-2\n[profile cfg]\nregion = ap-south-1\ns3 =\n  max_concurrent_requests = 2\naws_access_key_id = AKIDCFG\naws_secret_access_key = s3\n[profile sso]\nsso_session = corp\n",
        )
        .unwrap();
        let (c, f) = (
            credentials.display().to_string(),
            config.display().to_string(),
        );
        let env = move |name: &str| match name {
            "AWS_SHARED_CREDENTIALS_FILE" => Some(c.clone()),
            "AWS_CONFIG_FILE" => Some(f.clone()),
            _ => None,
        };
        let default = lookup(&env, None);
        assert_eq!(default.credentials().unwrap().access_key_id, "AKIDDEFAULT");
        assert_eq!(default.region().as_deref(), Some("us-west-2"));
        let work = lookup(&env, Some("work")).credentials().unwrap();
        assert_eq!(work.access_key_id, "AKIDWORK");
        assert_eq!(work.session_token.as_ref().unwrap().expose(), "t2");
        assert!(!format!("{work:?}").contains("s2"));
        let cfg = lookup(&env, Some("cfg"));
        assert_eq!(cfg.credentials().unwrap().access_key_id, "AKIDCFG");
        assert_eq!(cfg.region().as_deref(), Some("ap-south-1"));
        let sso = lookup(&env, Some("sso")).credentials().unwrap_err();
        assert!(
            sso.contains("sso_session") && sso.contains("export-credentials"),
            "{sso}"
        );
        let none = lookup(&env, Some("nobody")).credentials().unwrap_err();
        assert!(
            none.contains("AWS_ACCESS_KEY_ID") && none.contains("'nobody'"),
            "{none}"
        );
        // AWS_PROFILE picks the profile when the setting does not.
        let c = credentials.display().to_string();
        let by_var = move |name: &str| match name {
            "AWS_SHARED_CREDENTIALS_FILE" => Some(c.clone()),
            "AWS_PROFILE" => Some("work".to_owned()),
            _ => None,
        };
        assert_eq!(
            lookup(&by_var, None).credentials().unwrap().access_key_id,
            "AKIDWORK"
        );
    }
}
