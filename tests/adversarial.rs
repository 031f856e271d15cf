//! Runs the classifier's attack corpus (`adversarial/*.jsonl`) and a
//! property test that mutates safe stay-calls: a mutation may stay only if
//! it still means exactly a safe stay.

use std::collections::BTreeMap;
use std::path::PathBuf;

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestRunner};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use tono_seal::classify::{classify_raw, Policy, VerdictKind};

const THEMES: [&str; 6] = ["names", "urls", "json", "args", "policy", "benign"];

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("adversarial")
}

/// How many cases each file holds for each expectation: a case lost or
/// added by mistake (a bad merge, a truncated file) fails the test.
const EXPECTED_COUNTS: [(&str, &str, usize); 20] = [
    ("names", "not_stay", 41),
    ("names", "drop", 8),
    ("names", "refuse", 3),
    ("names", "stay", 1),
    ("urls", "not_stay", 97),
    ("json", "refuse", 28),
    ("json", "stay", 4),
    ("args", "drop", 35),
    ("args", "refuse", 6),
    ("policy", "stay", 6),
    ("policy", "drop", 9),
    ("policy", "not_stay", 3),
    ("policy", "policy_rejected", 16),
    ("benign", "stay", 67),
    // Totals per file, so a new expectation kind cannot hide a loss.
    ("names", "*", 53),
    ("urls", "*", 97),
    ("json", "*", 32),
    ("args", "*", 41),
    ("policy", "*", 34),
    ("benign", "*", 67),
];

/// Every case names the verdict it expects and the code that says why:
/// a refusal for the wrong reason (a URL dropped for its port when the
/// case is about its address) is a failure, not a pass.
#[test]
fn the_corpus_holds() {
    let mut failures = Vec::new();
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut codes: BTreeMap<&'static str, usize> = BTreeMap::new();
    for theme in THEMES {
        let path = corpus_dir().join(format!("{theme}.jsonl"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (n, line) in text.lines().enumerate() {
            let at = format!("{theme}:{}", n + 1);
            let case: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{at}: {e}"));
            let expect = case["expect"].as_str().unwrap().to_owned();
            let raw: Vec<u8> = match (&case["raw"], &case["call"]) {
                (Value::String(s), _) => s.as_bytes().to_vec(),
                (_, call) => serde_json::to_vec(call).unwrap(),
            };
            let policy = match (&case["policy"], &case["policy_raw"]) {
                (Value::Null, Value::Null) => Ok(Policy::default()),
                (Value::Null, Value::String(s)) => Policy::from_json(s.as_bytes()),
                (p, _) => Policy::from_json(&serde_json::to_vec(p).unwrap()),
            };
            let (got, code) = match &policy {
                Err(_) => ("policy_rejected", None),
                Ok(p) => {
                    let verdict = classify_raw(&raw, p).1;
                    let kind = match verdict.kind() {
                        VerdictKind::Stay => "stay",
                        VerdictKind::Drop => "drop",
                        VerdictKind::Refuse => "refuse",
                    };
                    (kind, Some(verdict.code()))
                }
            };
            let agreed = match expect.as_str() {
                "not_stay" => got == "drop" || got == "refuse",
                e => got == e,
            };
            let want_code = case["code"].as_str();
            if expect == "policy_rejected" {
                assert!(
                    want_code.is_none(),
                    "{at}: a rejected policy has no verdict code"
                );
            } else {
                assert!(want_code.is_some(), "{at}: the case does not pin its code");
            }
            if !agreed || code != want_code {
                failures.push(format!(
                    "{at}: expected {expect} {want_code:?}, got {got} {code:?}: {} — {}",
                    case["why"],
                    String::from_utf8_lossy(&raw)
                ));
            }
            *codes.entry(code.unwrap_or("-")).or_default() += 1;
            *counts.entry((theme.to_owned(), expect)).or_default() += 1;
            *counts.entry((theme.to_owned(), "*".into())).or_default() += 1;
        }
    }
    eprintln!("corpus, cases per file and expectation:");
    for ((theme, expect), n) in &counts {
        eprintln!("  {theme:<8} {expect:<16} {n}");
    }
    eprintln!("corpus, cases per verdict code:");
    for (code, n) in &codes {
        eprintln!("  {code:<24} {n}");
    }
    assert!(
        failures.is_empty(),
        "{} case(s) disagree:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let expected: BTreeMap<(String, String), usize> = EXPECTED_COUNTS
        .iter()
        .map(|&(t, e, n)| ((t.to_owned(), e.to_owned()), n))
        .collect();
    assert_eq!(counts, expected, "the corpus's counts changed");
}

/// Collects every object's keys, to find duplicates independently of the
/// classifier's own parser.
struct KeysOk(bool);

impl<'de> serde::Deserialize<'de> for KeysOk {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = KeysOk;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("json")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<KeysOk, A::Error> {
                let mut seen = std::collections::HashSet::new();
                let mut ok = true;
                while let Some(k) = m.next_key::<String>()? {
                    ok &= seen.insert(k);
                    ok &= m.next_value::<KeysOk>()?.0;
                }
                Ok(KeysOk(ok))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> Result<KeysOk, A::Error> {
                let mut ok = true;
                while let Some(v) = s.next_element::<KeysOk>()? {
                    ok &= v.0;
                }
                Ok(KeysOk(ok))
            }
            fn visit_bool<E>(self, _: bool) -> Result<KeysOk, E> {
                Ok(KeysOk(true))
            }
            fn visit_i64<E>(self, _: i64) -> Result<KeysOk, E> {
                Ok(KeysOk(true))
            }
            fn visit_u64<E>(self, _: u64) -> Result<KeysOk, E> {
                Ok(KeysOk(true))
            }
            fn visit_f64<E>(self, _: f64) -> Result<KeysOk, E> {
                Ok(KeysOk(true))
            }
            fn visit_str<E>(self, _: &str) -> Result<KeysOk, E> {
                Ok(KeysOk(true))
            }
            fn visit_unit<E>(self) -> Result<KeysOk, E> {
                Ok(KeysOk(true))
            }
        }
        d.deserialize_any(V)
    }
}

/// The slow reference: a conservative, independent notion of a safe stay
/// (std's address predicates, its own header rules, no IPv6 at all).
fn reference_safe_stay(raw: &[u8]) -> bool {
    if !serde_json::from_slice::<KeysOk>(raw).is_ok_and(|k| k.0) {
        return false;
    }
    let Ok(v) = serde_json::from_slice::<Value>(raw) else {
        return false;
    };
    let Some(obj) = v.as_object() else {
        return false;
    };
    if obj.len() != 2
        || !matches!(
            obj.get("tool").and_then(Value::as_str),
            Some("http_get" | "http_head")
        )
    {
        return false;
    }
    let Some(args) = obj.get("args").and_then(Value::as_object) else {
        return false;
    };
    if !args.keys().all(|k| k == "url" || k == "headers") {
        return false;
    }
    let headers_ok = match args.get("headers") {
        None => true,
        Some(Value::Object(h)) => h.iter().all(|(k, v)| {
            let k = k.to_ascii_lowercase();
            let token = !k.is_empty()
                && k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            let targets = [
                "host",
                "forwarded",
                "via",
                "authorization",
                "cookie",
                "connection",
                "upgrade",
                "te",
                "transfer-encoding",
                "content-length",
                "expect",
            ]
            .contains(&k.as_str())
                || [
                    "x-forwarded",
                    "proxy-",
                    "x-proxy",
                    "x-original",
                    "x-rewrite",
                    "x-http-method",
                    "x-method",
                    "x-real-ip",
                    "x-client-ip",
                    "true-client-ip",
                    "sec-",
                ]
                .iter()
                .any(|p| k.starts_with(p));
            token
                && !targets
                && v.as_str()
                    .is_some_and(|v| v.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b)))
        }),
        _ => false,
    };
    let Some(url) = args.get("url").and_then(Value::as_str) else {
        return false;
    };
    headers_ok && reference_url(url)
}

