//! The launcher: the one way a program for a user starts.
//!
//! `tono-launch` is started by the worker as root with an empty environment,
//! its plan on fd 3 and its status pipe on fd 4; for a call of the private
//! view, as the init of a PID namespace of its own. In this order it:
//!
//! 0. before the plan, if it is such an init: enters a mount namespace of
//!    its own with a fresh `/proc` ([`super::view::enter_at_start`]); and,
//!    started ahead of need (pooled) with no plan there yet, seals and
//!    unseals a throwaway value so the call's first unseal finds its set-up
//!    done;
//! 1. as root, with syscalls only: reads the plan (fd 3 stays open, CLOEXEC,
//!    for the go that follows it, [`super::plan`]), closes every fd above
//!    the status pipe (`close_range`), marks the status pipe
//!    CLOEXEC, checks the plan against the passwd file and its view against
//!    how this launcher was started, covers the key store (private view),
//!    `setsid()`s, sets `RLIMIT_CORE` 0 and the plan's
//!    `RLIMIT_NOFILE`/`RLIMIT_NPROC`, drops the capability bounding set,
//!    then `setgroups([])`, `setresgid`, `setresuid`,
//!    `PR_SET_NO_NEW_PRIVS`, and `PR_SET_PDEATHSIG(SIGKILL)` (set after the
//!    credential change, which clears it), and checks the worker still
//!    listens;
//! 2. verifies the drop held ([`super::drop_held::check_drop_held`]); any
//!    failure is reported on the status pipe and nothing runs;
//! 3. as the user, with its own keyring and the syscall filter installed:
//!    waits for the worker's go (the call's begin record is durable; the
//!    pipe's end instead refuses the call, `begin_not_durable`), then opens
//!    the identity, unseals only the requested secrets
//!    into the program's fresh environment, enters the working folder, and
//!    `execve`s the program (shared view) or starts it behind the masking
//!    relay and ends when it ends (private view), or performs a built-in
//!    operation.
//!
//! Nothing here runs between fork and exec of the worker: this is its own
//! single-threaded program, so it may allocate freely.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::resource::{setrlimit, Resource};
use nix::unistd::{Gid, Uid};
use zeroize::{Zeroize, Zeroizing};

use super::builtin;
use super::credentials::{self, CREDENTIALS_DIR, CREDENTIALS_VARIABLE};
use super::drop_held::check_drop_held;
use super::plan::{Action, ExecPlan, LaunchPlan, GO, MAX_PLAN_BYTES};
use super::relay;
use super::report::{Ended, LaunchError, Stage, StatusMessage, EXEC_MARK};
use super::syscall_filter::SyscallFilter;
use super::view;
use crate::broker::substitute::BoundSecret;
use crate::keys::{KeyStore, SecretName};
use crate::mask::lazy::LazyMasker;
use crate::mask::{MaskError, Masker};
use crate::sys;
use crate::user::{TargetUser, UserSpec};

/// Exit status of the launcher when it refused or failed (the status pipe
/// says why).
pub const EXIT_REFUSED: i32 = 125;
/// Exit status when `execve` failed.
pub const EXIT_EXEC_FAILED: i32 = 127;
/// Exit status when started without a status pipe (by hand).
pub const EXIT_USAGE: i32 = 2;

/// The PATH used to find a program when the plan's environment has none.
pub const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The launcher's entry point; never returns.
pub fn main() -> ! {
    // A panic's message may hold what the panicking code was looking at —
    // a request line with a value in it — and the launcher's stderr is
    // the call's, unmasked: say where, never what.
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "tono-launch: internal error at {at} (its message is not shown: it may hold a secret)"
        );
    }));
    let Some(mut status) = sys::take_inherited_fd(sys::STATUS_FD) else {
        eprintln!(
            "tono-launch: there is no status pipe on fd 4; this program is started by the \
             tono-seal worker, not by hand"
        );
        std::process::exit(EXIT_USAGE);
    };
    let code = match launch(&mut status) {
        Ok(Finish::Done(result)) => {
            send(&mut status, &StatusMessage::Ok(result));
            0
        }
        Ok(Finish::Ended(end)) => {
            let code = match (end.exit_code, end.signal) {
                (Some(code), _) => code,
                (None, Some(signal)) => 128 + signal,
                (None, None) => EXIT_REFUSED,
            };
            send(&mut status, &StatusMessage::Ended(end));
            code
        }
        Err(error) => {
            send(&mut status, &StatusMessage::Error(error));
            EXIT_REFUSED
        }
    };
    std::process::exit(code)
}

