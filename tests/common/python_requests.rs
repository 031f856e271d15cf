//! A Python with `requests` that a test user's call can run: a venv of the
//! system's `/usr/bin/python3` at `/var/lib/tonotest-venv` (world-readable,
//! outside any home and outside what a private call replaces), given
//! `requests` by its own pip. The system Python is never changed (Debian
//! 12 refuses pip there); a venv under cargo's target folder would not do,
//! since that folder is root's `0700`.
//!
//! Included with `#[path = "common/python_requests.rs"] mod python_requests;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where the venv lives.
pub const VENV: &str = "/var/lib/tonotest-venv";

fn imports_requests(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import requests"])
        .env_clear()
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The venv's `python3`, made once (serialized across test binaries by a
/// lock file); `None` with a loud skip where it cannot be made, a panic
/// under `CI=true`.
pub fn python_with_requests() -> Option<PathBuf> {
    let venv = Path::new(VENV);
    let python = venv.join("bin/python3");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/run/lock/tonotest-venv.lock")
        .unwrap();
    let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("lock the venv");
    if !imports_requests(&python) {
        let run = |program: &Path, args: &[&str]| {
            Command::new(program)
                .args(args)
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let _ = run(
            Path::new("/usr/bin/python3"),
            &["-m", "venv", "--clear", VENV],
        ) && run(
            &python,
            &[
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "requests",
            ],
        );
    }
    if imports_requests(&python) {
        // Readable and runnable by every test user.
        let _ = Command::new("chmod").args(["-R", "go+rX", VENV]).status();
        return Some(python);
    }
    let why = format!(
        "no venv with requests could be made at {VENV} (needs python3-venv, and pip able to reach PyPI)"
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{why}, and CI=true");
    }
    eprintln!("\n*** SKIPPED a requests test: {why} ***\n");
    None
}
