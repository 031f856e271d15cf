//! One tool call as the worker asks for it ([`DropRequest`]), the options
//! it runs with ([`RunOptions`]), and the secrets its turn grants
//! ([`SecretGrant`]).
#![forbid(unsafe_code)]

use std::time::Duration;

use super::spawn::{Input, Output};
use super::start::Launcher;
use crate::audit::AuditLog;
use crate::classify::Policy;
use crate::env::{HomeMode, HomeView, Network, RunEnv};
use crate::keys::SecretName;
use crate::launch::plan::Limits;
use crate::launch::report::{LaunchError, Stage};
use crate::user::{AllottedRange, TargetUser};

/// Default per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default cap on each of stdout and stderr.
pub const DEFAULT_MAX_OUTPUT: usize = 1024 * 1024;
/// Default cap on what `read_file` returns.
pub const DEFAULT_READ_MAX: u64 = 1024 * 1024;

/// A secret the turn allows, and how it reaches the program: as the value
/// of a variable, or as a file in the call's own `$CREDENTIALS_DIRECTORY`
/// (optionally with a variable that holds the file's path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretGrant {
    /// The secret's name in the user's store.
    pub name: SecretName,
    /// The environment variable that receives it: its value, or, for a
    /// file, the file's path.
    pub env: Option<String>,
    /// The file's name in `$CREDENTIALS_DIRECTORY`, for a secret given as
    /// a file.
    pub file: Option<String>,
}

impl SecretGrant {
    /// Parses a grant:
    ///
    /// - `NAME`: the value in the variable `NAME`;
    /// - `NAME=ENV`: the value in the variable `ENV`;
    /// - `NAME=@` or `NAME=@FILE`: the value as the file `NAME` (or `FILE`)
    ///   in `$CREDENTIALS_DIRECTORY`;
    /// - `NAME=ENV@` or `NAME=ENV@FILE`: that file, and `ENV` holds its
    ///   path (the `NAME_FILE` convention: `GOOGLE_APPLICATION_CREDENTIALS`,
    ///   `PGPASSFILE`).
    ///
    /// `@` because no variable name holds one, and it reads as curl's
    /// `@file`: "the contents of a file".
    pub fn parse(spec: &str) -> Result<Self, String> {
        let (name, to) = spec.split_once('=').unwrap_or((spec, spec));
        let name = SecretName::parse(name).map_err(|e| e.to_string())?;
        let (env, file) = match to.split_once('@') {
            None => (Some(to), None),
            Some((env, file)) => {
                let file = if file.is_empty() { name.as_str() } else { file };
                crate::launch::credentials::valid_file_name(file)?;
                ((!env.is_empty()).then_some(env), Some(file.to_owned()))
            }
        };
        if let Some(env) = env {
            crate::env::valid_env_name(env)?;
        }
        Ok(Self {
            name,
            env: env.map(str::to_owned),
            file,
        })
    }

    /// What the program gets, for people: `$ENV`, or
    /// `$CREDENTIALS_DIRECTORY/FILE` (and `$ENV` holding that path).
    pub fn delivery(&self) -> String {
        match (&self.env, &self.file) {
            (Some(env), None) => format!("${env}"),
            (None, Some(file)) => format!("the file $CREDENTIALS_DIRECTORY/{file}"),
            (Some(env), Some(file)) => {
                format!("the file $CREDENTIALS_DIRECTORY/{file} (its path in ${env})")
            }
            (None, None) => "nothing".into(),
        }
    }
}

/// Per-call options.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The longest a call may run (a call's own `timeout_ms` can only lower it).
    pub timeout: Duration,
    /// The program's stdin.
    pub input: Input,
    /// Capture or pass through the program's output.
    pub output: Output,
    /// Resource limits.
    pub limits: Limits,
    /// Run the call in its own cgroup (killed as a whole when it ends).
    pub cgroup: bool,
    /// `pids.max` of the call's cgroup, where the pids controller exists.
    pub pids_max: u64,
    /// The call's memory limit: its memory cgroup's where that controller
    /// exists, else `RLIMIT_AS`.
    pub memory_max: u64,
    /// What the program's environment is made of, beside its user.
    pub env: RunEnv,
    /// Where the call's receipt goes; with a log, a call runs only while
    /// the log can be written.
    pub audit: Option<std::sync::Arc<AuditLog>>,
    /// The uids and gids the call may run as.
    pub allotted: AllottedRange,
    /// What a program or file tool sees: its own namespaces, with the key
    /// store hidden, only its own processes, and its output masked
    /// (`Private`, the default), or the host's (`Shared`).
    pub view: crate::launch::view::View,
    /// The call's network (`none`, `proxy`, `host`); `None` leaves it to
    /// the config, else `proxy` if a proxy is configured and `host` if not
    /// ([`crate::env::EnvConfig::network_for`]). A call of the shared view
    /// has the host's.
    pub network: Option<Network>,
    /// What the call's writes to the home become (private view only);
    /// `None` leaves it to the env config, else `ephemeral` — and, in the
    /// shared view, `persistent`, the only home it has
    /// ([`RunOptions::home_view`]).
    pub home: Option<HomeMode>,
    /// A provider's own program (sign-in, sign-out, status): it sees the
    /// real home and its login folder, which tool calls never see.
    pub provider_program: bool,
    /// Bindings of root's config narrowed for these calls: secret name and
    /// the hosts it keeps ([`crate::env::Binding::narrowed`]).
    pub narrow: Vec<(String, Vec<String>)>,
}

