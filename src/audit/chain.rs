//! The hash chain: each record carries the SHA-256 of the previous
//! record's line, and [`verify_files`] walks a set of rotated files in
//! order and reports the first break with its file and line.
//!
//! Guarantees: a record's hash is over its exact bytes, without the
//! newline; verification reads the files and changes nothing; the first
//! break is named by the line a reader must look at: a changed record
//! (its hash is not the next one's `prev`), a missing record (a gap in
//! `seq`), two records swapped, a record that is not a record, or a torn
//! last line (a worker died mid-write, or the file was cut), an `end`
//! record whose `begin` is not before it.
//!
//! Limit: a chain cannot see its own end being cut, nor its start — the
//! records that are left still chain. Only an anchor kept off the host
//! can: [`verify_anchored`] checks the chain against `--expect-last
//! SEQ:HASH` (a record the log must still hold, with that hash: what
//! `audit anchor` printed earlier), and then requires the chain to start
//! at its genesis, or at `--expect-first SEQ:PREV` where older files were
//! removed on purpose.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::record::{Phase, GENESIS, OLDEST_VERSION, SCHEMA_VERSION};

/// The hex SHA-256 of one record's line (without its newline).
pub fn line_hash(line: &[u8]) -> String {
    let digest = Sha256::digest(line);
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

/// What kind of break a verification found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BreakKind {
    /// The last line has no newline: a torn write, or a cut file.
    TornTail,
    /// A line is not a record of a known schema version.
    NotARecord,
    /// A record's bytes were changed: its hash is not the next one's `prev`.
    Changed,
    /// Records are missing: `seq` jumps forward.
    Missing,
    /// This record and the next one are swapped.
    Swapped,
    /// `seq` goes backwards or repeats: a record was moved or copied.
    OutOfOrder,
    /// An `end` record whose `begin` record is not before it in the chain.
    Unpaired,
    /// The log ends before the anchor's record: records were cut from its
    /// end.
    TailCut,
    /// The chain starts later than its genesis (or the `--expect-first`
    /// anchor), or after the anchor's record: records were cut from its
    /// start.
    HeadCut,
    /// The anchor's record is in the log with other bytes: the log was
    /// rewritten.
    AnchorMismatch,
}

impl BreakKind {
    /// A stable machine-readable code.
    pub fn code(self) -> &'static str {
        match self {
            Self::TornTail => "torn_tail",
            Self::NotARecord => "not_a_record",
            Self::Changed => "changed",
            Self::Missing => "missing",
            Self::Swapped => "swapped",
            Self::OutOfOrder => "out_of_order",
            Self::Unpaired => "unpaired",
            Self::TailCut => "tail_cut",
            Self::HeadCut => "head_cut",
            Self::AnchorMismatch => "anchor_mismatch",
        }
    }
}

/// The first break of a chain, where a reader must look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    /// The file.
    pub file: PathBuf,
    /// The line (1-based).
    pub line: u64,
    /// What is wrong.
    pub kind: BreakKind,
    /// In words.
    pub detail: String,
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.file.display(),
            self.line,
            self.kind.code(),
            self.detail
        )
    }
}

/// What an intact chain holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainSummary {
    /// Files read.
    pub files: usize,
    /// Records read.
    pub records: u64,
    /// The first record's `seq` and `prev` (a chain whose older files were
    /// removed starts past 1, anchored by that `prev`).
    pub first: Option<(u64, String)>,
    /// The last record's `seq` and hash.
    pub last: Option<(u64, String)>,
    /// Torn last lines of files the chain then continued after (a worker
    /// died mid-write, and the next one went on from the last whole
    /// record): not tampering, but not intact either.
    pub torn: Vec<Break>,
    /// Calls begun whose `end` record is not in the chain, by the `seq`
    /// of their `begin` record (their `call_id`): still running, or their
    /// worker died.
    pub open: BTreeMap<u64, String>,
    /// `begin` records read.
    pub begun: u64,
    /// `end` records read.
    pub ended: u64,
}

/// A record an operator keeps off the host: its `seq` and its hash
/// (`SEQ:HASH`, as `audit anchor` prints it); for `--expect-first`, the
/// first record's `seq` and `prev`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    /// The record's `seq`.
    pub seq: u64,
    /// 64 lowercase hex digits.
    pub hash: String,
}

