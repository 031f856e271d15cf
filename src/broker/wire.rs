//! A byte stream the broker reads HTTP/1.1 from: what was read past a head
//! is kept for the body, and every byte held is wiped when dropped.
//!
//! Guarantees: a head is read up to its first empty line and no further
//! than [`MAX_HEAD_BYTES`]; a line (a chunk's size, a trailer) no further
//! than [`MAX_LINE_BYTES`]; bytes read past either stay for the next read,
//! so nothing is lost or read twice; the buffer is `Zeroizing`, and grows
//! without leaving a copy behind ([`extend_wiped`]). A stream
//! that ends inside a head or line is an error, never a short head.
#![forbid(unsafe_code)]

use std::io::{self, Read, Write};

use zeroize::Zeroizing;

/// The longest head read.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The longest chunk-size or trailer line read.
pub const MAX_LINE_BYTES: usize = 8 * 1024;

/// Appends `data` to `buf`; when `buf` must grow, its bytes move to a new
/// allocation and the old one is wiped (a plain `Vec` would leave a copy
/// of them behind in freed memory).
pub fn extend_wiped(buf: &mut Zeroizing<Vec<u8>>, data: &[u8]) {
    let need = buf.len() + data.len();
    if need > buf.capacity() {
        let mut grown = Zeroizing::new(Vec::with_capacity(need.max(2 * buf.capacity())));
        grown.extend_from_slice(buf);
        // The old allocation is wiped as it drops.
        *buf = grown;
    }
    buf.extend_from_slice(data);
}

/// Why a head or line could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The stream ended before anything of a head arrived (a clean close).
    #[error("the connection closed")]
    Closed,
    /// The stream ended inside a head or line.
    #[error("the connection closed inside a head or line")]
    Truncated,
    /// Longer than its bound without an end.
    #[error("a head or line longer than {0} bytes")]
    TooLarge(usize),
    /// The socket failed (a timeout included).
    #[error("reading: {0}")]
    Io(#[from] io::Error),
}

/// A stream with what was read ahead of its reader.
pub struct Wire<S> {
    /// The stream itself.
    pub inner: S,
    buf: Zeroizing<Vec<u8>>,
    at: usize,
}

impl<S: Read> Wire<S> {
    /// Wraps `inner`, with `ahead` already read from it.
    pub fn new(inner: S, ahead: &[u8]) -> Self {
        Self {
            inner,
            buf: Zeroizing::new(ahead.to_vec()),
            at: 0,
        }
    }

    /// Bytes read ahead and not yet taken.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.at..]
    }

    fn compact(&mut self) {
        if self.at > 0 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
    }

    fn fill(&mut self) -> io::Result<usize> {
        self.compact();
        let mut chunk = Zeroizing::new([0u8; 16 * 1024]);
        let n = self.inner.read(&mut chunk[..])?;
        extend_wiped(&mut self.buf, &chunk[..n]);
        Ok(n)
    }

    /// Reads up to and including the first `end`, at most `max` bytes.
    fn read_until(&mut self, end: &[u8], max: usize) -> Result<Zeroizing<Vec<u8>>, WireError> {
        let mut searched: usize = 0;
        loop {
            let have = &self.buf[self.at..];
            let from = searched.saturating_sub(end.len() - 1);
            if let Some(i) = have[from..].windows(end.len()).position(|w| w == end) {
                let stop = from + i + end.len();
                if stop > max {
                    return Err(WireError::TooLarge(max));
                }
                let out = Zeroizing::new(have[..stop].to_vec());
                self.at += stop;
                return Ok(out);
            }
            if have.len() > max {
                return Err(WireError::TooLarge(max));
            }
            searched = have.len();
            if self.fill()? == 0 {
                return Err(if self.pending().is_empty() {
                    WireError::Closed
                } else {
                    WireError::Truncated
                });
            }
        }
    }

    /// One head, through its empty line (`\r\n\r\n`).
    pub fn read_head(&mut self) -> Result<Zeroizing<Vec<u8>>, WireError> {
        self.read_until(b"\r\n\r\n", MAX_HEAD_BYTES)
    }

    /// One line, through its `\n` (the caller checks the `\r`).
    pub fn read_line(&mut self) -> Result<Zeroizing<Vec<u8>>, WireError> {
        match self.read_until(b"\n", MAX_LINE_BYTES) {
            Err(WireError::Closed) => Err(WireError::Truncated),
            other => other,
        }
    }
}

impl<S: Read> Read for Wire<S> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at < self.buf.len() {
            let n = out.len().min(self.buf.len() - self.at);
            out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
            self.at += n;
            if self.at == self.buf.len() {
                self.buf.clear();
                self.at = 0;
            }
            return Ok(n);
        }
        self.inner.read(out)
    }
}

impl<S: Write> Write for Wire<S> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.inner.write(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that gives one byte a read, as a slow peer.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() || out.is_empty() {
                return Ok(0);
            }
            out[0] = self.0[0];
            self.0 = &self.0[1..];
            Ok(1)
        }
    }

    #[test]
    fn a_head_then_its_body_read_byte_by_byte_lose_nothing() {
        let data = b"GET / HTTP/1.1\r\nA: b\r\n\r\nBODY5\r\nrest";
        let mut w = Wire::new(Trickle(data), b"");
        assert_eq!(
            &w.read_head().unwrap()[..],
            b"GET / HTTP/1.1\r\nA: b\r\n\r\n"
        );
        assert_eq!(&w.read_line().unwrap()[..], b"BODY5\r\n");
        let mut rest = Vec::new();
        w.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"rest");
        assert!(matches!(
            Wire::new(Trickle(b"GET / HT"), b"").read_head(),
            Err(WireError::Truncated)
        ));
        assert!(matches!(
            Wire::new(Trickle(b""), b"").read_head(),
            Err(WireError::Closed)
        ));
        let long = vec![b'a'; MAX_HEAD_BYTES + 10];
        assert!(matches!(
            Wire::new(&long[..], b"").read_head(),
            Err(WireError::TooLarge(_))
        ));
    }
}
