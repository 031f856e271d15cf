//! A call's receipt: the audit records of one `drop_and_run` — its begin
//! record, made from the request and its verdict before anything runs,
//! and its end record, made from the request and its [`Outcome`].
//!
//! Guarantees: the record holds secret names, counts and codes only —
//! never a value, the environment, or the tool's output (only its length).
#![forbid(unsafe_code)]

use std::time::Duration;

use serde_json::Value;

use super::outcome::Outcome;
use super::request::DropRequest;
use crate::audit::{AuditRecord, RecordKind};
use crate::classify::ToolCall;
use crate::user::TargetUser;

/// The secret names a call asks for (`args.secrets`, strings only).
pub(super) fn requested_secrets(call: &ToolCall) -> Vec<String> {
    call.args
        .get("secrets")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Of the names a call asked for, those its grants give as files.
pub(super) fn secrets_as_files(req: &DropRequest<'_>, requested: &[String]) -> Vec<String> {
    requested
        .iter()
        .filter(|name| {
            req.grants
                .iter()
                .any(|g| g.name.as_str() == name.as_str() && g.file.is_some())
        })
        .cloned()
        .collect()
}

/// The begin record of a call about to run as `req.user`: the tool, the
/// verdict, the secret names asked for and granted, and the network and
/// view it is about to get; nothing of an outcome.
pub(super) fn begin_record(
    req: &DropRequest<'_>,
    verdict: &crate::classify::Verdict,
    tool: Option<String>,
    requested: &[String],
    network: &str,
    view: &str,
) -> AuditRecord {
    let mut record = receipt(
        req,
        &Outcome::not_run(verdict, tool, None),
        requested.to_vec(),
        Duration::ZERO,
    );
    record.secrets_as_files = secrets_as_files(req, requested);
    record.network = network.to_owned();
    record.view = view.to_owned();
    record
}

/// The receipt of a call that took `took`.
pub(super) fn receipt(
    req: &DropRequest<'_>,
    outcome: &Outcome,
    requested: Vec<String>,
    took: Duration,
) -> AuditRecord {
    let granted = requested
        .iter()
        .filter(|name| req.grants.iter().any(|g| g.name.as_str() == name.as_str()))
        .cloned()
        .collect();
    AuditRecord {
        secrets_requested: requested,
        secrets_granted: granted,
        secrets_as_files: outcome.secrets_as_files.clone(),
        ..outcome_receipt(RecordKind::Call, req.user, outcome, took)
    }
}

/// The receipt of anything that ended in an [`Outcome`] as `user` (a tool
/// call, a provider program), with no secret named.
pub fn outcome_receipt(
    kind: RecordKind,
    user: &TargetUser,
    outcome: &Outcome,
    took: Duration,
) -> AuditRecord {
    let limits = outcome.limits.as_ref();
    AuditRecord {
        user: Some(user.name.clone()),
        uid: Some(user.uid),
        tool: outcome.tool.clone(),
        verdict: serde_json::to_value(outcome.verdict)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        reason_code: outcome.reason.clone(),
        exit_code: outcome.exit_code,
        signal: outcome.signal,
        timed_out: outcome.timed_out,
        duration_us: u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
        pids_max_hits: limits.map(|l| l.pids_max_hits),
        oom_kills: limits.map(|l| l.oom_kills),
        memory_peak: limits.and_then(|l| l.memory_peak),
        pids_peak: limits.and_then(|l| l.pids_peak),
        stdout_bytes: outcome.stdout.len() as u64,
        stderr_bytes: outcome.stderr.len() as u64,
        launch_error: outcome.launch_error.as_ref().map(|e| e.code.clone()),
        view: limits
            .and_then(|l| l.view.clone())
            .unwrap_or_else(|| "host".into()),
        network: limits
            .and_then(|l| l.network.clone())
            .unwrap_or_else(|| "host".into()),
        masks: outcome.masks.clone(),
        broker: (!outcome.broker.is_empty()).then(|| outcome.broker.clone()),
        ..AuditRecord::new(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::Verdict;
    use crate::contain::AppliedLimits;

    #[test]
    fn the_receipt_says_the_network_and_view_the_call_ran_with() {
        let user = TargetUser {
            name: "tonotest".into(),
            uid: 61000,
            gid: 61000,
            home: "/home/tonotest".into(),
            shell: "/bin/sh".into(),
        };
        let verdict = Verdict::drop("side_effect", "test");
        let mut outcome = Outcome::not_run(&verdict, Some("shell".into()), None);
        // Nothing ran: the host's, as the record's defaults say.
        let r = outcome_receipt(RecordKind::Call, &user, &outcome, Duration::ZERO);
        assert_eq!((r.network.as_str(), r.view.as_str()), ("host", "host"));
        outcome.limits = Some(AppliedLimits {
            network: Some("none".into()),
            view: Some("private".into()),
            ..AppliedLimits::default()
        });
        let r = outcome_receipt(RecordKind::Call, &user, &outcome, Duration::ZERO);
        assert_eq!((r.network.as_str(), r.view.as_str()), ("none", "private"));
    }
}
