//! A caller of `serve` cannot make a receipt too long to read back: a
//! record longer than the 1 MiB a worker reads back when it continues a
//! log (a tool's name of 1,048,500 bytes in a refusal, or 4,150 granted
//! secret names of 128 bytes in a call's begin and end records) left a log
//! no worker could open again ("the last record cannot be continued"), and
//! a second worker sharing it lost the end record of a call that ran.
//! Here such calls get their refusal recorded, the giant one launches
//! nothing (no marker), and a second worker sharing the log still writes
//! the end record of its call in flight, a new worker opens the log and
//! runs a call (the positive control) and `audit verify` passes.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use tono_seal::audit::{AuditRecord, Phase};

use common::{marker_path, stdout, tono, tono_bin, AuditDir, TestUser, CLI_STARTS};

/// The longest line a worker reads back (`MAX_LINE` in src/audit/log.rs).
const READ_BACK: usize = 1024 * 1024;

fn answers(out: &std::process::Output) -> Vec<Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_caller_cannot_make_a_receipt_too_long_to_read_back() {
    need_root!();
    let u = TestUser::bare();
    let dir = AuditDir::new("record-size");
    let log = dir.log();
    let log = log.to_str().unwrap();
    let tag = std::process::id();
    let started = marker_path(&format!("record-size-started-{tag}"));
    let go = marker_path(&format!("record-size-go-{tag}"));
    let waited = marker_path(&format!("record-size-waited-{tag}"));
    let giant = marker_path(&format!("record-size-giant-{tag}"));
    let control = marker_path(&format!("record-size-control-{tag}"));
    for m in [&started, &go, &waited, &giant, &control] {
        let _ = std::fs::remove_file(m);
    }

    // Worker 1: a call in flight until the giant calls are answered.
    let waiter = json!({"id": "waiter", "user": u.name(), "call": {"tool": "shell", "args": {
        "command": format!("touch {started}; while [ ! -e {go} ]; do sleep 0.05; done; touch {waited}")}}});
    let worker1 = {
        let _starting = CLI_STARTS.read().unwrap_or_else(|p| p.into_inner());
        let mut child = Command::new(tono_bin())
            .args(["serve", "--stdio", "--audit", log])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(format!("{waiter}\n").as_bytes()).unwrap();
        drop(input);
        child
    };
    // Polled by count, not by time: the shell call has begun.
    let mut polls = 0;
    while !std::path::Path::new(&started).exists() {
        polls += 1;
        assert!(polls < 6000, "the waiting call never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }

    // Worker 2, the same log: an unknown tool with a name of 1,048,500
    // bytes (refused, a whole record), and a call granting and asking for
    // 4,150 secret names of 128 bytes (its begin and end records 1,087,889
    // bytes each before).
    let names: Vec<String> = (0..4150)
        .map(|i| format!("S{i:04}{}", "x".repeat(123)))
        .collect();
    let long_tool = json!({"id": "tool", "user": u.name(),
        "call": {"tool": "x".repeat(1_048_500), "args": {}}});
    let many = json!({"id": "names", "user": u.name(), "secrets": names,
        "call": {"tool": "spawn", "args": {"argv": ["/usr/bin/touch", giant], "secrets": names}}});
    let out = tono(
        &["serve", "--stdio", "--audit", log],
        format!("{long_tool}\n{many}\n").as_bytes(),
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    let giant_answers = answers(&out);

    // Worker 1's call ends now, after worker 2 wrote: its end record lands.
    std::fs::write(&go, b"").unwrap();
    let out1 = worker1.wait_with_output().unwrap();
    assert!(out1.status.success(), "{}", common::stderr(&out1));
    let waited_answer = &answers(&out1)[0];
    assert_eq!(waited_answer["outcome"]["exit_code"], 0, "{waited_answer}");
    assert!(
        std::path::Path::new(&waited).exists(),
        "the waiting call ran"
    );
    assert!(
        !common::stderr(&out1).contains("could not be written"),
        "worker 1 lost a receipt: {}",
        common::stderr(&out1)
    );

    for answer in &giant_answers {
        let o = &answer["outcome"];
        if answer["id"] == "names" {
            assert_eq!(o["verdict"], "refuse", "{answer:.300}");
            assert_eq!(o["launch_error"]["code"], "receipt_too_large", "{o:.300}");
        } else {
            assert_eq!(o["launch_error"]["code"], "no_runner", "{o:.300}");
        }
    }
    assert!(
        !std::path::Path::new(&giant).exists(),
        "the refused call ran: {giant} exists"
    );

    let text = std::fs::read_to_string(dir.log()).unwrap();
    let longest = text.lines().map(str::len).max().unwrap();
    assert!(longest < READ_BACK, "a record of {longest} bytes");
    let records: Vec<AuditRecord> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Worker 1's begin came first, before worker 2 started.
    assert_eq!(records[0].phase, Phase::Begin, "{:?}", records[0]);
    let waiter_begin = Some(records[0].seq);
    assert!(
        records
            .iter()
            .any(|r| r.phase == Phase::Whole
                && r.launch_error.as_deref() == Some("receipt_too_large")),
        "the refusal is recorded"
    );
    assert!(
        records
            .iter()
            .any(|r| r.phase == Phase::End && r.begin_seq == waiter_begin),
        "the waiting call's end record: {records:#?}"
    );

    // A new worker opens the log and runs a call (before: exit 2, "the
    // last record cannot be continued").
    let request = json!({"id": 1, "user": u.name(),
        "call": {"tool": "spawn", "args": {"argv": ["/usr/bin/touch", control]}}});
    let out = tono(
        &["serve", "--stdio", "--audit", log],
        format!("{request}\n").as_bytes(),
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(
        std::path::Path::new(&control).exists(),
        "the control call ran"
    );
    let checked = tono(&["audit", "verify", log], b"");
    assert!(checked.status.success(), "{}", common::stderr(&checked));
    assert!(
        !stdout(&checked).contains("OPEN call"),
        "{}",
        stdout(&checked)
    );
    for m in [&started, &go, &waited, &control] {
        let _ = std::fs::remove_file(m);
    }
}
