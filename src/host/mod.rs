//! What this host lets the worker do: its capability sets and seccomp mode
//! ([`caps`]), whether it runs in a container and which runtime left the
//! markers ([`container`]), whether user namespaces are unprivileged and
//! its uids the host's ([`namespaces`]), and which cgroup controllers it
//! could hand to a call ([`cgroup`]) — read once, from root-owned files
//! under `/proc` and `/sys`, and shared by the worker's side of a call,
//! `verify` and the demo.
//!
//! Guarantees: a need is checked against what was read, and a capability
//! that could not be read counts as missing ([`HostFacts::lacking`]), so a
//! path that needs what the host does not grant is refused before it
//! starts anything, with a [`Lacking`] that names the need, the
//! capabilities and the fix; nothing here ever chooses a weaker mode.
#![forbid(unsafe_code)]

pub mod caps;
pub mod cgroup;
pub mod container;
pub mod namespaces;

use std::sync::OnceLock;

pub use caps::{CapSet, Capability, Privileges};
pub use cgroup::Cgroups;
pub use container::Container;
pub use namespaces::UserNamespaces;

/// Something a path of the project needs the host to grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Any launch: the launcher drops to the user and the worker signals it.
    Drop,
    /// The private view: new PID, mount and IPC namespaces, the store's
    /// cover and the home's mounts.
    PrivateView,
    /// A network of the call's own (`none`, `proxy`): a new network
    /// namespace and its `lo` brought up.
    OwnNetwork,
    /// Reading another process's memory that is not dumpable (the demo's
    /// scan of its worker).
    MemoryScan,
}

impl Need {
    /// The capabilities it takes.
    pub fn capabilities(self) -> &'static [Capability] {
        match self {
            Need::Drop => &[
                Capability::Setuid,
                Capability::Setgid,
                Capability::Setpcap,
                Capability::Kill,
                Capability::DacOverride,
                Capability::Fowner,
            ],
            Need::PrivateView => &[Capability::SysAdmin],
            Need::OwnNetwork => &[Capability::SysAdmin, Capability::NetAdmin],
            Need::MemoryScan => &[Capability::SysPtrace],
        }
    }

    /// What needs them, for the operator.
    pub fn what(self) -> &'static str {
        match self {
            Need::Drop => {
                "dropping to a user (setresuid, setgroups, emptying the launcher's bounding set, \
                 signalling the launcher, checking the user's key store and home)"
            }
            Need::PrivateView => {
                "the private view (new PID, mount and IPC namespaces, the key store's cover mount)"
            }
            Need::OwnNetwork => {
                "a network of the call's own, none or proxy (a new network namespace and its lo)"
            }
            Need::MemoryScan => "the scan of the worker's memory (it is not dumpable)",
        }
    }

    /// The stable code of a refusal for this need.
    pub fn code(self) -> &'static str {
        match self {
            Need::Drop => "drop_not_granted",
            Need::PrivateView => "private_view_not_granted",
            Need::OwnNetwork => "own_network_not_granted",
            Need::MemoryScan => "memory_scan_not_granted",
        }
    }

    /// Whether the capabilities are checked in both the set a program this
    /// process starts as root gets (the bounding set: the launcher) and
    /// this process's own effective set (its clone into the launcher's
    /// namespaces), or in the effective set alone.
    fn in_launcher(self) -> bool {
        !matches!(self, Need::MemoryScan)
    }

    /// Another way, where there is one.
    fn instead(self) -> Option<&'static str> {
        match self {
            Need::PrivateView => Some(
                "or run calls in the shared view (--view shared: no namespaces, the store \
                 not hidden, output not masked; verify reports it as the weakest)",
            ),
            Need::OwnNetwork => Some("or give calls the host's network (--network host)"),
            _ => None,
        }
    }
}

