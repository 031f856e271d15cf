//! Masking a call's secrets in its output, as a stream, inside the process
//! that already runs as the user and already holds the values (the
//! launcher's relay), so the worker never receives a plaintext. Below the
//! launcher's room and the broker's, so that the broker can scrub the
//! answers of bound hosts with the same forms.
//!
//! Guarantees: every value is matched in its raw bytes and its common
//! encodings — base64 (standard and URL-safe, padded or not, at each of the
//! three alignments a value can have inside a longer base64 run: the
//! characters that depend on the value alone), hex (lower and upper case),
//! percent-encoding (upper and lower case hex; the bytes a URL encodes, or
//! every byte) and JSON string escaping
//! (UTF-8 kept, or every non-ASCII character as `\uXXXX`) — and replaced by
//! `[masked:NAME]`, leftmost-longest. Matching ignores runs of up to
//! [`MAX_GAP`] whitespace bytes on both sides, so a form wrapped into lines
//! (`base64`, `xxd -p`) or spaced into bytes (`od -An -tx1`) is masked
//! whole, whitespace and all. A value with whitespace at its ends (a
//! file's last newline) is masked in every form without it too. A value of several lines (a key file) has
//! each line of [`MIN_LINE_BYTES`] or more masked by itself too, so a part
//! of it printed line by line shows none of them. Output split across any number of
//! writes at any byte boundary is masked the same: a stream holds back the
//! longest pattern's length minus one byte and nothing else, with no timer
//! that could flush a partial match; everything that is not a match passes
//! unchanged. A value with fewer than [`MIN_MASKED_BYTES`] bytes that are
//! not whitespace is refused, never
//! passed through unmasked. The patterns and held-back bytes are wiped.
#![forbid(unsafe_code)]

pub mod lazy;

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine;
use zeroize::{Zeroize, Zeroizing};

/// The shortest value that can be masked without wrecking ordinary output.
pub const MIN_MASKED_BYTES: usize = 4;
/// The shortest base64 core that is matched (shorter ones are too common).
const MIN_CORE_CHARS: usize = 4;
/// The longest run of whitespace that is ignored inside a match: what
/// `base64` and `xxd -p` put at a line's end (`\n`, `\r\n`) and `od`
/// between bytes and lines (` `, `\n `). A longer run is matched as it is.
pub const MAX_GAP: usize = 4;

fn is_gap(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// `bytes` as the matcher sees it, appended to `folded`, with each kept
/// byte's index in `bytes` appended to `at`: a run of whitespace of up to
/// [`MAX_GAP`] bytes is dropped, a longer one kept. `gap_before` gap bytes
/// came just before `bytes` and belong to its first run. Returns how many
/// bytes of `bytes` are decided: a trailing run that could still grow past
/// [`MAX_GAP`] is not, unless `end`.
fn fold(
    bytes: &[u8],
    gap_before: usize,
    end: bool,
    folded: &mut Vec<u8>,
    at: &mut Vec<usize>,
) -> usize {
    let mut i = 0;
    while i < bytes.len() {
        if !is_gap(bytes[i]) {
            folded.push(bytes[i]);
            at.push(i);
            i += 1;
            continue;
        }
        let run_end = bytes[i..]
            .iter()
            .position(|&b| !is_gap(b))
            .map_or(bytes.len(), |p| i + p);
        let run = run_end - i + if i == 0 { gap_before } else { 0 };
        if run > MAX_GAP {
            folded.extend_from_slice(&bytes[i..run_end]);
            at.extend(i..run_end);
        } else if run_end == bytes.len() && !end {
            return i;
        }
        i = run_end;
    }
    bytes.len()
}

/// Why a set of values cannot be masked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MaskError {
    /// A value is too short to mask.
    #[error("secret {name} has {len} bytes that are not whitespace; a value with fewer than {MIN_MASKED_BYTES} cannot be masked in output without wrecking it, so it is refused")]
    TooShort {
        /// The secret's name.
        name: String,
        /// How many of its bytes are not whitespace.
        len: usize,
    },
    /// The matcher could not be built.
    #[error("the masking patterns could not be built: {0}")]
    Build(String),
}

