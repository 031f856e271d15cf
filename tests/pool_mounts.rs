//! A pooled launcher holds a copy of the worker's mount table taken when
//! it started. After the host mounts or unmounts something, a call must
//! see the host as it is now: a launcher started before the change is
//! ended at the change (so it holds no unmounted file system busy), and
//! never handed out. One test in its own binary, because the pool is the
//! process's.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{launcher, rt, TestUser};
use serde_json::json;
use tono_seal::classify::Policy;
use tono_seal::drop::pool::POOL_SIZE;
use tono_seal::drop::{drop_and_run, DropRequest, Launcher, RunOptions};
use tono_seal::user::TargetUser;
use tono_seal::Outcome;

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

fn shell(launcher: &Launcher, user: &TargetUser, command: &str) -> Outcome {
    let raw = serde_json::to_vec(&json!({"tool": "shell", "args": {"command": command}})).unwrap();
    rt().block_on(drop_and_run(&DropRequest {
        launcher,
        policy: &Policy::default(),
        user,
        grants: &[],
        call: &raw,
        options: RunOptions::default(),
    }))
}

/// Gone: reaped, or a zombie not yet reaped.
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
    })
}

/// The pool's launchers once it holds `want`, each past making its own
/// mount namespace (its `ns/mnt` is not this process's): each holds a
/// copy of the host's mounts from then on.
fn wait_for_own_mount_namespaces(want: usize) -> Vec<u32> {
    let own = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    for _ in 0..1_000 {
        let listed = wait_for_listed(want);
        let apart = listed
            .iter()
            .all(|pid| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok_and(|ns| ns != own));
        if listed.len() >= want && apart {
            return listed;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the pool's launchers never held mount namespaces of their own");
}

/// Until each of `pids` has ended (counted: at most 1,000 looks, 10 ms
/// apart), with no call made meanwhile.
fn wait_until_gone(pids: &[u32], change: &str) {
    for _ in 0..1_000 {
        if pids.iter().all(|pid| gone(*pid)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let left: Vec<&u32> = pids.iter().filter(|pid| !gone(**pid)).collect();
    panic!("launchers {left:?}, started before {change}, still wait");
}

/// A tmpfs the test mounted on the host, unmounted when dropped.
struct Mounted(String);

impl Mounted {
    fn at(dir: &str) -> Self {
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                "mode=0755,size=64k",
                "tonotest-pool",
                dir,
            ])
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount a tmpfs on {dir}");
        std::fs::write(format!("{dir}/seen"), "mounted\n").unwrap();
        Self(dir.to_owned())
    }

    fn unmount(self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .unwrap()
            .success();
        assert!(ok, "umount {}", self.0);
        std::mem::forget(self);
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_pooled_launcher_started_before_the_host_mounts_or_unmounts_is_never_handed_out() {
    need_root!();
    let u = TestUser::bare();
    let launcher = launcher();
    let dir = common::marker_path(&format!("tono-pool-mounts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let look = format!("cat {dir}/seen 2>&1; echo rc=$?");

    // Before any change: the file is not there, in the host's view or the
    // call's; the first call starts its own launcher and asks for the pool,
    // and the next is run by a pooled one while the newer still waits.
    let first = shell(&launcher, &u.user, &look);
    assert!(first.stdout.contains("No such file"), "{first:?}");
    let before = wait_for_listed(POOL_SIZE);
    assert_eq!(before.len(), POOL_SIZE, "the pool fills: {before:?}");
    let control = shell(&launcher, &u.user, &look);
    assert!(control.stdout.contains("No such file"), "{control:?}");
    assert!(gone(before[0]), "a pooled launcher ran the call (control)");
    assert!(!gone(before[1]), "the newer one still waits (control)");

    // The host mounts a tmpfs with a file. The launchers waiting since
    // before it, each in a mount namespace of its own (control), are
    // ended at the change, before any call asks; the next call sees it.
    let listed = wait_for_own_mount_namespaces(POOL_SIZE);
    let mounted = Mounted::at(&dir);
    wait_until_gone(&listed, "the mount");
    let out = shell(&launcher, &u.user, &look);
    assert_eq!(
        out.stdout, "mounted\nrc=0\n",
        "after the host mounted: {out:?}"
    );

    // Launchers started after the mount see it (control: one from the pool
    // runs the call); then the host unmounts it: the waiting ones are
    // ended, and a call no longer sees the file, with the errno.
    let after_mount = wait_for_own_mount_namespaces(POOL_SIZE);
    assert!(
        after_mount.iter().all(|pid| !listed.contains(pid)),
        "{after_mount:?} {listed:?}"
    );
    let control = shell(&launcher, &u.user, &look);
    assert_eq!(control.stdout, "mounted\nrc=0\n", "control: {control:?}");
    assert!(
        gone(after_mount[0]),
        "a pooled launcher ran the call (control)"
    );
    let waiting = wait_for_own_mount_namespaces(POOL_SIZE);
    mounted.unmount();
    wait_until_gone(&waiting, "the unmount");
    let out = shell(&launcher, &u.user, &look);
    assert!(
        out.stdout.contains("No such file") && out.stdout.ends_with("rc=1\n"),
        "after the host unmounted, the call still saw the tmpfs: {out:?}"
    );
    let _ = std::fs::remove_dir(&dir);
}
