//! Which cgroup controllers this process could hand to a call: its own
//! cgroup v2 folder (found from `/proc/self/cgroup` and the cgroup2 mount
//! in `/proc/self/mountinfo`), the controllers listed there, and whether
//! it may make folders in it; on a host of cgroup v1 hierarchies, which
//! controllers they carry.
//!
//! Guarantees: a folder is called writable only when `access(W_OK)` said
//! so (a read-only mount, as a container's `/sys/fs/cgroup` usually is,
//! answers `EROFS`); what cannot be read is reported as missing, never as
//! delegated.
#![forbid(unsafe_code)]

use std::fmt;
use std::path::PathBuf;

/// This process's cgroup v2 folder and what it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnCgroupV2 {
    /// The folder (mount point joined with the path below the mount's root).
    pub dir: PathBuf,
    /// `cgroup.controllers` of the folder.
    pub controllers: Vec<String>,
    /// `access(W_OK)` on the folder: `Ok` or the errno it gave.
    pub writable: Result<(), String>,
}

/// What the cgroup hierarchies offer this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroups {
    /// The cgroup2 folder, if a cgroup2 mount holds this process.
    pub v2: Option<OwnCgroupV2>,
    /// Controllers of the v1 hierarchies this process is in.
    pub v1_controllers: Vec<String>,
    /// This process's folder in the v1 `pids` hierarchy, if one is mounted.
    pub v1_pids: Option<PathBuf>,
    /// `access(W_OK)` on that folder: `Ok` or the errno it gave (a
    /// container's cgroup mounts are usually read-only: `EROFS`).
    pub v1_pids_writable: Result<(), String>,
}

impl Default for Cgroups {
    fn default() -> Self {
        Self {
            v2: None,
            v1_controllers: Vec::new(),
            v1_pids: None,
            v1_pids_writable: Err("not checked".into()),
        }
    }
}

impl Cgroups {
    /// Reads this process's cgroups.
    pub fn detect() -> Self {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mut found = Self::parse(&mountinfo, &own);
        if let Some(v2) = &mut found.v2 {
            v2.controllers = std::fs::read_to_string(v2.dir.join("cgroup.controllers"))
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect();
            v2.writable = nix::unistd::access(&v2.dir, nix::unistd::AccessFlags::W_OK)
                .map_err(|e| format!("{e:?}"));
        }
        if let Some(dir) = &found.v1_pids {
            found.v1_pids_writable = nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK)
                .map_err(|e| format!("{e:?}"));
        }
        found
    }

    /// Where this process's v2 folder is and which v1 controllers hold it,
    /// from mountinfo text and `/proc/self/cgroup` (nothing read yet of
    /// the folder itself).
    pub fn parse(mountinfo: &str, own_cgroup: &str) -> Self {
        let mut out = Self::default();
        let v2_path = own_cgroup
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(str::to_string);
        for line in own_cgroup.lines() {
            let mut f = line.splitn(3, ':');
            if let (Some(id), Some(controllers)) = (f.next(), f.next()) {
                if id != "0" {
                    out.v1_controllers.extend(
                        controllers
                            .split(',')
                            .filter(|c| !c.is_empty() && !c.starts_with("name="))
                            .map(str::to_string),
                    );
                }
            }
        }
        out.v1_controllers.sort();
        out.v1_pids = v1_pids_dir(mountinfo, own_cgroup);
        let Some(path) = v2_path else {
            return out;
        };
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            if right.split_whitespace().next() != Some("cgroup2") {
                continue;
            }
            let fields: Vec<&str> = left.split_whitespace().collect();
            let (Some(root), Some(point)) = (fields.get(3), fields.get(4)) else {
                continue;
            };
            // The path below the mount's root (a container's cgroup
            // namespace mounts its own cgroup as the root).
            let below = path
                .strip_prefix(root.trim_end_matches('/'))
                .unwrap_or(&path);
            let mut dir = PathBuf::from(point);
            dir.extend(below.split('/').filter(|s| !s.is_empty()));
            out.v2 = Some(OwnCgroupV2 {
                dir,
                controllers: Vec::new(),
                writable: Err("not checked".into()),
            });
            break;
        }
        out
    }

    /// Whether a call can get a cgroup of its own with a `pids` limit:
    /// in the v2 folder (writable, with `pids` and `memory`), or in a
    /// writable v1 `pids` hierarchy (as on a hybrid host, where the v2 one
    /// delegates nothing).
    pub fn delegated(&self) -> bool {
        let v2 = self.v2.as_ref().is_some_and(|v2| {
            v2.writable.is_ok()
                && ["pids", "memory"]
                    .iter()
                    .all(|c| v2.controllers.iter().any(|have| have == c))
        });
        v2 || (self.v1_pids.is_some() && self.v1_pids_writable.is_ok())
    }
}

