//! Why a provider program did not run, or a sign-in gave no prompt: one
//! variant each, with a stable machine-readable code.
#![forbid(unsafe_code)]

use std::time::Duration;

use super::run_as::RunKind;
use crate::launch::report::LaunchError;

/// Why a provider program did not run, or a sign-in gave no prompt. Each
/// has its own [`code`](SignInError::code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignInError {
    /// The run was not resolved for this kind of provider run.
    #[error("this user was resolved for a {resolved:?} run, not a {wanted:?}")]
    WrongRun {
        /// What the Cloud was asked about.
        resolved: RunKind,
        /// What is being started.
        wanted: RunKind,
    },
    /// The Cloud's answer does not let this run bring a login into a home.
    #[error("the Cloud's answer does not let this run bring a login into a home")]
    LoginNotAllowed,
    /// The provider has no such program.
    #[error("provider {0} has no {1} program")]
    NoProgram(&'static str, &'static str),
    /// The run's user or environment is not usable.
    #[error("{0}")]
    Setup(String),
    /// The launcher refused or failed.
    #[error("the launch failed: {0}")]
    Launch(LaunchError),
    /// A link that is not a URL.
    #[error("the sign-in printed a link that is not a valid URL: {0}")]
    LinkUnparsable(String),
    /// `http:` instead of `https:`.
    #[error("the sign-in link {0} is not https")]
    LinkNotHttps(String),
    /// Another scheme (`javascript:`, `data:`, `file:` …).
    #[error("the sign-in link uses scheme {0:?}; only https is accepted")]
    LinkScheme(String),
    /// A user name or password before the host.
    #[error("the sign-in link {0} has userinfo: the host is what follows the '@'")]
    LinkUserinfo(String),
    /// An explicit, non-default port.
    #[error("the sign-in link {0} names a port")]
    LinkPort(String),
    /// A punycode (IDNA) label: a look-alike of the real host.
    #[error(
        "the sign-in link's host {0} is an internationalized (punycode) name, not the provider's"
    )]
    LinkIdna(String),
    /// An allowed host followed by more labels.
    #[error(
        "the sign-in link's host {host} only begins with {allowed}: it belongs to someone else"
    )]
    LinkHostPrefix {
        /// The host.
        host: String,
        /// The allowed host it begins with.
        allowed: String,
    },
    /// Another host.
    #[error("the sign-in link's host {host} is not one of the provider's sign-in hosts {allowed:?}{where_}")]
    LinkHost {
        /// The host.
        host: String,
        /// The allowed hosts.
        allowed: Vec<String>,
        /// Where an allowed host does appear, if anywhere.
        where_: String,
    },
    /// The program ended without printing a link.
    #[error("the sign-in ended without printing a link ({0})")]
    NoLink(String),
    /// The program printed a link but no code, and ended.
    #[error("the sign-in printed a link but no user code ({0})")]
    NoCode(String),
    /// Neither link nor code came in time.
    #[error("the sign-in printed no link and code within {0:?}; it was stopped")]
    TimedOut(Duration),
    /// More output than allowed came before the link and code.
    #[error("the sign-in wrote over {0} bytes without a link and code; it was stopped")]
    TooMuchOutput(usize),
}

impl SignInError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::WrongRun { .. } => "wrong_run",
            Self::LoginNotAllowed => "login_not_allowed",
            Self::NoProgram(..) => "no_program",
            Self::Setup(_) => "setup_failed",
            Self::Launch(_) => "launch_failed",
            Self::LinkUnparsable(_) => "link_unparsable",
            Self::LinkNotHttps(_) => "link_not_https",
            Self::LinkScheme(_) => "link_scheme",
            Self::LinkUserinfo(_) => "link_userinfo",
            Self::LinkPort(_) => "link_port",
            Self::LinkIdna(_) => "link_idna",
            Self::LinkHostPrefix { .. } => "link_host_prefix",
            Self::LinkHost { .. } => "link_host",
            Self::NoLink(_) => "no_link",
            Self::NoCode(_) => "no_code",
            Self::TimedOut(_) => "timed_out",
            Self::TooMuchOutput(_) => "too_much_output",
        }
    }
}
