//! How a call's cost grows, curve by curve, each point timed against
//! `setpriv` in the same interleaved rounds: secrets per call (0, 1, 3, 10,
//! 30 of 64 bytes), a secret's size (64 B to the store's 1 MiB), secrets
//! in the store the call did not ask for (0, 100, 10,000), concurrent calls
//! across as many users (1 to 64: calls per second and p99), and users in
//! the user database that the worker does not serve (1, 100, 10,000: the
//! worker's RSS and the per-call cost, user lookup included).
//!
//! As root: `cargo bench --bench curves` (ROUNDS=N, default 100). Writes
//! `target/bench/curves.json` and one SVG chart per curve beside it. Users
//! are `tonotest61951`…`61954` and `tonotest61800`…`61863`; the
//! users-database curve appends `tonotestfill*` lines (uid 61999, no home,
//! no shell) to `/etc/passwd` and puts the file back as it was.

use std::path::{Path, PathBuf};
use std::time::Instant;

mod common;

use common::{bin, provision, quiet, setpriv_to, tono};
use serde_json::{json, Value};
use tono_seal::classify::Policy;
use tono_seal::drop::{drop_and_run, DropRequest, Launcher, RunOptions, SecretGrant};
use tono_seal::turn::account;
use tono_seal::user::TargetUser;

/// The user of the per-call curves (count and size of secrets, users).
const MAIN_UID: u32 = 61951;
/// Users whose stores hold 0, 100 and 10,000 secrets no call asks for.
const STORE_UIDS: [u32; 3] = [61952, 61953, 61954];
const UNASKED: [usize; 3] = [0, 100, 10_000];
/// The concurrency curve's users, one per concurrent call.
const FIRST_CONCURRENT_UID: u32 = 61800;
const CONCURRENCY: [usize; 5] = [1, 2, 4, 16, 64];
/// The uid of the users-database filler lines (never served).
const FILLER_UID: u32 = 61999;
const SECRET_COUNTS: [usize; 5] = [0, 1, 3, 10, 30];
/// A secret's sizes: 120 KiB is about the most an environment variable
/// holds (Linux's MAX_ARG_STRLEN is 128 KiB for `NAME=value`), 1 MiB the
/// store's limit.
const SIZES: [(usize, &str); 5] = [
    (64, "64 B"),
    (4 << 10, "4 KiB"),
    (64 << 10, "64 KiB"),
    (120 << 10, "120 KiB"),
    (1 << 20, "1 MiB"),
];

/// A point of a curve: its label and one call at it.
type Point<'a> = (String, Box<dyn Fn() + 'a>);

fn percentile(us: &[f64], q: f64) -> f64 {
    let mut us = us.to_vec();
    us.sort_by(|a, b| a.total_cmp(b));
    us[((us.len() - 1) as f64 * q) as usize]
}

/// The worker's resident set, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A user of the bench's own, made fresh, with `a`, `b`, `c` sealed.
fn bench_user(uid: u32) -> TargetUser {
    let name = format!("tonotest{uid}");
    let _ = account::remove_user(&name, &Launcher::at(bin("tono-launch")));
    let user = account::ensure_user(&name, uid, uid, Path::new("/home")).expect("bench user");
    provision(&bin("tono-seal"), &name);
    user
}

/// Runs `sh -c script` as `user`.
fn as_user(user: &TargetUser, script: &str) {
    assert!(
        quiet(setpriv_to(user.uid).args(["--", "sh", "-c", script])),
        "{script}"
    );
}

/// One worker: its launcher, policy and runtime.
struct Worker {
    launcher: Launcher,
    policy: Policy,
    rt: tokio::runtime::Runtime,
}

impl Worker {
    /// One `spawn /bin/true` call as `name` (looked up, as a worker
    /// serving a request does) with `secrets`; the outcome's exit code.
    fn call(&self, name: &str, secrets: &[String]) -> Option<i32> {
        let user = TargetUser::resolve(name).unwrap();
        self.rt
            .block_on(call_as(&self.launcher, &self.policy, &user, secrets))
    }

