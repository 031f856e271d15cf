//! Opening and parsing an age X25519 identity file.
//!
//! [`IdentitySet::open`] refuses, before reading a byte, a path that is a
//! symlink (`O_NOFOLLOW`), not a regular file, not owned by the opening
//! process's effective uid, group/other accessible, or over
//! [`MAX_IDENTITY_FILE_BYTES`]. The file's text is held in a zeroizing
//! buffer; parsed keys are wiped by `age` when dropped.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::str::FromStr;

use age::x25519;
use secrecy::ExposeSecret;
use zeroize::Zeroizing;

use super::KeysError;

/// The largest identity file that will be read.
pub const MAX_IDENTITY_FILE_BYTES: u64 = 64 * 1024;

/// One or more X25519 identities from one identity file. The last one in the
/// file is the current key (rotation appends the new key at the end).
#[derive(Clone)]
pub struct IdentitySet {
    keys: Vec<x25519::Identity>,
}

impl fmt::Debug for IdentitySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdentitySet({} key(s), redacted)", self.keys.len())
    }
}

/// Opens `path` read-only, refusing to follow a final symlink and never
/// blocking on a FIFO.
pub(crate) fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// Reads at most `cap` bytes into a wiped buffer that never reallocates.
///
/// For a regular file the buffer is sized from `fstat` (so a 200-byte file
/// costs 200 bytes, not the cap); a file that grows while it is read is an
/// error rather than a reallocation. Pipes get a buffer of the cap.
pub(crate) fn read_bounded(file: &mut File, cap: usize) -> io::Result<Zeroizing<Vec<u8>>> {
    let meta = file.metadata()?;
    let sized = meta.is_file();
    let room = if sized {
        (meta.len().min(cap as u64 + 1)) as usize
    } else {
        cap
    };
    // One extra byte tells "exactly this much" from "more".
    let mut buf = Zeroizing::new(vec![0u8; room + 1]);
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if len > cap {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            "file is over its size cap",
        ));
    }
    if len == buf.len() {
        return Err(io::Error::other("the file grew while it was read"));
    }
    buf.truncate(len);
    Ok(buf)
}

impl IdentitySet {
    /// Opens and parses the identity file at `path` with every safety check.
    pub fn open(path: &Path) -> Result<Self, KeysError> {
        let shown = path.display().to_string();
        let insecure = |reason: String| KeysError::IdentityInsecure {
            path: shown.clone(),
            reason,
        };
        let mut file = match open_nofollow(path) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(insecure("it is a symlink".into()))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(KeysError::IdentityMissing { path: shown })
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                // Say why, when the reason is visible: someone else owns it.
                let euid = nix::unistd::geteuid().as_raw();
                return Err(match std::fs::symlink_metadata(path) {
                    Ok(meta) if meta.uid() != euid => insecure(format!(
                        "it is owned by uid {}, not by uid {euid} that opens it",
                        meta.uid()
                    )),
                    _ => KeysError::io("open identity", path, e),
                });
            }
            Err(e) => return Err(KeysError::io("open identity", path, e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| KeysError::io("stat identity", path, e))?;
        if !meta.file_type().is_file() {
            return Err(insecure("it is not a regular file".into()));
        }
        let euid = nix::unistd::geteuid().as_raw();
        if meta.uid() != euid {
            return Err(insecure(format!(
                "it is owned by uid {}, not by uid {euid} that opens it",
                meta.uid()
            )));
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(insecure(format!(
                "its mode is {mode:04o}; group and others must have no access (chmod 0600)"
            )));
        }
        if meta.size() > MAX_IDENTITY_FILE_BYTES {
            return Err(insecure(format!(
                "it is {} bytes, over the {MAX_IDENTITY_FILE_BYTES}-byte cap",
                meta.size()
            )));
        }
        let text = read_bounded(&mut file, MAX_IDENTITY_FILE_BYTES as usize)
            .map_err(|e| KeysError::io("read identity", path, e))?;
        Self::parse(&text).map_err(|reason| KeysError::IdentityMalformed {
            path: shown,
            reason,
        })
    }

    /// Parses identity-file text: `#` comments, blank lines, and one
    /// `AGE-SECRET-KEY-1…` line per identity. Any other line is an error.
    pub fn parse(text: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(text).map_err(|_| "it is not UTF-8 text".to_string())?;
        let mut keys = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line.starts_with("AGE-PLUGIN-") {
                return Err(format!(
                    "line {}: plugin identities are not supported",
                    index + 1
                ));
            }
            if line.starts_with("AGE-SECRET-KEY-PQ-") {
                return Err(format!(
                    "line {}: post-quantum hybrid identities are not supported",
                    index + 1
                ));
            }
            let key = x25519::Identity::from_str(line)
                .map_err(|e| format!("line {}: not an X25519 identity ({e})", index + 1))?;
            keys.push(key);
        }
        if keys.is_empty() {
            return Err("it holds no identity".into());
        }
        Ok(Self { keys })
    }

    /// A set holding one freshly generated identity.
    pub fn generate() -> Self {
        Self {
            keys: vec![x25519::Identity::generate()],
        }
    }

    /// The current key: the last one in the file.
    pub fn current(&self) -> &x25519::Identity {
        // `parse` and `generate` never build an empty set.
        &self.keys[self.keys.len() - 1]
    }

    /// The current key's recipient (`age1…`).
    pub fn recipient(&self) -> x25519::Recipient {
        self.current().to_public()
    }

    /// Every key, for decryption.
    pub fn keys(&self) -> &[x25519::Identity] {
        &self.keys
    }

    /// This set with `other`'s keys appended (the new current key last).
    pub fn with_appended(&self, other: &IdentitySet) -> Self {
        let mut keys = self.keys.clone();
        keys.extend(other.keys.iter().cloned());
        Self { keys }
    }

    /// This set reduced to its current key.
    pub fn only_current(&self) -> Self {
        Self {
            keys: vec![self.current().clone()],
        }
    }

    /// The identity file's text, in a wiped buffer, in the format of the age
    /// tools (a comment with the public key above each secret key line).
    pub fn to_file_text(&self) -> Zeroizing<String> {
        let mut out = Zeroizing::new(String::with_capacity(self.keys.len() * 160 + 64));
        out.push_str("# tono-seal identity: the last key is the current one\n");
        for key in &self.keys {
            out.push_str("# public key: ");
            out.push_str(&key.to_public().to_string());
            out.push('\n');
            out.push_str(key.to_string().expose_secret());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_several_keys() {
        let set = IdentitySet::generate().with_appended(&IdentitySet::generate());
        let text = set.to_file_text();
        let back = IdentitySet::parse(text.as_bytes()).unwrap();
        assert_eq!(back.keys().len(), 2);
        assert_eq!(back.recipient().to_string(), set.recipient().to_string());
    }

    #[test]
    fn refuses_garbage_empty_and_truncated() {
        assert!(IdentitySet::parse(b"").is_err());
        assert!(IdentitySet::parse(b"# only a comment\n").is_err());
        assert!(IdentitySet::parse(b"hello world\n").is_err());
        assert!(IdentitySet::parse(&[0xff, 0xfe]).is_err());
        let good = IdentitySet::generate().to_file_text();
        let truncated = &good.as_bytes()[..good.len() - 10];
        assert!(IdentitySet::parse(truncated).is_err());
    }

    #[test]
    fn debug_never_shows_key_material() {
        let set = IdentitySet::generate();
        let shown = format!("{set:?}");
        assert!(!shown.contains("AGE-SECRET-KEY"), "{shown}");
    }
}