impl std::str::FromStr for Anchor {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (seq, hash) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?} is not SEQ:HASH"))?;
        let seq = seq
            .parse()
            .map_err(|_| format!("{seq:?} is not a record number"))?;
        let hex = hash.len() == 64
            && hash
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex {
            return Err(format!(
                "{hash:?} is not a SHA-256 in 64 lowercase hex digits"
            ));
        }
        Ok(Self {
            seq,
            hash: hash.to_owned(),
        })
    }
}

impl fmt::Display for Anchor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seq, self.hash)
    }
}

/// Where the previous record was, for naming a changed one.
#[derive(Clone)]
struct Previous {
    seq: u64,
    hash: String,
    file: PathBuf,
    line: u64,
}

/// What a walk over the files carries from line to line.
#[derive(Default)]
struct Walk {
    previous: Option<Previous>,
    /// The `seq` whose hash and place are wanted (an anchor's).
    watch: Option<u64>,
    watched: Option<Previous>,
}

/// What verification reads of a record line.
struct Head {
    seq: u64,
    prev: String,
    phase: Phase,
    call_id: String,
    begin_seq: Option<u64>,
}

fn head(line: &[u8]) -> Result<Head, String> {
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let version = value.get("v").and_then(serde_json::Value::as_u64);
    if !version
        .is_some_and(|v| (u64::from(OLDEST_VERSION)..=u64::from(SCHEMA_VERSION)).contains(&v))
    {
        return Err(format!(
            "schema version {version:?}, not {OLDEST_VERSION}..={SCHEMA_VERSION}"
        ));
    }
    let seq = value
        .get("seq")
        .and_then(serde_json::Value::as_u64)
        .ok_or("no seq")?;
    let prev = value
        .get("prev")
        .and_then(serde_json::Value::as_str)
        .filter(|p| p.len() == 64 && p.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or("no prev hash")?;
    let phase = match value.get("phase") {
        None => Phase::Whole,
        Some(p) => serde_json::from_value(p.clone()).map_err(|e| format!("phase: {e}"))?,
    };
    let call_id = value
        .get("call_id")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let begin_seq = value.get("begin_seq").and_then(serde_json::Value::as_u64);
    Ok(Head {
        seq,
        prev: prev.to_owned(),
        phase,
        call_id,
        begin_seq,
    })
}

/// The `seq` and `prev` of a record line of a schema version this build
/// reads: what verification reads, and what a writer chains to.
pub(super) fn seq_and_prev(line: &[u8]) -> Result<(u64, String), String> {
    head(line).map(|h| (h.seq, h.prev))
}

/// Verifies one file's lines, continuing the chain in `previous`.
fn verify_reader(
    file: &Path,
    reader: &mut impl BufRead,
    walk: &mut Walk,
    summary: &mut ChainSummary,
) -> Result<(), Break> {
    let at = |line: u64, kind: BreakKind, detail: String| Break {
        file: file.to_path_buf(),
        line,
        kind,
        detail,
    };
    let read_line = |reader: &mut dyn BufRead, buf: &mut Vec<u8>| -> Result<usize, Break> {
        buf.clear();
        reader
            .read_until(b'\n', buf)
            .map_err(|e| at(0, BreakKind::NotARecord, format!("cannot read: {e}")))
    };
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        if read_line(reader, &mut line)? == 0 {
            return Ok(());
        }
        number += 1;
        let Some(body) = line.strip_suffix(b"\n") else {
            return Err(at(
                number,
                BreakKind::TornTail,
                format!(
                    "the last line ({} bytes) has no newline: a worker died mid-write, or the file was cut",
                    line.len()
                ),
            ));
        };
        let record = head(body).map_err(|e| at(number, BreakKind::NotARecord, e))?;
        let (seq, prev) = (record.seq, record.prev.clone());
        if let Some(p) = walk.previous.as_ref() {
            let expected = p.seq + 1;
            if seq > expected {
                let mut next = Vec::new();
                read_line(reader, &mut next)?;
                let next_seq = next
                    .strip_suffix(b"\n")
                    .and_then(|n| head(n).ok())
                    .map(|h| h.seq);
                if next_seq == Some(expected) {
                    return Err(at(
                        number,
                        BreakKind::Swapped,
                        format!(
                            "seq {seq} comes before seq {expected} on the next line: the two were swapped"
                        ),
                    ));
                }
                let last = seq - 1;
                return Err(at(
                    number,
                    BreakKind::Missing,
                    format!(
                        "records seq {expected}..={last} are missing before this line (seq {seq})"
                    ),
                ));
            }
            if seq < expected {
                return Err(at(
                    number,
                    BreakKind::OutOfOrder,
                    format!(
                        "seq {seq} after seq {}: a record was moved or repeated",
                        p.seq
                    ),
                ));
            }
            if prev != p.hash {
                return Err(Break {
                    file: p.file.clone(),
                    line: p.line,
                    kind: BreakKind::Changed,
                    detail: format!(
                        "this record's bytes do not hash to the prev of the next record ({}:{}, seq {seq}): one of the two was changed",
                        file.display(),
                        number
                    ),
                });
            }
        }
        let hash = line_hash(body);
        if summary.first.is_none() {
            summary.first = Some((seq, prev));
        }
        match record.phase {
            Phase::Whole => {}
            Phase::Begin => {
                summary.begun += 1;
                summary.open.insert(seq, record.call_id);
            }
            Phase::End => {
                summary.ended += 1;
                let first = summary.first.as_ref().map_or(seq, |f| f.0);
                let paired = match record.begin_seq {
                    // Begun in a file older than this chain's start.
                    Some(b) if b < first => true,
                    Some(b) => summary.open.get(&b) == Some(&record.call_id),
                    None => false,
                };
                if !paired {
                    return Err(at(
                        number,
                        BreakKind::Unpaired,
                        format!(
                            "seq {seq} ends call {:?}, whose begin record (seq {:?}) is not open before it",
                            record.call_id, record.begin_seq
                        ),
                    ));
                }
                if let Some(b) = record.begin_seq {
                    summary.open.remove(&b);
                }
            }
        }
        summary.records += 1;
        summary.last = Some((seq, hash.clone()));
        let here = Previous {
            seq,
            hash,
            file: file.to_path_buf(),
            line: number,
        };
        if walk.watch == Some(seq) {
            walk.watched = Some(here.clone());
        }
        walk.previous = Some(here);
    }
}

