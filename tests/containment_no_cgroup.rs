//! A host with no cgroup at all (the worker is told to use none): the
//! per-user sweep. What escaped a call is killed when the user's last live
//! call ends, never while another call of the user runs; and, the weaker
//! guarantee `verify` warns of, the user's other processes die with it.
//! One test in its own binary: the mounts are set once per process. The
//! calls use the shared view: in the private one each call's PID namespace
//! ends with it, and no sweep is needed or made.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{limits_note, live_processes, rt, shell_shared as shell, TestUser};
use tono_seal::contain::{self, Mounts};

fn escapees(uid: u32, marker: &str) -> Vec<String> {
    live_processes(uid)
        .into_iter()
        .filter(|p| p.contains(marker))
        .collect()
}

#[test]
fn without_any_cgroup_the_users_last_call_sweeps_its_processes() {
    need_root!();
    assert!(contain::use_mounts(Mounts {
        v2: None,
        v1_pids: None,
        v1_memory: None,
    }));
    let u = TestUser::with_key();
    let escape = "setsid sleep 1000 & sleep 0.3; echo started";
    rt().block_on(async {
        // Alone: the escapee is gone when the call returns.
        let out = shell(&u.user, escape, Duration::from_secs(10)).await;
        assert_eq!(out.stdout.trim(), "started", "{out:?}");
        assert_eq!(escapees(u.user.uid, "1000"), Vec::<String>::new());
        let note = limits_note(&out);
        assert!(note.contains("swept"), "{note}");
        // No pids controller: the outcome says the limit is the uid's rlimit.
        assert!(note.starts_with("limits by rlimit only"), "{note}");

        // With another call of the user live, nothing is swept until it
        // ends, and it is not killed.
        let user = u.user.clone();
        let long = tokio::spawn(async move {
            shell(&user, "sleep 2; echo survived", Duration::from_secs(20)).await
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let out = shell(&u.user, escape, Duration::from_secs(10)).await;
        assert_eq!(out.stdout.trim(), "started", "{out:?}");
        let note = limits_note(&out);
        assert!(note.contains("1 other live call"), "{note}");
        assert_eq!(
            escapees(u.user.uid, "1000").len(),
            1,
            "the escapee lives while the user has a live call"
        );
        let long = long.await.unwrap();
        assert_eq!(long.stdout.trim(), "survived", "{long:?}");
        let note = limits_note(&long);
        assert!(note.contains("swept"), "{note}");
        assert_eq!(escapees(u.user.uid, "1000"), Vec::<String>::new());

        // The weaker guarantee: a process of the uid that no call started
        // (a login session) is swept too.
        let mut session = Command::new("runuser")
            .args(["-u", u.name(), "--", "sleep", "1001"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while escapees(u.user.uid, "1001").is_empty() && t.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let out = shell(&u.user, "echo hi", Duration::from_secs(10)).await;
        assert_eq!(out.stdout.trim(), "hi", "{out:?}");
        let status = session.wait().unwrap();
        assert!(
            !status.success(),
            "the session's sleep was killed: {status:?}"
        );
    });
}
