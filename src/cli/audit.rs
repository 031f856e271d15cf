//! `audit verify` (check a log's hash chain across its rotated files,
//! against an anchor where one is given), `audit anchor` (the anchor of an
//! intact log) and `audit show` (its records as a table or JSON lines).
//! All only read.
//!
//! `audit verify` without `--expect-last` says in its output that a cut at
//! the end (or start) of the log cannot be seen without an anchor.
//!
//! Guarantees: `audit show` prints nothing a terminal acts on or shows as
//! nothing, whatever a record holds (a tool or secret name is the caller's
//! choice): every column of the table is escaped by
//! [`super::printable::for_terminal`], so a record is always one line, and
//! each JSON line is the stored one with those characters as `\u`
//! escapes ([`super::printable::json_for_terminal`]), the same value.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;

use super::args::AuditAction;
use super::exit::{self, CliError};
use super::printable::{for_terminal, json_for_terminal, word_for_terminal};
use crate::audit::{rotated_set, verify_anchored, verify_files, Anchor, AuditRecord, Phase};

/// Runs `audit verify` or `audit show`.
pub(super) fn command(action: AuditAction) -> Result<i32, CliError> {
    match action {
        AuditAction::Verify {
            files,
            expect_first,
            expect_last,
        } => verify(files, expect_first.as_ref(), expect_last.as_ref()),
        AuditAction::Anchor { file } => anchor(file),
        AuditAction::Show {
            file,
            user,
            since,
            json,
        } => show(file, user.as_deref(), since.as_deref(), json.json),
    }
}

/// One file: it and its rotated files; several: exactly those, in order.
fn the_set(files: Vec<PathBuf>) -> Result<Vec<PathBuf>, CliError> {
    if files.len() > 1 {
        return Ok(files);
    }
    let active = &files[0];
    let set =
        rotated_set(active).map_err(|e| CliError::usage(format!("{}: {e}", active.display())))?;
    if set.is_empty() {
        return Err(CliError::usage(format!(
            "{}: no such log, and no rotated file of it",
            active.display()
        )));
    }
    Ok(set)
}

fn verify(
    files: Vec<PathBuf>,
    expect_first: Option<&Anchor>,
    expect_last: Option<&Anchor>,
) -> Result<i32, CliError> {
    let set = the_set(files)?;
    match verify_anchored(&set, expect_first, expect_last) {
        Ok(summary) => {
            let (first, last) = (
                summary.first.as_ref().map_or(0, |f| f.0),
                summary.last.as_ref().map_or(0, |l| l.0),
            );
            for torn in &summary.torn {
                println!("TORN at {torn}");
            }
            println!(
                "{}: {} record(s), seq {first}..={last}, in {} file(s)",
                if summary.torn.is_empty() {
                    "intact"
                } else {
                    "the chain continues"
                },
                summary.records,
                summary.files
            );
            if let Some((seq, prev)) = &summary.first {
                if *seq != 1 {
                    println!("the chain starts at seq {seq}, after a record hashing to {prev}");
                }
            }
            if let Some((_, hash)) = &summary.last {
                println!("last record hash {hash}");
            }
            if summary.begun > 0 || summary.ended > 0 {
                println!(
                    "calls: {} begun, {} ended, {} open",
                    summary.begun,
                    summary.ended,
                    summary.open.len()
                );
            }
            for (seq, call_id) in &summary.open {
                println!(
                    "OPEN call {} begun at seq {seq} has no end record (still running, or its worker died)",
                    for_terminal(call_id)
                );
            }
            match expect_last {
                Some(anchor) => println!(
                    "anchored: seq {} has the expected hash, {} record(s) after it; the chain starts at {}",
                    anchor.seq,
                    last.saturating_sub(anchor.seq),
                    expect_first.map_or_else(|| "its genesis".to_owned(), |f| format!("--expect-first {f}"))
                ),
                None => println!(
                    "NOT ANCHORED: records cut from the end (or start) of a log leave a chain that verifies; \
                     only `audit verify --expect-last SEQ:HASH`, with an anchor from `audit anchor` kept off this host, sees that"
                ),
            }
            Ok(if summary.torn.is_empty() {
                exit::OK
            } else {
                exit::FAILED
            })
        }
        Err(found) => {
            println!("BROKEN at {found}");
            Ok(exit::FAILED)
        }
    }
}

