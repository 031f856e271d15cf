//! `cargo fuzz run classify`: raw bytes into the classifier, through the
//! body it shares with the seeded corpus run of the test suite
//! (`fuzz/classify_check.rs`: never a panic, every `Stay` passes a
//! reference written apart from the classifier, and the call parser
//! agrees with the whole-`Value` reading). On a stable toolchain:
//! `cargo fuzz run -s none classify` (coverage-guided, no sanitizer; the
//! default `-s address` needs nightly's `-Zsanitizer`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../classify_check.rs"]
mod classify_check;

fuzz_target!(|data: &[u8]| {
    let _ = classify_check::check(data);
});
