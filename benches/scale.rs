//! Throughput and scale: 64 concurrent `drop_and_run` calls across 64 users
//! (one task per user, 3 sealed secrets each), sustained for 10,000 calls
//! of `spawn ["/bin/true"]` unsealing all three. Reports calls per second,
//! latency percentiles, errors, the worker's RSS sampled every 1,000 calls
//! (first vs last), and the worker's fds and children before and after.
//! As root: `cargo bench --bench scale` (CALLS=N, USERS=N to change).
//! Writes `target/bench/scale.json`. Users are `tonotest61800`…`61863`.

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

mod common;

use common::{bin, provision};
use serde_json::json;
use tono_seal::classify::Policy;
use tono_seal::drop::Launcher;
use tono_seal::drop::{drop_and_run, DropRequest, RunOptions, SecretGrant};
use tono_seal::turn::account;
use tono_seal::user::TargetUser;

const FIRST_UID: u32 = 61800;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The worker's resident set, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Processes whose parent is this one (zombies included).
fn children() -> usize {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            // pid (comm) state ppid …; comm may hold spaces and parens.
            stat.rsplit_once(") ")
                .and_then(|(_, rest)| rest.split(' ').nth(1))
                == Some(me.as_str())
        })
        .count()
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q) as usize]
}

struct Shared {
    launcher: Launcher,
    policy: Policy,
    grants: Vec<SecretGrant>,
    call: Vec<u8>,
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("the scale benchmark creates users and must run as root");
        std::process::exit(2);
    }
    let (launch, tono) = (bin("tono-launch"), bin("tono-seal"));
    assert!(
        launch.exists() && tono.exists(),
        "build the binaries first: cargo build --release"
    );
    let users_n = env_or("USERS", 64);
    let calls_n = env_or("CALLS", 10_000);
    let sample_every = 1_000.min(calls_n);
    let names: Vec<String> = (0..users_n as u32)
        .map(|i| format!("tonotest{}", FIRST_UID + i))
        .collect();
    let set_up = Instant::now();
    let users: Vec<TargetUser> = names
        .iter()
        .zip(FIRST_UID..)
        .map(|(name, uid)| {
            let _ = account::remove_user(name, &Launcher::at(bin("tono-launch")));
            let user = account::ensure_user(name, uid, uid, Path::new("/home")).expect("user");
            provision(&tono, name);
            user
        })
        .collect();
    eprintln!(
        "{users_n} users with 3 sealed secrets each in {:.1} s",
        set_up.elapsed().as_secs_f64()
    );
    let shared = Arc::new(Shared {
        launcher: Launcher::at(&launch),
        policy: Policy::default(),
        grants: ["a", "b", "c"]
            .iter()
            .map(|s| SecretGrant::parse(s).unwrap())
            .collect(),
        call: serde_json::to_vec(
            &json!({"tool": "spawn", "args": {"argv": ["/bin/true"], "secrets": ["a", "b", "c"]}}),
        )
        .unwrap(),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // Warm up (one call per user), then measure.
    let run_all = |calls: usize| {
        let issued = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        // Latencies go in one table written before the first sample, so the
        // bench's own bookkeeping does not show up as worker RSS growth.
        let latencies: Arc<Vec<AtomicU64>> =
            Arc::new((0..calls).map(|_| AtomicU64::new(u64::MAX)).collect());
        let rss = Arc::new(Mutex::new(Vec::with_capacity(calls / sample_every + 2)));
        rss.lock().unwrap().push(rss_kib());
        let started = Instant::now();
        let results = rt.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for user in users.clone() {
                let (shared, issued, done, rss, latencies) = (
                    shared.clone(),
                    issued.clone(),
                    done.clone(),
                    rss.clone(),
                    latencies.clone(),
                );
                tasks.spawn(async move {
                    let mut errors = Vec::new();
                    loop {
                        let ticket = issued.fetch_add(1, Ordering::SeqCst);
                        if ticket >= calls {
                            break;
                        }
                        let req = DropRequest {
                            launcher: &shared.launcher,
                            policy: &shared.policy,
                            user: &user,
                            grants: &shared.grants,
                            call: &shared.call,
                            options: RunOptions::default(),
                        };
                        let t = Instant::now();
                        let out = drop_and_run(&req).await;
                        latencies[ticket].store(
                            (t.elapsed().as_secs_f64() * 1e3).to_bits(),
                            Ordering::Relaxed,
                        );
                        if out.exit_code != Some(0) {
                            errors.push(format!("{out:?}"));
                        }
                        let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                        if n % sample_every == 0 {
                            rss.lock().unwrap().push(rss_kib());
                        }
                    }
                    errors
                });
            }
            let mut errors = Vec::new();
            while let Some(e) = tasks.join_next().await {
                errors.extend(e.unwrap());
            }
            errors
        });
        let secs = started.elapsed().as_secs_f64();
        let latencies: Vec<f64> = latencies
            .iter()
            .map(|l| f64::from_bits(l.load(Ordering::Relaxed)))
            .collect();
        let rss = rss.lock().unwrap().clone();
        (secs, (latencies, results), rss)
    };
    run_all(users_n);
    let (fds_before, children_before) = (open_fds(), children());
    let (secs, (mut latencies, errors), rss) = run_all(calls_n);
    let (fds_after, children_after) = (open_fds(), children());
    latencies.sort_by(|a, b| a.total_cmp(b));
    let (first, last) = (rss[1.min(rss.len() - 1)], *rss.last().unwrap());
    let growth = (last as f64 / first as f64 - 1.0) * 100.0;
    println!(
        "{calls_n} calls, {users_n} concurrent across {users_n} users, 3 secrets each, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("calls per second      {:.0}", calls_n as f64 / secs);
    println!(
        "latency ms            median {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.9),
        percentile(&latencies, 0.99),
        latencies.last().unwrap()
    );
    println!("errors                {}", errors.len());
    println!(
        "worker RSS KiB        at 1,000 calls {first}, at the end {last} ({growth:+.1}%); every 1,000: {:?}",
        &rss[1..]
    );
    println!("worker fds            before {fds_before}, after {fds_after}");
    println!("worker children       before {children_before}, after {children_after}");
    for e in errors.iter().take(5) {
        println!("error: {e}");
    }
    common::write_result(
        "scale.json",
        &json!({
            "calls": calls_n, "users": users_n, "seconds": secs,
            "calls_per_second": calls_n as f64 / secs,
            "median_ms": percentile(&latencies, 0.5),
            "p99_ms": percentile(&latencies, 0.99),
            "errors": errors.len(),
            "rss_kib_every_1000": &rss[1..], "rss_growth_percent": growth,
            "fds_before": fds_before, "fds_after": fds_after,
            "children_before": children_before, "children_after": children_after,
        }),
    );
    for name in &names {
        let _ = account::remove_user(name, &Launcher::at(bin("tono-launch")));
    }
    let ok = errors.is_empty()
        && growth <= 5.0
        && fds_after <= fds_before
        && children_after <= children_before;
    println!(
        "errors 0, RSS growth <= 5%, no fd or child growth: {}",
        if ok { "held" } else { "NOT held" }
    );
    if !ok {
        std::process::exit(1);
    }
}