/// Verifies `files` in order as one chain (rotated files first, the
/// active one last); the first break is returned. Without an anchor a cut
/// at either end is not seen: see [`verify_anchored`].
pub fn verify_files(files: &[PathBuf]) -> Result<ChainSummary, Break> {
    walk_files(files, &mut Walk::default())
}

fn walk_files(files: &[PathBuf], walk: &mut Walk) -> Result<ChainSummary, Break> {
    let mut summary = ChainSummary::default();
    for (i, path) in files.iter().enumerate() {
        let file = File::open(path).map_err(|e| Break {
            file: path.clone(),
            line: 0,
            kind: BreakKind::NotARecord,
            detail: format!("cannot open: {e}"),
        })?;
        match verify_reader(path, &mut BufReader::new(file), walk, &mut summary) {
            Ok(()) => {}
            // The next file must chain to this one's last whole record.
            Err(b) if b.kind == BreakKind::TornTail && i + 1 < files.len() => summary.torn.push(b),
            Err(b) => return Err(b),
        }
        summary.files += 1;
    }
    Ok(summary)
}

/// Verifies `files` as [`verify_files`] does, then against the anchors:
/// the record `expect_last.seq` must be in the chain with the hash
/// `expect_last.hash` (records after it are the log's growth since the
/// anchor was taken), else `tail_cut` (the log ends before it),
/// `head_cut` (the chain starts after it) or `anchor_mismatch`; and the
/// chain must start at its genesis (seq 1 after [`GENESIS`]), or at
/// `expect_first` (its `seq` and `prev`), else `head_cut`.
pub fn verify_anchored(
    files: &[PathBuf],
    expect_first: Option<&Anchor>,
    expect_last: Option<&Anchor>,
) -> Result<ChainSummary, Break> {
    let mut walk = Walk {
        watch: expect_last.map(|a| a.seq),
        ..Walk::default()
    };
    let summary = walk_files(files, &mut walk)?;
    if expect_first.is_none() && expect_last.is_none() {
        return Ok(summary);
    }
    let first_file = files.first().cloned().unwrap_or_default();
    let (last_file, last_line) = walk
        .previous
        .as_ref()
        .map_or((first_file.clone(), 0), |p| (p.file.clone(), p.line));
    let (first_seq, first_prev) = summary
        .first
        .clone()
        .unwrap_or_else(|| (0, GENESIS.to_owned()));
    let start = expect_first.map_or_else(
        || Anchor {
            seq: 1,
            hash: GENESIS.to_owned(),
        },
        Clone::clone,
    );
    if summary.first.is_some()
        && (first_seq, first_prev.as_str()) != (start.seq, start.hash.as_str())
    {
        let cut = if first_seq > start.seq {
            format!(
                "records seq {}..={} were cut from its start",
                start.seq,
                first_seq - 1
            )
        } else {
            "it is not the chain the anchor names".to_owned()
        };
        return Err(Break {
            file: first_file,
            line: 1,
            kind: BreakKind::HeadCut,
            detail: format!(
                "the chain starts at seq {first_seq} after a record hashing to {first_prev}, not at {}: {cut}",
                if expect_first.is_some() { format!("--expect-first {start}") } else { "its genesis (seq 1)".to_owned() }
            ),
        });
    }
    let Some(anchor) = expect_last else {
        return Ok(summary);
    };
    let last_seq = summary.last.as_ref().map_or(0, |l| l.0);
    if last_seq < anchor.seq {
        return Err(Break {
            file: last_file,
            line: last_line,
            kind: BreakKind::TailCut,
            detail: format!(
                "the log ends at seq {last_seq}, before the anchor's record seq {}: records seq {}..={} were cut from its end",
                anchor.seq,
                last_seq + 1,
                anchor.seq
            ),
        });
    }
    match walk.watched {
        None => Err(Break {
            file: first_file,
            line: 1,
            kind: BreakKind::HeadCut,
            detail: format!(
                "the anchor's record seq {} is before the chain's first record (seq {first_seq}): it was cut from the start",
                anchor.seq
            ),
        }),
        Some(at) if at.hash != anchor.hash => Err(Break {
            file: at.file,
            line: at.line,
            kind: BreakKind::AnchorMismatch,
            detail: format!(
                "seq {} hashes to {}, the anchor says {}: the log was rewritten",
                anchor.seq, at.hash, anchor.hash
            ),
        }),
        Some(_) => Ok(summary),
    }
}

