//! The stand-in a tool holds for a secret bound to hosts: fresh for every
//! call, shaped like the value where clients check shapes.
//!
//! Guarantees: a placeholder has the value's length; it keeps a known
//! non-secret prefix (`ghp_`, `sk-`, `xoxb-`, …, [`KNOWN_PREFIXES`]) and
//! every byte that is not a letter or digit (`-`, `_`, `.`, …) where the
//! value has them; every letter or digit after the prefix is drawn afresh
//! from the operating system's generator within its own class (lower,
//! upper, digit), so a placeholder tells nothing of the value beyond its
//! prefix, length and shape. One whose drawn positions carry fewer than
//! [`MIN_BITS`] bits is refused ([`PlaceholderError::TooGuessable`]), as is
//! a value that cannot travel in an HTTP header (not printable ASCII); it
//! never equals the value.
#![forbid(unsafe_code)]

use rand::{rngs::OsRng, Rng};

/// Prefixes that name a credential's kind, not its secret part, longest
/// first where one begins another.
pub const KNOWN_PREFIXES: &[&str] = &[
    "github_pat_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "glpat-",
    "sk-ant-api03-",
    "sk-ant-",
    "sk-proj-",
    "sk-",
    "xoxb-",
    "xoxp-",
    "xapp-",
    "AKIA",
    "ASIA",
    "hf_",
    "npm_",
    "pypi-",
    "dop_v1_",
    "SG.",
];

/// The fewest bits a placeholder's drawn positions carry.
pub const MIN_BITS: f64 = 64.0;

/// Why a value gets no placeholder.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlaceholderError {
    /// A byte a header cannot carry (control, space, non-ASCII).
    #[error("the value has a byte an HTTP header cannot carry (at {at}): only printable ASCII can be bound to hosts")]
    NotHeaderSafe {
        /// The byte's position.
        at: usize,
    },
    /// Too few letters and digits to draw a placeholder nobody can guess.
    #[error("the value leaves {bits:.0} bits to draw a placeholder from, fewer than {MIN_BITS}: too short to bind")]
    TooGuessable {
        /// Bits the drawn positions carry.
        bits: f64,
    },
}

/// The known prefix `value` begins with, if any.
pub fn prefix_of(value: &[u8]) -> &'static str {
    KNOWN_PREFIXES
        .iter()
        .find(|p| value.starts_with(p.as_bytes()))
        .copied()
        .unwrap_or("")
}

/// A fresh placeholder shaped like `value`.
pub fn shaped_like(value: &[u8]) -> Result<String, PlaceholderError> {
    shaped_like_with(value, &mut OsRng)
}

/// [`shaped_like`] with the generator given (for tests).
pub fn shaped_like_with(value: &[u8], rng: &mut impl Rng) -> Result<String, PlaceholderError> {
    if let Some(at) = value.iter().position(|b| !b.is_ascii_graphic()) {
        return Err(PlaceholderError::NotHeaderSafe { at });
    }
    let prefix = prefix_of(value);
    let rest = &value[prefix.len()..];
    let bits: f64 = rest
        .iter()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' => 26f64.log2(),
            b'0'..=b'9' => 10f64.log2(),
            _ => 0.0,
        })
        .sum();
    if bits < MIN_BITS {
        return Err(PlaceholderError::TooGuessable { bits });
    }
    loop {
        let mut out = String::with_capacity(value.len());
        out.push_str(prefix);
        for b in rest {
            out.push(match b {
                b'a'..=b'z' => rng.gen_range(b'a'..=b'z') as char,
                b'A'..=b'Z' => rng.gen_range(b'A'..=b'Z') as char,
                b'0'..=b'9' => rng.gen_range(b'0'..=b'9') as char,
                other => *other as char,
            });
        }
        if out.as_bytes() != value {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(b: u8) -> u8 {
        match b {
            b'a'..=b'z' => b'a',
            b'A'..=b'Z' => b'A',
            b'0'..=b'9' => b'0',
            other => other,
        }
    }

    #[test]
    fn a_placeholder_keeps_prefix_length_and_classes_and_is_fresh_each_time() {
        for value in [
            "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            "github_pat_11ABCDEFG0abcdefghij_KLMNOPQRSTuvwxyz0123456789abcdefghijklmnopqrstu",
            "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
            "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
            "AKIAIOSFODNN7EXAMPLE",
            "plain-token-with.dots_and-underscores-0123456789",
        ] {
            let a = shaped_like(value.as_bytes()).unwrap();
            let b = shaped_like(value.as_bytes()).unwrap();
            assert_ne!(a, b, "fresh each call");
            assert_ne!(a.as_bytes(), value.as_bytes());
            assert_eq!(a.len(), value.len());
            let prefix = prefix_of(value.as_bytes());
            assert!(a.starts_with(prefix), "{a}");
            for (x, y) in a.bytes().zip(value.bytes()) {
                assert_eq!(class(x), class(y), "{a} against {value}");
            }
        }
        assert_eq!(prefix_of(b"sk-ant-api03-abc"), "sk-ant-api03-");
        assert_eq!(prefix_of(b"nothing"), "");
    }

    #[test]
    fn values_a_header_cannot_carry_or_too_short_to_hide_are_refused() {
        assert_eq!(
            shaped_like(b"abc def ghi jkl mno pqr stu"),
            Err(PlaceholderError::NotHeaderSafe { at: 3 })
        );
        assert!(matches!(
            shaped_like("pässwörd-0123456789abcdef".as_bytes()),
            Err(PlaceholderError::NotHeaderSafe { .. })
        ));
        // 13 letters carry 61 bits: too few; 14 carry 65.8.
        assert!(matches!(
            shaped_like(b"ghp_abcdefghijklm"),
            Err(PlaceholderError::TooGuessable { .. })
        ));
        assert!(shaped_like(b"ghp_abcdefghijklmn").is_ok());
        assert!(matches!(
            shaped_like(b"----------------"),
            Err(PlaceholderError::TooGuessable { .. })
        ));
    }
}
