//! A cgroup per call, so that no process outlives its call.
//!
//! The worker creates, under root-owned bases of its own (`<v2>/tono/` and,
//! where the v1 `pids`/`memory` controllers are mounted, their `tono/`), one
//! child cgroup per call; the launcher enters it while still root, before
//! the drop, or starts inside its v2 folder (`clone3` with
//! `CLONE_INTO_CGROUP`) and the worker moves it into the rest (its
//! unreaped child, waiting for its plan). The cgroup files stay root's, so the user
//! cannot move itself out. When the call ends the worker writes `1` to
//! `cgroup.kill`, waits (bounded) for `populated 0`, and then removes the
//! cgroup on a background thread. A cgroup that cannot
//! be emptied marks its user dirty: no new call for that user starts until
//! a later cleanup succeeds. Only cgroups this module created are touched.
//!
//! Limits: `pids.max` and `memory.max` in the call's v2 cgroup where the
//! host delegates those controllers (the base asks for them once); else
//! `pids.max` through the v1 pids controller, and a memory limit through
//! the v1 memory controller (under the worker's own memory cgroup, so the
//! call is also inside whatever limit the worker has) — the v2 hierarchy on
//! a hybrid host delegates no controller. A call
//! OOM-killed by its own limit is counted (`oom_kill` of `memory.events`
//! or `memory.oom_control`). Without a memory controller the launcher falls
//! back to `RLIMIT_AS`. What was really applied is reported in
//! [`AppliedLimits`]; nothing is claimed that is not.
//!
//! Without cgroup v2 (no `cgroup.kill`), what is left in a call's v1
//! cgroups when it ends is killed one process at a time through pidfds
//! ([`CallCgroup::finish`]); with no cgroup hierarchy at all, calls fall
//! back to the weaker per-user sweep of [`super::sweep`]. Either way the
//! kill is counted when it happens: [`Counters::killed_at_end`] is the
//! number of distinct processes the cgroup still held, and this module
//! killed, after the call's launcher had exited — what left the call's
//! process group, which only the cgroup can reach.
//!
//! A worker that is SIGKILLed cannot clean up; its cgroups carry its pid in
//! their name (`call-<pid>-<n>`), and [`super::dead_workers`], run when
//! a worker starts, kills and removes those whose worker no longer runs.
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::cgroupfs::{make_cgroup_dir, write_file, CGROUP_DIR_MODE};
use super::limits::{AppliedLimits, Counters};
use super::mounts::{untracked, Mounts};

/// The folder name of the worker's own cgroup bases.
pub const BASE_NAME: &str = "tono";
/// How long the worker waits for a killed cgroup to empty.
pub const EMPTY_TIMEOUT: Duration = Duration::from_secs(2);

static NEXT: AtomicU64 = AtomicU64::new(0);
/// The uid of a cgroup made ahead of need, before [`CallCgroup::assign`].
pub const UNASSIGNED: u32 = u32::MAX;
static LEFTOVER: Mutex<Vec<CallCgroup>> = Mutex::new(Vec::new());

/// Retries the removal of `uid`'s leftover cgroups; true when none is left.
pub fn cleanup(uid: u32) -> bool {
    let Ok(mut left) = LEFTOVER.lock() else {
        return false;
    };
    let mut still = Vec::new();
    for cg in left.drain(..) {
        if cg.uid != uid || cg.kill_and_remove().is_err() {
            still.push(cg);
        }
    }
    let clean = !still.iter().any(|c| c.uid == uid);
    *left = still;
    set_dirty(uid, !clean);
    clean
}
static DIRTY: Mutex<Option<HashSet<u32>>> = Mutex::new(None);

/// Whether a user has a cgroup left that could not be emptied.
pub fn is_dirty(uid: u32) -> bool {
    DIRTY
        .lock()
        .map(|d| d.as_ref().is_some_and(|s| s.contains(&uid)))
        .unwrap_or(true)
}

fn set_dirty(uid: u32, dirty: bool) {
    if let Ok(mut d) = DIRTY.lock() {
        let set = d.get_or_insert_with(HashSet::new);
        if dirty {
            set.insert(uid);
        } else {
            set.remove(&uid);
        }
    }
}

/// One call's cgroups.
#[derive(Debug)]
pub struct CallCgroup {
    /// The v2 cgroup of the call.
    pub v2: Option<PathBuf>,
    /// The v1 pids cgroup of the call.
    pub pids: Option<PathBuf>,
    /// The v1 memory cgroup of the call.
    pub memory: Option<PathBuf>,
    /// `pids.max` is set in the v2 cgroup (a delegated controller).
    v2_pids: bool,
    /// `memory.max` is set in the v2 cgroup (a delegated controller).
    v2_memory: bool,
    uid: u32,
    /// The processes the end-of-call kill found in the call's cgroups and
    /// killed (pids, each counted once however often it was signalled).
    killed: Mutex<HashSet<u32>>,
}

