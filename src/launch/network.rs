//! The call's network, as the launcher makes it: a network namespace of
//! the call's own (started so by the worker), whose loopback it brings up
//! as root before the drop, or the host's.
//!
//! Guarantees: the launcher checks its network namespace against the
//! worker's, named in the plan: a call of network `none` or `proxy` runs
//! only in a namespace that is not the worker's, and a call of `host` only
//! in the worker's (`network_mismatch`, before anything is unsealed). In a
//! namespace of its own only `lo` exists; nothing outside the call is
//! reached but through what the worker put there (the proxy's listening
//! socket, which the worker holds).
#![forbid(unsafe_code)]

use super::plan::LaunchPlan;
use super::report::{LaunchError, Stage};
use crate::sys;

/// Checks the launcher's network namespace against the plan and, in one of
/// its own, brings `lo` up. Runs as root, before the drop.
pub fn enter(plan: &LaunchPlan) -> Result<(), LaunchError> {
    let own = plan.in_own_network();
    let Some(worker) = plan.worker_netns else {
        if own {
            return Err(LaunchError::new(
                Stage::View,
                "network_mismatch",
                "the plan asks for a network of the call's own but names no worker namespace to tell it from",
            ));
        }
        return Ok(());
    };
    let mine = sys::current_netns().map_err(|e| {
        LaunchError::sys(
            Stage::View,
            "view_refused",
            "stat of the network namespace",
            nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        )
    })?;
    match (own, mine == worker) {
        (true, true) => Err(LaunchError::new(
            Stage::View,
            "network_mismatch",
            format!(
                "network {} needs a launcher in a network namespace of its own; this one is in the worker's",
                plan.network
            ),
        )),
        (false, false) => Err(LaunchError::new(
            Stage::View,
            "network_mismatch",
            "this launcher is in a network namespace of its own, but the call's network is host",
        )),
        (true, false) => sys::loopback_up().map_err(|e| {
            LaunchError::sys(
                Stage::View,
                "view_refused",
                "bring lo up",
                nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            )
        }),
        (false, true) => Ok(()),
    }
}
