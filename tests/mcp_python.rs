//! Interop: the official Python MCP SDK (a client nobody here wrote)
//! drives `tono-seal mcp`: it lists the tools, runs `shell` as a test user
//! that unseals its own secret (checked by hash), is denied another user's
//! identity by the kernel, and sees `http_get` of a loopback address
//! classified and dropped to the user instead of fetched by the worker.

mod common;

use std::process::Command;

use common::{launch_bin, sha256_hex, tono_bin, TestUser};
use serde_json::Value;

/// Makes sure Python's `mcp` package is importable, installing it with pip.
fn python_mcp() -> bool {
    let importable = || {
        Command::new("python3")
            .args(["-c", "import mcp.client.stdio"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if importable() {
        return true;
    }
    let installed = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "mcp",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if installed && importable() {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("the Python mcp package could not be installed with pip, and CI=true");
    }
    eprintln!(
        "\n*** SKIPPED the Python MCP interop test: `python3 -m pip install mcp` failed ***\n"
    );
    false
}

#[test]
fn the_python_sdk_drives_the_server() {
    need_root!();
    if !python_mcp() {
        return;
    }
    let (a, b) = (TestUser::with_key(), TestUser::with_key());
    a.seal("api", b"python-interop-secret");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
    let other = b.home().join(".tono/identity");
    let out = Command::new("python3")
        .arg(script)
        .arg(tono_bin())
        .arg(launch_bin())
        .arg(a.name())
        .arg(&other)
        .output()
        .expect("run the Python client");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the Python client failed: {stderr}");
    let transcript = String::from_utf8_lossy(&out.stdout);
    eprintln!("Python MCP client session:\n{transcript}");
    let steps: Vec<Value> = transcript
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let step = |name: &str| {
        steps
            .iter()
            .find(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("no step {name} in {transcript}"))
    };
    assert_eq!(step("initialize")["serverInfo"]["name"], "tono-seal");
    let tools = step("tools/list")["tools"].to_string();
    for t in [
        "shell",
        "spawn",
        "read_file",
        "write_file",
        "list_dir",
        "delete_file",
        "http_get",
        "http_head",
    ] {
        assert!(tools.contains(t), "{t} missing from {tools}");
    }
    let shell = step("tools/call shell");
    assert_eq!(shell["isError"], false, "{shell}");
    let text = shell["text"].to_string();
    assert!(text.contains(&a.user.uid.to_string()), "{shell}");
    assert!(
        text.contains(&sha256_hex(b"python-interop-secret")),
        "{shell}"
    );
    let read = step("tools/call read_file");
    assert_eq!(read["isError"], true, "{read}");
    assert!(
        read["text"].to_string().contains("Permission denied"),
        "{read}"
    );
    assert_eq!(read["uid"], a.user.uid);
    let get = step("tools/call http_get");
    assert_eq!(get["verdict"], "drop", "{get}");
    assert_eq!(get["reason"], "ip_not_public", "{get}");
    assert_eq!(
        get["uid"], a.user.uid,
        "it ran as the user, not in the worker: {get}"
    );
}