fn reference_url(raw: &str) -> bool {
    // Schemes are case-insensitive (RFC 3986 3.1).
    let lower = raw.to_ascii_lowercase();
    let Some(rest) = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
    else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if raw.bytes().any(|b| b <= b' ' || b == 0x7f || b == b'\\')
        || authority.contains(['@', '%', ':', '['])
    {
        return false;
    }
    let Ok(u) = url::Url::parse(raw) else {
        return false;
    };
    match u.host() {
        Some(url::Host::Ipv4(a)) => {
            let o = a.octets();
            !(a.is_private()
                || a.is_loopback()
                || a.is_link_local()
                || a.is_broadcast()
                || a.is_documentation()
                || a.is_unspecified()
                || a.is_multicast()
                || o[0] == 0
                || o[0] >= 240
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || (o[0] == 198 && (18..20).contains(&o[1]))
                || (o[0] == 192 && o[1] == 0 && o[2] == 0))
        }
        Some(url::Host::Domain(d)) => {
            let d = d.strip_suffix('.').unwrap_or(d);
            let last = d.rsplit('.').next().unwrap_or_default();
            d.contains('.')
                && !d.contains("..")
                && (last.bytes().all(|b| b.is_ascii_lowercase()) || last.starts_with("xn--"))
                && last.len() >= 2
                && d.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
                && ![
                    "localhost",
                    "local",
                    "internal",
                    "localdomain",
                    "lan",
                    "intranet",
                    "corp",
                    "home.arpa",
                    "arpa",
                    "onion",
                ]
                .iter()
                .any(|s| d == *s || d.ends_with(&format!(".{s}")))
        }
        _ => false,
    }
}