    /// A point of a per-call curve: one call as `who` with `secrets`,
    /// which must run (or, if `refusable`, may be refused).
    fn point(&self, label: String, who: &str, secrets: Vec<String>, refusable: bool) -> Point<'_> {
        let who = who.to_owned();
        let call = move || {
            let code = self.call(&who, &secrets);
            assert!(code == Some(0) || refusable, "{who} {secrets:?}: {code:?}");
        };
        (label, Box::new(call))
    }
}

/// The three secrets every bench user has.
fn abc() -> Vec<String> {
    ["a", "b", "c"].map(String::from).to_vec()
}

async fn call_as(
    launcher: &Launcher,
    policy: &Policy,
    user: &TargetUser,
    secrets: &[String],
) -> Option<i32> {
    let grants: Vec<SecretGrant> = secrets
        .iter()
        .map(|s| SecretGrant::parse(s).unwrap())
        .collect();
    let call = serde_json::to_vec(
        &json!({"tool": "spawn", "args": {"argv": ["/bin/true"], "secrets": secrets}}),
    )
    .unwrap();
    drop_and_run(&DropRequest {
        launcher,
        policy,
        user,
        grants: &grants,
        call: &call,
        options: RunOptions::default(),
    })
    .await
    .exit_code
}

fn setpriv(uid: u32) -> bool {
    quiet(setpriv_to(uid).args(["--no-new-privs", "/bin/true"]))
}

/// Times `points` and `setpriv` interleaved, in a new random order each
/// round, with a 3 ms gap after each call (what a call leaves to finish in
/// the background finishes there); medians and p99 in µs, per point.
fn interleaved(rounds: usize, points: &[Point<'_>]) -> (f64, Vec<(f64, f64)>) {
    let setpriv_case: Box<dyn Fn()> = Box::new(|| assert!(setpriv(MAIN_UID)));
    let mut all: Vec<&dyn Fn()> = vec![&*setpriv_case];
    all.extend(points.iter().map(|(_, f)| &**f));
    for f in &all {
        for _ in 0..5 {
            f();
        }
    }
    let mut samples = vec![Vec::with_capacity(rounds); all.len()];
    let mut order: Vec<usize> = (0..all.len()).collect();
    for _ in 0..rounds {
        rand::seq::SliceRandom::shuffle(&mut order[..], &mut rand::thread_rng());
        for &i in &order {
            let t = Instant::now();
            all[i]();
            samples[i].push(t.elapsed().as_secs_f64() * 1e6);
            std::thread::sleep(std::time::Duration::from_millis(3));
        }
    }
    let stats: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| (percentile(s, 0.5), percentile(s, 0.99)))
        .collect();
    (stats[0].0, stats[1..].to_vec())
}

/// Restores `/etc/passwd` as it was (less any filler lines) when dropped.
struct PasswdGuard(Vec<u8>);

impl PasswdGuard {
    /// `/etc/passwd` without filler lines: a run that panicked (benches
    /// abort, so no `Drop` runs) left its lines, and this removes them.
    fn take() -> Self {
        let text = std::fs::read_to_string("/etc/passwd").unwrap();
        let kept: String = text
            .lines()
            .filter(|l| !l.starts_with("tonotestfill"))
            .map(|l| format!("{l}\n"))
            .collect();
        let guard = Self(kept.into_bytes());
        guard.put("");
        guard
    }

