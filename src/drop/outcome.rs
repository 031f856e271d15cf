//! The structured result of one tool call, as the worker returns it.
//! Exit status comes from `waitpid`; launch failures are typed; output is
//! bounded and says when it was cut.
#![forbid(unsafe_code)]

use std::os::unix::process::ExitStatusExt;

use serde::{Deserialize, Serialize};

use super::spawn::Finished;
use crate::classify::{Verdict, VerdictKind};
use crate::launch::report::{LaunchError, Stage, StatusReport};

/// What happened to one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The classifier's verdict.
    pub verdict: VerdictKind,
    /// The verdict's machine-readable reason code.
    pub reason: String,
    /// The verdict's reason in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The tool name from the call, if it parsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The user it ran as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// That user's uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The program's exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
    /// The call's timeout fired.
    pub timed_out: bool,
    /// Captured stdout (UTF-8, invalid bytes replaced).
    pub stdout: String,
    /// Stdout was longer than the cap.
    pub stdout_truncated: bool,
    /// Captured stderr (UTF-8, invalid bytes replaced).
    pub stderr: String,
    /// Stderr was longer than the cap.
    pub stderr_truncated: bool,
    /// Wall time from spawn to reap, in microseconds.
    pub duration_us: u64,
    /// Why the program never started, or why exec failed.
    pub launch_error: Option<LaunchError>,
    /// The limits that were really in force (cgroup, pids, rlimits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<crate::contain::AppliedLimits>,
    /// A built-in operation's result (file tools, key store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// How many times each granted secret was masked in the output, by
    /// name; present when the program ran in the private view, whose
    /// launcher masks its output before it leaves the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masks: Option<std::collections::BTreeMap<String, u64>>,
    /// Each request the call's broker put a bound secret's value into, or
    /// refused (`placeholder_not_bound`, …); empty without a broker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub broker: Vec<crate::broker::uses::BrokerUse>,
    /// The secrets the call was given as files in its
    /// `$CREDENTIALS_DIRECTORY` (names only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets_as_files: Vec<String>,
}

impl Outcome {
    /// An outcome for a call that never reached a launch.
    pub fn not_run(verdict: &Verdict, tool: Option<String>, error: Option<LaunchError>) -> Self {
        Self {
            verdict: verdict.kind(),
            reason: verdict.code().to_owned(),
            detail: Some(verdict.reason().to_owned()),
            tool,
            user: None,
            uid: None,
            exit_code: None,
            signal: None,
            timed_out: false,
            stdout: String::new(),
            stdout_truncated: false,
            stderr: String::new(),
            stderr_truncated: false,
            duration_us: 0,
            launch_error: error,
            limits: None,
            result: None,
            masks: None,
            broker: Vec::new(),
            secrets_as_files: Vec::new(),
        }
    }

    /// Builds the outcome of a finished launch.
    pub fn from_finished(
        verdict: &Verdict,
        tool: Option<String>,
        user: (&str, u32),
        done: Finished,
    ) -> Self {
        let mut out = Self::not_run(verdict, tool, None);
        out.user = Some(user.0.to_owned());
        out.uid = Some(user.1);
        out.timed_out = done.timed_out;
        out.stdout = String::from_utf8_lossy(&done.stdout.bytes).into_owned();
        out.stdout_truncated = done.stdout.truncated;
        out.stderr = String::from_utf8_lossy(&done.stderr.bytes).into_owned();
        out.stderr_truncated = done.stderr.truncated;
        out.duration_us = done.duration.as_micros().min(u64::MAX as u128) as u64;
        let (code, signal) = match done.status {
            Some(s) => (s.code(), s.signal()),
            None => (None, None),
        };
        match done.report {
            StatusReport::Execed => {
                out.exit_code = code;
                out.signal = signal;
            }
            StatusReport::Ended(end) => {
                out.exit_code = end.exit_code;
                out.signal = end.signal;
                out.masks = Some(end.masks);
                out.broker = end.broker;
            }
            StatusReport::Done(value) => {
                out.exit_code = code;
                out.result = Some(value);
            }
            StatusReport::Failed(error) => out.launch_error = Some(error),
            StatusReport::Silent if done.timed_out => {
                out.launch_error = Some(LaunchError::new(
                    Stage::Launcher,
                    "launcher_timed_out",
                    "the launcher was killed by the timeout before it started the program",
                ));
            }
            StatusReport::Silent => {
                out.launch_error = Some(LaunchError::new(
                    Stage::Launcher,
                    "launcher_died",
                    format!(
                        "the launcher exited without a report (status {code:?}, signal {signal:?})"
                    ),
                ));
            }
        }
        out
    }

