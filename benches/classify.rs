//! Classifier cost per call over the adversarial corpus (calls under 1 KiB),
//! beside `serde_json::from_slice` of the same bytes in the same run.
//! Prints median and p99 for both, two ways: over single timed calls taking
//! turns through the corpus (the target is judged on this one, the stricter),
//! and over the corpus of each call's own hot-loop cost (what a criterion
//! benchmark per call would report). `cargo bench --bench classify`.

use std::hint::black_box;
use std::time::Instant;

use tono_seal::classify::{classify_raw, Policy, MAX_CALL_BYTES};

fn corpus() -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("adversarial");
    let mut calls = Vec::new();
    for entry in std::fs::read_dir(dir).expect("adversarial/") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("read");
        for line in text.lines() {
            let case: serde_json::Value = serde_json::from_str(line).expect("case");
            let raw = match &case["raw"] {
                serde_json::Value::String(s) => s.as_bytes().to_vec(),
                _ => serde_json::to_vec(&case["call"]).expect("call"),
            };
            if raw.len() < 1024 && case.get("policy").is_none() {
                calls.push(raw);
            }
        }
    }
    calls
}

/// Calls just under [`MAX_CALL_BYTES`]: many distinct keys at the top
/// level and in `args`, many headers, and one long string.
fn large_calls() -> Vec<(&'static str, Vec<u8>)> {
    let keys = |prefix: &str| {
        let mut s = String::new();
        let mut i = 0;
        while s.len() < MAX_CALL_BYTES - 256 {
            s.push_str(&format!("\"{prefix}{i}\":\"v\","));
            i += 1;
        }
        s
    };
    let long = "a".repeat(MAX_CALL_BYTES - 256);
    vec![
        (
            "distinct unknown top-level keys",
            format!("{{{}\"tool\":\"a\",\"args\":{{}}}}", keys("k")).into_bytes(),
        ),
        (
            "distinct keys in args",
            format!("{{\"tool\":\"a\",\"args\":{{{}\"z\":1}}}}", keys("k")).into_bytes(),
        ),
        (
            "http_get with distinct headers",
            format!(
                "{{\"tool\":\"http_get\",\"args\":{{\"url\":\"https://example.com/\",\"headers\":{{{}\"x\":\"1\"}}}}}}",
                keys("x-h")
            )
            .into_bytes(),
        ),
        (
            "one long string",
            format!("{{\"tool\":\"a\",\"args\":{{\"s\":\"{long}\"}}}}").into_bytes(),
        ),
    ]
}

fn percentiles(mut ns: Vec<u64>) -> (f64, f64) {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 - 1.0) * q) as usize] as f64 / 1000.0;
    (at(0.5), at(0.99))
}

/// Times each of `fs` on every call, one sample per call, `rounds` times.
/// The functions take turns in blocks of [`BLOCK`] rounds, so a slow
/// minute of a shared VM falls on all of them alike, while only the first
/// call of a block meets caches the other functions left behind.
fn time<const N: usize>(
    calls: &[Vec<u8>],
    rounds: usize,
    fs: &mut [&mut Timed; N],
) -> [Vec<u64>; N] {
    let mut samples: [Vec<u64>; N] =
        std::array::from_fn(|_| Vec::with_capacity(calls.len() * rounds));
    for _ in 0..rounds.div_ceil(BLOCK) {
        for (f, out) in fs.iter_mut().zip(samples.iter_mut()) {
            for _ in 0..BLOCK {
                for raw in calls {
                    let start = Instant::now();
                    f(raw);
                    out.push(start.elapsed().as_nanos() as u64);
                }
            }
        }
    }
    samples
}

/// One function under test, given one call's bytes.
type Timed<'a> = dyn FnMut(&[u8]) + 'a;

/// Rounds in a row for one function.
const BLOCK: usize = 50;

/// The median over `batches` batches of `f`'s cost per run, `runs` runs to
/// a batch, in ns.
fn median_ns(batches: usize, runs: u32, mut f: impl FnMut()) -> f64 {
    let mut per_run: Vec<f64> = (0..batches)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..runs {
                f();
            }
            start.elapsed().as_nanos() as f64 / f64::from(runs)
        })
        .collect();
    per_run.sort_by(f64::total_cmp);
    per_run[batches / 2]
}

/// The cost of `f` in a hot loop, in ns.
fn hot_ns(f: impl FnMut()) -> f64 {
    median_ns(11, 500, f)
}

