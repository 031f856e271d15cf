//! The capability sets of this process, read from `/proc/self/status`
//! (`CapEff`, `CapPrm`, `CapBnd`), and the capabilities the project names.
//!
//! Guarantees: a set that cannot be read or parsed is empty, so a need is
//! never taken as granted on a failed read.
#![forbid(unsafe_code)]

use std::fmt;

/// A capability the project needs somewhere, by its kernel number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// `CAP_DAC_OVERRIDE` (1): the worker checks a user's `~/.tono` (a
    /// `0700` folder of the user's) before a launch.
    DacOverride = 1,
    /// `CAP_FOWNER` (3): the launcher sets the modes of the home view's
    /// folders it makes for the user.
    Fowner = 3,
    /// `CAP_KILL` (5): the worker signals launchers that run as a user.
    Kill = 5,
    /// `CAP_SETGID` (6): `setgroups`, `setresgid`.
    Setgid = 6,
    /// `CAP_SETUID` (7): `setresuid`.
    Setuid = 7,
    /// `CAP_SETPCAP` (8): the launcher empties its bounding set
    /// (`PR_CAPBSET_DROP`) before it drops to the user.
    Setpcap = 8,
    /// `CAP_NET_ADMIN` (12): bringing a call's own `lo` up.
    NetAdmin = 12,
    /// `CAP_SYS_PTRACE` (19): reading a non-dumpable process's memory.
    SysPtrace = 19,
    /// `CAP_SYS_ADMIN` (21): namespaces and the mounts of a call's view.
    SysAdmin = 21,
}

impl Capability {
    /// Every capability the project names, in kernel order.
    pub const ALL: [Capability; 9] = [
        Capability::DacOverride,
        Capability::Fowner,
        Capability::Kill,
        Capability::Setgid,
        Capability::Setuid,
        Capability::Setpcap,
        Capability::NetAdmin,
        Capability::SysPtrace,
        Capability::SysAdmin,
    ];

    /// The kernel's name, as `capabilities(7)` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Capability::DacOverride => "CAP_DAC_OVERRIDE",
            Capability::Fowner => "CAP_FOWNER",
            Capability::Kill => "CAP_KILL",
            Capability::Setgid => "CAP_SETGID",
            Capability::Setuid => "CAP_SETUID",
            Capability::Setpcap => "CAP_SETPCAP",
            Capability::NetAdmin => "CAP_NET_ADMIN",
            Capability::SysPtrace => "CAP_SYS_PTRACE",
            Capability::SysAdmin => "CAP_SYS_ADMIN",
        }
    }

    /// The name a container runtime takes (`docker run --cap-add NAME`).
    pub fn runtime_name(self) -> &'static str {
        self.name().trim_start_matches("CAP_")
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A capability set as the kernel shows it (a 64-bit mask).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CapSet(pub u64);

impl CapSet {
    /// Whether `cap` is in the set.
    pub fn has(self, cap: Capability) -> bool {
        self.0 & (1u64 << cap as u32) != 0
    }

    /// How many capabilities the set holds.
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }
}

/// What `/proc/self/status` says of this process's privileges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Privileges {
    /// `CapEff`: what the process may do now.
    pub effective: CapSet,
    /// `CapPrm`: what it could make effective.
    pub permitted: CapSet,
    /// `CapBnd`: what any program it starts could ever hold.
    pub bounding: CapSet,
    /// `NoNewPrivs`.
    pub no_new_privs: bool,
    /// `Seccomp`: 0 none, 1 strict, 2 a filter.
    pub seccomp_mode: u8,
    /// `Seccomp_filters`: how many filters are stacked on the process.
    pub seccomp_filters: u32,
}

impl Privileges {
    /// Reads `/proc/self/status`; what cannot be read is empty.
    pub fn read() -> Self {
        Self::parse(&std::fs::read_to_string("/proc/self/status").unwrap_or_default())
    }

    /// Parses the text of a `/proc/PID/status` file.
    pub fn parse(status: &str) -> Self {
        let mut out = Self::default();
        for line in status.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            let mask = || CapSet(u64::from_str_radix(value, 16).unwrap_or(0));
            match key {
                "CapEff" => out.effective = mask(),
                "CapPrm" => out.permitted = mask(),
                "CapBnd" => out.bounding = mask(),
                "NoNewPrivs" => out.no_new_privs = value == "1",
                "Seccomp" => out.seccomp_mode = value.parse().unwrap_or(0),
                "Seccomp_filters" => out.seccomp_filters = value.parse().unwrap_or(0),
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dockers_default_set_lacks_sys_admin_net_admin_and_ptrace() {
        // CapEff of a root process in a container with Docker's default
        // capabilities (chown, dac_override, fowner, fsetid, kill, setgid,
        // setuid, setpcap, net_bind_service, net_raw, sys_chroot, mknod,
        // audit_write, setfcap).
        let p = Privileges::parse(
            "Name:\tsh\nCapPrm:\t00000000a80425fb\nCapEff:\t00000000a80425fb\n\
             CapBnd:\t00000000a80425fb\nNoNewPrivs:\t0\nSeccomp:\t2\nSeccomp_filters:\t1\n",
        );
        for cap in [Capability::Kill, Capability::Setuid, Capability::Setgid] {
            assert!(p.effective.has(cap), "{cap}");
        }
        for cap in [
            Capability::SysAdmin,
            Capability::NetAdmin,
            Capability::SysPtrace,
        ] {
            assert!(!p.effective.has(cap), "{cap}");
        }
        assert_eq!(p.effective.count(), 14);
        assert_eq!((p.seccomp_mode, p.seccomp_filters), (2, 1));
        assert!(!p.no_new_privs);
    }

    #[test]
    fn a_full_root_set_has_every_named_capability_and_garbage_is_empty() {
        let p = Privileges::parse("CapEff:\t000001ffffffffff\n");
        assert!(Capability::ALL.iter().all(|c| p.effective.has(*c)));
        let bad = Privileges::parse("CapEff:\tzz\nCapBnd:\n");
        assert_eq!(bad.effective, CapSet(0));
        assert_eq!(bad.bounding, CapSet(0));
        assert_eq!(Capability::SysAdmin.runtime_name(), "SYS_ADMIN");
    }
}
