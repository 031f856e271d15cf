//! Starting `tono-launch` from the async worker and collecting what happened.
//!
//! Guarantees: the launcher starts with an empty environment, its plan on a
//! pipe (fd 3) and its status pipe (fd 4), and no other fd of the worker
//! (every worker fd is CLOEXEC or closed by the launcher's `close_range`),
//! whether it was started for the call or taken waiting from
//! [`super::pool`]; its stdin is `/dev/null` or a pipe and its stdout and
//! stderr are pipes, except for the key built-ins whose stdin or stdout
//! carries a secret's value ([`Input::Inherit`], [`Output::Inherit`]): a
//! program never holds the worker's own stdio, so under a terminal never
//! the operator's terminal; its plan is written only once the call's
//! cgroups exist.
//! The child is watched through a pidfd; when it exits, or its timeout
//! fires, its whole process group is killed while the exited leader is not
//! yet reaped (so the group id cannot have been reused), then it is reaped.
//! Output is drained concurrently with a cap, so a chatty tool never
//! deadlocks, and a background process holding the pipes cannot hang the
//! call past a short drain window. A dropped future kills and reaps too.

use std::io;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;

use super::pool;
use super::proxy;
use super::start::{open_null, start, start_in_cgroup, Launcher, Started};
use super::stdio::{self, Relayed, Target};
use crate::contain::{self, AppliedLimits, CallCgroup, Counters};
use crate::env::Network;
use crate::launch::plan::LaunchPlan;
use crate::launch::report::{LaunchError, Stage, StatusReport, MAX_STATUS_BYTES};
use crate::sys;

/// How long output is still read after the program exited and its process
/// group was killed.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

/// The launched program's stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// `/dev/null`.
    Null,
    /// A pipe the worker feeds from its own stdin, by a thread of its own,
    /// until end of file, until the program closes it, or until the call
    /// ends ([`super::stdio::feed_stdin`]): the program reads what the
    /// operator types but never holds the worker's stdin, which under a
    /// terminal is the terminal itself, open for writing too. The CLI's
    /// `run`.
    Relay,
    /// The worker's own stdin, the descriptor itself. Only for the key
    /// built-ins `seal` and `import`: their stdin carries a secret's value,
    /// which goes to the launcher (running as the user) and must never
    /// pass through the worker's memory (the worker holds no plaintext).
    /// Never for a program: under a terminal it would hold the operator's
    /// terminal.
    Inherit,
}

/// The launched program's stdout and stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Captured, at most this many bytes per stream (the rest is drained).
    Capture(usize),
    /// Pipes whose bytes the worker writes on to its own stdout and stderr
    /// as they arrive, by a thread of its own ([`super::stdio`]): no cap,
    /// nothing kept, nothing tapped. The program never holds the worker's
    /// stdout or stderr, and in the private view what it writes leaves
    /// only through the launcher's masking relay. The CLI's `run`.
    Relay,
    /// The worker's own stdout and stderr, the descriptors themselves. Only
    /// for the key built-in `reveal`: its stdout carries the secret's
    /// value, which goes from the launcher (running as the user) straight
    /// out and must never pass through the worker's memory (the worker
    /// holds no plaintext). Never for a program: under a terminal it would
    /// hold the operator's terminal.
    Inherit,
}

/// One stream's captured bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// The first bytes, up to the cap.
    pub bytes: Vec<u8>,
    /// More was written than kept.
    pub truncated: bool,
}

impl Captured {
    fn take(&mut self, chunk: &[u8], cap: usize) {
        let room = cap.saturating_sub(self.bytes.len());
        self.bytes
            .extend_from_slice(&chunk[..chunk.len().min(room)]);
        if chunk.len() > room {
            self.truncated = true;
        }
    }
}

