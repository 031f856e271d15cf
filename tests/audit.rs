//! Receipts: every call through `serve` leaves a hash-chained begin record
//! and an end record that matches its outcome, and holds no secret value;
//! `audit verify` names the exact line of each tampering, and with an
//! anchor each cut at either end; a worker killed mid-burst leaves a chain
//! a restarted worker continues; the log's folder and file are checked,
//! and a planted link is refused, never followed.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use tono_seal::audit::{AuditConfig, AuditLog, AuditRecord, Phase, RecordKind};

use common::{stdout, tono, tono_bin, AuditDir, TestUser};

fn records(path: &Path) -> Vec<AuditRecord> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn verify(paths: &[&Path]) -> (i32, String) {
    let mut args = vec!["audit", "verify"];
    let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    args.extend(paths.iter().map(String::as_str));
    let out = tono(&args, b"");
    (out.status.code().unwrap_or(-1), stdout(&out))
}

#[test]
fn a_thousand_calls_through_serve_leave_a_thousand_begun_and_ended_receipts_and_no_value() {
    need_root!();
    let dir = AuditDir::new("serve");
    let users: Vec<TestUser> = (0..8).map(|_| TestUser::with_key()).collect();
    let canaries: Vec<String> = users
        .iter()
        .map(|u| format!("canary-{}-{:016x}", u.name(), rand::random::<u64>()))
        .collect();
    for (u, canary) in users.iter().zip(&canaries) {
        u.seal("tok", canary.as_bytes());
    }
    // Call i prints i bytes (so each receipt finds its outcome by
    // stdout_bytes); every 100th also prints its user's secret.
    let mut input = String::new();
    for i in 1..=1000usize {
        let u = &users[i % users.len()];
        let command = if i % 100 == 0 {
            format!("head -c {} /dev/zero; echo \"$tok\" >&2", i)
        } else {
            format!("head -c {i} /dev/zero")
        };
        let line = json!({
            "id": i, "user": u.name(), "secrets": ["tok"],
            "call": {"tool": "shell", "args": {"command": command, "secrets": ["tok"]}}
        });
        input.push_str(&line.to_string());
        input.push('\n');
    }
    let log = dir.log();
    let out = tono(
        &[
            "serve",
            "--stdio",
            "--concurrency",
            "16",
            "--audit",
            log.to_str().unwrap(),
        ],
        input.as_bytes(),
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    let mut outcomes: BTreeMap<u64, Value> = BTreeMap::new();
    for line in stdout(&out).lines() {
        let answer: Value = serde_json::from_str(line).unwrap();
        let outcome = answer["outcome"].clone();
        assert_eq!(outcome["exit_code"], 0, "{answer}");
        outcomes.insert(answer["id"].as_u64().unwrap(), outcome);
    }
    assert_eq!(outcomes.len(), 1000);

    let (code, said) = verify(&[&log]);
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("intact: 2000 record(s), seq 1..=2000"),
        "{said}"
    );
    assert!(
        said.contains("calls: 1000 begun, 1000 ended, 0 open"),
        "{said}"
    );
    let all = records(&log);
    assert_eq!(all.len(), 2000);
    // Each call's begin record comes before its end record, says what was
    // about to run, as whom, with which names, and nothing of an outcome.
    let begins: BTreeMap<u64, &AuditRecord> = all
        .iter()
        .filter(|r| r.phase == Phase::Begin)
        .map(|r| (r.seq, r))
        .collect();
    let records: Vec<&AuditRecord> = all.iter().filter(|r| r.phase == Phase::End).collect();
    assert_eq!((begins.len(), records.len()), (1000, 1000));
    for end in &records {
        let begin = begins[&end.begin_seq.unwrap()];
        assert!(begin.seq < end.seq);
        assert_eq!(begin.call_id, end.call_id);
        assert_eq!(
            (&begin.user, begin.uid, &begin.tool, &begin.secrets_granted),
            (&end.user, end.uid, &end.tool, &end.secrets_granted)
        );
        assert_eq!((begin.view.as_str(), begin.exit_code), ("private", None));
    }
    for r in records.iter().copied() {
        let i = r.stdout_bytes;
        let o = &outcomes[&i];
        let u = &users[i as usize % users.len()];
        assert_eq!(r.kind, RecordKind::Call);
        assert_eq!(r.user.as_deref(), Some(u.name()));
        assert_eq!(r.uid, Some(u.user.uid));
        assert_eq!(r.tool.as_deref(), Some("shell"));
        assert_eq!(
            (r.verdict.as_str(), r.reason_code.as_str()),
            ("drop", "side_effect")
        );
        assert_eq!(json!(r.reason_code), o["reason"]);
        assert_eq!(r.secrets_requested, ["tok"]);
        assert_eq!(r.secrets_granted, ["tok"]);
        assert_eq!(json!(r.exit_code), o["exit_code"]);
        assert_eq!(json!(r.signal), o["signal"]);
        assert_eq!(json!(r.timed_out), o["timed_out"]);
        assert_eq!(r.stdout_bytes, o["stdout"].as_str().unwrap().len() as u64);
        assert_eq!(r.stderr_bytes, o["stderr"].as_str().unwrap().len() as u64);
        assert_eq!(r.launch_error, None);
        assert!(r.duration_us >= o["duration_us"].as_u64().unwrap(), "{r:?}");
        assert_eq!(json!(r.memory_peak), o["limits"]["memory_peak"]);
        assert_eq!(json!(r.pids_peak), o["limits"]["pids_peak"]);
        // Where a memory cgroup limited the call, its peak is known.
        let by = o["limits"]["memory_max"][1].as_str().unwrap_or_default();
        if by.starts_with("cgroup") {
            assert!(r.memory_peak.is_some_and(|p| p > 0), "{by}: {r:?}");
        }
    }
    // Every 100th call printed its secret: the launcher masked it before
    // it left the user, and the receipt counts the mask (the positive
    // control that the value was printed at all); the log holds no value.
    let bytes = std::fs::read(&log).unwrap();
    let printed = outcomes[&100]["stderr"].as_str().unwrap();
    assert_eq!(printed, "[masked:tok]\n", "{printed:?}");
    for r in &records {
        let masked = r.masks.as_ref().map(|m| m["tok"]);
        let expected = if r.stdout_bytes % 100 == 0 { 1 } else { 0 };
        assert_eq!(masked, Some(expected), "{r:?}");
        assert_eq!(r.view, "private");
    }
    for canary in &canaries {
        let found = bytes.windows(canary.len()).any(|w| w == canary.as_bytes());
        assert!(!found, "the secret value {canary} is in the audit log");
    }
    let name_found = bytes.windows(5).any(|w| w == b"\"tok\"");
    assert!(
        name_found,
        "positive control: the secret's name is in the log"
    );
}

