//! Provider programs (sign-in, sign-out, status check) as runs like any
//! other, and sign-in links read only from the sign-in's own output pipes.
//!
//! Guarantees:
//! - a [`ProviderRun`] can only be built from a [`RunAs`] that the Cloud
//!   named for that very kind of run, and it runs only through the launcher
//!   (`launch_as`, the path of every tool call), as that user, never as root;
//! - a sign-in's link and code come only from what the program wrote to the
//!   pipes the worker holds, never from a file; reading is bounded in bytes
//!   ([`SignInLimits::max_bytes`]) and time ([`SignInLimits::wait`]);
//! - a link counts only once its line is complete (a newline or the end of
//!   the output), so a link written in two pieces is judged whole;
//! - the first link printed is judged, and a [`SignInPrompt`] is returned
//!   only when it is `https`, has no userinfo and no explicit port, and its
//!   host is exactly one of the provider's sign-in hosts; any other link ends
//!   the sign-in (its processes are killed) with its own [`SignInError`];
//! - a refused sign-in is killed and reaped before the error is returned;
//!   dropping a [`SignInSession`] kills the sign-in's processes too.
#![forbid(unsafe_code)]

use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::run_as::{RunAs, RunKind};
use crate::classify::Verdict;
use crate::contain::AppliedLimits;
use crate::drop::launch_as::{launch_as, outcome_of};
use crate::drop::outcome::Outcome;
use crate::drop::spawn::{Finished, Input, Output, Stream};
use crate::drop::Launcher;
use crate::drop::RunOptions;
use crate::env::provider::{Provider, ProviderSpec};
use crate::env::{EnvBuilder, EnvConfig, RunEnv};
use crate::launch::plan::{Action, ExecPlan};
use crate::launch::report::LaunchError;
use crate::user::TargetUser;

/// Default time a sign-in has to print its link and code.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);
/// Default cap on what is read while looking for the link.
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024;
/// Default time the sign-in may then wait for the person to finish.
pub const DEFAULT_SESSION: Duration = Duration::from_secs(15 * 60);
/// The longest token taken for a user code.
const MAX_CODE_LEN: usize = 40;

/// Bounds of a sign-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignInLimits {
    /// How long to wait for the link and code.
    pub wait: Duration,
    /// How many bytes of output to read while waiting.
    pub max_bytes: usize,
    /// How long the whole sign-in may run.
    pub session: Duration,
}

impl Default for SignInLimits {
    fn default() -> Self {
        Self {
            wait: DEFAULT_WAIT,
            max_bytes: DEFAULT_MAX_BYTES,
            session: DEFAULT_SESSION,
        }
    }
}

/// What the person is shown: a checked link and the code to enter there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignInPrompt {
    /// The verification link, as parsed and checked.
    pub url: String,
    /// The user code, when the provider prints one.
    pub code: Option<String>,
}

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

/// Judges one link against the provider's sign-in hosts.
pub fn check_link(text: &str, hosts: &[String]) -> Result<String, SignInError> {
    let url =
        url::Url::parse(text).map_err(|e| SignInError::LinkUnparsable(format!("{text:?}: {e}")))?;
    match url.scheme() {
        "https" => {}
        "http" => return Err(SignInError::LinkNotHttps(url.to_string())),
        other => return Err(SignInError::LinkScheme(other.to_owned())),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(SignInError::LinkUserinfo(url.to_string()));
    }
    // `url` drops a default port (`:443`); one left is another port.
    if url.port().is_some() {
        return Err(SignInError::LinkPort(url.to_string()));
    }
    let host = match url.host() {
        Some(url::Host::Domain(d)) => d.to_owned(),
        Some(other) => other.to_string(),
        None => return Err(SignInError::LinkUnparsable(format!("{text:?} has no host"))),
    };
    if hosts.contains(&host) {
        return Ok(url.to_string());
    }
    if host.split('.').any(|label| label.starts_with("xn--")) {
        return Err(SignInError::LinkIdna(host));
    }
    if let Some(allowed) = hosts.iter().find(|h| {
        host.strip_prefix(h.as_str())
            .is_some_and(|rest| rest.len() > 1 && rest.starts_with('.'))
    }) {
        return Err(SignInError::LinkHostPrefix {
            host,
            allowed: allowed.clone(),
        });
    }
    let after_host = &url[url::Position::AfterPort..];
    let where_ = match hosts.iter().find(|h| after_host.contains(h.as_str())) {
        Some(h) => format!(" ({h} appears only in the path or query)"),
        None => String::new(),
    };
    Err(SignInError::LinkHost {
        host,
        allowed: hosts.to_vec(),
        where_,
    })
}

