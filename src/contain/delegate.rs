//! A worker at the root of a private cgroup namespace delegates the
//! `pids` and `memory` controllers to itself, so that its calls get the
//! cgroup limits they get on a host.
//!
//! A container started with a cgroup namespace of its own and a writable
//! `/sys/fs/cgroup` (Docker's default on a cgroup v2 host, with the
//! capabilities of `docs/containers.md`) sees its own cgroup as the root.
//! That cgroup is not the kernel's root: it holds the container's
//! processes, so the kernel refuses to enable a controller for its
//! children (`EBUSY`, "no internal processes"). The worker first moves
//! every process of it into a leaf of its own, [`WORKER_LEAF`], and then
//! enables the controllers, as container inits that nest cgroups do.
//!
//! Guarantees: processes are moved only out of a cgroup that is not the
//! kernel's root (it has `cgroup.type`) and is this process's namespace's
//! root (`0::/` in `/proc/self/cgroup`), and before any controller is
//! enabled there (`pids`, a threaded controller, enabled beside processes
//! would make it a thread root, under which no call cgroup can be made a
//! domain); on a host, the kernel's root cgroup takes the controllers as
//! it is, and nothing is moved. A controller the
//! namespace's root does not have is never asked for. Whatever cannot be
//! enabled stays so, and the call's limits say so (`limits by rlimit only`),
//! never assumed.
#![forbid(unsafe_code)]

use std::fs;
use std::io;
use std::path::Path;

/// The leaf the worker moves its container's processes into.
pub const WORKER_LEAF: &str = "tono-worker";

/// How many times the processes are moved before enabling is given up
/// (a process forked between the move and the write is in the root again).
const MOVE_ROUNDS: usize = 3;

fn words(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// Whether this process's v2 cgroup is its namespace's root.
fn at_namespace_root() -> bool {
    fs::read_to_string("/proc/self/cgroup")
        .unwrap_or_default()
        .lines()
        .any(|l| l == "0::/")
}

/// Moves every process of the cgroup `mount` into its leaf [`WORKER_LEAF`].
fn move_into_leaf(mount: &Path) -> io::Result<()> {
    let leaf = mount.join(WORKER_LEAF);
    match super::cgroupfs::make_cgroup_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    for pid in words(&mount.join("cgroup.procs")) {
        // A process that ended meanwhile (ESRCH) is not in the way.
        match super::cgroupfs::write_file(&leaf.join("cgroup.procs"), &pid) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Enables `pids` and `memory` for the children of the v2 cgroup `mount`
/// where it has them and they are not yet, first moving the processes in
/// it into a leaf when it is a namespace's root that is not the kernel's
/// (see the module docs). Returns the controllers enabled for its
/// children afterwards.
pub fn delegate_to_self(mount: &Path) -> Vec<String> {
    let available = words(&mount.join("cgroup.controllers"));
    let missing: Vec<&str> = ["memory", "pids"]
        .into_iter()
        .filter(|c| available.iter().any(|a| a == c))
        .filter(|c| {
            !words(&mount.join("cgroup.subtree_control"))
                .iter()
                .any(|e| e == c)
        })
        .collect();
    if missing.is_empty() {
        return words(&mount.join("cgroup.subtree_control"));
    }
    // The kernel's root has no `cgroup.type`; any other cgroup with
    // processes in it cannot give a domain controller (memory) to its
    // children (EBUSY), and one given `pids` (a threaded controller) while
    // it holds processes becomes a thread root, under which no call cgroup
    // is a valid domain (EOPNOTSUPP when a launcher is started into one).
    // So the processes leave first.
    let not_the_kernels_root = mount.join("cgroup.type").exists();
    for _ in 0..MOVE_ROUNDS {
        if !(not_the_kernels_root
            && at_namespace_root()
            && !words(&mount.join("cgroup.procs")).is_empty())
        {
            break;
        }
        if let Err(e) = move_into_leaf(mount) {
            tracing::warn!(error = %e, "moving the container's processes into a leaf failed");
            return words(&mount.join("cgroup.subtree_control"));
        }
    }
    for controller in missing {
        let enabled = super::cgroupfs::write_file(
            &mount.join("cgroup.subtree_control"),
            &format!("+{controller}"),
        );
        if let Err(e) = enabled {
            tracing::debug!(controller, error = %e, "the controller is not delegated here");
        }
    }
    words(&mount.join("cgroup.subtree_control"))
}
