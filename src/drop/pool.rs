//! Launchers started ahead of need, so that a call does not wait for one
//! to load.
//!
//! Starting `tono-launch` (exec, dynamic loading, libc start-up) is about a
//! third of a call on a small VM. A pooled launcher has done exactly that
//! and nothing more: it is blocked reading its plan on fd 3, before its
//! first step (see [`crate::launch::sequence`]). It holds nothing of any user and
//! has not yet `setsid()`, dropped or read a key; all of that happens
//! after the plan arrives, as for a launcher started for the call. So a
//! call that takes one runs the same steps, checked the same way.
//!
//! Each waits inside a call cgroup of its own, made first with the default
//! limits: it starts inside the v2 folder where the kernel can, and the
//! worker moves it into the rest (the pid is its unreaped child), so a
//! call that takes one makes no cgroup and enters none on its path.
//!
//! Guarantees: only calls with stdin `/dev/null`, captured output and the
//! default cgroup limits take a pooled launcher (the shape it was started
//! with); a pooled launcher that died while waiting is reaped and never
//! handed out, and its cgroup is removed; nor is one in a mount namespace
//! of its own started before the worker's mount table last changed (its
//! private copy of the host's mounts would show a mount the host has
//! since removed, or miss one it has made): a thread of the pool blocks
//! on the kernel's mark of a change ([`sys::MountTableWatch`]) and ends
//! such launchers at once (so none holds an unmounted file system busy),
//! and every take asks the kernel again first; where the mount table
//! cannot be watched, calls of the private view start their own launcher;
//! a call takes the launcher that
//! has waited longest (the newest may still be loading); the pool keeps
//! [`POOL_SIZE`] launchers per launcher path and kind (the namespaces of
//! its own it waits in: PID for the private view, network for a network
//! not the host's, or none), refilled when a call ends
//! (not when it takes one, so the refill does not take a core from it) by
//! one long-lived thread of its own (so `PR_SET_PDEATHSIG`, which follows the thread that
//! started a process, stays armed for the worker's life). When the worker
//! exits, the waiting launchers read end-of-file and exit without running
//! anything; a worker that drains the pool first ([`drain`]) also ends the
//! launcher the refill is starting at that moment and removes its cgroup,
//! so no call cgroup outlives a worker that exits.
//!
//! Where the worker can put a process back to the normal scheduling policy
//! (root with `CAP_SYS_NICE`, asked once), the refill thread, and so every
//! launcher it starts while that launcher loads and waits, runs at
//! `SCHED_IDLE`: on a small host a refill would
//! otherwise take a core from the call in flight (a launcher's start costs
//! about a millisecond of CPU: exec, loading, the warm-up). A launcher is
//! put back to the normal policy when a call takes it, before its plan, so
//! the call and its tool run as any other; one that cannot be is ended,
//! never handed out.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

use super::start::{open_null, start_in_cgroup, Started};
use crate::contain::{self, AppliedLimits, CallCgroup};
use crate::sys;

/// How many launchers wait, per launcher path.
pub const POOL_SIZE: usize = 2;

/// How long [`drain`] waits for a launcher the refill is starting.
const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A launcher waiting for a plan, already inside a call cgroup of its own
/// made with the default limits, which is the call's when it is taken.
#[derive(Debug)]
pub struct Ready {
    /// The launcher.
    pub started: Started,
    /// Its cgroup, not yet given to a user ([`CallCgroup::assign`]).
    pub cgroup: CallCgroup,
    /// The limits that cgroup applies.
    pub limits: AppliedLimits,
    /// The worker's mount table's generation when it was started (see
    /// [`Waiting::mounts`]).
    generation: u64,
}

impl Ready {
    /// Starts a launcher at `path` in `namespaces`, inside a fresh call
    /// cgroup.
    fn start(path: &Path, namespaces: sys::NewNamespaces, generation: u64) -> io::Result<Self> {
        let null = open_null()?;
        let (started, cgroup, limits) = start_in_cgroup(
            path,
            Some(&null),
            true,
            namespaces,
            true,
            (contain::DEFAULT_PIDS_MAX, contain::DEFAULT_MEMORY_MAX),
        )?;
        // A network of its own has `lo` down: brought up here, off any
        // call's path (the launcher checks it again, as root, before use).
        if namespaces.net {
            if let Err(e) = sys::in_netns_of(started.pid, sys::loopback_up) {
                started.end();
                let _ = cgroup.finish();
                return Err(e);
            }
        }
        Ok(Self {
            started,
            cgroup,
            limits,
            generation,
        })
    }
}

/// A kind of pooled launcher: its path, and the namespaces of its own it
/// waits in (PID for the private view, network for a network not the
/// host's).
type Kind = (PathBuf, sys::NewNamespaces);

