//! Probes of containment, run as a probed user through `drop_and_run`
//! like any call: nothing a call started outlives it, a fork past the
//! call's `pids.max` fails with `EAGAIN` that the cgroup counted, and an
//! allocation past its memory limit is stopped inside the call.
//!
//! Guarantees: each probe passes only on what it observed, with the
//! evidence in `got`: the escapes counted alive by the tool itself before
//! its call ended (the positive control) and by root after it; the errno
//! `fork` gave, after how many children, and how many forks `pids.events`
//! says `pids.max` refused (an `EAGAIN` it did not count came from the
//! uid's `RLIMIT_NPROC`, and proves nothing about `pids.max`); the processes
//! a call sees beside those the user's own view sees; how the hog ended and what the
//! call's cgroup counted. A probe whose positive control did not happen
//! (the escapes never started, the fork never failed, the hog never grew)
//! fails as inconclusive.
#![forbid(unsafe_code)]

use std::time::Duration;

use serde_json::json;

use super::probe::{Expect, Probe, Verdict};
use crate::classify::Policy;
use crate::contain::AppliedLimits;
use crate::drop::{drop_and_run, DropRequest, Launcher, Outcome, RunOptions};
use crate::user::TargetUser;

/// The memory limit the hog probe runs under: small, so that the probe is
/// cheap; the mechanism is the same at any size.
const HOG_LIMIT: u64 = 64 << 20;

pub(super) async fn shell(
    launcher: &Launcher,
    user: &TargetUser,
    command: String,
    options: RunOptions,
) -> Outcome {
    let call = serde_json::to_vec(&json!({"tool": "shell", "args": {"command": command}}))
        .unwrap_or_default();
    drop_and_run(&DropRequest {
        launcher,
        policy: &Policy::default(),
        user,
        grants: &[],
        call: &call,
        options,
    })
    .await
}

/// A probe's verdict: a pass counts only beside its positive control; with
/// no control, whatever was seen proves nothing.
fn probe(user: &TargetUser, tried: &str, got: String, pass: bool, control: bool) -> Probe {
    let verdict = match (control, pass) {
        (false, _) => Verdict::Inconclusive,
        (true, true) => Verdict::Pass,
        (true, false) => Verdict::Fail,
    };
    Probe::of(user, tried, Expect::Holds, got, verdict)
}

/// Why a probe's call gave no evidence, when it did not run at all (the
/// launch's error code, e.g. `private_view_not_granted` in a container
/// without `CAP_SYS_ADMIN`): empty when it ran.
fn not_run(out: &Outcome) -> String {
    out.launch_error
        .as_ref()
        .map(|e| format!(" (the call did not run: {})", e.code))
        .unwrap_or_default()
}

/// Processes (any user's) whose command line is exactly `sleep <arg>`.
fn alive_with(arg: &str) -> usize {
    let want = format!("sleep\0{arg}\0");
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want.as_bytes())
                })
                .count()
        })
        .unwrap_or(0)
}

/// What the fork probe is called when the call had a `pids.max`: it passes
/// only when that limit refused the fork.
pub const FORK_PIDS_MAX: &str = "a fork past the call's pids.max fails with EAGAIN";
/// What the fork probe is called when the call had no `pids` cgroup: only
/// the uid's `RLIMIT_NPROC` limits it, and the line says so.
pub const FORK_RLIMIT_ONLY: &str =
    "a fork past the uid's RLIMIT_NPROC fails with EAGAIN (limits by rlimit only: no pids cgroup)";

/// The fork probe's verdict on what the fork loop printed and what the
/// call's cgroup counted. `EAGAIN` alone proves nothing about `pids.max`:
/// the uid's `RLIMIT_NPROC` gives the same errno. It passes as the call's
/// limit only when `pids.events` counted the refusal; with a `pids.max` in
/// force that counted none, another limit stopped the loop first and the
/// probe is inconclusive; with no `pids` cgroup it is its own line, the
/// rlimit's.
fn fork_probe(user: &TargetUser, said: &str, limits: AppliedLimits, not_run: &str) -> Probe {
    let control = said.starts_with("failed after") || said.starts_with("no limit after");
    let eagain = said.starts_with("failed after") && said.ends_with("errno 11");
    let nproc = limits.rlimit_nproc;
    let Some((max, by)) = limits.pids_max else {
        return probe(
            user,
            FORK_RLIMIT_ONLY,
            format!("{said}; no pids.max applied; RLIMIT_NPROC {nproc}{not_run}"),
            eagain,
            control,
        );
    };
    let hits = limits.pids_max_hits;
    let got = format!(
        "{said}; pids.max {max} ({by}) refused {hits} fork(s); RLIMIT_NPROC {nproc}{not_run}"
    );
    if eagain && hits == 0 {
        return Probe::of(
            user,
            FORK_PIDS_MAX,
            Expect::Holds,
            format!(
                "inconclusive: {got}: EAGAIN came from another limit (RLIMIT_NPROC counts \
                 every process of the uid), so pids.max was never reached"
            ),
            Verdict::Inconclusive,
        );
    }
    probe(user, FORK_PIDS_MAX, got, eagain && hits > 0, control)
}