/// The characters of `encoded` that depend on the value's bytes alone, when
/// the value starts `skip` bytes into a 3-byte group.
fn base64_core(value: &[u8], skip: usize, engine: &impl Engine) -> Option<Zeroizing<Vec<u8>>> {
    let mut input = Zeroizing::new(vec![0u8; skip]);
    input.extend_from_slice(value);
    let encoded = Zeroizing::new(engine.encode(&input[..]).into_bytes());
    // Characters wholly inside the value's bits: from the first whose six
    // bits start at or after bit 8*skip, to the last that ends by the
    // value's last bit.
    let first = (8 * skip).div_ceil(6);
    let last = (8 * input.len()) / 6;
    let core = encoded.get(first..last)?;
    (core.len() >= MIN_CORE_CHARS).then(|| Zeroizing::new(core.to_vec()))
}

/// Every byte of `value` as `%XX`, as some encoders write a value whole
/// (`%67%68%70…`).
fn percent_every(value: &[u8], lower: bool) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::with_capacity(value.len() * 3));
    for &b in value {
        if lower {
            out.extend_from_slice(format!("%{b:02x}").as_bytes());
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

fn percent(value: &[u8], lower: bool) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::with_capacity(value.len() * 3));
    for &b in value {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else if lower {
            out.extend_from_slice(format!("%{b:02x}").as_bytes());
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

fn hex(value: &[u8], upper: bool) -> Zeroizing<Vec<u8>> {
    let digits: &[u8; 16] = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut out = Zeroizing::new(Vec::with_capacity(value.len() * 2));
    for &b in value {
        out.push(digits[usize::from(b >> 4)]);
        out.push(digits[usize::from(b & 15)]);
    }
    out
}

/// JSON string escapings, without the quotes: serde's (UTF-8 kept) and the
/// ASCII-only one most other encoders write (`\u00e9`).
fn json_forms(value: &[u8]) -> Vec<Zeroizing<Vec<u8>>> {
    let Ok(text) = std::str::from_utf8(value) else {
        return Vec::new();
    };
    let mut forms = Vec::new();
    if let Ok(quoted) = serde_json::to_string(text) {
        let quoted = Zeroizing::new(quoted.into_bytes());
        forms.push(Zeroizing::new(quoted[1..quoted.len() - 1].to_vec()));
    }
    let mut ascii = Zeroizing::new(Vec::with_capacity(value.len() * 2));
    for c in text.chars() {
        match c {
            '"' => ascii.extend_from_slice(b"\\\""),
            '\\' => ascii.extend_from_slice(b"\\\\"),
            '\n' => ascii.extend_from_slice(b"\\n"),
            '\r' => ascii.extend_from_slice(b"\\r"),
            '\t' => ascii.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 || !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    ascii.extend_from_slice(format!("\\u{unit:04x}").as_bytes());
                }
            }
            c => ascii.push(c as u8),
        }
    }
    forms.push(ascii);
    forms
}

/// Every form of `value` that is masked.
fn forms(value: &[u8]) -> Vec<Zeroizing<Vec<u8>>> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    let mut all = vec![
        Zeroizing::new(value.to_vec()),
        hex(value, false),
        hex(value, true),
        percent(value, false),
        percent(value, true),
        percent_every(value, false),
        percent_every(value, true),
    ];
    for skip in 0..3 {
        all.extend(base64_core(value, skip, &STANDARD));
        all.extend(base64_core(value, skip, &URL_SAFE));
    }
    all.extend(json_forms(value));
    all.sort_by(|a, b| a[..].cmp(&b[..]));
    all.dedup();
    all
}

/// The shortest line of a value of several lines that is masked by
/// itself (a PEM key's base64 lines have 64 or 70 characters, its armour
/// lines over 30).
pub const MIN_LINE_BYTES: usize = 20;
/// The most lines of one value masked by themselves (a 4096-bit RSA key
/// in PEM has about 50; a 1 MiB value of 64-byte lines about 16,000, whose
/// patterns would cost the call's start more than their worth).
pub const MAX_MASKED_LINES: usize = 1024;

/// Each line of a value of several lines, without its line end, that has
/// at least [`MIN_LINE_BYTES`] bytes: masked by itself, so a tool that
/// prints part of a key file (`head -2`, `grep`, `sed -n 2p`) shows no
/// line of it. Up to [`MAX_MASKED_LINES`], from the start.
fn lines(value: &[u8]) -> Vec<Zeroizing<Vec<u8>>> {
    if !value.contains(&b'\n') {
        return Vec::new();
    }
    value
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter(|line| line.len() >= MIN_LINE_BYTES && line.len() < value.len())
        .take(MAX_MASKED_LINES)
        .map(|line| Zeroizing::new(line.to_vec()))
        .collect()
}

