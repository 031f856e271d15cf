//! Classifier cost per call over the adversarial corpus (calls under 1 KiB),
//! beside `serde_json::from_slice` of the same bytes in the same run.
//! Prints median and p99 per call for both. `cargo bench --bench classify`.

use std::hint::black_box;
use std::time::Instant;

use tono_seal::classify::{classify_raw, Policy};

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

fn percentiles(mut ns: Vec<u64>) -> (f64, f64) {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 - 1.0) * q) as usize] as f64 / 1000.0;
    (at(0.5), at(0.99))
}

/// Times `f` on every call, `rounds` times, one sample per call.
fn time(calls: &[Vec<u8>], rounds: usize, mut f: impl FnMut(&[u8])) -> Vec<u64> {
    let mut samples = Vec::with_capacity(calls.len() * rounds);
    for _ in 0..rounds {
        for raw in calls {
            let start = Instant::now();
            f(raw);
            samples.push(start.elapsed().as_nanos() as u64);
        }
    }
    samples
}

fn main() {
    let calls = corpus();
    let policy = Policy::default();
    // Warm up.
    time(&calls, 50, |raw| {
        drop(black_box(classify_raw(black_box(raw), &policy)))
    });
    let rounds = 200;
    let classify = time(&calls, rounds, |raw| {
        drop(black_box(classify_raw(black_box(raw), &policy)))
    });
    let strict = time(&calls, rounds, |raw| {
        drop(black_box(tono_seal::classify::parse_call(black_box(raw))))
    });
    let parse = time(&calls, rounds, |raw| {
        drop(black_box(serde_json::from_slice::<serde_json::Value>(
            black_box(raw),
        )))
    });
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
    for (ns, i) in per_call.iter().take(5) {
        let shown: String = String::from_utf8_lossy(&calls[*i])
            .chars()
            .take(70)
            .collect();
        println!("  slowest: {:.3} µs  {shown}", *ns as f64 / 1000.0);
    }
    println!(
        "classify p99 / from_slice p99: {:.2}x; target p99 <= 2 µs: {}",
        c99 / p99,
        if c99 <= 2.0 { "met" } else { "NOT met" }
    );
}
