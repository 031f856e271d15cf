//! Built-in operations the launcher performs itself, after the drop, as the
//! user: key store provisioning and the file tools (the per-user sweep is
//! [`super::sweep`]). Values read from stdin (a secret for `seal`, an age
//! file for `import`) and written to stdout (a value for `reveal`, a file
//! for `read_file`) pass through unbuffered fds and wiped buffers, never
//! through the worker.
#![forbid(unsafe_code)]

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;

use secrecy::ExposeSecret;
use serde_json::{json, Value};

use super::plan::{FileOp, KeysOp};
use super::report::{LaunchError, Stage};
use crate::keys::identity::read_bounded;
use crate::keys::seal::{MAX_SEALED_BYTES, MAX_SECRET_BYTES};
use crate::keys::{KeyStore, KeysError, SecretName};

fn op_error(e: KeysError) -> LaunchError {
    LaunchError::new(Stage::Op, e.code(), e.to_string())
}

/// An I/O failure of a built-in operation, with its errno.
pub(super) fn io_error(code: &str, what: String, e: io::Error) -> LaunchError {
    LaunchError {
        stage: Stage::Op,
        code: code.into(),
        message: format!("{what}: {e}"),
        errno: e.raw_os_error(),
    }
}

/// An unbuffered handle on fd 0 or 1 (a dup, so no std buffer copies data).
fn raw_stdio(fd: std::os::fd::BorrowedFd<'_>) -> Result<File, LaunchError> {
    fd.try_clone_to_owned()
        .map(File::from)
        .map_err(|e| io_error("stdio_unusable", "dup of stdio".into(), e))
}

fn name(s: &str) -> Result<SecretName, LaunchError> {
    SecretName::parse(s).map_err(op_error)
}

/// Runs a key store operation on the dropped user's own store.
pub fn keys(store: &KeyStore, op: &KeysOp) -> Result<Value, LaunchError> {
    match op {
        KeysOp::Keygen { force } => Ok(to_json(&store.keygen(*force).map_err(op_error)?)),
        KeysOp::Recipient => Ok(json!({ "recipient": store.recipient().map_err(op_error)? })),
        KeysOp::Seal {
            name: n,
            allow_empty,
        } => {
            let n = name(n)?;
            let mut stdin = raw_stdio(io::stdin().as_fd())?;
            let value = read_bounded(&mut stdin, MAX_SECRET_BYTES).map_err(|e| match e.kind() {
                io::ErrorKind::FileTooLarge => op_error(KeysError::ValueTooLarge {
                    cap: MAX_SECRET_BYTES,
                }),
                _ => io_error("stdin_unreadable", "reading the value from stdin".into(), e),
            })?;
            if value.is_empty() && !allow_empty {
                return Err(op_error(KeysError::ValueEmpty));
            }
            store.seal(&n, &value).map_err(op_error)?;
            Ok(json!({ "sealed": n.as_str(), "value_bytes": value.len() }))
        }
        KeysOp::SealRandom { name: n, bytes } => {
            use rand::Rng;
            let n = name(n)?;
            if !(16..=256).contains(bytes) {
                return Err(LaunchError::new(
                    Stage::Plan,
                    "value_length_invalid",
                    format!("a random value has 16 to 256 bytes, not {bytes}"),
                ));
            }
            const ALPHABET: &[u8] =
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
            let mut rng = rand::rngs::OsRng;
            let value: zeroize::Zeroizing<Vec<u8>> = zeroize::Zeroizing::new(
                (0..*bytes)
                    .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())])
                    .collect(),
            );
            store.seal(&n, &value).map_err(op_error)?;
            Ok(json!({ "sealed": n.as_str(), "value_bytes": value.len() }))
        }
        KeysOp::Import { name: n } => {
            let n = name(n)?;
            let mut stdin = raw_stdio(io::stdin().as_fd())?;
            let sealed =
                read_bounded(&mut stdin, MAX_SEALED_BYTES).map_err(|e| match e.kind() {
                    io::ErrorKind::FileTooLarge => op_error(KeysError::ImportRejected {
                        reason: format!("it is over the {MAX_SEALED_BYTES}-byte cap"),
                    }),
                    _ => io_error(
                        "stdin_unreadable",
                        "reading the age file from stdin".into(),
                        e,
                    ),
                })?;
            store.import(&n, &sealed).map_err(op_error)?;
            Ok(json!({ "imported": n.as_str(), "sealed_bytes": sealed.len() }))
        }
        KeysOp::List => Ok(to_json(&store.health().map_err(op_error)?)),
        KeysOp::Remove { name: n } => {
            let n = name(n)?;
            store.remove(&n).map_err(op_error)?;
            Ok(json!({ "removed": n.as_str() }))
        }
        KeysOp::Rotate => Ok(to_json(&store.rotate().map_err(op_error)?)),
        KeysOp::Reveal { name: n } => {
            let n = name(n)?;
            let plain = store.unseal(&n).map_err(op_error)?;
            let mut stdout = raw_stdio(io::stdout().as_fd())?;
            stdout
                .write_all(plain.expose_secret())
                .map_err(|e| io_error("stdout_unwritable", "writing the value".into(), e))?;
            Ok(json!({ "revealed": n.as_str(), "value_bytes": plain.expose_secret().len() }))
        }
    }
}