fn send(status: &mut File, message: &StatusMessage) {
    if let Ok(bytes) = serde_json::to_vec(message) {
        // Nothing else can be done if the worker is gone.
        let _ = status.write_all(&bytes);
    }
}

fn plan_error(code: &str, message: String) -> LaunchError {
    LaunchError::new(Stage::Plan, code, message)
}

/// Reads the framed plan from fd 3 ([`super::plan`]); the pipe is returned,
/// CLOEXEC, for [`wait_for_go`].
fn read_plan() -> Result<(LaunchPlan, File), LaunchError> {
    use std::io::Read;
    let mut fd = sys::take_inherited_fd(sys::PLAN_FD)
        .ok_or_else(|| plan_error("plan_missing", "there is no plan on fd 3".into()))?;
    let unreadable =
        |e: std::io::Error| plan_error("plan_unreadable", format!("reading the plan: {e}"));
    let mut len = [0u8; 4];
    fd.read_exact(&mut len).map_err(unreadable)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_PLAN_BYTES {
        return Err(plan_error(
            "plan_too_large",
            format!("the plan is over {MAX_PLAN_BYTES} bytes"),
        ));
    }
    // A plan names secrets but holds no value: a plain buffer will do.
    let mut bytes = vec![0u8; len];
    fd.read_exact(&mut bytes).map_err(unreadable)?;
    nix::fcntl::fcntl(
        sys::PLAN_FD,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(drop_error("fcntl(FD_CLOEXEC)"))?;
    let plan = serde_json::from_slice(&bytes)
        .map_err(|e| plan_error("plan_invalid", format!("the plan is not valid: {e}")))?;
    Ok((plan, fd))
}

/// Waits for [`GO`] after the plan: the worker's word that the call's begin
/// record is durable (or that it keeps none). Anything else — the pipe's
/// end, another byte — refuses the call before a key is opened or anything
/// of the user's runs. The pipe is closed either way.
fn wait_for_go(mut plan_pipe: File) -> Result<(), LaunchError> {
    use std::io::Read;
    let mut byte = [0u8; 1];
    let read = loop {
        match plan_pipe.read(&mut byte) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => break other,
        }
    };
    match read {
        Ok(1) if byte[0] == GO => Ok(()),
        Ok(_) => Err(plan_error(
            "begin_not_durable",
            "the worker did not confirm the call's begin record; nothing ran".into(),
        )),
        Err(e) => Err(plan_error(
            "begin_not_durable",
            format!("waiting for the worker's go: {e}; nothing ran"),
        )),
    }
}

/// Checks the plan against the passwd file: the target must exist, not be
/// root, and have exactly the plan's uid, gid and home.
fn check_target(plan: &LaunchPlan) -> Result<(), LaunchError> {
    if plan.uid == 0 || plan.gid == 0 {
        return Err(plan_error(
            "target_root",
            "uid 0 and gid 0 are never targets".into(),
        ));
    }
    let spec = UserSpec::parse(&plan.user).map_err(|e| plan_error(e.code(), e.to_string()))?;
    let entry = TargetUser::lookup(&spec).map_err(|e| plan_error(e.code(), e.to_string()))?;
    if entry.uid != plan.uid || entry.gid != plan.gid || entry.home != plan.home {
        return Err(plan_error(
            "target_mismatch",
            format!(
                "the plan says uid {} gid {} home {}, the passwd file says uid {} gid {} home {}",
                plan.uid,
                plan.gid,
                plan.home.display(),
                entry.uid,
                entry.gid,
                entry.home.display()
            ),
        ));
    }
    Ok(())
}

/// Moves this process into the call's cgroups, as root, before the drop.
/// Only `cgroup.procs` files of the worker's own `tono/call-*` cgroups.
fn enter_cgroups(plan: &LaunchPlan) -> Result<(), LaunchError> {
    for procs in &plan.cgroups {
        let text = procs.to_string_lossy();
        let ours = text.starts_with("/sys/fs/cgroup/")
            && text.ends_with("/cgroup.procs")
            && text.contains("/tono/call-")
            && !text.contains("/../");
        if !ours {
            return Err(plan_error(
                "cgroup_invalid",
                format!("{text} is not a tono call cgroup"),
            ));
        }
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(procs)
            .and_then(|mut f| f.write_all(b"0"))
            .map_err(|e| LaunchError {
                stage: Stage::Drop,
                code: "cgroup_enter_failed".into(),
                message: format!("entering {text}: {e}"),
                errno: e.raw_os_error(),
            })?;
    }
    Ok(())
}

