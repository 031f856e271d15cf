//! The encodings a value travels in that the broker rewrites in place:
//! hex and percent-encoding, each in upper and lower case.
//!
//! Guarantees: pure functions of their input; an encoding of a placeholder
//! has the length of the same encoding of its value (a placeholder keeps
//! its value's length and its non-alphanumeric bytes).
#![forbid(unsafe_code)]

/// `bytes` in hex, upper or lower case.
pub fn hex(bytes: &[u8], upper: bool) -> Vec<u8> {
    let digits: &[u8; 16] = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    bytes
        .iter()
        .flat_map(|b| [digits[usize::from(b >> 4)], digits[usize::from(b & 15)]])
        .collect()
}

/// Every byte of `bytes` as `%XX`, as some encoders write a value whole.
pub fn percent_every(bytes: &[u8], upper: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() * 3);
    for pair in hex(bytes, upper).chunks(2) {
        out.push(b'%');
        out.extend_from_slice(pair);
    }
    out
}

/// `bytes` percent-encoded (every byte but letters and digits), its hex
/// digits in upper or lower case.
pub fn percent(bytes: &[u8], upper: bool) -> Vec<u8> {
    let encoded = percent_encoding::percent_encode(bytes, percent_encoding::NON_ALPHANUMERIC)
        .to_string()
        .into_bytes();
    if upper {
        encoded
    } else {
        // Only the hex digits after '%' change case; letters of the value
        // pass unencoded and keep theirs.
        let mut out = encoded;
        let mut i = 0;
        while i < out.len() {
            if out[i] == b'%' && i + 2 < out.len() {
                out[i + 1] = out[i + 1].to_ascii_lowercase();
                out[i + 2] = out[i + 2].to_ascii_lowercase();
                i += 3;
            } else {
                i += 1;
            }
        }
        out
    }
}
