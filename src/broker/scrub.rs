//! Taking a bound secret's value out of what a bound host answers, before
//! the tool reads it: the value and its common encodings replaced by the
//! placeholder in the same encoding.
//!
//! Guarantees: the value is found raw, in hex (lower and upper case),
//! percent-encoded (upper and lower case hex; the bytes a URL encodes, or
//! every byte) and in base64 (standard and
//! URL-safe, at each of the three alignments a value can have inside a
//! longer base64 run: the characters that depend on the value alone), in a
//! stream split anywhere ([`super::stream::Replacer`]), and each is
//! replaced by the placeholder's own form at the same place; since a
//! placeholder has its value's length, every form keeps its length and the
//! answer its framing. The forms whose characters depend on the value alone
//! are the ones replaced: a base64 character that mixes the value's first or
//! last bits with its neighbours' is not (at most 4 bits of one byte at
//! each end), as in [`crate::mask`] — except at the end of a padded run
//! (`=` or `==` follows), where the last character's fill bits are zero
//! and it is replaced too.
#![forbid(unsafe_code)]

use base64::Engine;
use zeroize::Zeroizing;

use super::encode::{hex, percent, percent_every};
use super::stream::{Pair, Replacer};
use super::substitute::BoundSecret;

/// The base64 characters of `bytes` placed after `pad` bytes that depend
/// on `bytes` alone.
fn base64_pure(bytes: &[u8], pad: usize, engine: &impl Engine) -> Vec<u8> {
    let mut input = vec![0u8; pad];
    input.extend_from_slice(bytes);
    let encoded = engine.encode(&input).into_bytes();
    let (start_bit, end_bit) = (8 * pad, 8 * (pad + bytes.len()));
    let first = start_bit.div_ceil(6);
    let last = end_bit / 6; // exclusive
    if last <= first {
        return Vec::new();
    }
    encoded[first..last].to_vec()
}

/// The base64 characters of `bytes` placed after `pad` bytes, from the
/// first that depends on `bytes` alone to the end of a padded run (`=`
/// or `==` after it): there the last character's fill bits are zero, so
/// it too is the value's alone. Empty when no padding follows.
fn base64_to_padding(bytes: &[u8], pad: usize, engine: &impl Engine) -> Vec<u8> {
    let mut input = vec![0u8; pad];
    input.extend_from_slice(bytes);
    let encoded = engine.encode(&input).into_bytes();
    if !encoded.ends_with(b"=") {
        return Vec::new();
    }
    encoded[(8 * pad).div_ceil(6)..].to_vec()
}

/// The same-length pairs (value form → placeholder form) of one secret.
pub fn pairs_of(secret: &BoundSecret) -> Vec<Pair> {
    let (v, p) = (&secret.value[..], secret.placeholder.as_bytes());
    let mut forms: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (v.to_vec(), p.to_vec()),
        (hex(v, false), hex(p, false)),
        (hex(v, true), hex(p, true)),
        (percent(v, true), percent(p, true)),
        (percent(v, false), percent(p, false)),
        (percent_every(v, true), percent_every(p, true)),
        (percent_every(v, false), percent_every(p, false)),
    ];
    let standard = base64::engine::general_purpose::STANDARD;
    let url = base64::engine::general_purpose::URL_SAFE;
    for pad in 0..3 {
        forms.push((
            base64_pure(v, pad, &standard),
            base64_pure(p, pad, &standard),
        ));
        forms.push((base64_pure(v, pad, &url), base64_pure(p, pad, &url)));
        for engine in [&standard, &url] {
            forms.push((
                base64_to_padding(v, pad, engine),
                base64_to_padding(p, pad, engine),
            ));
        }
    }
    let mut out: Vec<Pair> = Vec::new();
    for (from, to) in forms {
        if from.is_empty() || from == to || out.iter().any(|p| *p.from == from) {
            continue;
        }
        out.push(Pair {
            from: Zeroizing::new(from),
            to: Zeroizing::new(to),
            name: secret.name.clone(),
        });
    }
    // Longest first: a longer form is replaced before a shorter one inside it.
    out.sort_by_key(|p| std::cmp::Reverse(p.from.len()));
    out
}

