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
use tono_seal::audit::{AuditRecord, Phase};

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
