//! The call's broker, as the launcher starts it: the folder with the
//! call's CA bundle, the placeholders the program gets, and the broker's
//! threads ([`crate::broker::serve`]) in this process.
//!
//! Guarantees:
//! - The broker lives in the launcher, after the drop: it runs as the
//!   user, in a process that is not dumpable (its memory, environment and
//!   descriptors are closed to the program, of the same uid) and that is
//!   the init of the call's PID namespace (the program cannot signal it).
//!   The launcher already holds every value it unsealed; no other process
//!   ever receives one.
//! - The call's CA is made here, in memory, for this call alone; its key
//!   never leaves this process. The bundle (the system's roots and the
//!   call's CA certificate, no key) is written `0444` into a `ramfs` of
//!   the call's own at [`crate::broker::trust::BROKER_DIR`], mounted by
//!   root before the drop, then the folder is made `0555`: the program
//!   reads it and changes nothing in it.
//! - The broker listens at [`crate::env::BROKER_ADDR`] in the call's own
//!   network namespace, bound before the program starts: no other call,
//!   and nothing on the host's network, can reach it. It reaches bound
//!   hosts only through the worker's end at [`crate::env::CALL_PROXY_ADDR`].
//! - Its threads start with every signal blocked, so the relay's
//!   `SIGCHLD` reaches the relay's own descriptor and nothing else.
#![forbid(unsafe_code)]

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::OFlag;
use nix::sys::signal::{SigSet, SigmaskHow};
use nix::sys::stat::Mode;

use super::report::{LaunchError, Stage};
use crate::broker::ca::{self, CallCa};
use crate::broker::serve::{self, Broker, BrokerSetup};
use crate::broker::substitute::BoundSecret;
use crate::broker::trust::{BROKER_DIR, SYSTEM_ROOTS};
use crate::sys;

fn failed(what: &str, e: impl std::fmt::Display) -> LaunchError {
    LaunchError::new(Stage::Unseal, "broker_failed", format!("{what}: {e}"))
}

fn io_failed(what: &str, e: std::io::Error) -> LaunchError {
    LaunchError {
        stage: Stage::Unseal,
        code: "broker_failed".into(),
        message: format!("{what}: {e}"),
        errno: e.raw_os_error(),
    }
}

/// As root, in the call's own mount namespace, before the drop: the
/// broker's folder, the user's, on a fresh `ramfs`.
pub fn mount(uid: u32, gid: u32) -> Result<OwnedFd, LaunchError> {
    super::credentials::mount_own_folder(c"tono-broker", "tono-broker", uid, gid)
}

/// The placeholder the program gets for `value` of the secret `name`.
pub fn placeholder(name: &str, value: &[u8]) -> Result<String, LaunchError> {
    crate::broker::placeholder::shaped_like(value).map_err(|e| {
        LaunchError::new(
            Stage::Unseal,
            "placeholder_refused",
            format!("secret {name} is bound to hosts, but {e}"),
        )
    })
}

/// As the user, after every bound value is unsealed and before the
/// program starts: makes the call's CA, writes the bundle, and starts the
/// broker on its address.
pub fn start(
    folder: OwnedFd,
    secrets: Vec<BoundSecret>,
    upstream_ca: Option<&str>,
) -> Result<Broker, LaunchError> {
    let call_ca = CallCa::new().map_err(|e| failed("make the call's CA", e))?;
    let system = match std::fs::read(SYSTEM_ROOTS) {
        Ok(pem) => pem,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io_failed(&format!("read {SYSTEM_ROOTS}"), e)),
    };
    let bundle = ca::bundle(&system, &call_ca);
    let file = sys::open_beneath(
        folder.as_fd(),
        c"ca-bundle.pem",
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
        Mode::from_bits_truncate(0o444),
    )
    .map_err(|e| io_failed(&format!("create {BROKER_DIR}/ca-bundle.pem"), e))?;
    std::fs::File::from(file)
        .write_all(&bundle)
        .map_err(|e| io_failed(&format!("write {BROKER_DIR}/ca-bundle.pem"), e))?;
    nix::sys::stat::fchmod(folder.as_raw_fd(), Mode::from_bits_truncate(0o555))
        .map_err(|e| failed(&format!("make {BROKER_DIR} 0555"), e))?;
    drop(folder);
    let mut roots_pem = system;
    if let Some(extra) = upstream_ca {
        roots_pem.push(b'\n');
        roots_pem.extend_from_slice(extra.as_bytes());
    }
    let listener = std::net::TcpListener::bind(crate::env::BROKER_ADDR)
        .map_err(|e| io_failed(&format!("listen at {}", crate::env::BROKER_ADDR), e))?;
    let upstream_proxy = crate::env::CALL_PROXY_ADDR
        .parse()
        .map_err(|e| failed("the worker's end", e))?;
    // Threads inherit the mask of the thread that starts them.
    let mut before = SigSet::empty();
    nix::sys::signal::pthread_sigmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut before),
    )
    .map_err(|e| failed("block signals for the broker's threads", e))?;
    let started = serve::start(
        listener,
        BrokerSetup {
            secrets,
            ca: call_ca,
            roots_pem,
            upstream_proxy,
        },
    );
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&before), None)
        .map_err(|e| failed("restore the signal mask", e))?;
    started.map_err(|e| failed("start the broker", e))
}
