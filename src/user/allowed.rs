//! Which users a worker may act as: only people's and agents' own
//! accounts, never a system account, `nobody`, or a user whose primary
//! group others share (a process of the target would then reach the
//! others' group-readable files).
//!
//! Guarantees: [`check_worker_target_in`] passes only if the uid and the gid
//! are inside the [`AllottedRange`] (by default from the first allotted id,
//! 1000, up), neither is 65534, the primary group exists in the local group
//! file under the user's own name, lists no other member, and is no other
//! user's primary group. It judges from the texts of the local passwd
//! and group files only.
#![forbid(unsafe_code)]

use super::target::{TargetUser, UserError};

/// The group file.
pub const GROUP_PATH: &str = "/etc/group";
/// The first id of an account that is not a system account.
pub const FIRST_ALLOTTED_ID: u32 = 1000;
/// `nobody` and `nogroup`.
pub const NOBODY_ID: u32 = 65534;

/// The uids and gids a worker may act as, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllottedRange {
    /// The first id.
    pub first: u32,
    /// The last id.
    pub last: u32,
}

impl Default for AllottedRange {
    /// From the first allotted id to the largest id the kernel treats as
    /// an ordinary one (2^31 − 1).
    fn default() -> Self {
        Self {
            first: FIRST_ALLOTTED_ID,
            last: i32::MAX as u32,
        }
    }
}

impl AllottedRange {
    /// Parses `FIRST-LAST`; the range must lie above the system accounts.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (first, last) = text
            .split_once('-')
            .ok_or_else(|| format!("{text:?} is not FIRST-LAST"))?;
        let id = |s: &str| {
            s.parse::<u32>()
                .map_err(|_| format!("{s:?} in {text:?} is not an id"))
        };
        let range = Self {
            first: id(first)?,
            last: id(last)?,
        };
        if range.first < FIRST_ALLOTTED_ID || range.first > range.last {
            return Err(format!(
                "{text:?}: the range must start at {FIRST_ALLOTTED_ID} or above and not end before it starts"
            ));
        }
        Ok(range)
    }

    /// Whether `id` is inside.
    pub fn contains(&self, id: u32) -> bool {
        (self.first..=self.last).contains(&id)
    }
}

impl std::fmt::Display for AllottedRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// Refuses a user a worker must not act as (see the module's guarantees),
/// judged from the texts of a passwd and a group file (the worker's calls
/// go through [`super::accounts::check_worker_target`]).
pub fn check_worker_target_in(
    user: &TargetUser,
    range: &AllottedRange,
    passwd: &str,
    group: &str,
) -> Result<(), UserError> {
    for id in [user.uid, user.gid] {
        if id < FIRST_ALLOTTED_ID || id == NOBODY_ID {
            return Err(UserError::SystemAccount {
                name: user.name.clone(),
                id,
            });
        }
        if !range.contains(id) {
            return Err(UserError::OutsideRange {
                name: user.name.clone(),
                id,
                first: range.first,
                last: range.last,
            });
        }
    }
    let shared = |reason: String| UserError::SharedGroup {
        name: user.name.clone(),
        gid: user.gid,
        reason,
    };
    let entry = group
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() == 4 && f[2].parse() == Ok(user.gid))
        .ok_or_else(|| shared(format!("is not in {GROUP_PATH}")))?;
    if entry[0] != user.name {
        return Err(shared(format!("is {:?}, not the user's own", entry[0])));
    }
    let members: Vec<&str> = entry[3]
        .split(',')
        .filter(|m| !m.is_empty() && *m != user.name)
        .collect();
    if !members.is_empty() {
        return Err(shared(format!("has other members {members:?}")));
    }
    let others: Vec<&str> = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() == 7 && f[3].parse() == Ok(user.gid) && f[0] != user.name)
        .map(|f| f[0])
        .collect();
    if !others.is_empty() {
        return Err(shared(format!("is also the primary group of {others:?}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn user(name: &str, uid: u32, gid: u32) -> TargetUser {
        TargetUser {
            name: name.into(),
            uid,
            gid,
            home: PathBuf::from(format!("/home/{name}")),
            shell: PathBuf::from("/bin/sh"),
        }
    }

    const PASSWD: &str = "alice:x:61001:61001::/home/alice:/bin/sh\n\
        bob:x:61002:61002::/home/bob:/bin/sh\n\
        carol:x:61003:61002::/home/carol:/bin/sh\n\
        dave:x:61004:61004::/home/dave:/bin/sh\n\
        erin:x:61005:100::/home/erin:/bin/sh\n";
    const GROUP: &str = "users:x:100:\nalice:x:61001:\nbob:x:61002:\ndave:x:61004:alice\n";

    #[test]
    fn only_own_unshared_groups_inside_the_range_pass() {
        let range = AllottedRange::default();
        let check =
            |u: TargetUser| check_worker_target_in(&u, &range, PASSWD, GROUP).map_err(|e| e.code());
        assert_eq!(check(user("alice", 61001, 61001)), Ok(()));
        assert_eq!(check(user("bob", 61002, 61002)), Err("user_group_shared"));
        assert_eq!(check(user("dave", 61004, 61004)), Err("user_group_shared"));
        assert_eq!(check(user("erin", 61005, 100)), Err("user_system"));
        assert_eq!(check(user("daemon", 1, 1)), Err("user_system"));
        assert_eq!(check(user("nobody", 65534, 65534)), Err("user_system"));
        assert_eq!(check(user("ghost", 61009, 61009)), Err("user_group_shared"));
        let narrow = AllottedRange::parse("62000-62999").unwrap();
        let e = check_worker_target_in(&user("alice", 61001, 61001), &narrow, PASSWD, GROUP);
        assert_eq!(e.map_err(|e| e.code()), Err("user_outside_range"));
    }

    #[test]
    fn ranges_parse_above_the_system_accounts() {
        assert_eq!(
            AllottedRange::parse("2000-2999"),
            Ok(AllottedRange {
                first: 2000,
                last: 2999
            })
        );
        for bad in ["999-2000", "3000-2000", "1000", "a-b", "1000-"] {
            assert!(AllottedRange::parse(bad).is_err(), "{bad}");
        }
    }
}