impl RunOptions {
    /// The home the call gets: the call's mode, else the env config's for
    /// `user`, else `ephemeral`; the store, every provider's login folder
    /// and the config's hidden paths covered. The shared view has the real
    /// home: a call of it that asks for another mode is refused
    /// (`home_needs_private_view`; it has no mount namespace to make one
    /// in, and nothing falls back); the config's mode is the private
    /// view's.
    pub fn home_view(&self, user: &str) -> Result<HomeView, LaunchError> {
        let config = &self.env.config;
        let logins = || {
            crate::env::Provider::ALL
                .iter()
                .map(|p| config.provider(*p).login_dir)
                .collect::<Vec<String>>()
        };
        if self.provider_program {
            return Ok(HomeView {
                plain: logins(),
                ..HomeView::persistent()
            });
        }
        if self.view == crate::launch::view::View::Shared {
            // The config's mode is for the private view; only a mode the
            // call itself asks for can be one the shared view cannot make.
            return match self.home {
                None | Some(HomeMode::Persistent) => Ok(HomeView::persistent()),
                Some(other) => Err(LaunchError::new(
                    Stage::Plan,
                    "home_needs_private_view",
                    format!(
                        "home {other} needs the private view (a mount namespace of the call's own); \
                         the shared view has the real home: ask for --home persistent or --view private"
                    ),
                )),
            };
        }
        let chosen = self.home.or_else(|| config.home_for(user));
        let mut hidden = logins();
        hidden.extend(config.hidden_in_home.iter().cloned());
        hidden.sort();
        hidden.dedup();
        Ok(HomeView {
            mode: chosen.unwrap_or_default(),
            hidden,
            plain: Vec::new(),
        })
    }

    /// The network the call gets (see [`RunOptions::network`]): a mode
    /// other than `host` for a call of the shared view is refused, as is
    /// `proxy` with no proxy configured.
    pub fn network_mode(&self) -> Result<Network, LaunchError> {
        let invalid = |why: String| LaunchError::new(Stage::Plan, "network_invalid", why);
        if self.view == crate::launch::view::View::Shared {
            return match self.network {
                None | Some(Network::Host) => Ok(Network::Host),
                Some(other) => Err(invalid(format!(
                    "network {other} needs the private view; the shared view has the host's network"
                ))),
            };
        }
        self.env
            .config
            .network_for(self.network)
            .map_err(|e| invalid(e.to_string()))
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            input: Input::Null,
            output: Output::Capture(DEFAULT_MAX_OUTPUT),
            limits: Limits::default(),
            cgroup: true,
            pids_max: crate::contain::DEFAULT_PIDS_MAX,
            memory_max: crate::contain::DEFAULT_MEMORY_MAX,
            env: RunEnv::default(),
            audit: None,
            allotted: AllottedRange::default(),
            view: crate::launch::view::View::default(),
            network: None,
            home: None,
            provider_program: false,
            narrow: Vec::new(),
        }
    }
}

/// One tool call to run.
#[derive(Debug, Clone)]
pub struct DropRequest<'a> {
    /// The launcher to start.
    pub launcher: &'a Launcher,
    /// Tool names and kinds.
    pub policy: &'a Policy,
    /// Who it runs as.
    pub user: &'a TargetUser,
    /// The secrets the turn allows; a call may ask for any of these.
    pub grants: &'a [SecretGrant],
    /// The raw tool call, `{"tool": …, "args": {…}}`.
    pub call: &'a [u8],
    /// Options.
    pub options: RunOptions,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(spec: &str) -> (Option<String>, Option<String>) {
        let g = SecretGrant::parse(spec).unwrap();
        (g.env, g.file)
    }

    #[test]
    fn a_grant_is_a_variable_or_a_file_and_its_path_variable() {
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(grant("tok"), (s("tok"), None));
        assert_eq!(grant("tok=GH_TOKEN"), (s("GH_TOKEN"), None));
        assert_eq!(grant("deploy_key=@"), (None, s("deploy_key")));
        assert_eq!(grant("deploy_key=@id_ed25519"), (None, s("id_ed25519")));
        assert_eq!(
            grant("gsa=GOOGLE_APPLICATION_CREDENTIALS@"),
            (s("GOOGLE_APPLICATION_CREDENTIALS"), s("gsa"))
        );
        assert_eq!(
            grant("gsa=GOOGLE_APPLICATION_CREDENTIALS@sa.json"),
            (s("GOOGLE_APPLICATION_CREDENTIALS"), s("sa.json"))
        );
        let g = SecretGrant::parse("gsa=GOOGLE_APPLICATION_CREDENTIALS@sa.json").unwrap();
        assert_eq!(
            g.delivery(),
            "the file $CREDENTIALS_DIRECTORY/sa.json (its path in $GOOGLE_APPLICATION_CREDENTIALS)"
        );
    }

    #[test]
    fn a_file_grant_names_one_file_and_a_valid_variable() {
        for bad in [
            "k=@..",
            "k=@.",
            "k=@a/b",
            "k=@../etc/passwd",
            "k=@a b",
            "k==@f",
        ] {
            let e = SecretGrant::parse(bad).unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
        let e = SecretGrant::parse("k=@a/b").unwrap_err();
        assert!(e.contains("is not one file name"), "{e}");
        // Two '@': the second is part of the file name, which refuses it.
        assert!(SecretGrant::parse("k=A@b@c").is_err());
    }
}