/// Removes terminal escape sequences (CSI, OSC, two-byte) and control
/// characters other than tab.
fn strip_escapes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            match chars.next() {
                Some('[') => {
                    // CSI: parameters, then one final byte in @..~.
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    // OSC: up to BEL or ESC '\'.
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' {
                            break;
                        }
                        if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                            chars.next();
                            break;
                        }
                    }
                }
                _ => {}
            }
        } else if c == '\t' || !c.is_control() {
            out.push(c);
        }
    }
    out
}

fn is_link(token: &str) -> bool {
    let lower = token.to_ascii_lowercase();
    lower.contains("://")
        || [
            "http:",
            "https:",
            "javascript:",
            "data:",
            "vbscript:",
            "file:",
            "ftp:",
        ]
        .iter()
        .any(|s| lower.starts_with(s))
}

fn is_code(token: &str) -> bool {
    let groups: Vec<&str> = token.split('-').collect();
    token.len() <= MAX_CODE_LEN
        && groups.len() >= 2
        && groups.iter().all(|g| {
            (3..=12).contains(&g.len())
                && g.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        })
}

/// Finds the link and code in a sign-in's output, one complete line at a
/// time, per stream.
#[derive(Debug)]
pub struct LinkScanner {
    hosts: Vec<String>,
    needs_code: bool,
    max_bytes: usize,
    seen: usize,
    pending: [Vec<u8>; 2],
    link: Option<String>,
    code: Option<String>,
}

impl LinkScanner {
    /// A scanner for `spec`'s sign-in, reading at most `max_bytes`.
    pub fn new(spec: &ProviderSpec, max_bytes: usize) -> Self {
        Self {
            hosts: spec.sign_in_hosts.clone(),
            needs_code: spec.sign_in_code,
            max_bytes,
            seen: 0,
            pending: [Vec::new(), Vec::new()],
            link: None,
            code: None,
        }
    }

    /// Takes one chunk of `stream`; a prompt once link and code are whole.
    pub fn feed(
        &mut self,
        stream: Stream,
        chunk: &[u8],
    ) -> Result<Option<SignInPrompt>, SignInError> {
        self.seen = self.seen.saturating_add(chunk.len());
        if self.seen > self.max_bytes {
            return Err(SignInError::TooMuchOutput(self.max_bytes));
        }
        let slot = match stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        };
        self.pending[slot].extend_from_slice(chunk);
        while let Some(end) = self.pending[slot].iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending[slot].drain(..=end).collect();
            self.line(&line)?;
        }
        Ok(self.prompt())
    }

    /// The output has ended: what is left is a last, complete line.
    pub fn finish(&mut self) -> Result<Option<SignInPrompt>, SignInError> {
        for slot in 0..2 {
            let rest = std::mem::take(&mut self.pending[slot]);
            self.line(&rest)?;
        }
        Ok(self.prompt())
    }

    fn line(&mut self, bytes: &[u8]) -> Result<(), SignInError> {
        let text = strip_escapes(&String::from_utf8_lossy(bytes));
        for raw in text.split_whitespace() {
            let token = raw
                .trim_start_matches(['<', '(', '[', '{', '"', '\''])
                .trim_end_matches(['>', ')', ']', '}', '"', '\'', '.', ',', ';', ':', '!', '?']);
            if self.link.is_none() && is_link(token) {
                self.link = Some(check_link(token, &self.hosts)?);
            } else if self.needs_code && self.code.is_none() && is_code(token) {
                self.code = Some(token.to_owned());
            }
        }
        Ok(())
    }

    fn prompt(&self) -> Option<SignInPrompt> {
        let url = self.link.clone()?;
        if self.needs_code && self.code.is_none() {
            return None;
        }
        Some(SignInPrompt {
            url,
            code: self.code.clone(),
        })
    }

    fn missing(&self, how: String) -> SignInError {
        if self.link.is_some() {
            SignInError::NoCode(how)
        } else {
            SignInError::NoLink(how)
        }
    }
}

