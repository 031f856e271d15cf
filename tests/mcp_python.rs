//! Interop: the official Python MCP SDK (a client nobody here wrote)
//! drives `tono-seal mcp`: it lists the tools, runs `shell` as a test user
//! that unseals its own secret (checked by hash), is denied another user's
//! identity by the kernel, and sees `http_get` of a loopback address
//! classified and dropped to the user instead of fetched by the worker.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{launch_bin, sha256_hex, tono_bin, TestUser};
use serde_json::Value;

/// A Python that imports the `mcp` package: `python3` when it does, else
/// the tests' own venv under cargo's target tmpdir, made with `python3 -m
/// venv` and given `mcp` by its pip. A system Python is never changed
/// (Debian 12 refuses pip there).
fn python_with_mcp() -> Option<PathBuf> {
    let imports_mcp = |python: &Path| {
        Command::new(python)
            .args(["-c", "import mcp.client.stdio"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let system = PathBuf::from("python3");
    if imports_mcp(&system) {
        return Some(system);
    }
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-venv");
    let python = venv.join("bin/python3");
    if !imports_mcp(&python) {
        let run = |program: &Path, args: &[&str]| {
            Command::new(program)
                .args(args)
                .status()
                .is_ok_and(|s| s.success())
        };
        let venv_arg = venv.to_str().unwrap();
        let _ = run(&system, &["-m", "venv", "--clear", venv_arg])
            && run(
                &python,
                &[
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "mcp",
                ],
            );
    }
    if imports_mcp(&python) {
        return Some(python);
    }
    let why = format!(
        "python3 cannot import mcp, and no venv with it could be made at {} \
         (needs python3-venv, and pip able to reach PyPI)",
        venv.display()
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{why}, and CI=true");
    }
    eprintln!("\n*** SKIPPED the Python MCP interop test: {why} ***\n");
    None
}

#[test]
fn the_python_sdk_drives_the_server() {
    need_root!();
    let Some(python) = python_with_mcp() else {
        return;
    };
    let (a, b) = (TestUser::with_key(), TestUser::with_key());
    a.seal("api", b"python-interop-secret");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
    let other = b.home().join(".tono/identity");
    let out = Command::new(&python)
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
