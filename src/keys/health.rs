//! The health of a key store, the way `systemd-creds list` marks each
//! credential: the identity and every sealed secret are `ok`, `weak` or
//! `unreadable`, each with the reasons, never with a value.
//!
//! Guarantees: run as the store's owner (through the launcher), like every
//! other operation on the store; nothing is followed (`lstat`, and the
//! store's own no-follow opens); a secret is `unreadable` when the current
//! identity cannot open it, checked by unsealing it into a buffer that is
//! wiped at once; `weak` names what an attacker could use: group or other
//! bits, an owner other than the user, a symlink or other non-file, a size
//! over the cap, or an identity file that holds more than one key (a
//! rotation that did not finish); a weak identity is refused for use, so
//! then every secret is `unreadable`. Nothing is changed.
#![forbid(unsafe_code)]

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;

use serde::Serialize;

use super::identity::{IdentitySet, MAX_IDENTITY_FILE_BYTES};
use super::seal::MAX_SEALED_BYTES;
use super::store::KeyStore;
use super::KeysError;

/// How an entry of the store stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Safe and opens with the current identity.
    Ok,
    /// Opens, but something about the file lets others near it.
    Weak,
    /// The current identity cannot open it (or it cannot be read).
    Unreadable,
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            State::Ok => "ok",
            State::Weak => "weak",
            State::Unreadable => "unreadable",
        })
    }
}

/// One entry: the identity, or a secret by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntryHealth {
    /// `identity`, or the secret's name.
    pub name: String,
    /// How it stands.
    pub state: State,
    /// Why it is not `ok` (empty when it is).
    pub reasons: Vec<String>,
    /// Size of the file on disk.
    pub bytes: u64,
    /// Last change of the file, seconds since the epoch.
    pub modified_unix: i64,
}

/// A store's health: its identity and every secret, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreHealth {
    /// The identity file.
    pub identity: EntryHealth,
    /// Every sealed secret.
    pub secrets: Vec<EntryHealth>,
}

impl StoreHealth {
    /// The worst state in the store.
    pub fn worst(&self) -> State {
        self.secrets
            .iter()
            .map(|s| s.state)
            .chain([self.identity.state])
            .max()
            .unwrap_or(State::Ok)
    }
}

