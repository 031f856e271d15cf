//! The drop against its peers, interleaved in one run, as ratios to
//! `setpriv`. As root: creates its own throwaway user with 3 sealed
//! secrets, installs `sudo` if missing, warms up, then runs rounds of every
//! case, with a 3 ms gap after each call (GAP_MS) — except case 6n, a burst
//! of calls with no gap, timed per call. `cargo bench --bench
//! drop` (ROUNDS=N to change the 300 default).
//! Writes `target/bench/drop.json` and, from it, `target/bench/drop.svg`
//! (median and p99 per case). With `STATIC_LAUNCHER=path` it also times a
//! statically linked `tono-launch` built by the operator (see docs/performance.md).
//!
//! Case 6S is the worker's real path: a `tono-seal serve --stdio` process
//! (receipts on, `fsync` each) and a client that writes each request as
//! soon as the previous answer arrives. After the interleaved rounds come
//! the issue-38 phases: three rounds (B2B_ROUNDS) of SERVE_CALLS (300)
//! back-to-back calls through `serve` in the private and the shared view,
//! `setpriv --reuid U --regid U --clear-groups /bin/true`, `sudo -u U
//! /bin/true` and `tono-seal run`, each round's runs in a fresh random
//! order, medians per round; then TP_ROUNDS (20) rounds of 64 calls across
//! 64 users at once through `serve` against 64 `setpriv` runs at once, as
//! calls per second. SERVE_ONLY=1 runs only these phases.

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

mod common;

use common::{bin, provision, quiet, setpriv_to};
use serde_json::json;
use tono_seal::audit::{AuditConfig, AuditLog};
use tono_seal::classify::Policy;
use tono_seal::drop::Launcher;
use tono_seal::drop::{drop_and_run, DropRequest, RunOptions, SecretGrant};
use tono_seal::env::{EnvConfig, HomeMode, Network, RunEnv};
use tono_seal::launch::view::View;
use tono_seal::turn::account;
use tono_seal::user::TargetUser;

const UID: u32 = 61950;
/// The first of the 64 users of the throughput phase.
const FIRST_CONCURRENT_UID: u32 = 61800;
/// Calls at once in the throughput phase, one user each.
const CONCURRENT: usize = 64;

/// A real `tono-seal serve --stdio` worker, with receipts in a log of the
/// bench's own (`fsync` each record, the default), and the client side of
/// its pipes.
struct Serve {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Serve {
    /// Starts the worker with `args` after `serve --stdio`, its receipts in
    /// a fresh `audit` folder.
    fn start(tono: &Path, audit: &Path, args: &[&str]) -> Self {
        let _ = std::fs::remove_dir_all(audit);
        let log = audit.join("audit.jsonl");
        let mut child = Command::new(tono)
            .args(["serve", "--stdio", "--audit", log.to_str().unwrap()])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("tono-seal serve");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
            next_id: 0,
        }
    }

    /// One request line: `spawn /bin/true` as `user` with 3 secrets.
    fn request(&mut self, user: &str) -> String {
        self.next_id += 1;
        format!(
            r#"{{"id":{},"user":"{user}","secrets":["a","b","c"],"call":{{"tool":"spawn","args":{{"argv":["/bin/true"],"secrets":["a","b","c"]}}}}}}"#,
            self.next_id
        ) + "\n"
    }

