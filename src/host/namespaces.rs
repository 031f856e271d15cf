//! Whether an unprivileged process may make a user namespace here
//! (`kernel.unprivileged_userns_clone` on Debian kernels,
//! `user.max_user_namespaces`), and whether this process's uids are the
//! host's (`/proc/self/uid_map` is the identity).
//!
//! Guarantees: a file that cannot be read is `None` ("unknown"), never a
//! guess.
#![forbid(unsafe_code)]

use std::fmt;

/// What the kernel's settings say of user namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserNamespaces {
    /// `/proc/sys/kernel/unprivileged_userns_clone` (Debian's switch).
    pub unprivileged_clone: Option<bool>,
    /// `/proc/sys/user/max_user_namespaces`.
    pub max: Option<u64>,
    /// `/proc/self/uid_map` is `0 0 4294967295`.
    pub uids_are_the_hosts: bool,
    /// `/proc/self/uid_map` as read, trimmed (empty if unreadable).
    pub uid_map: String,
}

impl UserNamespaces {
    /// Reads the settings.
    pub fn detect() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        Self::parse(
            read("/proc/sys/kernel/unprivileged_userns_clone").as_deref(),
            read("/proc/sys/user/max_user_namespaces").as_deref(),
            read("/proc/self/uid_map").as_deref().unwrap_or(""),
        )
    }

    /// From the three files' texts.
    pub fn parse(clone: Option<&str>, max: Option<&str>, uid_map: &str) -> Self {
        Self {
            unprivileged_clone: clone.and_then(|t| match t.trim() {
                "0" => Some(false),
                "1" => Some(true),
                _ => None,
            }),
            max: max.and_then(|t| t.trim().parse().ok()),
            uids_are_the_hosts: uid_map.split_whitespace().collect::<Vec<_>>()
                == ["0", "0", "4294967295"],
            uid_map: uid_map.trim().to_string(),
        }
    }

    /// Whether an unprivileged process may make one (`None`: unknown).
    pub fn unprivileged(&self) -> Option<bool> {
        match (self.unprivileged_clone, self.max) {
            (Some(false), _) | (_, Some(0)) => Some(false),
            (_, Some(_)) => Some(true),
            (clone, None) => clone,
        }
    }
}

impl fmt::Display for UserNamespaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unpriv = match self.unprivileged() {
            Some(true) => "unprivileged user namespaces allowed (a call's filter refuses them)",
            Some(false) => "unprivileged user namespaces disabled",
            None => "unprivileged user namespaces: unknown",
        };
        let map = if self.uids_are_the_hosts {
            "uids are the host's"
        } else {
            "in a user namespace: uids are not the host's"
        };
        write!(f, "{unpriv}; {map}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_switch_and_the_map_are_read_as_written() {
        let debian = UserNamespaces::parse(Some("1\n"), Some("63379\n"), "0 0 4294967295\n");
        assert_eq!(debian.unprivileged(), Some(true));
        assert!(debian.uids_are_the_hosts);
        let off = UserNamespaces::parse(Some("0\n"), Some("63379\n"), "0 0 4294967295");
        assert_eq!(off.unprivileged(), Some(false));
        let zero = UserNamespaces::parse(None, Some("0"), "0 100000 65536");
        assert_eq!(zero.unprivileged(), Some(false));
        assert!(!zero.uids_are_the_hosts);
        assert_eq!(UserNamespaces::parse(None, None, "").unprivileged(), None);
    }
}
