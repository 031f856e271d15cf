//! One receipt: the stable, versioned schema of an audit record.
//!
//! Guarantees: a record names secrets and never holds a value; it carries
//! no environment and no tool output, only their byte counts. Every field
//! is always present (`null` where unknown), in this order, so a record's
//! bytes are the same for the same facts. [`SCHEMA_VERSION`] changes when a
//! field's meaning does; records of an older version ([`OLDEST_VERSION`]
//! on) still read, with the fields they lack at their defaults.
//!
//! Version 2 splits a call into two records: a `begin` record, written
//! (and `fsync`ed) before anything of the call runs, says what is about to
//! run, as whom, with which secret names; an `end` record, naming its
//! begin's `seq` and sharing its `call_id`, says how it ended. A record of
//! something that ran before its receipt was written (a key operation, a
//! refusal where nothing ran) is one `whole` record, as every version 1
//! record was.
//!
//! Version 3 adds `broker`: each request of the call its broker put a bound
//! secret's value into, or refused, by secret name, host, method, path
//! without its query, status and bytes; never a value or a placeholder.
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

/// The schema's version, the record's `v`.
pub const SCHEMA_VERSION: u32 = 3;

/// The oldest version a reader still accepts (`v: 1`: one whole record a
/// call, no `phase`).
pub const OLDEST_VERSION: u32 = 1;

/// The `prev` of the first record of a chain.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What a record is the receipt of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// One tool call through `drop_and_run`.
    Call,
    /// One key store operation (`keygen`, `seal`, `rotate`, …) as a user.
    Keys,
    /// One provider program (sign-in, sign-out, status) as a user.
    Provider,
}

/// Which part of a call a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Written before the call's program starts: what is about to run. A
    /// call whose begin record could not be written never starts.
    Begin,
    /// Written when a begun call ended: how it ended (`begin_seq` names
    /// its begin record).
    End,
    /// The whole receipt in one record: something with nothing left
    /// running when it was written (every record of version 1).
    #[default]
    Whole,
}

impl Phase {
    /// The stable name, as in the record.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Begin => "begin",
            Self::End => "end",
            Self::Whole => "whole",
        }
    }
}

/// One audit record (schema version 2). The log sets `v`, `seq`, `time`,
/// `worker_pid`, `call_id` and `prev` when it appends the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditRecord {
    /// The schema version ([`SCHEMA_VERSION`]).
    pub v: u32,
    /// The record's number in its chain: one more than the previous one's,
    /// across rotated files.
    pub seq: u64,
    /// When it was written, RFC 3339 in UTC with microseconds.
    pub time: String,
    /// The pid of the worker that wrote it.
    pub worker_pid: u32,
    /// `<worker pid>-<n>`: unique among the records of one worker.
    pub call_id: String,
    /// Which part of a call this is (absent in version 1: `whole`).
    #[serde(default)]
    pub phase: Phase,
    /// For an `end` record, the `seq` of its `begin` record; else `null`
    /// (absent in version 1).
    #[serde(default)]
    pub begin_seq: Option<u64>,
    /// What this is the receipt of.
    pub kind: RecordKind,
    /// The user it ran as, if one was named.
    pub user: Option<String>,
    /// That user's uid.
    pub uid: Option<u32>,
    /// The tool (`shell`, `http_get`, …) or key store operation (`seal`).
    pub tool: Option<String>,
    /// The verdict: `stay`, `drop` or `refuse` (`drop` for key operations).
    pub verdict: String,
    /// The verdict's reason code.
    pub reason_code: String,
    /// The secret names the call asked for.
    pub secrets_requested: Vec<String>,
    /// The requested names the turn granted.
    pub secrets_granted: Vec<String>,
    /// Of those, the ones given as files in the call's
    /// `$CREDENTIALS_DIRECTORY` (absent when none: records written before
    /// secrets could be files read the same).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets_as_files: Vec<String>,
    /// The network the call ran with: `none`, `proxy` or `host` (`host`
    /// where nothing ran).
    pub network: String,
    /// What the call's program saw: `private` (its own mount and PID
    /// namespaces, the key store hidden, its output masked), `shared` (the
    /// host's), or `host` where nothing ran.
    pub view: String,
    /// The program's exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
    /// The call's timeout fired.
    pub timed_out: bool,
    /// Wall time of the call, in microseconds.
    pub duration_us: u64,
    /// Forks the call's `pids.max` refused, where a cgroup counted them.
    pub pids_max_hits: Option<u64>,
    /// Processes of the call its memory limit killed, where counted.
    pub oom_kills: Option<u64>,
    /// The most memory the call's cgroup used, in bytes, where known.
    pub memory_peak: Option<u64>,
    /// The most processes the call's cgroup held, where known.
    pub pids_peak: Option<u64>,
    /// Masks applied to the output, by secret name; `null` while no
    /// masking relay runs.
    pub masks: Option<std::collections::BTreeMap<String, u64>>,
    /// Each request the call's broker substituted a bound secret in or
    /// refused; `null` where the call had no broker.
    #[serde(default)]
    pub broker: Option<Vec<crate::broker::uses::BrokerUse>>,
    /// Bytes of stdout the worker received (after its cap).
    pub stdout_bytes: u64,
    /// Bytes of stderr the worker received (after its cap).
    pub stderr_bytes: u64,
    /// The launch error's code, if the call did not run to its end.
    pub launch_error: Option<String>,
    /// SHA-256 (hex) of the previous record's line, without its newline;
    /// [`GENESIS`] for the first record of a chain.
    pub prev: String,
}

