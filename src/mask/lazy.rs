//! A masker built when the output it masks first arrives.
//!
//! The automaton of every form of every value costs a call's start some
//! 50–100 µs on a small VM, and a tool that writes nothing (many a
//! `spawn`) never needs it; one that writes pays it at its first byte, off
//! the path from the call to its program's start.
//!
//! Guarantees: the values are checked when this is made, so a value too
//! short to mask refuses the call before anything runs, exactly as
//! [`Masker::new`] would; every byte fed is masked by the one full
//! [`Masker`] of all the values, built before that byte is looked at; a
//! masker that cannot be built is an error, never a pass-through; until it
//! is built, each name has counted no mask.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use super::{MaskError, MaskStream, Masker};

/// The masker of `secrets`, built at the first byte to mask.
pub struct LazyMasker<'a> {
    secrets: &'a [(&'a str, &'a [u8])],
    built: Option<Masker>,
}

impl<'a> LazyMasker<'a> {
    /// Checks `secrets` as [`Masker::new`] does; builds nothing yet.
    pub fn new(secrets: &'a [(&'a str, &'a [u8])]) -> Result<Self, MaskError> {
        Masker::check(secrets)?;
        Ok(Self {
            secrets,
            built: None,
        })
    }

    /// Masks `data`, the next bytes of `stream`, into `out` (building the
    /// masker first if this is the first byte of any stream).
    pub fn feed(
        &mut self,
        stream: &mut MaskStream,
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), MaskError> {
        let masker = match &mut self.built {
            Some(masker) => masker,
            built @ None => built.insert(Masker::new(self.secrets)?),
        };
        masker.feed(stream, data, out);
        Ok(())
    }

    /// Flushes what `stream` holds back at its end; a stream never fed
    /// holds nothing.
    pub fn finish(&mut self, stream: &mut MaskStream, out: &mut Vec<u8>) {
        if let Some(masker) = &mut self.built {
            masker.finish(stream, out);
        }
    }

    /// How many masks each secret's name got.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        match &self.built {
            Some(masker) => masker.counts(),
            None => self
                .secrets
                .iter()
                .map(|(name, _)| ((*name).to_owned(), 0))
                .collect(),
        }
    }

    /// Whether the full masker has been built (for tests).
    pub fn is_built(&self) -> bool {
        self.built.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUE: &[u8] = b"s3cr3t-value-for-lazy-masking";

    #[test]
    fn nothing_is_built_until_the_first_byte_and_then_it_masks() {
        let secrets = [("token", VALUE)];
        let mut lazy = LazyMasker::new(&secrets).unwrap();
        let mut stream = MaskStream::default();
        let mut out = Vec::new();
        lazy.finish(&mut stream, &mut out);
        assert!(out.is_empty());
        assert!(!lazy.is_built(), "a stream that ended empty built nothing");
        assert_eq!(lazy.counts().get("token"), Some(&0));
        let mut all = Vec::new();
        for chunk in [&b"it is s3cr3t-val"[..], b"ue-for-lazy-masking!"] {
            out.clear();
            lazy.feed(&mut stream, chunk, &mut out).unwrap();
            all.extend_from_slice(&out);
        }
        out.clear();
        lazy.finish(&mut stream, &mut out);
        all.extend_from_slice(&out);
        assert!(lazy.is_built());
        assert_eq!(all, b"it is [masked:token]!");
        assert_eq!(lazy.counts().get("token"), Some(&1));
    }

    #[test]
    fn a_value_too_short_is_refused_when_made_as_by_the_full_masker() {
        let secrets = [("pin", &b"12 3"[..])];
        let Err(lazy) = LazyMasker::new(&secrets) else {
            panic!("a value of 3 bytes was taken")
        };
        let Err(full) = Masker::new(&secrets) else {
            panic!("a value of 3 bytes was taken")
        };
        assert_eq!(lazy.to_string(), full.to_string());
        assert!(matches!(lazy, MaskError::TooShort { len: 3, .. }));
        // The control: one byte more is taken.
        assert!(LazyMasker::new(&[("pin", &b"12 34"[..])]).is_ok());
    }
}