/// A scrubber of one answer, for every bound secret of the call (an answer
/// from any host: a value that reached one host may come back from it).
pub fn scrubber(secrets: &[BoundSecret]) -> Replacer {
    Replacer::new(secrets.iter().flat_map(pairs_of).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::Binding;

    fn secret() -> BoundSecret {
        BoundSecret {
            name: "github_token".into(),
            placeholder: "ghp_PLACEHOLDERplaceholder0123456789ab".into(),
            value: Zeroizing::new(b"ghp_REALVALUEsecretvalue9876543210xyzw".to_vec()),
            binding: Binding {
                hosts: vec!["api.github.com".to_string()].try_into().unwrap(),
                body: false,
            },
        }
    }

    fn scrub_split(body: &[u8], at: &[usize]) -> (Vec<u8>, Vec<String>) {
        let s = [secret()];
        let mut r = scrubber(&s);
        let mut out = Vec::new();
        let mut from = 0;
        for &cut in at {
            out.extend_from_slice(&r.push(&body[from..cut]));
            from = cut;
        }
        out.extend_from_slice(&r.push(&body[from..]));
        out.extend_from_slice(&r.finish());
        (out, r.replaced.clone())
    }

    #[test]
    fn every_form_of_the_value_comes_back_as_the_placeholder_at_any_split() {
        let v = secret().value.to_vec();
        let b64 = base64::engine::general_purpose::STANDARD;
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut body = Vec::new();
        body.extend_from_slice(b"raw=");
        body.extend_from_slice(&v);
        body.extend_from_slice(b"&hex=");
        body.extend_from_slice(&hex(&v, false));
        body.extend_from_slice(b"&HEX=");
        body.extend_from_slice(&hex(&v, true));
        body.extend_from_slice(b"&every=");
        body.extend_from_slice(&percent_every(&v, false));
        body.extend_from_slice(b"&EVERY=");
        body.extend_from_slice(&percent_every(&v, true));
        for lead in ["", "x", "xy"] {
            let mut wrapped = lead.as_bytes().to_vec();
            wrapped.extend_from_slice(&v);
            wrapped.extend_from_slice(b"tail");
            body.extend_from_slice(b"&b64=");
            body.extend_from_slice(b64.encode(&wrapped).as_bytes());
            body.extend_from_slice(b"&url=");
            body.extend_from_slice(url.encode(&wrapped).as_bytes());
        }
        for splits in [
            vec![],
            vec![1],
            vec![7, 40],
            (1..body.len()).step_by(13).collect(),
        ] {
            let (out, replaced) = scrub_split(&body, &splits);
            assert_eq!(out.len(), body.len(), "the length is kept");
            assert_eq!(replaced, ["github_token"]);
            let text = String::from_utf8(out.clone()).unwrap();
            assert!(!text.contains("REALVALUE"), "raw: {text}");
            assert!(!text.contains(&String::from_utf8(hex(&v, false)).unwrap()));
            assert!(!text.contains(&String::from_utf8(hex(&v, true)).unwrap()));
            for upper in [false, true] {
                let every = String::from_utf8(percent_every(&v, upper)).unwrap();
                assert!(!text.contains(&every), "every byte %XX: {text}");
            }
            // Each base64 run decodes to nothing of the value but at most
            // its first and last byte.
            for run in text.split('&').filter_map(|kv| kv.split_once('=')) {
                let decoded = match run.0 {
                    "b64" => b64.decode(run.1).unwrap(),
                    "url" => url.decode(run.1).unwrap(),
                    _ => continue,
                };
                assert!(
                    super::super::stream::find(&decoded, &v[1..v.len() - 1]).is_none(),
                    "{} {}",
                    run.0,
                    String::from_utf8_lossy(&decoded)
                );
            }
            assert!(
                text.contains("ghp_PLACEHOLDER"),
                "the placeholder stands there"
            );
        }
    }

    #[test]
    fn a_padded_run_ending_with_the_value_keeps_none_of_its_last_bits() {
        let v = secret().value.to_vec();
        let p = secret().placeholder.into_bytes();
        let b64 = base64::engine::general_purpose::STANDARD;
        for lead in ["", "x", "xy"] {
            let mut wrapped = lead.as_bytes().to_vec();
            wrapped.extend_from_slice(&v);
            let mut body = b"b64=".to_vec();
            body.extend_from_slice(b64.encode(&wrapped).as_bytes());
            let (out, _) = scrub_split(&body, &[9]);
            let run = String::from_utf8(out[4..].to_vec()).unwrap();
            let decoded = b64.decode(&run).unwrap();
            // Everything after the lead's mixed character is the
            // placeholder's, to the last byte.
            assert!(decoded.ends_with(&p[1..]), "{lead:?}: {run}");
        }
    }

    #[test]
    fn an_answer_without_the_value_passes_unchanged() {
        let body =
            b"{\"login\": \"octocat\", \"token\": \"ghp_PLACEHOLDERplaceholder0123456789ab\"}";
        let (out, replaced) = scrub_split(body, &[5, 30]);
        assert_eq!(&out[..], &body[..]);
        assert!(replaced.is_empty());
    }
}
