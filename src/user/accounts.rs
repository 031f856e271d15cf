//! The local passwd and group files as the worker last read them, indexed,
//! so that a call's lookup and checks cost the same with 10 users or 10,000
//! (a worker serving a few agents on a host with many accounts).
//!
//! Guarantees: an answer comes from files whose identity and times
//! (device, inode, size, modification and change time to the nanosecond)
//! were seen unchanged by a `stat` made on this call, before the snapshot's
//! read; any change (an edit, or `useradd`'s rename of a new file) makes
//! the next call read both files again. Answers are exactly those of
//! [`TargetUser::lookup_in`] and [`check_worker_target_in`] over the whole
//! texts: each is computed by those functions over the lines that decide
//! it (the first line of a name or uid; the group's first line and every
//! passwd line with that primary group). The launcher does not use this:
//! it reads the passwd file itself for every call, as the user's last word.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};

use super::allowed::{check_worker_target_in, AllottedRange, GROUP_PATH};
use super::target::{TargetUser, UserError, UserSpec, PASSWD_PATH};

/// What identifies one version of a file: any write or replacement
/// changes at least one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileVersion {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileVersion {
    fn of(path: &str) -> std::io::Result<Self> {
        let m = std::fs::metadata(path)?;
        Ok(Self {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

/// One read of the passwd and group files, with the lines that decide each
/// answer found ahead.
#[derive(Debug)]
pub struct Accounts {
    versions: (FileVersion, FileVersion),
    passwd: String,
    group: String,
    /// The first passwd line of each name, and of each uid.
    by_name: HashMap<String, Range<usize>>,
    by_uid: HashMap<u32, Range<usize>>,
    /// Every passwd line with seven fields, by its primary gid.
    by_primary_gid: HashMap<u32, Vec<Range<usize>>>,
    /// The first group line of each gid.
    group_by_gid: HashMap<u32, Range<usize>>,
}

/// Each line of `text` with its byte range (without the newline).
fn lines_with_ranges(text: &str) -> impl Iterator<Item = (&str, Range<usize>)> {
    let mut start = 0;
    text.split('\n').map(move |line| {
        let range = start..start + line.len();
        start = range.end + 1;
        (line, range)
    })
}

impl Accounts {
    /// The indexed texts of a passwd and a group file.
    fn index(versions: (FileVersion, FileVersion), passwd: String, group: String) -> Self {
        let (mut by_name, mut by_uid, mut by_primary_gid) = (
            HashMap::new(),
            HashMap::new(),
            HashMap::<u32, Vec<_>>::new(),
        );
        for (line, range) in lines_with_ranges(&passwd) {
            let fields: Vec<&str> = line.split(':').collect();
            if fields.len() != 7 {
                continue;
            }
            if let Ok(gid) = fields[3].parse::<u32>() {
                by_primary_gid.entry(gid).or_default().push(range.clone());
                if let Ok(uid) = fields[2].parse::<u32>() {
                    by_name
                        .entry(fields[0].to_owned())
                        .or_insert_with(|| range.clone());
                    by_uid.entry(uid).or_insert(range);
                }
            }
        }
        let mut group_by_gid = HashMap::new();
        for (line, range) in lines_with_ranges(&group) {
            let fields: Vec<&str> = line.split(':').collect();
            if let (4, Some(Ok(gid))) = (fields.len(), fields.get(2).map(|g| g.parse::<u32>())) {
                group_by_gid.entry(gid).or_insert(range);
            }
        }
        Self {
            versions,
            passwd,
            group,
            by_name,
            by_uid,
            by_primary_gid,
            group_by_gid,
        }
    }

    /// The snapshot of the files as they are now: the one last read if
    /// neither file changed since, else a new read.
    pub fn current() -> Result<Arc<Self>, UserError> {
        static LAST: Mutex<Option<Arc<Accounts>>> = Mutex::new(None);
        let unreadable = |path: &str, e: std::io::Error| UserError::Passwd(format!("{path}: {e}"));
        let versions = (
            FileVersion::of(PASSWD_PATH).map_err(|e| unreadable(PASSWD_PATH, e))?,
            FileVersion::of(GROUP_PATH).map_err(|e| unreadable(GROUP_PATH, e))?,
        );
        let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(snapshot) = last.as_ref().filter(|s| s.versions == versions) {
            return Ok(Arc::clone(snapshot));
        }
        // Read after the stat: the text is at least as new as the versions
        // kept with it, so a change in between is seen by the next call.
        let passwd =
            std::fs::read_to_string(PASSWD_PATH).map_err(|e| unreadable(PASSWD_PATH, e))?;
        let group = std::fs::read_to_string(GROUP_PATH).map_err(|e| unreadable(GROUP_PATH, e))?;
        let snapshot = Arc::new(Self::index(versions, passwd, group));
        *last = Some(Arc::clone(&snapshot));
        Ok(snapshot)
    }

    /// [`TargetUser::lookup_in`] over the passwd text.
    pub fn lookup(&self, spec: &UserSpec) -> Result<TargetUser, UserError> {
        let line = match spec {
            UserSpec::Name(name) => self.by_name.get(name),
            UserSpec::Uid(uid) => self.by_uid.get(uid),
        };
        let text = line.map_or("", |r| &self.passwd[r.clone()]);
        TargetUser::lookup_in(text, spec)
    }

    /// [`check_worker_target_in`] over the passwd and group texts.
    pub fn check_worker_target(
        &self,
        user: &TargetUser,
        range: &AllottedRange,
    ) -> Result<(), UserError> {
        let join = |text: &str, lines: &mut dyn Iterator<Item = &Range<usize>>| {
            lines
                .map(|r| &text[r.clone()])
                .collect::<Vec<_>>()
                .join("\n")
        };
        let passwd = join(
            &self.passwd,
            &mut self.by_primary_gid.get(&user.gid).into_iter().flatten(),
        );
        let group = join(
            &self.group,
            &mut self.group_by_gid.get(&user.gid).into_iter(),
        );
        check_worker_target_in(user, range, &passwd, &group)
    }
}

impl TargetUser {
    /// Parses a spec and looks it up: the worker's entry point, through the
    /// snapshot ([`Accounts::current`], re-read only when the files change).
    pub fn resolve(spec: &str) -> Result<Self, UserError> {
        Accounts::current()?.lookup(&UserSpec::parse(spec)?)
    }
}

/// Refuses a user a worker must not act as (see [`super::allowed`]), from
/// the snapshot of the local passwd and group files.
pub fn check_worker_target(user: &TargetUser, range: &AllottedRange) -> Result<(), UserError> {
    Accounts::current()?.check_worker_target(user, range)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        alice:x:61001:61001::/home/alice:/bin/sh\n\
        bob:x:61002:61002::/home/bob:/bin/sh\n\
        carol:x:61003:61002::/home/carol:/bin/sh\n\
        broken line\n\
        alice:x:61009:61009::/home/alice2:/bin/sh\n\
        dave:x:61004:61004::/home/dave:/bin/sh\n";
    const GROUP: &str = "root:x:0:\n\
        alice:x:61001:\n\
        bob:x:61002:\n\
        dave:x:61004:alice\n\
        other:x:61004:\n";

    fn version() -> FileVersion {
        FileVersion {
            dev: 0,
            ino: 0,
            size: 0,
            mtime: (0, 0),
            ctime: (0, 0),
        }
    }

    /// Every answer of the index equals the whole-text function's, for
    /// every name and uid in the texts and some that are not.
    #[test]
    fn answers_equal_those_over_the_whole_texts() {
        let accounts = Accounts::index((version(), version()), PASSWD.into(), GROUP.into());
        let range = AllottedRange::default();
        let names = [
            "root",
            "alice",
            "bob",
            "carol",
            "dave",
            "eve",
            "broken line",
        ];
        let uids = [0, 61001, 61002, 61003, 61004, 61009, 5];
        let specs = names
            .iter()
            .map(|n| UserSpec::Name((*n).into()))
            .chain(uids.iter().map(|u| UserSpec::Uid(*u)));
        let mut checked = 0;
        for spec in specs {
            let whole = TargetUser::lookup_in(PASSWD, &spec);
            let indexed = accounts.lookup(&spec);
            assert_eq!(
                format!("{indexed:?}"),
                format!("{whole:?}"),
                "lookup of {spec:?}"
            );
            if let Ok(user) = whole {
                let whole = check_worker_target_in(&user, &range, PASSWD, GROUP);
                let indexed = accounts.check_worker_target(&user, &range);
                assert_eq!(
                    format!("{indexed:?}"),
                    format!("{whole:?}"),
                    "check of {user:?}"
                );
                checked += 1;
            }
        }
        // Four names (alice, bob, carol, dave) and five uids resolve.
        assert_eq!(checked, 9);
    }

    /// The cases the check exists for are still refused through the index.
    #[test]
    fn shared_and_foreign_groups_are_refused_through_the_index() {
        let accounts = Accounts::index((version(), version()), PASSWD.into(), GROUP.into());
        let range = AllottedRange::default();
        let user = |name: &str| accounts.lookup(&UserSpec::Name(name.into())).unwrap();
        assert!(accounts.check_worker_target(&user("alice"), &range).is_ok());
        for (name, why) in [
            ("bob", "primary group of [\"carol\"]"),
            ("dave", "other members [\"alice\"]"),
        ] {
            let refused = accounts.check_worker_target(&user(name), &range);
            let text = refused.expect_err(name).to_string();
            assert!(text.contains(why), "{name}: {text}");
        }
    }
}