    /// Writes one request for each of `users` at once, then reads as many
    /// answers; panics unless each ran and exited 0.
    fn calls(&mut self, users: &[&str]) {
        let batch: String = users.iter().map(|u| self.request(u)).collect();
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(batch.as_bytes()).unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        for _ in users {
            line.clear();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "serve ended");
            let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(answer["outcome"]["exit_code"], 0, "{answer}");
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // Closing stdin ends the worker once its calls have answered.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// Runs each of `jobs` once, all at once, and waits for all; panics
/// unless each exited 0.
fn all_at_once(jobs: &mut [Command]) {
    let children: Vec<Child> = jobs
        .iter_mut()
        .map(|c| {
            c.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
}

/// A labelled benchmark case.
type Case<'a> = (&'static str, Box<dyn Fn() + 'a>);

fn stats(mut us: Vec<f64>) -> (f64, f64, f64) {
    us.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| us[((us.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.9), at(0.99))
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("the drop benchmark creates a user and must run as root");
        std::process::exit(2);
    }
    if !quiet(Command::new("sh").args(["-c", "command -v sudo"])) {
        eprintln!("installing sudo (a peer) ...");
        quiet(Command::new("sh").args(["-c", "apt-get update -qq && apt-get install -y -qq sudo"]));
    }
    let launch = bin("tono-launch");
    let tono = bin("tono-seal");
    assert!(
        launch.exists() && tono.exists(),
        "build the binaries first: cargo build --release"
    );
    let name = format!("tonotest{UID}");
    let _ = account::remove_user(&name, &Launcher::at(bin("tono-launch")));
    let user = account::ensure_user(&name, UID, UID, Path::new("/home")).expect("bench user");
    provision(&tono, &name);
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(300);
    let gap = std::time::Duration::from_millis(
        std::env::var("GAP_MS")
            .ok()
            .and_then(|g| g.parse().ok())
            .unwrap_or(3),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let launcher = Launcher::at(&launch);
    let fresh_launcher = Launcher::at(&launch).without_pool();
    let static_launcher =
        std::env::var_os("STATIC_LAUNCHER").map(|p| Launcher::at(Path::new(&p)).without_pool());
    let policy = Policy::default();
    let grants: Vec<SecretGrant> = ["a", "b", "c"]
        .iter()
        .map(|s| SecretGrant::parse(s).unwrap())
        .collect();
    // Case 6k: the same secrets as files.
    let file_grants: Vec<SecretGrant> = ["a=@", "b=@", "c=@"]
        .iter()
        .map(|g| SecretGrant::parse(g).unwrap())
        .collect();
    let call_plain =
        serde_json::to_vec(&json!({"tool": "spawn", "args": {"argv": ["/bin/true"]}})).unwrap();
    let call_secrets = serde_json::to_vec(
        &json!({"tool": "spawn", "args": {"argv": ["/bin/true"], "secrets": ["a", "b", "c"]}}),
    )
    .unwrap();
    let uid = UID.to_string();
    // Receipts in a log of the bench's own, fsynced each record (the
    // default): case 6a is case 6 with it.
    let audit_dir = Path::new("/var/lib/tono-bench-audit");
    let _ = std::fs::remove_dir_all(audit_dir);
    let audit = std::sync::Arc::new(
        AuditLog::open(AuditConfig::at(audit_dir.join("audit.jsonl")))
            .expect("the bench's audit log"),
    );
    let batched_dir = Path::new("/var/lib/tono-bench-audit-batched");
    let _ = std::fs::remove_dir_all(batched_dir);
    let batched = std::sync::Arc::new(
        AuditLog::open(AuditConfig {
            fsync_every: 64,
            ..AuditConfig::at(batched_dir.join("audit.jsonl"))
        })
        .expect("the bench's batched audit log"),
    );
    let drop_call_audited = |call: &[u8],
                             cgroup: bool,
                             user: &TargetUser,
                             launcher: &Launcher,
                             audit: Option<&std::sync::Arc<AuditLog>>,
                             view: View| {
        let options = RunOptions {
            cgroup,
            audit: audit.cloned(),
            view,
            ..RunOptions::default()
        };
        let req = DropRequest {
            launcher,
            policy: &policy,
            user,
            grants: &grants,
            call,
            options,
        };
        let out = rt.block_on(drop_and_run(&req));
        assert_eq!(out.exit_code, Some(0), "{out:?}");
    };
    let drop_call = |call: &[u8], cgroup: bool, user: &TargetUser, launcher: &Launcher| {
        drop_call_audited(call, cgroup, user, launcher, None, View::Private)
    };
    // The call's network: case 6 has the host's (no proxy configured);
    // 6o none, 6p behind a proxy (its end made in the call's namespace for
    // every call; /bin/true opens no connection, so the proxy, which is
    // not there, is never asked).
    let proxied = std::sync::Arc::new(
        EnvConfig::from_json(br#"{"proxy": "http://bench:pw@127.0.0.1:9"}"#).unwrap(),
    );
    let drop_call_on = |network: Network, launcher: &Launcher| {
        let options = RunOptions {
            network: Some(network),
            env: RunEnv {
                config: proxied.clone(),
                ..RunEnv::default()
            },
            ..RunOptions::default()
        };
        let req = DropRequest {
            launcher,
            policy: &policy,
            user: &user,
            grants: &grants,
            call: &call_secrets,
            options,
        };
        let out = rt.block_on(drop_and_run(&req));
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        let on = out.limits.as_ref().and_then(|l| l.network.clone());
        assert_eq!(on.as_deref(), Some(network.to_string().as_str()), "{out:?}");
    };
    // Case 6S's worker (declared before the cases that borrow it).
    let serve = RefCell::new(Serve::start(
        &tono,
        Path::new("/var/lib/tono-bench-audit-serve"),
        &[],
    ));
    let burst_of_user = [name.as_str(); 4];
    let mut cases: Vec<Case> = vec![
        (
            "1 bare spawn /bin/true (tokio)",
            Box::new(|| {
                rt.block_on(async {
                    assert!(tokio::process::Command::new("/bin/true")
                        .status()
                        .await
                        .unwrap()
                        .success())
                })
            }),
        ),
        (
            "2 setpriv --reuid --regid --clear-groups --no-new-privs",
            Box::new(|| {
                assert!(quiet(Command::new("setpriv").args([
                    "--reuid",
                    &uid,
                    "--regid",
                    &uid,
                    "--clear-groups",
                    "--no-new-privs",
                    "/bin/true"
                ])))
            }),
        ),
        (
            "3 runuser -u U",
            Box::new(|| {
                assert!(quiet(Command::new("runuser").args([
                    "-u",
                    &name,
                    "--",
                    "/bin/true"
                ])))
            }),
        ),
        (
            "4 sudo -u U",
            Box::new(|| {
                assert!(quiet(Command::new("sudo").args([
                    "-u",
                    &name,
                    "--",
                    "/bin/true"
                ])))
            }),
        ),
        (
            "5 drop_and_run spawn, no secrets",
            Box::new(|| drop_call(&call_plain, true, &user, &launcher)),
        ),
        (
            "6 drop_and_run spawn, 3 secrets",
            Box::new(|| drop_call(&call_secrets, true, &user, &launcher)),
        ),
        (
            "6b drop_and_run, 3 secrets, no cgroup",
            Box::new(|| drop_call(&call_secrets, false, &user, &launcher)),
        ),
        (
            "6f drop_and_run, 3 secrets, launcher started per call",
            Box::new(|| drop_call(&call_secrets, true, &user, &fresh_launcher)),
        ),
        (
            "7 tono-seal run, 3 secrets (process)",
            Box::new(|| {
                assert!(quiet(Command::new(&tono).args([
                    "run",
                    "--user",
                    &name,
                    "-s",
                    "a",
                    "-s",
                    "b",
                    "-s",
                    "c",
                    "--",
                    "/bin/true"
                ])))
            }),
        ),
    ];
    // Case 6 with a receipt, fsynced each record (6a) or every 64 (6c).
    let (secrets, bench_user, pooled, audited) =
        (&call_secrets, &user, &launcher, &drop_call_audited);
    for (label, log) in [
        (
            "6a drop_and_run, 3 secrets, receipt in the audit log",
            &audit,
        ),
        (
            "6c drop_and_run, 3 secrets, receipt, fsync every 64",
            &batched,
        ),
    ] {
        cases.push((
            label,
            Box::new(move || audited(secrets, true, bench_user, pooled, Some(log), View::Private)),
        ));
    }
    cases.push((
        "6o drop_and_run, 3 secrets, network none",
        Box::new(|| drop_call_on(Network::None, &launcher)),
    ));
    cases.push((
        "6p drop_and_run, 3 secrets, network proxy",
        Box::new(|| drop_call_on(Network::Proxy, &launcher)),
    ));
    cases.push((
        "6fo drop_and_run, 3 secrets, network none, launcher per call",
        Box::new(|| drop_call_on(Network::None, &fresh_launcher)),
    ));
    // The home's mode: case 6 has the default, ephemeral (an overlay on a
    // tmpfs per call); 6h the real home, 6r a read-only bind of it. The
    // difference to case 6 is what the overlay costs per call.
    let drop_call_home = |home: HomeMode| {
        let options = RunOptions {
            home: Some(home),
            ..RunOptions::default()
        };
        let req = DropRequest {
            launcher: &launcher,
            policy: &policy,
            user: &user,
            grants: &grants,
            call: &call_secrets,
            options,
        };
        let out = rt.block_on(drop_and_run(&req));
        assert_eq!(out.exit_code, Some(0), "{out:?}");
    };
    cases.push((
        "6h drop_and_run, 3 secrets, home persistent (no overlay)",
        Box::new(|| drop_call_home(HomeMode::Persistent)),
    ));
    cases.push((
        "6r drop_and_run, 3 secrets, home read-only",
        Box::new(|| drop_call_home(HomeMode::ReadOnly)),
    ));
    // The same three secrets as files in the call's own ramfs
    // (`NAME=@`): the difference to case 6 is what the credentials folder
    // costs per call (one ramfs mount, three files written as the user).
    let drop_call_files = || {
        let req = DropRequest {
            launcher: &launcher,
            policy: &policy,
            user: &user,
            grants: &file_grants,
            call: &call_secrets,
            options: RunOptions::default(),
        };
        let out = rt.block_on(drop_and_run(&req));
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        assert_eq!(out.secrets_as_files.len(), 3, "{out:?}");
    };
    cases.push((
        "6k drop_and_run, 3 secrets as files ($CREDENTIALS_DIRECTORY)",
        Box::new(drop_call_files),
    ));
    cases.push((
        "6v drop_and_run, 3 secrets, shared view (no namespaces, no mask)",
        Box::new(|| drop_call_audited(&call_secrets, true, &user, &launcher, None, View::Shared)),
    ));
    // Back-to-back: a burst of calls with no gap between them (the pool
    // has no time to refill), timed as the burst's mean per call.
    const BURST: usize = 4;
    let back_to_back = cases.len();
    cases.push((
        "6n drop_and_run, 3 secrets, back-to-back (mean of 4)",
        Box::new(|| {
            for _ in 0..BURST {
                drop_call(&call_secrets, true, &user, &launcher);
            }
        }),
    ));
    // Case 6S: the worker's real path, a `serve` process with receipts,
    // the same burst of 4 as 6n, its client writing each request as soon
    // as the previous answer arrives.
    let serve_case = cases.len();
    cases.push((
        "6S serve --stdio, 3 secrets, receipt, back-to-back (mean of 4)",
        Box::new(|| serve.borrow_mut().calls(&burst_of_user)),
    ));
    if let Some(fast) = &static_launcher {
        cases.push((
            "6s drop_and_run, 3 secrets, static launcher per call",
            Box::new(|| drop_call(&call_secrets, true, &user, fast)),
        ));
    }
    // SERVE_ONLY=1: only the serve phases below (for quick before/after
    // runs of the binaries in BIN_DIR).
    if std::env::var_os("SERVE_ONLY").is_none() {
        for (_, f) in &cases {
            for _ in 0..20 {
                f();
            }
        }
        let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); cases.len()];
        // Each round runs every case once, in a new random order, so that no
        // case always follows the same neighbour (sudo's PAM clean-up slows
        // whatever comes right after it).
        let mut order: Vec<usize> = (0..cases.len()).collect();
        for _ in 0..rounds {
            rand::seq::SliceRandom::shuffle(&mut order[..], &mut rand::thread_rng());
            for &i in &order {
                let f = &cases[i].1;
                let t = Instant::now();
                f();
                let calls = if i == back_to_back || i == serve_case {
                    BURST
                } else {
                    1
                };
                samples[i].push(t.elapsed().as_secs_f64() * 1e6 / calls as f64);
                // Calls arrive with gaps: what a case leaves running in the
                // background (the launcher pool's refill, the kernel's cgroup
                // teardown) finishes in the gap instead of landing on the next
                // case's clock. The scale bench measures the saturated worker.
                std::thread::sleep(gap);
            }
        }
        let setpriv = stats(samples[1].clone()).0;
        let mut rows = Vec::new();
        println!(
            "{rounds} interleaved rounds, {} cores",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        println!(
            "{:<56} {:>9} {:>9} {:>9} {:>8}",
            "case", "median µs", "p90 µs", "p99 µs", "÷setpriv"
        );
        let mut medians = Vec::new();
        for (i, (label, _)) in cases.iter().enumerate() {
            let (m, p90, p99) = stats(samples[i].clone());
            medians.push(m);
            println!(
                "{label:<56} {m:>9.0} {p90:>9.0} {p99:>9.0} {:>8.2}",
                m / setpriv
            );
            rows.push(json!({"case": label, "median_us": m, "p90_us": p90, "p99_us": p99, "ratio_to_setpriv": m / setpriv}));
        }
        let target = |what: &str, ratio: f64, limit: f64| {
            let verdict = if ratio <= limit { "held" } else { "NOT held" };
            println!("target {what:<44} {ratio:>5.2} (≤ {limit}) {verdict}");
        };
        target("case 6 ÷ case 2 (setpriv)", medians[5] / medians[1], 1.0);
        target(
            "case 6n (back-to-back) ÷ case 2",
            medians[back_to_back] / medians[1],
            1.0,
        );
        target(
            "case 6S (serve, back-to-back) ÷ case 2",
            medians[serve_case] / medians[1],
            1.0,
        );
        target(
            "case 7 (tono-seal run) ÷ case 2",
            medians[8] / medians[1],
            2.0,
        );
        target("case 6 ÷ case 4 (sudo -u)", medians[5] / medians[3], 0.4);
        target("case 5 ÷ case 1 (bare spawn)", medians[4] / medians[0], 2.5);
        println!(
            "a receipt costs {:.0} µs a call fsynced each (6a {:.0} - 6 {:.0} µs), {:.0} µs fsynced every 64 (6c {:.0} µs), medians",
            medians[9] - medians[5],
            medians[9],
            medians[5],
            medians[10] - medians[5],
            medians[10]
        );
        let median_of = |prefix: &str| {
            cases
                .iter()
                .position(|(label, _)| label.starts_with(prefix))
                .map(|i| medians[i])
                .unwrap_or(f64::NAN)
        };
        println!(
            "the ephemeral home's overlay costs {:.0} µs a call (6 {:.0} - 6h {:.0} µs), a read-only home {:.0} µs (6r {:.0} µs), medians",
            medians[5] - median_of("6h "),
            medians[5],
            median_of("6h "),
            median_of("6r ") - median_of("6h "),
            median_of("6r ")
        );
        println!(
            "three secrets as files cost {:.0} µs a call over three as variables (6k {:.0} - 6 {:.0} µs), medians",
            median_of("6k ") - medians[5],
            median_of("6k "),
            medians[5]
        );
        let dir = common::write_result("drop.json", &serde_json::Value::Array(rows));
        let json: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(dir.join("drop.json")).unwrap()).unwrap();
        std::fs::write(dir.join("drop.svg"), chart(&json, rounds)).unwrap();
        eprintln!("wrote {0}/drop.json and {0}/drop.svg", dir.display());
    }
    drop(cases);
    let shared = RefCell::new(Serve::start(
        &tono,
        Path::new("/var/lib/tono-bench-audit-serve-shared"),
        &["--view", "shared"],
    ));
    let peers: Vec<Case> = vec![
        (
            "serve, private view",
            Box::new(|| serve.borrow_mut().calls(&[name.as_str()])),
        ),
        (
            "serve, shared view",
            Box::new(|| shared.borrow_mut().calls(&[name.as_str()])),
        ),
        (
            "setpriv",
            Box::new(|| assert!(quiet(setpriv_to(UID).arg("/bin/true")))),
        ),
        (
            "sudo -u",
            Box::new(|| {
                assert!(quiet(Command::new("sudo").args([
                    "-u",
                    &name,
                    "--",
                    "/bin/true"
                ])))
            }),
        ),
        (
            "tono-seal run",
            Box::new(|| {
                assert!(quiet(Command::new(&tono).args([
                    "run",
                    "--user",
                    &name,
                    "-s",
                    "a",
                    "-s",
                    "b",
                    "-s",
                    "c",
                    "--",
                    "/bin/true"
                ])))
            }),
        ),
    ];
    let back_to_back_rounds = back_to_back_phase(&peers);
    drop(peers);
    drop(shared);
    let concurrent: Vec<String> = (0..CONCURRENT as u32)
        .map(|i| {
            let uid = FIRST_CONCURRENT_UID + i;
            let name = format!("tonotest{uid}");
            let _ = account::remove_user(&name, &Launcher::at(&launch));
            account::ensure_user(&name, uid, uid, Path::new("/home")).expect("bench user");
            provision(&tono, &name);
            name
        })
        .collect();
    let throughput = throughput_phase(&mut serve.borrow_mut(), &concurrent);
    drop(serve);
    common::write_result(
        "drop-serve.json",
        &json!({"back_to_back": back_to_back_rounds, "throughput": throughput}),
    );
    for name in concurrent.iter().chain([&name]) {
        let _ = account::remove_user(name, &Launcher::at(&launch));
    }
}

/// A count from the environment variable `var`, else `default`.
fn env_count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default)
}

/// Issue 38's table: B2B_ROUNDS rounds of SERVE_CALLS back-to-back runs
/// of each of `peers` (serve private, serve shared, setpriv, sudo, run, in
/// that order), each round's peers in a fresh random order; the medians
/// of each round, printed and returned.
fn back_to_back_phase(peers: &[Case<'_>]) -> serde_json::Value {
    let rounds = env_count("B2B_ROUNDS", 3);
    let calls = env_count("SERVE_CALLS", 300);
    for (_, f) in peers {
        for _ in 0..20 {
            f();
        }
    }
    let mut order: Vec<usize> = (0..peers.len()).collect();
    let mut table = Vec::new();
    println!("\nback to back: {rounds} rounds of {calls} runs each, medians of each round, ms");
    println!(
        "{:<6} {:>8} {:>8} {:>9} {:>8} {:>9} {:>9} {:>9}",
        "round", "setpriv", "serve", "÷setpriv", "shared", "÷setpriv", "run÷setp", "serve÷sudo"
    );
    let mut ratios: Vec<[f64; 4]> = Vec::new();
    for round in 1..=rounds {
        rand::seq::SliceRandom::shuffle(&mut order[..], &mut rand::thread_rng());
        let mut medians = vec![0.0; peers.len()];
        for &i in &order {
            let mut us = Vec::with_capacity(calls);
            for _ in 0..calls {
                let t = Instant::now();
                (peers[i].1)();
                us.push(t.elapsed().as_secs_f64() * 1e6);
            }
            medians[i] = stats(us).0;
        }
        let [private, shared, setpriv, sudo, run] = medians[..] else {
            unreachable!("five peers")
        };
        let r = [
            private / setpriv,
            shared / setpriv,
            run / setpriv,
            private / sudo,
        ];
        println!(
            "{round:<6} {:>8.2} {:>8.2} {:>9.2} {:>8.2} {:>9.2} {:>9.2} {:>9.2}",
            setpriv / 1e3,
            private / 1e3,
            r[0],
            shared / 1e3,
            r[1],
            r[2],
            r[3]
        );
        ratios.push(r);
        let row: serde_json::Map<String, serde_json::Value> = peers
            .iter()
            .zip(&medians)
            .map(|((label, _), m)| (label.to_string(), json!(m)))
            .collect();
        table.push(serde_json::Value::Object(row));
    }
    let range = |k: usize| {
        let v = ratios.iter().map(|r| r[k]);
        (
            v.clone().fold(f64::INFINITY, f64::min),
            v.fold(0.0, f64::max),
        )
    };
    for (k, what, limit) in [
        (0, "serve (private view) ÷ setpriv", 1.0),
        (1, "serve (shared view) ÷ setpriv", 1.0),
        (2, "tono-seal run ÷ setpriv", 2.0),
        (3, "serve ÷ sudo -u", 0.35),
    ] {
        let (lo, hi) = range(k);
        let verdict = if hi <= limit {
            "held"
        } else if lo <= limit {
            "held in some rounds"
        } else {
            "NOT held"
        };
        println!("target {what:<36} {lo:.2}–{hi:.2} (≤ {limit}) {verdict}");
    }
    serde_json::Value::Array(table)
}

/// 64 calls across 64 users at once through `serve` against 64 `setpriv`
/// runs at once, TP_ROUNDS rounds in a random order each; calls per
/// second (medians), printed and returned.
fn throughput_phase(serve: &mut Serve, users: &[String]) -> serde_json::Value {
    let rounds = env_count("TP_ROUNDS", 20);
    let names: Vec<&str> = users.iter().map(String::as_str).collect();
    let uids: Vec<u32> = (0..users.len() as u32)
        .map(|i| FIRST_CONCURRENT_UID + i)
        .collect();
    let setprivs = || -> Vec<Command> {
        uids.iter()
            .map(|&u| {
                let mut c = setpriv_to(u);
                c.arg("/bin/true");
                c
            })
            .collect()
    };
    // Warm up: each user's store read once, the pool full.
    for _ in 0..2 {
        serve.calls(&names);
        all_at_once(&mut setprivs());
    }
    let (mut served, mut peers) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let serve_first = rand::random::<bool>();
        for which in [serve_first, !serve_first] {
            let t = Instant::now();
            if which {
                serve.calls(&names);
                served.push(names.len() as f64 / t.elapsed().as_secs_f64());
            } else {
                all_at_once(&mut setprivs());
                peers.push(names.len() as f64 / t.elapsed().as_secs_f64());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (s, p) = (median(&served), median(&peers));
    let (lo, hi) = (
        served
            .iter()
            .zip(&peers)
            .map(|(a, b)| a / b)
            .fold(f64::INFINITY, f64::min),
        served
            .iter()
            .zip(&peers)
            .map(|(a, b)| a / b)
            .fold(0.0, f64::max),
    );
    println!(
        "\nthroughput, {} calls across {} users at once, {rounds} rounds: serve {s:.0} calls/s, setpriv {p:.0} runs/s (medians), ratio {:.2} (rounds {lo:.2}–{hi:.2})",
        names.len(),
        names.len(),
        s / p
    );
    let verdict = if s / p >= 1.0 { "held" } else { "NOT held" };
    println!(
        "target {:<36} {:.2} (≥ 1.0) {verdict}",
        "serve throughput ÷ setpriv's",
        s / p
    );
    json!({"serve_calls_per_s": s, "setpriv_runs_per_s": p, "ratio": s / p, "rounds": rounds})
}

/// A horizontal bar chart of median and p99 per case, as SVG, drawn from
/// the rows of `drop.json` (no plotting crate: a chart this plain does not
/// need font metrics, and the bench stays light to build).
fn chart(rows: &[serde_json::Value], rounds: usize) -> String {
    // Room for the longest label at about 6.5 px a character (12 px sans).
    let longest = rows
        .iter()
        .map(|r| r["case"].as_str().unwrap().chars().count())
        .max()
        .unwrap_or(0);
    let (left, width, row_h, top) = (16.0 + 6.5 * longest as f64, 420.0, 34.0, 40.0);
    let max = rows
        .iter()
        .map(|r| r["p99_us"].as_f64().unwrap())
        .fold(1.0, f64::max);
    // A round tick step: 1, 2 or 5 × 10^n µs, about five ticks.
    let step = common::tick_step(max, 5.0);
    let scale = |us: f64| us / (step * (max / step).ceil()) * width;
    let height = top + row_h * rows.len() as f64 + 40.0;
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="10" y="20" font-size="14">drop cost per call, {rounds} interleaved rounds: median (dark) and p99 (light), ms</text>
"##,
        w = left + width + 30.0
    );
    let axis_y = top + row_h * rows.len() as f64 + 4.0;
    let mut tick = 0.0;
    while tick <= step * (max / step).ceil() + 0.5 {
        let x = left + scale(tick);
        svg += &format!(
            r##"<line x1="{x:.1}" y1="{top0}" x2="{x:.1}" y2="{axis_y}" stroke="#ccc"/>
<text x="{x:.1}" y="{ty}" text-anchor="middle">{ms}</text>
"##,
            top0 = top - 4.0,
            ty = axis_y + 16.0,
            ms = tick / 1000.0,
        );
        tick += step;
    }
    for (i, row) in rows.iter().enumerate() {
        let y = top + row_h * i as f64;
        let (median, p99) = (
            row["median_us"].as_f64().unwrap(),
            row["p99_us"].as_f64().unwrap(),
        );
        let label = row["case"].as_str().unwrap().replace('&', "&amp;");
        svg += &format!(
            r##"<text x="{lx}" y="{ty}" text-anchor="end">{label}</text>
<rect x="{left}" y="{y}" width="{p99w:.1}" height="24" fill="#9ecae1"/>
<rect x="{left}" y="{y6}" width="{mw:.1}" height="12" fill="#08519c"/>
<text x="{tx:.1}" y="{ty}">{m:.2} / {p:.2}</text>
"##,
            lx = left - 8.0,
            ty = y + 16.0,
            y6 = y + 6.0,
            p99w = scale(p99),
            mw = scale(median),
            tx = left + scale(p99) + 4.0,
            m = median / 1000.0,
            p = p99 / 1000.0,
        );
    }
    svg + "</svg>\n"
}
