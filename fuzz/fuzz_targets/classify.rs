//! `cargo +nightly fuzz run classify`: raw bytes into the classifier. It
//! must never panic, and a `Stay` must survive a second, slower check: the
//! call re-parsed by plain serde_json must be a read tool whose URL passes
//! the egress check on its own.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tono_seal::classify::{classify_raw, egress, Policy, VerdictKind};

fuzz_target!(|data: &[u8]| {
    let policy = Policy::default();
    let (_, verdict) = classify_raw(data, &policy);
    if verdict.kind() == VerdictKind::Stay {
        let v: serde_json::Value = serde_json::from_slice(data).expect("a stay is valid JSON");
        assert!(matches!(v["tool"].as_str(), Some("http_get" | "http_head")), "stay for a non-read tool");
        let url = v["args"]["url"].as_str().expect("a stay has a string url");
        assert!(egress::check_url(url, &[80, 443], &[]).is_ok(), "stay for a refused URL");
        assert!(v["args"].get("secrets").is_none(), "stay with secrets");
    }
});