fn anchor(file: PathBuf) -> Result<i32, CliError> {
    let set = the_set(vec![file])?;
    match verify_files(&set) {
        Ok(summary) if summary.torn.is_empty() => match summary.last {
            Some((seq, hash)) => {
                println!("{}", Anchor { seq, hash });
                Ok(exit::OK)
            }
            None => Err(CliError::new(exit::FAILED, "the log holds no record")),
        },
        Ok(summary) => {
            for torn in &summary.torn {
                println!("TORN at {torn}");
            }
            Ok(exit::FAILED)
        }
        Err(found) => {
            println!("BROKEN at {found}");
            Ok(exit::FAILED)
        }
    }
}

/// The secrets a call asked for; one the turn did not grant is marked `!`.
fn secrets_column(record: &AuditRecord) -> String {
    if record.secrets_requested.is_empty() {
        return "-".into();
    }
    record
        .secrets_requested
        .iter()
        .map(|name| {
            let shown = word_for_terminal(name);
            if record.secrets_granted.contains(name) {
                shown.into_owned()
            } else {
                format!("!{shown}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn show(
    file: PathBuf,
    user: Option<&str>,
    since: Option<&str>,
    json: bool,
) -> Result<i32, CliError> {
    let since = since
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t)
                .map(|t| t.with_timezone(&chrono::Utc))
                .map_err(|e| CliError::usage(format!("--since {t:?}: not RFC 3339: {e}")))
        })
        .transpose()?;
    let io = |e: std::io::Error| CliError::new(exit::FAILED, e.to_string());
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if !json {
        writeln!(
            out,
            "{:>6}  {:<27} {:<16} {:>6}  {:<12} {:<7} {:<18} {:<20} {:>8} {:>9}  error",
            "seq", "time", "user", "uid", "tool", "verdict", "reason", "secrets", "exit", "ms"
        )
        .map_err(io)?;
    }
    for path in the_set(vec![file])? {
        let reader = BufReader::new(
            std::fs::File::open(&path)
                .map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?,
        );
        for (number, line) in reader.split(b'\n').enumerate() {
            let line = line.map_err(io)?;
            let record: AuditRecord = serde_json::from_slice(&line).map_err(|e| {
                CliError::new(
                    exit::FAILED,
                    format!(
                        "{}:{}: not a record ({e}); run `tono-seal audit verify`",
                        path.display(),
                        number + 1
                    ),
                )
            })?;
            if let Some(user) = user {
                let uid = record.uid.map(|u| u.to_string());
                if record.user.as_deref() != Some(user) && uid.as_deref() != Some(user) {
                    continue;
                }
            }
            if let Some(since) = since {
                let at = chrono::DateTime::parse_from_rfc3339(&record.time).ok();
                if at.is_none_or(|at| at < since) {
                    continue;
                }
            }
            if json {
                let line = String::from_utf8_lossy(&line);
                out.write_all(json_for_terminal(&line).as_bytes())
                    .map_err(io)?;
                out.write_all(b"\n").map_err(io)?;
                continue;
            }
            let ended = match (record.exit_code, record.signal, record.timed_out) {
                _ if record.phase == Phase::Begin => "begun".to_owned(),
                (_, _, true) => "timeout".to_owned(),
                (Some(code), _, _) => code.to_string(),
                (None, Some(signal), _) => format!("sig {signal}"),
                _ => "-".to_owned(),
            };
            writeln!(
                out,
                "{:>6}  {:<27} {:<16} {:>6}  {:<12} {:<7} {:<18} {:<20} {:>8} {:>9.1}  {}",
                record.seq,
                for_terminal(&record.time),
                word_for_terminal(record.user.as_deref().unwrap_or("-")),
                record.uid.map_or("-".into(), |u| u.to_string()),
                word_for_terminal(record.tool.as_deref().unwrap_or("-")),
                word_for_terminal(&record.verdict),
                word_for_terminal(&record.reason_code),
                secrets_column(&record),
                ended,
                record.duration_us as f64 / 1000.0,
                for_terminal(record.launch_error.as_deref().unwrap_or(""))
            )
            .map_err(io)?;
        }
    }
    out.flush().map_err(io)?;
    Ok(exit::OK)
}
