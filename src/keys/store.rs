//! The on-disk key store in one home, operated on by its owner.
//!
//! Every method acts with the calling process's own credentials: the CLI
//! reaches it only through `tono-launch`, after the drop to the home's user.
//! Layout and modes are those of the [module docs](super).
//!
//! Writers (`keygen`, `seal`, `import`, `remove`, `rotate`) take an
//! exclusive `flock` on `~/.tono` (opened `O_NOFOLLOW`) for their whole
//! run, so a `seal` that read the old key cannot land after a `rotate`
//! dropped it; readers need none (every write is an atomic rename). A
//! replaced identity is kept under a name no other keeps
//! (`RENAME_NOREPLACE`), so two `keygen --force` never overwrite a backup.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use secrecy::ExposeSecret;
use serde::Serialize;

use super::atomic::{self, write_atomic, TEMP_PREFIX};
use super::identity::{open_nofollow, read_bounded, IdentitySet};
use super::name::SecretName;
use super::seal::{self, Plaintext, MAX_SEALED_BYTES, MAX_SECRET_BYTES};
use super::KeysError;

/// File name of the identity inside `~/.tono`.
pub const IDENTITY_FILE: &str = "identity";
/// File name of the recipient inside `~/.tono`.
pub const RECIPIENT_FILE: &str = "recipient";
/// Folder of sealed secrets inside `~/.tono`.
pub const SECRETS_DIR: &str = "secrets";

/// A key store rooted at `HOME/.tono`.
#[derive(Debug, Clone)]
pub struct KeyStore {
    root: PathBuf,
}

/// One sealed secret as `list` shows it: never its value.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct SecretInfo {
    /// The secret's name.
    pub name: String,
    /// Size of the sealed file in bytes.
    pub sealed_bytes: u64,
    /// Modification time, seconds since the Unix epoch.
    pub modified_unix: i64,
}

/// A point inside `rotate`, for fault-injection tests: the hook is called
/// after each durable step and may stop the rotation there, as a crash would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotateStep {
    /// The new key was appended beside the old one(s).
    NewKeyAdded,
    /// The recipient file names the new key.
    RecipientSwitched,
    /// Secret number `n` (0-based) was re-sealed to the new key.
    Resealed(usize),
    /// The old key(s) were dropped: rotation is complete.
    OldKeyDropped,
}

/// What `keygen` did.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct KeygenReport {
    /// The new recipient.
    pub recipient: String,
    /// Where a replaced identity was kept, with `--force`.
    pub replaced_identity_kept_at: Option<String>,
    /// Secrets still sealed to the replaced key (they open only with the
    /// kept file; `rotate` before `keygen --force` avoids this).
    #[serde(default)]
    pub secrets_sealed_to_replaced_key: usize,
}

/// What `rotate` did.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RotateReport {
    /// The new recipient.
    pub recipient: String,
    /// How many secrets were re-sealed.
    pub resealed: usize,
}

impl KeyStore {
    /// The store of the home at `home`.
    pub fn in_home(home: &Path) -> Self {
        Self {
            root: home.join(".tono"),
        }
    }

    /// The store in the folder `root`: how the launcher reaches a store that
    /// a call's view hides, through its descriptor (`/proc/self/fd/N`).
    pub fn at(root: PathBuf) -> Self {
        Self { root }
    }

    /// `~/.tono`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `~/.tono/identity`.
    pub fn identity_path(&self) -> PathBuf {
        self.root.join(IDENTITY_FILE)
    }

    fn secrets_dir(&self) -> PathBuf {
        self.root.join(SECRETS_DIR)
    }

    fn secret_path(&self, name: &SecretName) -> PathBuf {
        self.secrets_dir().join(name.file_name())
    }

    /// Opens the identity with every check of [`IdentitySet::open`].
    pub fn identities(&self) -> Result<IdentitySet, KeysError> {
        IdentitySet::open(&self.identity_path())
    }

