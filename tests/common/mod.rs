//! Shared set-up for the integration tests: the root guard, real throwaway
//! users (`tonotest<uid>`, uids 61000–61799, created one at a time and
//! removed on drop), and runners for the built binaries.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use tono_seal::drop::Launcher;
use tono_seal::drop::{drop_and_run, DropRequest, RunOptions};
use tono_seal::turn::account;
use tono_seal::user::{TargetUser, UserSpec};

/// Returns true when the test may go on as root. Not root: a loud skip, or
/// a failure under `CI=true`.
pub fn root_or_skip(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test} needs root and CI=true: refusing to skip");
    }
    eprintln!("\n*** SKIPPED {test}: it needs root (real users, real drops). Run the tests as root. ***\n");
    false
}

/// Skips (returns early from) a test unless root.
#[macro_export]
macro_rules! need_root {
    () => {
        if !common::root_or_skip(module_path!()) {
            return;
        }
    };
}

static CREATE: Mutex<()> = Mutex::new(());

/// A real user made for one test and removed when dropped.
pub struct TestUser {
    pub user: TargetUser,
}

impl TestUser {
    /// Creates a user with no key store.
    pub fn bare() -> Self {
        let _guard = CREATE.lock().unwrap_or_else(|p| p.into_inner());
        // Spread processes over the range so two test binaries never collide.
        let start = 61000 + (std::process::id() % 8) * 100;
        let uid = (start..61800)
            .chain(61000..start)
            .find(|uid| {
                TargetUser::lookup(&UserSpec::Uid(*uid)).is_err()
                    && TargetUser::lookup(&UserSpec::Name(format!("tonotest{uid}"))).is_err()
            })
            .expect("a free test uid in 61000-61799");
        let user = account::ensure_user(&format!("tonotest{uid}"), uid, uid, Path::new("/home"))
            .expect("create test user");
        Self { user }
    }