/// The name a rotated file of `name` gets: `name.NNNNNN`.
pub fn rotated_name(name: &str, number: u64) -> String {
    format!("{name}.{number:06}")
}

/// The number of a rotated file of `name`, if `candidate` is one.
pub fn rotated_number(name: &str, candidate: &str) -> Option<u64> {
    let digits = candidate.strip_prefix(name)?.strip_prefix('.')?;
    (digits.len() == 6 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The whole set of an active log file: its rotated files in order, then
/// the file itself (which need not exist once rotated away).
pub fn rotated_set(active: &Path) -> io::Result<Vec<PathBuf>> {
    let name = active
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::other("the log path has no file name"))?;
    let folder = active.parent().unwrap_or(Path::new("."));
    let mut rotated: Vec<(u64, PathBuf)> = std::fs::read_dir(folder)?
        .filter_map(|e| {
            let e = e.ok()?;
            let n = rotated_number(name, e.file_name().to_str()?)?;
            Some((n, e.path()))
        })
        .collect();
    rotated.sort();
    let mut set: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    if active.exists() {
        set.push(active.to_path_buf());
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::record::{AuditRecord, RecordKind, GENESIS};

    fn chain(n: u64) -> Vec<Vec<u8>> {
        let mut prev = GENESIS.to_owned();
        (1..=n)
            .map(|seq| {
                let mut r = AuditRecord::new(RecordKind::Call);
                r.seq = seq;
                r.duration_us = 1000 + seq;
                r.prev = prev.clone();
                let line = serde_json::to_vec(&r).unwrap();
                prev = line_hash(&line);
                let mut line = line;
                line.push(b'\n');
                line
            })
            .collect()
    }

    fn verify(lines: &[Vec<u8>]) -> Result<ChainSummary, Break> {
        let bytes: Vec<u8> = lines.concat();
        let mut summary = ChainSummary::default();
        verify_reader(
            Path::new("log"),
            &mut &bytes[..],
            &mut Walk::default(),
            &mut summary,
        )
        .map(|()| summary)
    }

    fn found(lines: &[Vec<u8>]) -> (BreakKind, u64) {
        let b = verify(lines).expect_err("a break");
        (b.kind, b.line)
    }

    #[test]
    fn an_untouched_chain_passes_and_each_tampering_names_its_line() {
        let good = chain(10);
        let s = verify(&good).unwrap();
        assert_eq!(
            (s.records, s.first.unwrap().0, s.last.unwrap().0),
            (10, 1, 10)
        );

        let mut edited = good.clone();
        let key = b"\"duration_us\":1005";
        let at = edited[4].windows(key.len()).position(|w| w == key).unwrap();
        edited[4][at + key.len() - 1] = b'6'; // 1005 -> 1006: still a record
        assert_eq!(found(&edited), (BreakKind::Changed, 5));

        let mut broken = good.clone();
        broken[4][0] = b'['; // no longer a record
        assert_eq!(found(&broken), (BreakKind::NotARecord, 5));

        let mut removed = good.clone();
        removed.remove(4);
        assert_eq!(found(&removed), (BreakKind::Missing, 5));

        let mut swapped = good.clone();
        swapped.swap(4, 5);
        assert_eq!(found(&swapped), (BreakKind::Swapped, 5));

        let mut repeated = good.clone();
        repeated.insert(6, good[2].clone());
        assert_eq!(found(&repeated), (BreakKind::OutOfOrder, 7));

        let mut torn = good.clone();
        let last = torn.last_mut().unwrap();
        last.truncate(last.len() / 2);
        assert_eq!(found(&torn), (BreakKind::TornTail, 10));

        let mut one_newline_less = good.clone();
        one_newline_less.last_mut().unwrap().pop();
        assert_eq!(found(&one_newline_less), (BreakKind::TornTail, 10));
    }

    fn walk(lines: &[Vec<u8>]) -> Result<ChainSummary, Break> {
        let mut summary = ChainSummary::default();
        verify_reader(
            Path::new("log"),
            &mut &lines.concat()[..],
            &mut Walk::default(),
            &mut summary,
        )
        .map(|()| summary)
    }

    /// Begin and end records: call 1 begins at 1 and ends at 3, call 2
    /// begins at 2 and ends at 4, call 3 begins at 5 and stays open.
    fn calls() -> Vec<Vec<u8>> {
        let shape = [
            (Phase::Begin, None, "w-1"),
            (Phase::Begin, None, "w-2"),
            (Phase::End, Some(1), "w-1"),
            (Phase::End, Some(2), "w-2"),
            (Phase::Begin, None, "w-3"),
        ];
        let mut prev = GENESIS.to_owned();
        shape
            .iter()
            .zip(1..)
            .map(|(&(phase, begin_seq, id), seq)| {
                let mut r = AuditRecord::new(RecordKind::Call);
                (r.seq, r.phase, r.begin_seq, r.call_id, r.prev) =
                    (seq, phase, begin_seq, id.into(), prev.clone());
                let mut line = serde_json::to_vec(&r).unwrap();
                prev = line_hash(&line);
                line.push(b'\n');
                line
            })
            .collect()
    }

    #[test]
    fn begin_and_end_records_pair_by_seq_and_call_id_and_an_open_call_is_named() {
        let good = calls();
        let s = walk(&good).unwrap();
        assert_eq!((s.begun, s.ended), (3, 2));
        assert_eq!(s.open, BTreeMap::from([(5, "w-3".to_owned())]));
        // An end whose begin is another call's: re-chained so only the
        // pairing is wrong.
        let mut records: Vec<AuditRecord> = good
            .iter()
            .map(|l| serde_json::from_slice(&l[..l.len() - 1]).unwrap())
            .collect();
        records[3].begin_seq = Some(1);
        let mut prev = GENESIS.to_owned();
        let bad: Vec<Vec<u8>> = records
            .iter_mut()
            .map(|r| {
                r.prev = prev.clone();
                let mut line = serde_json::to_vec(&*r).unwrap();
                prev = line_hash(&line);
                line.push(b'\n');
                line
            })
            .collect();
        let b = walk(&bad).unwrap_err();
        assert_eq!((b.kind, b.line), (BreakKind::Unpaired, 4), "{b}");
    }

    #[test]
    fn a_chain_may_start_past_its_genesis_when_old_files_were_removed() {
        let good = chain(6);
        let s = verify(&good[3..]).unwrap();
        assert_eq!(s.first.as_ref().map(|f| f.0), Some(4));
        assert_ne!(s.first.unwrap().1, GENESIS);
    }

    #[test]
    fn rotated_names_sort_and_parse() {
        assert_eq!(rotated_name("audit.jsonl", 7), "audit.jsonl.000007");
        assert_eq!(rotated_number("audit.jsonl", "audit.jsonl.000007"), Some(7));
        for other in [
            "audit.jsonl",
            "audit.jsonl.7",
            "audit.jsonl.00000x",
            "x.000001",
        ] {
            assert_eq!(rotated_number("audit.jsonl", other), None, "{other}");
        }
    }
}
