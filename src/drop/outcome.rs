//! The structured result of one tool call, as the worker returns it.
//! Exit status comes from `waitpid`; launch failures are typed; output is
//! bounded and says when it was cut.
#![forbid(unsafe_code)]

use std::os::unix::process::ExitStatusExt;

use serde::{Deserialize, Serialize};

use super::report::{LaunchError, Stage, StatusReport};
use super::spawn::Finished;
use crate::classify::{Verdict, VerdictKind};

/// What happened to one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The classifier's verdict.
    pub verdict: VerdictKind,
    /// The verdict's machine-readable reason code.
    pub reason: String,
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
    pub limits: Option<super::cgroup::AppliedLimits>,
    /// A built-in operation's result (file tools, key store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

impl Outcome {
    /// An outcome for a call that never reached a launch.
    pub fn not_run(verdict: &Verdict, tool: Option<String>, error: Option<LaunchError>) -> Self {
        Self {
            verdict: verdict.kind(),
            reason: verdict.code().to_owned(),
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
        if let Some(e) = &done.cgroup_error {
            out.stderr.push_str(&format!("\n[tono-seal: the call's cgroup could not be emptied: {e}; the user is marked dirty]"));
        }
        let (code, signal) = match done.status {
            Some(s) => (s.code(), s.signal()),
            None => (None, None),
        };
        match done.report {
            StatusReport::Execed => {
                out.exit_code = code;
                out.signal = signal;
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
