//! Where the cgroup hierarchies are mounted, read once per process from
//! `/proc/self/mountinfo` and `/proc/self/cgroup` (root-owned files), and
//! whether a call can be tracked by any of them.
#![forbid(unsafe_code)]

use std::fs;
use std::path::PathBuf;

/// Where the cgroup hierarchies are mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mounts {
    /// The cgroup2 mount.
    pub v2: Option<PathBuf>,
    /// The cgroup v1 mount carrying the `pids` controller.
    pub v1_pids: Option<PathBuf>,
    /// The worker's own cgroup in the v1 `memory` hierarchy (mount point
    /// joined with the path in `/proc/self/cgroup`).
    pub v1_memory: Option<PathBuf>,
}

impl Mounts {
    /// Reads `/proc/self/mountinfo` and `/proc/self/cgroup`.
    pub fn detect() -> Self {
        let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        Self::parse(&text, &own)
    }

    /// Parses mountinfo text and this process's cgroup list.
    pub fn parse(text: &str, own_cgroups: &str) -> Self {
        let mut mounts = Self {
            v2: None,
            v1_pids: None,
            v1_memory: None,
        };
        for line in text.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let Some(point) = left.split_whitespace().nth(4) else {
                continue;
            };
            let mut r = right.split_whitespace();
            let (fstype, _source, options) = (r.next(), r.next(), r.next().unwrap_or(""));
            match fstype {
                Some("cgroup2") if mounts.v2.is_none() => mounts.v2 = Some(PathBuf::from(point)),
                Some("cgroup") if options.split(',').any(|o| o == "pids") => {
                    mounts.v1_pids = Some(PathBuf::from(point))
                }
                Some("cgroup") if options.split(',').any(|o| o == "memory") => {
                    // Only a mount of the hierarchy's root says where our own
                    // cgroup is; a mount of a sub-tree is left alone.
                    let root = left.split_whitespace().nth(3);
                    let own = own_cgroups.lines().find_map(|l| {
                        let mut f = l.splitn(3, ':');
                        let (_, controllers, path) = (f.next(), f.next()?, f.next()?);
                        controllers
                            .split(',')
                            .any(|c| c == "memory")
                            .then_some(path)
                    });
                    if let (Some("/"), Some(own)) = (root, own) {
                        let own = own.trim_start_matches('/');
                        let valid = !own.split('/').any(|c| c == ".." || c == ".");
                        if valid {
                            mounts.v1_memory = Some(PathBuf::from(point).join(own));
                        }
                    }
                }
                _ => {}
            }
        }
        mounts
    }
}

static MOUNTS: std::sync::OnceLock<Mounts> = std::sync::OnceLock::new();

/// The mounts, read once per process (they do not move under a worker).
pub fn mounts() -> &'static Mounts {
    MOUNTS.get_or_init(Mounts::detect)
}

/// Uses `mounts` instead of the detected ones, for the rest of the process
/// (a worker told to leave a hierarchy alone; tests of hosts without cgroup
/// v2). False when the mounts were already in use.
pub fn use_mounts(mounts: Mounts) -> bool {
    MOUNTS.set(mounts).is_ok()
}

/// Whether a call with cgroups asked for is tracked by none: no v2 and no
/// v1 pids or memory hierarchy. Such calls get the per-user sweep.
pub fn untracked(mounts: &Mounts) -> bool {
    mounts.v2.is_none() && mounts.v1_pids.is_none() && mounts.v1_memory.is_none()
}

/// Whether a call's cgroups are all v2 (no v1 `pids` or `memory`
/// hierarchy beside it): its launcher can then be started inside them, with
/// no `cgroup.procs` write on the call's path.
pub fn v2_only(mounts: &Mounts) -> bool {
    mounts.v2.is_some() && mounts.v1_pids.is_none() && mounts.v1_memory.is_none()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn finds_hybrid_mounts() {
        let text = "30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n\
                    35 25 0:31 / /sys/fs/cgroup/pids rw,nosuid shared:14 - cgroup cgroup rw,pids\n\
                    36 25 0:32 / /sys/fs/cgroup/memory rw shared:15 - cgroup cgroup rw,memory\n";
        let own = "8:pids:/\n4:memory:/process_api/abc\n0::/\n";
        let m = Mounts::parse(text, own);
        assert_eq!(m.v2.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        assert_eq!(m.v1_pids.as_deref(), Some(Path::new("/sys/fs/cgroup/pids")));
        assert_eq!(
            m.v1_memory.as_deref(),
            Some(Path::new("/sys/fs/cgroup/memory/process_api/abc"))
        );
        // A memory path that climbs is never used.
        let m = Mounts::parse(text, "4:memory:/../etc\n");
        assert_eq!(m.v1_memory, None);
    }
}