fn ensure_base(mount: &Path) -> io::Result<PathBuf> {
    let base = mount.join(BASE_NAME);
    match make_cgroup_dir(&base) {
        Ok(()) => Ok(base),
        // A base an earlier worker made is given the mode again.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::set_permissions(&base, fs::Permissions::from_mode(CGROUP_DIR_MODE))?;
            Ok(base)
        }
        Err(e) => Err(e),
    }
}

/// The v2 base, with the `pids` and `memory` controllers enabled for its
/// children where the host delegates them (asked once per process; a host
/// that does not, like a hybrid one, refuses and calls use v1 or rlimits).
fn ensure_v2_base(mount: &Path) -> io::Result<PathBuf> {
    static ENABLED: std::sync::Once = std::sync::Once::new();
    static DELEGATED: std::sync::Once = std::sync::Once::new();
    // At a private cgroup namespace's root, the controllers must first be
    // enabled for the base's parent, the namespace's root itself.
    DELEGATED.call_once(|| {
        super::delegate::delegate_to_self(mount);
    });
    let base = ensure_base(mount)?;
    ENABLED.call_once(|| {
        for controller in ["+pids", "+memory"] {
            let _ = write_file(&base.join("cgroup.subtree_control"), controller);
        }
    });
    Ok(base)
}

/// Writes a limit into a cgroup's `file` if the controller is there.
fn set_limit(dir: &Path, file: &str, value: u64) -> bool {
    dir.join(file).exists() && write_file(&dir.join(file), &value.to_string()).is_ok()
}

