//! Whether this process's mount table has changed: for launchers started
//! ahead of need, whose mount namespace is a private copy of the worker's
//! taken when they started.
//!
//! Guarantees: the kernel marks an open `/proc/self/mountinfo` with
//! `POLLPRI` once the mount namespace it was opened in gains or loses a
//! mount (its own or one propagated into it) after the last poll, and
//! each poll clears the mark; [`MountTableWatch::changed`] reports every
//! such change at least once, to the first caller after it (an fd the
//! kernel reports as bad counts as changed, always).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// An open `/proc/self/mountinfo`, polled for changes of the mount table.
#[derive(Debug)]
pub struct MountTableWatch(File);

impl MountTableWatch {
    /// Opens `/proc/self/mountinfo` of the calling process's mount
    /// namespace.
    pub fn open() -> io::Result<Self> {
        File::open("/proc/self/mountinfo").map(Self)
    }

    /// Whether the mount table changed since the watch was opened or last
    /// asked.
    pub fn changed(&self) -> bool {
        let revents = super::fd::poll_now(self.0.as_raw_fd(), libc::POLLPRI);
        revents & (libc::POLLPRI | libc::POLLERR | libc::POLLNVAL) != 0
    }

    /// Waits until the mount table changes (or has changed since the watch
    /// was opened or last asked), and clears the mark.
    pub fn wait_for_change(&self) -> io::Result<()> {
        let mut fds = [PollFd::new(self.0.as_fd(), PollFlags::POLLPRI)];
        loop {
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(n) if n > 0 => return Ok(()),
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}
