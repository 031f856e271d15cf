//! Sealing a value to a recipient and unsealing it with an identity set.
//!
//! [`unseal`] is the one unseal path of the crate: the launcher, `reveal`,
//! `import`'s check and the CCTV vector test all go through it. It releases
//! plaintext only after the whole payload has been read and authenticated up
//! to a clean end of file; on any error the partial plaintext is wiped and
//! nothing is returned.

use std::io::{Read, Write};

use age::armor::ArmoredReader;
use secrecy::SecretBox;
use zeroize::Zeroizing;

use super::identity::IdentitySet;

/// The largest plaintext one secret may hold.
pub const MAX_SECRET_BYTES: usize = 1024 * 1024;

/// The largest sealed file that will be read: the plaintext cap plus the age
/// header and per-chunk tags, with room for ASCII armor.
pub const MAX_SEALED_BYTES: usize = MAX_SECRET_BYTES * 2 + 64 * 1024;

/// A plaintext secret, wiped when dropped.
pub type Plaintext = SecretBox<Vec<u8>>;

/// Why a sealed file did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnsealError {
    /// None of the identities matches a recipient stanza of the file.
    #[error("it is sealed to another key (no identity matches)")]
    NoMatch,
    /// The file is passphrase-encrypted, which tono-seal does not use.
    #[error("it is passphrase-encrypted, which tono-seal does not support")]
    Passphrase,
    /// The header is malformed or its MAC does not verify.
    #[error("its age header is invalid: {0}")]
    Header(String),
    /// The payload is truncated, tampered or otherwise fails to decrypt.
    #[error("its payload fails to decrypt: {0}")]
    Payload(String),
    /// The plaintext is over [`MAX_SECRET_BYTES`].
    #[error("its plaintext is over the {MAX_SECRET_BYTES}-byte cap")]
    TooLarge,
}

/// Seals `plaintext` to `recipient` in the binary age format.
pub fn seal(plaintext: &[u8], recipient: &age::x25519::Recipient) -> Result<Vec<u8>, String> {
    let recipients: [&dyn age::Recipient; 1] = [recipient];
    let encryptor =
        age::Encryptor::with_recipients(recipients.into_iter()).map_err(|e| e.to_string())?;
    let mut sealed = Vec::with_capacity(plaintext.len() + 256 + plaintext.len() / 4096);
    let mut writer = encryptor
        .wrap_output(&mut sealed)
        .map_err(|e| e.to_string())?;
    writer.write_all(plaintext).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok(sealed)
}

/// Unseals `sealed` (binary or ASCII-armored age) with any key of `ids`,
/// refusing plaintext over [`MAX_SECRET_BYTES`].
pub fn unseal(sealed: &[u8], ids: &IdentitySet) -> Result<Plaintext, UnsealError> {
    unseal_capped(sealed, ids, MAX_SECRET_BYTES)
}

/// Unseals a constant file with a constant, public, throwaway key: run by a
/// launcher that waits for its plan, so that the first real unseal of a
/// call finds the cryptography's CPU feature checks done and its code paged
/// in, for the price of one key agreement. Holds and leaves nothing of any
/// user.
pub fn warm_up() {
    const KEY: &[u8] = include_bytes!("warm-up.key");
    const SEALED: &[u8] = include_bytes!("warm-up.sealed");
    if let Ok(ids) = IdentitySet::parse(KEY) {
        let _ = unseal(SEALED, &ids);
    }
}

const ARMOR_BEGIN: &[u8] = b"-----BEGIN AGE ENCRYPTED FILE-----";