/// What happened to one launch.
#[derive(Debug)]
pub struct Finished {
    /// The exit status from `waitpid` (absent only if it could not be had).
    pub status: Option<ExitStatus>,
    /// The timeout fired and the group was killed.
    pub timed_out: bool,
    /// Captured stdout.
    pub stdout: Captured,
    /// Captured stderr.
    pub stderr: Captured,
    /// What the status pipe said.
    pub report: StatusReport,
    /// From spawn to reap.
    pub duration: Duration,
    /// Why the call's cgroup could not be emptied and removed, if so.
    pub cgroup_error: Option<String>,
    /// What the call's cgroups counted (forks refused, OOM kills).
    pub counters: Counters,
}

/// Kills and reaps the child (and empties its cgroup) if the launch is
/// abandoned.
struct ChildGuard {
    /// The launcher's pid while it is unreaped (so the id is still ours).
    unreaped: Option<Pid>,
    cgroup: Option<CallCgroup>,
}

impl ChildGuard {
    /// SIGKILLs the group the launcher made with `setsid` (pgid = its pid).
    /// Called only while the leader is unreaped, so the id is still ours.
    fn kill_group(&self) {
        if let Some(pgid) = self.unreaped {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        if let Some(cg) = &self.cgroup {
            cg.kill_now();
        }
    }

    fn reap(&mut self) -> Option<ExitStatus> {
        self.unreaped
            .take()
            .and_then(|pid| sys::reap(pid.as_raw()).ok())
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.unreaped.take() {
            // Before the launcher's setsid the group is not yet its own;
            // the pid itself is killed too.
            let _ = killpg(pid, Signal::SIGKILL);
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            let _ = sys::reap(pid.as_raw());
        }
        if let Some(cg) = self.cgroup.take() {
            let _ = cg.finish();
        }
    }
}

fn spawn_error(what: &str, e: io::Error) -> LaunchError {
    LaunchError {
        stage: Stage::Spawn,
        code: "spawn_failed".into(),
        message: format!("{what}: {e}"),
        errno: e.raw_os_error(),
    }
}

async fn read_some(rx: &mut Option<pipe::Receiver>, buf: &mut [u8]) -> io::Result<usize> {
    match rx {
        Some(rx) => rx.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn relay_ended(relayed: &mut Option<Relayed>) {
    match relayed {
        Some(relayed) => relayed.ended().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Which output stream a tapped chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The program's stdout.
    Stdout,
    /// The program's stderr.
    Stderr,
}

/// Receives a copy of every chunk of captured output as it is read, while
/// the program still runs (a sign-in reads its link this way). Once the
/// receiver is dropped, nothing more is sent.
pub type Tap = tokio::sync::mpsc::UnboundedSender<(Stream, Vec<u8>)>;

/// Launches `plan` and waits for it, within `timeout`.
pub async fn launch(
    launcher: &Launcher,
    plan: LaunchPlan,
    input: Input,
    output: Output,
    timeout: Duration,
) -> Result<Finished, LaunchError> {
    launch_tapped(launcher, plan, input, output, timeout, None, None).await
}

/// Runs once the launcher has started and before its plan is written: it
/// takes the cgroup a pooled launcher already waits in (with its limits),
/// or creates the call's cgroup, if any, and completes the plan (the
/// cgroups to enter, the limits that stand in for a missing controller).
/// Done there, the kernel's cgroup set-up overlaps a fresh launcher's
/// loading instead of preceding it. An error kills the launcher, which
/// never gets a plan.
pub type Prepare<'a> = Box<
    dyn FnOnce(
            &mut LaunchPlan,
            Option<(CallCgroup, AppliedLimits)>,
        ) -> Result<Option<CallCgroup>, LaunchError>
        + Send
        + 'a,
>;

/// What a launch sets up besides its plan.
pub struct Setup<'a> {
    /// The cgroup limits asked for (`pids.max`, memory bytes), if the call
    /// asks for a cgroup: a pooled launcher is taken only when they are the
    /// ones it waits under.
    pub cgroup_limits: Option<(u64, u64)>,
    /// Makes or takes the cgroup and completes the plan.
    pub prepare: Prepare<'a>,
    /// Where the worker's end in a call's own network namespace carries
    /// its connections: the proxy of network `proxy`, or, for a call
    /// holding a bound secret in network `host`, each destination directly.
    pub call_end: Option<proxy::CallEnd>,
    /// The call's begin record: `true` once it is durable, `false` (or the
    /// sender dropped) when it could not be written. The plan is sent at
    /// once and [`crate::launch::plan::GO`] follows only on `true`; `None`:
    /// at once.
    pub go: Option<Go>,
}

/// The word that lets a launched call go on past its preparation: its begin
/// record is durable (`true`) or could not be written (`false`).
pub type Go = tokio::sync::oneshot::Receiver<bool>;

/// Writes the framed plan, then, once `go` says so (at once without one),
/// [`crate::launch::plan::GO`]; the pipe closes when this returns, so a
/// launcher still waiting reads its end and refuses the call.
/// Writes as much of `bytes` into the empty pipe `fd` as it holds at once:
/// all of them where they fit its capacity (a write to an empty pipe of
/// no more than its capacity does not wait), none otherwise, or when the
/// launcher is gone. Returns how many.
fn write_now(fd: &std::os::fd::OwnedFd, bytes: &[u8]) -> usize {
    use std::os::fd::AsRawFd;
    let capacity =
        nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_GETPIPE_SZ).unwrap_or(0);
    if bytes.len() > usize::try_from(capacity).unwrap_or(0) {
        return 0;
    }
    nix::unistd::write(fd, bytes).unwrap_or(0)
}

async fn send_plan(mut tx: pipe::Sender, framed: zeroize::Zeroizing<Vec<u8>>, go: Option<Go>) {
    if tx.write_all(&framed).await.is_err() {
        return;
    }
    // Wiped now: the rest may wait for an fsync.
    drop(framed);
    let go = match go {
        Some(go) => go.await.unwrap_or(false),
        None => true,
    };
    if go {
        let _ = tx.write_all(&[crate::launch::plan::GO]).await;
    }
}

fn send_tap(tap: &mut Option<Tap>, stream: Stream, chunk: &[u8]) {
    if let Some(tx) = tap {
        if tx.send((stream, chunk.to_vec())).is_err() {
            *tap = None;
        }
    }
}

/// [`launch`], with `setup` run between the start and the plan, and
/// every captured chunk also sent to `tap` as it arrives.
pub async fn launch_tapped(
    launcher: &Launcher,
    mut plan: LaunchPlan,
    input: Input,
    output: Output,
    timeout: Duration,
    setup: Option<Setup<'_>>,
    mut tap: Option<Tap>,
) -> Result<Finished, LaunchError> {
    let path = launcher.check_installed()?;
    // The launcher's stdout and stderr are pipes unless they are the
    // worker's own.
    let piped = output != Output::Inherit;
    let limits = setup.as_ref().and_then(|s| s.cgroup_limits);
    let namespaces = plan.namespaces();
    // A pooled launcher waits with stdin `/dev/null` and output captured.
    let pooled = match limits {
        Some(limits)
            if launcher.pooled && input == Input::Null && matches!(output, Output::Capture(_)) =>
        {
            pool::take(&path, namespaces, limits)
        }
        _ => None,
    };
    let started = Instant::now();
    // The worker's end of a relayed stdin's pipe.
    let mut feed = None;
    let (launched, placed) = match pooled {
        Some(ready) => (ready.started, Some((ready.cgroup, ready.limits))),
        None => {
            // The launcher's stdin; dropped (the worker's copy closed) once
            // it has started.
            let stdin = match input {
                Input::Null => Some(open_null().map_err(|e| spawn_error("open /dev/null", e))?),
                Input::Relay => {
                    let (r, w) =
                        sys::pipe_above_status().map_err(|e| spawn_error("stdin pipe", e))?;
                    feed = Some(w);
                    Some(r)
                }
                Input::Inherit => None,
            };
            let starting = format!("start {}", path.display());
            match limits {
                // Where the call's cgroups are all v2, the launcher starts
                // inside them: a `cgroup.procs` write would wait for an RCU
                // grace period after an idle spell. Where v1 hierarchies
                // are used too, each needs its write and the first pays
                // that wait whichever it is, so the cgroup is made while
                // the launcher loads instead (`setup.prepare`).
                Some(limits) if contain::v2_only(contain::mounts()) => {
                    let (started, cgroup, applied) =
                        start_in_cgroup(&path, stdin.as_ref(), piped, namespaces, false, limits)
                            .map_err(|e| spawn_error(&starting, e))?;
                    (started, Some((cgroup, applied)))
                }
                _ => {
                    let started = start(&path, stdin.as_ref(), piped, namespaces, false)
                        .map_err(|e| spawn_error(&starting, e))?;
                    (started, None)
                }
            }
        }
    };
    let Started {
        pid,
        plan: plan_w,
        status: status_r,
        stdout,
        stderr,
    } = launched;
    let mut guard = ChildGuard {
        unreaped: Some(Pid::from_raw(pid)),
        cgroup: None,
    };
    // Fed until the call ends: dropped with this function, however it
    // returns.
    let _feeder = feed
        .map(stdio::feed_stdin)
        .transpose()
        .map_err(|e| spawn_error("feed stdin", e))?;
    // Unless the launcher started inside it, the cgroup is made while a
    // fresh launcher loads; a launcher waits for its plan before it does
    // anything, so it cannot start outside it. A pooled launcher, or one
    // started in its cgroup, is taken only for a call with a setup (its
    // limits).
    // The launcher checks its network namespace against the worker's.
    plan.worker_netns = sys::current_netns().ok();
    let mut call_end = None;
    let mut go = None;
    if let Some(setup) = setup {
        guard.cgroup = (setup.prepare)(&mut plan, placed)?;
        call_end = setup.call_end;
        go = setup.go;
    }
    // The worker's end is in the call's namespace before the plan is sent,
    // so it is there before the tool; it closes when this launch ends.
    // Network `none` has none, bound secret or not: nothing is reached.
    let wants_end = plan.in_own_network()
        && (plan.network == Network::Proxy
            || (plan.network == Network::Host && plan.has_bound_secrets()));
    let _call_proxy = if wants_end {
        let end = call_end.ok_or_else(|| {
            LaunchError::new(
                Stage::Spawn,
                "network_invalid",
                format!(
                    "network {} without a worker's end for the call",
                    plan.network
                ),
            )
        })?;
        let broker_only = super::broker_only::BrokerOnly {
            launcher: pid,
            hosts: match &plan.action {
                crate::launch::plan::Action::Exec(exec) => exec
                    .secrets
                    .iter()
                    .filter_map(|s| s.bound.as_ref().map(|b| b.hosts.clone()))
                    .collect(),
                _ => Vec::new(),
            },
        };
        Some(proxy::open(pid, end, broker_only).await?)
    } else {
        None
    };
    // The plan's environment can hold a turn's credential: its bytes are
    // wiped once written (or when the launch is abandoned).
    let plan_bytes = zeroize::Zeroizing::new(
        serde_json::to_vec(&plan)
            .map_err(|e| LaunchError::new(Stage::Spawn, "plan_unserializable", e.to_string()))?,
    );
    let framed = crate::launch::plan::frame(&plan_bytes);
    drop(plan_bytes);

    let pidfd = sys::pidfd_open(pid as u32).map_err(|e| spawn_error("pidfd_open", e))?;
    let pidfd = sys::watch_pidfd(pidfd).map_err(|e| spawn_error("watch pidfd", e))?;
    let receiver = |fd: std::os::fd::OwnedFd| pipe::Receiver::from_owned_fd(fd);
    // Relayed output goes to the worker's own streams by threads of its
    // own; captured output is read here.
    let (stdout, stderr, mut relayed) = if output == Output::Relay {
        let streams = [(stdout, Target::Stdout), (stderr, Target::Stderr)]
            .into_iter()
            .filter_map(|(fd, target)| Some((fd?, target)))
            .collect();
        let relayed = stdio::relay_output(streams).map_err(|e| spawn_error("relay output", e))?;
        (None, None, Some(relayed))
    } else {
        (stdout, stderr, None)
    };
    let mut out_rx = stdout
        .map(receiver)
        .transpose()
        .map_err(|e| spawn_error("stdout pipe", e))?;
    let mut err_rx = stderr
        .map(receiver)
        .transpose()
        .map_err(|e| spawn_error("stderr pipe", e))?;
    let mut status_rx = Some(receiver(status_r).map_err(|e| spawn_error("status pipe", e))?);
    // The plan goes into its fresh, empty pipe now, in one write, where it
    // fits (as a call's plan does): a write through the runtime would wait
    // for the reactor's next turn, and the begin record's fsync, polled
    // next on this task, would then run before the launcher had its plan.
    let sent_now = write_now(&plan_w, &framed);
    let framed = zeroize::Zeroizing::new(framed[sent_now..].to_vec());
    let plan_tx = pipe::Sender::from_owned_fd(plan_w).map_err(|e| spawn_error("plan pipe", e))?;
    // Polled until the rest of the plan and its go are written or the
    // launcher is gone; it holds the pipe until then.
    let plan_sent = send_plan(plan_tx, framed, go);
    tokio::pin!(plan_sent);
    let mut plan_pending = true;

    let cap = match output {
        Output::Capture(cap) => cap,
        Output::Relay | Output::Inherit => 0,
    };
    let mut captured_out = Captured::default();
    let mut captured_err = Captured::default();
    let mut status_bytes = Vec::new();
    let (mut buf_out, mut buf_err, mut buf_status) =
        (vec![0u8; 16384], vec![0u8; 16384], [0u8; 4096]);

    let deadline = tokio::time::Instant::from_std(started + timeout);
    let mut exit: Option<Option<ExitStatus>> = None;
    let mut timed_out = false;
    let mut drain_until: Option<tokio::time::Instant> = None;

    loop {
        if exit.is_some()
            && out_rx.is_none()
            && err_rx.is_none()
            && relayed.is_none()
            && status_rx.is_none()
        {
            break;
        }
        tokio::select! {
            () = &mut plan_sent, if plan_pending => plan_pending = false,
            r = read_some(&mut out_rx, &mut buf_out) => match r {
                Ok(n) if n > 0 => {
                    captured_out.take(&buf_out[..n], cap);
                    send_tap(&mut tap, Stream::Stdout, &buf_out[..n]);
                }
                _ => out_rx = None,
            },
            r = read_some(&mut err_rx, &mut buf_err) => match r {
                Ok(n) if n > 0 => {
                    captured_err.take(&buf_err[..n], cap);
                    send_tap(&mut tap, Stream::Stderr, &buf_err[..n]);
                }
                _ => err_rx = None,
            },
            _ = relay_ended(&mut relayed) => relayed = None,
            r = read_some(&mut status_rx, &mut buf_status) => match r {
                Ok(n) if n > 0 && status_bytes.len() + n <= MAX_STATUS_BYTES => status_bytes.extend_from_slice(&buf_status[..n]),
                _ => status_rx = None,
            },
            r = pidfd.readable(), if exit.is_none() => {
                let _ = r;
                // The leader has exited but is not reaped: the group id is
                // still ours, so everything left in it can be killed.
                guard.kill_group();
                exit = Some(guard.reap());
                plan_pending = false;
                drain_until = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
            }
            _ = tokio::time::sleep_until(deadline), if exit.is_none() && !timed_out => {
                timed_out = true;
                guard.kill_group();
                let _ = sys::pidfd_send_signal(pidfd.get_ref(), libc::SIGKILL);
            }
            _ = sleep_until_opt(drain_until) => break,
        }
    }
    if launcher.pooled {
        pool::replenish();
    }
    let (counters, cgroup_error) = match guard.cgroup.take().map(CallCgroup::finish) {
        Some(Ok(counters)) => (counters, None),
        Some(Err(e)) => (Counters::default(), Some(e)),
        None => (Counters::default(), None),
    };
    let duration = started.elapsed();
    Ok(Finished {
        status: exit.flatten(),
        timed_out,
        stdout: captured_out,
        stderr: captured_err,
        report: StatusReport::decode(&status_bytes),
        duration,
        cgroup_error,
        counters,
    })
}
