//! Provider programs (sign-in, sign-out, status check) as runs like any
//! other; a sign-in's link is read from its pipes by
//! [`super::signin_link`].
//!
//! Guarantees:
//! - a [`ProviderRun`] can only be built from a [`RunAs`] that the Cloud
//!   named for that very kind of run, and it runs only through the launcher
//!   (`launch_as`, the path of every tool call), as that user, never as root;
//! - a sign-in's link and code come only from what the program wrote to the
//!   pipes the worker holds, never from a file; reading is bounded in bytes
//!   ([`SignInLimits::max_bytes`]) and time ([`SignInLimits::wait`]);
//! - the first link printed is judged ([`LinkScanner`]), and a
//!   [`SignInPrompt`] is returned only when it passes; any other link ends
//!   the sign-in (its processes are killed) with its own [`SignInError`];
//! - a refused sign-in is killed and reaped before the error is returned;
//!   dropping a [`SignInSession`] kills the sign-in's processes too.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::run_as::{RunAs, RunKind};
use super::signin_error::SignInError;
use super::signin_link::{LinkScanner, SignInPrompt, DEFAULT_MAX_BYTES};
use crate::audit::{AuditLog, RecordKind};
use crate::classify::Verdict;
use crate::contain::AppliedLimits;
use crate::drop::launch_as::{launch_as, outcome_of};
use crate::drop::outcome::Outcome;
use crate::drop::receipt::outcome_receipt;
use crate::drop::spawn::{Finished, Input, Output};
use crate::drop::Launcher;
use crate::drop::RunOptions;
use crate::env::provider::{Provider, ProviderSpec};
use crate::env::{EnvBuilder, EnvConfig, RunEnv};
use crate::launch::plan::{Action, ExecPlan};
use crate::launch::report::LaunchError;
use crate::user::TargetUser;

/// Default time a sign-in has to print its link and code.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);
/// Default time the sign-in may then wait for the person to finish.
pub const DEFAULT_SESSION: Duration = Duration::from_secs(15 * 60);

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
    /// What the run's environment and network come from.
    run_env: RunEnv,
    audit: Option<Arc<AuditLog>>,
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
        // The network of a provider run is the config's (else `proxy` if a
        // proxy is configured, else `host`), as for a tool call.
        let network = RunOptions {
            env: run_env.clone(),
            ..RunOptions::default()
        }
        .network_mode()
        .map_err(|e| SignInError::Setup(e.to_string()))?;
        let env = EnvBuilder::for_run(&target, &run_env, network)
            .map_err(|e| SignInError::Setup(e.to_string()))?
            .build();
        Ok(Self {
            target,
            spec,
            action,
            exec: ExecPlan {
                argv: program,
                cwd: None,
                env: env.into(),
                secrets: Vec::new(),
                upstream_ca: None,
            },
            run_env,
            audit: None,
        })
    }

    /// The same run, leaving a receipt in `log` when it ends.
    pub fn with_audit(mut self, log: Arc<AuditLog>) -> Self {
        self.audit = Some(log);
        self
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
        let started = Instant::now();
        let verdict = provider_verdict();
        let tool = Some(format!("provider {}", self.action.name()));
        let options = RunOptions {
            timeout,
            env: self.run_env.clone(),
            provider_program: true,
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
        let outcome = outcome_of(&verdict, tool, &self.target, launched);
        leave_receipt(self.audit.as_ref(), &self.target, &outcome, started);
        outcome
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
        let started = Instant::now();
        let mut scanner = LinkScanner::new(&self.spec, limits.max_bytes);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let options = RunOptions {
            timeout: limits.session,
            input: Input::Null,
            output: Output::Capture(limits.max_bytes),
            env: self.run_env.clone(),
            provider_program: true,
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
            audit: self.audit,
            started,
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
                let audit = session.audit.take();
                let target = session.target.clone();
                session.stop().await;
                let error = LaunchError::new(
                    crate::launch::report::Stage::Launcher,
                    e.code(),
                    e.to_string(),
                );
                let outcome = Outcome::not_run(
                    &provider_verdict(),
                    Some("provider sign-in".into()),
                    Some(error),
                );
                leave_receipt(audit.as_ref(), &target, &outcome, started);
                Err(e)
            }
        }
    }
}

/// Appends the receipt of a provider run to `audit`, if any; a failure is
/// logged (the run has already happened).
fn leave_receipt(
    audit: Option<&Arc<AuditLog>>,
    target: &TargetUser,
    outcome: &Outcome,
    started: Instant,
) {
    if let Some(log) = audit {
        let record = outcome_receipt(RecordKind::Provider, target, outcome, started.elapsed());
        if let Err(e) = log.append(record) {
            tracing::error!(error = %e, "a provider run's receipt could not be written");
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
    audit: Option<Arc<AuditLog>>,
    started: Instant,
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
        if let Some(log) = self.audit.take() {
            let error = LaunchError::new(
                crate::launch::report::Stage::Launcher,
                "stopped",
                "the worker stopped the sign-in",
            );
            let outcome = Outcome::not_run(
                &provider_verdict(),
                Some("provider sign-in".into()),
                Some(error),
            );
            leave_receipt(Some(&log), &self.target, &outcome, self.started);
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
        let outcome = outcome_of(&verdict, tool, &self.target, done);
        leave_receipt(
            self.audit.take().as_ref(),
            &self.target,
            &outcome,
            self.started,
        );
        outcome
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