fn appended(log: &Path, n: u64) {
    let log = AuditLog::open(AuditConfig::at(log)).unwrap();
    for i in 0..n {
        let mut r = AuditRecord::new(RecordKind::Call);
        r.user = Some("someone".into());
        r.duration_us = 1000 + i;
        log.append(r).unwrap();
    }
}

#[test]
fn audit_verify_names_the_line_of_each_tampering() {
    need_root!();
    let dir = AuditDir::new("tamper");
    let log = dir.log();
    appended(&log, 10);
    let good = std::fs::read(&log).unwrap();
    let lines: Vec<&[u8]> = good.split_inclusive(|&b| b == b'\n').collect();
    assert_eq!(lines.len(), 10);
    let (code, said) = verify(&[&log]);
    assert_eq!(
        (code, said.lines().next().unwrap()),
        (0, "intact: 10 record(s), seq 1..=10, in 1 file(s)")
    );

    let variant = |name: &str, bytes: Vec<u8>| {
        let path = dir.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let mut edited = good.clone();
    let at = lines[..4].iter().map(|l| l.len()).sum::<usize>();
    let key = b"\"duration_us\":1004";
    let digit = edited[at..]
        .windows(key.len())
        .position(|w| w == key)
        .unwrap()
        + at
        + key.len()
        - 1;
    edited[digit] = b'5'; // one byte of line 5, still a record
    let mut removed = lines.clone();
    removed.remove(4);
    let mut swapped = lines.clone();
    swapped.swap(4, 5);
    let cut = good.len() - lines[9].len() / 2;
    for (name, bytes, want) in [
        ("edited", edited, ":5: changed:"),
        ("removed", removed.concat(), ":5: missing:"),
        ("swapped", swapped.concat(), ":5: swapped:"),
        ("cut", good[..cut].to_vec(), ":10: torn_tail:"),
    ] {
        let path = variant(name, bytes);
        let (code, said) = verify(&[&path]);
        assert_eq!(code, 1, "{name}: {said}");
        assert!(
            said.starts_with(&format!("BROKEN at {}{want}", path.display())),
            "{name}: {said}"
        );
    }
}

fn verify_with(path: &Path, extra: &[&str]) -> (i32, String) {
    let mut args = vec!["audit", "verify", path.to_str().unwrap()];
    args.extend(extra);
    let out = tono(&args, b"");
    (out.status.code().unwrap_or(-1), stdout(&out))
}

#[test]
fn with_an_anchor_audit_verify_finds_each_cut_at_either_end_and_without_one_says_it_cannot() {
    need_root!();
    let dir = AuditDir::new("anchor");
    let log = dir.log();
    appended(&log, 10);
    let out = tono(&["audit", "anchor", log.to_str().unwrap()], b"");
    assert!(out.status.success(), "{}", common::stderr(&out));
    let anchor = stdout(&out).trim().to_owned();
    let (code, said) = verify(&[&log]);
    assert_eq!(code, 0, "{said}");
    let hash = said
        .lines()
        .find_map(|l| l.strip_prefix("last record hash "))
        .unwrap();
    assert_eq!(
        anchor,
        format!("10:{hash}"),
        "the anchor is the last record"
    );
    // Without an anchor the output says what a chain cannot see.
    assert!(
        said.contains("NOT ANCHORED: records cut from the end"),
        "{said}"
    );
    let expect = ["--expect-last", anchor.as_str()];

    // Positive control: the intact log passes with the anchor, and says so.
    let (code, said) = verify_with(&log, &expect);
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("anchored: seq 10 has the expected hash, 0 record(s) after it; the chain starts at its genesis"),
        "{said}"
    );
    assert!(!said.contains("NOT ANCHORED"), "{said}");

    let good = std::fs::read(&log).unwrap();
    let lines: Vec<&[u8]> = good.split_inclusive(|&b| b == b'\n').collect();
    let prev_of_4 = records(&log)[3].prev.clone();
    let variant = |name: &str, bytes: Vec<u8>| {
        let path = dir.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    for (name, kept, plain, want) in [
        (
            "last-removed",
            &lines[..9],
            "intact: 9 record(s), seq 1..=9",
            ":9: tail_cut: the log ends at seq 9, before the anchor's record seq 10: records seq 10..=10 were cut from its end",
        ),
        (
            "trailing-removed",
            &lines[..6],
            "intact: 6 record(s), seq 1..=6",
            ":6: tail_cut: the log ends at seq 6, before the anchor's record seq 10: records seq 7..=10 were cut from its end",
        ),
        (
            "leading-removed",
            &lines[3..],
            "intact: 7 record(s), seq 4..=10",
            ":1: head_cut: the chain starts at seq 4 after a record hashing to",
        ),
    ] {
        let path = variant(name, kept.concat());
        // The limit: each cut verifies without an anchor, which says so.
        let (code, said) = verify(&[&path]);
        assert_eq!(code, 0, "{name}: {said}");
        assert!(said.starts_with(plain), "{name}: {said}");
        assert!(said.contains("NOT ANCHORED"), "{name}: {said}");
        // With the anchor, each fails with its reason at its line.
        let (code, said) = verify_with(&path, &expect);
        assert_eq!(code, 1, "{name}: {said}");
        assert!(
            said.starts_with(&format!("BROKEN at {}{want}", path.display())),
            "{name}: {said}"
        );
    }
    let leading = dir.0.join("leading-removed");
    let (_, said) = verify_with(&leading, &expect);
    assert!(
        said.contains("records seq 1..=3 were cut from its start"),
        "{said}"
    );
    // Older records removed on purpose: named by --expect-first, the rest
    // passes; a wrong one does not.
    let first = format!("4:{prev_of_4}");
    let (code, said) = verify_with(
        &leading,
        &[&expect[..], &["--expect-first", &first]].concat(),
    );
    assert_eq!(code, 0, "{said}");
    let wrong = format!("4:{}", "0".repeat(64));
    let (code, said) = verify_with(
        &leading,
        &[&expect[..], &["--expect-first", &wrong]].concat(),
    );
    assert_eq!(code, 1, "{said}");
    assert!(said.contains(":1: head_cut:"), "{said}");

    // Root rewrote the whole log (a chain of its own): only the anchor
    // sees it.
    let other = AuditDir::new("anchor-forged");
    appended(&other.log(), 10);
    let (code, said) = verify(&[&other.log()]);
    assert_eq!(code, 0, "{said}");
    let (code, said) = verify_with(&other.log(), &expect);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.starts_with(&format!(
            "BROKEN at {}:10: anchor_mismatch: seq 10 hashes to",
            other.log().display()
        )),
        "{said}"
    );

    // The log grew since the anchor was taken: it still holds it.
    appended(&log, 2);
    let (code, said) = verify_with(&log, &expect);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("2 record(s) after it"), "{said}");

    // A malformed anchor is a usage error, not a pass.
    let out = tono(
        &[
            "audit",
            "verify",
            log.to_str().unwrap(),
            "--expect-last",
            "10:abc",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
}

#[test]
fn a_worker_killed_mid_burst_leaves_a_chain_that_a_restarted_worker_continues() {
    need_root!();
    let dir = AuditDir::new("kill");
    let log = dir.log();
    let u = TestUser::with_key();
    let call = |i: usize| {
        json!({"id": i, "user": u.name(), "call": {"tool": "spawn", "args": {"argv": ["/bin/true"]}}})
            .to_string()
            + "\n"
    };
    let mut worker = Command::new(tono_bin())
        .args(["serve", "--stdio", "--audit", log.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = worker.stdin.take().unwrap();
    for i in 0..300 {
        input.write_all(call(i).as_bytes()).unwrap();
    }
    // Kill it once 50 calls have answered, with more still running.
    let mut answers = BufReader::new(worker.stdout.take().unwrap());
    let mut line = String::new();
    for _ in 0..50 {
        line.clear();
        answers.read_line(&mut line).unwrap();
        assert!(line.contains("\"outcome\""), "{line}");
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = worker.wait();
    drop(input);
    let before = records(&log).len();
    let (code, said) = verify(&[&log]);
    assert!(before >= 50, "{before} receipts for 50 answers");
    // One write a record: a SIGKILL leaves a record boundary.
    assert_eq!(code, 0, "{said}");

    // A torn last line (as a write cut short would leave) is kept, and a
    // restarted worker goes on from the last whole record.
    let torn = &std::fs::read(&log).unwrap()[..200];
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap()
        .write_all(torn)
        .unwrap();
    let (code, said) = verify(&[&log]);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains(&format!(":{}: torn_tail:", before + 1)),
        "{said}"
    );
    let input: String = (0..20).map(call).collect();
    let out = tono(
        &["serve", "--stdio", "--audit", log.to_str().unwrap()],
        input.as_bytes(),
    );
    assert!(out.status.success());
    let rotated = dir.0.join("audit.jsonl.000001");
    assert!(
        std::fs::read(&rotated).unwrap().ends_with(torn),
        "the torn file is kept as it was"
    );
    let after = records(&log);
    assert_eq!(after.len(), 40, "a begin and an end record a call");
    assert_eq!(
        after[0].seq,
        before as u64 + 1,
        "the chain goes on after the last whole record"
    );
    // The new file alone, anchored by the rotated file's last whole record:
    // intact; the whole set: the torn write is named, and nothing else.
    let (code, said) = verify(&[&log]);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("audit.jsonl.000001:") && said.contains("torn_tail"),
        "{said}"
    );
    assert!(
        said.contains(&format!("the chain continues: {} record(s)", before + 40)),
        "{said}"
    );
}

#[test]
fn the_log_is_refused_where_root_is_not_alone_and_a_planted_link_is_never_followed() {
    need_root!();
    let dir = AuditDir::new("modes");
    std::fs::create_dir_all(&dir.0).unwrap();
    let open = |path: &Path| AuditLog::open(AuditConfig::at(path)).map(drop);

    // Positive control: a root-only folder and a new file work.
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o700)).unwrap();
    open(&dir.log()).unwrap();
    let mode = std::fs::metadata(dir.log()).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600);

    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = open(&dir.log()).unwrap_err().to_string();
    assert!(e.contains("mode 0755") && e.contains("root's alone"), "{e}");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o700)).unwrap();

    let target = dir.0.join("elsewhere");
    let link = dir.0.join("linked.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = open(&link).unwrap_err().to_string();
    assert!(e.contains("os error 40"), "ELOOP, not followed: {e}");
    assert!(!target.exists(), "the link's target was created");

    let fifo = dir.0.join("fifo.jsonl");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let e = open(&fifo).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");

    let open_file = dir.0.join("open.jsonl");
    std::fs::write(&open_file, b"").unwrap();
    std::fs::set_permissions(&open_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = open(&open_file).unwrap_err().to_string();
    assert!(e.contains("mode 0644"), "{e}");

    let foreign = dir.0.join("foreign.jsonl");
    std::fs::write(&foreign, b"").unwrap();
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o600)).unwrap();
    nix::unistd::chown(&foreign, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let e = open(&foreign).unwrap_err().to_string();
    assert!(e.contains("owned by uid 65534"), "{e}");

    // The CLI says so and runs nothing.
    let out = tono(
        &["serve", "--stdio", "--audit", link.to_str().unwrap()],
        b"",
    );
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains("--no-audit"),
        "{}",
        common::stderr(&out)
    );
}

