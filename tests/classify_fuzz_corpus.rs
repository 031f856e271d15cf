//! The classifier's fuzz target, run on stable as a test: its body
//! (`fuzz/classify_check.rs`, the same file `cargo fuzz run classify`
//! includes) over a seeded random corpus of [`MIN_INPUTS`] inputs or more —
//! a count, not a time — shaped to reach deep: every case of the
//! adversarial corpus as it is, byte-level and structural mutations of
//! those cases, calls of the read tools with URLs put together from
//! hostile parts (so that many stay and the reference check runs), and
//! random bytes. The seed is printed, and a failing input is printed with
//! the seed and its index: `CLASSIFY_FUZZ_SEED=<seed> cargo test --test
//! classify_fuzz_corpus` runs the same inputs again. The counts of each
//! verdict per kind of input are printed, and each kind must reach the
//! verdicts it is there for, so a generator that stopped reaching deep
//! fails the test instead of passing on shallow inputs.

#[path = "../fuzz/classify_check.rs"]
mod classify_check;

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;

use serde_json::{json, Value};
use tono_seal::classify::VerdictKind;

/// The fewest inputs one run feeds (`CLASSIFY_FUZZ_COUNT` may ask for more).
const MIN_INPUTS: usize = 100_000;

/// SplitMix64: small, seeded, the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number below `n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// Every case of `adversarial/*.jsonl` as the bytes the classifier gets.
fn seed_corpus() -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("adversarial");
    let mut cases = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    for file in files {
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let case: Value = serde_json::from_str(line).unwrap();
            if let Some(raw) = case.get("raw").and_then(Value::as_str) {
                cases.push(raw.as_bytes().to_vec());
            } else if let Some(call) = case.get("call") {
                cases.push(serde_json::to_vec(call).unwrap());
            }
        }
    }
    cases
}

/// Fragments that mean something to a JSON parser, a URL parser or the
/// policy, spliced in by the byte mutations.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "\\u0000",
    "\\ud800",
    "\\u0022",
    "\\/",
    "\"tool\"",
    "\"args\"",
    "\"url\"",
    "\"headers\"",
    "\"secrets\"",
    "\"http_get\"",
    "\"http_head\"",
    "\"shell\"",
    "null",
    "true",
    "1e999",
    "-0",
    "\u{feff}",
    "\u{200b}",
    "\u{0130}",
    "%00",
    "%2e",
    "%25",
    "@",
    "#",
    "?",
    "//",
    "\\\\",
    "http://",
    "https://",
    "127.0.0.1",
    "[::1]",
    "0x7f.1",
    "0177.0.0.1",
    "169.254.169.254",
    "localhost",
    ".local",
    ":80",
    ":443",
    ":8080",
    "\r\n",
    "\t",
    " ",
    "\0",
];

/// Hosts for generated URLs: public ones (so a call can stay) beside every
/// kind the egress rules refuse, in the spellings that hide them.
const HOSTS: &[&str] = &[
    "example.com",
    "example.org",
    "www.example.net",
    "api.github.com",
    "pypi.org",
    "EXAMPLE.COM",
    "example.com.",
    "xn--nxasmq6b.com",
    "sub.domain.example.co.uk",
    "93.184.216.34",
    "1.1.1.1",
    "8.8.8.8",
    "[2606:4700:4700::1111]",
    "[2001:4860:4860::8888]",
    "127.0.0.1",
    "127.1",
    "2130706433",
    "0x7f000001",
    "0177.0.0.1",
    "0",
    "0.0.0.0",
    "10.0.0.1",
    "10.255.255.255",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "100.64.0.1",
    "100.127.255.255",
    "169.254.169.254",
    "169.254.0.1",
    "192.0.0.1",
    "192.0.2.1",
    "198.18.0.1",
    "198.51.100.1",
    "203.0.113.1",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "[::1]",
    "[::]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[::127.0.0.1]",
    "[64:ff9b::7f00:1]",
    "[64:ff9b::a00:1]",
    "[2002:7f00:1::]",
    "[fe80::1]",
    "[fc00::1]",
    "[fd00:ec2::254]",
    "[ff02::1]",
    "[2001:db8::1]",
    "[::ffff:8.8.8.8]",
    "[64:ff9b::808:808]",
    "localhost",
    "LOCALHOST",
    "a.localhost",
    "localhost.",
    "printer.local",
    "metadata.google.internal",
    "x.internal",
    "intranet",
    "1.2.3",
    "1.2.3.4.5",
    "08.08.08.08",
    "example.123",
    "exa mple.com",
    "ex%61mple.com",
    "example.com%00.evil",
    "127.0.0.1.nip.io",
    "①②⑦.0.0.1",
    "ｅｘａｍｐｌｅ.com",
];

