//! A message body as the broker reads and writes it: decoded from its
//! framing (a length, chunks, or to the close) into plain bytes, and
//! written on in chunks.
//!
//! Guarantees: a chunked body is read strictly — hex sizes of at most 15
//! digits, each chunk and size line ended by CRLF, trailers read to their
//! empty line and dropped — and anything else is an error, never a guess;
//! a body of a given length ends there, and one that closes early is an
//! error ([`std::io::ErrorKind::UnexpectedEof`]), so a truncated message
//! is never passed on as whole.
#![forbid(unsafe_code)]

use std::io::{self, Read, Write};

use super::head::Framing;
use super::wire::Wire;

fn bad(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// The decoded bytes of one body.
pub struct BodyReader<'a, S> {
    wire: &'a mut Wire<S>,
    framing: Framing,
    /// Bytes left of the current chunk or length.
    left: u64,
    done: bool,
}

impl<'a, S: Read> BodyReader<'a, S> {
    /// The body framed by `framing` that follows on `wire`.
    pub fn new(wire: &'a mut Wire<S>, framing: Framing) -> Self {
        let (left, done) = match framing {
            Framing::None => (0, true),
            Framing::Length(n) => (n, n == 0),
            Framing::Chunked | Framing::ToClose => (0, false),
        };
        Self {
            wire,
            framing,
            left,
            done,
        }
    }

    fn wire_err(e: super::wire::WireError) -> io::Error {
        match e {
            super::wire::WireError::Io(e) => e,
            super::wire::WireError::TooLarge(_) => bad("a chunk line too long"),
            _ => io::Error::new(io::ErrorKind::UnexpectedEof, "the body ended early"),
        }
    }

    /// Reads the next chunk's size line (after the CRLF of the last).
    fn next_chunk(&mut self) -> io::Result<()> {
        let line = self.wire.read_line().map_err(Self::wire_err)?;
        let line = line
            .strip_suffix(b"\r\n")
            .ok_or_else(|| bad("a chunk size line not ended by CRLF"))?;
        let size = line.split(|b| *b == b';').next().unwrap_or_default();
        if size.is_empty() || size.len() > 15 || !size.iter().all(u8::is_ascii_hexdigit) {
            return Err(bad("a chunk size that is not hex"));
        }
        if line.iter().any(|b| *b == b'\r' || *b == b'\n') {
            return Err(bad("a bare CR in a chunk size line"));
        }
        let n = u64::from_str_radix(&String::from_utf8_lossy(size), 16)
            .map_err(|_| bad("a chunk size that is not hex"))?;
        if n == 0 {
            // Trailers, dropped, to their empty line.
            loop {
                let t = self.wire.read_line().map_err(Self::wire_err)?;
                if !t.ends_with(b"\r\n") || t[..t.len() - 2].contains(&b'\r') {
                    return Err(bad("a trailer line not ended by CRLF"));
                }
                if t.len() == 2 {
                    break;
                }
            }
            self.done = true;
        }
        self.left = n;
        Ok(())
    }
}

impl<S: Read> Read for BodyReader<'_, S> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.done || out.is_empty() {
            return Ok(0);
        }
        if self.framing == Framing::ToClose {
            let n = self.wire.read(out)?;
            if n == 0 {
                self.done = true;
            }
            return Ok(n);
        }
        if self.left == 0 {
            // Chunked only: a length of 0 is done from the start.
            self.next_chunk()?;
            if self.done {
                return Ok(0);
            }
        }
        let want = out
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.wire.read(&mut out[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the body ended early",
            ));
        }
        self.left -= n as u64;
        if self.left == 0 {
            match self.framing {
                Framing::Length(_) => self.done = true,
                _ => {
                    let mut crlf = [0u8; 2];
                    self.wire.read_exact(&mut crlf)?;
                    if &crlf != b"\r\n" {
                        return Err(bad("a chunk not followed by CRLF"));
                    }
                }
            }
        }
        Ok(n)
    }
}

/// Writes `piece` as one chunk (nothing for an empty piece).
pub fn write_chunk(out: &mut impl Write, piece: &[u8]) -> io::Result<()> {
    if piece.is_empty() {
        return Ok(());
    }
    write!(out, "{:x}\r\n", piece.len())?;
    out.write_all(piece)?;
    out.write_all(b"\r\n")
}

/// Ends a chunked body.
pub fn end_chunks(out: &mut impl Write) -> io::Result<()> {
    out.write_all(b"0\r\n\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(data: &[u8], framing: Framing) -> io::Result<(Vec<u8>, Vec<u8>)> {
        let mut wire = Wire::new(data, b"");
        let mut out = Vec::new();
        BodyReader::new(&mut wire, framing).read_to_end(&mut out)?;
        let mut rest = Vec::new();
        wire.read_to_end(&mut rest)?;
        Ok((out, rest))
    }

    #[test]
    fn chunks_decode_and_what_follows_stays() {
        let (body, rest) = read_all(
            b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\nNEXT",
            Framing::Chunked,
        )
        .unwrap();
        assert_eq!(body, b"hello world");
        assert_eq!(rest, b"NEXT");
        let (body, rest) = read_all(b"abcdefNEXT", Framing::Length(6)).unwrap();
        assert_eq!((&body[..], &rest[..]), (&b"abcdef"[..], &b"NEXT"[..]));
        let mut out = Vec::new();
        write_chunk(&mut out, b"hello").unwrap();
        end_chunks(&mut out).unwrap();
        assert_eq!(read_all(&out, Framing::Chunked).unwrap().0, b"hello");
    }

    #[test]
    fn a_bad_or_short_body_is_an_error() {
        for bad in [
            &b"5\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhelloXX0\r\n\r\n",
            b"z\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhel",
            b"0\r\nTrailer: x\n\r\n",
            b"1234567890abcdef0\r\n",
        ] {
            assert!(read_all(bad, Framing::Chunked).is_err(), "{bad:?}");
        }
        let e = read_all(b"abc", Framing::Length(6)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
