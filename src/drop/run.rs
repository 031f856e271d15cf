//! `drop_and_run`: the worker's one call for a tool call.
//!
//! Classify the raw call; refuse what is malformed; run a `Stay` read in
//! the worker ([`crate::stay`]); turn what drops into a launcher action
//! ([`super::action`]) and run it through `tono-launch` as the user
//! ([`super::launch_as`]); return a structured [`Outcome`]. The worker
//! never reads a secret and never touches the user's files: it names
//! secrets, the launcher unseals them after the drop. With an audit log,
//! nothing runs before the call's begin record is written and `fsync`ed:
//! no in-worker read starts, and a launcher, sent its plan at once so that
//! it prepares the call (view, cgroups, drop, syscall filter) while the
//! record is made durable, opens no key and runs nothing until the worker
//! sends its go ([`crate::launch::plan::GO`]). A call whose begin record
//! could not be written is refused (`audit_unavailable`): its launcher gets
//! no go, and nothing of the user's ran. A begun call's end record goes
//! into the room held for it.
#![forbid(unsafe_code)]

use super::action::prepare;
use super::launch_as::{launch_as, launch_as_after, outcome_of};
use super::outcome::Outcome;
use super::receipt::{begin_record, receipt, requested_secrets, secrets_as_files};
use super::request::DropRequest;
use std::sync::Arc;

use crate::audit::{AuditError, AuditLog};
use crate::classify::{classify_raw, Verdict, VerdictKind};
use crate::env::EnvBuilder;
use crate::launch::report::{LaunchError, Stage};

/// Classifies and runs one tool call as `req.user`; never panics on input.
/// With an audit log in the options, the call begins only while the log
/// can be written and once its begin record is; its end record (or, where
/// nothing was begun, its one whole record) is appended when it ends.
pub async fn drop_and_run(req: &DropRequest<'_>) -> Outcome {
    let Some(log) = &req.options.audit else {
        return run_call(req, &mut Vec::new(), &mut Gate::None).await;
    };
    if let Err(e) = log.check() {
        return audit_refusal(&e, None);
    }
    let started = std::time::Instant::now();
    let mut requested = Vec::new();
    let mut gate = Gate::Open(log);
    let outcome = run_call(req, &mut requested, &mut gate).await;
    let record = receipt(req, &outcome, requested, started.elapsed());
    // Off the runtime's threads: a record waits for its `fsync`, which
    // the calls in flight share (the log's group commit).
    let written = match gate {
        Gate::Begun(begun) => off_runtime(log, move |log| log.end(begun, record)).await,
        // Its refusal is in the log already, written by `begin`.
        Gate::Refused => Ok(0),
        Gate::Open(_) | Gate::None => off_runtime(log, move |log| log.append(record)).await,
    };
    if let Err(e) = written {
        // Later calls are refused by the check above.
        tracing::error!(error = %e, "the call's receipt could not be written");
    }
    outcome
}

/// Runs `write` on the log: here when no `fsync` is running (a call
/// alone makes its own, as fast as it can), else in tokio's blocking pool,
/// where it waits for the `fsync` it shares without holding up the calls
/// the runtime's threads serve; a writer that did not return is the log's
/// failure.
async fn off_runtime<T: Send + 'static>(
    log: &Arc<AuditLog>,
    write: impl FnOnce(&AuditLog) -> Result<T, AuditError> + Send + 'static,
) -> Result<T, AuditError> {
    if !log.is_syncing() {
        return write(log);
    }
    let log = Arc::clone(log);
    tokio::task::spawn_blocking(move || write(&log))
        .await
        .unwrap_or_else(|e| {
            Err(AuditError::Broken(format!(
                "the receipt's writer failed: {e}"
            )))
        })
}

/// Where a call stands with its receipt.
enum Gate<'a> {
    /// No audit log.
    None,
    /// A log, and no begin record yet.
    Open(&'a Arc<AuditLog>),
    /// The begin record is written.
    Begun(crate::audit::Begun),
    /// The begin record could not be written: nothing ran.
    Refused,
}

/// The outcome of a call refused because its receipt could not be
/// written: nothing was launched.
fn audit_refusal(e: &AuditError, tool: Option<String>) -> Outcome {
    let refusal = Verdict::refuse("audit_unavailable", e.to_string());
    let error = LaunchError::new(Stage::Plan, e.code(), e.to_string());
    Outcome::not_run(&refusal, tool, Some(error))
}

/// Writes the call's begin record where there is a log and waits until it
/// is durable; `Err` is the refusal to return instead of running anything.
#[allow(clippy::too_many_arguments)]
async fn begin(
    gate: &mut Gate<'_>,
    req: &DropRequest<'_>,
    verdict: &Verdict,
    tool: &Option<String>,
    requested: &[String],
    network: &str,
    view: &str,
) -> Result<(), Box<Outcome>> {
    let Gate::Open(log) = *gate else {
        return Ok(());
    };
    let record = begin_record(req, verdict, tool.clone(), requested, network, view);
    match off_runtime(log, move |log| log.begin(record)).await {
        Ok(begun) => {
            *gate = Gate::Begun(begun);
            Ok(())
        }
        Err(e) => {
            *gate = Gate::Refused;
            Err(Box::new(audit_refusal(&e, tool.clone())))
        }
    }
}