/// Which provider program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderAction {
    /// Device sign-in.
    SignIn,
    /// Sign-out.
    SignOut,
    /// Status check.
    Status,
}

impl ProviderAction {
    fn run_kind(self) -> RunKind {
        match self {
            Self::SignIn => RunKind::SignIn,
            Self::SignOut => RunKind::SignOut,
            Self::Status => RunKind::StatusCheck,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::SignIn => "sign-in",
            Self::SignOut => "sign-out",
            Self::Status => "status",
        }
    }
}

/// A provider program, ready to run as the user the Cloud named for it.
#[derive(Debug, Clone)]
pub struct ProviderRun {
    target: TargetUser,
    spec: ProviderSpec,
    action: ProviderAction,
    exec: ExecPlan,
}

impl ProviderRun {
    /// Prepares `action` of `provider` for `run_as`, which must have been
    /// resolved for that kind of run (and, for a sign-in, allow bringing a
    /// login into the home).
    pub fn new(
        run_as: &RunAs,
        provider: Provider,
        action: ProviderAction,
        config: &std::sync::Arc<EnvConfig>,
    ) -> Result<Self, SignInError> {
        if run_as.kind() != action.run_kind() {
            return Err(SignInError::WrongRun {
                resolved: run_as.kind(),
                wanted: action.run_kind(),
            });
        }
        if action == ProviderAction::SignIn && !run_as.may_bring_login() {
            return Err(SignInError::LoginNotAllowed);
        }
        let spec = config.provider(provider);
        let program = match action {
            ProviderAction::SignIn => &spec.sign_in,
            ProviderAction::SignOut => &spec.sign_out,
            ProviderAction::Status => &spec.status,
        }
        .clone()
        .ok_or(SignInError::NoProgram(provider.name(), action.name()))?;
        let target = run_as
            .target()
            .map_err(|e| SignInError::Setup(e.to_string()))?;
        let run_env = RunEnv {
            config: config.clone(),
            provider: Some(provider),
            credential: None,
        };
        let env = EnvBuilder::for_run(&target, &run_env)
            .map_err(|e| SignInError::Setup(e.to_string()))?
            .build();
        Ok(Self {
            target,
            spec,
            action,
            exec: ExecPlan {
                argv: program,
                cwd: None,
                env,
                secrets: Vec::new(),
            },
        })
    }

    /// The user it runs as.
    pub fn target(&self) -> &TargetUser {
        &self.target
    }

    /// The environment the program gets.
    pub fn env(&self) -> &[(String, String)] {
        &self.exec.env
    }

    /// Runs a sign-out or status check to its end (within `timeout`).
    pub async fn run(self, launcher: &Launcher, timeout: Duration) -> Outcome {
        let verdict = provider_verdict();
        let tool = Some(format!("provider {}", self.action.name()));
        let options = RunOptions {
            timeout,
            ..RunOptions::default()
        };
        let launched = launch_as(
            launcher,
            &self.target,
            Action::Exec(self.exec),
            &options,
            timeout,
            None,
        )
        .await;
        outcome_of(&verdict, tool, &self.target, launched)
    }

