//! The call cgroup's own kill, tested where nothing else can do it: the
//! shared view (no PID namespace whose end would take the escapees down)
//! and escapes that leave the call's process group (so the worker's
//! `killpg` cannot reach them either). Each escape is run twice: without a
//! cgroup, the control, whose escapees must survive the call (and are then
//! killed by the test), and with one, whose escapees must be gone when the
//! call returns, with the outcome counting exactly those kills
//! (`killed_at_end`). Included by `tests/containment.rs` (v2, or v2 with
//! v1 beside it) and `tests/containment_v1_only.rs` (v1 alone) with
//! `#[path]`, so both host shapes run the same escapes.

use std::time::Duration;

use tono_seal::drop::RunOptions;
use tono_seal::launch::view::View;

use crate::common::{live_processes, shell_with, TestUser};

/// Waits (bounded by the call's timeout, not a clock of its own) until
/// the user runs `$1` processes whose command line is exactly `sleep 1000`
/// (perl, as every Debian has it; `-O`: a process of the caller's uid).
const WAIT_FOR: &str = "w() { perl -e 'while (1) { \
     my $n = grep { my $c = \"\"; if (-O $_ and open(my $f, \"<\", $_)) { $c = <$f> // \"\" } \
       $c eq \"sleep\\0\" . \"1000\\0\" } \
       glob(\"/proc/[0-9]*/cmdline\"); \
     exit 0 if $n >= $ARGV[0]; select(undef, undef, undef, 0.01) }' \"$1\"; }; ";

/// Escapes that leave the call's process group, with how many processes
/// each leaves behind. Each prints `started` once its escapees run.
pub const GROUP_ESCAPES: [(&str, &str, usize); 4] = [
    (
        "a session of its own",
        "setsid sleep 1000 & w 1; echo started",
        1,
    ),
    (
        "a process group of its own",
        "perl -e 'setpgrp(0, 0); exec qw(sleep 1000)' & w 1; echo started",
        1,
    ),
    (
        "a double fork into a session of its own",
        "(setsid sh -c 'sleep 1000 & exec sleep 1000' &); w 2; echo started",
        2,
    ),
    (
        "stopped, ignoring TERM, HUP and INT, in a session of its own",
        "setsid sh -c 'trap \"\" TERM HUP INT; kill -STOP $$; exec sleep 1000' & \
         until grep -q '^State:.*T' /proc/$!/status; do sleep 0.01; done; echo started",
        1,
    ),
];

/// The user's live processes that an escape left (`sleep 1000` in their
/// command line), as `pid: command line`.
pub fn escapees(uid: u32) -> Vec<String> {
    live_processes(uid)
        .into_iter()
        .filter(|p| p.contains("sleep 1000"))
        .collect()
}

/// SIGKILLs the control's escapees by pid (root) and waits, by looks, until
/// none is left.
fn kill_escapees(uid: u32) {
    for p in escapees(uid) {
        let pid: i32 = p.split(':').next().unwrap().parse().unwrap();
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    for _ in 0..10_000 {
        if escapees(uid).is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the control's escapees did not die: {:?}", escapees(uid));
}

fn shared(cgroup: bool) -> RunOptions {
    RunOptions {
        timeout: Duration::from_secs(20),
        view: View::Shared,
        cgroup,
        ..RunOptions::default()
    }
}

/// Runs every escape as `u` in the shared view, first without a cgroup
/// (the control: the escapees survive) and then with one (they are gone,
/// and `killed_at_end` counts them), while a concurrent call of the same
/// user, which `still_running` reports on, must not be touched. `check`
/// sees each contained outcome. Returns the call cgroups' names.
pub async fn the_cgroup_kills_what_left_the_group(
    u: &TestUser,
    still_running: &dyn Fn() -> bool,
    check: &dyn Fn(&str, &tono_seal::Outcome),
) -> Vec<String> {
    let uid = u.user.uid;
    assert_eq!(escapees(uid), Vec::<String>::new(), "a clean start");
    let mut names = Vec::new();
    for (how, escape, count) in GROUP_ESCAPES {
        let command = format!("{WAIT_FOR}{escape}");
        // The control: no cgroup, no PID namespace, a group of its own:
        // nothing but the cgroup could end these.
        let out = shell_with(&u.user, &command, shared(false)).await;
        assert_eq!(out.stdout.trim(), "started", "control, {how}: {out:?}");
        let limits = out.limits.clone().unwrap();
        assert_eq!(limits.cgroup, None, "control, {how}: {limits:?}");
        assert_eq!(limits.view.as_deref(), Some("shared"), "{limits:?}");
        let survived = escapees(uid);
        assert_eq!(
            survived.len(),
            count,
            "control, {how}: without a cgroup the escapees survive the call: {survived:?}"
        );
        kill_escapees(uid);

        // The same escape in a cgroup of its own.
        let out = shell_with(&u.user, &command, shared(true)).await;
        assert_eq!(out.stdout.trim(), "started", "{how}: {out:?}");
        let limits = out.limits.clone().unwrap();
        assert_eq!(limits.view.as_deref(), Some("shared"), "{limits:?}");
        assert_eq!(
            escapees(uid),
            Vec::<String>::new(),
            "{how}: processes outlived the call: {out:?}"
        );
        assert_eq!(
            limits.killed_at_end, count as u64,
            "{how}: the cgroup's kill is counted, once for each escapee: {limits:?}"
        );
        assert_eq!(limits.cleanup_error, None, "{how}: {limits:?}");
        // It ended without waiting for the user's other call, and did not
        // take it down (an event: that call is still running).
        assert!(still_running(), "{how}: the concurrent call ended");
        check(how, &out);
        eprintln!(
            "{how}: {count} escapee(s) survived without a cgroup; with one, {} killed at the end",
            limits.killed_at_end
        );
        names.push(limits.cgroup.clone().expect("the call had a cgroup"));
    }
    names
}
