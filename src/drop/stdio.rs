//! The worker's own stdin, stdout and stderr carried to and from a launch
//! through pipes ([`super::spawn::Input::Relay`],
//! [`super::spawn::Output::Relay`]), so that a call never holds a
//! descriptor of the worker's: under a terminal the launcher, and the tool,
//! get pipes, never the operator's terminal (which a tool could write to
//! through its stdin, or read keystrokes from through its stdout).
//!
//! Guarantees: stdin is copied by a thread of its own, stdout and stderr
//! by another, as bytes arrive, with nothing kept beyond the one read in
//! hand (its buffer wiped when the copy ends: in the shared view, with no
//! masking relay, a value the program prints passes through it) and
//! nothing added. The worker's descriptors are used only through
//! duplicates and their flags are never changed (`O_NONBLOCK` would belong
//! to the open file the worker shares with its terminal and shell). The
//! stdin thread stops at end of file, when the program closes its stdin,
//! or when the call ends ([`Feeder`] dropped): it then closes its end of
//! the pipe and takes nothing more from the worker's stdin, so a terminal
//! left open never keeps a call, or the worker, waiting. The output thread
//! stops reading a stream whose worker stream is gone, so its writer sees
//! `EPIPE` as on a closed terminal; it holds no lock of the worker's
//! (`std::io::stdout()` is never locked), so if it is still blocked on a
//! stuck terminal when the call's drain window closes, it is left behind
//! and holds up nothing.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use tokio::sync::mpsc;

/// How much one read takes at most.
const CHUNK: usize = 16 * 1024;

/// Feeds a launch's stdin pipe from the worker's stdin while it lives:
/// dropping it (the call ended) stops the feeding thread.
#[derive(Debug)]
pub struct Feeder {
    /// The write end of the thread's stop pipe: closed, its read end
    /// reports hang-up to the thread's `poll`.
    _stop: OwnedFd,
}

/// Starts a thread that copies the worker's stdin into `to` (the write end
/// of the launcher's stdin pipe) until end of file, until the reader is
/// gone, or until the returned [`Feeder`] is dropped; `to` is closed then,
/// which is the program's end of file.
pub fn feed_stdin(to: OwnedFd) -> io::Result<Feeder> {
    let from = io::stdin().as_fd().try_clone_to_owned()?;
    // The pipe is the worker's own (its other end is the launcher's stdin):
    // non-blocking, a write never waits past the call's end.
    let flags = OFlag::from_bits_retain(fcntl(to.as_raw_fd(), FcntlArg::F_GETFL)?);
    fcntl(to.as_raw_fd(), FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    let (stop_r, stop_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    std::thread::Builder::new()
        .name("tono-stdin".into())
        .spawn(move || copy_in(&from, &to, &stop_r))?;
    Ok(Feeder { _stop: stop_w })
}

/// Waits until `fd` is ready for `events` (true) or the call ended (false).
fn wait_for(fd: BorrowedFd<'_>, events: PollFlags, stop: BorrowedFd<'_>) -> bool {
    loop {
        let mut fds = [
            PollFd::new(fd, events),
            PollFd::new(stop, PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(_) => return false,
        }
        let any = |f: &PollFd<'_>| f.revents().is_some_and(|r| !r.is_empty());
        if any(&fds[1]) {
            return false;
        }
        // Readable, writable, or an error or hang-up that the next read or
        // write reports.
        if any(&fds[0]) {
            return true;
        }
    }
}

/// The stdin thread: copies `from` to `to` until one ends or `stop` hangs up.
fn copy_in(from: &OwnedFd, to: &OwnedFd, stop: &OwnedFd) {
    let mut buf = zeroize::Zeroizing::new(vec![0u8; CHUNK]);
    loop {
        if !wait_for(from.as_fd(), PollFlags::POLLIN, stop.as_fd()) {
            return;
        }
        let n = match nix::unistd::read(from.as_raw_fd(), &mut buf[..]) {
            Ok(0) => return,
            Ok(n) => n,
            Err(Errno::EINTR | Errno::EAGAIN) => continue,
            Err(_) => return,
        };
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            if !wait_for(to.as_fd(), PollFlags::POLLOUT, stop.as_fd()) {
                return;
            }
            match nix::unistd::write(to, rest) {
                Ok(k) => rest = &rest[k..],
                Err(Errno::EINTR | Errno::EAGAIN) => {}
                // EPIPE: the program closed its stdin.
                Err(_) => return,
            }
        }
    }
}

/// The worker's stream a launch's output pipe is copied to.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// The worker's stdout.
    Stdout,
    /// The worker's stderr.
    Stderr,
}

/// Output pipes being copied to the worker's own stdout and stderr.
#[derive(Debug)]
pub struct Relayed {
    /// Never sent on: it reports its end once the copying thread has
    /// dropped its sender.
    ended: mpsc::UnboundedReceiver<()>,
}

impl Relayed {
    /// Returns once every stream has been copied to its end of file (or
    /// its copy stopped). Cancel-safe.
    pub async fn ended(&mut self) {
        while self.ended.recv().await.is_some() {}
    }
}

/// Starts a thread that copies what the launch writes into each pipe to
/// the worker's own stream named beside it, as it arrives. One thread
/// serves them all, in the order they become readable, so output the
/// program wrote to two streams one after the other keeps its order (as
/// the launcher's relay keeps it).
pub fn relay_output(streams: Vec<(OwnedFd, Target)>) -> io::Result<Relayed> {
    let mut copies = Vec::with_capacity(streams.len());
    for (from, target) in streams {
        let to = match target {
            Target::Stdout => io::stdout().as_fd().try_clone_to_owned()?,
            Target::Stderr => io::stderr().as_fd().try_clone_to_owned()?,
        };
        copies.push((File::from(from), File::from(to)));
    }
    let (tx, ended) = mpsc::unbounded_channel::<()>();
    std::thread::Builder::new()
        .name("tono-output".into())
        .spawn(move || {
            copy_out(copies);
            drop(tx);
        })?;
    Ok(Relayed { ended })
}

/// The output thread: copies each `(from, to)` until `from`'s end of file;
/// if `to` fails, stops reading `from` (closing it, so its writer sees
/// `EPIPE`).
fn copy_out(copies: Vec<(File, File)>) {
    let mut open: Vec<(Option<File>, File)> = copies
        .into_iter()
        .map(|(from, to)| (Some(from), to))
        .collect();
    let mut buf = zeroize::Zeroizing::new(vec![0u8; CHUNK]);
    loop {
        let ready: Vec<bool> = {
            let mut fds: Vec<PollFd<'_>> = open
                .iter()
                .filter_map(|(from, _)| from.as_ref())
                .map(|f| PollFd::new(f.as_fd(), PollFlags::POLLIN))
                .collect();
            if fds.is_empty() {
                return;
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => return,
            }
            fds.iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                .collect()
        };
        let mut ready = ready.into_iter();
        for (from, to) in open.iter_mut() {
            let Some(reader) = from.as_mut() else {
                continue;
            };
            if !ready.next().unwrap_or(false) {
                continue;
            }
            match reader.read(&mut buf[..]) {
                Ok(n) if n > 0 => {
                    if to.write_all(&buf[..n]).is_err() {
                        *from = None;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // End of file, or a read error: this stream is done.
                _ => *from = None,
            }
        }
    }
}