/// How many bytes of each folded form the automaton holds: a match of them
/// is a candidate, confirmed by comparing the whole form. An automaton of
/// whole forms costs about a microsecond a byte to build (a 64 KiB value
/// has about 1 MiB of forms); one of anchors costs the same for any size.
const ANCHOR_BYTES: usize = 32;

/// The matcher of one call's values, shared by its output streams.
pub struct Masker {
    /// The first [`ANCHOR_BYTES`] of each pattern.
    anchors: AhoCorasick,
    /// Every form of every value, folded (wiped on drop).
    patterns: Vec<Zeroizing<Vec<u8>>>,
    /// For each pattern, the index of its secret.
    owner: Vec<usize>,
    /// The secrets' names, by index.
    names: Vec<String>,
    /// The masks made, by secret index.
    counts: Vec<u64>,
    hold: usize,
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masker")
            .field("names", &self.names)
            .field("patterns", &self.owner.len())
            .finish()
    }
}

impl Masker {
    /// Whether [`Masker::new`] would take `secrets`: each value has at
    /// least [`MIN_MASKED_BYTES`] bytes that are not whitespace.
    pub fn check(secrets: &[(&str, &[u8])]) -> Result<(), MaskError> {
        for (name, value) in secrets {
            let solid = value.iter().filter(|&&b| !is_gap(b)).count();
            if solid < MIN_MASKED_BYTES {
                return Err(MaskError::TooShort {
                    name: (*name).to_owned(),
                    len: solid,
                });
            }
        }
        Ok(())
    }