/// Runs a file tool as the dropped user; relative paths are from the home.
pub fn file(op: &FileOp) -> Result<Value, LaunchError> {
    match op {
        FileOp::Read { path, max_bytes } => {
            let shown = path.display().to_string();
            let mut file = File::open(path)
                .map_err(|e| io_error("read_failed", format!("open {shown}"), e))?;
            let mut stdout = raw_stdio(io::stdout().as_fd())?;
            let copied = io::copy(&mut (&mut file).take(*max_bytes), &mut stdout)
                .map_err(|e| io_error("read_failed", format!("read {shown}"), e))?;
            let mut probe = [0u8; 1];
            let truncated = matches!(file.read(&mut probe), Ok(1));
            Ok(json!({ "path": shown, "bytes": copied, "truncated": truncated }))
        }
        FileOp::Write { path, content } => {
            let shown = path.display().to_string();
            fs::write(path, content.as_bytes())
                .map_err(|e| io_error("write_failed", format!("write {shown}"), e))?;
            Ok(json!({ "path": shown, "bytes": content.len() }))
        }
        FileOp::ListDir { path } => {
            let shown = path.display().to_string();
            let fail = |e| io_error("list_failed", format!("list {shown}"), e);
            let mut entries = Vec::new();
            for entry in fs::read_dir(path).map_err(fail)? {
                let entry = entry.map_err(fail)?;
                let meta = entry.path().symlink_metadata().map_err(fail)?;
                let kind = if meta.is_dir() {
                    "dir"
                } else if meta.file_type().is_symlink() {
                    "symlink"
                } else if meta.is_file() {
                    "file"
                } else {
                    "other"
                };
                entries.push(json!({
                    "name": entry.file_name().to_string_lossy(),
                    "kind": kind,
                    "size": meta.len(),
                    "mode": format!("{:04o}", meta.mode() & 0o7777),
                }));
            }
            entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            Ok(json!({ "path": shown, "entries": entries }))
        }
        FileOp::Clear { path } => {
            let shown = path.display().to_string();
            let removed = crate::fs::tree::empty_folder(path)
                .map_err(|e| io_error("clear_failed", format!("clear {shown}"), e))?;
            Ok(json!({ "cleared": shown, "removed": removed }))
        }
        FileOp::Delete { path } => {
            let shown = path.display().to_string();
            fs::remove_file(path)
                .map_err(|e| io_error("delete_failed", format!("delete {shown}"), e))?;
            Ok(json!({ "deleted": shown }))
        }
    }
}

/// Serializes a report (plain data: this cannot fail in practice).
fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}