fn main() {
    let calls = corpus();
    let policy = Policy::default();
    // Each function under test, once; the closures are `Copy`.
    let classify_once = |raw: &[u8]| drop(black_box(classify_raw(black_box(raw), &policy)));
    let from_slice_once = |raw: &[u8]| {
        drop(black_box(serde_json::from_slice::<serde_json::Value>(
            black_box(raw),
        )))
    };
    let mut classify = classify_once;
    let mut strict = |raw: &[u8]| drop(black_box(tono_seal::classify::parse_call(black_box(raw))));
    // The timer alone: what every sample carries besides the call.
    let mut empty = |raw: &[u8]| {
        let _ = black_box(raw);
    };
    let mut parse = from_slice_once;
    // Warm up.
    time(
        &calls,
        50,
        &mut [&mut classify, &mut strict, &mut parse, &mut empty],
    );
    let rounds = 400;
    let [classify, strict, parse, empty] = time(
        &calls,
        rounds,
        &mut [&mut classify, &mut strict, &mut parse, &mut empty],
    );
    // The slowest calls by their own median: where the p99 comes from.
    let mut per_call: Vec<(u64, usize)> = (0..calls.len())
        .map(|i| {
            let mut own: Vec<u64> = (0..rounds).map(|r| classify[r * calls.len() + i]).collect();
            own.sort_unstable();
            (own[rounds / 2], i)
        })
        .collect();
    per_call.sort_unstable_by(|a, b| b.cmp(a));
    let (c50, c99) = percentiles(classify);
    let (p50, p99) = percentiles(parse);
    let (s50, s99) = percentiles(strict);
    let (e50, e99) = percentiles(empty);
    println!("{} calls under 1 KiB x {rounds} rounds", calls.len());
    println!("{:<34} {:>10} {:>10}", "", "median µs", "p99 µs");
    println!(
        "{:<34} {c50:>10.3} {c99:>10.3}",
        "classify_raw (parse + verdict)"
    );
    println!(
        "{:<34} {s50:>10.3} {s99:>10.3}",
        "parse_call (strict parse only)"
    );
    println!(
        "{:<34} {p50:>10.3} {p99:>10.3}",
        "serde_json::from_slice::<Value>"
    );
    println!(
        "{:<34} {e50:>10.3} {e99:>10.3}",
        "timer alone (in every sample)"
    );
    println!("the slowest calls: median in the run; hot (one call in a loop), and of that, the url crate's Url::parse of its URL alone");
    for (ns, i) in per_call.iter().take(5) {
        let raw = &calls[*i];
        let shown: String = String::from_utf8_lossy(raw).chars().take(60).collect();
        let hot = hot_ns(|| classify_once(raw));
        let url = serde_json::from_slice::<serde_json::Value>(raw)
            .ok()
            .and_then(|v| v["args"]["url"].as_str().map(str::to_owned));
        let parse = url.map_or(0.0, |u| {
            hot_ns(|| drop(black_box(url::Url::parse(black_box(&u)))))
        });
        println!(
            "  {:.3} µs  hot {:.3} µs, Url::parse {:.3} µs  {shown}",
            *ns as f64 / 1000.0,
            hot / 1000.0,
            parse / 1000.0
        );
    }
    // Criterion's view: each call's own cost in a hot loop; the p99 is
    // then over the calls of the corpus, not over single samples.
    let hot_p99 = |f: &dyn Fn(&[u8])| {
        let ns: Vec<u64> = calls.iter().map(|raw| hot_ns(|| f(raw)) as u64).collect();
        percentiles(ns)
    };
    let (hc50, hc99) = hot_p99(&classify_once);
    let (hp50, hp99) = hot_p99(&from_slice_once);
    println!("each call hot, then median and p99 over the calls:");
    println!("{:<34} {hc50:>10.3} {hc99:>10.3}", "classify_raw");
    println!(
        "{:<34} {hp50:>10.3} {hp99:>10.3}",
        "serde_json::from_slice::<Value>"
    );
    println!(
        "classify p99 / from_slice p99: {:.2}x single samples, {:.2}x hot",
        c99 / p99,
        hc99 / hp99
    );
    // Calls near the 1 MiB limit, shaped to find anything worse than
    // linear: the cost is per call, beside from_slice of the same bytes.
    println!("calls near 1 MiB: median of 5, ms");
    for (what, raw) in large_calls() {
        let ms = |f: &dyn Fn(&[u8])| median_ns(5, 1, || f(&raw)) / 1e6;
        let (c, p) = (ms(&classify_once), ms(&from_slice_once));
        println!(
            "  {what:<40} classify {c:>7.2}  from_slice {p:>7.2}  ({:.1}x)",
            c / p
        );
    }
    let held = |p99: f64| if p99 <= 2.0 { "met" } else { "NOT met" };
    println!(
        "target p99 <= 2 µs: single samples {}, each call hot (criterion's measure) {}",
        held(c99),
        held(hc99)
    );
}
