//! Receipts on a full disk: an audit log on a small tmpfs this test mounts
//! itself, 64 calls sent at once to a real `tono-seal serve`. Every call
//! that ran (its tool left a marker outside the tmpfs) has its begin and
//! its end record, every call that did not was refused with the typed
//! `audit_unavailable` / `audit_full` and left no marker, the refusal
//! itself is recorded, no line is torn and `audit verify` passes — in each
//! round, with the break landing at a different call, and in a round with
//! room for all (the positive control: all 64 run).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tono_seal::audit::log::DEFAULT_MAX_BYTES;
use tono_seal::audit::{AuditConfig, AuditLog, AuditRecord, Phase, RecordKind};

use common::{stdout, tono, AuditDir, TestUser};

const CALLS: usize = 64;

/// A tmpfs of `kib` KiB at `at`, root's alone, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, kib: u64) -> Self {
        std::fs::create_dir_all(at).unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(format!("size={kib}k,mode=0700").as_str()),
        )
        .expect("mount a tmpfs for the log");
        Self(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        nix::mount::umount(&self.0).expect("unmount the log's tmpfs");
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// What one round counted.
#[derive(Debug)]
struct Round {
    kib: u64,
    sent: usize,
    ran: usize,
    begun: usize,
    ended: usize,
    refused: usize,
    /// End records written after the refusal's record: calls in flight
    /// when the disk filled, whose ends landed in the reserve.
    ends_after_break: usize,
}

fn round(u: &TestUser, dir: &AuditDir, kib: u64) -> Round {
    let fs = Tmpfs::mount(&dir.0.join(format!("tmpfs-{kib}k")), kib);
    let log = fs.0.join("audit.jsonl");
    let markers = common::tempdir();
    std::fs::set_permissions(
        markers.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    // Call i prints i bytes (its end record finds it by stdout_bytes) and
    // leaves the marker i outside the tmpfs: the proof it ran.
    let input: String = (1..=CALLS)
        .map(|i| {
            let command = format!(
                "head -c {i} /dev/zero; : > {}/{i}",
                markers.path().display()
            );
            json!({"id": i, "user": u.name(),
                   "call": {"tool": "shell", "args": {"command": command}}})
            .to_string()
                + "\n"
        })
        .collect();
    let concurrency = CALLS.to_string();
    let out = tono(
        &[
            "serve",
            "--stdio",
            "--concurrency",
            &concurrency,
            "--audit",
            log.to_str().unwrap(),
        ],
        input.as_bytes(),
    );
    assert!(out.status.success(), "{}", common::stderr(&out));

    let ran: BTreeSet<u64> = std::fs::read_dir(markers.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    let mut refused = BTreeSet::new();
    let mut answered = BTreeSet::new();
    for line in stdout(&out).lines() {
        let answer: Value = serde_json::from_str(line).unwrap();
        let id = answer["id"].as_u64().unwrap();
        answered.insert(id);
        let o = &answer["outcome"];
        if o["reason"] == "audit_unavailable" {
            // Typed, and nothing was launched.
            assert_eq!(o["verdict"], "refuse", "{answer}");
            assert_eq!(o["launch_error"]["code"], "audit_full", "{answer}");
            assert_eq!(o["exit_code"], Value::Null, "{answer}");
            assert!(!ran.contains(&id), "refused call {id} ran: {answer}");
            refused.insert(id);
        } else {
            assert_eq!(o["exit_code"], 0, "{answer}");
            assert!(ran.contains(&id), "call {id} answered exit 0, no marker");
        }
    }
    assert_eq!(answered.len(), CALLS, "every call answered");

    // Every line whole and a record: nothing torn.
    let bytes = std::fs::read(&log).unwrap();
    assert!(
        bytes.is_empty() || bytes.ends_with(b"\n"),
        "a torn last line"
    );
    let records: Vec<AuditRecord> = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("every line a record"))
        .collect();
    let begins: Vec<&AuditRecord> = records.iter().filter(|r| r.phase == Phase::Begin).collect();
    let ends: Vec<&AuditRecord> = records.iter().filter(|r| r.phase == Phase::End).collect();
    let ended: BTreeSet<u64> = ends.iter().map(|r| r.stdout_bytes).collect();
    assert_eq!(
        ended, ran,
        "the calls that ran and the calls with an end record ({kib} KiB)"
    );
    assert_eq!(
        (begins.len(), ends.len()),
        (ran.len(), ran.len()),
        "{kib} KiB"
    );
    for end in &ends {
        assert_eq!(end.exit_code, Some(0), "{end:?}");
        assert!(
            begins.iter().any(|b| Some(b.seq) == end.begin_seq
                && b.call_id == end.call_id
                && b.seq < end.seq),
            "{end:?} has no begin record before it"
        );
    }
    // The refusal itself is recorded, once: the first refused call.
    let failures: Vec<&AuditRecord> = records.iter().filter(|r| r.phase == Phase::Whole).collect();
    if refused.is_empty() {
        assert!(failures.is_empty(), "{failures:?}");
    } else {
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert_eq!(
            (
                failures[0].reason_code.as_str(),
                failures[0].launch_error.as_deref()
            ),
            ("audit_unavailable", Some("audit_full"))
        );
    }
    assert_eq!(ran.len() + refused.len(), CALLS);

    let checked = tono(&["audit", "verify", log.to_str().unwrap()], b"");
    let said = stdout(&checked);
    assert!(checked.status.success(), "{said}");
    let n = ran.len();
    assert!(
        said.contains(&format!("calls: {n} begun, {n} ended, 0 open")),
        "{said}"
    );
    let break_seq = failures.first().map_or(u64::MAX, |f| f.seq);
    let ends_after_break = ends.iter().filter(|e| e.seq > break_seq).count();
    drop(fs);
    Round {
        ends_after_break,
        kib,
        sent: CALLS,
        ran: n,
        begun: begins.len(),
        ended: ends.len(),
        refused: refused.len(),
    }
}

#[test]
fn on_a_full_disk_every_call_that_ran_has_its_receipt_and_the_rest_are_refused_unrun() {
    need_root!();
    let u = TestUser::with_key();
    let dir = AuditDir::new("full-disk");
    std::fs::create_dir_all(&dir.0).unwrap();
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let mut rounds = Vec::new();
    let sizes = [12, 16, 20, 32, 48, 64, 12, 32, 1024];
    for kib in sizes {
        let r = round(&u, &dir, kib);
        eprintln!(
            "{:>5} KiB: sent {}, ran {}, begin records {}, end records {}, refused {}, ends written after the break {}",
            r.kib, r.sent, r.ran, r.begun, r.ended, r.refused, r.ends_after_break
        );
        assert_eq!((r.begun, r.ended), (r.ran, r.ran), "{r:?}");
        assert_eq!(r.sent, r.ran + r.refused, "{r:?}");
        rounds.push(r);
    }
    // Where there is room all run (the positive control); on the small
    // ones the break lands at different calls.
    let (small, roomy) = rounds.split_at(sizes.len() - 1);
    assert_eq!((roomy[0].ran, roomy[0].refused), (CALLS, 0), "{rounds:?}");
    let broke: BTreeSet<usize> = small.iter().map(|r| r.ran).collect();
    assert!(
        small.iter().all(|r| r.refused > 0 && r.kib < 1024) && broke.len() >= 4,
        "{rounds:?}"
    );
}

/// Makes the test's audit folder, root's alone.
fn made_root_only(dir: &AuditDir) {
    std::fs::create_dir_all(&dir.0).unwrap();
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
}

/// A call's record as the worker would begin it, with one secret name.
fn call_record(i: u64) -> AuditRecord {
    let mut r = AuditRecord::new(RecordKind::Call);
    (r.user, r.uid, r.tool) = (Some("someone".into()), Some(61000), Some("shell".into()));
    r.secrets_requested = vec![format!("secret_{i}")];
    r.secrets_granted = r.secrets_requested.clone();
    r
}

#[test]
fn the_log_itself_on_a_full_disk_refuses_begins_and_still_writes_every_end_and_no_torn_line() {
    need_root!();
    let dir = AuditDir::new("full-disk-lib");
    made_root_only(&dir);
    let call = call_record;

    // Begins until the room runs out; then every end still lands.
    let fs = Tmpfs::mount(&dir.0.join("begins"), 16);
    let path = fs.0.join("audit.jsonl");
    let log = AuditLog::open(AuditConfig::at(&path)).unwrap();
    let mut begun = Vec::new();
    let refusal = loop {
        match log.begin(call(begun.len() as u64)) {
            Ok(b) => begun.push(b),
            Err(e) => break e,
        }
        assert!(begun.len() < 1000, "a 16 KiB file system never filled");
    };
    assert!(!begun.is_empty());
    assert_eq!(refusal.code(), "audit_full", "{refusal}");
    assert!(
        refusal.to_string().contains("os error 28"),
        "ENOSPC: {refusal}"
    );
    // The log stays shut to new calls and whole records alike.
    let shut = log.check().unwrap_err();
    assert_eq!(shut.code(), "audit_full", "{shut}");
    assert!(log.begin(call(0)).is_err());
    assert!(log.append(call(0)).is_err());
    let n = begun.len();
    for (i, b) in begun.into_iter().enumerate() {
        let mut end = call(i as u64);
        end.exit_code = Some(0);
        end.masks = Some([(format!("secret_{i}"), u64::from(u32::MAX))].into());
        log.end(b, end)
            .expect("an end lands in the room held for it");
    }
    drop(log);
    let records = whole_lines(&path);
    let count = |p: Phase| records.iter().filter(|r| r.phase == p).count();
    assert_eq!(
        (count(Phase::Begin), count(Phase::End), count(Phase::Whole)),
        (n, n, 1)
    );
    let checked = tono(&["audit", "verify", path.to_str().unwrap()], b"");
    let said = stdout(&checked);
    assert!(checked.status.success(), "{said}");
    assert!(
        said.contains(&format!("calls: {n} begun, {n} ended, 0 open")),
        "{said}"
    );
    eprintln!("16 KiB, begins by hand: {n} begun, {n} ended, 1 refusal recorded");
    drop(fs);

    // Whole records (something already done): the one the room ran out
    // for goes into the failure reserve, and nothing after it.
    let fs = Tmpfs::mount(&dir.0.join("wholes"), 8);
    let path = fs.0.join("audit.jsonl");
    let log = AuditLog::open(AuditConfig::at(&path)).unwrap();
    let mut written = 0;
    while log.check().is_ok() {
        log.append(call(written))
            .expect("written, in the reserve at the last");
        written += 1;
        assert!(written < 1000, "an 8 KiB file system never filled");
    }
    assert!(log.append(call(0)).is_err());
    drop(log);
    assert_eq!(whole_lines(&path).len() as u64, written);
    eprintln!("8 KiB, whole records: {written} written, the last in the reserve");
    drop(fs);

    // No room for the reserve at all: the log is not opened, typed.
    let fs = Tmpfs::mount(&dir.0.join("full"), 8);
    let filler = fs.0.join("filler");
    let _ = std::fs::write(&filler, vec![0u8; 16 * 1024]);
    let e = AuditLog::open(AuditConfig::at(fs.0.join("audit.jsonl"))).unwrap_err();
    assert_eq!(e.code(), "audit_full", "{e}");
    assert!(e.to_string().contains("os error 28"), "{e}");
    // Positive control: with the filler gone, it opens.
    std::fs::remove_file(&filler).unwrap();
    AuditLog::open(AuditConfig::at(fs.0.join("audit.jsonl"))).unwrap();
    drop(fs);
}

/// The records of `path`, every line whole.
fn whole_lines(path: &Path) -> Vec<AuditRecord> {
    let bytes = std::fs::read(path).unwrap();
    assert!(
        bytes.is_empty() || bytes.ends_with(b"\n"),
        "a torn last line"
    );
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("every line a record"))
        .collect()
}

/// Fills the file system under `at` (a file `name` there, grown until
/// `ENOSPC`): another writer on the log's disk taking what is free.
fn fill(at: &Path, name: &str) -> u64 {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(at.join(name))
        .unwrap();
    let mut took = 0u64;
    loop {
        match f.write(&[0u8; 512]) {
            Ok(n) => took += n as u64,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                return took;
            }
        }
        assert!(took < 1 << 30, "never filled");
    }
}