/// Public hosts, a URL to which may stay.
const PUBLIC: &[&str] = &[
    "example.com",
    "example.org",
    "www.example.net",
    "api.github.com",
    "EXAMPLE.COM",
    "example.com.",
    "93.184.216.34",
    "8.8.8.8",
    "[2606:4700:4700::1111]",
    "[::ffff:8.8.8.8]",
];

/// A URL from hostile parts; a third of them plain ones to a public host
/// (with a hostile path), so that calls stay and the reference checks them.
fn url(rng: &mut Rng) -> String {
    if rng.chance(3) {
        let scheme = rng.pick(&["http://", "https://"]);
        let host = rng.pick(PUBLIC);
        let path = rng.pick(&[
            "/",
            "",
            "/a?b=c",
            "/%2e%2e/",
            "/@127.0.0.1",
            "?u=http://10.0.0.1/",
        ]);
        return format!("{scheme}{host}{path}");
    }
    let scheme = rng.pick(&[
        "http://",
        "https://",
        "HTTP://",
        "ftp://",
        "file://",
        "http:",
        "http:/",
        "https:///",
        "//",
        "",
        "gopher://",
    ]);
    let userinfo = if rng.chance(8) {
        *rng.pick(&["user@", "user:pass@", "@", "example.com@", ":@"])
    } else {
        ""
    };
    let host = rng.pick(HOSTS);
    let port = if rng.chance(4) {
        *rng.pick(&[
            ":80", ":443", ":8080", ":22", ":0", ":65536", ":", ":0080", ":443x",
        ])
    } else {
        ""
    };
    let path = rng.pick(&[
        "/",
        "",
        "/a/b?c=d",
        "/..%2f..",
        "#frag",
        "?x=@127.0.0.1",
        "/\\127.0.0.1",
        "/%0d%0a",
    ]);
    format!("{scheme}{userinfo}{host}{port}{path}")
}

/// A call of a read tool with a generated URL, sometimes with headers or
/// an extra argument.
fn read_call(rng: &mut Rng) -> Vec<u8> {
    let tool = *rng.pick(&["http_get", "http_head", "http_get", "Http_Get", "http_get "]);
    let mut args = serde_json::Map::new();
    args.insert("url".into(), Value::String(url(rng)));
    if rng.chance(4) {
        let name = *rng.pick(&[
            "Accept",
            "User-Agent",
            "Host",
            "X-Forwarded-For",
            "Proxy-Authorization",
            "Authorization",
            "Cookie",
            "Forwarded",
            "Via",
            "X-Trace",
        ]);
        let value = *rng.pick(&["text/html", "a\r\nb", "x\0", "1"]);
        args.insert("headers".into(), json!({ name: value }));
    }
    if rng.chance(10) {
        args.insert("secrets".into(), json!(["api"]));
    }
    serde_json::to_vec(&json!({"tool": tool, "args": args})).unwrap()
}

