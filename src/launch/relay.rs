//! The launcher as the call's init and relay: after its drop, inside the
//! call's PID namespace, it starts the program on pipes of its own, masks
//! the program's stdout and stderr ([`crate::mask`]) on the way to the
//! worker, reaps every process of the call, and reports how the program
//! ended and how many masks it made.
//!
//! Guarantees: the program is started from this process after the drop was
//! verified ([`crate::sys::spawn_program`]: no copy of this process's
//! memory, which holds the values), so it runs with exactly the verified
//! credentials; it starts with every signal at its default and none
//! blocked, its own stdin, and the two pipes as stdout and stderr. Nothing
//! it writes reaches the worker unmasked: bytes go out only through the
//! masker. When the program exits, what is already in the pipes is read to
//! the end, the held-back bytes are masked and written, and this process
//! returns — as the namespace's init, its exit kills everything the program
//! left behind.
#![forbid(unsafe_code)]

use std::ffi::CStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::report::{Ended, LaunchError, Stage, EXEC_MARK};
use crate::mask::lazy::LazyMasker;
use crate::mask::MaskStream;
use crate::sys;

fn relay_error(what: &str, e: Errno) -> LaunchError {
    LaunchError::sys(Stage::Exec, "relay_failed", what, e)
}

/// One of the program's output streams on its way to the worker.
struct Relay {
    from: Option<File>,
    to: File,
    stream: MaskStream,
    /// The worker stopped reading: keep draining, write nothing.
    closed: bool,
}

/// Writes `bytes` on to the worker unless it stopped reading.
fn send(to: &mut File, closed: &mut bool, bytes: &[u8]) {
    if !*closed && !bytes.is_empty() && to.write_all(bytes).is_err() {
        *closed = true;
    }
}

impl Relay {
    fn write(&mut self, bytes: &[u8]) {
        send(&mut self.to, &mut self.closed, bytes);
    }

    /// Reads what is there now; false at end of stream (or a read error).
    /// A masker that cannot be built is the call's error: nothing read is
    /// passed on unmasked.
    fn pump(
        &mut self,
        masker: &mut LazyMasker<'_>,
        out: &mut Vec<u8>,
    ) -> Result<bool, LaunchError> {
        let Some(from) = self.from.as_mut() else {
            return Ok(false);
        };
        let mut buf = zeroize::Zeroizing::new([0u8; 16 * 1024]);
        loop {
            match from.read(&mut buf[..]) {
                Ok(0) => break,
                Ok(n) => {
                    out.clear();
                    masker
                        .feed(&mut self.stream, &buf[..n], out)
                        .map_err(|e| LaunchError::new(Stage::Exec, "mask_failed", e.to_string()))?;
                    send(&mut self.to, &mut self.closed, out);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
                Err(_) => break,
            }
        }
        self.from = None;
        out.clear();
        masker.finish(&mut self.stream, out);
        self.write(out);
        Ok(false)
    }
}

/// Starts the program and relays its output, masked, until it exits.
/// Sends the exec mark once `execve` worked; returns how it ended.
pub fn run(
    program: &CStr,
    argv: &[&CStr],
    envp: &[&CStr],
    mut masker: LazyMasker<'_>,
    status: &mut File,
) -> Result<Ended, LaunchError> {
    let pipe = |what| nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| relay_error(what, e));
    let (out_r, out_w) = pipe("pipe for stdout")?;
    let (err_r, err_w) = pipe("pipe for stderr")?;
    // SIGCHLD through a descriptor, so one poll waits for output and exits.
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    chld.thread_block()
        .map_err(|e| relay_error("block SIGCHLD", e))?;
    let children = SignalFd::with_flags(&chld, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| relay_error("signalfd", e))?;
    let errno = |e: std::io::Error| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
    let child = sys::spawn_program(program, argv, envp, out_w.as_fd(), err_w.as_fd())
        .map_err(|e| relay_error("start the program", errno(e)))?
        .map_err(|e| LaunchError::sys(Stage::Exec, "exec_failed", "execve", errno(e)))?;
    let child = Pid::from_raw(child);
    drop((out_w, err_w));
    let _ = status.write_all(&[EXEC_MARK]);
    let nonblocking = |fd: OwnedFd| -> Result<File, LaunchError> {
        nix::fcntl::fcntl(
            fd.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK),
        )
        .map_err(|e| relay_error("O_NONBLOCK", e))?;
        Ok(File::from(fd))
    };
    let stdio = |fd: std::os::fd::BorrowedFd<'_>| -> Result<File, LaunchError> {
        fd.try_clone_to_owned()
            .map(File::from)
            .map_err(|e| LaunchError {
                stage: Stage::Exec,
                code: "relay_failed".into(),
                message: format!("dup of stdio: {e}"),
                errno: e.raw_os_error(),
            })
    };
    let mut relays = [
        Relay {
            from: Some(nonblocking(out_r)?),
            to: stdio(std::io::stdout().as_fd())?,
            stream: MaskStream::default(),
            closed: false,
        },
        Relay {
            from: Some(nonblocking(err_r)?),
            to: stdio(std::io::stderr().as_fd())?,
            stream: MaskStream::default(),
            closed: false,
        },
    ];
    let mut out = Vec::new();
    let mut ended: Option<WaitStatus> = None;
    while ended.is_none() {
        let open: Vec<usize> = (0..2).filter(|&i| relays[i].from.is_some()).collect();
        let mut fds: Vec<PollFd<'_>> = open
            .iter()
            .filter_map(|&i| relays[i].from.as_ref())
            .map(|f| PollFd::new(f.as_fd(), PollFlags::POLLIN))
            .collect();
        fds.push(PollFd::new(children.as_fd(), PollFlags::POLLIN));
        match nix::poll::poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(relay_error("poll", e)),
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        for (slot, &i) in open.iter().enumerate() {
            if ready[slot] {
                relays[i].pump(&mut masker, &mut out)?;
            }
        }
        // Reap every child the namespace handed to its init; the program's
        // own end is the one that counts.
        while let Ok(Some(_)) = children.read_signal() {}
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(status) if status.pid() == Some(child) => ended = Some(status),
                Ok(_) => {}
            }
        }
    }
    // What the program wrote before it ended is in the pipes: read it to
    // the end (or to what its leftovers have not written yet), then flush.
    for relay in &mut relays {
        if relay.pump(&mut masker, &mut out)? {
            relay.from = None;
            out.clear();
            masker.finish(&mut relay.stream, &mut out);
            relay.write(&out);
        }
    }
    let (exit_code, signal) = match ended {
        Some(WaitStatus::Exited(_, code)) => (Some(code), None),
        Some(WaitStatus::Signaled(_, signal, _)) => (None, Some(signal as i32)),
        _ => (None, None),
    };
    Ok(Ended {
        exit_code,
        signal,
        masks: masker.counts(),
        broker: Vec::new(),
    })
}
