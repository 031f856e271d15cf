//! The hash chain: each record carries the SHA-256 of the previous
//! record's line, and [`verify_files`] walks a set of rotated files in
//! order and reports the first break with its file and line.
//!
//! Guarantees: a record's hash is over its exact bytes, without the
//! newline; verification reads the files and changes nothing; the first
//! break is named by the line a reader must look at: a changed record
//! (its hash is not the next one's `prev`), a missing record (a gap in
//! `seq`), two records swapped, a record that is not a record, or a torn
//! last line (a worker died mid-write, or the file was cut).
#![forbid(unsafe_code)]

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::record::SCHEMA_VERSION;

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
}

/// Where the previous record was, for naming a changed one.
struct Previous {
    seq: u64,
    hash: String,
    file: PathBuf,
    line: u64,
}

/// The `seq` and `prev` of a record line of this schema version: what
/// verification reads, and what a writer chains to.
pub(super) fn seq_and_prev(line: &[u8]) -> Result<(u64, String), String> {
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let version = value.get("v").and_then(serde_json::Value::as_u64);
    if version != Some(u64::from(SCHEMA_VERSION)) {
        return Err(format!("schema version {version:?}, not {SCHEMA_VERSION}"));
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
    Ok((seq, prev.to_owned()))
}

/// Verifies one file's lines, continuing the chain in `previous`.
fn verify_reader(
    file: &Path,
    reader: &mut impl BufRead,
    previous: &mut Option<Previous>,
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
        let (seq, prev) = seq_and_prev(body).map_err(|e| at(number, BreakKind::NotARecord, e))?;
        if let Some(p) = previous.as_ref() {
            let expected = p.seq + 1;
            if seq > expected {
                let mut next = Vec::new();
                read_line(reader, &mut next)?;
                let next_seq = next
                    .strip_suffix(b"\n")
                    .and_then(|n| seq_and_prev(n).ok())
                    .map(|(s, _)| s);
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
        summary.records += 1;
        summary.last = Some((seq, hash.clone()));
        *previous = Some(Previous {
            seq,
            hash,
            file: file.to_path_buf(),
            line: number,
        });
    }
}

/// Verifies `files` in order as one chain (rotated files first, the
/// active one last); the first break is returned.
pub fn verify_files(files: &[PathBuf]) -> Result<ChainSummary, Break> {
    let mut summary = ChainSummary::default();
    let mut previous = None;
    for (i, path) in files.iter().enumerate() {
        let file = File::open(path).map_err(|e| Break {
            file: path.clone(),
            line: 0,
            kind: BreakKind::NotARecord,
            detail: format!("cannot open: {e}"),
        })?;
        match verify_reader(path, &mut BufReader::new(file), &mut previous, &mut summary) {
            Ok(()) => {}
            // The next file must chain to this one's last whole record.
            Err(b) if b.kind == BreakKind::TornTail && i + 1 < files.len() => summary.torn.push(b),
            Err(b) => return Err(b),
        }
        summary.files += 1;
    }
    Ok(summary)
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
        let mut previous = None;
        verify_reader(
            Path::new("log"),
            &mut &bytes[..],
            &mut previous,
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
