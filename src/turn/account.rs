//! Linux users exactly as the Cloud allotted them, made and removed through
//! the system's own tools (`groupadd`, `useradd`, `userdel`, `groupdel`),
//! serialized by a lock so that concurrent creators never race `useradd`'s
//! own lock (whose "try again", exit 10, is retried).
//!
//! Guarantees:
//! - [`ensure_user`] makes the user and its own group with exactly the given
//!   uid and gid and no other group; uid or gid 0, in the system range
//!   (< 1000) or -1 is refused; a name that exists with other numbers, a uid
//!   of another name, or a gid of another group is a clear error and nothing
//!   is changed; a user that exists with the same numbers is left as it is;
//! - the home is made in a root-owned base ([`DEFAULT_HOME_BASE`], never
//!   inside the worker's own folders) by `mkdirat`, owned by the user and
//!   mode 0700 through its fd, before any process of the user exists;
//! - [`remove_user`] has the launcher, as the user, kill every process of
//!   the uid in one `kill(-1)` (the kernel picks them: no pid is read, and
//!   none forked meanwhile survives) and empty the home with its no-follow
//!   tree removal, and only then lets root remove what is left through fds
//!   that never follow a link ([`RootDir::remove_tree`]).
#![forbid(unsafe_code)]

use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;

use nix::unistd::{Gid, Uid};

use super::run_as::FIRST_ALLOTTED_ID;
use crate::drop::spawn::{launch, Input, Output};
use crate::drop::Launcher;
use crate::fs::root_dir::{Component, RootDir};
use crate::launch::plan::{Action, FileOp, LaunchPlan};
use crate::launch::report::StatusReport;
use crate::user::{valid_login_name, TargetUser, UserSpec};

/// The root-only folder whose lock serializes user creation and removal
/// (never a file in the world-writable `/run/lock`, where a user could
/// plant a link or a FIFO for root to open).
pub const ACCOUNT_LOCK_DIR: &str = "/run/tono/accounts";
/// Where homes are made unless configured otherwise.
pub const DEFAULT_HOME_BASE: &str = "/home";
/// The worker's own folders, where no home may be.
pub const WORKER_ROOT: &str = "/var/lib/tono";
/// The group file.
pub const GROUP_PATH: &str = "/etc/group";

/// Why an account operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AccountError {
    /// The request itself is wrong, or conflicts with what exists.
    #[error("refusing user {name:?}: {reason}")]
    Refused {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A system tool failed.
    #[error("{tool} failed for {name:?}: {detail}")]
    Tool {
        /// Which tool.
        tool: &'static str,
        /// The name.
        name: String,
        /// Its stderr or error.
        detail: String,
    },
}