/// Runs the three containment probes as `user`.
pub async fn containment_probes(
    launcher: &Launcher,
    user: &TargetUser,
    base: &RunOptions,
) -> Vec<Probe> {
    let mut out = Vec::new();
    // First, before the fork loop can leave the uid short of processes.
    // The call's view: the store is there for the user (the shared view
    // reads it, the positive control) and gone for a call's program.
    let look = "ls -A ~/.tono | wc -l; cat ~/.tono/identity >/dev/null 2>&1; echo $?; \
                ps -e -o pid= | wc -l";
    let shared = RunOptions {
        view: crate::launch::view::View::Shared,
        home: None,
        ..base.clone()
    };
    let host = shell(launcher, user, look.into(), shared).await;
    let call = shell(launcher, user, look.into(), base.clone()).await;
    let said = |o: &Outcome| o.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    let (host_said, call_said) = (said(&host), said(&call));
    let fields: Vec<&str> = call_said.split(' ').collect();
    let host_fields: Vec<&str> = host_said.split(' ').collect();
    let count = |f: &[&str]| f.get(2).and_then(|n| n.parse::<u32>().ok());
    let (call_count, host_count) = (count(&fields), count(&host_fields));
    let hidden = fields.len() == 3 && fields[0] == "0" && fields[1] != "0";
    // The controls, both from the user's own (shared) view: the identity is
    // readable there, and `ps -e` there counts the host's processes, which
    // a call in its own PID namespace must not see.
    let control = host_fields.get(1) == Some(&"0") && host_count.is_some();
    let fewer = match (call_count, host_count) {
        (Some(call), Some(host)) => call < host && call < 10,
        _ => false,
    };
    let view_probe = probe(
        user,
        "a tool sees no key store and only its own call's processes",
        format!(
            "in a call ({} view): {} store entries, cat identity exit {}, {} processes{}; \
             the user's own view: {}, {} processes{}",
            base.view,
            fields.first().unwrap_or(&"?"),
            fields.get(1).unwrap_or(&"?"),
            fields.get(2).unwrap_or(&"?"),
            not_run(&call),
            if host_fields.get(1) == Some(&"0") {
                "identity readable"
            } else {
                "identity not readable (no control)"
            },
            host_fields.get(2).unwrap_or(&"?"),
            not_run(&host),
        ),
        hidden && control && fewer,
        control,
    );
    // Three ways out of a process group; each sleeper has an argument no
    // other process has, so root can count exactly them.
    let tag = format!(
        "{}.{}",
        1000 + std::process::id() % 1000,
        rand::random::<u16>()
    );
    let escapes = [format!("1{tag}"), format!("2{tag}"), format!("3{tag}")];
    let script = format!(
        "setsid sleep {a} >/dev/null 2>&1 & (sleep {b} >/dev/null 2>&1 &); nohup sleep {c} >/dev/null 2>&1 &\n\
         sleep 0.3; pgrep -c -u \"$(id -u)\" -f '^sleep [123]{tag}$'",
        a = escapes[0],
        b = escapes[1],
        c = escapes[2],
    );
    let done = shell(launcher, user, script, base.clone()).await;
    let seen_inside: usize = done.stdout.trim().parse().unwrap_or(0);
    let left: usize = escapes.iter().map(|e| alive_with(e)).sum();
    out.push(probe(
        user,
        "no process outlives its call (setsid, a double fork, nohup)",
        format!(
            "{seen_inside} of 3 escapes alive inside the call, {left} after it{}",
            not_run(&done)
        ),
        seen_inside == 3 && left == 0,
        seen_inside == 3,
    ));
    for e in &escapes {
        if alive_with(e) > 0 {
            let _ = std::process::Command::new("pkill")
                .args(["-KILL", "-f", &format!("^sleep {e}$")])
                .status();
        }
    }

    let fork = "exec perl -e 'my $n = 0; while (1) { my $p = fork(); \
                if (!defined $p) { print \"failed after $n errno \", $!+0, \"\\n\"; last } \
                if ($p == 0) { sleep 30; exit 0 } $n++; if ($n >= 5000) { print \"no limit after $n\\n\"; last } }'";
    let done = shell(launcher, user, fork.into(), base.clone()).await;
    out.push(fork_probe(
        user,
        done.stdout.trim(),
        done.limits.clone().unwrap_or_default(),
        &not_run(&done),
    ));
    let hog_options = RunOptions {
        memory_max: HOG_LIMIT,
        timeout: Duration::from_secs(30),
        ..base.clone()
    };
    let hog = "exec perl -e '$| = 1; my @keep; for (1..64) { push @keep, \"x\" x (8 << 20); print \"grew\\n\" }'";
    let done = shell(launcher, user, hog.into(), hog_options).await;
    let grew = done.stdout.lines().filter(|l| *l == "grew").count();
    let limits = done.limits.clone().unwrap_or_default();
    let by = limits
        .memory_max
        .as_ref()
        .map(|(_, by)| by.clone())
        .unwrap_or_default();
    let killed = (done.signal == Some(9) || done.exit_code == Some(137)) && limits.oom_kills > 0;
    let refused = by == "RLIMIT_AS" && done.exit_code.is_some_and(|c| c != 0);
    out.push(probe(
        user,
        "an allocation past the call's memory limit is stopped inside it",
        format!(
            "grew {grew} x 8 MiB of 64 under a {} MiB limit ({by}); exit {:?}, signal {:?}, oom kills {}{}",
            HOG_LIMIT >> 20,
            done.exit_code,
            done.signal,
            limits.oom_kills,
            not_run(&done)
        ),
        grew > 0 && grew < 64 && (killed || refused),
        grew > 0,
    ));

    out.push(view_probe);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> TargetUser {
        TargetUser {
            name: "u".into(),
            uid: 61000,
            gid: 61000,
            home: "/home/u".into(),
            shell: "/bin/sh".into(),
        }
    }

    fn limits(pids_max: Option<u64>, hits: u64) -> AppliedLimits {
        AppliedLimits {
            pids_max: pids_max.map(|m| (m, "cgroup v2 pids".into())),
            pids_max_hits: hits,
            rlimit_nproc: 64,
            ..AppliedLimits::default()
        }
    }

    #[test]
    fn an_eagain_pids_max_did_not_count_is_not_a_pass_for_pids_max() {
        let eagain = "failed after 61 errno 11";
        // The rlimit stopped the loop first (the Docker case: "pids.max
        // refused 0 fork(s)").
        let p = fork_probe(&user(), eagain, limits(Some(256), 0), "");
        assert_eq!(p.tried, FORK_PIDS_MAX);
        assert!(!p.pass && p.inconclusive, "{p:?}");
        assert!(p.got.contains("refused 0 fork(s)"), "{}", p.got);
        assert!(p.got.contains("RLIMIT_NPROC"), "{}", p.got);
        // Counted by pids.events: the call's limit held.
        let p = fork_probe(
            &user(),
            "failed after 255 errno 11",
            limits(Some(256), 1),
            "",
        );
        assert!(p.pass, "{p:?}");
        assert_eq!(p.tried, FORK_PIDS_MAX);
        // No pids cgroup at all: the rlimit's own line, never pids.max's.
        let p = fork_probe(&user(), eagain, limits(None, 0), "");
        assert_eq!(p.tried, FORK_RLIMIT_ONLY);
        assert!(p.pass && p.got.contains("no pids.max applied"), "{p:?}");
        // Another errno, or no limit at all, fails; no output is no control.
        for (said, hits) in [("failed after 10 errno 12", 1), ("no limit after 5000", 0)] {
            let p = fork_probe(&user(), said, limits(Some(256), hits), "");
            assert!(!p.pass && !p.inconclusive, "{p:?}");
        }
        let p = fork_probe(&user(), "", limits(Some(256), 0), "");
        assert!(p.inconclusive, "{p:?}");
    }
}