#[derive(Default)]
struct Waiting {
    /// Launchers waiting for a plan, by kind, oldest first: the order
    /// calls take them in.
    ready: HashMap<Kind, VecDeque<Ready>>,
    /// Drained for an exit: a launcher the refill was starting is ended,
    /// not kept (until a call asks again).
    closed: bool,
    /// The refill thread is starting a launcher (outside the lock).
    starting: bool,
    /// The worker's mount table, watched: a launcher in a mount namespace
    /// of its own holds a copy of it taken when it started, so one started
    /// before a change (a mount, or an unmount that hides or locks
    /// something) is ended, never handed out. Asked on every take; `None`
    /// where it cannot be opened, which counts as a change on every take.
    mounts: Option<sys::MountTableWatch>,
    /// Bumped on every change of the mount table seen: launchers started
    /// at an older generation are ended when a call would take them.
    generation: u64,
}

impl Waiting {
    /// The generation of the mount table now, bumped if it has changed
    /// since last asked.
    fn note_mount_changes(&mut self) -> u64 {
        if self
            .mounts
            .as_ref()
            .is_none_or(sys::MountTableWatch::changed)
        {
            self.generation += 1;
        }
        self.generation
    }

    /// Takes out every waiting launcher with a mount namespace of its own
    /// started before the mount table's last change.
    fn take_stale(&mut self) -> Vec<Ready> {
        let generation = self.note_mount_changes();
        let mut stale = Vec::new();
        for ((_, namespaces), list) in self.ready.iter_mut() {
            if namespaces.pid {
                let (old, current): (VecDeque<Ready>, VecDeque<Ready>) = std::mem::take(list)
                    .into_iter()
                    .partition(|r| r.generation != generation);
                *list = current;
                stale.extend(old);
            }
        }
        stale
    }
}

/// The mount table's watcher thread: at each change, ends the waiting
/// launchers it made stale and asks for new ones.
fn end_stale_on_change(watch: &sys::MountTableWatch) {
    let pool = pool();
    while watch.wait_for_change().is_ok() {
        let stale = match pool.waiting.lock() {
            Ok(mut waiting) => waiting.take_stale(),
            Err(_) => return,
        };
        if stale.is_empty() {
            continue;
        }
        for ready in stale {
            ready.started.end();
            let _ = ready.cgroup.finish();
        }
        pool.wanted.notify_one();
    }
}

struct Pool {
    waiting: Mutex<Waiting>,
    wanted: Condvar,
    /// Signalled when a start the refill thread was making has ended.
    started: Condvar,
}

static POOL: OnceLock<Pool> = OnceLock::new();

fn pool() -> &'static Pool {
    POOL.get_or_init(|| {
        let started = std::thread::Builder::new()
            .name("tono-launch-pool".into())
            .spawn(refill);
        if let Err(e) = started {
            tracing::warn!(error = %e, "no launcher pool: every call starts its own launcher");
        }
        let mounts = sys::MountTableWatch::open()
            .inspect_err(|e| {
                tracing::warn!(error = %e, "the mount table cannot be watched: calls of the private view start their own launcher");
            })
            .ok();
        // Ends the launchers a change of the mount table made stale as soon
        // as it happens, not at the next call: each holds its copy of the
        // host's mounts, and with it any file system the host has since
        // unmounted (which stays busy while they live).
        let watched = mounts
            .is_some()
            .then(sys::MountTableWatch::open)
            .and_then(Result::ok)
            .map(|watch| {
                std::thread::Builder::new()
                    .name("tono-mount-watch".into())
                    .spawn(move || end_stale_on_change(&watch))
            });
        if let Some(Err(e)) = watched {
            tracing::warn!(error = %e, "no watch of the mount table: stale launchers are ended at the next call");
        }
        Pool {
            waiting: Mutex::new(Waiting {
                mounts,
                ..Waiting::default()
            }),
            wanted: Condvar::new(),
            started: Condvar::new(),
        }
    })
}

/// A waiting launcher for `path` (stdin `/dev/null`, output captured,
/// in `namespaces`) in a cgroup with `limits` (`pids.max`, memory), if one
/// is alive and the limits are the defaults it was made with.
pub fn take(path: &Path, namespaces: sys::NewNamespaces, limits: (u64, u64)) -> Option<Ready> {
    if limits != (contain::DEFAULT_PIDS_MAX, contain::DEFAULT_MEMORY_MAX) {
        return None;
    }
    let pool = pool();
    let mut waiting = pool.waiting.lock().ok()?;
    waiting.closed = false;
    // Only a launcher in a mount namespace of its own (the init of a PID
    // namespace makes one) holds a copy of the host's mounts.
    let own_mounts = namespaces.pid;
    if own_mounts && waiting.mounts.is_none() {
        return None;
    }
    let generation = waiting.note_mount_changes();
    let list = waiting
        .ready
        .entry((path.to_path_buf(), namespaces))
        .or_default();
    let mut found = None;
    // The oldest first: the newest may have been started by the refill a
    // moment ago and still be loading, while the oldest has had the longest
    // to load and warm up (in calls back to back, taking the newest made
    // four calls in ten wait about a millisecond for their launcher).
    while let Some(ready) = list.pop_front() {
        // A launcher that died while it waited (killed by an operator, out
        // of memory) is reaped here and not handed out; its cgroup goes.
        if own_mounts && ready.generation != generation {
            // Its view of the host's mounts is older than the host's.
            ready.started.end();
            let _ = ready.cgroup.finish();
            continue;
        }
        match sys::try_reap(ready.started.pid) {
            Ok(None) => match normal_scheduling(ready.started.pid) {
                Ok(()) => {
                    found = Some(ready);
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a pooled launcher could not be given the normal scheduling policy; ended");
                    ready.started.end();
                    let _ = ready.cgroup.finish();
                }
            },
            Ok(Some(_)) | Err(_) => {
                let _ = ready.cgroup.finish();
            }
        }
    }
    if found.is_none() {
        // Empty: fill it now. Otherwise the refill waits for the call to
        // end ([`replenish`]), so that starting a launcher does not take a
        // core from the call that just took one.
        pool.wanted.notify_one();
    }
    found
}

