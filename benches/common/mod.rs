//! Set-up shared by the benches that drop to real users.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A built binary of this package: benches run from target/release/deps,
/// the binaries are one level up.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join(name)
}

/// Gives `name` a key and three sealed secrets `a`, `b`, `c`, through the
/// `tono-seal` CLI at `tono`.
pub fn provision(tono: &Path, name: &str) {
    let run = |args: &[&str], input: &[u8]| {
        let mut c = Command::new(tono)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(input).unwrap();
        assert!(c.wait().unwrap().success(), "tono-seal {args:?}");
    };
    run(&["keygen", "--user", name], b"");
    for s in ["a", "b", "c"] {
        run(
            &["seal", "--user", name, s],
            format!("secret-{s}-of-{name}-0123456789abcdef").as_bytes(),
        );
    }
}
