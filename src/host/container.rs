//! Whether this process runs in a container, and which runtime made it,
//! from what runtimes leave behind: `/.dockerenv` (Docker),
//! `/run/.containerenv` (Podman), `container=` in PID 1's environment
//! (systemd-nspawn, LXC, Podman), and the runtime's name in this process's
//! cgroup paths (Docker, containerd, Kubernetes, Podman, LXC).
//!
//! Guarantees: only what a runtime left is reported, with the marker that
//! said so; no marker is "no container seen", never "not a container"
//! (a runtime may leave none).
#![forbid(unsafe_code)]

use std::fmt;
use std::path::Path;

/// What the markers said.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Container {
    /// The runtime named by the first marker found (`docker`, `podman`,
    /// `kubernetes`, `containerd`, `lxc`, `systemd-nspawn`, or PID 1's own
    /// `container=` value); `None` when no marker was found.
    pub runtime: Option<String>,
    /// Each marker found, as `what: value` (for the operator).
    pub markers: Vec<String>,
}

impl Container {
    /// Reads the markers of this machine (root-owned files only).
    pub fn detect() -> Self {
        let pid1_environ = std::fs::read("/proc/1/environ").unwrap_or_default();
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        Self::from_markers(
            Path::new("/.dockerenv").exists(),
            Path::new("/run/.containerenv").exists(),
            &pid1_environ,
            &cgroup,
        )
    }

    /// What the given markers say.
    pub fn from_markers(
        dockerenv: bool,
        containerenv: bool,
        pid1_environ: &[u8],
        own_cgroup: &str,
    ) -> Self {
        let mut found = Self::default();
        let mut mark = |runtime: &str, marker: String| {
            found.runtime.get_or_insert_with(|| runtime.to_string());
            found.markers.push(marker);
        };
        if dockerenv {
            mark("docker", "/.dockerenv exists".into());
        }
        if containerenv {
            mark("podman", "/run/.containerenv exists".into());
        }
        for var in pid1_environ.split(|b| *b == 0) {
            let var = String::from_utf8_lossy(var);
            if let Some(value) = var.strip_prefix("container=") {
                mark(value, format!("PID 1 has container={value}"));
            }
            if var.starts_with("KUBERNETES_SERVICE_HOST=") {
                mark("kubernetes", "PID 1 has KUBERNETES_SERVICE_HOST".into());
            }
        }
        const IN_PATH: [(&str, &str); 6] = [
            ("kubepods", "kubernetes"),
            ("/docker", "docker"),
            ("docker-", "docker"),
            ("libpod", "podman"),
            ("containerd", "containerd"),
            ("/lxc", "lxc"),
        ];
        for line in own_cgroup.lines() {
            let path = line.splitn(3, ':').nth(2).unwrap_or("");
            if let Some((_, runtime)) = IN_PATH.iter().find(|(needle, _)| path.contains(needle)) {
                mark(runtime, format!("cgroup path {path}"));
                break;
            }
        }
        found
    }
}

impl fmt::Display for Container {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.runtime {
            Some(runtime) => write!(f, "{runtime} ({})", self.markers.join("; ")),
            None => f.write_str("no container marker seen"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_runtime_is_named_by_its_marker() {
        let docker = Container::from_markers(true, false, b"", "0::/\n");
        assert_eq!(docker.runtime.as_deref(), Some("docker"));
        let podman = Container::from_markers(false, true, b"PATH=/bin\0container=podman\0", "");
        assert_eq!(podman.runtime.as_deref(), Some("podman"));
        assert_eq!(podman.markers.len(), 2);
        let nspawn = Container::from_markers(false, false, b"container=systemd-nspawn\0", "");
        assert_eq!(nspawn.runtime.as_deref(), Some("systemd-nspawn"));
        let pod = Container::from_markers(
            false,
            false,
            b"",
            "0::/kubepods.slice/kubepods-besteffort.slice/cri-containerd-ab.scope\n",
        );
        assert_eq!(pod.runtime.as_deref(), Some("kubernetes"));
        let v1 = Container::from_markers(false, false, b"", "12:pids:/docker/0123abcd\n");
        assert_eq!(v1.runtime.as_deref(), Some("docker"));
    }

    #[test]
    fn a_host_leaves_no_marker_and_says_so() {
        let host =
            Container::from_markers(false, false, b"HOME=/\0TERM=linux\0", "0::/init.scope\n");
        assert_eq!(host.runtime, None);
        assert_eq!(host.to_string(), "no container marker seen");
    }
}