/// A need the host does not grant: what, which capabilities are missing,
/// and how to grant them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct Lacking {
    /// What was needed.
    pub need: Need,
    /// The capabilities missing for it.
    pub missing: Vec<Capability>,
    /// The container runtime seen, if any (for the fix's wording).
    pub runtime: Option<String>,
}

impl Lacking {
    /// The stable code ([`Need::code`]).
    pub fn code(&self) -> &'static str {
        self.need.code()
    }

    /// What to tell the operator: the need, the missing capabilities, the
    /// fix for the runtime seen, and the other way if there is one.
    pub fn message(&self) -> String {
        let names: Vec<&str> = self.missing.iter().map(|c| c.name()).collect();
        let adds: Vec<String> = self
            .missing
            .iter()
            .map(|c| format!("--cap-add {}", c.runtime_name()))
            .collect();
        let k8s: Vec<&str> = self.missing.iter().map(|c| c.runtime_name()).collect();
        let place = match &self.runtime {
            Some(r) => format!("this process (in a {r} container) lacks it"),
            None => "this process lacks it".to_string(),
        };
        let mut text = format!(
            "{} needs {}: {place}. Grant it: `docker run`/`podman run` {} (see \
             packaging/ for the profile), Kubernetes securityContext.capabilities.add: [{}], \
             or start the worker as root with them in its effective and bounding sets \
             (no SECBIT_NOROOT)",
            self.need.what(),
            names.join(" and "),
            adds.join(" "),
            k8s.join(", "),
        );
        if let Some(instead) = self.need.instead() {
            text.push_str("; ");
            text.push_str(instead);
        }
        text
    }
}

/// What this host lets this process do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// Capability sets, `no_new_privs`, seccomp.
    pub privileges: Privileges,
    /// The container runtime's markers.
    pub container: Container,
    /// User namespaces and the uid map.
    pub user_namespaces: UserNamespaces,
    /// The cgroups a call could get.
    pub cgroups: Cgroups,
}

static CURRENT: OnceLock<HostFacts> = OnceLock::new();

/// This process's privileges, read once (a worker's capabilities do not
/// grow): all that a need is decided by.
static PRIVILEGES: OnceLock<Privileges> = OnceLock::new();

fn current_privileges() -> &'static Privileges {
    PRIVILEGES.get_or_init(Privileges::read)
}

/// Refuses with the first need of `needs` this host does not grant this
/// process: [`HostFacts::require`] of [`HostFacts::current`], deciding by
/// the same capability sets, without reading the rest of the facts on the
/// way of every call (the container's markers, user namespaces, cgroups:
/// about 70 µs a process here); the markers are read only to word a
/// refusal's fix.
pub fn require(needs: &[Need]) -> Result<(), Lacking> {
    let privileges = current_privileges();
    match needs.iter().find_map(|n| missing(privileges, *n)) {
        Some((need, missing)) => Err(Lacking {
            need,
            missing,
            runtime: CURRENT
                .get()
                .map(|facts| facts.container.clone())
                .unwrap_or_else(Container::detect)
                .runtime,
        }),
        None => Ok(()),
    }
}

/// The capabilities `need` needs that `privileges` lack, if any.
fn missing(privileges: &Privileges, need: Need) -> Option<(Need, Vec<Capability>)> {
    let set = if need.in_launcher() {
        // The launcher gets the bounding set only when a root worker
        // with it in effect starts it: the worker's own steps (its
        // clone into new PID and network namespaces, signalling the
        // launcher, the store's checks) use its effective set, and a
        // worker under SECBIT_NOROOT, or not root, hands the launcher
        // no more than that. Both must hold the capability.
        CapSet(privileges.bounding.0 & privileges.effective.0)
    } else {
        privileges.effective
    };
    let missing: Vec<Capability> = need
        .capabilities()
        .iter()
        .copied()
        .filter(|c| !set.has(*c))
        .collect();
    (!missing.is_empty()).then_some((need, missing))
}