const SEED_URLS: [&str; 4] = [
    "https://example.com/",
    "https://www.wikipedia.org/wiki/Rust",
    "http://example.org/a?b=1",
    "https://8.8.8.8/",
];

fn mutate(seed: usize, kind: u8, pos: usize, ch: char) -> Vec<u8> {
    let url = SEED_URLS[seed % SEED_URLS.len()];
    let base =
        json!({"tool": "http_get", "args": {"url": url, "headers": {"Accept": "text/html"}}})
            .to_string();
    let tool = "http_get";
    let m = |s: &str, what: &str, with: &str| s.replacen(what, with, 1);
    let lookalikes = [
        '\u{200b}', '\u{202e}', '\u{feff}', 'е', 'р', 'ｈ', ' ', '\t', '\0', 'İ', 'ſ',
    ];
    let out = match kind % 12 {
        0 => m(&base, tool, &tool.to_uppercase()),
        1 => {
            let mut t: Vec<char> = tool.chars().collect();
            t.insert(pos % (t.len() + 1), lookalikes[pos % lookalikes.len()]);
            m(&base, tool, &t.into_iter().collect::<String>())
        }
        2 => m(&base, "\"tool\":", "\"tool\":\"shell\",\"tool\":"),
        3 => m(
            &base,
            "\"url\":",
            "\"url\":\"http://169.254.169.254/\",\"url\":",
        ),
        4 => m(&base, "\"headers\"", "\"secrets\":[\"k\"],\"headers\""),
        5 => {
            let host_start = url.find("://").unwrap() + 3;
            let mut u: Vec<char> = url.chars().collect();
            u.insert(host_start + pos % 4, ch);
            m(&base, url, &u.into_iter().collect::<String>())
        }
        6 => m(&base, url, &url.replace("example", "127.0.0.1.")),
        7 => m(&base, url, &format!("{url}@127.0.0.1")),
        8 => m(
            &base,
            "Accept",
            [
                "Host",
                "X-Forwarded-For",
                "Proxy-Authorization",
                "Forwarded",
            ][pos % 4],
        ),
        9 => m(
            &base,
            url,
            &url.replace(
                "https://",
                [
                    "http://[::1]/",
                    "http://0x7f.1/",
                    "http://2130706433/",
                    "http://localhost./",
                ][pos % 4],
            ),
        ),
        10 => m(
            &base,
            "\"headers\"",
            &format!(
                "\"{}\":1,\"headers\"",
                ["method", "body", "timeout_ms", "proxy"][pos % 4]
            ),
        ),
        _ => {
            let mut b = base.into_bytes();
            let i = pos % b.len();
            b[i] = ch as u32 as u8;
            return b;
        }
    };
    out.into_bytes()
}

/// Each property's configuration: `PROPTEST_CASES` generated cases
/// (default 4000), and the saved failures replayed first from
/// `tests/adversarial.proptest-regressions`, beside this file (the default
/// looks for a `lib.rs` above it and finds none in `tests/`).
fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(4000),
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

/// Every mutated call that stays must be a safe stay by the reference. The
/// test counts how many stayed: a classifier that drops everything passes
/// the check on each case and must still fail here.
#[test]
fn a_mutated_stay_stays_only_if_it_is_still_a_safe_stay() {
    let (tried, stayed) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let mutations = (0usize..4, 0u8..12, 0usize..200, any::<char>());
    let outcome = TestRunner::new(proptest_config()).run(&mutations, |(seed, kind, pos, ch)| {
        let raw = mutate(seed, kind, pos, ch);
        tried.fetch_add(1, Ordering::Relaxed);
        if classify_raw(&raw, &Policy::default()).1.kind() == VerdictKind::Stay {
            stayed.fetch_add(1, Ordering::Relaxed);
            prop_assert!(
                reference_safe_stay(&raw),
                "stayed but is not a safe stay: {}",
                String::from_utf8_lossy(&raw)
            );
        }
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
    let (tried, stayed) = (tried.into_inner(), stayed.into_inner());
    eprintln!(
        "{tried} mutated calls: {stayed} stayed, each a safe stay by the reference; {} did not",
        tried - stayed
    );
    assert!(
        stayed * 10 >= tried,
        "only {stayed} of {tried} mutated calls stayed: the property proves too little"
    );
    assert!(
        stayed < tried,
        "all {tried} mutated calls stayed: the mutations change nothing"
    );
}

proptest! {
    #![proptest_config(proptest_config())]
    #[test]
    fn classify_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = classify_raw(&bytes, &Policy::default());
    }
}

#[test]
fn unmutated_seeds_stay() {
    for url in SEED_URLS {
        let raw =
            json!({"tool": "http_get", "args": {"url": url, "headers": {"Accept": "text/html"}}})
                .to_string();
        assert_eq!(
            classify_raw(raw.as_bytes(), &Policy::default()).1.kind(),
            VerdictKind::Stay,
            "{raw}"
        );
    }
}