    fn put(&self, extra: &str) {
        let mut text = self.0.clone();
        text.extend_from_slice(extra.as_bytes());
        let tmp = Path::new("/etc/passwd.tono-bench");
        std::fs::write(tmp, text).unwrap();
        std::fs::set_permissions(tmp, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        std::fs::rename(tmp, "/etc/passwd").unwrap();
    }
}

impl Drop for PasswdGuard {
    fn drop(&mut self) {
        self.put("");
    }
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("the curves benchmark creates users and must run as root");
        std::process::exit(2);
    }
    let (launch, tono_bin) = (bin("tono-launch"), bin("tono-seal"));
    assert!(
        launch.exists() && tono_bin.exists(),
        "build the binaries first: cargo build --release"
    );
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(100);
    let worker = Worker {
        launcher: Launcher::at(&launch),
        policy: Policy::default(),
        rt: tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    };
    let set_up = Instant::now();
    let main_user = bench_user(MAIN_UID);
    let main_name = main_user.name.clone();
    for i in 0..30 {
        tono(
            &bin("tono-seal"),
            &["seal", "--user", &main_name, &format!("n{i}")],
            format!("{i:02}-{}", "v".repeat(61)).as_bytes(),
        );
    }
    for (size, _) in SIZES {
        // Printable, as most secrets are (and as masking expects).
        let value: String = (0..size).map(|i| (b'a' + (i % 26) as u8) as char).collect();
        tono(
            &bin("tono-seal"),
            &["seal", "--user", &main_name, &format!("size{size}")],
            value.as_bytes(),
        );
    }
    let store_users: Vec<TargetUser> = STORE_UIDS.iter().map(|&u| bench_user(u)).collect();
    for (user, unasked) in store_users.iter().zip(UNASKED) {
        if unasked > 0 {
            // Copies of a sealed file, never opened: only their presence counts.
            as_user(
                user,
                &format!(
                    "cd {home}/.tono/secrets && umask 077 && perl -e 'local $/; open(A, \"<\", \"a.age\"); my $d = <A>; \
                     for (1..{unasked}) {{ open(F, \">\", \"unasked$_.age\") or die; print F $d; close F }}'",
                    home = user.home.display()
                ),
            );
        }
    }
    let concurrent: Vec<TargetUser> = (0..*CONCURRENCY.iter().max().unwrap() as u32)
        .map(|i| bench_user(FIRST_CONCURRENT_UID + i))
        .collect();
    eprintln!("set up in {:.1} s", set_up.elapsed().as_secs_f64());

    let names = |prefix: &str, n: usize| -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    };
    let mut curves = Vec::new();

    // Secrets per call.
    let points: Vec<Point<'_>> = SECRET_COUNTS
        .iter()
        .map(|&n| worker.point(n.to_string(), &main_name, names("n", n), false))
        .collect();
    curves.push(per_call_curve(
        "secrets per call (64 B each)",
        "count",
        rounds,
        &points,
    ));

    // A secret's size; over what an environment variable holds, the call
    // is refused, and the point is the cost of the refusal.
    let points: Vec<Point<'_>> = SIZES
        .iter()
        .map(|&(size, label)| {
            let secrets = vec![format!("size{size}")];
            worker.point(label.to_owned(), &main_name, secrets, size > 128 << 10)
        })
        .collect();
    curves.push(per_call_curve("one secret's size", "size", rounds, &points));

    // Secrets in the store the call did not ask for.
    let points: Vec<Point<'_>> = store_users
        .iter()
        .zip(UNASKED)
        .map(|(user, unasked)| worker.point(unasked.to_string(), &user.name, abc(), false))
        .collect();
    curves.push(per_call_curve(
        "secrets in the store not asked for (3 asked)",
        "unasked",
        rounds,
        &points,
    ));

    curves.push(concurrency_curve(&worker, &concurrent));
    curves.push(users_curve(&worker, &main_name, rounds));

    let dir = common::write_result("curves.json", &Value::Array(curves.clone()));
    for (i, curve) in curves.iter().enumerate() {
        let file: PathBuf = dir.join(format!("curve-{}.svg", curve["file"].as_str().unwrap()));
        std::fs::write(&file, line_chart(curve)).unwrap();
        if i == 0 {
            eprintln!("wrote {}/curves.json and curve-*.svg", dir.display());
        }
    }
    for uid in STORE_UIDS
        .iter()
        .copied()
        .chain([MAIN_UID])
        .chain((0..concurrent.len() as u32).map(|i| FIRST_CONCURRENT_UID + i))
    {
        let _ = account::remove_user(&format!("tonotest{uid}"), &Launcher::at(&launch));
    }
}