    /// Creates `~/.tono` and `~/.tono/secrets` (0700) if missing, and makes
    /// sure neither is a symlink or open to others.
    /// Takes the store's writer lock, held until the returned value is
    /// dropped; `None` when there is no store yet (then nothing to race).
    fn lock(&self) -> Result<Option<nix::fcntl::Flock<fs::File>>, KeysError> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = match fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.root)
        {
            Ok(dir) => dir,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(KeysError::io("open the store to lock it", &self.root, e)),
        };
        nix::fcntl::Flock::lock(dir, nix::fcntl::FlockArg::LockExclusive)
            .map(Some)
            .map_err(|(_, e)| KeysError::io("lock the store", &self.root, io::Error::from(e)))
    }

    fn ensure_dirs(&self) -> Result<(), KeysError> {
        for dir in [self.root.clone(), self.secrets_dir()] {
            match fs::symlink_metadata(&dir) {
                Ok(meta) if meta.file_type().is_symlink() || !meta.is_dir() => {
                    return Err(KeysError::io(
                        "use folder",
                        &dir,
                        io::Error::other("it is a symlink or not a folder"),
                    ))
                }
                Ok(meta) => {
                    if meta.mode() & 0o7777 != 0o700 {
                        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                            .map_err(|e| KeysError::io("chmod 0700", &dir, e))?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::DirBuilder::new()
                        .mode(0o700)
                        .create(&dir)
                        .map_err(|e| KeysError::io("create folder", &dir, e))?;
                    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                        .map_err(|e| KeysError::io("chmod 0700", &dir, e))?;
                }
                Err(e) => return Err(KeysError::io("stat folder", &dir, e)),
            }
        }
        Ok(())
    }

    fn write_identity(&self, ids: &IdentitySet) -> Result<(), KeysError> {
        let text = ids.to_file_text();
        write_atomic(&self.root, IDENTITY_FILE, text.as_bytes(), 0o600)
            .map_err(|e| KeysError::io("write identity", &self.identity_path(), e))
    }

    fn write_recipient(&self, ids: &IdentitySet) -> Result<(), KeysError> {
        let line = format!("{}\n", ids.recipient());
        write_atomic(&self.root, RECIPIENT_FILE, line.as_bytes(), 0o644)
            .map_err(|e| KeysError::io("write recipient", &self.root.join(RECIPIENT_FILE), e))
    }

    /// Creates the store with a new identity. An existing identity is an
    /// error unless `force`, in which case it is kept beside the new one as
    /// `identity.replaced-<unix time>` so that nothing sealed to it is lost.
    pub fn keygen(&self, force: bool) -> Result<KeygenReport, KeysError> {
        self.ensure_dirs()?;
        let _writer = self.lock()?;
        let path = self.identity_path();
        let mut kept = None;
        match fs::symlink_metadata(&path) {
            Ok(_) if !force => {
                return Err(KeysError::IdentityExists {
                    path: path.display().to_string(),
                })
            }
            Ok(_) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                kept = Some(self.keep_replaced(&path, now)?.display().to_string());
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(KeysError::io("stat identity", &path, e)),
        }
        let orphaned = if kept.is_some() {
            self.list().map(|l| l.len()).unwrap_or(0)
        } else {
            0
        };
        let ids = IdentitySet::generate();
        self.write_identity(&ids)?;
        self.write_recipient(&ids)?;
        Ok(KeygenReport {
            recipient: ids.recipient().to_string(),
            replaced_identity_kept_at: kept,
            secrets_sealed_to_replaced_key: orphaned,
        })
    }

    /// Renames the identity at `path` to `identity.replaced-<now>` (then
    /// `-1`, `-2`, … if taken), never over an existing file.
    fn keep_replaced(&self, path: &Path, now: u64) -> Result<PathBuf, KeysError> {
        for n in 0..1000u32 {
            let name = match n {
                0 => format!("{IDENTITY_FILE}.replaced-{now}"),
                n => format!("{IDENTITY_FILE}.replaced-{now}-{n}"),
            };
            let backup = self.root.join(name);
            match nix::fcntl::renameat2(
                None,
                path,
                None,
                &backup,
                nix::fcntl::RenameFlags::RENAME_NOREPLACE,
            ) {
                Ok(()) => return Ok(backup),
                Err(nix::errno::Errno::EEXIST) => continue,
                Err(e) => return Err(KeysError::io("keep old identity", path, io::Error::from(e))),
            }
        }
        Err(KeysError::io(
            "keep old identity",
            path,
            io::Error::other("a thousand kept identities of this second already exist"),
        ))
    }

    /// The current recipient, derived from the identity itself (so a
    /// tampered `recipient` file cannot redirect what is sealed).
    pub fn recipient(&self) -> Result<String, KeysError> {
        Ok(self.identities()?.recipient().to_string())
    }

    /// Seals `value` as `name`, replacing any previous value atomically.
    pub fn seal(&self, name: &SecretName, value: &[u8]) -> Result<(), KeysError> {
        if value.len() > MAX_SECRET_BYTES {
            return Err(KeysError::ValueTooLarge {
                cap: MAX_SECRET_BYTES,
            });
        }
        let _writer = self.lock()?;
        let ids = self.identities()?;
        self.ensure_dirs()?;
        let sealed = seal::seal(value, &ids.recipient()).map_err(KeysError::Seal)?;
        self.install(name, &sealed)
    }

    /// Installs an age file made elsewhere, after checking that it opens with
    /// this store's identity. The plaintext of the check is wiped at once.
    pub fn import(&self, name: &SecretName, sealed: &[u8]) -> Result<(), KeysError> {
        if sealed.len() > MAX_SEALED_BYTES {
            return Err(KeysError::ImportRejected {
                reason: format!("it is over the {MAX_SEALED_BYTES}-byte cap"),
            });
        }
        let _writer = self.lock()?;
        let ids = self.identities()?;
        drop(
            seal::unseal(sealed, &ids).map_err(|e| KeysError::ImportRejected {
                reason: e.to_string(),
            })?,
        );
        self.ensure_dirs()?;
        self.install(name, sealed)
    }

    fn install(&self, name: &SecretName, sealed: &[u8]) -> Result<(), KeysError> {
        write_atomic(&self.secrets_dir(), &name.file_name(), sealed, 0o600)
            .map_err(|e| KeysError::io("write secret", &self.secret_path(name), e))
    }

    /// Reads a sealed file: refuses a symlink, a non-regular file or one
    /// over the cap.
    fn read_sealed(&self, name: &SecretName) -> Result<zeroize::Zeroizing<Vec<u8>>, KeysError> {
        let path = self.secret_path(name);
        let corrupt = |reason: String| KeysError::SecretCorrupt {
            name: name.to_string(),
            reason,
        };
        let mut file = match open_nofollow(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(KeysError::SecretMissing {
                    name: name.to_string(),
                })
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(corrupt("the sealed file is a symlink".into()))
            }
            Err(e) => return Err(KeysError::io("open secret", &path, e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| KeysError::io("stat secret", &path, e))?;
        if !meta.is_file() {
            return Err(corrupt("the sealed file is not a regular file".into()));
        }
        read_bounded(&mut file, MAX_SEALED_BYTES).map_err(|e| match e.kind() {
            io::ErrorKind::FileTooLarge => {
                corrupt(format!("the sealed file is over {MAX_SEALED_BYTES} bytes"))
            }
            _ => KeysError::io("read secret", &path, e),
        })
    }

    /// Unseals `name` with `ids` (opened once by the caller for many
    /// secrets).
    pub fn unseal_with(
        &self,
        name: &SecretName,
        ids: &IdentitySet,
    ) -> Result<Plaintext, KeysError> {
        let sealed = self.read_sealed(name)?;
        seal::unseal(&sealed, ids).map_err(|e| KeysError::SecretCorrupt {
            name: name.to_string(),
            reason: e.to_string(),
        })
    }

    /// Unseals `name` with this store's identity.
    pub fn unseal(&self, name: &SecretName) -> Result<Plaintext, KeysError> {
        let ids = self.identities()?;
        self.unseal_with(name, &ids)
    }

    /// Every sealed secret's name with its `lstat`, sorted by name (no
    /// temporary file, nothing that is not `NAME.age` with a valid name);
    /// `None` when there is no secrets folder yet.
    pub(super) fn sealed_entries(
        &self,
    ) -> Result<Option<Vec<(SecretName, fs::Metadata)>>, KeysError> {
        let dir = self.secrets_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(KeysError::io("list secrets", &dir, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| KeysError::io("list secrets", &dir, e))?;
            let file_name = entry.file_name();
            let Some(stem) = file_name
                .to_str()
                .filter(|n| !n.starts_with(TEMP_PREFIX))
                .and_then(|n| n.strip_suffix(".age"))
            else {
                continue;
            };
            let Ok(name) = SecretName::parse(stem) else {
                continue;
            };
            let meta = entry
                .metadata()
                .map_err(|e| KeysError::io("stat secret", &entry.path(), e))?;
            out.push((name, meta));
        }
        out.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        Ok(Some(out))
    }

    /// The names of the sealed secrets, sorted; never their values.
    pub fn list(&self) -> Result<Vec<SecretInfo>, KeysError> {
        let Some(entries) = self.sealed_entries()? else {
            // A store with an identity but no secret yet is empty.
            self.identities()?;
            return Ok(Vec::new());
        };
        Ok(entries
            .into_iter()
            .map(|(name, meta)| SecretInfo {
                name: name.as_str().to_owned(),
                sealed_bytes: meta.len(),
                modified_unix: meta.mtime(),
            })
            .collect())
    }

    /// Removes `name`.
    pub fn remove(&self, name: &SecretName) -> Result<(), KeysError> {
        let _writer = self.lock()?;
        let path = self.secret_path(name);
        match fs::remove_file(&path) {
            Ok(()) => atomic::sync_dir(&self.secrets_dir())
                .map_err(|e| KeysError::io("sync secrets folder", &self.secrets_dir(), e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(KeysError::SecretMissing {
                name: name.to_string(),
            }),
            Err(e) => Err(KeysError::io("remove secret", &path, e)),
        }
    }

    /// Replaces the identity with a new one and re-seals every secret to it.
    ///
    /// Safe to kill at any point: the new key is added beside the old one
    /// first, the recipient switched, each secret re-sealed atomically, every
    /// secret checked to open with the new key alone, and only then the old
    /// key dropped. Every secret opens with the identity file at every
    /// instant. A rotate that was killed is finished by running it again.
    pub fn rotate(&self) -> Result<RotateReport, KeysError> {
        self.rotate_with_hook(&mut |_| true)
    }

    /// [`KeyStore::rotate`] with a hook called after each durable step; the
    /// hook returning `false` stops the rotation there (a simulated crash).
    pub fn rotate_with_hook(
        &self,
        hook: &mut dyn FnMut(RotateStep) -> bool,
    ) -> Result<RotateReport, KeysError> {
        let _writer = self.lock()?;
        let old = self.identities()?;
        // Refuse before changing anything if a secret does not open now:
        // re-sealing would fail half-way, and dropping keys would not help.
        let mut unopenable = Vec::new();
        for info in self.list()? {
            let name = SecretName::parse(&info.name)?;
            match self.unseal_with(&name, &old) {
                Ok(plain) => drop(plain),
                Err(e) => unopenable.push(format!("{} ({e})", info.name)),
            }
        }
        if !unopenable.is_empty() {
            return Err(KeysError::SecretCorrupt {
                name: unopenable.join(", "),
                reason: "these secrets do not open with the current identity, so nothing was rotated; remove or re-seal them first".into(),
            });
        }
        let fresh = IdentitySet::generate();
        let recipient = fresh.recipient();
        let report = |resealed| RotateReport {
            recipient: recipient.to_string(),
            resealed,
        };
        let both = old.with_appended(&fresh);
        self.write_identity(&both)?;
        if !hook(RotateStep::NewKeyAdded) {
            return Ok(report(0));
        }
        self.write_recipient(&both)?;
        if !hook(RotateStep::RecipientSwitched) {
            return Ok(report(0));
        }
        let secrets = self.list()?;
        for (index, info) in secrets.iter().enumerate() {
            let name = SecretName::parse(&info.name)?;
            let plain = self.unseal_with(&name, &both)?;
            let sealed = seal::seal(plain.expose_secret(), &recipient).map_err(KeysError::Seal)?;
            drop(plain);
            self.install(&name, &sealed)?;
            if !hook(RotateStep::Resealed(index)) {
                return Ok(report(index + 1));
            }
        }
        // Prove the new key alone opens everything before the old one goes;
        // if not (a writer that ignored the lock), stop here with both keys
        // kept: nothing is lost, and running rotate again finishes.
        let only_new = both.only_current();
        for info in &secrets {
            drop(self.unseal_with(&SecretName::parse(&info.name)?, &only_new)?);
        }
        self.write_identity(&only_new)?;
        hook(RotateStep::OldKeyDropped);
        Ok(report(secrets.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, KeyStore) {
        let home = tempfile::tempdir().unwrap();
        let store = KeyStore::in_home(home.path());
        store.keygen(false).unwrap();
        (home, store)
    }

    fn name(s: &str) -> SecretName {
        SecretName::parse(s).unwrap()
    }

    #[test]
    fn keygen_refuses_overwrite_without_force_and_keeps_old_with_force() {
        let (_home, store) = store();
        assert!(matches!(
            store.keygen(false),
            Err(KeysError::IdentityExists { .. })
        ));
        let report = store.keygen(true).unwrap();
        let kept = report.replaced_identity_kept_at.unwrap();
        assert!(Path::new(&kept).exists());
    }

    #[test]
    fn seal_list_unseal_remove() {
        let (_home, store) = store();
        store.seal(&name("b"), b"two").unwrap();
        store.seal(&name("a"), b"one").unwrap();
        let names: Vec<_> = store.list().unwrap().into_iter().map(|i| i.name).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            store.unseal(&name("a")).unwrap().expose_secret().as_slice(),
            b"one"
        );
        store.remove(&name("a")).unwrap();
        assert!(matches!(
            store.unseal(&name("a")),
            Err(KeysError::SecretMissing { .. })
        ));
        assert!(matches!(
            store.remove(&name("a")),
            Err(KeysError::SecretMissing { .. })
        ));
    }

    #[test]
    fn oversize_value_is_refused_and_old_value_kept() {
        let (_home, store) = store();
        store.seal(&name("k"), b"old").unwrap();
        let big = vec![1u8; MAX_SECRET_BYTES + 1];
        assert!(matches!(
            store.seal(&name("k"), &big),
            Err(KeysError::ValueTooLarge { .. })
        ));
        assert_eq!(
            store.unseal(&name("k")).unwrap().expose_secret().as_slice(),
            b"old"
        );
    }

    #[test]
    fn import_checks_it_opens() {
        let (_home, store) = store();
        let other = IdentitySet::generate();
        let foreign = seal::seal(b"x", &other.recipient()).unwrap();
        assert!(matches!(
            store.import(&name("f"), &foreign),
            Err(KeysError::ImportRejected { .. })
        ));
        assert!(store.list().unwrap().is_empty());
        let ours = seal::seal(b"y", &store.identities().unwrap().recipient()).unwrap();
        store.import(&name("f"), &ours).unwrap();
        assert_eq!(
            store.unseal(&name("f")).unwrap().expose_secret().as_slice(),
            b"y"
        );
    }

    #[test]
    fn rotate_stopped_at_every_step_keeps_every_secret_openable() {
        let values: Vec<(String, Vec<u8>)> = (0..5)
            .map(|i| (format!("s{i}"), format!("value-{i}").into_bytes()))
            .collect();
        // Stop after step k for every k, then finish with a full rotate.
        for stop_at in 0..(2 + values.len() + 1) {
            let (_home, store) = store();
            for (n, v) in &values {
                store.seal(&name(n), v).unwrap();
            }
            let mut count = 0;
            store
                .rotate_with_hook(&mut |_| {
                    count += 1;
                    count <= stop_at
                })
                .unwrap();
            for (n, v) in &values {
                assert_eq!(
                    store.unseal(&name(n)).unwrap().expose_secret(),
                    v,
                    "stop {stop_at}"
                );
            }
            store.rotate().unwrap();
            let ids = store.identities().unwrap();
            assert_eq!(ids.keys().len(), 1, "a completed rotate leaves one key");
            for (n, v) in &values {
                assert_eq!(store.unseal(&name(n)).unwrap().expose_secret(), v);
            }
        }
    }

    #[test]
    fn rotate_refuses_up_front_when_a_secret_does_not_open() {
        let (home, store) = store();
        store.seal(&name("good"), b"v").unwrap();
        let foreign = seal::seal(b"x", &IdentitySet::generate().recipient()).unwrap();
        std::fs::write(home.path().join(".tono/secrets/foreign.age"), foreign).unwrap();
        let before = std::fs::read(store.identity_path()).unwrap();
        assert!(matches!(
            store.rotate(),
            Err(KeysError::SecretCorrupt { .. })
        ));
        assert_eq!(
            std::fs::read(store.identity_path()).unwrap(),
            before,
            "nothing changed"
        );
        assert_eq!(
            store
                .unseal(&name("good"))
                .unwrap()
                .expose_secret()
                .as_slice(),
            b"v"
        );
    }

    #[test]
    fn symlinked_secret_is_refused() {
        let (home, store) = store();
        store.seal(&name("real"), b"v").unwrap();
        let target = home.path().join(".tono/secrets/real.age");
        std::os::unix::fs::symlink(&target, home.path().join(".tono/secrets/link.age")).unwrap();
        assert!(matches!(
            store.unseal(&name("link")),
            Err(KeysError::SecretCorrupt { .. })
        ));
    }

    #[test]
    fn seal_racing_rotate_for_200_rounds_loses_no_secret() {
        let (_home, store) = store();
        let store = std::sync::Arc::new(store);
        let sealer = {
            let store = store.clone();
            std::thread::spawn(move || {
                // Values big enough that a seal takes as long as a step of
                // rotate, so the two interleave.
                for round in 0..200 {
                    let value = format!("value-{round}-{}", "x".repeat(32 * 1024));
                    store
                        .seal(&name(&format!("s{}", round % 3)), value.as_bytes())
                        .unwrap();
                }
            })
        };
        let mut rotations = 0;
        while !sealer.is_finished() && rotations < 200 {
            store.rotate().unwrap();
            rotations += 1;
        }
        sealer.join().unwrap();
        assert!(rotations > 0);
        for slot in 0..3 {
            let last = (0..200).filter(|r| r % 3 == slot).max().unwrap();
            let plain = store.unseal(&name(&format!("s{slot}"))).unwrap();
            let want = format!("value-{last}-{}", "x".repeat(32 * 1024));
            assert!(plain.expose_secret() == want.as_bytes(), "s{slot}");
        }
        assert_eq!(
            store.identities().unwrap().keys().len(),
            1,
            "the old keys were dropped"
        );
    }

    #[test]
    fn two_forced_keygens_in_one_second_keep_both_old_identities() {
        let (_home, store) = store();
        let first = store
            .keygen(true)
            .unwrap()
            .replaced_identity_kept_at
            .unwrap();
        let second = store
            .keygen(true)
            .unwrap()
            .replaced_identity_kept_at
            .unwrap();
        assert_ne!(first, second);
        assert!(Path::new(&first).exists() && Path::new(&second).exists());
    }
}