#[test]
fn provisioning_commands_leave_receipts_with_names_and_no_values() {
    need_root!();
    let dir = AuditDir::new("keys");
    let log = dir.log();
    let log_arg = log.to_str().unwrap();
    let u = TestUser::bare();
    let canary = format!("canary-{:016x}", rand::random::<u64>());
    let run = |args: &[&str], stdin: &[u8]| {
        let mut all = args.to_vec();
        all.extend(["--user", u.name(), "--audit", log_arg]);
        tono(&all, stdin)
    };
    assert!(run(&["keygen"], b"").status.success());
    assert!(run(&["seal", "tok"], canary.as_bytes()).status.success());
    let shown = run(&["reveal", "tok"], b"");
    assert_eq!(
        stdout(&shown),
        canary,
        "positive control: the value was revealed"
    );
    let missing = run(&["reveal", "absent"], b"");
    assert!(!missing.status.success());

    let (code, said) = verify(&[&log]);
    assert_eq!(code, 0, "{said}");
    let records = records(&log);
    /// Tool, secret names, exit code, launch error.
    type Seen<'a> = (Option<&'a str>, Vec<String>, Option<i32>, Option<&'a str>);
    let seen: Vec<Seen<'_>> = records
        .iter()
        .map(|r| {
            assert_eq!(r.kind, RecordKind::Keys);
            assert_eq!(r.uid, Some(u.user.uid));
            (
                r.tool.as_deref(),
                r.secrets_requested.clone(),
                r.exit_code,
                r.launch_error.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (Some("keygen"), vec![], Some(0), None),
            (Some("seal"), vec!["tok".to_owned()], Some(0), None),
            (Some("reveal"), vec!["tok".to_owned()], Some(0), None),
            (
                Some("reveal"),
                vec!["absent".to_owned()],
                None,
                Some("secret_missing")
            ),
        ]
    );
    let bytes = std::fs::read(&log).unwrap();
    assert!(!bytes.windows(canary.len()).any(|w| w == canary.as_bytes()));
}

#[test]
fn a_log_rotated_by_size_verifies_as_one_chain_and_a_lost_file_is_named() {
    need_root!();
    let dir = AuditDir::new("rotate");
    let log = dir.log();
    {
        let writer = AuditLog::open(AuditConfig {
            max_bytes: 2000,
            ..AuditConfig::at(&log)
        })
        .unwrap();
        for _ in 0..30 {
            writer.append(AuditRecord::new(RecordKind::Call)).unwrap();
        }
    }
    let rotated: Vec<PathBuf> = (1..)
        .map(|n| dir.0.join(format!("audit.jsonl.{n:06}")))
        .take_while(|p| p.exists())
        .collect();
    assert!(rotated.len() >= 5, "{} rotated files", rotated.len());
    for file in rotated.iter().chain([&log]) {
        let size = std::fs::metadata(file).unwrap().len();
        assert!(size <= 2000, "{}: {size} bytes", file.display());
    }
    let (code, said) = verify(&[&log]);
    assert_eq!(code, 0, "{said}");
    let files = rotated.len() + 1;
    assert!(
        said.starts_with(&format!(
            "intact: 30 record(s), seq 1..=30, in {files} file(s)"
        )),
        "{said}"
    );
    // A writer opened again continues the chain in the same file.
    appended(&log, 1);
    assert_eq!(records(&log).last().unwrap().seq, 31);

    // Losing a middle file is a gap at the first line of the next one.
    let lost = &rotated[1];
    let first_after = records(&rotated[2])[0].seq;
    std::fs::remove_file(lost).unwrap();
    let (code, said) = verify(&[&log]);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.starts_with(&format!("BROKEN at {}:1: missing:", rotated[2].display())),
        "{said} (first seq after the gap {first_after})"
    );
}