    /// The program ran and exited 0, or the operation succeeded.
    pub fn succeeded(&self) -> bool {
        self.launch_error.is_none() && !self.timed_out && self.exit_code == Some(0)
    }
}

/// The largest [`SandboxedResult`] a trusted side accepts, in bytes.
pub const MAX_SANDBOXED_RESULT_BYTES: usize = 4 * 1024 * 1024;
/// The longest stdout or stderr a [`SandboxedResult`] may carry.
pub const MAX_SANDBOXED_STREAM_BYTES: usize = 1024 * 1024;

/// A structured result from a sandboxed run, as a trusted side (a gate)
/// consumes it from an untrusted one (an executor): the exit status comes
/// from `waitpid` through [`Outcome`], never from scraping logs. Parsing is
/// strict: a size cap, no duplicate keys, no unknown fields, bounded
/// streams; anything else is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxedResult {
    /// The user the run went as.
    pub uid: u32,
    /// Exit code, if the program exited.
    pub exit_code: Option<i32>,
    /// Signal, if one killed it.
    pub signal: Option<i32>,
    /// The timeout fired.
    pub timed_out: bool,
    /// The typed launch error's code, if the program never ran.
    pub launch_error: Option<String>,
    /// Standard output (bounded).
    pub stdout: String,
    /// Standard error (bounded).
    pub stderr: String,
}

impl SandboxedResult {
    /// The result of a finished call.
    pub fn from_outcome(outcome: &Outcome) -> Self {
        let cut = |s: &str| {
            let mut end = s.len().min(MAX_SANDBOXED_STREAM_BYTES);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s[..end].to_owned()
        };
        Self {
            uid: outcome.uid.unwrap_or(0),
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            timed_out: outcome.timed_out,
            launch_error: outcome.launch_error.as_ref().map(|e| e.code.clone()),
            stdout: cut(&outcome.stdout),
            stderr: cut(&outcome.stderr),
        }
    }

    /// Parses untrusted bytes, refusing anything out of shape.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() > MAX_SANDBOXED_RESULT_BYTES {
            return Err(format!(
                "the result is over {MAX_SANDBOXED_RESULT_BYTES} bytes"
            ));
        }
        let value =
            crate::classify::call::parse_strict_json(bytes).map_err(|v| v.reason().to_owned())?;
        let result: Self = serde_json::from_value(value).map_err(|e| e.to_string())?;
        if result.stdout.len() > MAX_SANDBOXED_STREAM_BYTES
            || result.stderr.len() > MAX_SANDBOXED_STREAM_BYTES
        {
            return Err("a stream is over its cap".into());
        }
        if result.uid == 0 {
            return Err("a sandboxed result never comes from uid 0".into());
        }
        if result.exit_code.is_some() && result.signal.is_some() {
            return Err("a run cannot both exit and be killed".into());
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandboxed_results_parse_strictly() {
        let ok = br#"{"uid":61001,"exit_code":0,"signal":null,"timed_out":false,"launch_error":null,"stdout":"ok","stderr":""}"#;
        assert_eq!(SandboxedResult::parse(ok).unwrap().exit_code, Some(0));
        for bad in [
            &br#"{"uid":61001,"exit_code":0,"exit_code":1,"signal":null,"timed_out":false,"launch_error":null,"stdout":"","stderr":""}"#[..],
            br#"{"uid":61001,"exit_code":0,"signal":null,"timed_out":false,"launch_error":null,"stdout":"","stderr":"","verdict":"pass"}"#,
            br#"{"uid":0,"exit_code":0,"signal":null,"timed_out":false,"launch_error":null,"stdout":"","stderr":""}"#,
            br#"{"uid":61001,"exit_code":0,"signal":9,"timed_out":false,"launch_error":null,"stdout":"","stderr":""}"#,
            br#"PASS"#,
            br#"{"uid":61001}"#,
        ] {
            assert!(SandboxedResult::parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