/// What about a file's metadata makes it weak, by `lstat`.
fn weaknesses(meta: &fs::Metadata, cap: u64) -> Vec<String> {
    let mut out = Vec::new();
    if meta.file_type().is_symlink() {
        out.push("a symlink".to_owned());
    } else if !meta.is_file() {
        out.push("not a regular file".to_owned());
    }
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != euid {
        out.push(format!("owned by uid {}, not the user", meta.uid()));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 && !meta.file_type().is_symlink() {
        out.push(format!("mode {mode:04o}: group or others have access"));
    }
    if meta.len() > cap {
        out.push(format!("{} bytes, over the {cap}-byte cap", meta.len()));
    }
    out
}

fn entry(
    name: &str,
    meta: &fs::Metadata,
    mut reasons: Vec<String>,
    opened: Result<(), String>,
) -> EntryHealth {
    let state = match &opened {
        Err(_) => State::Unreadable,
        Ok(()) if reasons.is_empty() => State::Ok,
        Ok(()) => State::Weak,
    };
    if let Err(why) = opened {
        reasons.push(why);
    }
    EntryHealth {
        name: name.to_owned(),
        state,
        reasons,
        bytes: meta.len(),
        modified_unix: meta.mtime(),
    }
}

impl KeyStore {
    /// The health of the identity and of every secret. A store without an
    /// identity is an error (`IdentityMissing`), as for any operation.
    pub fn health(&self) -> Result<StoreHealth, KeysError> {
        let path = self.identity_path();
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(KeysError::IdentityMissing {
                    path: path.display().to_string(),
                })
            }
            Err(e) => return Err(KeysError::io("stat identity", &path, e)),
        };
        let mut reasons = weaknesses(&meta, MAX_IDENTITY_FILE_BYTES);
        // The store's own checked open: it refuses what is weak, so a weak
        // identity is opened only to say whether its keys would work.
        let ids = IdentitySet::open(&path);
        let opened = match &ids {
            Ok(ids) => {
                if ids.keys().len() > 1 {
                    reasons.push(format!(
                        "{} keys, of which only the current one should remain (a rotation did not finish: run rotate)",
                        ids.keys().len()
                    ));
                }
                Ok(())
            }
            // Weak, and so refused: the secrets say they cannot be opened.
            Err(KeysError::IdentityInsecure { .. }) if !reasons.is_empty() => {
                reasons.push("refused for use until that is fixed".to_owned());
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        };
        let identity = entry("identity", &meta, reasons, opened);
        let mut secrets = Vec::new();
        for (name, meta) in self.sealed_entries()?.unwrap_or_default() {
            let reasons = weaknesses(&meta, MAX_SEALED_BYTES as u64);
            let opened = match &ids {
                // The plaintext is wiped as it is dropped, here.
                Ok(ids) => self
                    .unseal_with(&name, ids)
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Err(_) => Err("the identity cannot be used".to_owned()),
            };
            secrets.push(entry(name.as_str(), &meta, reasons, opened));
        }
        Ok(StoreHealth { identity, secrets })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::SecretName;
    use std::os::unix::fs::PermissionsExt;

    fn store() -> (tempfile::TempDir, KeyStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::at(dir.path().join(".tono"));
        store.keygen(false).unwrap();
        (dir, store)
    }

    fn name(n: &str) -> SecretName {
        SecretName::parse(n).unwrap()
    }

    #[test]
    fn a_sound_store_is_ok_throughout() {
        let (_dir, store) = store();
        store.seal(&name("a"), b"value-a").unwrap();
        let health = store.health().unwrap();
        assert_eq!(health.identity.state, State::Ok, "{health:?}");
        assert_eq!(health.secrets.len(), 1);
        assert_eq!(health.secrets[0].state, State::Ok);
        assert!(health.secrets[0].reasons.is_empty());
        assert_eq!(health.worst(), State::Ok);
        assert!(!serde_json::to_string(&health).unwrap().contains("value-a"));
    }

    #[test]
    fn open_modes_a_symlink_and_a_second_key_are_weak_and_a_foreign_seal_unreadable() {
        let (dir, store) = store();
        store.seal(&name("open"), b"value").unwrap();
        store.seal(&name("fine"), b"value").unwrap();
        let secrets = store.root().join("secrets");
        fs::set_permissions(secrets.join("open.age"), fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink(secrets.join("fine.age"), secrets.join("linked.age")).unwrap();
        // Sealed to someone else's key: this identity cannot open it.
        let other = KeyStore::at(dir.path().join("other"));
        other.keygen(false).unwrap();
        other.seal(&name("foreign"), b"value").unwrap();
        fs::copy(
            other.root().join("secrets/foreign.age"),
            secrets.join("foreign.age"),
        )
        .unwrap();
        let by_name =
            |h: &StoreHealth, n: &str| h.secrets.iter().find(|s| s.name == n).cloned().unwrap();
        let health = store.health().unwrap();
        assert_eq!(by_name(&health, "fine").state, State::Ok);
        let open = by_name(&health, "open");
        assert_eq!(open.state, State::Weak);
        assert_eq!(open.reasons, ["mode 0644: group or others have access"]);
        let linked = by_name(&health, "linked");
        assert_eq!(linked.state, State::Unreadable, "{linked:?}");
        assert_eq!(linked.reasons[0], "a symlink");
        let foreign = by_name(&health, "foreign");
        assert_eq!(foreign.state, State::Unreadable, "{foreign:?}");
        assert_eq!(health.worst(), State::Unreadable);
        // An identity with two keys (an unfinished rotation) is weak; an
        // identity others can read is weak and refused, so nothing opens.
        let id = store.identity_path();
        let two = format!(
            "{}{}",
            fs::read_to_string(&id).unwrap(),
            fs::read_to_string(other.identity_path()).unwrap()
        );
        fs::write(&id, two).unwrap();
        let health = store.health().unwrap();
        assert_eq!(health.identity.state, State::Weak, "{health:?}");
        assert!(
            health.identity.reasons[0].starts_with("2 keys"),
            "{health:?}"
        );
        assert_eq!(
            by_name(&health, "foreign").state,
            State::Ok,
            "the second key opens it"
        );
        fs::set_permissions(&id, fs::Permissions::from_mode(0o640)).unwrap();
        let health = store.health().unwrap();
        assert_eq!(health.identity.state, State::Weak, "{health:?}");
        assert_eq!(
            health.identity.reasons,
            [
                "mode 0640: group or others have access",
                "refused for use until that is fixed"
            ]
        );
        assert!(health.secrets.iter().all(|s| s.state == State::Unreadable));
    }

    #[test]
    fn a_store_without_an_identity_is_an_error_not_an_empty_list() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::at(dir.path().join(".tono"));
        assert!(matches!(
            store.health(),
            Err(KeysError::IdentityMissing { .. })
        ));
    }
}
