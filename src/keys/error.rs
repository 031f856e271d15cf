//! Errors of the key store. Every variant is documented, carries no secret
//! value, and has a stable machine-readable [`KeysError::code`].

use std::io;

/// What went wrong with a key store operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeysError {
    /// A secret name broke the naming rules.
    #[error("invalid secret name {name:?}: {reason}")]
    InvalidSecretName {
        /// The offending name, escaped and bounded.
        name: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// The user has no key store (`~/.tono/identity` does not exist).
    #[error("no identity at {path}: run `tono-seal keygen` for this user first")]
    IdentityMissing {
        /// Where the identity was looked for.
        path: String,
    },
    /// `keygen` found an identity and was not told `--force`.
    #[error("an identity already exists at {path}; use --force to replace it (the old key is kept beside it), or `rotate` to re-seal secrets to a new key")]
    IdentityExists {
        /// The existing identity.
        path: String,
    },
    /// The identity file is unsafe to use; it was not read.
    #[error("identity {path} is insecure: {reason}")]
    IdentityInsecure {
        /// The identity file.
        path: String,
        /// Which check failed (symlink, owner, mode, type, size).
        reason: String,
    },
    /// The identity file holds no usable X25519 identity.
    #[error("identity {path} is malformed: {reason}")]
    IdentityMalformed {
        /// The identity file.
        path: String,
        /// What was wrong (never the key material itself).
        reason: String,
    },
    /// The named secret does not exist.
    #[error("secret {name:?} does not exist")]
    SecretMissing {
        /// The secret's name.
        name: String,
    },
    /// The sealed file exists but cannot be opened (garbage, truncated,
    /// tampered, sealed to another key, a symlink, too large).
    #[error("secret {name:?} cannot be opened: {reason}")]
    SecretCorrupt {
        /// The secret's name.
        name: String,
        /// Why it failed (never any plaintext).
        reason: String,
    },
    /// The value given to `seal` is empty and `--allow-empty` was not given.
    #[error("refusing to seal an empty value (stdin was empty or closed); pass --allow-empty to seal one")]
    ValueEmpty,
    /// The value given to `seal` is over the cap.
    #[error("value is larger than the {cap}-byte cap for one secret")]
    ValueTooLarge {
        /// The cap in bytes.
        cap: usize,
    },
    /// A sealed file given to `import` does not open with this user's key.
    #[error("the age file on stdin does not open with this user's identity: {reason}")]
    ImportRejected {
        /// Why (no matching key, malformed header, bad payload).
        reason: String,
    },
    /// A file or folder operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On which path.
        path: String,
        /// The operating system's answer.
        #[source]
        source: io::Error,
    },
    /// Encryption failed inside `age`.
    #[error("sealing failed: {0}")]
    Seal(String),
}

impl KeysError {
    /// A stable, machine-readable code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidSecretName { .. } => "invalid_secret_name",
            Self::IdentityMissing { .. } => "identity_missing",
            Self::IdentityExists { .. } => "identity_exists",
            Self::IdentityInsecure { .. } => "identity_insecure",
            Self::IdentityMalformed { .. } => "identity_malformed",
            Self::SecretMissing { .. } => "secret_missing",
            Self::SecretCorrupt { .. } => "secret_corrupt",
            Self::ValueEmpty => "value_empty",
            Self::ValueTooLarge { .. } => "value_too_large",
            Self::ImportRejected { .. } => "import_rejected",
            Self::Io { .. } => "io",
            Self::Seal(_) => "seal_failed",
        }
    }

    /// Builds an [`KeysError::Io`].
    pub(crate) fn io(op: &'static str, path: &std::path::Path, source: io::Error) -> Self {
        Self::Io {
            op,
            path: path.display().to_string(),
            source,
        }
    }
}