impl AuditRecord {
    /// A record of `kind` with every fact unknown; the log fills in the
    /// chain fields when it appends it.
    pub fn new(kind: RecordKind) -> Self {
        Self {
            v: SCHEMA_VERSION,
            seq: 0,
            time: String::new(),
            worker_pid: 0,
            call_id: String::new(),
            phase: Phase::Whole,
            begin_seq: None,
            kind,
            user: None,
            uid: None,
            tool: None,
            verdict: String::new(),
            reason_code: String::new(),
            secrets_requested: Vec::new(),
            secrets_granted: Vec::new(),
            secrets_as_files: Vec::new(),
            network: "host".into(),
            view: "host".into(),
            exit_code: None,
            signal: None,
            timed_out: false,
            duration_us: 0,
            pids_max_hits: None,
            oom_kills: None,
            memory_peak: None,
            pids_peak: None,
            masks: None,
            broker: None,
            stdout_bytes: 0,
            stderr_bytes: 0,
            launch_error: None,
            prev: GENESIS.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_serializes_every_field_in_order_and_reads_back() {
        let mut r = AuditRecord::new(RecordKind::Call);
        r.secrets_requested = vec!["token".into()];
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.starts_with(r#"{"v":3,"seq":0,"time":"","#), "{line}");
        assert!(
            line.contains(r#""call_id":"","phase":"whole","begin_seq":null,"kind":"call""#),
            "{line}"
        );
        assert!(
            line.ends_with(&format!(r#""prev":"{GENESIS}"}}"#)),
            "{line}"
        );
        assert!(
            line.contains(r#""masks":null"#),
            "unknown is null, not absent"
        );
        assert_eq!(serde_json::from_str::<AuditRecord>(&line).unwrap(), r);
        let extra = line.replacen('{', r#"{"value":"x","#, 1);
        assert!(serde_json::from_str::<AuditRecord>(&extra).is_err());
    }

    #[test]
    fn a_version_1_record_still_reads_as_a_whole_record() {
        let v1 = r#"{"v":1,"seq":3,"time":"2026-12-03T15:20:13.062150Z","worker_pid":7,"call_id":"7-1","kind":"call","user":"u","uid":61000,"tool":"shell","verdict":"drop","reason_code":"side_effect","secrets_requested":[],"secrets_granted":[],"network":"host","view":"private","exit_code":0,"signal":null,"timed_out":false,"duration_us":5,"pids_max_hits":null,"oom_kills":null,"memory_peak":null,"pids_peak":null,"masks":null,"stdout_bytes":0,"stderr_bytes":0,"launch_error":null,"prev":"0000000000000000000000000000000000000000000000000000000000000000"}"#;
        let r: AuditRecord = serde_json::from_str(v1).unwrap();
        assert_eq!(
            (r.v, r.phase, r.begin_seq, r.seq),
            (1, Phase::Whole, None, 3)
        );
    }
}