    /// Starts a device sign-in and reads its link and code from its pipes.
    /// On success the program goes on running (waiting for the person) in
    /// the returned session; on any error it has been killed.
    pub async fn sign_in(
        self,
        launcher: &Launcher,
        limits: SignInLimits,
    ) -> Result<(SignInPrompt, SignInSession), SignInError> {
        if self.action != ProviderAction::SignIn {
            return Err(SignInError::WrongRun {
                resolved: self.action.run_kind(),
                wanted: RunKind::SignIn,
            });
        }
        let mut scanner = LinkScanner::new(&self.spec, limits.max_bytes);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let options = RunOptions {
            timeout: limits.session,
            input: Input::Null,
            output: Output::Capture(limits.max_bytes),
            ..RunOptions::default()
        };
        let launcher = launcher.clone();
        let target = self.target.clone();
        let action = Action::Exec(self.exec);
        let handle = tokio::spawn(async move {
            launch_as(
                &launcher,
                &target,
                action,
                &options,
                limits.session,
                Some(tx),
            )
            .await
        });
        let mut session = SignInSession {
            handle: Some(handle),
            target: self.target,
            done: None,
        };
        let deadline = tokio::time::Instant::now() + limits.wait;
        let found = loop {
            tokio::select! {
                chunk = rx.recv() => match chunk {
                    Some((stream, bytes)) => match scanner.feed(stream, &bytes) {
                        Ok(Some(prompt)) => break Ok(prompt),
                        Ok(None) => {}
                        Err(e) => break Err(e),
                    },
                    None => {
                        // The output has ended: the program exited.
                        let done = match session.finished().await {
                            Ok(done) => done,
                            Err(e) => break Err(e),
                        };
                        let found = scanner.finish().and_then(|prompt| {
                            prompt.ok_or_else(|| scanner.missing(describe(&done.0)))
                        });
                        session.done = Some(done);
                        break found;
                    }
                },
                _ = tokio::time::sleep_until(deadline) => {
                    break Err(SignInError::TimedOut(limits.wait));
                }
            }
        };
        match found {
            Ok(prompt) => Ok((prompt, session)),
            Err(e) => {
                session.stop().await;
                Err(e)
            }
        }
    }
}

fn provider_verdict() -> Verdict {
    Verdict::drop(
        "provider_program",
        "a provider program runs as its user through the launcher",
    )
}

fn describe(done: &Finished) -> String {
    match done
        .status
        .map(|s| (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)))
    {
        Some((Some(code), _)) => format!("it exited with status {code}"),
        Some((None, Some(sig))) => format!("it was killed by signal {sig}"),
        _ => "its exit status is unknown".into(),
    }
}

/// A sign-in that printed its prompt and may still be waiting for the
/// person. Dropping it kills the sign-in's processes.
#[derive(Debug)]
pub struct SignInSession {
    handle: Option<JoinHandle<Result<(Finished, AppliedLimits), LaunchError>>>,
    target: TargetUser,
    done: Option<(Finished, AppliedLimits)>,
}

impl SignInSession {
    async fn finished(&mut self) -> Result<(Finished, AppliedLimits), SignInError> {
        let handle = self
            .handle
            .take()
            .ok_or_else(|| SignInError::Setup("the sign-in was already awaited".into()))?;
        match handle.await {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(e)) => Err(SignInError::Launch(e)),
            Err(e) => Err(SignInError::Setup(format!("the sign-in task failed: {e}"))),
        }
    }

    /// Kills the sign-in and waits until its processes are reaped and its
    /// cgroup is gone.
    pub async fn stop(mut self) {
        if let Some(handle) = self.handle.take() {
            handle.abort();
            // Resolves once the aborted launch has been dropped, and with
            // it killed and reaped.
            let _ = handle.await;
        }
    }

    /// Waits for the sign-in to end (the person finished, or its session
    /// time ran out) and returns its outcome.
    pub async fn wait(mut self) -> Outcome {
        let verdict = provider_verdict();
        let tool = Some("provider sign-in".to_owned());
        let done = match self.done.take() {
            Some(done) => Ok(done),
            None => self.finished().await.map_err(|e| match e {
                SignInError::Launch(e) => e,
                other => LaunchError::new(
                    crate::launch::report::Stage::Launcher,
                    other.code(),
                    other.to_string(),
                ),
            }),
        };
        outcome_of(&verdict, tool, &self.target, done)
    }
}