    /// Creates a user and runs `keygen` for it.
    pub fn with_key() -> Self {
        let u = Self::bare();
        let out = tono(&["keygen", "--user", &u.user.name], b"");
        assert!(
            out.status.success(),
            "keygen: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        u
    }

    /// Seals `value` as `name`.
    pub fn seal(&self, name: &str, value: &[u8]) {
        let out = tono(&["seal", "--user", &self.user.name, name], value);
        assert!(
            out.status.success(),
            "seal {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn name(&self) -> &str {
        &self.user.name
    }

    pub fn home(&self) -> &Path {
        &self.user.home
    }

    /// Runs a shell command as this user outside tono (through setpriv), to
    /// set up or inspect the home as its owner.
    pub fn sh(&self, script: &str) -> Output {
        Command::new("setpriv")
            .args([
                "--reuid",
                &self.user.uid.to_string(),
                "--regid",
                &self.user.gid.to_string(),
                "--clear-groups",
                "--",
            ])
            .args(["/bin/sh", "-c", script])
            .current_dir(&self.user.home)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &self.user.home)
            .output()
            .expect("setpriv")
    }
}

/// A second user whose primary group is another test user's (made without
/// a home, removed with `userdel` when dropped).
pub struct GroupSharer(pub String);

impl GroupSharer {
    pub fn of(other: &TestUser) -> Self {
        let _guard = CREATE.lock().unwrap_or_else(|p| p.into_inner());
        let uid = (61000..61800)
            .rev()
            .find(|uid| {
                TargetUser::lookup(&UserSpec::Uid(*uid)).is_err()
                    && TargetUser::lookup(&UserSpec::Name(format!("tonotest{uid}"))).is_err()
            })
            .expect("a free test uid in 61000-61799");
        let name = format!("tonotest{uid}");
        let made = Command::new("useradd")
            .args(["-M", "-N", "-d", "/nonexistent", "-s", "/usr/sbin/nologin"])
            .args([
                "-u",
                &uid.to_string(),
                "-g",
                &other.user.gid.to_string(),
                &name,
            ])
            .output()
            .expect("useradd");
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        Self(name)
    }
}

impl Drop for GroupSharer {
    fn drop(&mut self) {
        let _guard = CREATE.lock().unwrap_or_else(|p| p.into_inner());
        let _ = Command::new("userdel").arg(&self.0).output();
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _guard = CREATE.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = account::remove_user(&self.user.name, &launcher()) {
            eprintln!("could not remove {}: {e}", self.user.name);
        }
        // The uid is free for the next test only when the kernel no longer
        // counts a process of it: killed processes stay zombies until their
        // parent (often init) reaps them, and each still counts against
        // RLIMIT_NPROC of whoever gets the uid next (a fork loop's 255
        // children made the next user's first fork fail with EAGAIN).
        let uid = self.user.uid;
        let mut polls = 0;
        while processes_of(uid, true) > 0 {
            polls += 1;
            if polls == 3000 {
                eprintln!("!!! uid {uid} still has processes after 3000 polls; leaving it taken");
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

pub fn tono_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tono-seal"))
}

pub fn launch_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tono-launch"))
}

pub fn launcher() -> Launcher {
    Launcher::at(launch_bin())
}

/// A two-thread runtime, as the worker uses.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `tono-seal ARGS` with `stdin`.
pub fn tono(args: &[&str], stdin: &[u8]) -> Output {
    tono_env(args, stdin, &[])
}

/// Held shared by every `tono-seal` this test process starts. Each one
/// sweeps the cgroups of dead workers when it starts, so a test that needs
/// a dead worker's cgroups to stay until it looks holds it exclusively.
pub static CLI_STARTS: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Runs `tono-seal ARGS` with `stdin` and extra environment.
pub fn tono_env(args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Output {
    let _starting = CLI_STARTS.read().unwrap_or_else(|p| p.into_inner());
    let mut child = Command::new(tono_bin())
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tono-seal");
    let mut input = child.stdin.take().unwrap();
    // A writer that the child stops reading (over the cap) sees EPIPE.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Live (not zombie) processes whose real uid is `uid`. A killed
/// grandchild is reaped by init in its own time; as a zombie it runs nothing.
pub fn live_processes_of(uid: u32) -> usize {
    processes_of(uid, false)
}

/// Processes whose real uid is `uid`, zombies too when `zombies`.
pub fn processes_of(uid: u32, zombies: bool) -> usize {
    let uid = uid.to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter(|status| {
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.split_whitespace().next().map(str::to_owned))
            };
            field("Uid:").as_deref() == Some(uid.as_str())
                && (zombies || field("State:").as_deref() != Some("Z"))
        })
        .count()
}

/// Runs `command` through `drop_and_run` as `user`, with default options
/// but `timeout` and the shared view (the host's namespaces), for tests of
/// what contains a call without its own PID namespace.
pub async fn shell_shared(
    user: &TargetUser,
    command: &str,
    timeout: Duration,
) -> tono_seal::Outcome {
    shell_with(
        user,
        command,
        RunOptions {
            timeout,
            view: tono_seal::launch::view::View::Shared,
            ..RunOptions::default()
        },
    )
    .await
}

/// Runs `command` through `drop_and_run` as `user`, with default options
/// but `timeout`.
pub async fn shell(user: &TargetUser, command: &str, timeout: Duration) -> tono_seal::Outcome {
    shell_with(
        user,
        command,
        RunOptions {
            timeout,
            ..RunOptions::default()
        },
    )
    .await
}

/// Runs `command` through `drop_and_run` as `user` with `options`.
pub async fn shell_with(
    user: &TargetUser,
    command: &str,
    options: RunOptions,
) -> tono_seal::Outcome {
    let launcher = launcher();
    let policy = tono_seal::classify::Policy::default();
    let raw =
        serde_json::to_vec(&serde_json::json!({"tool": "shell", "args": {"command": command}}))
            .unwrap();
    drop_and_run(&DropRequest {
        launcher: &launcher,
        policy: &policy,
        user,
        grants: &[],
        call: &raw,
        options,
    })
    .await
}

/// Live (non-zombie) processes of `uid`, with their command lines.
pub fn live_processes(uid: u32) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let uid_line = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .unwrap_or_default();
        let state = status
            .lines()
            .find(|l| l.starts_with("State:"))
            .unwrap_or_default();
        if uid_line.split_whitespace().nth(1) == Some(&uid.to_string()) && !state.contains("zombie")
        {
            let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(format!(
                "{}: {}",
                entry.file_name().to_string_lossy(),
                String::from_utf8_lossy(&cmd).replace('\0', " ")
            ));
        }
    }
    found
}

/// Ways a tool leaves its process group and outlives its call: each starts
/// a `sleep 1000` that escapes, then prints `started`.
pub const ESCAPES: [&str; 4] = [
    "setsid sleep 1000 & sleep 0.3; echo started",
    "(sh -c 'sleep 1000 &' &) ; sleep 0.3; echo started",
    "nohup sleep 1000 >/dev/null 2>&1 & sleep 0.3; echo started",
    "sh -c 'trap \"\" TERM HUP; kill -STOP $$; sleep 1000' & sleep 0.2; echo started",
];

/// The note of an outcome's applied limits (how the call was ended).
pub fn limits_note(out: &tono_seal::Outcome) -> String {
    out.limits
        .as_ref()
        .and_then(|l| l.note.clone())
        .unwrap_or_default()
}

/// A root-only folder for one test's audit log
/// (`/var/lib/tono-test-audit/<tag>-<pid>`), removed when dropped.
pub struct AuditDir(pub PathBuf);

impl AuditDir {
    pub fn new(tag: &str) -> Self {
        let base = Path::new("/var/lib/tono-test-audit");
        std::fs::create_dir_all(base).unwrap();
        std::fs::set_permissions(base, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let dir = base.join(format!("{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Self(dir)
    }

    /// The active log file.
    pub fn log(&self) -> PathBuf {
        self.0.join("audit.jsonl")
    }

    /// The active file's records, as JSON.
    pub fn records(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.log())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for AuditDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Hands `plan` to a launcher started by hand in `namespaces`, and decodes
/// what it reported.
pub fn launch_by_hand(
    plan: &tono_seal::launch::plan::LaunchPlan,
    namespaces: tono_seal::sys::NewNamespaces,
) -> tono_seal::launch::report::StatusReport {
    use std::io::Read;
    let null = tono_seal::drop::start::open_null().unwrap();
    let started =
        tono_seal::drop::start::start(&launch_bin(), Some(&null), true, namespaces, false).unwrap();
    // Framed, and let go at once (no begin record to wait for).
    let mut framed = tono_seal::launch::plan::frame(&serde_json::to_vec(plan).unwrap()).to_vec();
    framed.push(tono_seal::launch::plan::GO);
    std::fs::File::from(started.plan)
        .write_all(&framed)
        .unwrap();
    let mut status = Vec::new();
    std::fs::File::from(started.status)
        .read_to_end(&mut status)
        .unwrap();
    tono_seal::sys::reap(started.pid).unwrap();
    tono_seal::launch::report::StatusReport::decode(&status)
}

/// A plan for `user` whose program leaves `marker`: what a launch by hand
/// runs to show, by the marker's presence, whether anything ran.
pub fn touch_plan(user: &TargetUser, marker: &str) -> tono_seal::launch::plan::LaunchPlan {
    use tono_seal::launch::plan::{Action, ExecPlan, LaunchPlan};
    LaunchPlan::for_user(
        user,
        Action::Exec(ExecPlan {
            argv: vec!["/bin/sh".into(), "-c".into(), format!("touch {marker}")],
            cwd: None,
            env: Vec::new().into(),
            secrets: Vec::new(),
            upstream_ca: None,
        }),
    )
}

/// A launch by hand that ran its program: it ended (or exec'd in place)
/// and left `marker`, which is removed for the next one.
pub fn assert_ran(report: &tono_seal::launch::report::StatusReport, marker: &str, what: &str) {
    use tono_seal::launch::report::StatusReport;
    assert!(
        matches!(report, StatusReport::Ended(_) | StatusReport::Execed),
        "{what}: {report:?}"
    );
    assert!(Path::new(marker).exists(), "{what}: did not run");
    std::fs::remove_file(marker).unwrap();
}

/// A path in a folder every test user may write (on the root file system:
/// exec and setuid as there) that no call's view
/// replaces (a private call has /tmp, /var/tmp, /run/lock and /run/user of
/// its own), for a marker a tool leaves and root looks for on the host.
pub fn marker_path(name: &str) -> String {
    let dir = Path::new("/var/lib/tonotest-markers");
    if !dir.is_dir() {
        let _ = std::fs::create_dir(dir);
    }
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
        .expect("the marker folder");
    format!("{}/{name}", dir.display())
}

/// A temporary folder for files a call's tool runs or reads: beside the
/// markers, where a private call sees the host's files (its /tmp is its
/// own).
pub fn tempdir() -> tempfile::TempDir {
    let marker = marker_path("x");
    let dir = Path::new(&marker).parent().expect("the marker folder");
    tempfile::tempdir_in(dir).expect("a temporary folder")
}