/// [`unseal`] with an explicit plaintext cap (the store's cap is
/// [`MAX_SECRET_BYTES`]; the conformance vectors need more).
pub fn unseal_capped(
    sealed: &[u8],
    ids: &IdentitySet,
    cap: usize,
) -> Result<Plaintext, UnsealError> {
    // Armor may be surrounded by whitespace (age spec); strip it, then
    // dearmor to binary so that one strict header check covers both forms.
    let trimmed = sealed.trim_ascii();
    let dearmored;
    let binary = if trimmed.starts_with(ARMOR_BEGIN) {
        let mut out = Vec::with_capacity(trimmed.len());
        ArmoredReader::new(trimmed)
            .take(MAX_SEALED_BYTES as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| UnsealError::Header(format!("invalid armor: {e}")))?;
        dearmored = out;
        &dearmored[..]
    } else {
        sealed
    };
    check_stanza_bodies(binary)?;
    let decryptor = age::Decryptor::new(binary).map_err(header_error)?;
    if decryptor.is_scrypt() {
        return Err(UnsealError::Passphrase);
    }
    let identities = ids.keys().iter().map(|k| k as &dyn age::Identity);
    let mut reader = decryptor.decrypt(identities).map_err(header_error)?;
    // Plaintext is never longer than the sealed file, so one allocation made
    // up front holds it: no reallocation leaves an unwiped copy behind.
    let room = binary.len().min(cap);
    let mut buf = Zeroizing::new(vec![0u8; room + 1]);
    let mut len = 0;
    loop {
        if len == buf.len() {
            return Err(UnsealError::TooLarge);
        }
        match reader.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(UnsealError::Payload(e.to_string())),
        }
    }
    if len > cap {
        return Err(UnsealError::TooLarge);
    }
    buf.truncate(len);
    let plain = std::mem::take(&mut *buf);
    Ok(SecretBox::new(Box::new(plain)))
}

/// The age spec says every stanza body ends with a line shorter than 64
/// columns (possibly empty); the `age` crate accepts a stanza with no body
/// or one ending on a full line (CCTV `stanza_missing_body`,
/// `stanza_missing_final_line`). Refuse those here, before decryption.
fn check_stanza_bodies(binary: &[u8]) -> Result<(), UnsealError> {
    let bad = |m: &str| Err(UnsealError::Header(m.to_owned()));
    let mut lines = binary.split(|&b| b == b'\n');
    if lines.next() != Some(b"age-encryption.org/v1") {
        // Let `age` name the problem.
        return Ok(());
    }
    let mut in_body = false;
    for line in lines {
        if line.starts_with(b"---") {
            return if in_body {
                bad("a stanza has no final short body line")
            } else {
                Ok(())
            };
        }
        if line.starts_with(b"-> ") {
            if in_body {
                return bad("a stanza has no final short body line");
            }
            in_body = true;
            continue;
        }
        if !in_body {
            return bad("a body line outside any stanza");
        }
        if line.len() < 64 {
            in_body = false;
        }
    }
    Ok(())
}

fn header_error(e: age::DecryptError) -> UnsealError {
    match e {
        age::DecryptError::NoMatchingKeys => UnsealError::NoMatch,
        age::DecryptError::DecryptionFailed => UnsealError::Payload(e.to_string()),
        other => UnsealError::Header(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    #[test]
    fn the_warm_up_file_opens_with_the_warm_up_key() {
        let ids = IdentitySet::parse(include_bytes!("warm-up.key")).unwrap();
        let value = unseal(include_bytes!("warm-up.sealed"), &ids).unwrap();
        assert_eq!(
            secrecy::ExposeSecret::expose_secret(&value).as_slice(),
            b"tono-seal warm-up value"
        );
    }

    #[test]
    fn seal_then_unseal() {
        let ids = IdentitySet::generate();
        let sealed = seal(b"hunter2", &ids.recipient()).unwrap();
        let plain = unseal(&sealed, &ids).unwrap();
        assert_eq!(plain.expose_secret().as_slice(), b"hunter2");
    }

    #[test]
    fn other_key_is_no_match() {
        let ids = IdentitySet::generate();
        let sealed = seal(b"x", &IdentitySet::generate().recipient()).unwrap();
        assert_eq!(unseal(&sealed, &ids).unwrap_err(), UnsealError::NoMatch);
    }

    #[test]
    fn truncation_and_garbage_fail() {
        let ids = IdentitySet::generate();
        let sealed = seal(&[7u8; 100_000], &ids.recipient()).unwrap();
        for cut in [0, 10, sealed.len() / 2, sealed.len() - 1] {
            assert!(unseal(&sealed[..cut], &ids).is_err(), "cut at {cut}");
        }
        assert!(unseal(b"garbage", &ids).is_err());
        let mut flipped = sealed.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(unseal(&flipped, &ids).is_err());
    }

    #[test]
    fn empty_value_round_trips() {
        let ids = IdentitySet::generate();
        let sealed = seal(b"", &ids.recipient()).unwrap();
        assert!(unseal(&sealed, &ids).unwrap().expose_secret().is_empty());
    }
}