impl Drop for SignInSession {
    fn drop(&mut self) {
        // Aborting the task drops the launch, whose guard kills and reaps
        // the program and empties its cgroup.
        if let Some(handle) = self.handle.take() {
            handle.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn openai() -> ProviderSpec {
        ProviderSpec::builtin(Provider::Openai)
    }

    fn scan(chunks: &[&str]) -> Result<Option<SignInPrompt>, SignInError> {
        let mut s = LinkScanner::new(&openai(), DEFAULT_MAX_BYTES);
        for c in chunks {
            if let Some(p) = s.feed(Stream::Stdout, c.as_bytes())? {
                return Ok(Some(p));
            }
        }
        s.finish()
    }

    #[test]
    fn links_are_judged_whole_and_exactly() {
        let good = "Open https://auth.openai.com/codex/device\nEnter code ABCD-12345\n";
        let p = scan(&[good]).unwrap().unwrap();
        assert_eq!(p.url, "https://auth.openai.com/codex/device");
        assert_eq!(p.code.as_deref(), Some("ABCD-12345"));
        let cases: &[(&str, &str)] = &[
            (
                "https://auth.openai.com.evil.example/x ABCD-12345\n",
                "link_host_prefix",
            ),
            (
                "https://evil.example/auth.openai.com ABCD-12345\n",
                "link_host",
            ),
            (
                "https://auth.openai.com@evil.example/ ABCD-12345\n",
                "link_userinfo",
            ),
            (
                "http://auth.openai.com/codex/device ABCD-12345\n",
                "link_not_https",
            ),
            ("https://xn--uth-8cd.openai.com/ ABCD-12345\n", "link_idna"),
            ("https://аuth.openai.com/ ABCD-12345\n", "link_idna"),
            ("javascript:alert(1) ABCD-12345\n", "link_scheme"),
            ("https://auth.openai.com:8443/x ABCD-12345\n", "link_port"),
            ("https://AUTH.OPENAI.COM./x ABCD-12345\n", "link_host"),
            ("https://[::1]/x ABCD-12345\n", "link_host"),
        ];
        for (text, code) in cases {
            assert_eq!(scan(&[text]).unwrap_err().code(), *code, "{text}");
        }
        // Uppercase and the default port normalise to the allowed host.
        let p = scan(&["https://AUTH.openai.com:443/d ABCD-12345\n"])
            .unwrap()
            .unwrap();
        assert_eq!(p.url, "https://auth.openai.com/d");
    }

    #[test]
    fn a_link_in_two_writes_is_judged_once_its_line_ends() {
        let split = [
            "Open https://auth.openai.com",
            ".evil.example/device\nABCD-12345\n",
        ];
        assert_eq!(scan(&split).unwrap_err().code(), "link_host_prefix");
        let benign = [
            "Open https://auth.openai.com/codex/dev",
            "ice\nABCD-12345\n",
        ];
        let p = scan(&benign).unwrap().unwrap();
        assert_eq!(p.url, "https://auth.openai.com/codex/device");
    }

    #[test]
    fn escapes_are_stripped_and_output_is_bounded() {
        let coloured = "\u{1b}[94mhttps://auth.openai.com/codex/device\u{1b}[0m\n\u{1b}]8;;x\u{7}ABCD-12345\u{1b}]8;;\u{1b}\\\n";
        let p = scan(&[coloured]).unwrap().unwrap();
        assert_eq!(p.url, "https://auth.openai.com/codex/device");
        assert_eq!(p.code.as_deref(), Some("ABCD-12345"));
        let mut s = LinkScanner::new(&openai(), 1000);
        let noise = "x".repeat(600);
        assert!(s.feed(Stream::Stdout, noise.as_bytes()).unwrap().is_none());
        assert_eq!(
            s.feed(Stream::Stderr, noise.as_bytes()).unwrap_err().code(),
            "too_much_output"
        );
    }

    #[test]
    fn a_link_without_a_code_is_not_a_prompt() {
        let mut s = LinkScanner::new(&openai(), DEFAULT_MAX_BYTES);
        assert!(s
            .feed(Stream::Stdout, b"https://auth.openai.com/d\n")
            .unwrap()
            .is_none());
        assert!(s.finish().unwrap().is_none());
        assert_eq!(s.missing("x".into()).code(), "no_code");
        // Anthropic prints no code: the link alone is the prompt.
        let mut a = LinkScanner::new(&ProviderSpec::builtin(Provider::Anthropic), 4096);
        let p = a
            .feed(
                Stream::Stderr,
                b"Visit https://claude.ai/oauth/authorize?x=1\n",
            )
            .unwrap()
            .unwrap();
        assert_eq!(p.code, None);
    }
}
