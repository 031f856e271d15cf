//! Secret names: `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
//!
//! A valid name is a single path component that cannot be `.`, `..`, hidden,
//! empty, or contain `/` or NUL, so it can be joined to the secrets folder
//! without any further check.

use std::fmt;

use super::KeysError;

/// The longest secret name, in bytes.
pub const MAX_SECRET_NAME_LEN: usize = 128;

/// A validated secret name.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretName(String);

impl SecretName {
    /// Validates `name`, or says exactly what is wrong with it.
    pub fn parse(name: &str) -> Result<Self, KeysError> {
        let bad = |reason: &'static str| KeysError::InvalidSecretName {
            name: printable(name),
            reason,
        };
        let bytes = name.as_bytes();
        let Some(&first) = bytes.first() else {
            return Err(bad("it is empty"));
        };
        if bytes.len() > MAX_SECRET_NAME_LEN {
            return Err(bad("it is longer than 128 bytes"));
        }
        if !(first.is_ascii_alphanumeric() || first == b'_') {
            return Err(bad("it must start with a letter, a digit or '_'"));
        }
        if !bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        {
            return Err(bad(
                "it may hold only letters, digits, '_', '.' and '-' (no '/', NUL or spaces)",
            ));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The file name of the sealed secret: `NAME.age`.
    pub fn file_name(&self) -> String {
        format!("{}.age", self.0)
    }
}

impl fmt::Display for SecretName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SecretName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretName({:?})", self.0)
    }
}

/// A bounded, escaped copy of a user-supplied name for error messages.
fn printable(name: &str) -> String {
    let mut out: String = name.chars().take(64).flat_map(char::escape_debug).collect();
    if name.chars().count() > 64 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        for ok in [
            "a",
            "_",
            "0",
            "API_KEY",
            "db.password",
            "x-1",
            &"a".repeat(128),
        ] {
            assert!(SecretName::parse(ok).is_ok(), "{ok:?} should be valid");
        }
    }

    #[test]
    fn refuses_paths_dots_nul_and_length() {
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "../x",
            "a/b",
            "/abs",
            "a\0b",
            "-x",
            "a b",
            "é",
            &"a".repeat(129),
            "a\\b",
            "a:b",
            "ＡＰＩ",
        ] {
            assert!(SecretName::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn error_names_the_problem() {
        let e = SecretName::parse("../x").unwrap_err().to_string();
        assert!(e.contains("start with"), "{e}");
    }
}