    /// A masker of `secrets` (name, value); each value must be at least
    /// [`MIN_MASKED_BYTES`] long.
    pub fn new(secrets: &[(&str, &[u8])]) -> Result<Self, MaskError> {
        Self::check(secrets)?;
        let mut patterns: Vec<Zeroizing<Vec<u8>>> = Vec::new();
        let mut owner = Vec::new();
        for (index, (_, value)) in secrets.iter().enumerate() {
            // A value with whitespace at its ends (a file's last newline)
            // is printed by most tools without it (`$(cat f)`, `.strip()`,
            // `read`): every form of the trimmed value too.
            let trimmed = value.trim_ascii();
            let trimmed_forms =
                match trimmed.len() < value.len() && trimmed.len() >= MIN_MASKED_BYTES {
                    true => forms(trimmed),
                    false => Vec::new(),
                };
            for form in forms(value)
                .into_iter()
                .chain(trimmed_forms)
                .chain(lines(value))
            {
                let mut folded = Zeroizing::new(Vec::with_capacity(form.len()));
                if form.iter().any(|&b| is_gap(b)) {
                    fold(&form, 0, true, &mut folded, &mut Vec::new());
                } else {
                    // What `fold` makes of a form without whitespace (hex,
                    // base64, percent: most forms), without its index of
                    // every byte's position, which nothing here reads.
                    folded.extend_from_slice(&form);
                }
                if !folded.is_empty() {
                    owner.push(index);
                    patterns.push(folded);
                }
            }
        }
        let hold = patterns.iter().map(|p| p.len()).max().unwrap_or(1) - 1;
        // A contiguous NFA: built in about a sixth of the time of the DFA
        // the builder picks for few patterns (48 against 313 µs for three
        // 40-byte values here), and a call's output is small.
        let anchors = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostFirst)
            .kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA))
            .build(patterns.iter().map(|p| &p[..p.len().min(ANCHOR_BYTES)]))
            .map_err(|e| MaskError::Build(e.to_string()))?;
        Ok(Self {
            anchors,
            patterns,
            owner,
            names: secrets.iter().map(|(n, _)| (*n).to_owned()).collect(),
            counts: vec![0; secrets.len()],
            hold,
        })
    }

    /// How many times each secret was masked, by name.
    pub fn counts(&self) -> std::collections::BTreeMap<String, u64> {
        self.names
            .iter()
            .cloned()
            .zip(self.counts.iter().copied())
            .collect()
    }

    /// The leftmost-longest whole match in `hay` that starts at `from` or
    /// later: (start, end, pattern). Every whole match starts with its
    /// anchor, so the leftmost anchor is the first place one can start.
    fn find_from(&self, hay: &[u8], mut from: usize) -> Option<(usize, usize, usize)> {
        while from < hay.len() {
            let start = self
                .anchors
                .find(aho_corasick::Input::new(hay).range(from..))?
                .start();
            let rest = &hay[start..];
            let mut best: Option<usize> = None;
            for (i, pattern) in self.patterns.iter().enumerate() {
                if rest.starts_with(pattern)
                    && best.is_none_or(|b| pattern.len() > self.patterns[b].len())
                {
                    best = Some(i);
                }
            }
            if let Some(b) = best {
                return Some((start, start + self.patterns[b].len(), b));
            }
            from = start + 1;
        }
        None
    }

    /// Masks what `stream` holds, appending the output that is final to
    /// `out`; at the end of the stream everything is final.
    fn drain(&mut self, stream: &mut MaskStream, out: &mut Vec<u8>, end: bool) {
        let pending = &stream.pending;
        let mut folded = Zeroizing::new(Vec::with_capacity(pending.len()));
        let mut at = Vec::with_capacity(pending.len());
        // With nothing to mask (hold 0), nothing waits: not even a run of
        // whitespace that could still grow.
        let decided = fold(
            pending,
            stream.gap_before,
            end || self.hold == 0,
            &mut folded,
            &mut at,
        );
        // A match that starts before `safe` lies wholly in `folded` (no
        // pattern is longer than hold + 1), so the choice there is final.
        let safe = if end {
            folded.len()
        } else {
            folded.len().saturating_sub(self.hold)
        };
        let mut done = 0;
        let mut from = 0;
        while let Some((first, end, pattern)) = self.find_from(&folded, from) {
            if first >= safe {
                break;
            }
            from = end;
            // The raw bytes of the match, with the whitespace inside it.
            let (start, stop) = (at[first], at[end - 1] + 1);
            out.extend_from_slice(&pending[done..start]);
            let secret = self.owner[pattern];
            self.counts[secret] += 1;
            out.extend_from_slice(format!("[masked:{}]", self.names[secret]).as_bytes());
            done = stop;
        }
        // Everything before the first byte that is not final goes out.
        let final_until = if safe < folded.len() {
            at[safe]
        } else {
            decided
        };
        let keep_from = done.max(final_until);
        out.extend_from_slice(&pending[done..keep_from]);
        // The run of whitespace that ends where the stream is cut goes on.
        let gap = pending[..keep_from]
            .iter()
            .rev()
            .take_while(|&&b| is_gap(b))
            .count();
        stream.gap_before = if gap == keep_from {
            stream.gap_before.saturating_add(gap)
        } else {
            gap
        };
        // The rest moves to the front; the bytes left behind are wiped.
        let rest = pending.len() - keep_from;
        stream.pending.copy_within(keep_from.., 0);
        stream.pending[rest..].zeroize();
        stream.pending.truncate(rest);
    }

    /// Feeds `data` of `stream`; appends to `out` what can be emitted now.
    pub fn feed(&mut self, stream: &mut MaskStream, data: &[u8], out: &mut Vec<u8>) {
        stream.pending.extend_from_slice(data);
        self.drain(stream, out, false);
    }

    /// The stream ended: appends everything it still held, masked.
    pub fn finish(&mut self, stream: &mut MaskStream, out: &mut Vec<u8>) {
        self.drain(stream, out, true);
    }
}

/// One output stream's held-back bytes (wiped when dropped).
#[derive(Default)]
pub struct MaskStream {
    pending: Zeroizing<Vec<u8>>,
    /// Whitespace bytes that went out just before `pending`, in one run.
    gap_before: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    use proptest::prelude::*;

