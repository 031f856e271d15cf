//! Access probes the launcher performs itself, after the drop, as the
//! user: the syscall `tono-seal verify` asks about, done once, with the
//! kernel's answer reported as an errno — never a shell's exit status.
//!
//! Guarantees: each probe makes exactly the attempt its name says and
//! changes nothing that exists: a file is opened for writing with
//! `O_APPEND` and no byte written, a folder is written by creating a new
//! entry with a unique name (`O_CREAT|O_EXCL|O_NOFOLLOW`) that is removed at
//! once, a signal is `kill(pid, 0)`, a trace is `PTRACE_SEIZE` (which stops
//! nothing, and ends with this process). A `setresuid(0)` that succeeds ends
//! the probing: nothing more runs as root.
#![forbid(unsafe_code)]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

/// One attempt to make as the user.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AccessProbe {
    /// Read: a folder is opened and its first entry read, a file is opened
    /// and one byte read.
    Read {
        /// What to read.
        path: PathBuf,
    },
    /// Write: a file is opened `O_WRONLY|O_APPEND` (nothing is written); a
    /// folder gets a new entry, removed at once.
    Write {
        /// What to write.
        path: PathBuf,
    },
    /// Read and run: opened for reading and `access(X_OK)`.
    Run {
        /// The program.
        path: PathBuf,
    },
    /// The mode and owner of a path (`lstat`).
    Mode {
        /// What to look at.
        path: PathBuf,
    },
    /// `kill(pid, 0)`.
    Signal {
        /// The target.
        pid: i32,
    },
    /// `ptrace(PTRACE_SEIZE, pid)`.
    Trace {
        /// The target.
        pid: i32,
    },
    /// `setresuid(uid, uid, uid)`.
    SetUid {
        /// The uid asked for.
        uid: u32,
    },
    /// A program run with no input: its exit status and first line of
    /// error output (for the programs that grant root: `sudo`, `su`).
    Program {
        /// Program and arguments.
        argv: Vec<String>,
    },
}

/// What the kernel (or the program) answered.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct AccessAnswer {
    /// The attempt worked.
    pub ok: bool,
    /// The errno that refused it, if a syscall did.
    #[serde(default)]
    pub errno: Option<i32>,
    /// The syscall that gave the errno, or what was found.
    #[serde(default)]
    pub detail: String,
    /// For `mode`: the mode bits; for `program`: its exit status.
    #[serde(default)]
    pub value: Option<u32>,
}

impl AccessAnswer {
    fn worked(detail: impl Into<String>) -> Self {
        Self {
            ok: true,
            detail: detail.into(),
            ..Self::default()
        }
    }

    fn refused(call: &str, error: std::io::Error) -> Self {
        Self {
            ok: false,
            errno: error.raw_os_error(),
            detail: call.into(),
            value: None,
        }
    }

    /// The errno's name and text (`EACCES: Permission denied`), if any.
    pub fn errno_text(&self) -> Option<String> {
        self.errno.map(|e| Errno::from_raw(e).to_string())
    }

    /// The kernel refused for lack of permission (`EACCES` or `EPERM`),
    /// the only answer that counts as a denial.
    pub fn denied_by_kernel(&self) -> bool {
        matches!(self.errno, Some(e) if e == Errno::EACCES as i32 || e == Errno::EPERM as i32)
    }
}

fn read(path: &Path) -> AccessAnswer {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) => return AccessAnswer::refused("open", e),
    };
    match file.metadata() {
        Ok(m) if m.is_dir() => match std::fs::read_dir(path).map(|mut d| d.next()) {
            Ok(Some(Err(e))) => AccessAnswer::refused("getdents", e),
            Ok(_) => AccessAnswer::worked("listed"),
            Err(e) => AccessAnswer::refused("opendir", e),
        },
        Ok(_) => {
            let mut byte = [0u8; 1];
            match std::io::Read::read(&mut &file, &mut byte) {
                Ok(_) => AccessAnswer::worked("read"),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    AccessAnswer::worked("opened (no data waiting)")
                }
                Err(e) => AccessAnswer::refused("read", e),
            }
        }
        Err(e) => AccessAnswer::refused("fstat", e),
    }
}

fn write(path: &Path, serial: usize) -> AccessAnswer {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            let name = format!(".tono-verify-{}-{serial}", std::process::id());
            let entry = path.join(OsStr::from_bytes(name.as_bytes()));
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&entry);
            match created {
                Ok(_) => {
                    let removed = std::fs::remove_file(&entry);
                    AccessAnswer::worked(match removed {
                        Ok(()) => "created a new entry and removed it".to_owned(),
                        Err(e) => format!("created a new entry; removing it: {e}"),
                    })
                }
                Err(e) => AccessAnswer::refused("open(O_CREAT|O_EXCL)", e),
            }
        }
        // Not a folder (or not visible to the user): open it for writing,
        // creating nothing and writing nothing.
        _ => match std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
            .open(path)
        {
            Ok(_) => AccessAnswer::worked("opened for writing"),
            Err(e) => AccessAnswer::refused("open(O_WRONLY|O_APPEND)", e),
        },
    }
}

