//! Creating and removing Linux users with exactly the numbers given, through
//! the system's own tools (`groupadd`, `useradd`, `userdel`), serialized by
//! a lock so that concurrent creators never race `useradd`'s own lock.
//!
//! Guarantees: uid/gid 0 and the system range (below 1000) are refused; the
//! home is created by `useradd` with mode 0700 before any process of the
//! user exists; a name that exists with other numbers is an error and
//! nothing is changed.
#![forbid(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::process::Command;

use crate::drop::user::{valid_login_name, TargetUser, UserSpec};

/// The lock file that serializes user creation and removal.
pub const ACCOUNT_LOCK: &str = "/run/lock/tono-accounts.lock";

/// Why an account operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AccountError {
    /// The request itself is wrong.
    #[error("refusing to create {name:?}: {reason}")]
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
struct Lock(#[allow(dead_code)] nix::fcntl::Flock<File>);

fn lock() -> Result<Lock, AccountError> {
    let tool = |detail: String| AccountError::Tool {
        tool: "flock",
        name: ACCOUNT_LOCK.into(),
        detail,
    };
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(ACCOUNT_LOCK)
        .map_err(|e| tool(e.to_string()))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map(Lock)
        .map_err(|(_, e)| tool(e.to_string()))
}

fn run(tool: &'static str, name: &str, args: &[&str]) -> Result<(), AccountError> {
    // useradd exits 10 when /etc/passwd is locked by someone else: retry.
    for attempt in 0..20 {
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
        if out.status.code() == Some(10) && attempt < 19 {
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

/// Creates user `name` with uid `id` and its own group with gid `id`, home
/// `home_base/name` (mode 0700), shell `/bin/sh`. Idempotent when the user
/// already exists with the same numbers.
pub fn create_user(name: &str, id: u32, home_base: &Path) -> Result<TargetUser, AccountError> {
    let refuse = |reason: String| AccountError::Refused {
        name: name.into(),
        reason,
    };
    valid_login_name(name).map_err(|r| refuse(r.into()))?;
    if id < 1000 || id == u32::MAX {
        return Err(refuse(format!(
            "uid {id} is root, in the system range, or -1"
        )));
    }
    let _lock = lock()?;
    match TargetUser::lookup(&UserSpec::Name(name.into())) {
        Ok(u) if u.uid == id && u.gid == id => return Ok(u),
        Ok(u) => {
            return Err(refuse(format!(
                "it exists with uid {} gid {}",
                u.uid, u.gid
            )))
        }
        Err(_) => {}
    }
    if let Ok(other) = TargetUser::lookup(&UserSpec::Uid(id)) {
        return Err(refuse(format!("uid {id} belongs to {:?}", other.name)));
    }
    let id_text = id.to_string();
    let home = home_base.join(name);
    let home_text = home.display().to_string();
    run("groupadd", name, &["-g", &id_text, name])?;
    if let Err(e) = run(
        "useradd",
        name,
        &[
            "-u", &id_text, "-g", &id_text, "-M", "-N", "-d", &home_text, "-s", "/bin/sh", name,
        ],
    ) {
        let _ = run("groupdel", name, &[name]);
        return Err(e);
    }
    // `useradd -m` would copy /etc/skel as root into the new home; instead the
    // home is made empty, owned by the user and 0700, before the user has
    // any process that could race it.
    if let Err(e) = make_home(&home, id) {
        let _ = run("userdel", name, &[name]);
        let _ = run("groupdel", name, &[name]);
        return Err(AccountError::Tool {
            tool: "mkdir",
            name: name.into(),
            detail: e.to_string(),
        });
    }
    TargetUser::lookup(&UserSpec::Name(name.into())).map_err(|e| refuse(e.to_string()))
}

fn make_home(home: &Path, id: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().mode(0o700).create(home)?;
    let dir = File::open(home)?;
    std::os::unix::fs::fchown(&dir, Some(id), Some(id))?;
    dir.set_permissions(std::fs::Permissions::from_mode(0o700))
}

/// Removes user `name`, its group and its home (`userdel -r`).
pub fn remove_user(name: &str) -> Result<(), AccountError> {
    valid_login_name(name).map_err(|r| AccountError::Refused {
        name: name.into(),
        reason: r.into(),
    })?;
    let _lock = lock()?;
    // Make sure nothing of the user still runs, so userdel can proceed.
    let _ = Command::new("pkill").args(["-KILL", "-u", name]).status();
    run("userdel", name, &["-r", "-f", name])?;
    let _ = run("groupdel", name, &[name]);
    Ok(())
}