fn drop_error(what: &str) -> impl FnOnce(Errno) -> LaunchError + '_ {
    move |e| LaunchError::sys(Stage::Drop, "drop_failed", what, e)
}

/// Steps 1 and 2: as root, syscalls only, then the proof.
fn drop_privileges(plan: &LaunchPlan) -> Result<(), LaunchError> {
    if !nix::unistd::geteuid().is_root() {
        return Err(LaunchError::new(
            Stage::Drop,
            "launcher_not_root",
            "tono-launch must be started as root",
        ));
    }
    let parent = nix::unistd::getppid();
    nix::unistd::setsid().map_err(drop_error("setsid"))?;
    setrlimit(Resource::RLIMIT_CORE, 0, 0).map_err(drop_error("setrlimit(RLIMIT_CORE)"))?;
    setrlimit(
        Resource::RLIMIT_NOFILE,
        plan.limits.nofile,
        plan.limits.nofile,
    )
    .map_err(drop_error("setrlimit(RLIMIT_NOFILE)"))?;
    setrlimit(Resource::RLIMIT_NPROC, plan.limits.nproc, plan.limits.nproc)
        .map_err(drop_error("setrlimit(RLIMIT_NPROC)"))?;
    if let Some(bytes) = plan.limits.address_space {
        setrlimit(Resource::RLIMIT_AS, bytes, bytes).map_err(drop_error("setrlimit(RLIMIT_AS)"))?;
    }
    let (uid, gid) = (Uid::from_raw(plan.uid), Gid::from_raw(plan.gid));
    // While still root (CAP_SETPCAP): no capability can come back later.
    sys::drop_capability_bounding_set().map_err(drop_error("prctl(PR_CAPBSET_DROP)"))?;
    nix::unistd::setgroups(&[]).map_err(drop_error("setgroups([])"))?;
    nix::unistd::setresgid(gid, gid, gid).map_err(drop_error("setresgid"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(drop_error("setresuid"))?;
    nix::sys::prctl::set_no_new_privs().map_err(drop_error("prctl(PR_SET_NO_NEW_PRIVS)"))?;
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(drop_error("prctl(PR_SET_PDEATHSIG)"))?;
    // As a PID namespace's init, the parent is outside it (getppid() is 0
    // throughout): the worker's end of the status pipe tells instead.
    if nix::unistd::getppid() != parent || sys::reader_gone(sys::STATUS_FD) {
        return Err(LaunchError::new(
            Stage::Drop,
            "worker_gone",
            "the worker exited during the launch",
        ));
    }
    check_drop_held(plan.uid, plan.gid)
}

/// How a launch that did not `execve` in place finished.
enum Finish {
    /// A built-in operation's result.
    Done(serde_json::Value),
    /// A program run behind the relay ended.
    Ended(Ended),
}

fn launch(status: &mut File) -> Result<Finish, LaunchError> {
    // Before the plan: a pooled launcher has this done ahead of its call.
    let own_namespaces = view::enter_at_start();
    let pooled = std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg.as_encoded_bytes() == sys::AHEAD_OF_NEED.to_bytes());
    if pooled && sys::nothing_to_read(sys::PLAN_FD) {
        // Waiting for a plan anyway: the first unseal and masking of the
        // call should not pay for their set-up. (A launcher started for its
        // call would only delay it: its plan is on the way.)
        crate::keys::seal::warm_up();
        let _ = Masker::new(&[("warm-up", b"tono-seal warm-up value")]);
    }
    let (plan, plan_pipe) = read_plan()?;
    let own_namespaces = own_namespaces?;
    sys::close_fds_from(sys::STATUS_FD as u32 + 1).map_err(drop_error("close_range"))?;
    nix::fcntl::fcntl(
        sys::STATUS_FD,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(drop_error("fcntl(FD_CLOEXEC)"))?;
    check_target(&plan)?;
    enter_cgroups(&plan)?;
    // The call's own view, made as root before the drop (see `view`).
    if plan.in_own_namespaces() != own_namespaces {
        return Err(LaunchError::new(
            Stage::View,
            "view_mismatch",
            if own_namespaces {
                "this launcher was started in namespaces of its own, for a private call only"
            } else {
                "a private call needs a launcher started in namespaces of its own"
            },
        ));
    }
    super::network::enter(&plan)?;
    // Compiled as root, installed after the drop: an operator's unknown
    // syscall name refuses the call before anything is mounted.
    let filter = SyscallFilter::build(&plan.refuse_syscalls)?;
    let store = if own_namespaces {
        // The real store, for the unseal; then the home the tool sees,
        // with the store covered in it.
        let store = view::open_store(&plan.home, plan.uid)?;
        super::home::enter(&plan.home, plan.uid, plan.gid, &plan.home_view)?;
        store
    } else {
        None
    };
    // Secrets as files: a folder of the call's own, made as root, filled
    // as the user (see `credentials`).
    let credentials_folder = match (plan.has_file_secrets(), own_namespaces) {
        (false, _) => None,
        (true, true) => Some(credentials::mount(plan.uid, plan.gid)?),
        (true, false) => {
            return Err(LaunchError::new(
                Stage::View,
                "file_needs_private_view",
                "a secret given as a file needs the private view: the shared view has no \
                 folder of the call's own to hold it",
            ))
        }
    };
    // A bound secret's broker: a folder of the call's own for its CA
    // bundle, made as root, filled as the user (see `broker`).
    let broker_folder = match (plan.has_bound_secrets(), own_namespaces) {
        (false, _) => None,
        (true, true) => Some(super::broker::mount(plan.uid, plan.gid)?),
        (true, false) => {
            return Err(LaunchError::new(
                Stage::View,
                "binding_needs_private_view",
                "a secret bound to hosts needs the private view: its broker listens in the \
                 call's own network namespace and its CA bundle is in the call's own folder",
            ))
        }
    };
    drop_privileges(&plan)?;
    // ── from here on this process is the user ──
    // A keyring of the call's own: the one inherited from the worker (a
    // root login's, a service's) is possessed no longer.
    sys::join_anonymous_session_keyring().map_err(|e| {
        let mut refused = LaunchError::sys(
            Stage::Drop,
            "keyring_refused",
            "join a new session keyring",
            e,
        );
        // A container runtime's default seccomp profile (Docker's) refuses
        // every keyring call with EPERM: name the cause and the fix.
        if e == nix::errno::Errno::EPERM && crate::host::Privileges::read().seccomp_mode == 2 {
            refused.message.push_str(
                " (by this process's seccomp filter: a container runtime's default profile, \
                 as Docker's, refuses the keyring calls; run with \
                 --security-opt seccomp=packaging/seccomp.json, see docs/containers.md)",
            );
        }
        refused
    })?;
    // Before anything user-chosen runs, and inherited by all of it.
    filter.install()?;
    // All of the above overlapped the worker's writing of the call's begin
    // record; nothing below (a key opened, a program run) comes before it
    // is durable.
    wait_for_go(plan_pipe)?;
    match &plan.action {
        Action::Exec(exec) => {
            let folders = Folders {
                credentials: credentials_folder,
                broker: broker_folder,
            };
            exec_program(&plan, exec, status, store, folders).map(Finish::Ended)
        }
        Action::Keys { op } => {
            enter_folder(&plan.home, &plan.home)?;
            builtin::keys(&KeyStore::in_home(&plan.home), op).map(Finish::Done)
        }
        Action::File { op } => {
            drop(store);
            enter_folder(&plan.home, &plan.home)?;
            builtin::file(op).map(Finish::Done)
        }
        Action::Sweep => super::sweep::sweep().map(Finish::Done),
        Action::Probe { probes } => Ok(Finish::Done(
            serde_json::to_value(super::access::probe_all(probes))
                .unwrap_or(serde_json::Value::Null),
        )),
    }
}

fn enter_folder(folder: &Path, home: &Path) -> Result<(), LaunchError> {
    let exec_error = |code: &str, message: String| LaunchError::new(Stage::Exec, code, message);
    if !folder.is_absolute() {
        return Err(exec_error(
            "cwd_invalid",
            format!("the working folder {} is not absolute", folder.display()),
        ));
    }
    if folder.starts_with("/proc") {
        return Err(exec_error(
            "cwd_invalid",
            "a working folder under /proc is refused".into(),
        ));
    }
    nix::unistd::chdir(folder).map_err(|e| {
        let code = if folder == home {
            "home_missing"
        } else {
            "cwd_unusable"
        };
        LaunchError::sys(Stage::Exec, code, &format!("chdir {}", folder.display()), e)
    })
}

/// The folders of the call's own a program's launch filled as the user.
struct Folders {
    /// Secrets as files ([`credentials`]).
    credentials: Option<std::os::fd::OwnedFd>,
    /// The broker's CA bundle ([`super::broker`]).
    broker: Option<std::os::fd::OwnedFd>,
}

/// Step 3 for a program: unseal, build the environment, then either
/// `execve` in place (the shared view: returns only on failure) or start it
/// behind the masking relay (the private view: returns how it ended).
fn exec_program(
    plan: &LaunchPlan,
    exec: &ExecPlan,
    status: &mut File,
    store: Option<std::os::fd::OwnedFd>,
    folders: Folders,
) -> Result<Ended, LaunchError> {
    let Folders {
        credentials: credentials_folder,
        broker: broker_folder,
    } = folders;
    let bad = |code: &str, message: String| LaunchError::new(Stage::Plan, code, message);
    if exec.argv.is_empty() {
        return Err(bad("argv_empty", "the program's argv is empty".into()));
    }
    let argv: Vec<CString> = exec
        .argv
        .iter()
        .map(|a| {
            CString::new(a.as_bytes())
                .map_err(|_| bad("argv_nul", "an argument holds a NUL byte".into()))
        })
        .collect::<Result<_, _>>()?;
    // Each variable once, checked before anything is unsealed: with a name
    // twice, programs differ on which copy they read.
    let mut names = BTreeSet::new();
    let plain = exec
        .env
        .iter()
        .map(|(name, _)| (name.as_str(), "a plain variable"));
    let secret = exec
        .secrets
        .iter()
        .filter_map(|s| s.env.as_deref().map(|env| (env, "a secret's")));
    let folder = credentials_folder
        .is_some()
        .then_some((CREDENTIALS_VARIABLE, "the credentials folder's"));
    for (name, what) in plain.chain(secret).chain(folder) {
        crate::env::valid_env_name(name).map_err(|m| bad("env_invalid", m))?;
        if !names.insert(name) {
            return Err(bad(
                "env_conflict",
                format!("{name} is set twice (the second time as {what})"),
            ));
        }
    }
    // Each file once, and only where a folder of the call's own holds it.
    let mut files = BTreeSet::new();
    for file in exec.secrets.iter().filter_map(|s| s.file.as_deref()) {
        credentials::valid_file_name(file).map_err(|m| bad("file_name_invalid", m))?;
        if !files.insert(file) {
            return Err(bad("file_conflict", format!("{file} is given two secrets")));
        }
    }
    if !files.is_empty() && credentials_folder.is_none() {
        return Err(bad(
            "file_needs_private_view",
            "a secret given as a file needs the call's own credentials folder".into(),
        ));
    }
    let mut envp: Vec<Zeroizing<CString>> = Vec::with_capacity(exec.env.len() + exec.secrets.len());
    for (name, value) in exec.env.iter() {
        let entry = CString::new(format!("{name}={value}")).map_err(|_| {
            bad(
                "env_invalid",
                format!("the value of {name} holds a NUL byte"),
            )
        })?;
        envp.push(Zeroizing::new(entry));
    }
    // A private call's output goes through the masking relay.
    let relayed = plan.in_own_namespaces();
    // The values, for the masker (wiped on drop).
    let mut unsealed: Vec<(String, Zeroizing<Vec<u8>>)> = Vec::new();
    // The bound ones, for the broker: each value with its placeholder.
    let mut bound: Vec<BoundSecret> = Vec::new();
    if !exec.secrets.is_empty() {
        let store = match &store {
            Some(fd) => KeyStore::at(view::fd_path(fd)),
            None => KeyStore::in_home(&plan.home),
        };
        let unseal_error =
            |e: crate::keys::KeysError| LaunchError::new(Stage::Unseal, e.code(), e.to_string());
        let ids = store.identities().map_err(unseal_error)?;
        for binding in &exec.secrets {
            let name = SecretName::parse(&binding.name).map_err(unseal_error)?;
            let plain = store.unseal_with(&name, &ids).map_err(unseal_error)?;
            let unsealed_value = secrecy::ExposeSecret::expose_secret(&plain);
            // A bound secret's program gets its placeholder; the value
            // stays with the broker.
            let placeholder = match &binding.bound {
                Some(hosts) => {
                    let placeholder = super::broker::placeholder(&binding.name, unsealed_value)?;
                    bound.push(BoundSecret {
                        name: binding.name.clone(),
                        placeholder: placeholder.clone(),
                        value: Zeroizing::new(unsealed_value.to_vec()),
                        binding: hosts.clone(),
                    });
                    Some(placeholder)
                }
                None => None,
            };
            let value: &[u8] = placeholder
                .as_ref()
                .map_or(unsealed_value, |p| p.as_bytes());
            match (&binding.file, &binding.env, &credentials_folder) {
                (Some(file), env, Some(folder)) => {
                    credentials::write(folder, file, value)?;
                    if let Some(env) = env {
                        envp.push(plain_entry(env, &format!("{CREDENTIALS_DIR}/{file}"))?);
                    }
                }
                (None, Some(env), _) => envp.push(secret_entry(env, value, &name)?),
                _ => {
                    return Err(bad(
                        "plan_invalid",
                        format!("secret {name} goes neither to a variable nor to a file"),
                    ))
                }
            }
            if relayed {
                unsealed.push((
                    binding.name.clone(),
                    Zeroizing::new(unsealed_value.to_vec()),
                ));
            }
        }
        drop(ids);
    }
    // The store's descriptor is not the program's.
    drop(store);
    if let Some(folder) = credentials_folder {
        credentials::close(folder)?;
        envp.push(plain_entry(CREDENTIALS_VARIABLE, CREDENTIALS_DIR)?);
    }
    // The broker, before the program: its address is taken and its bundle
    // written before anything of the user's runs.
    let broker = match (bound.is_empty(), broker_folder) {
        (true, _) => None,
        (false, Some(folder)) => Some(super::broker::start(
            folder,
            bound,
            exec.upstream_ca.as_deref(),
        )?),
        (false, None) => {
            return Err(bad(
                "binding_needs_private_view",
                "a secret bound to hosts needs the call's own broker folder".into(),
            ))
        }
    };
    // Built at the tool's first byte of output (`mask::lazy`); a value too
    // short to mask is refused here, before the tool starts.
    let pairs: Vec<(&str, &[u8])> = unsealed
        .iter()
        .map(|(name, value)| (name.as_str(), &value[..]))
        .collect();
    let masker = if relayed {
        Some(LazyMasker::new(&pairs).map_err(|e| {
            let code = match e {
                MaskError::TooShort { .. } => "secret_too_short",
                MaskError::Build(_) => "mask_failed",
            };
            LaunchError::new(Stage::Unseal, code, e.to_string())
        })?)
    } else {
        None
    };
    let cwd = exec.cwd.clone().unwrap_or_else(|| plan.home.clone());
    enter_folder(&cwd, &plan.home)?;
    let program = find_program(&exec.argv[0], &exec.env)?;
    let argv_refs: Vec<&CStr> = argv.iter().map(CString::as_c_str).collect();
    let env_refs: Vec<&CStr> = envp.iter().map(|e| e.as_c_str()).collect();
    if let Some(masker) = masker {
        let ended = relay::run(&program, &argv_refs, &env_refs, masker, status);
        drop(env_refs);
        drop(envp); // wipes every unsealed value
        return ended.map(|mut ended| {
            ended.broker = broker
                .map(|b| {
                    // The tool has ended: its connections close, and each
                    // records its last request before it does.
                    b.settle();
                    b.uses()
                })
                .unwrap_or_default();
            ended
        });
    }
    if broker.is_some() {
        return Err(bad(
            "binding_needs_private_view",
            "a secret bound to hosts needs the call's relay, which only the private view has"
                .into(),
        ));
    }
    let _ = status.write_all(&[EXEC_MARK]);
    sys::default_all_signals().map_err(|e| {
        LaunchError::sys(Stage::Exec, "signal_failed", "reset signal dispositions", e)
    })?;
    // No signal blocked in the program, whoever started this launcher (the
    // worker's posix_spawn already clears the mask; this does not rely on it).
    nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    )
    .map_err(|e| LaunchError::sys(Stage::Exec, "signal_failed", "clear the signal mask", e))?;
    let errno = match nix::unistd::execve(&program, &argv_refs, &env_refs) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    drop(env_refs);
    drop(envp); // wipes every unsealed value
    Err(LaunchError::sys(
        Stage::Exec,
        "exec_failed",
        &format!("execve {}", exec.argv[0]),
        errno,
    ))
}

/// `NAME=value\0` for a value that is not a secret (a path).
fn plain_entry(env: &str, value: &str) -> Result<Zeroizing<CString>, LaunchError> {
    CString::new(format!("{env}={value}"))
        .map(Zeroizing::new)
        .map_err(|_| {
            LaunchError::new(
                Stage::Plan,
                "env_invalid",
                format!("{env} holds a NUL byte"),
            )
        })
}

/// The most bytes one `NAME=value` string may have, its NUL included, for
/// `execve` to take it: Linux's MAX_ARG_STRLEN (32 pages of 4 KiB).
const MAX_ENV_STRING_BYTES: usize = 32 * 4096;

/// `NAME=value\0` for a secret, built in one allocation that is wiped.
fn secret_entry(
    env: &str,
    value: &[u8],
    name: &SecretName,
) -> Result<Zeroizing<CString>, LaunchError> {
    if value.contains(&0) {
        return Err(LaunchError::new(
            Stage::Unseal,
            "secret_has_nul",
            format!("secret {name} holds a NUL byte and cannot be put in an environment variable"),
        ));
    }
    // Linux refuses an `execve` with any one string over MAX_ARG_STRLEN
    // (E2BIG): say which secret, before the program is looked for.
    let len = env.len() + 1 + value.len() + 1;
    if len > MAX_ENV_STRING_BYTES {
        return Err(LaunchError::new(
            Stage::Unseal,
            "secret_too_large_for_env",
            format!(
                "secret {name} has {} bytes; an environment variable holds at most {} (Linux's MAX_ARG_STRLEN, for {env}=value)",
                value.len(),
                MAX_ENV_STRING_BYTES - env.len() - 2
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(len);
    bytes.extend_from_slice(env.as_bytes());
    bytes.push(b'=');
    bytes.extend_from_slice(value);
    bytes.push(0);
    match CString::from_vec_with_nul(bytes) {
        Ok(c) => Ok(Zeroizing::new(c)),
        Err(e) => {
            e.into_bytes().zeroize();
            Err(LaunchError::new(
                Stage::Unseal,
                "secret_has_nul",
                format!("secret {name} holds a NUL byte"),
            ))
        }
    }
}

/// Finds `argv0` like `execvp`, but in the plan's own `PATH`, as the user.
fn find_program(argv0: &str, env: &[(String, String)]) -> Result<CString, LaunchError> {
    let not_found = |m: String| LaunchError::new(Stage::Exec, "program_not_found", m);
    let to_c = |p: &Path| {
        CString::new(p.as_os_str().as_encoded_bytes())
            .map_err(|_| not_found("the program path holds a NUL byte".into()))
    };
    if argv0.contains('/') {
        return to_c(Path::new(argv0));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or(FALLBACK_PATH, |(_, v)| v.as_str());
    for dir in path.split(':').filter(|d| d.starts_with('/')) {
        let candidate = PathBuf::from(dir).join(argv0);
        if nix::unistd::access(&candidate, nix::unistd::AccessFlags::X_OK).is_ok()
            && candidate.is_file()
        {
            return to_c(&candidate);
        }
    }
    Err(not_found(format!(
        "{argv0:?} is not an executable in PATH {path}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_entry_over_what_execve_takes_is_refused_by_name() {
        let name = SecretName::parse("big").unwrap();
        let fits = vec![b'x'; MAX_ENV_STRING_BYTES - "BIG=".len() - 1];
        let entry = secret_entry("BIG", &fits, &name).unwrap();
        assert_eq!(entry.as_bytes_with_nul().len(), MAX_ENV_STRING_BYTES);
        let over = vec![b'x'; fits.len() + 1];
        let e = secret_entry("BIG", &over, &name).unwrap_err();
        assert_eq!(e.code, "secret_too_large_for_env");
        assert!(
            e.message.contains("secret big has 131068 bytes"),
            "{}",
            e.message
        );
        let e = secret_entry("BIG", b"a\0b", &name).unwrap_err();
        assert_eq!(e.code, "secret_has_nul");
    }
}