/// The number a single-value cgroup file holds; `None` if the kernel has
/// no such file.
fn peak(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The number after `key ` in a flat-keyed cgroup file, 0 if absent.
fn counter(path: &Path, key: &str) -> u64 {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

impl CallCgroup {
    /// Creates the call's cgroups for `uid` and sets `pids_max` and
    /// `memory_max` where those controllers exist. Without cgroup v2 the
    /// call has none.
    pub fn create(
        mounts: &Mounts,
        uid: u32,
        pids_max: u64,
        memory_max: u64,
    ) -> io::Result<(Self, AppliedLimits)> {
        let name = format!(
            "call-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut limits = AppliedLimits::default();
        let (mut v2_pids, mut v2_memory) = (false, false);
        let v2 = match &mounts.v2 {
            Some(m) => {
                let dir = ensure_v2_base(m)?.join(&name);
                make_cgroup_dir(&dir)?;
                limits.cgroup_v2 = true;
                // Delegated v2 controllers come first; v1 only where absent.
                v2_pids = set_limit(&dir, "pids.max", pids_max);
                v2_memory = set_limit(&dir, "memory.max", memory_max);
                if v2_pids {
                    limits.pids_max = Some((pids_max, "cgroup v2 pids".into()));
                }
                if v2_memory {
                    // No swap past the limit either, so the limit is real.
                    let _ = set_limit(&dir, "memory.swap.max", 0);
                    limits.memory_max = Some((memory_max, "cgroup v2 memory".into()));
                }
                Some(dir)
            }
            None => {
                // What will be done at the call's end (the mechanism, not a
                // kill that happened: `killed_at_end` counts those).
                limits.note = Some(if untracked(mounts) {
                    "no cgroup: processes that left the process group are killed by the per-user sweep when the user's last live call ends".into()
                } else {
                    "no cgroup v2: what is left in the call's v1 cgroups when it ends is killed \
                     one process at a time through pidfds (counted in killed_at_end)"
                        .into()
                });
                None
            }
        };
        let limited = |mount: &Option<PathBuf>, file: &str, value: u64| {
            let mount = mount.as_ref()?;
            ensure_base(mount)
                .and_then(|base| {
                    let dir = base.join(&name);
                    make_cgroup_dir(&dir)?;
                    if let Err(e) = write_file(&dir.join(file), &value.to_string()) {
                        let _ = fs::remove_dir(&dir);
                        return Err(e);
                    }
                    Ok(dir)
                })
                .ok()
        };
        let pids = if v2_pids {
            None
        } else {
            limited(&mounts.v1_pids, "pids.max", pids_max)
        };
        if pids.is_some() {
            limits.pids_max = Some((pids_max, "cgroup v1 pids".into()));
        }
        let memory = if v2_memory {
            None
        } else {
            limited(&mounts.v1_memory, "memory.limit_in_bytes", memory_max)
        };
        if memory.is_some() {
            limits.memory_max = Some((memory_max, "cgroup v1 memory".into()));
        }
        // Named only where a cgroup was really made.
        if v2.is_some() || pids.is_some() || memory.is_some() {
            limits.cgroup = Some(name);
        }
        Ok((
            Self {
                v2,
                pids,
                memory,
                v2_pids,
                v2_memory,
                uid,
                killed: Mutex::new(HashSet::new()),
            },
            limits,
        ))
    }

    /// A call cgroup found under the bases by `name` (one of a worker that
    /// no longer runs: whose call it was is not in the name).
    pub(super) fn found(mounts: &Mounts, name: &str) -> Self {
        let at = |m: &Option<PathBuf>| {
            m.as_ref()
                .map(|m| m.join(BASE_NAME).join(name))
                .filter(|d| d.is_dir())
        };
        Self {
            v2: at(&mounts.v2),
            pids: at(&mounts.v1_pids),
            memory: at(&mounts.v1_memory),
            v2_pids: false,
            v2_memory: false,
            uid: UNASSIGNED,
            killed: Mutex::new(HashSet::new()),
        }
    }

    /// Gives the cgroup to a call of `uid` (made ahead of need, it had none):
    /// a failure to empty it marks that user dirty.
    pub fn assign(&mut self, uid: u32) {
        self.uid = uid;
    }

    /// Moves `pid`, an unreaped child of the worker that runs no user code
    /// yet (a waiting launcher), into every hierarchy of the call. The pid
    /// cannot have been reused: the worker has not reaped it.
    pub fn enter(&self, pid: u32) -> io::Result<()> {
        for procs in self.procs_files() {
            write_file(&procs, &pid.to_string())?;
        }
        Ok(())
    }

    /// The call's v2 folder, open (`O_DIRECTORY`, CLOEXEC), to start a
    /// launcher in (`clone3` with `CLONE_INTO_CGROUP`); `None` without v2.
    pub fn open_v2(&self) -> io::Result<Option<std::os::fd::OwnedFd>> {
        self.v2
            .as_ref()
            .map(|dir| {
                fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(dir)
                    .map(Into::into)
            })
            .transpose()
    }

    /// [`CallCgroup::enter`] for every hierarchy but v2 (a launcher that
    /// started inside the v2 folder).
    pub fn enter_v1(&self, pid: u32) -> io::Result<()> {
        for procs in self.pids.iter().chain(self.memory.iter()) {
            write_file(&procs.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// The `cgroup.procs` files the launcher writes `0` into, as root.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.v2
            .iter()
            .chain(self.pids.iter())
            .chain(self.memory.iter())
            .map(|d| d.join("cgroup.procs"))
            .collect()
    }

    /// Kills everything in the v2 cgroup now, without waiting; what it
    /// held is counted as killed.
    pub fn kill_now(&self) {
        if let Some(dir) = &self.v2 {
            let _ = self.kill_v2(dir);
        }
    }

    /// Writes `1` to the v2 cgroup's `cgroup.kill`; the processes listed
    /// just before (a process cannot leave a cgroup the user cannot write,
    /// and one forked after the listing is killed too, uncounted) are
    /// counted as killed once the write succeeded.
    fn kill_v2(&self, dir: &Path) -> Result<(), String> {
        let held = listed(dir).unwrap_or_default();
        write_file(&dir.join("cgroup.kill"), "1").map_err(|e| format!("cgroup.kill: {e}"))?;
        self.count_killed(held);
        Ok(())
    }

    fn count_killed(&self, pids: impl IntoIterator<Item = u32>) {
        let mut killed = self.killed.lock().unwrap_or_else(|p| p.into_inner());
        killed.extend(pids);
    }

    fn killed_count(&self) -> u64 {
        let killed = self.killed.lock().unwrap_or_else(|p| p.into_inner());
        killed.len() as u64
    }

    /// Kills everything in the call and waits for it to empty; then hands
    /// the empty cgroups to the remover thread, so their `rmdir` (and the
    /// kernel's teardown) is off the call's path (or, in a process that
    /// asked for [`remove_in_place`], removes them here). On failure the user is
    /// marked dirty, the cgroup is kept for a later [`cleanup`], and the
    /// error says why; a removal that fails later marks the user dirty then.
    pub fn finish(self) -> Result<Counters, String> {
        let counters = Counters {
            pids_max_hits: self.pids_max_hits(),
            oom_kills: self.oom_kills(),
            memory_peak: self.memory_peak(),
            pids_peak: self.pids_peak(),
            killed_at_end: 0,
        };
        match self.kill_all() {
            Ok(()) => {
                let counters = Counters {
                    killed_at_end: self.killed_count(),
                    ..counters
                };
                remove_later(self);
                Ok(counters)
            }
            Err(e) => {
                set_dirty(self.uid, true);
                if let Ok(mut left) = LEFTOVER.lock() {
                    left.push(self);
                }
                Err(e)
            }
        }
    }

    /// The most memory the call's cgroup charged (`memory.peak` in v2,
    /// `memory.max_usage_in_bytes` in v1), where the kernel keeps it.
    fn memory_peak(&self) -> Option<u64> {
        match (&self.v2, &self.memory) {
            (Some(dir), _) if self.v2_memory => peak(&dir.join("memory.peak")),
            (_, Some(dir)) => peak(&dir.join("memory.max_usage_in_bytes")),
            _ => None,
        }
    }

    /// The most processes the call's cgroup held (`pids.peak`), where the
    /// kernel keeps it.
    fn pids_peak(&self) -> Option<u64> {
        let dir = if self.v2_pids { &self.v2 } else { &self.pids };
        dir.as_ref().and_then(|dir| peak(&dir.join("pids.peak")))
    }

    /// How many processes the memory limit killed (`oom_kill` in v2's
    /// `memory.events` or v1's `memory.oom_control`).
    fn oom_kills(&self) -> u64 {
        match (&self.v2, &self.memory) {
            (Some(dir), _) if self.v2_memory => counter(&dir.join("memory.events"), "oom_kill"),
            (_, Some(dir)) => counter(&dir.join("memory.oom_control"), "oom_kill"),
            _ => 0,
        }
    }

    /// How often `pids.max` refused a fork (`max` in `pids.events`).
    fn pids_max_hits(&self) -> u64 {
        let dir = if self.v2_pids { &self.v2 } else { &self.pids };
        dir.as_ref()
            .map_or(0, |dir| counter(&dir.join("pids.events"), "max"))
    }

    pub(super) fn kill_and_remove(&self) -> Result<(), String> {
        self.kill_all()?;
        self.remove()
    }

    /// Kills everything in the call and waits (bounded) until it is empty:
    /// `cgroup.kill` and `populated 0` on v2; without v2, what is left in
    /// the v1 cgroups (a process that left the process group) is killed
    /// there, by pidfd.
    fn kill_all(&self) -> Result<(), String> {
        if let Some(dir) = &self.v2 {
            self.kill_v2(dir)?;
            let deadline = Instant::now() + EMPTY_TIMEOUT;
            loop {
                let events = fs::read_to_string(dir.join("cgroup.events"))
                    .map_err(|e| format!("cgroup.events: {e}"))?;
                if events.lines().any(|l| l == "populated 0") {
                    return Ok(());
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "{} did not empty within {EMPTY_TIMEOUT:?}",
                        dir.display()
                    ));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        for dir in self.pids.iter().chain(self.memory.iter()) {
            self.count_killed(kill_v1(dir, Instant::now() + EMPTY_TIMEOUT)?);
        }
        Ok(())
    }

    /// Removes the emptied cgroups. A v1 cgroup may stay busy for a moment
    /// after its processes were killed (until they are reaped).
    fn remove(&self) -> Result<(), String> {
        for dir in self
            .v2
            .iter()
            .chain(self.pids.iter())
            .chain(self.memory.iter())
        {
            let deadline = Instant::now() + EMPTY_TIMEOUT;
            loop {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e)
                        if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline =>
                    {
                        std::thread::sleep(Duration::from_micros(200))
                    }
                    Err(e) => return Err(format!("rmdir {}: {e}", dir.display())),
                }
            }
        }
        Ok(())
    }
}

/// Emptied call cgroups waiting for their `rmdir`, and the signal that
/// their number went down ([`settle`] waits on it, not on a timer).
static PENDING: Mutex<u64> = Mutex::new(0);
static REMOVED: std::sync::Condvar = std::sync::Condvar::new();

fn pending_add(delta: i64) {
    let mut pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
    *pending = pending.saturating_add_signed(delta);
    if delta < 0 {
        REMOVED.notify_all();
    }
}

/// Set by [`remove_in_place`]: emptied cgroups are removed by the thread
/// that emptied them.
static IN_PLACE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// For a process that makes one call at a time and waits for every
/// removal before it exits ([`settle`]), as the CLI's `run` and `call` do:
/// from now on an emptied call cgroup is removed where it was emptied,
/// before [`CallCgroup::finish`] returns, instead of by the remover thread.
/// The removal is the same, and so is what a failure does (the user is
/// marked dirty, the cgroup kept for [`cleanup`]); the process saves the
/// thread's start and the wait for it to be scheduled, which on a busy
/// machine is most of a removal's cost.
pub fn remove_in_place() {
    IN_PLACE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Queues an emptied cgroup for removal by the remover thread (started on
/// first use); removes it here if that thread cannot run, or if this
/// process asked for [`remove_in_place`].
fn remove_later(cg: CallCgroup) {
    if IN_PLACE.load(std::sync::atomic::Ordering::Relaxed) {
        pending_add(1);
        removed(cg);
        return;
    }
    static REMOVER: std::sync::OnceLock<Option<Mutex<std::sync::mpsc::Sender<CallCgroup>>>> =
        std::sync::OnceLock::new();
    let sender = REMOVER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<CallCgroup>();
        std::thread::Builder::new()
            .name("tono-cgroup-rm".into())
            .spawn(move || {
                for cg in rx {
                    removed(cg);
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    pending_add(1);
    let cg = match sender.as_ref().and_then(|tx| tx.lock().ok()) {
        Some(tx) => match tx.send(cg) {
            Ok(()) => return,
            Err(std::sync::mpsc::SendError(cg)) => cg,
        },
        None => cg,
    };
    removed(cg);
}

/// Removes an emptied cgroup; a failure marks its user dirty and keeps it
/// for [`cleanup`].
fn removed(cg: CallCgroup) {
    if let Err(e) = cg.remove() {
        tracing::warn!(error = %e, "an emptied call cgroup could not be removed");
        set_dirty(cg.uid, true);
        if let Ok(mut left) = LEFTOVER.lock() {
            left.push(cg);
        }
    }
    pending_add(-1);
}

/// Waits until every emptied call cgroup has been removed (or `timeout`);
/// true when none is pending. For a worker about to exit, and for tests.
pub fn settle(timeout: Duration) -> bool {
    let pending = PENDING.lock().unwrap_or_else(|p| p.into_inner());
    match REMOVED.wait_timeout_while(pending, timeout, |n| *n > 0) {
        Ok((left, _)) => *left == 0,
        Err(_) => false,
    }
}

/// The pids listed in a cgroup's `cgroup.procs` (root's file).
fn listed(dir: &Path) -> Result<Vec<u32>, String> {
    let procs = fs::read_to_string(dir.join("cgroup.procs"))
        .map_err(|e| format!("{}: {e}", dir.join("cgroup.procs").display()))?;
    Ok(procs
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect())
}

/// Without cgroup v2 there is no `cgroup.kill`: kills what a v1 call cgroup
/// holds, one process at a time, until it is empty or `deadline` passes (a
/// forking process is bounded by `pids.max`). Each pid read from the
/// root-owned `cgroup.procs` is opened as a pidfd and signalled only if it
/// is still listed after the open, so the pidfd is of a process inside the
/// cgroup, never of a reused pid outside it. Returns the pids a SIGKILL
/// was delivered to.
fn kill_v1(dir: &Path, deadline: Instant) -> Result<HashSet<u32>, String> {
    let mut killed = HashSet::new();
    loop {
        let pids = listed(dir)?;
        if pids.is_empty() {
            return Ok(killed);
        }
        for pid in pids {
            let Ok(pidfd) = crate::sys::pidfd_open(pid) else {
                continue; // already gone
            };
            if listed(dir)?.contains(&pid)
                && crate::sys::pidfd_send_signal(&pidfd, libc::SIGKILL).is_ok()
            {
                killed.insert(pid);
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} still holds processes after {EMPTY_TIMEOUT:?}",
                dir.display()
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_read_flat_keyed_files() {
        let dir = std::env::temp_dir().join(format!("tono-counter-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let events = dir.join("memory.events");
        fs::write(
            &events,
            "low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\noom_group_kill 0\n",
        )
        .unwrap();
        assert_eq!(counter(&events, "oom_kill"), 1);
        assert_eq!(
            counter(&events, "oom"),
            2,
            "a key is never matched as a prefix"
        );
        assert_eq!(counter(&events, "max"), 3);
        assert_eq!(counter(&events, "absent"), 0);
        assert_eq!(counter(&dir.join("missing"), "max"), 0);
        fs::remove_dir_all(&dir).unwrap();
    }
}
