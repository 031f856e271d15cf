//! The inference providers whose CLIs run for a user: where each keeps its
//! login inside the home, which hosts its sign-in links may point to, and
//! which programs sign in, sign out and check status.
//!
//! Guarantees: the table is data, loaded or built in; a provider's login
//! location is always a path inside the user's own home; its sign-in hosts
//! are exact lowercase DNS names (no wildcard, no suffix match).
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

/// A provider, by the name agents are configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI, through the Codex CLI.
    Openai,
    /// Anthropic, through the Claude Code CLI.
    Anthropic,
    /// Anthropic models on AWS Bedrock, through the Claude Code CLI.
    Bedrock,
}

impl Provider {
    /// Every provider.
    pub const ALL: [Provider; 3] = [Self::Openai, Self::Anthropic, Self::Bedrock];

    /// Parses a provider name (`openai`, `anthropic`, `bedrock`).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The provider's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
            Self::Bedrock => "bedrock",
        }
    }
}

/// What the worker knows of one provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSpec {
    /// The variable that tells the CLI where its login lives.
    pub login_var: String,
    /// That location, relative to the home (one or more plain components).
    pub login_dir: String,
    /// Fixed variables the CLI needs (never secrets).
    #[serde(default)]
    pub fixed_env: Vec<(String, String)>,
    /// Hosts a sign-in link may point to, exactly.
    #[serde(default)]
    pub sign_in_hosts: Vec<String>,
    /// Whether the sign-in prints a user code beside the link.
    #[serde(default)]
    pub sign_in_code: bool,
    /// The sign-in program (absent: the provider has no interactive sign-in).
    #[serde(default)]
    pub sign_in: Option<Vec<String>>,
    /// The sign-out program.
    #[serde(default)]
    pub sign_out: Option<Vec<String>>,
    /// The status-check program.
    #[serde(default)]
    pub status: Option<Vec<String>>,
}

fn argv(words: &[&str]) -> Option<Vec<String>> {
    Some(words.iter().map(|w| (*w).to_owned()).collect())
}

impl ProviderSpec {
    /// The built-in entry for `provider`.
    pub fn builtin(provider: Provider) -> Self {
        match provider {
            Provider::Openai => Self {
                login_var: "CODEX_HOME".into(),
                login_dir: ".codex".into(),
                fixed_env: Vec::new(),
                sign_in_hosts: vec!["auth.openai.com".into()],
                sign_in_code: true,
                sign_in: argv(&["codex", "login", "--device-auth"]),
                sign_out: argv(&["codex", "logout"]),
                status: argv(&["codex", "login", "status"]),
            },
            Provider::Anthropic => Self {
                login_var: "CLAUDE_CONFIG_DIR".into(),
                login_dir: ".claude".into(),
                fixed_env: Vec::new(),
                sign_in_hosts: vec!["claude.ai".into(), "console.anthropic.com".into()],
                sign_in_code: false,
                sign_in: argv(&["claude", "setup-token"]),
                sign_out: argv(&["claude", "auth", "logout"]),
                status: argv(&["claude", "auth", "status"]),
            },
            Provider::Bedrock => Self {
                login_var: "CLAUDE_CONFIG_DIR".into(),
                login_dir: ".claude".into(),
                fixed_env: vec![("CLAUDE_CODE_USE_BEDROCK".into(), "1".into())],
                // Bedrock signs in with the worker's AWS settings, not a link.
                sign_in_hosts: Vec::new(),
                sign_in_code: false,
                sign_in: None,
                sign_out: None,
                status: argv(&["claude", "auth", "status"]),
            },
        }
    }

    /// Checks the entry: a plain relative login folder, exact host names.
    pub fn check(&self) -> Result<(), String> {
        super::name::valid_env_name(&self.login_var)?;
        let plain = |c: &str| !c.is_empty() && c != "." && c != ".." && !c.contains('\0');
        if self.login_dir.starts_with('/') || !self.login_dir.split('/').all(plain) {
            return Err(format!(
                "login folder {:?} is not a plain path inside the home",
                self.login_dir
            ));
        }
        for host in &self.sign_in_hosts {
            let ok = !host.is_empty()
                && host.len() <= 253
                && host.split('.').all(|l| {
                    !l.is_empty()
                        && !l.starts_with('-')
                        && l.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                });
            if !ok {
                return Err(format!(
                    "sign-in host {host:?} is not an exact lowercase DNS name"
                ));
            }
        }
        for program in [&self.sign_in, &self.sign_out, &self.status]
            .into_iter()
            .flatten()
        {
            if program.is_empty() {
                return Err("a provider program has an empty argv".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_table_checks_and_names_round_trip() {
        for p in Provider::ALL {
            ProviderSpec::builtin(p).check().unwrap();
            assert_eq!(Provider::parse(p.name()), Some(p));
        }
        assert_eq!(Provider::parse("OpenAI"), None);
    }

    #[test]
    fn bad_entries_are_refused() {
        let mut s = ProviderSpec::builtin(Provider::Openai);
        s.login_dir = "../root".into();
        assert!(s.check().is_err());
        let mut s = ProviderSpec::builtin(Provider::Openai);
        s.sign_in_hosts = vec!["*.openai.com".into()];
        assert!(s.check().is_err());
        let mut s = ProviderSpec::builtin(Provider::Openai);
        s.sign_in_hosts = vec!["Auth.OpenAI.com".into()];
        assert!(s.check().is_err());
        let mut s = ProviderSpec::builtin(Provider::Openai);
        s.login_var = "A=B".into();
        assert!(s.check().is_err());
    }
}
