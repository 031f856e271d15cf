//! The drop against its peers, interleaved in one run, as ratios to
//! `setpriv`. As root: creates its own throwaway user with 3 sealed
//! secrets, installs `sudo` if missing, warms up, then runs rounds of every
//! case. `cargo bench --bench drop` (ROUNDS=N to change the 300 default).
//! Writes `target/bench/drop.json`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::json;
use tono_seal::classify::Policy;
use tono_seal::drop::run::{drop_and_run, DropRequest, RunOptions, SecretGrant};
use tono_seal::drop::spawn::Launcher;
use tono_seal::drop::user::TargetUser;
use tono_seal::turn::account;

const UID: u32 = 61950;

/// A labelled benchmark case.
type Case<'a> = (&'static str, Box<dyn Fn() + 'a>);

fn bin(name: &str) -> std::path::PathBuf {
    // Benches run from target/release/deps; the binaries are one level up.
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join(name)
}

fn quiet(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

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
    let _ = account::remove_user(&name);
    let user = account::ensure_user(&name, UID, UID, Path::new("/home")).expect("bench user");
    let run_tono = |args: &[&str], input: &[u8]| {
        let mut c = Command::new(&tono)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(input).unwrap();
        assert!(c.wait().unwrap().success(), "tono-seal {args:?}");
    };
    run_tono(&["keygen", "--user", &name], b"");
    for s in ["a", "b", "c"] {
        run_tono(
            &["seal", "--user", &name, s],
            format!("secret-{s}-value-0123456789abcdef").as_bytes(),
        );
    }
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(300);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let launcher = Launcher::at(&launch);
    let policy = Policy::default();
    let grants: Vec<SecretGrant> = ["a", "b", "c"]
        .iter()
        .map(|s| SecretGrant::parse(s).unwrap())
        .collect();
    let call_plain =
        serde_json::to_vec(&json!({"tool": "spawn", "args": {"argv": ["/bin/true"]}})).unwrap();
    let call_secrets = serde_json::to_vec(
        &json!({"tool": "spawn", "args": {"argv": ["/bin/true"], "secrets": ["a", "b", "c"]}}),
    )
    .unwrap();
    let uid = UID.to_string();
    let drop_call = |call: &[u8], cgroup: bool, user: &TargetUser| {
        let options = RunOptions {
            cgroup,
            ..RunOptions::default()
        };
        let req = DropRequest {
            launcher: &launcher,
            policy: &policy,
            user,
            grants: &grants,
            call,
            options,
        };
        let out = rt.block_on(drop_and_run(&req));
        assert_eq!(out.exit_code, Some(0), "{out:?}");
    };
    let cases: Vec<Case> = vec![
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
            Box::new(|| drop_call(&call_plain, true, &user)),
        ),
        (
            "6 drop_and_run spawn, 3 secrets",
            Box::new(|| drop_call(&call_secrets, true, &user)),
        ),
        (
            "6b drop_and_run, 3 secrets, no cgroup",
            Box::new(|| drop_call(&call_secrets, false, &user)),
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
            samples[i].push(t.elapsed().as_secs_f64() * 1e6);
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
    for (i, (label, _)) in cases.iter().enumerate() {
        let (m, p90, p99) = stats(samples[i].clone());
        println!(
            "{label:<56} {m:>9.0} {p90:>9.0} {p99:>9.0} {:>8.2}",
            m / setpriv
        );
        rows.push(json!({"case": label, "median_us": m, "p90_us": p90, "p99_us": p99, "ratio_to_setpriv": m / setpriv}));
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    let _ = std::fs::create_dir_all(&dir);
    std::fs::write(
        dir.join("drop.json"),
        serde_json::to_vec_pretty(&rows).unwrap(),
    )
    .unwrap();
    drop(cases);
    let _ = account::remove_user(&name);
}
