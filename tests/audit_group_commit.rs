//! Group commit: many calls begin at once and share `fsync`s, and none is
//! let start before its own begin record is durable.
//!
//! 48 threads wait at one barrier, then each begins a call (what
//! `drop_and_run` does right before the launch) and, the moment `begin`
//! returns, asks the log whether that begin record is durable — whether an
//! `fsync` that began after the record's write returned has succeeded.
//! Every one must be, in each of 4 rounds, and at least one `fsync` made
//! in each; the `fsync`s are counted and printed beside the records, every
//! record is in the file and `audit verify` passes. The control: the
//! `fsync` count moves only when a writer waits (a begin, always; an end
//! record of a log that `fsync`s every 64 records, not), so it counts
//! what the group commit did.

mod common;

use std::sync::{Arc, Barrier};

use tono_seal::audit::{AuditConfig, AuditLog, AuditRecord, RecordKind};

use common::AuditDir;

const THREADS: usize = 48;
const ROUNDS: usize = 4;

/// A call's record as the worker would begin it.
fn call_record(i: usize) -> AuditRecord {
    let mut r = AuditRecord::new(RecordKind::Call);
    (r.user, r.uid, r.tool) = (Some("someone".into()), Some(61000), Some("spawn".into()));
    r.secrets_requested = vec![format!("secret_{i}")];
    r.secrets_granted = r.secrets_requested.clone();
    r
}

#[test]
fn calls_begun_at_once_each_start_only_once_their_begin_record_is_durable() {
    need_root!();
    let dir = AuditDir::new("group-commit");
    let log = Arc::new(AuditLog::open(AuditConfig::at(dir.log())).unwrap());
    let mut records = 0;
    for round in 0..ROUNDS {
        let before = log.fsyncs();
        let barrier = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|i| {
                let (log, barrier) = (Arc::clone(&log), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    let begun = log.begin(call_record(i)).expect("begin");
                    // Here the call would launch: its record must be durable.
                    let durable = log.is_durable(&begun);
                    log.end(begun, call_record(i)).expect("end");
                    durable
                })
            })
            .collect();
        let durable: Vec<bool> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        records += 2 * THREADS;
        let fsyncs = log.fsyncs() - before;
        eprintln!("round {round}: {} records, {fsyncs} fsyncs", 2 * THREADS);
        assert_eq!(
            durable.iter().filter(|d| !**d).count(),
            0,
            "round {round}: begin returned before the record was durable: {durable:?}"
        );
        assert!(fsyncs >= 1, "round {round}: no fsync at all");
    }
    assert_eq!(dir.records().len(), records);
    let verify = common::tono(&["audit", "verify", dir.log().to_str().unwrap()], b"");
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );

    // The control: no fsync where no writer waits.
    let batched_dir = AuditDir::new("group-commit-batched");
    let batched = AuditLog::open(AuditConfig {
        fsync_every: 64,
        ..AuditConfig::at(batched_dir.log())
    })
    .unwrap();
    let first = batched.begin(call_record(0)).unwrap();
    assert!(
        batched.is_durable(&first),
        "a begin waits, whatever fsync_every"
    );
    let second = batched.begin(call_record(1)).unwrap();
    let fsyncs = batched.fsyncs();
    batched.end(first, call_record(0)).unwrap();
    assert_eq!(
        batched.fsyncs(),
        fsyncs,
        "an end record of a log fsynced every 64 is not waited for"
    );
    assert!(batched.is_durable(&second));
}
