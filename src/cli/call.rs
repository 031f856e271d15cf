//! `run` (a program as the user, its exit code passed on) and `call` (one
//! JSON tool call from stdin, its outcome as JSON): both through
//! `drop_and_run` with the default policy, like any worker call.
//!
//! Guarantees: `run`'s program never holds this process's stdin, stdout or
//! stderr (under a terminal, the operator's terminal): it gets pipes that
//! this process feeds from its stdin and copies to its stdout and stderr
//! as bytes arrive, so in the private view all it writes passes the
//! launcher's masking relay; `run` ends when the program does.
#![forbid(unsafe_code)]

use std::time::Duration;

use serde_json::Value;

use super::args::{Command, UserArg};
use super::exit::{self, CliError};
use super::print_json;
use crate::classify::Policy;
use crate::drop::spawn::{Input, Output};
use crate::drop::{drop_and_run, DropRequest, Launcher, Outcome, RunOptions, SecretGrant};
use crate::launch::report::{LaunchError, Stage};
use crate::user::TargetUser;

/// Runs `run` or `call`.
pub(super) async fn command(command: Command, launcher: &Launcher) -> Result<i32, CliError> {
    let simple = |user: &UserArg| TargetUser::resolve(&user.user).map_err(CliError::from);
    match command {
        Command::Run {
            user,
            secrets,
            cwd,
            timeout,
            env,
            audit,
            scope,
            argv,
        } => {
            let user = simple(&user)?;
            let grants = parse_grants(&secrets)?;
            let names: Vec<&str> = grants.iter().map(|g| g.name.as_str()).collect();
            let mut args = serde_json::json!({ "argv": argv, "secrets": names });
            if let Some(cwd) = cwd {
                args["cwd"] = Value::String(cwd.display().to_string());
            }
            let call = serde_json::to_vec(&serde_json::json!({ "tool": "spawn", "args": args }))
                .map_err(|e| CliError::new(exit::FAILED, e.to_string()))?;
            let options = RunOptions {
                timeout: Duration::from_secs(timeout),
                // Pipes the worker relays, never its own fds: under a
                // terminal those are the operator's terminal, which the
                // program could read keys from and write to unmasked.
                input: Input::Relay,
                output: Output::Relay,
                ..scope.options(env.load()?, audit.open()?)
            };
            let outcome = run_call(launcher, &user, &grants, &call, options).await;
            run_exit_code(&outcome)
        }
        Command::Call {
            user,
            secrets,
            timeout,
            env,
            audit,
            scope,
        } => {
            let user = simple(&user)?;
            let grants = parse_grants(&secrets)?;
            let mut call = Vec::new();
            std::io::Read::read_to_end(
                &mut std::io::Read::take(
                    std::io::stdin().lock(),
                    crate::classify::MAX_CALL_BYTES as u64 + 1,
                ),
                &mut call,
            )
            .map_err(|e| {
                CliError::new(exit::FAILED, format!("reading the call from stdin: {e}"))
            })?;
            let options = RunOptions {
                timeout: Duration::from_secs(timeout),
                env: env.load()?,
                audit: audit.open()?,
                allotted: scope.range(),
                view: scope.view.into(),
                network: scope.network(),
                home: scope.home.map(Into::into),
                ..RunOptions::default()
            };
            let outcome = run_call(launcher, &user, &grants, &call, options).await;
            print_json(&serde_json::to_value(&outcome).unwrap_or(Value::Null))?;
            Ok(if outcome.succeeded() {
                exit::OK
            } else {
                exit::FAILED
            })
        }
        _ => Err(CliError::new(
            exit::FAILED,
            "internal error: not a run or call command",
        )),
    }
}

/// One tool call through `drop_and_run` with the default policy.
async fn run_call(
    launcher: &Launcher,
    user: &TargetUser,
    grants: &[SecretGrant],
    call: &[u8],
    options: RunOptions,
) -> Outcome {
    let policy = Policy::default();
    drop_and_run(&DropRequest {
        launcher,
        policy: &policy,
        user,
        grants,
        call,
        options,
    })
    .await
}

/// Parses `--secret` grants.
pub fn parse_grants(specs: &[String]) -> Result<Vec<SecretGrant>, CliError> {
    specs
        .iter()
        .map(|s| SecretGrant::parse(s).map_err(CliError::usage))
        .collect()
}

/// `run`'s exit code: the program's own, 128+signal, or the launch error's.
fn run_exit_code(outcome: &Outcome) -> Result<i32, CliError> {
    if let Some(error) = &outcome.launch_error {
        return Err(error.clone().into());
    }
    if outcome.verdict == crate::classify::VerdictKind::Refuse {
        return Err(CliError::usage(format!("refused: {}", outcome.reason)));
    }
    if outcome.timed_out {
        return Err(CliError::new(
            exit::FAILED,
            "the program timed out and was killed",
        ));
    }
    match (outcome.exit_code, outcome.signal) {
        (Some(code), _) => Ok(code),
        (None, Some(sig)) => Ok(128 + sig),
        _ => Err(LaunchError::new(Stage::Launcher, "no_status", "no exit status").into()),
    }
}