/// The pids of the launchers in the pool now, ready to be handed out (not
/// one the refill is still starting), each kind's oldest first, the order
/// calls take them in: for a status line or a test.
pub fn waiting_pids() -> Vec<u32> {
    let Some(pool) = POOL.get() else {
        return Vec::new();
    };
    pool.waiting.lock().map_or_else(
        |_| Vec::new(),
        |w| {
            w.ready
                .values()
                .flatten()
                .filter_map(|r| u32::try_from(r.started.pid).ok())
                .collect()
        },
    )
}

/// Ends every waiting launcher and removes its cgroup, and stops refilling
/// until a call asks again: for a worker about to exit. (A worker that
/// cannot, killed, leaves them to the next start's sweep of dead workers.)
pub fn drain() {
    let Some(pool) = POOL.get() else { return };
    let waiting: Vec<Ready> = match pool.waiting.lock() {
        Ok(mut w) => {
            w.closed = true;
            // A launcher being started now is ended by the refill thread
            // (its cgroup removal counted before this returns): wait for it.
            let (mut w, _) = pool
                .started
                .wait_timeout_while(w, DRAIN_WAIT, |w| w.starting)
                .unwrap_or_else(|p| p.into_inner());
            w.ready.drain().flat_map(|(_, list)| list).collect()
        }
        Err(_) => return,
    };
    for ready in waiting {
        ready.started.end();
        let _ = ready.cgroup.finish();
    }
}

/// Asks for the pools to be refilled: called when a call has ended.
pub fn replenish() {
    if let Some(pool) = POOL.get() {
        pool.wanted.notify_one();
    }
}

/// Whether the refill thread runs at `SCHED_IDLE`, so its launchers need
/// putting back when taken.
static IDLE_REFILL: AtomicBool = AtomicBool::new(false);

/// Puts a taken launcher back to the normal policy where the refill runs
/// at `SCHED_IDLE`.
fn normal_scheduling(pid: libc::pid_t) -> io::Result<()> {
    if IDLE_REFILL.load(Ordering::Relaxed) {
        sys::set_normal_scheduling(pid)
    } else {
        Ok(())
    }
}

/// The refill thread: keeps [`POOL_SIZE`] launchers waiting for every
/// kind a call has asked for.
fn refill() {
    // Only where a launcher can be put back (root with CAP_SYS_NICE; a
    // container's default set lacks it): asked of a thread of its own,
    // which may be left at SCHED_IDLE.
    let can_return = std::thread::spawn(|| {
        sys::set_idle_scheduling().is_ok() && sys::set_normal_scheduling(0).is_ok()
    })
    .join()
    .unwrap_or(false);
    if can_return {
        IDLE_REFILL.store(sys::set_idle_scheduling().is_ok(), Ordering::Relaxed);
    }
    let pool = pool();
    loop {
        let (short, generation): (Vec<Kind>, u64) = {
            let Ok(mut waiting) = pool.waiting.lock() else {
                return;
            };
            loop {
                let short: Vec<Kind> = waiting
                    .ready
                    .iter()
                    .filter(|(_, l)| l.len() < POOL_SIZE)
                    .map(|(kind, _)| kind.clone())
                    .collect();
                if !short.is_empty() && !waiting.closed {
                    waiting.starting = true;
                    // Read before the launchers are started: a change
                    // seen after this ends them, even one that came
                    // before their clone.
                    break (short, waiting.generation);
                }
                waiting = match pool.wanted.wait(waiting) {
                    Ok(w) => w,
                    Err(_) => return,
                };
            }
        };
        for kind in short {
            if pool.waiting.lock().map_or(true, |w| w.closed) {
                break;
            }
            // Started outside the lock: a call never waits for a spawn.
            match Ready::start(&kind.0, kind.1, generation) {
                Ok(started) => {
                    if let Ok(mut waiting) = pool.waiting.lock() {
                        if waiting.closed {
                            started.started.end();
                            let _ = started.cgroup.finish();
                        } else {
                            waiting.ready.entry(kind).or_default().push_back(started);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(launcher = %kind.0.display(), error = %e,
                        "could not start a pooled launcher; calls start their own");
                    if let Ok(mut waiting) = pool.waiting.lock() {
                        // Stop asking for this path until a call asks again.
                        waiting.ready.remove(&kind);
                    }
                }
            }
        }
        if let Ok(mut waiting) = pool.waiting.lock() {
            waiting.starting = false;
        }
        pool.started.notify_all();
    }
}