    fn mask_all(masker: &mut Masker, chunks: &[&[u8]]) -> Vec<u8> {
        let mut stream = MaskStream::default();
        let mut out = Vec::new();
        for chunk in chunks {
            masker.feed(&mut stream, chunk, &mut out);
        }
        masker.finish(&mut stream, &mut out);
        out
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    const VALUE: &[u8] = b"s3cr3t-V@lue/+=\"\\\xc3\xa9!";

    /// Every encoding a tool could print the value in, in a longer text.
    fn printed_forms(value: &[u8]) -> Vec<Vec<u8>> {
        let mut out = vec![value.to_vec()];
        for prefix in [&b""[..], b"a", b"ab"] {
            let mut v = prefix.to_vec();
            v.extend_from_slice(value);
            v.extend_from_slice(b"tail");
            for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
                out.push(engine.encode(&v).into_bytes());
            }
        }
        out.push(hex(value, false).to_vec());
        out.push(hex(value, true).to_vec());
        out.push(percent(value, false).to_vec());
        out.push(percent(value, true).to_vec());
        out.push(percent_every(value, false).to_vec());
        out.push(percent_every(value, true).to_vec());
        let text = std::str::from_utf8(value).unwrap();
        out.push(serde_json::to_string(text).unwrap().into_bytes());
        out
    }

    #[test]
    fn every_form_is_masked_and_counted_and_the_rest_passes_unchanged() {
        let mut masker = Masker::new(&[("TOKEN", VALUE)]).unwrap();
        for form in printed_forms(VALUE) {
            let mut text = b"before ".to_vec();
            text.extend_from_slice(&form);
            text.extend_from_slice(b" after\n");
            let out = mask_all(&mut masker, &[&text]);
            assert!(
                contains(&out, b"[masked:TOKEN]"),
                "{}",
                String::from_utf8_lossy(&out)
            );
            assert!(
                out.starts_with(b"before "),
                "{}",
                String::from_utf8_lossy(&out)
            );
            assert!(out.ends_with(b" after\n"));
            for f in forms(VALUE) {
                assert!(!contains(&out, &f), "{}", String::from_utf8_lossy(&out));
            }
        }
        assert!(masker.counts()["TOKEN"] >= 13);
        let clean = mask_all(&mut masker, &[b"nothing to see\n"]);
        assert_eq!(clean, b"nothing to see\n");
    }

    #[test]
    fn a_value_split_one_byte_per_write_is_masked_the_same() {
        let mut masker = Masker::new(&[("A", b"hunter2-xyz")]).unwrap();
        let text = b"x hunter2-xyz y";
        let chunks: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(mask_all(&mut masker, &chunks), b"x [masked:A] y");
    }

