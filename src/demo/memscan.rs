//! Scanning a process's readable memory for byte strings: the evidence that
//! a worker holds no plaintext (the check Sequoia runs on itself). Always
//! run with a positive control — a string the process is known to hold,
//! best one it parsed onto its heap — so that a scan that finds nothing
//! proves something; and a scan says how much it read
//! ([`Scan::complete`]), since a mapping that could not be read hides
//! whatever is in it.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// What a scan found and how much of the process it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// How many times each needle occurs.
    pub counts: Vec<usize>,
    /// Bytes of the mappings marked readable.
    pub readable_bytes: u64,
    /// Bytes actually read.
    pub read_bytes: u64,
    /// Mappings a read failed in (each stops there).
    pub read_errors: usize,
}

impl Scan {
    /// Whether the scan read at least 90% of the readable bytes: below
    /// that, a needle not found may sit in what was not read.
    pub fn complete(&self) -> bool {
        self.read_bytes * 10 >= self.readable_bytes * 9
    }
}

impl std::fmt::Display for Scan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "read {} of {} readable bytes, {} mapping(s) with a read error",
            self.read_bytes, self.readable_bytes, self.read_errors
        )
    }
}

/// How many times each needle occurs in `pid`'s readable mappings.
pub fn count_in_process(pid: u32, needles: &[&[u8]]) -> io::Result<Vec<usize>> {
    scan_process(pid, needles).map(|scan| scan.counts)
}

/// Scans `pid`'s readable mappings for each needle, saying how much was
/// read.
pub fn scan_process(pid: u32, needles: &[&[u8]]) -> io::Result<Scan> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let mem = File::open(format!("/proc/{pid}/mem"))?;
    let longest = needles.iter().map(|n| n.len()).max().unwrap_or(1).max(1);
    let mut counts = vec![0; needles.len()];
    let (mut readable_bytes, mut read_bytes, mut read_errors) = (0u64, 0u64, 0usize);
    let mut buf = vec![0u8; (1 << 20) + longest];
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !perms.starts_with('r') || line.ends_with("[vvar]") || line.ends_with("[vsyscall]") {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        else {
            continue;
        };
        readable_bytes += end - start;
        // Read in chunks that overlap by `longest - 1` bytes, so a needle
        // across two reads is seen; a match is counted in the chunk where
        // it starts, and a chunk's overlap tail is never a start.
        let mut at = start;
        while at < end {
            let want = ((end - at) as usize).min(buf.len());
            let got = match mem.read_at(&mut buf[..want], at) {
                Ok(0) => break,
                Err(_) => {
                    read_errors += 1;
                    break;
                }
                Ok(n) => n,
            };
            let window = &buf[..got];
            let last_chunk = at + got as u64 >= end;
            let starts = if last_chunk {
                got
            } else {
                got.saturating_sub(longest - 1).max(1)
            };
            for (count, needle) in counts.iter_mut().zip(needles) {
                if needle.is_empty() {
                    continue;
                }
                *count += window
                    .windows(needle.len())
                    .enumerate()
                    .filter(|(i, w)| *i < starts && w == needle)
                    .count();
            }
            at += starts as u64;
            read_bytes += starts as u64;
        }
    }
    Ok(Scan {
        counts,
        readable_bytes,
        read_bytes,
        read_errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_string_this_process_holds_and_reads_nearly_all_of_it() {
        let canary = format!("memscan-canary-{}", std::process::id()).into_bytes();
        let scan = scan_process(std::process::id(), &[&canary]).unwrap();
        assert!(scan.counts[0] >= 1, "the positive control must be found");
        assert!(scan.complete(), "{scan}");
        std::hint::black_box(&canary);
    }
}