fn run(path: &Path) -> AccessAnswer {
    if let Err(e) = std::fs::File::open(path) {
        return AccessAnswer::refused("open", e);
    }
    match nix::unistd::access(path, nix::unistd::AccessFlags::X_OK) {
        Ok(()) => AccessAnswer::worked("readable and executable"),
        Err(e) => AccessAnswer::refused("access(X_OK)", std::io::Error::from(e)),
    }
}

fn mode(path: &Path) -> AccessAnswer {
    match std::fs::symlink_metadata(path) {
        Ok(m) => AccessAnswer {
            ok: true,
            errno: None,
            detail: format!("owner {} group {}", m.uid(), m.gid()),
            value: Some(m.mode() & 0o7777),
        },
        Err(e) => AccessAnswer::refused("lstat", e),
    }
}

fn errno_answer(call: &str, result: nix::Result<()>, worked: &str) -> AccessAnswer {
    match result {
        Ok(()) => AccessAnswer::worked(worked),
        Err(e) => AccessAnswer::refused(call, std::io::Error::from(e)),
    }
}

fn program(argv: &[String]) -> AccessAnswer {
    let Some((first, rest)) = argv.split_first() else {
        return AccessAnswer::refused("spawn", std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    let output = std::process::Command::new(first)
        .args(rest)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    match output {
        Ok(out) => {
            let said = String::from_utf8_lossy(&out.stderr);
            let first_line: String = said
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(160)
                .collect();
            AccessAnswer {
                ok: out.status.success(),
                errno: None,
                detail: first_line,
                value: out.status.code().map(|c| c as u32),
            }
        }
        Err(e) => AccessAnswer::refused("spawn", e),
    }
}

/// Makes every attempt in order, as whoever this process is now, and
/// answers each. A `setresuid` that worked ends the list: the rest are not
/// tried as root.
pub fn probe_all(probes: &[AccessProbe]) -> Vec<AccessAnswer> {
    let mut answers = Vec::with_capacity(probes.len());
    for (serial, probe) in probes.iter().enumerate() {
        let answer = match probe {
            AccessProbe::Read { path } => read(path),
            AccessProbe::Write { path } => write(path, serial),
            AccessProbe::Run { path } => run(path),
            AccessProbe::Mode { path } => mode(path),
            AccessProbe::Signal { pid } => errno_answer(
                "kill(pid, 0)",
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), None),
                "signalled",
            ),
            AccessProbe::Trace { pid } => errno_answer(
                "ptrace(PTRACE_SEIZE)",
                nix::sys::ptrace::seize(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::ptrace::Options::empty(),
                ),
                "seized (released when this process exits)",
            ),
            AccessProbe::SetUid { uid } => {
                let id = nix::unistd::Uid::from_raw(*uid);
                let answer = errno_answer(
                    "setresuid",
                    nix::unistd::setresuid(id, id, id),
                    "changed uid",
                );
                if answer.ok {
                    answers.push(answer);
                    return answers;
                }
                answer
            }
            AccessProbe::Program { argv } => program(argv),
        };
        answers.push(answer);
    }
    answers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_carry_the_errno_and_only_eacces_and_eperm_are_denials() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o640))
            .unwrap();
        let answers = probe_all(&[
            AccessProbe::Read { path: file.clone() },
            AccessProbe::Read {
                path: dir.path().join("missing"),
            },
            AccessProbe::Write {
                path: dir.path().to_path_buf(),
            },
            AccessProbe::Mode { path: file.clone() },
            AccessProbe::Program {
                argv: vec!["/nonexistent/program".into()],
            },
        ]);
        assert!(answers[0].ok, "{:?}", answers[0]);
        assert_eq!(answers[1].errno, Some(libc::ENOENT));
        assert!(!answers[1].denied_by_kernel());
        assert!(answers[1]
            .errno_text()
            .is_some_and(|t| t.starts_with("ENOENT")));
        assert!(answers[2].ok, "{:?}", answers[2]);
        // The folder write left nothing behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(answers[3].value, Some(0o640));
        assert_eq!(answers[4].errno, Some(libc::ENOENT));
        let denied = AccessAnswer {
            errno: Some(libc::EACCES),
            ..AccessAnswer::default()
        };
        assert!(denied.denied_by_kernel());
        let read_only = AccessAnswer {
            errno: Some(libc::EROFS),
            ..AccessAnswer::default()
        };
        assert!(!read_only.denied_by_kernel());
    }
}