impl HostFacts {
    /// Reads them now (this process's privileges as [`require`] read them,
    /// if it did).
    pub fn detect() -> Self {
        Self {
            privileges: *current_privileges(),
            container: Container::detect(),
            user_namespaces: UserNamespaces::detect(),
            cgroups: Cgroups::detect(),
        }
    }

    /// Read once per process (a worker's capabilities do not grow).
    pub fn current() -> &'static HostFacts {
        CURRENT.get_or_init(Self::detect)
    }

    /// What `need` lacks here, or `None` when the host grants it.
    pub fn lacking(&self, need: Need) -> Option<Lacking> {
        missing(&self.privileges, need).map(|(need, missing)| Lacking {
            need,
            missing,
            runtime: self.container.runtime.clone(),
        })
    }

    /// Refuses with the first need of `needs` the host does not grant.
    pub fn require(&self, needs: &[Need]) -> Result<(), Lacking> {
        match needs.iter().find_map(|n| self.lacking(*n)) {
            Some(lacking) => Err(lacking),
            None => Ok(()),
        }
    }

    /// One line per fact, `(what, value)`, for `verify`'s host section.
    pub fn lines(&self) -> Vec<(&'static str, String)> {
        let p = &self.privileges;
        let named = |set: CapSet| {
            let have: Vec<&str> = Capability::ALL
                .iter()
                .filter(|c| set.has(**c))
                .map(|c| c.name())
                .collect();
            let lack: Vec<&str> = Capability::ALL
                .iter()
                .filter(|c| !set.has(**c))
                .map(|c| c.name())
                .collect();
            format!(
                "{} of 64 ({:#018x}); has {}; lacks {}",
                set.count(),
                set.0,
                if have.is_empty() {
                    "none".into()
                } else {
                    have.join(" ")
                },
                if lack.is_empty() {
                    "none".into()
                } else {
                    lack.join(" ")
                },
            )
        };
        let needs = [
            Need::Drop,
            Need::PrivateView,
            Need::OwnNetwork,
            Need::MemoryScan,
        ]
        .iter()
        .map(|n| match self.lacking(*n) {
            None => format!("{}: granted", n.code().trim_end_matches("_not_granted")),
            Some(l) => format!(
                "{}: NOT granted (lacks {})",
                n.code().trim_end_matches("_not_granted"),
                l.missing
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        })
        .collect::<Vec<_>>()
        .join("; ");
        vec![
            ("container", self.container.to_string()),
            ("capabilities (effective)", named(p.effective)),
            (
                "capabilities (bounding: what the launcher gets)",
                named(p.bounding),
            ),
            (
                "seccomp",
                match p.seccomp_mode {
                    0 => "none".to_string(),
                    1 => "strict".to_string(),
                    _ => format!("filter ({} stacked)", p.seccomp_filters),
                },
            ),
            ("no_new_privs", p.no_new_privs.to_string()),
            ("user namespaces", self.user_namespaces.to_string()),
            (
                "cgroups",
                format!(
                    "{}; {}",
                    self.cgroups,
                    if self.cgroups.delegated() {
                        "calls get cgroups of their own with a pids limit"
                    } else {
                        "no cgroup to delegate: limits by rlimit only"
                    }
                ),
            ),
            ("needs", needs),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(bounding: u64, effective: u64, runtime: Option<&str>) -> HostFacts {
        HostFacts {
            privileges: Privileges {
                bounding: CapSet(bounding),
                effective: CapSet(effective),
                ..Privileges::default()
            },
            container: Container {
                runtime: runtime.map(str::to_string),
                markers: Vec::new(),
            },
            user_namespaces: UserNamespaces::default(),
            cgroups: Cgroups::default(),
        }
    }

    #[test]
    fn dockers_default_grants_the_drop_and_refuses_the_view_naming_the_fix() {
        let docker = with(0xa80425fb, 0xa80425fb, Some("docker"));
        assert_eq!(docker.lacking(Need::Drop), None);
        let view = docker.lacking(Need::PrivateView).expect("refused");
        assert_eq!(view.code(), "private_view_not_granted");
        assert_eq!(view.missing, [Capability::SysAdmin]);
        let said = view.to_string();
        assert!(said.contains("CAP_SYS_ADMIN"), "{said}");
        assert!(said.contains("--cap-add SYS_ADMIN"), "{said}");
        assert!(said.contains("in a docker container"), "{said}");
        assert!(said.contains("--view shared"), "{said}");
        let net = docker.lacking(Need::OwnNetwork).expect("refused");
        assert_eq!(net.missing, [Capability::SysAdmin, Capability::NetAdmin]);
        assert_eq!(
            docker.require(&[Need::Drop, Need::OwnNetwork, Need::PrivateView]),
            Err(net)
        );
    }

    #[test]
    fn the_launcher_is_judged_by_the_bounding_and_effective_sets_and_the_scan_by_the_effective() {
        let full = (1u64 << 41) - 1;
        // Effective dropped, bounding full (SECBIT_NOROOT, or a worker
        // that is not root): the worker cannot clone the launcher into new
        // namespaces, and the launcher it starts gets nothing; refused.
        let h = with(full, 0, None);
        assert_eq!(
            h.lacking(Need::Drop).map(|l| l.missing.len()),
            Some(Need::Drop.capabilities().len())
        );
        // Only CAP_NET_ADMIN out of effect: the own network is refused.
        let h = with(full, full & !(1 << 12), None);
        assert_eq!(h.require(&[Need::Drop, Need::PrivateView]), Ok(()));
        assert_eq!(
            h.lacking(Need::OwnNetwork).map(|l| l.missing),
            Some(vec![Capability::NetAdmin])
        );
        // The scan is judged by the effective set alone.
        let h = with(0, full, None);
        assert_eq!(h.lacking(Need::MemoryScan), None);
        let h = with(full, full & !(1 << 19), None);
        assert_eq!(
            h.lacking(Need::MemoryScan).map(|l| l.missing),
            Some(vec![Capability::SysPtrace])
        );
        // Bounding without SYS_ADMIN (setpriv --bounding-set -sys_admin).
        let h = with(full & !(1 << 21), full, None);
        assert!(h.lacking(Need::PrivateView).is_some());
        assert_eq!(h.lacking(Need::MemoryScan), None);
    }

    #[test]
    fn a_drop_without_setpcap_dac_override_or_fowner_is_refused_naming_them() {
        // The shipped profile (docs/containers.md): --cap-drop ALL and nine.
        let shipped = 0x2011eb;
        assert_eq!(
            with(shipped, shipped, Some("docker")).lacking(Need::Drop),
            None
        );
        // The launcher empties its bounding set (PR_CAPBSET_DROP), the
        // worker checks the user's 0700 store, the launcher sets the home
        // view's modes: without them a launch failed half-way (drop_failed,
        // store_insecure, home_view_refused).
        for (bit, cap) in [
            (8, Capability::Setpcap),
            (1, Capability::DacOverride),
            (3, Capability::Fowner),
        ] {
            let h = with(shipped & !(1 << bit), shipped, Some("docker"));
            let refused = h.lacking(Need::Drop).expect("refused");
            assert_eq!(refused.missing, [cap]);
            assert!(refused
                .to_string()
                .contains(&format!("--cap-add {}", cap.runtime_name())));
        }
    }

    #[test]
    fn the_lines_name_every_need() {
        let docker = with(0xa80425fb, 0xa80425fb, Some("docker"));
        let lines = docker.lines();
        let needs = &lines.iter().find(|(k, _)| *k == "needs").unwrap().1;
        assert!(needs.contains("drop: granted"), "{needs}");
        assert!(
            needs.contains("private_view: NOT granted (lacks CAP_SYS_ADMIN)"),
            "{needs}"
        );
        assert!(needs.contains("memory_scan: NOT granted"), "{needs}");
    }
}