/// A curve of per-call medians and p99 against `setpriv`, printed and
/// returned as JSON.
fn per_call_curve(title: &str, file: &str, rounds: usize, points: &[Point<'_>]) -> Value {
    let (setpriv, stats) = interleaved(rounds, points);
    println!("\n{title}: {rounds} interleaved rounds, setpriv median {setpriv:.0} µs");
    println!(
        "{:<10} {:>10} {:>10} {:>9}",
        "point", "median µs", "p99 µs", "÷setpriv"
    );
    let mut rows = Vec::new();
    for ((label, _), (median, p99)) in points.iter().zip(stats) {
        println!(
            "{label:<10} {median:>10.0} {p99:>10.0} {:>9.2}",
            median / setpriv
        );
        rows.push(json!({"point": label, "median_us": median, "p99_us": p99, "ratio_to_setpriv": median / setpriv}));
    }
    json!({"title": title, "file": file, "unit": "µs a call", "setpriv_us": setpriv, "points": rows})
}

/// Calls per second and latency with 1…64 calls at once, each user one
/// task issuing calls back to back.
fn concurrency_curve(worker: &Worker, users: &[TargetUser]) -> Value {
    const CALLS: usize = 256;
    println!("\nconcurrent calls across as many users, {CALLS} calls a point, 3 secrets each");
    println!(
        "{:<10} {:>10} {:>10} {:>10}",
        "at once", "calls/s", "median ms", "p99 ms"
    );
    let secrets = abc();
    let mut rows = Vec::new();
    for at_once in CONCURRENCY {
        let issued = std::sync::atomic::AtomicUsize::new(0);
        let run = || {
            worker.rt.block_on(async {
                let tasks = users[..at_once].iter().map(|user| {
                    let (issued, secrets) = (&issued, &secrets);
                    async move {
                        let mut took = Vec::new();
                        while issued.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < CALLS {
                            let t = Instant::now();
                            let code =
                                call_as(&worker.launcher, &worker.policy, user, secrets).await;
                            assert_eq!(code, Some(0));
                            took.push(t.elapsed().as_secs_f64() * 1e3);
                        }
                        took
                    }
                });
                futures::future::join_all(tasks).await
            })
        };
        // One warm-up pass (the pool fills for each kind), then the timed one.
        run();
        issued.store(0, std::sync::atomic::Ordering::SeqCst);
        let t = Instant::now();
        let took: Vec<f64> = run().into_iter().flatten().collect();
        let per_second = CALLS as f64 / t.elapsed().as_secs_f64();
        let (median, p99) = (percentile(&took, 0.5), percentile(&took, 0.99));
        println!("{at_once:<10} {per_second:>10.0} {median:>10.2} {p99:>10.2}");
        rows.push(json!({"point": at_once.to_string(), "calls_per_second": per_second, "median_ms": median, "p99_ms": p99}));
    }
    json!({"title": "concurrent calls across as many users", "file": "concurrency", "unit": "calls/s and p99 ms", "points": rows})
}

/// The per-call cost (the user looked up each call) and the worker's RSS
/// with 1, 100 and 10,000 users in `/etc/passwd`, all but one never served.
fn users_curve(worker: &Worker, main: &str, rounds: usize) -> Value {
    let guard = PasswdGuard::take();
    println!("\nusers in the user database (one served), {rounds} rounds a point");
    println!(
        "{:<10} {:>10} {:>10} {:>9} {:>12}",
        "users", "median µs", "p99 µs", "÷setpriv", "worker RSS KiB"
    );
    let mut rows = Vec::new();
    for users in [1usize, 100, 10_000] {
        let filler: String = (1..users)
            .map(|i| {
                format!(
                    "tonotestfill{i}:x:{FILLER_UID}:{FILLER_UID}::/nonexistent:/usr/sbin/nologin\n"
                )
            })
            .collect();
        guard.put(&filler);
        let point = vec![worker.point(users.to_string(), main, abc(), false)];
        let (setpriv, stats) = interleaved(rounds, &point);
        let (median, p99) = stats[0];
        let rss = rss_kib();
        println!(
            "{users:<10} {median:>10.0} {p99:>10.0} {:>9.2} {rss:>12}",
            median / setpriv
        );
        rows.push(json!({"point": users.to_string(), "median_us": median, "p99_us": p99, "ratio_to_setpriv": median / setpriv, "setpriv_us": setpriv, "rss_kib": rss}));
    }
    drop(guard);
    json!({"title": "users in /etc/passwd (one served)", "file": "users", "unit": "µs a call", "points": rows})
}

/// A small line chart of one curve: median and p99 per point (or calls
/// per second and p99 for the concurrency curve), as SVG.
fn line_chart(curve: &Value) -> String {
    let points = curve["points"].as_array().unwrap();
    let concurrency = points[0].get("calls_per_second").is_some();
    let series: Vec<(&str, &str, Vec<f64>)> = if concurrency {
        vec![
            (
                "calls/s",
                "#08519c",
                points
                    .iter()
                    .map(|p| p["calls_per_second"].as_f64().unwrap())
                    .collect(),
            ),
            (
                "p99 ms ×100",
                "#e6550d",
                points
                    .iter()
                    .map(|p| p["p99_ms"].as_f64().unwrap() * 100.0)
                    .collect(),
            ),
        ]
    } else {
        vec![
            (
                "median µs",
                "#08519c",
                points
                    .iter()
                    .map(|p| p["median_us"].as_f64().unwrap())
                    .collect(),
            ),
            (
                "p99 µs",
                "#9ecae1",
                points
                    .iter()
                    .map(|p| p["p99_us"].as_f64().unwrap())
                    .collect(),
            ),
        ]
    };
    let baseline = curve["setpriv_us"].as_f64();
    let (left, top, width, height) = (60.0, 40.0, 360.0, 180.0);
    let max = series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .chain(baseline)
        .fold(1.0, f64::max);
    let step = common::tick_step(max, 4.0);
    let top_value = step * (max / step).ceil();
    let x = |i: usize| left + width * (i as f64 + 0.5) / points.len() as f64;
    let y = |v: f64| top + height - v / top_value * height;
    let title = curve["title"].as_str().unwrap();
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">
<rect width="100%" height="100%" fill="white"/>
<text x="10" y="18" font-size="13">{title}</text>
"##,
        w = left + width + 20.0,
        h = top + height + 60.0,
    );
    let mut tick = 0.0;
    while tick <= top_value + step / 2.0 {
        svg += &format!(
            r##"<line x1="{left}" y1="{yy:.1}" x2="{r}" y2="{yy:.1}" stroke="#ddd"/><text x="{lx}" y="{ty:.1}" text-anchor="end">{tick}</text>
"##,
            yy = y(tick),
            r = left + width,
            lx = left - 6.0,
            ty = y(tick) + 4.0,
        );
        tick += step;
    }
    for (i, p) in points.iter().enumerate() {
        svg += &format!(
            r##"<text x="{xx:.1}" y="{ty}" text-anchor="middle">{label}</text>
"##,
            xx = x(i),
            ty = top + height + 16.0,
            label = p["point"].as_str().unwrap(),
        );
    }
    if let Some(b) = baseline {
        svg += &format!(
            r##"<line x1="{left}" y1="{yy:.1}" x2="{r}" y2="{yy:.1}" stroke="#333" stroke-dasharray="4 3"/><text x="{r}" y="{ty:.1}" text-anchor="end">setpriv {b:.0}</text>
"##,
            yy = y(b),
            r = left + width,
            ty = y(b) - 4.0,
        );
    }
    for (k, (name, colour, values)) in series.iter().enumerate() {
        let path: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        svg += &format!(
            r##"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>
"##,
            path.join(" ")
        );
        for (i, v) in values.iter().enumerate() {
            svg += &format!(
                r##"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>
"##,
                x(i),
                y(*v)
            );
        }
        svg += &format!(
            r##"<rect x="{lx}" y="{ly}" width="10" height="10" fill="{colour}"/><text x="{tx}" y="{ty}">{name}</text>
"##,
            lx = left + 130.0 * k as f64,
            ly = top + height + 30.0,
            tx = left + 130.0 * k as f64 + 14.0,
            ty = top + height + 39.0,
        );
    }
    svg + "</svg>\n"
}