/// Held while an account is created or removed; unlocked on drop.
struct Lock(#[allow(dead_code)] nix::fcntl::Flock<std::os::fd::OwnedFd>);

/// Locks [`ACCOUNT_LOCK_DIR`], made root's alone (`0700`) if missing and
/// opened by fd from `/`, every ancestor checked ([`RootDir`]).
fn lock() -> Result<Lock, AccountError> {
    let tool = |detail: String| AccountError::Tool {
        tool: "flock",
        name: ACCOUNT_LOCK_DIR.into(),
        detail,
    };
    let dir =
        RootDir::open(Path::new(ACCOUNT_LOCK_DIR), Some(0o700)).map_err(|e| tool(e.to_string()))?;
    dir.lock().map(Lock).map_err(|e| tool(e.to_string()))
}

/// How often a tool is retried while another program holds the passwd lock.
const LOCKED_RETRIES: usize = 40;

fn run(tool: &'static str, name: &str, args: &[&str]) -> Result<(), AccountError> {
    for attempt in 0..LOCKED_RETRIES {
        let out = Command::new(tool)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .output()
            .map_err(|e| AccountError::Tool {
                tool,
                name: name.into(),
                detail: e.to_string(),
            })?;
        if out.status.success() {
            return Ok(());
        }
        // useradd/groupadd exit 10 when /etc/passwd or /etc/group is locked
        // by another program: try again.
        if out.status.code() == Some(10) && attempt + 1 < LOCKED_RETRIES {
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        }
        return Err(AccountError::Tool {
            tool,
            name: name.into(),
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    unreachable!("the loop returns")
}

/// A group entry: name and gid.
fn groups() -> Vec<(String, u32)> {
    std::fs::read_to_string(GROUP_PATH)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?.to_owned();
            let gid = f.nth(1)?.parse().ok()?;
            Some((name, gid))
        })
        .collect()
}

/// Makes user `name` with exactly `uid` and its own group `name` with
/// exactly `gid`, home `home_base/name` (0700, the user's), shell `/bin/sh`.
/// Idempotent when the user exists with the same numbers.
pub fn ensure_user(
    name: &str,
    uid: u32,
    gid: u32,
    home_base: &Path,
) -> Result<TargetUser, AccountError> {
    let refuse = |reason: String| AccountError::Refused {
        name: name.into(),
        reason,
    };
    valid_login_name(name).map_err(|r| refuse(r.into()))?;
    for (what, id) in [("uid", uid), ("gid", gid)] {
        if id < FIRST_ALLOTTED_ID || id == u32::MAX {
            return Err(refuse(format!(
                "{what} {id} is root, in the system range, or -1"
            )));
        }
    }
    if home_base.starts_with(WORKER_ROOT) {
        return Err(refuse(format!(
            "the home base {} is inside the worker's folders",
            home_base.display()
        )));
    }
    let home_name = Component::parse(name).map_err(|e| refuse(e.to_string()))?;
    let _lock = lock()?;
    match TargetUser::lookup(&UserSpec::Name(name.into())) {
        Ok(u) if u.uid == uid && u.gid == gid => return Ok(u),
        Ok(u) => {
            return Err(refuse(format!(
                "it exists with uid {} gid {}, not {uid} {gid}",
                u.uid, u.gid
            )))
        }
        Err(_) => {}
    }
    if let Ok(other) = TargetUser::lookup(&UserSpec::Uid(uid)) {
        return Err(refuse(format!("uid {uid} belongs to {:?}", other.name)));
    }
    let groups = groups();
    let group_exists = match groups.iter().find(|(n, _)| n == name) {
        Some((_, g)) if *g == gid => true,
        Some((_, g)) => return Err(refuse(format!("group {name} exists with gid {g}"))),
        None => false,
    };
    if let Some((other, _)) = groups.iter().find(|(n, g)| *g == gid && n != name) {
        return Err(refuse(format!("gid {gid} belongs to group {other:?}")));
    }
    let base = RootDir::open(home_base, None).map_err(|e| refuse(e.to_string()))?;
    let (uid_text, gid_text) = (uid.to_string(), gid.to_string());
    let home = base.entry_path(&home_name);
    let home_text = home.display().to_string();
    if !group_exists {
        run("groupadd", name, &["-g", &gid_text, name])?;
    }
    let undo_group = || {
        if !group_exists {
            let _ = run("groupdel", name, &[name]);
        }
    };
    // No -m: useradd would copy /etc/skel into the home as root. No -G: the
    // user has its own group and no other.
    if let Err(e) = run(
        "useradd",
        name,
        &[
            "-u", &uid_text, "-g", &gid_text, "-M", "-N", "-d", &home_text, "-s", "/bin/sh", name,
        ],
    ) {
        undo_group();
        return Err(e);
    }
    if let Err(e) = make_home(&base, &home_name, uid, gid) {
        let _ = run("userdel", name, &[name]);
        undo_group();
        return Err(AccountError::Tool {
            tool: "mkdir",
            name: name.into(),
            detail: e.to_string(),
        });
    }
    TargetUser::lookup(&UserSpec::Name(name.into())).map_err(|e| refuse(e.to_string()))
}

/// The home, made by root in its base and handed over by fd.
fn make_home(base: &RootDir, name: &Component, uid: u32, gid: u32) -> Result<(), String> {
    let fd = base.create_dir(name, 0o700).map_err(|e| e.to_string())?;
    nix::unistd::fchown(
        fd.as_raw_fd(),
        Some(Uid::from_raw(uid)),
        Some(Gid::from_raw(gid)),
    )
    .map_err(|e| format!("fchown {name}: {e}"))
}

/// Empties `home` as the user (`setpriv`, no groups): root never deletes by
/// a path the user controls.
/// Runs `action` as `user` through the launcher, from any thread (a
/// runtime of its own on a thread of its own, so a caller inside another
/// runtime can use it too).
fn launch_as_user(
    launcher: &Launcher,
    user: &TargetUser,
    action: Action,
) -> Result<StatusReport, String> {
    let plan = LaunchPlan::for_user(user, action);
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime
                    .block_on(launch(
                        launcher,
                        plan,
                        Input::Null,
                        Output::Capture(64 * 1024),
                        REMOVE_TIMEOUT,
                    ))
                    .map(|done| done.report)
                    .map_err(|e| e.to_string())
            })
            .join()
            .map_err(|_| "the launch thread panicked".to_owned())?
    })
}

/// How long each step of a removal through the launcher may take.
const REMOVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes user `name`, its group and its home: processes killed and the
/// home emptied as the user, through `launcher`, then what is left removed
/// by root through fds.
pub fn remove_user(name: &str, launcher: &Launcher) -> Result<(), AccountError> {
    let refuse = |reason: String| AccountError::Refused {
        name: name.into(),
        reason,
    };
    valid_login_name(name).map_err(|r| refuse(r.into()))?;
    let _lock = lock()?;
    let user =
        TargetUser::lookup(&UserSpec::Name(name.into())).map_err(|e| refuse(e.to_string()))?;
    if user.uid < FIRST_ALLOTTED_ID || user.gid < FIRST_ALLOTTED_ID {
        return Err(refuse(format!("uid {} is a system user", user.uid)));
    }
    // Nothing of the user may outlive it: a process left with this uid
    // would belong to whoever is allotted the uid next.
    match launch_as_user(launcher, &user, Action::Sweep) {
        Ok(StatusReport::Done(_)) => {}
        Ok(other) => {
            return Err(refuse(format!(
                "the sweep of its processes failed: {other:?}"
            )))
        }
        Err(e) => {
            return Err(refuse(format!(
                "the sweep of its processes did not run: {e}"
            )))
        }
    }
    // Best effort, as the user (a missing home is the launcher's to find,
    // not root's to look at by path): what it cannot remove, root removes
    // below through fds.
    let clear = FileOp::Clear {
        path: user.home.clone(),
    };
    let _ = launch_as_user(launcher, &user, Action::File { op: clear });
    run("userdel", name, &["-f", name])?;
    let _ = run("groupdel", name, &[name]);
    // The emptied home: its parent must be root's, and the entry is taken
    // by name in it, never followed.
    if let (Some(base), Some(entry)) = (user.home.parent(), user.home.file_name()) {
        let entry =
            Component::parse(&entry.to_string_lossy()).map_err(|e| refuse(e.to_string()))?;
        let base = RootDir::open(base, None).map_err(|e| refuse(e.to_string()))?;
        base.remove_tree(&entry)
            .map_err(|e| refuse(e.to_string()))?;
    }
    Ok(())
}
