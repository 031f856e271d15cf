//! Scanning a process's readable memory for byte strings: the evidence that
//! a worker holds no plaintext (the check Sequoia runs on itself). Always
//! run with a positive control — a string the process is known to hold —
//! so that a scan that finds nothing proves something.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// How many times each needle occurs in `pid`'s readable mappings.
pub fn count_in_process(pid: u32, needles: &[&[u8]]) -> io::Result<Vec<usize>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let mem = File::open(format!("/proc/{pid}/mem"))?;
    let longest = needles.iter().map(|n| n.len()).max().unwrap_or(1).max(1);
    let mut counts = vec![0; needles.len()];
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
        // Read in chunks that overlap by `longest - 1` bytes, so a needle
        // across two reads is seen; a match is counted in the chunk where
        // it starts, and a chunk's overlap tail is never a start.
        let mut at = start;
        while at < end {
            let want = ((end - at) as usize).min(buf.len());
            let got = match mem.read_at(&mut buf[..want], at) {
                Ok(0) | Err(_) => break,
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
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_string_this_process_holds() {
        let canary = format!("memscan-canary-{}", std::process::id()).into_bytes();
        let counts = count_in_process(std::process::id(), &[&canary]).unwrap();
        assert!(counts[0] >= 1, "the positive control must be found");
        std::hint::black_box(&canary);
    }
}
