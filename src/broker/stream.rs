//! Same-length replacement in a stream: each pattern replaced by its
//! stand-in of the same length, wherever the stream was split.
//!
//! Guarantees: a pattern split across any number of pieces at any byte is
//! replaced as if the stream were whole, since the last `longest − 1`
//! bytes wait for the next piece and nothing else does; every replacement
//! keeps the stream's length, so a framed message (`Content-Length`, a
//! chunk's size) needs no new framing; what is held back, and the stand-ins,
//! are wiped when dropped, and the held bytes grow without leaving a copy
//! in freed memory.
#![forbid(unsafe_code)]

use zeroize::Zeroizing;

/// One pattern, what replaces it (the same length), and whose it is.
pub struct Pair {
    /// What is looked for.
    pub from: Zeroizing<Vec<u8>>,
    /// What replaces it.
    pub to: Zeroizing<Vec<u8>>,
    /// The secret it belongs to.
    pub name: String,
}

/// Index of the first `needle` in `hay`.
pub(super) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Replaces every `from` with `to` (the same length) in `buf`; how many.
pub(super) fn replace_all(buf: &mut [u8], from: &[u8], to: &[u8]) -> usize {
    debug_assert_eq!(from.len(), to.len());
    let mut n = 0;
    let mut at = 0;
    while let Some(i) = find(&buf[at..], from) {
        buf[at + i..at + i + from.len()].copy_from_slice(to);
        at += i + from.len();
        n += 1;
    }
    n
}

/// A stream being rewritten.
pub struct Replacer {
    pairs: Vec<Pair>,
    held: Zeroizing<Vec<u8>>,
    keep: usize,
    /// Whose patterns were replaced so far (names, once each).
    pub replaced: Vec<String>,
}

impl Replacer {
    /// A stream replacing each pair's `from` by its `to`; pairs of unequal
    /// lengths are left out (they would change the framing).
    pub fn new(pairs: Vec<Pair>) -> Self {
        let pairs: Vec<Pair> = pairs
            .into_iter()
            .filter(|p| p.from.len() == p.to.len() && !p.from.is_empty())
            .collect();
        let keep = pairs.iter().map(|p| p.from.len()).max().unwrap_or(1) - 1;
        Self {
            pairs,
            held: Zeroizing::new(Vec::new()),
            keep,
            replaced: Vec::new(),
        }
    }

    /// Takes the next piece; returns what may be passed on now.
    pub fn push(&mut self, piece: &[u8]) -> Zeroizing<Vec<u8>> {
        super::wire::extend_wiped(&mut self.held, piece);
        self.replace();
        let cut = self.held.len().saturating_sub(self.keep);
        let ready = Zeroizing::new(self.held[..cut].to_vec());
        self.held.drain(..cut);
        ready
    }

    /// The end of the stream: what is still held.
    pub fn finish(&mut self) -> Zeroizing<Vec<u8>> {
        self.replace();
        Zeroizing::new(std::mem::take(&mut *self.held))
    }

    fn replace(&mut self) {
        for pair in &self.pairs {
            if replace_all(&mut self.held, &pair.from, &pair.to) > 0
                && !self.replaced.contains(&pair.name)
            {
                self.replaced.push(pair.name.clone());
            }
        }
    }
}
