//! Set-up shared by the benches that drop to real users.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A built binary of this package: benches run from target/release/deps,
/// the binaries are one level up — or in `BIN_DIR` when it is set (to time
/// a copy kept from before a change beside the new build).
pub fn bin(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("BIN_DIR") {
        return PathBuf::from(dir).join(name);
    }
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join(name)
}

/// Runs `tono-seal ARGS` (the binary at `tono`) with `input` on stdin;
/// panics unless it succeeds.
pub fn tono(tono: &Path, args: &[&str], input: &[u8]) {
    let mut c = Command::new(tono)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(input).unwrap();
    assert!(c.wait().unwrap().success(), "tono-seal {args:?}");
}

/// Gives `name` a key and three sealed secrets `a`, `b`, `c`, through the
/// `tono-seal` CLI at `tono`.
pub fn provision(tono_bin: &Path, name: &str) {
    tono(tono_bin, &["keygen", "--user", name], b"");
    for s in ["a", "b", "c"] {
        tono(
            tono_bin,
            &["seal", "--user", name, s],
            format!("secret-{s}-of-{name}-0123456789abcdef").as_bytes(),
        );
    }
}

/// A round step for an axis up to `max` with about `ticks` ticks: 1, 2
/// or 5 × 10^n.
pub fn tick_step(max: f64, ticks: f64) -> f64 {
    let raw = max / ticks;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap()
}

/// Writes `value` as pretty JSON to `target/bench/FILE`; the folder.
pub fn write_result(file: &str, value: &serde_json::Value) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    let _ = std::fs::create_dir_all(&dir);
    std::fs::write(dir.join(file), serde_json::to_vec_pretty(value).unwrap()).unwrap();
    dir
}

/// `setpriv` to `uid` (its own group, no supplementary ones), to be given
/// the rest of its arguments.
pub fn setpriv_to(uid: u32) -> Command {
    let id = uid.to_string();
    let mut c = Command::new("setpriv");
    c.args(["--reuid", &id, "--regid", &id, "--clear-groups"]);
    c
}

/// Runs `cmd` with no input or output; whether it succeeded.
pub fn quiet(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
