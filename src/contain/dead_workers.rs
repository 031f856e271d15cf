//! The call cgroups of workers that no longer run: a worker that was
//! SIGKILLed cannot clean up, so the next worker to start kills and removes
//! them. Only cgroups whose name is ours (`call-<pid>-<n>`) and whose
//! worker pid is not alive are touched.
#![forbid(unsafe_code)]

use std::fs;
use std::path::Path;

use super::cgroup::{CallCgroup, BASE_NAME};
use super::mounts::Mounts;

/// The worker pid a call cgroup's name carries, if it is one of ours:
/// `call-<pid>-<n>`, or `call-<pid>-<uid>-<n>` as earlier versions named
/// them.
fn worker_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("call-")?;
    let parts: Vec<&str> = rest.split('-').collect();
    let numbers = |p: &[&str]| p.iter().all(|n| n.parse::<u64>().is_ok());
    match parts.as_slice() {
        [pid, n] if numbers(&[n]) => pid.parse().ok(),
        [pid, uid, n] if uid.parse::<u32>().is_ok() && numbers(&[n]) => pid.parse().ok(),
        _ => None,
    }
}

/// Kills and removes the call cgroups of workers that no longer run (a
/// worker that was SIGKILLed could not). Returns how many were removed.
pub fn sweep_dead_workers(mounts: &Mounts) -> usize {
    let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
    let mut removed = 0;
    let bases = [&mounts.v2, &mounts.v1_pids, &mounts.v1_memory];
    let mut stale: Vec<(String, u32)> = Vec::new();
    for base in bases.into_iter().flatten() {
        let Ok(entries) = fs::read_dir(base.join(BASE_NAME)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = worker_of(&name) {
                if pid != std::process::id()
                    && !alive(pid)
                    && !stale.iter().any(|(n, _)| *n == name)
                {
                    stale.push((name, pid));
                }
            }
        }
    }
    for (name, _) in stale {
        let cg = CallCgroup::found(mounts, &name);
        match cg.kill_and_remove() {
            Ok(()) => removed += 1,
            Err(e) => {
                tracing::warn!(cgroup = %name, error = %e, "a dead worker's cgroup could not be removed")
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_call_names_carry_a_worker() {
        assert_eq!(worker_of("call-123-7"), Some(123));
        assert_eq!(
            worker_of("call-123-61000-7"),
            Some(123),
            "the earlier naming"
        );
        for bad in [
            "call-123",
            "call-123-x",
            "call-x-1-2",
            "other-1-2-3",
            "call-1-2-3-4",
            "call-1--2",
        ] {
            assert_eq!(worker_of(bad), None, "{bad}");
        }
    }
}
