//! A worker started with umask 0 still makes every cgroup folder of a call
//! root's `0755`: cgroupfs applies the umask to `mkdir`, and a folder a
//! user can write is one it can make cgroups in. One test in its own
//! binary: the umask is the whole process's.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{rt, shell, TestUser};
use tono_seal::contain;

#[test]
fn a_calls_cgroup_folders_are_0755_under_a_worker_with_umask_0() {
    need_root!();
    nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    // Positive control: this process's umask is really 0.
    let probe = tempfile::tempdir().unwrap();
    let made = probe.path().join("made");
    std::fs::create_dir(&made).unwrap();
    let mode = std::fs::metadata(&made).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o777, "the umask is 0");

    let mounts = contain::mounts();
    let mut script = String::new();
    let mut expected = 0;
    for (label, mount, controller) in [
        ("v2", &mounts.v2, "^0::"),
        ("pids", &mounts.v1_pids, ":pids:"),
        ("memory", &mounts.v1_memory, ":memory:"),
    ] {
        let Some(mount) = mount else { continue };
        let base = mount.join("tono");
        script.push_str(&format!(
            "stat -c '{label} call %a' \"{}/$(grep '{controller}' /proc/self/cgroup | cut -d: -f3 | xargs basename)\"\n\
             stat -c '{label} base %a' \"{}\"\n",
            base.display(),
            base.display()
        ));
        expected += 2;
    }
    assert!(expected > 0, "this host has no cgroup hierarchy to check");
    let u = TestUser::bare();
    let out = rt().block_on(shell(&u.user, &script, Duration::from_secs(10)));
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), expected, "{out:?}");
    for line in lines {
        assert!(
            line.ends_with(" 755"),
            "{line}: a cgroup folder the user could write"
        );
    }
}