impl fmt::Display for Cgroups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.v2 {
            Some(v2) => write!(
                f,
                "v2 {}: controllers [{}], {}",
                v2.dir.display(),
                v2.controllers.join(" "),
                match &v2.writable {
                    Ok(()) => "writable".to_string(),
                    Err(e) => format!("not writable ({e})"),
                }
            )?,
            None => f.write_str("no cgroup v2 folder")?,
        }
        if !self.v1_controllers.is_empty() {
            write!(f, "; v1 [{}]", self.v1_controllers.join(" "))?;
        }
        if let (Some(dir), Err(e)) = (&self.v1_pids, &self.v1_pids_writable) {
            write!(f, ", v1 pids {} not writable ({e})", dir.display())?;
        }
        Ok(())
    }
}

/// This process's folder in the v1 hierarchy carrying `pids`: the mount
/// point joined with the path below the mount's root.
fn v1_pids_dir(mountinfo: &str, own_cgroup: &str) -> Option<PathBuf> {
    let path = own_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next(), f.next()?, f.next()?);
        controllers.split(',').any(|c| c == "pids").then_some(path)
    })?;
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut r = right.split_whitespace();
        let (fstype, _source, options) = (r.next()?, r.next()?, r.next().unwrap_or(""));
        if fstype != "cgroup" || !options.split(',').any(|o| o == "pids") {
            return None;
        }
        let fields: Vec<&str> = left.split_whitespace().collect();
        let (root, point) = (fields.get(3)?, fields.get(4)?);
        let below = path
            .strip_prefix(root.trim_end_matches('/'))
            .unwrap_or(path);
        let mut dir = PathBuf::from(point);
        dir.extend(below.split('/').filter(|s| !s.is_empty()));
        Some(dir)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n\
                          31 23 0:27 / /proc rw - proc proc rw\n";

    #[test]
    fn a_host_cgroup_is_found_below_the_mount() {
        let c = Cgroups::parse(MOUNTS, "0::/system.slice/tono.service\n");
        assert_eq!(
            c.v2.unwrap().dir,
            PathBuf::from("/sys/fs/cgroup/system.slice/tono.service")
        );
    }

    #[test]
    fn a_container_with_its_own_cgroup_namespace_is_at_the_mount_root() {
        let c = Cgroups::parse(
            "600 590 0:26 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n",
            "0::/\n",
        );
        assert_eq!(c.v2.unwrap().dir, PathBuf::from("/sys/fs/cgroup"));
    }

    #[test]
    fn a_hybrid_host_lists_its_v1_controllers_and_nothing_is_delegated_unread() {
        let c = Cgroups::parse(
            "40 23 0:30 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
            "12:pids:/user.slice\n11:cpu,cpuacct:/\n1:name=systemd:/x\n0::/user.slice\n",
        );
        assert_eq!(c.v1_controllers, ["cpu", "cpuacct", "pids"]);
        assert_eq!(c.v1_pids, None, "no pids hierarchy is mounted in this text");
        assert!(!c.delegated(), "nothing read of the folders yet");
        let mounted = Cgroups::parse(
            "41 23 0:31 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n",
            "12:pids:/user.slice\n0::/user.slice\n",
        );
        assert_eq!(
            mounted.v1_pids,
            Some(PathBuf::from("/sys/fs/cgroup/pids/user.slice"))
        );
        // Writable only when access(W_OK) said so.
        let mut writable = mounted.clone();
        writable.v1_pids_writable = Ok(());
        assert!(writable.delegated());
        let mut read_only = mounted;
        read_only.v1_pids_writable = Err("EROFS".into());
        assert!(!read_only.delegated());
        assert!(read_only
            .to_string()
            .contains("v1 pids /sys/fs/cgroup/pids/user.slice not writable (EROFS)"));
        assert_eq!(
            c.v2.as_ref().unwrap().dir,
            PathBuf::from("/sys/fs/cgroup/unified/user.slice")
        );
    }
}