    #[test]
    fn a_long_value_is_masked_whole_and_a_near_miss_passes_unchanged() {
        let value: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i * 7 % 26) as u8).collect();
        let mut masker = Masker::new(&[("BIG", &value)]).unwrap();
        // Wrapped at 76 columns, as `base64` prints it, written in pieces.
        let wrapped: Vec<u8> = STANDARD
            .encode(&value)
            .into_bytes()
            .chunks(76)
            .flat_map(|line| line.iter().copied().chain([b'\n']))
            .collect();
        let chunks: Vec<&[u8]> = wrapped.chunks(4093).collect();
        // (The last characters and padding depend on bits past the value.)
        let out = mask_all(&mut masker, &chunks);
        assert!(out.starts_with(b"[masked:BIG]"), "{}", out.len());
        assert!(
            out.len() <= b"[masked:BIG]g==\n".len(),
            "{}",
            String::from_utf8_lossy(&out)
        );
        // The same but for its last byte: the anchor matches, the whole not.
        let mut near = value.clone();
        *near.last_mut().unwrap() = b'!';
        let out = mask_all(&mut masker, &[b"x ", &near, b" y"]);
        assert_eq!(out.len(), near.len() + 4);
        assert!(out.starts_with(b"x ") && out.ends_with(b" y"));
        assert_eq!(masker.counts()["BIG"], 1);
    }

    #[test]
    fn with_nothing_to_mask_every_byte_goes_out_at_once() {
        // A sign-in reads its prompt's last line while the program waits.
        let mut masker = Masker::new(&[]).unwrap();
        let mut stream = MaskStream::default();
        let mut out = Vec::new();
        masker.feed(&mut stream, b"Enter this code: WXYZ-98765\n", &mut out);
        assert_eq!(out, b"Enter this code: WXYZ-98765\n");
        // With a value, only what could still become a match waits.
        let mut masker = Masker::new(&[("A", b"hunter2-xyz")]).unwrap();
        let mut stream = MaskStream::default();
        out.clear();
        let line = b"this line is long enough to leave a held-back tail behind\n";
        masker.feed(&mut stream, line, &mut out);
        assert!(!out.is_empty() && line.starts_with(&out) && out.len() < line.len());
        let held = line[out.len()..].iter().filter(|b| !is_gap(**b)).count();
        assert_eq!(held, masker.hold, "{}", String::from_utf8_lossy(&out));
    }

    #[test]
    fn each_line_of_a_key_file_printed_alone_is_masked() {
        let key = b"-----BEGIN OPENSSH PRIVATE KEY-----\n\
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n\
QyNTUxOQAAACBvcGVuc3NoLWtleS12MQAAAAAEbm9uZQAAAARub25l\r\n\
short line\n\
-----END OPENSSH PRIVATE KEY-----\n";
        let mut masker = Masker::new(&[("deploy_key", key)]).unwrap();
        // `head -2`: the armour line and the first base64 line, each masked.
        let head: Vec<u8> = key
            .split_inclusive(|&b| b == b'\n')
            .take(2)
            .flatten()
            .copied()
            .collect();
        let out = mask_all(&mut masker, &[&head]);
        assert_eq!(out, b"[masked:deploy_key]\n[masked:deploy_key]\n");
        // A CRLF line without its CR, in other text, split anywhere.
        let line = b"QyNTUxOQAAACBvcGVuc3NoLWtleS12MQAAAAAEbm9uZQAAAARub25l";
        let text = [&b"x "[..], line, b" y"].concat();
        for cut in 0..text.len() {
            let out = mask_all(&mut masker, &[&text[..cut], &text[cut..]]);
            assert_eq!(out, b"x [masked:deploy_key] y", "cut at {cut}");
        }
        // The whole file is one mask; a line under MIN_LINE_BYTES is not
        // masked by itself (control).
        assert_eq!(mask_all(&mut masker, &[key]), b"[masked:deploy_key]\n");
        assert_eq!(mask_all(&mut masker, &[b"short line"]), b"short line");
        // A value of one line gets no line patterns.
        assert!(lines(b"one-line-value-of-some-length").is_empty());
        assert_eq!(
            lines(&b"l-of-twenty-bytes-xx\n".repeat(2000)).len(),
            MAX_MASKED_LINES
        );
    }

    #[test]
    fn a_value_ending_in_a_newline_is_masked_in_every_form_without_it() {
        let mut masker = Masker::new(&[("tok", b"ghp_TRAILINGNEWLINEsecret99\n")]).unwrap();
        let bare = b"ghp_TRAILINGNEWLINEsecret99";
        // `printf %s "$(cat f)" | base64`, `| xxd -p`, and Basic auth's
        // `user:VALUE` in base64: each masked.
        let b64 = STANDARD.encode(bare);
        let hex: String = bare.iter().map(|b| format!("{b:02x}")).collect();
        let basic = STANDARD.encode([&b"user:"[..], bare].concat());
        for printed in [b64.as_bytes(), hex.as_bytes(), bare] {
            let out = mask_all(&mut masker, &[printed]);
            assert_eq!(out, b"[masked:tok]", "{}", String::from_utf8_lossy(printed));
        }
        let out = mask_all(&mut masker, &[basic.as_bytes()]);
        assert!(
            !contains(&out, &STANDARD.encode(bare).as_bytes()[8..24]),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert!(
            contains(&out, b"[masked:tok]"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        // Control: an unrelated text passes unchanged.
        assert_eq!(mask_all(&mut masker, &[b"ghp_other"]), b"ghp_other");
    }

    #[test]
    fn a_short_value_is_refused() {
        assert_eq!(
            Masker::new(&[("PIN", b"123")]).unwrap_err(),
            MaskError::TooShort {
                name: "PIN".into(),
                len: 3
            }
        );
    }

    proptest! {
        #[test]
        fn arbitrary_output_split_anywhere_never_emits_a_form_and_keeps_the_rest(
            value in proptest::collection::vec(any::<u8>(), 4..24),
            noise in proptest::collection::vec(
                proptest::collection::vec(any::<u8>(), 0..40), 1..6),
            cuts in proptest::collection::vec(0usize..400, 0..12),
        ) {
            prop_assume!(value.iter().filter(|&&b| !is_gap(b)).count() >= MIN_MASKED_BYTES);
            let mut masker = Masker::new(&[("V", &value)]).unwrap();
            // Noise with the value (in some form) between each piece.
            let forms_printed = printed_forms_any(&value);
            let mut text = Vec::new();
            for (i, piece) in noise.iter().enumerate() {
                text.extend_from_slice(piece);
                text.extend_from_slice(&forms_printed[i % forms_printed.len()]);
            }
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (text.len() + 1)).collect();
            cuts.sort();
            let mut chunks = Vec::new();
            let mut at = 0;
            for c in cuts { chunks.push(&text[at..c]); at = c; }
            chunks.push(&text[at..]);
            let out = mask_all(&mut masker, &chunks);
            // Split anywhere gives the same as whole.
            let whole = mask_all(&mut Masker::new(&[("V", &value)]).unwrap(), &[&text]);
            prop_assert_eq!(&out, &whole);
            prop_assert!(!contains(&out, &value));
            for f in forms(&value) { prop_assert!(!contains(&out, &f)); }
            // With nothing to mask (whitespace aside), everything passes
            // unchanged.
            let plain: Vec<u8> = noise.concat();
            let solid = |b: &[u8]| -> Vec<u8> {
                let mut folded = Vec::new();
                fold(b, 0, true, &mut folded, &mut Vec::new());
                folded
            };
            if !forms(&value).iter().any(|f| contains(&solid(&plain), &solid(f))) {
                prop_assert_eq!(mask_all(&mut masker, &[&plain]), plain);
            }
        }
    }

    /// Like [`printed_forms`], for values that need not be UTF-8.
    fn printed_forms_any(value: &[u8]) -> Vec<Vec<u8>> {
        let mut out = vec![value.to_vec()];
        for prefix in [&b""[..], b"a", b"ab"] {
            let mut v = prefix.to_vec();
            v.extend_from_slice(value);
            out.push(STANDARD.encode(&v).into_bytes());
            out.push(URL_SAFE_NO_PAD.encode(&v).into_bytes());
        }
        out.push(hex(value, true).to_vec());
        out.push(percent(value, false).to_vec());
        // Wrapped into lines, and spaced into bytes.
        out.push(wrapped(&STANDARD.encode(value).into_bytes(), 7, b"\r\n"));
        out.push(wrapped(&hex(value, false), 2, b" "));
        out
    }

    /// `text` with `gap` after every `width` bytes.
    fn wrapped(text: &[u8], width: usize, gap: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, piece) in text.chunks(width).enumerate() {
            if i > 0 {
                out.extend_from_slice(gap);
            }
            out.extend_from_slice(piece);
        }
        out
    }

    #[test]
    fn forms_wrapped_into_lines_or_spaced_into_bytes_are_masked_whole() {
        let value: &[u8] = b"ghp_4f2a9c1e7b3d5f8a0c6e2b4d9f1a3c5e7b9d0f2a";
        let mut masker = Masker::new(&[("GH", value)]).unwrap();
        let b64 = STANDARD.encode([value, b"\n"].concat()).into_bytes();
        let hex_lower = hex(value, false);
        let od: Vec<u8> = value
            .chunks(16)
            .flat_map(|line| {
                let mut l: Vec<u8> = line
                    .iter()
                    .flat_map(|b| format!(" {b:02x}").into_bytes())
                    .collect();
                l.push(b'\n');
                l
            })
            .collect();
        for printed in [
            wrapped(&b64, 76, b"\n"),       // base64
            wrapped(&b64, 10, b"\r\n"),     // a narrower wrap
            wrapped(&hex_lower, 60, b"\n"), // xxd -p
            od,                             // od -An -tx1
        ] {
            let text = [&b"before\n"[..], &printed, b"after\n"].concat();
            let chunks: Vec<&[u8]> = text.chunks(1).collect();
            let out = mask_all(&mut masker, &chunks);
            let shown = String::from_utf8_lossy(&out);
            assert!(
                shown.starts_with("before\n") && shown.ends_with("after\n"),
                "{shown}"
            );
            assert!(shown.contains("[masked:GH]"), "{shown}");
            // Only one mask, and nothing of the form but the base64 tail
            // that encodes the newline after the value.
            assert_eq!(shown.matches("[masked:GH]").count(), 1, "{shown}");
            let left = shown.replace("[masked:GH]", "");
            let solid = left.bytes().filter(|b| !is_gap(*b)).count();
            assert!(solid <= "beforeafter".len() + 4, "{shown}");
        }
        // A run longer than MAX_GAP is not looked through.
        let apart = [&value[..20], b"      ", &value[20..]].concat();
        assert_eq!(mask_all(&mut masker, &[&apart]), apart);
    }
}