#[test]
fn audit_show_prints_a_forged_tool_and_secret_name_escaped_one_line_per_record() {
    need_root!();
    let dir = AuditDir::new("show");
    let log = dir.log();
    let log_arg = log.to_str().unwrap();
    let u = TestUser::with_key();
    // What a caller of `serve` chooses: a newline (a forged row), colours,
    // a bell, a right-to-left override, and a backslash.
    let forged = "x\n\x1b[31mROOT\x07\u{202e}gnp.exe\\";
    let input = [
        json!({"id": 1, "user": u.name(),
               "call": {"tool": "shell", "args": {"command": "true"}}}),
        json!({"id": 2, "user": u.name(),
               "call": {"tool": forged, "args": {"secrets": [forged]}}}),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect::<String>();
    let out = tono(&["serve", "--stdio", "--audit", log_arg], input.as_bytes());
    assert!(out.status.success(), "{}", common::stderr(&out));
    let (code, said) = verify(&[&log]);
    assert_eq!(code, 0, "the chain is intact: {said}");
    let stored = records(&log);
    // The shell call's begin and end, the refused call's one whole record.
    assert_eq!(stored.len(), 3);
    let forged_record = stored
        .iter()
        .find(|r| r.tool.as_deref() == Some(forged))
        .expect("the forged tool name is stored as it came");
    assert_eq!(forged_record.secrets_requested, [forged]);

    let raw = |shown: &[u8], what: &str| {
        for (bytes, name) in [
            (&b"\x1b"[..], "ESC"),
            (&b"\x07"[..], "BEL"),
            ("\u{202e}".as_bytes(), "U+202E"),
        ] {
            assert!(
                !shown.windows(bytes.len()).any(|w| w == bytes),
                "{what} holds a raw {name}:\n{}",
                String::from_utf8_lossy(shown)
            );
        }
    };

    let table = tono(&["audit", "show", log_arg], b"");
    assert!(table.status.success(), "{}", common::stderr(&table));
    raw(&table.stdout, "the table");
    let text = stdout(&table);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "a header and one line per record:\n{text}");
    assert!(
        lines.iter().any(|l| l.contains(" begun ")),
        "a begin record is shown as begun:\n{text}"
    );
    // Positive control: a plain tool name is printed as it is.
    assert!(lines.iter().any(|l| l.contains(" shell ")), "{text}");
    let escaped = r"x\n\x1b[31mROOT\x07\u{202e}gnp.exe\\";
    let row = lines
        .iter()
        .find(|l| l.contains(escaped))
        .unwrap_or_else(|| panic!("no row shows the forged tool escaped:\n{text}"));
    assert!(
        row.contains(&format!("!{escaped}")),
        "the secret name, not granted, escaped: {row}"
    );

    let json_out = tono(&["audit", "show", "--json", log_arg], b"");
    assert!(json_out.status.success(), "{}", common::stderr(&json_out));
    raw(&json_out.stdout, "the JSON lines");
    let text = stdout(&json_out);
    let shown: Vec<AuditRecord> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(shown.len(), 3, "one line per record:\n{text}");
    assert!(text.contains(r"\u202e"), "{text}");
    // The same values as stored.
    assert_eq!(
        shown.iter().map(|r| r.tool.clone()).collect::<Vec<_>>(),
        stored.iter().map(|r| r.tool.clone()).collect::<Vec<_>>()
    );
}
