//! The launcher pool against a real kernel: a waiting launcher is root,
//! in a call cgroup of its own and has read no plan; one that died while
//! waiting is never handed out; and a call through the pool is the same
//! dropped, proven call as one through a fresh launcher. One test in its
//! own binary, because it counts and kills the process's launchers.

mod common;

use std::time::{Duration, Instant};

use common::{launcher, rt, TestUser};
use serde_json::json;
use tono_seal::classify::Policy;
use tono_seal::drop::pool::POOL_SIZE;
use tono_seal::drop::Launcher;
use tono_seal::drop::{drop_and_run, DropRequest, RunOptions, SecretGrant};
use tono_seal::user::TargetUser;
use tono_seal::Outcome;

/// This process's children that run `tono-launch` and have not exited.
fn waiting_launchers() -> Vec<u32> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let mut fields = rest.split(' ');
        let (state, ppid) = (fields.next(), fields.next());
        if head.ends_with("(tono-launch") && ppid == Some(me.as_str()) && state != Some("Z") {
            found.push(entry.file_name().to_string_lossy().parse().unwrap());
        }
    }
    found
}

fn wait_for_pool(want: usize) -> Vec<u32> {
    let t = Instant::now();
    loop {
        let found = waiting_launchers();
        if found.len() >= want || t.elapsed() > Duration::from_secs(10) {
            return found;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The launchers in the pool's own list, once it holds `want` of them
/// (counted: at most 1,000 looks, 10 ms apart).
fn wait_for_listed(want: usize) -> Vec<u32> {
    for _ in 0..1_000 {
        let listed = tono_seal::drop::pool::waiting_pids();
        if listed.len() >= want {
            return listed;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    tono_seal::drop::pool::waiting_pids()
}

fn call(launcher: &Launcher, user: &TargetUser) -> Outcome {
    let raw = serde_json::to_vec(&json!({"tool": "shell", "args": {
        "command": "printf '%s %s' \"$(id -u)\" \"$TOK\"", "secrets": ["tok"]}}))
    .unwrap();
    let grants = [SecretGrant::parse("tok=TOK").unwrap()];
    rt().block_on(drop_and_run(&DropRequest {
        launcher,
        policy: &Policy::default(),
        user,
        grants: &grants,
        call: &raw,
        options: RunOptions::default(),
    }))
}

/// The scheduling policy of `pid`, from `/proc/PID/sched`.
fn policy(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/sched"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("policy"))
        .and_then(|v| v.trim_start_matches([' ', ':']).trim().parse().ok())
        .expect("a policy line")
}

fn status_field(pid: u32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field).map(|v| v.trim().to_owned()))
        .unwrap_or_default()
}

#[test]
fn pooled_launchers_wait_as_root_and_a_dead_one_is_never_handed_out() {
    need_root!();
    let u = TestUser::with_key();
    u.seal("tok", b"pool-value");
    let launcher = launcher();
    // The tool prints the value; it arrives masked, which proves it was the
    // one the launcher unsealed.
    let want = format!("{} [masked:tok]", u.user.uid);

    // The first call starts its own launcher and asks for the pool.
    let first = call(&launcher, &u.user);
    assert_eq!(first.stdout, want, "{first:?}");
    let waiting = wait_for_pool(POOL_SIZE);
    assert_eq!(waiting.len(), POOL_SIZE, "the pool fills: {waiting:?}");

    // Waiting launchers are root, each already in a call cgroup of its own
    // (made by this worker), with nothing read: they have done nothing past
    // their start.
    let mut homes = Vec::new();
    for &pid in &waiting {
        assert_eq!(status_field(pid, "Uid:"), "0\t0\t0\t0", "launcher {pid}");
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        let v2 = cgroups
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or_default()
            .to_owned();
        assert!(
            v2.starts_with(&format!("/tono/call-{}-", std::process::id())),
            "launcher {pid} waits in its own call cgroup: {cgroups}"
        );
        homes.push(v2);
        // Waiting at SCHED_IDLE (5), so a refill takes no core from a call.
        assert_eq!(policy(pid), 5, "launcher {pid} waits at SCHED_IDLE");
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        assert!(
            wchan.contains("pipe_read") || wchan.contains("wait") || wchan == "0",
            "launcher {pid} blocks reading its plan, in {wchan:?}"
        );
    }
    homes.sort();
    homes.dedup();
    assert_eq!(homes.len(), waiting.len(), "one cgroup each: {homes:?}");

    // Pooled calls are the same dropped calls.
    for _ in 0..5 {
        let out = call(&launcher, &u.user);
        assert_eq!(out.stdout, want, "{out:?}");
    }

    // A call takes the launcher that has waited longest: the newest may
    // have been started a moment ago and still be loading. (One kind of
    // launcher in this test: the pool lists each kind's oldest first.)
    let listed = wait_for_listed(POOL_SIZE);
    assert_eq!(listed.len(), POOL_SIZE, "{listed:?}");
    let out = call(&launcher, &u.user);
    assert_eq!(out.stdout, want, "{out:?}");
    let gone = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
        })
    };
    assert!(
        gone(listed[0]),
        "the oldest launcher {} did not run the call: it still waits",
        listed[0]
    );
    // The newer one still waits, now first in line, and the refill's new
    // launcher queues behind it.
    let refilled = wait_for_listed(POOL_SIZE);
    assert!(!gone(listed[1]), "the newer launcher {} ended", listed[1]);
    assert_eq!(
        refilled.first(),
        Some(&listed[1]),
        "after the call the newer launcher is next: {refilled:?} (before {listed:?})"
    );
    assert!(!refilled.contains(&listed[0]), "{refilled:?}");

    // A call that takes a waiting launcher runs at the normal policy
    // (SCHED_OTHER, 0), its tool with it; the launchers it took from were
    // at SCHED_IDLE (above).
    wait_for_listed(POOL_SIZE);
    let raw = serde_json::to_vec(&json!({"tool": "shell", "args": {
        "command": "sed -n 's/^policy *: *//p' /proc/self/sched"}}))
    .unwrap();
    let out = rt().block_on(drop_and_run(&DropRequest {
        launcher: &launcher,
        policy: &Policy::default(),
        user: &u.user,
        grants: &[],
        call: &raw,
        options: RunOptions::default(),
    }));
    assert_eq!(out.stdout.trim(), "0", "{out:?}");

    // Kill every launcher in the pool: the next call must not be handed a
    // dead one, and must still run. The pool's own list, not the process
    // table: a launcher the refill has started but not yet put in the pool
    // would be killed and handed in after the call took from it.
    wait_for_pool(POOL_SIZE);
    let waiting = wait_for_listed(POOL_SIZE);
    assert!(!waiting.is_empty());
    for &pid in &waiting {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    }
    // Until each has died (a zombie of this worker, or already reaped by
    // the pool): an event, not a time — under emulation a SIGKILLed
    // launcher took longer than the 50 ms this once slept.
    for &pid in &waiting {
        let stat = format!("/proc/{pid}/stat");
        let mut polls = 0u32;
        while std::fs::read_to_string(&stat).is_ok_and(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        }) {
            polls += 1;
            assert!(polls < 600_000, "launcher {pid} did not die after SIGKILL");
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let out = call(&launcher, &u.user);
    assert_eq!(
        out.stdout, want,
        "a call after its pooled launchers were killed: {out:?}"
    );
    // The dead ones were reaped, not left as zombies of the worker.
    let zombies: Vec<u32> = waiting
        .iter()
        .copied()
        .filter(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
        .collect();
    assert_eq!(zombies, Vec::<u32>::new(), "killed launchers are reaped");
    assert_eq!(wait_for_pool(POOL_SIZE).len(), POOL_SIZE, "and refilled");

    // Without the pool, a launcher is started for the call, with the same
    // result; the pool is left as it was.
    let fresh = call(&Launcher::at(common::launch_bin()).without_pool(), &u.user);
    assert_eq!(fresh.stdout, want, "{fresh:?}");
    assert_eq!(waiting_launchers().len(), POOL_SIZE);

    // A worker about to exit drains the pool: no launcher and no cgroup of
    // it is left.
    tono_seal::drop::pool::drain();
    assert_eq!(waiting_launchers(), Vec::<u32>::new());
    assert!(tono_seal::contain::settle(Duration::from_secs(5)));
    let mine = format!("call-{}-", std::process::id());
    let v2 = tono_seal::contain::mounts()
        .v2
        .clone()
        .expect("a cgroup2 mount");
    let left: Vec<String> = std::fs::read_dir(v2.join("tono"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&mine))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(left, Vec::<String>::new(), "the pool's cgroups are removed");
}