/// Byte-level mutations of a case (as libFuzzer's: flips, inserts,
/// deletes, copies, splices with another case, dictionary tokens).
fn mutate_bytes(rng: &mut Rng, mut data: Vec<u8>, corpus: &[Vec<u8>]) -> Vec<u8> {
    for _ in 0..1 + rng.below(6) {
        let at = if data.is_empty() {
            0
        } else {
            rng.below(data.len() + 1)
        };
        match rng.below(8) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] = rng.next() as u8;
            }
            2 => {
                let token = rng.pick(TOKENS).as_bytes();
                data.splice(at..at, token.iter().copied());
            }
            3 if !data.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(data.len());
                data.drain(at.min(end)..end);
            }
            4 if !data.is_empty() => {
                let from = rng.below(data.len());
                let end = (from + 1 + rng.below(32)).min(data.len());
                let copy = data[from..end].to_vec();
                data.splice(at..at, copy);
            }
            5 => {
                let other = rng.pick(corpus);
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    let end = (from + 1 + rng.below(64)).min(other.len());
                    data.splice(at..at, other[from..end].iter().copied());
                }
            }
            6 => {
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                data.splice(at..at, bytes);
            }
            _ => data.truncate(at),
        }
    }
    data
}

/// Structural mutations: a case read as JSON, one string, key or level
/// changed, written back (sometimes with a duplicated key, which no
/// `Value` can hold).
fn mutate_json(rng: &mut Rng, data: &[u8]) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(data).ok()?;
    let top = v.as_object_mut()?;
    match rng.below(6) {
        0 => {
            if let Some(args) = top.get_mut("args").and_then(Value::as_object_mut) {
                args.insert("url".into(), Value::String(url(rng)));
            }
        }
        1 => {
            let tool = *rng.pick(&[
                "http_get",
                "http_head",
                "shell",
                "spawn",
                "read_file",
                "HTTP_GET",
                "http_get\0",
                "http\u{2010}get",
                "",
            ]);
            top.insert("tool".into(), Value::String(tool.into()));
        }
        2 => {
            let key = *rng.pick(&["extra", "tool ", "Args", "url", "headers", "secrets"]);
            top.insert(key.into(), json!(rng.below(3)));
        }
        3 => {
            let mut deep = v.clone();
            for _ in 0..rng.below(40) {
                deep = json!({ "x": [deep] });
            }
            return Some(
                serde_json::to_vec(
                    &json!({"tool": "http_get", "args": {"url": url(rng), "headers": deep}}),
                )
                .unwrap(),
            );
        }
        4 => {
            let text = serde_json::to_string(&v).unwrap();
            let key = *rng.pick(&["\"url\":", "\"tool\":", "\"args\":"]);
            let at = text.find(key)?;
            let dup = format!("{key}{},", json!(url(rng)));
            return Some(format!("{}{dup}{}", &text[..at], &text[at..]).into_bytes());
        }
        _ => {
            top.remove(*rng.pick(&["tool", "args"]));
        }
    }
    Some(serde_json::to_vec(&v).unwrap())
}

/// Random bytes: raw, or from JSON's alphabet (so some parse).
fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    let n = rng.below(200);
    if rng.chance(2) {
        (0..n).map(|_| rng.next() as u8).collect()
    } else {
        let alphabet = b"{}[]\":,\\ tuolrgahsep_0123456789.-/:@";
        (0..n).map(|_| *rng.pick(alphabet)).collect()
    }
}

fn seed() -> u64 {
    match std::env::var("CLASSIFY_FUZZ_SEED") {
        Ok(s) => s
            .strip_prefix("0x")
            .map_or_else(|| s.parse(), |h| u64::from_str_radix(h, 16))
            .unwrap_or_else(|e| panic!("CLASSIFY_FUZZ_SEED={s}: {e}")),
        // A new seed each run (printed), so runs explore different inputs.
        Err(_) => std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish(),
    }
}

fn verdict_name(kind: VerdictKind) -> &'static str {
    match kind {
        VerdictKind::Stay => "stay",
        VerdictKind::Drop => "drop",
        VerdictKind::Refuse => "refuse",
    }
}