/// Runs one call; `requested` gets the secret names the call asked for.
/// Nothing runs before the begin record is durable.
async fn run_call(
    req: &DropRequest<'_>,
    requested: &mut Vec<String>,
    gate: &mut Gate<'_>,
) -> Outcome {
    let (call, verdict) = classify_raw(req.call, req.policy);
    let tool = call.as_ref().map(|c| c.tool.clone());
    let Some(call) = call else {
        return Outcome::not_run(&verdict, tool, None);
    };
    *requested = requested_secrets(&call);
    let verdict = match verdict.kind() {
        VerdictKind::Refuse => return Outcome::not_run(&verdict, tool, None),
        #[cfg(feature = "read-tool")]
        VerdictKind::Stay => {
            if let Err(refused) = begin(gate, req, &verdict, &tool, requested, "host", "host").await
            {
                return *refused;
            }
            return stay_read(&verdict, &call, req).await;
        }
        // Without the in-worker read tool, a read that may stay runs as the
        // user: the safe side, and said so.
        #[cfg(not(feature = "read-tool"))]
        VerdictKind::Stay => Verdict::drop(
            "stay_runs_as_user",
            "the read may stay, but this build has no in-worker read tool; it runs as the user",
        ),
        VerdictKind::Drop => verdict,
    };
    let Some(kind) = req.policy.kind_of(&call.tool) else {
        let error = LaunchError::new(
            Stage::Plan,
            "no_runner",
            format!("no program implements tool {:?}", call.tool),
        );
        return Outcome::not_run(&verdict, tool, Some(error));
    };
    let network = match req.options.network_mode() {
        Ok(network) => network,
        Err(error) => return Outcome::not_run(&verdict, tool, Some(error)),
    };
    let env = match EnvBuilder::for_run(req.user, &req.options.env, network) {
        Ok(env) => env.build().into(),
        Err(e) => {
            let error = LaunchError::new(Stage::Plan, "env_invalid", e.to_string());
            return Outcome::not_run(&verdict, tool, Some(error));
        }
    };
    let prepared = match prepare(kind, &call, req.grants, env) {
        Ok(p) => p,
        Err(refusal) => return Outcome::not_run(&refusal, tool, None),
    };
    let timeout = prepared
        .timeout
        .map_or(req.options.timeout, |t| t.min(req.options.timeout));
    let view = req.options.view.to_string();
    let launched = match *gate {
        // The begin record is written and made durable while the launcher
        // prepares the call; it goes on past its preparation only once the
        // record is durable, else it is refused before any key is opened.
        Gate::Open(log) => {
            let record = begin_record(
                req,
                &verdict,
                tool.clone(),
                requested,
                &network.to_string(),
                &view,
            );
            let (durable, go) = tokio::sync::oneshot::channel();
            // Polled after the launch's first poll (join! starts with the
            // first future), which has sent the plan where nothing made it
            // wait: the record is then written while the launcher works,
            // here when no fsync runs (no thread to start, the usual case
            // of a one-shot `run` and of calls one after another), else in
            // the blocking pool with the calls in flight.
            let begun = async move {
                let begun = off_runtime(log, move |log| log.begin(record)).await;
                let _ = durable.send(begun.is_ok());
                begun
            };
            let launch = launch_as_after(
                req.launcher,
                req.user,
                prepared.action,
                &req.options,
                (timeout, None),
                Some(go),
            );
            let (launched, begun) = tokio::join!(launch, begun);
            match begun {
                Ok(begun) => {
                    *gate = Gate::Begun(begun);
                    launched
                }
                Err(e) => {
                    *gate = Gate::Refused;
                    return audit_refusal(&e, tool);
                }
            }
        }
        _ => {
            launch_as(
                req.launcher,
                req.user,
                prepared.action,
                &req.options,
                timeout,
                None,
            )
            .await
        }
    };
    let mut outcome = outcome_of(&verdict, tool, req.user, launched);
    outcome.secrets_as_files = secrets_as_files(req, requested);
    outcome
}

/// Runs a `Stay` read inside the worker (no launch, no user).
#[cfg(feature = "read-tool")]
async fn stay_read(
    verdict: &Verdict,
    call: &crate::classify::ToolCall,
    req: &DropRequest<'_>,
) -> Outcome {
    use super::spawn::Output;
    use crate::classify::ToolKind;
    use crate::stay::fetch::{
        fetch, FetchConfig, SystemResolver, DEFAULT_MAX_BODY, DEFAULT_TIMEOUT,
    };
    use serde_json::Value;
    let tool = Some(call.tool.clone());
    // The classifier has checked these shapes; re-read them, never trust.
    let url = call
        .args
        .get("url")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let headers: Vec<(String, String)> = call
        .args
        .get("headers")
        .and_then(Value::as_object)
        .map(|h| {
            h.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let kind = req.policy.kind_of(&call.tool).unwrap_or(ToolKind::HttpGet);
    let config = FetchConfig {
        max_body: match req.options.output {
            Output::Capture(cap) => cap,
            Output::Relay | Output::Inherit => DEFAULT_MAX_BODY,
        },
        timeout: req.options.timeout.min(DEFAULT_TIMEOUT),
        ..FetchConfig::default()
    };
    let started = std::time::Instant::now();
    let result = fetch(kind, url, &headers, req.policy, &config, &SystemResolver).await;
    let mut out = Outcome::not_run(verdict, tool, None);
    out.duration_us = started.elapsed().as_micros() as u64;
    match result {
        Ok(done) => {
            out.exit_code = Some(0);
            out.stdout = String::from_utf8_lossy(&done.body).into_owned();
            out.stdout_truncated = done.truncated;
            out.result = Some(serde_json::json!({
                "status": done.status, "url": done.url, "redirects": done.redirects, "content_type": done.content_type,
            }));
        }
        Err(e) => out.launch_error = Some(LaunchError::new(Stage::Stay, e.code(), e.to_string())),
    }
    out
}
