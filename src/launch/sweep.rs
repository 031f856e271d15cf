//! The per-user sweep, run by the launcher after the drop: kills every
//! process the user can signal and returns only when none of them is still
//! running.
//!
//! Guarantees: the kernel chooses what is killed (`kill(-1, SIGKILL)` as
//! the user: those whose real or saved uid is the user's; no pid is read
//! from anywhere to choose a target); it never runs as root; and "swept"
//! means dead, not signalled: `kill` returns before its targets have died,
//! so the sweep then reads `/proc` until no process the kill reaches is
//! still running (a zombie has died; only its parent's reaping is left),
//! repeating the kill each round, for at most [`SWEEP_WAIT_ROUNDS`] rounds.
//! A sweep that cannot read `/proc` reports `sweep_unverified`, never done.
#![forbid(unsafe_code)]

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::{getpid, getuid, Pid};
use serde_json::{json, Value};

use super::builtin::io_error;
use super::report::{LaunchError, Stage};

/// How many times the sweep kills and looks for a survivor, [`ROUND_GAP`]
/// apart, before it says the sweep did not finish (a process stuck in an
/// uninterruptible sleep can outlive its SIGKILL that long).
pub const SWEEP_WAIT_ROUNDS: u32 = 2_000;

/// The pause between two rounds.
pub const ROUND_GAP: Duration = Duration::from_millis(1);

/// Kills every process the user can signal and waits until none runs.
/// Refused unless both real and effective uid are not root — run as root,
/// the same call would kill the machine.
pub fn sweep() -> Result<Value, LaunchError> {
    if getuid().is_root() || nix::unistd::geteuid().is_root() {
        return Err(LaunchError::new(
            Stage::Op,
            "sweep_as_root",
            "the sweep runs only after the drop",
        ));
    }
    let (uid, own) = (getuid().as_raw(), getpid().as_raw());
    let mut running = Vec::new();
    for round in 1..=SWEEP_WAIT_ROUNDS {
        match kill(Pid::from_raw(-1), Signal::SIGKILL) {
            // ESRCH: the user had no process but this one.
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => {
                return Err(LaunchError::new(
                    Stage::Op,
                    "sweep_failed",
                    format!("kill(-1, SIGKILL): {e}"),
                ))
            }
        }
        running = running_signalable(uid, own)?;
        if running.is_empty() {
            return Ok(json!({"swept": true, "rounds": round}));
        }
        std::thread::sleep(ROUND_GAP);
    }
    Err(LaunchError::new(
        Stage::Op,
        "sweep_incomplete",
        format!(
            "after {SWEEP_WAIT_ROUNDS} rounds of kill(-1, SIGKILL), pid(s) {running:?} still run"
        ),
    ))
}

/// The pids, other than `own`, of processes that `kill(-1)` from `uid`
/// reaches (real or saved uid is `uid`) and that have not died yet (state
/// neither zombie nor dead). A process that ends while it is read is
/// skipped, and so is one the kernel keeps the user from reading (`hidepid`:
/// never one of the user's own). Any other failure to read is an error: a
/// sweep that cannot look does not say it is done.
fn running_signalable(uid: u32, own: i32) -> Result<Vec<i32>, LaunchError> {
    let unverified = |what: String, e| io_error("sweep_unverified", what, e);
    let mut running = Vec::new();
    let entries = std::fs::read_dir("/proc").map_err(|e| unverified("read /proc".into(), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| unverified("read /proc".into(), e))?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        match std::fs::read_to_string(format!("/proc/{pid}/status")) {
            Ok(status) if is_running_as(&status, uid) => running.push(pid),
            Ok(_) => {}
            Err(e) if is_gone_or_hidden(&e) => {}
            Err(e) => return Err(unverified(format!("read /proc/{pid}/status"), e)),
        }
    }
    Ok(running)
}

/// A read of `/proc/PID/status` that failed because the process is gone
/// (`ENOENT`, `ESRCH`) or is another user's and hidden (`EACCES`, `EPERM`).
fn is_gone_or_hidden(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::ENOENT | Errno::ESRCH | Errno::EACCES | Errno::EPERM)
    )
}

/// Whether a `/proc/PID/status` text is of a process not yet dead whose
/// real or saved uid is `uid`. A state it cannot read counts as running.
fn is_running_as(status: &str, uid: u32) -> bool {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::split_whitespace)
    };
    let state = field("State:").and_then(|mut f| f.next());
    let uids: Vec<u32> = field("Uid:")
        .map(|f| f.filter_map(|v| v.parse().ok()).collect())
        .unwrap_or_default();
    let dead = matches!(state, Some("Z" | "X" | "x"));
    let reached = uids.len() == 4 && (uids[0] == uid || uids[2] == uid);
    reached && !dead
}

#[cfg(test)]
mod tests {
    use super::is_running_as;

    fn status(state: &str, uids: &str) -> String {
        format!("Name:\tsleep\nState:\t{state}\nTgid:\t7\nUid:\t{uids}\nGid:\t1\t1\t1\t1\n")
    }

    #[test]
    fn a_running_process_of_the_uid_by_real_or_saved_uid_is_found() {
        assert!(is_running_as(
            &status("S (sleeping)", "61000\t61000\t61000\t61000"),
            61000
        ));
        assert!(is_running_as(
            &status("R (running)", "61000\t0\t0\t0"),
            61000
        ));
        assert!(is_running_as(
            &status("D (disk sleep)", "0\t0\t61000\t0"),
            61000
        ));
    }

    #[test]
    fn a_process_of_the_uid_whose_state_cannot_be_read_counts_as_running() {
        assert!(is_running_as(
            "Name:\tx\nUid:\t61000\t61000\t61000\t61000\n",
            61000
        ));
    }

    #[test]
    fn the_dead_and_other_users_are_not() {
        assert!(!is_running_as(
            &status("Z (zombie)", "61000\t61000\t61000\t61000"),
            61000
        ));
        assert!(!is_running_as(
            &status("X (dead)", "61000\t61000\t61000\t61000"),
            61000
        ));
        // Effective and filesystem uid alone: kill(-1) does not reach it.
        assert!(!is_running_as(
            &status("S (sleeping)", "0\t61000\t0\t61000"),
            61000
        ));
        assert!(!is_running_as(
            &status("S (sleeping)", "61001\t61001\t61001\t61001"),
            61000
        ));
        assert!(!is_running_as("Name:\tx\n", 61000));
    }
}
