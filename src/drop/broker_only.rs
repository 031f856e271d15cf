//! Bound hosts are reached only through the call's broker: the worker's
//! end in a call's network namespace refuses a request for a host a
//! secret of the call is bound to unless the connection is the broker's.
//!
//! Why: a bound host that stores what it is sent (a file, a record, a
//! log) would let a tool have the broker put the value there and read it
//! back directly, past the broker's scrubbing. Only the broker speaks to
//! a bound host, so everything that comes back from one is scrubbed.
//!
//! Guarantees: the broker is told from the tool by the socket, not by
//! anything the tool sends: the connection's peer port is looked up in
//! the call's own TCP table (`/proc/LAUNCHER/net/tcp`, the launcher's
//! network namespace), and the socket found must be one of the
//! launcher's own descriptors (`/proc/LAUNCHER/fd`). The tool's sockets
//! live in the tool's processes, never in the launcher's; the launcher is
//! not dumpable, and nothing passes it a descriptor. A connection that
//! cannot be matched is refused (`403 bound_host_only_through_broker`).
#![forbid(unsafe_code)]

use std::net::SocketAddr;

use crate::env::BoundHosts;

/// The bound hosts of one call and its launcher.
#[derive(Debug, Clone)]
pub struct BrokerOnly {
    /// The call's launcher (the broker's process).
    pub launcher: libc::pid_t,
    /// Every binding of the call's secrets.
    pub hosts: Vec<BoundHosts>,
}

impl BrokerOnly {
    /// Why a request for `host` from `peer` is refused, if it is.
    pub fn refuses(&self, host: &str, peer: SocketAddr) -> Option<String> {
        if !self.hosts.iter().any(|h| h.allows(host)) {
            return None;
        }
        if from_launcher(self.launcher, peer.port()) {
            return None;
        }
        Some(format!(
            "bound_host_only_through_broker: {host} is a host a secret of this call is bound \
             to; only the call's broker (HTTPS_PROXY) reaches it"
        ))
    }
}

/// The inode of the TCP socket in the launcher's namespace whose local
/// port is `port` (the client side of a connection to the worker's end).
fn socket_inode(launcher: libc::pid_t, port: u16) -> Option<u64> {
    let table = std::fs::read_to_string(format!("/proc/{launcher}/net/tcp")).ok()?;
    let local = format!("0100007F:{port:04X}");
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&local.as_str()))
            .then(|| fields.get(9)?.parse().ok())
            .flatten()
    })
}

/// Whether the client socket of local port `port` is the launcher's own.
fn from_launcher(launcher: libc::pid_t, port: u16) -> bool {
    let Some(inode) = socket_inode(launcher, port) else {
        return false;
    };
    let want = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{launcher}/fd")).is_ok_and(|fds| {
        fds.flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()))
    })
}
