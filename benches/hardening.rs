//! What each of a call's side-door closings costs alone, in the same run
//! as `setpriv` (the peer every ratio is to): the syscall filter's compile
//! and install, the new session keyring, the IPC namespace, and the fresh
//! `/dev/shm` and `/dev/mqueue`. Each step is timed in a thread of its own
//! (the filter and the namespaces are per thread), as the launcher does it
//! once per call. The ephemeral home's overlay is timed end to end by the
//! drop bench (case 6 against 6h). As root: `cargo bench --bench hardening`
//! (ROUNDS=N, 300 by default).

use std::process::Command;
use std::time::Instant;

use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use tono_seal::launch::syscall_filter::SyscallFilter;

/// A labelled step, timed alone.
type Step = (&'static str, fn() -> f64);

fn median(mut us: Vec<f64>) -> f64 {
    us.sort_by(|a, b| a.total_cmp(b));
    us[us.len() / 2]
}

/// Runs `step` in a new thread `rounds` times; the time of `step` alone.
fn timed_in_thread(rounds: usize, step: fn() -> f64) -> f64 {
    median(
        (0..rounds)
            .map(|_| std::thread::spawn(step).join().expect("step"))
            .collect(),
    )
}

fn us(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6
}

fn compile() -> f64 {
    let start = Instant::now();
    let filter = SyscallFilter::build(&[]).expect("filter");
    let t = us(start);
    drop(filter);
    t
}

fn install() -> f64 {
    let filter = SyscallFilter::build(&[]).expect("filter");
    let start = Instant::now();
    filter.install().expect("install");
    us(start)
}

fn keyring() -> f64 {
    let start = Instant::now();
    tono_seal::sys::join_anonymous_session_keyring().expect("join");
    us(start)
}

fn ipc() -> f64 {
    let start = Instant::now();
    nix::sched::unshare(CloneFlags::CLONE_NEWIPC).expect("unshare ipc");
    us(start)
}

/// In a mount namespace of this thread's own (made untimed): the two
/// mounts the launcher makes for IPC.
fn ipc_mounts() -> f64 {
    nix::sched::unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC).expect("unshare");
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .expect("private");
    let quiet = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let start = Instant::now();
    nix::mount::mount(
        Some("tono-shm"),
        "/dev/shm",
        Some("tmpfs"),
        quiet,
        Some("mode=1777"),
    )
    .expect("shm");
    // As the launcher: only where the host has the folder.
    if std::path::Path::new("/dev/mqueue").is_dir() {
        nix::mount::mount(
            Some("mqueue"),
            "/dev/mqueue",
            Some("mqueue"),
            quiet,
            None::<&str>,
        )
        .expect("mqueue");
    }
    us(start)
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("the hardening benchmark mounts and unshares: run it as root");
        std::process::exit(2);
    }
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(300);
    let setpriv = median(
        (0..rounds)
            .map(|_| {
                let start = Instant::now();
                let ok = Command::new("setpriv")
                    .args([
                        "--reuid=65534",
                        "--regid=65534",
                        "--clear-groups",
                        "--no-new-privs",
                        "/bin/true",
                    ])
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "setpriv");
                us(start)
            })
            .collect(),
    );
    let steps: [Step; 5] = [
        ("syscall filter: compile (seccompiler)", compile),
        ("syscall filter: install (2 programs)", install),
        ("keyring: join a new session keyring", keyring),
        ("IPC namespace: unshare(CLONE_NEWIPC)", ipc),
        ("IPC: fresh /dev/shm and /dev/mqueue", ipc_mounts),
    ];
    println!(
        "{:<44} {:>10} {:>10}",
        "step (median of rounds)", "µs", "÷setpriv"
    );
    println!(
        "{:<44} {:>10.1} {:>10.3}",
        "setpriv … /bin/true (the peer)", setpriv, 1.0
    );
    let mut total = 0.0;
    for (label, step) in steps {
        let t = timed_in_thread(rounds, step);
        total += t;
        println!("{label:<44} {t:>10.1} {:>10.3}", t / setpriv);
    }
    println!(
        "{:<44} {total:>10.1} {:>10.3}",
        "all of them, per call",
        total / setpriv
    );
}