#[test]
fn the_fuzz_targets_body_holds_over_a_seeded_corpus() {
    let seed = seed();
    let count: usize = std::env::var("CLASSIFY_FUZZ_COUNT")
        .ok()
        .map(|c| c.parse().expect("CLASSIFY_FUZZ_COUNT is a number"))
        .unwrap_or(MIN_INPUTS)
        .max(MIN_INPUTS);
    eprintln!(
        "classify fuzz corpus: seed {seed} (CLASSIFY_FUZZ_SEED={seed} repeats it), {count} inputs"
    );
    let corpus = seed_corpus();
    assert!(
        corpus.len() >= 300,
        "the adversarial corpus: {} cases",
        corpus.len()
    );
    let mut rng = Rng(seed);
    // (kind of input, verdict) → how many; and how many parsed as a call.
    let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut parsed = 0usize;
    for i in 0..count {
        let (kind, input) = if i < corpus.len() {
            ("corpus", corpus[i].clone())
        } else {
            match rng.below(10) {
                0..=3 => {
                    let case = rng.pick(&corpus).clone();
                    ("byte-mutated", mutate_bytes(&mut rng, case, &corpus))
                }
                4..=5 => {
                    let case = rng.pick(&corpus).clone();
                    match mutate_json(&mut rng, &case) {
                        Some(m) if rng.chance(4) => {
                            ("json+byte-mutated", mutate_bytes(&mut rng, m, &corpus))
                        }
                        Some(m) => ("json-mutated", m),
                        None => ("byte-mutated", mutate_bytes(&mut rng, case, &corpus)),
                    }
                }
                6..=8 => ("read-call", read_call(&mut rng)),
                _ => ("random", random_bytes(&mut rng)),
            }
        };
        let outcome = std::panic::catch_unwind(|| classify_check::check(&input));
        let (verdict, is_call) = outcome.unwrap_or_else(|panic| {
            eprintln!(
                "FAILED at input {i} ({kind}) of seed {seed} (CLASSIFY_FUZZ_SEED={seed}): {:?}",
                String::from_utf8_lossy(&input)
            );
            std::panic::resume_unwind(panic)
        });
        parsed += usize::from(is_call);
        *counts.entry((kind, verdict_name(verdict))).or_default() += 1;
    }
    let total: usize = counts.values().sum();
    let by_verdict = |v: &str| -> usize {
        counts
            .iter()
            .filter(|((_, verdict), _)| *verdict == v)
            .map(|(_, n)| n)
            .sum()
    };
    eprintln!(
        "classify fuzz corpus: seed {seed}: {total} inputs, {parsed} parsed as a call; \
         stay {}, drop {}, refuse {}",
        by_verdict("stay"),
        by_verdict("drop"),
        by_verdict("refuse")
    );
    for ((kind, verdict), n) in &counts {
        eprintln!("  {kind:<18} {verdict:<7} {n}");
    }
    assert_eq!(total, count, "every input was fed");
    // Each kind of input reaches what it is there for: a generator that
    // stopped reaching deep fails here rather than passing shallowly.
    let at_least = |kind: &str, verdict: &str, n: usize| {
        let got = counts.get(&(kind, verdict)).copied().unwrap_or(0);
        assert!(
            got >= n,
            "{kind} inputs gave {verdict} {got} times, fewer than {n} (seed {seed}): {counts:?}"
        );
    };
    at_least("corpus", "stay", 50);
    at_least("corpus", "refuse", 30);
    at_least("corpus", "drop", 30);
    // A read call stays when its URL is a public one (about a quarter of
    // the hosts): every such Stay went through the reference check.
    at_least("read-call", "stay", count / 100);
    at_least("read-call", "drop", count / 100);
    at_least("byte-mutated", "stay", count / 1000);
    at_least("byte-mutated", "refuse", count / 100);
    at_least("json-mutated", "stay", count / 1000);
    at_least("json-mutated", "drop", count / 1000);
    at_least("json-mutated", "refuse", count / 1000);
    at_least("random", "refuse", count / 100);
}
