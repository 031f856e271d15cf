//! Walks of the trees `verify` is named: the installed code (`--code`, and
//! `tono-seal`/`tono-launch` themselves), whose every entry and every
//! folder above must be root's and closed to writes by others, and the
//! `--protect` trees, whose every entry each user is probed on.
//!
//! Guarantees: a walk never follows a link (entries are `lstat`ed, folders
//! listed by the path the walk built under the named root); it stops at
//! [`MAX_ENTRIES`] and says so, and a walk that stopped counts as unproven,
//! never as passed. A link is judged by where it leads: inside the tree it
//! is checked there; outside, the place it leads to and every folder above
//! must be root's and closed to others.
#![forbid(unsafe_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::probe::{fact, Probe};
use crate::user::TargetUser;

/// The most entries one walk visits.
pub const MAX_ENTRIES: usize = 100_000;
/// How many failing entries a fact names.
const SHOWN: usize = 5;

/// The entries under `root` (itself first), depth first, never through a
/// link; and whether the walk stopped at `limit`.
pub fn walk(root: &Path, limit: usize) -> (Vec<PathBuf>, bool) {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        if found.len() >= limit {
            return (found, true);
        }
        let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        found.push(path.clone());
        if is_dir {
            if let Ok(entries) = std::fs::read_dir(&path) {
                let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
                names.sort();
                stack.extend(names.into_iter().rev());
            }
        }
    }
    (found, false)
}

fn show(path: &Path, meta: &std::fs::Metadata) -> String {
    format!(
        "{} (owner {} group {} mode {:04o})",
        path.display(),
        meta.uid(),
        meta.gid(),
        meta.mode() & 0o7777
    )
}

/// Why an entry of a code tree is a door, if it is one: not root's, or
/// writable by others, or by a group other than root's (a sticky folder's
/// other-write is no door for root's entries inside, but an entry of a
/// code tree has no need of it either).
fn door(meta: &std::fs::Metadata, probed: &[TargetUser]) -> Option<&'static str> {
    if meta.file_type().is_symlink() {
        return None;
    }
    if probed.iter().any(|u| u.uid == meta.uid()) {
        return Some("owned by a probed user");
    }
    if meta.uid() != 0 {
        return Some("not owned by root");
    }
    if meta.mode() & 0o002 != 0 {
        return Some("writable by others");
    }
    if meta.mode() & 0o020 != 0 && meta.gid() != 0 {
        return Some("writable by a group not root's");
    }
    None
}

/// Why a folder above a code tree is a door, if it is one: anyone but root
/// can replace what is below it, unless it is sticky.
fn door_above(meta: &std::fs::Metadata) -> Option<&'static str> {
    if meta.uid() != 0 {
        Some("a folder above is not root's")
    } else if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
        Some("a folder above is writable by group or others")
    } else {
        None
    }
}

/// The folders above `path` (canonical) that are doors.
fn doors_above(path: &Path) -> Vec<String> {
    path.ancestors()
        .skip(1)
        .filter_map(|a| {
            let meta = std::fs::symlink_metadata(a).ok()?;
            door_above(&meta).map(|why| format!("{why}: {}", show(a, &meta)))
        })
        .collect()
}

/// One fact per code path: every entry under it, and every folder above,
/// root's and closed to others; links that lead out lead only to such
/// places.
pub fn code_tree_facts(paths: &[PathBuf], probed: &[TargetUser]) -> Vec<Probe> {
    paths
        .iter()
        .map(|path| code_tree_fact(path, probed, MAX_ENTRIES))
        .collect()
}

fn code_tree_fact(path: &Path, probed: &[TargetUser], limit: usize) -> Probe {
    let tried = format!(
        "every entry of {} and every folder above it is root's and closed to others",
        path.display()
    );
    let root = match std::fs::canonicalize(path) {
        Ok(root) => root,
        Err(e) => return fact(tried, format!("{}: {e}", path.display()), false),
    };
    let mut bad = doors_above(&root);
    let (entries, stopped) = walk(&root, limit);
    for entry in &entries {
        let Ok(meta) = std::fs::symlink_metadata(entry) else {
            continue;
        };
        if let Some(why) = door(&meta, probed) {
            bad.push(format!("{why}: {}", show(entry, &meta)));
        } else if meta.file_type().is_symlink() {
            match std::fs::canonicalize(entry) {
                Ok(target) if target.starts_with(&root) => {}
                Ok(target) => {
                    let outside = std::fs::symlink_metadata(&target)
                        .ok()
                        .and_then(|m| {
                            door(&m, probed).map(|why| format!("{why}: {}", show(&target, &m)))
                        })
                        .into_iter()
                        .chain(doors_above(&target));
                    bad.extend(outside.map(|why| {
                        format!(
                            "{} leads out to {}: {why}",
                            entry.display(),
                            target.display()
                        )
                    }));
                }
                Err(e) => bad.push(format!(
                    "{} is a link that leads nowhere: {e}",
                    entry.display()
                )),
            }
        }
    }
    let got = if !bad.is_empty() {
        let mut text = bad
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        if bad.len() > SHOWN {
            text.push_str(&format!("; and {} more", bad.len() - SHOWN));
        }
        text
    } else if stopped {
        format!("unproven: the walk stopped at {limit} entries, the rest were not checked")
    } else {
        match entries.len() {
            1 => "1 entry, all root's and closed to others".to_owned(),
            n => format!("{n} entries, all root's and closed to others"),
        }
    };
    let mut probe = fact(tried, got, bad.is_empty() && !stopped);
    probe.inconclusive = bad.is_empty() && stopped;
    probe
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_lists_every_entry_once_never_through_a_link_and_stops_at_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/f"), b"").unwrap();
        std::fs::write(dir.path().join("g"), b"").unwrap();
        std::os::unix::fs::symlink("/usr", dir.path().join("a/link")).unwrap();
        let (all, stopped) = walk(dir.path(), 100);
        assert!(!stopped);
        let names: Vec<String> = all
            .iter()
            .map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["", "a", "a/b", "a/b/f", "a/link", "g"]);
        let (some, stopped) = walk(dir.path(), 3);
        assert!(stopped);
        assert_eq!(some.len(), 3);
    }

    #[test]
    fn a_walk_that_stopped_is_not_a_pass() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"").unwrap();
        let probe = code_tree_fact(dir.path(), &[], 1);
        assert!(!probe.pass);
        // Owned by whoever runs the tests: root passes the entries and
        // fails only because the walk stopped; anyone else fails on owner.
        if nix::unistd::geteuid().is_root()
            && doors_above(&dir.path().canonicalize().unwrap()).is_empty()
        {
            assert!(probe.inconclusive, "{}", probe.got);
            assert!(probe.got.contains("stopped at 1"), "{}", probe.got);
        }
    }
}