#[test]
fn a_rotation_on_a_full_disk_still_holds_the_ends_of_the_calls_in_flight() {
    need_root!();
    let dir = AuditDir::new("full-disk-rotation");
    made_root_only(&dir);
    let call = call_record;
    // `rotate`: the refused begin goes past max_bytes (a new file); without,
    // the positive control: the same calls in one file.
    // The refusal comes where the full disk puts it, whatever max_bytes
    // is; the control (no rotation) finds that size, and the rotating run
    // sets max_bytes half a line past it, so that exactly the refused
    // begin is due to rotate, whatever a record's length.
    let mut refused_at: Option<(u64, u64)> = None;
    for rotate in [false, true] {
        let fs = Tmpfs::mount(&dir.0.join(format!("rotate-{rotate}")), 64);
        let path = fs.0.join("audit.jsonl");
        let mut config = AuditConfig::at(&path);
        if rotate {
            let (size, line) = refused_at.expect("the control ran first");
            config.max_bytes = size + line / 2;
        }
        let log = AuditLog::open(config).unwrap();
        let mut begun: Vec<_> = (0..8).map(|i| log.begin(call(i)).unwrap()).collect();
        // The disk fills (another writer); calls begin until one is refused.
        fill(&fs.0, "filler-1");
        let (size, refusal) = loop {
            let size = std::fs::metadata(&path).unwrap().len();
            match log.begin(call(begun.len() as u64)) {
                Ok(b) => begun.push(b),
                Err(e) => break (size, e),
            }
            assert!(begun.len() < 100, "never refused");
        };
        assert_eq!(refusal.code(), "audit_full", "{refusal}");
        let n = begun.len();
        // What the refused begin gave back is taken too.
        fill(&fs.0, "filler-2");
        // The refused begin was due to rotate the log (before, it did, and
        // gave back the old file's reserve first); none before it was.
        let line = size / n as u64;
        let max = match refused_at {
            Some((at, line)) if rotate => {
                assert_eq!(size, at, "the refusal came where the control's did");
                at + line / 2
            }
            _ => DEFAULT_MAX_BYTES,
        };
        assert_eq!(size + line > max, rotate, "{size} bytes at the refusal");
        assert!(size <= max, "no earlier begin was due to rotate");
        refused_at.get_or_insert((size, line));
        let rotated = fs.0.join("audit.jsonl.000001").exists();
        let mut lost = Vec::new();
        for (i, b) in begun.into_iter().enumerate() {
            let mut end = call(i as u64);
            end.exit_code = Some(0);
            if let Err(e) = log.end(b, end) {
                lost.push(format!("end {i}: {e}"));
            }
        }
        eprintln!(
            "rotation due {rotate} (rotated {rotated}): {} of {n} ends lost",
            lost.len()
        );
        assert!(
            lost.is_empty(),
            "rotation due {rotate}: ends of calls in flight lost: {lost:#?}"
        );
        drop(log);
        let checked = tono(&["audit", "verify", path.to_str().unwrap()], b"");
        let said = stdout(&checked);
        assert!(checked.status.success(), "{said}");
        assert!(said.contains(&format!("{n} ended, 0 open")), "{said}");
        drop(fs);
    }
}
