//! Target users: who a launch runs as, looked up in the passwd file.
//!
//! Guarantees: a user is named by a login name or `#UID` with a plain decimal
//! uid; uid 0, gid 0 and the wrap-around uid `4294967295` (`-1`,
//! CVE-2019-14287) are refused before any syscall; paths come from the
//! passwd entry, never from the name (sudo-rs CVE-2023-42456). Lookup reads
//! the local passwd file only (the users `useradd` makes), with no NSS
//! module loaded.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The system passwd file.
pub const PASSWD_PATH: &str = "/etc/passwd";

/// How a user was named on the command line or in a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserSpec {
    /// A login name.
    Name(String),
    /// `#UID`.
    Uid(u32),
}

/// A user a launch may run as: never uid 0 or gid 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetUser {
    /// Login name.
    pub name: String,
    /// User id (never 0).
    pub uid: u32,
    /// Primary group id (never 0).
    pub gid: u32,
    /// Home folder from the passwd entry.
    pub home: PathBuf,
    /// Login shell from the passwd entry.
    pub shell: PathBuf,
}

/// Why a user cannot be a target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UserError {
    /// The spec is not a valid login name or `#UID`.
    #[error("invalid user {spec:?}: {reason}")]
    InvalidSpec {
        /// The spec, escaped.
        spec: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// No such user in the passwd file.
    #[error("unknown user {0:?}")]
    Unknown(String),
    /// The user is root or in group 0.
    #[error("refusing user {0:?}: uid 0 and gid 0 are never targets")]
    Root(String),
    /// The passwd entry is unusable (relative home, for example).
    #[error("user {name:?} has an unusable passwd entry: {reason}")]
    BadEntry {
        /// The user.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The passwd file could not be read.
    #[error("cannot read {PASSWD_PATH}: {0}")]
    Passwd(String),
    /// A system account (below the first allotted id) or `nobody`.
    #[error("refusing user {name:?}: id {id} is a system account, never a worker's target")]
    SystemAccount {
        /// The user.
        name: String,
        /// The uid or gid that makes it one.
        id: u32,
    },
    /// A uid or gid outside the range the worker was given.
    #[error("refusing user {name:?}: id {id} is outside the allotted range {first}-{last}")]
    OutsideRange {
        /// The user.
        name: String,
        /// The uid or gid.
        id: u32,
        /// The range's first id.
        first: u32,
        /// The range's last id.
        last: u32,
    },
    /// The primary group is not the user's own, or others share it.
    #[error("refusing user {name:?}: its primary group {gid} {reason}")]
    SharedGroup {
        /// The user.
        name: String,
        /// The primary gid.
        gid: u32,
        /// How it is shared or foreign.
        reason: String,
    },
}

impl UserError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidSpec { .. } => "user_invalid",
            Self::Unknown(_) => "user_unknown",
            Self::Root(_) => "user_root",
            Self::BadEntry { .. } => "user_bad_entry",
            Self::Passwd(_) => "passwd_unreadable",
            Self::SystemAccount { .. } => "user_system",
            Self::OutsideRange { .. } => "user_outside_range",
            Self::SharedGroup { .. } => "user_group_shared",
        }
    }
}

impl UserSpec {
    /// Parses `name` or `#UID`.
    pub fn parse(spec: &str) -> Result<Self, UserError> {
        let bad = |reason| UserError::InvalidSpec {
            spec: spec.escape_debug().take(80).collect(),
            reason,
        };
        if let Some(digits) = spec.strip_prefix('#') {
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("a uid after '#' must be plain decimal digits"));
            }
            if digits.len() > 1 && digits.starts_with('0') {
                return Err(bad("a uid must not have leading zeros"));
            }
            let uid: u32 = digits
                .parse()
                .map_err(|_| bad("the uid does not fit in 32 bits"))?;
            if uid == 0 {
                return Err(UserError::Root(spec.to_owned()));
            }
            if uid == u32::MAX {
                return Err(bad("uid 4294967295 is -1, which means 'no change'"));
            }
            return Ok(Self::Uid(uid));
        }
        valid_login_name(spec).map_err(bad)?;
        Ok(Self::Name(spec.to_owned()))
    }
}

/// Login names as `useradd` accepts them by default.
pub fn valid_login_name(name: &str) -> Result<(), &'static str> {
    let bytes = name.as_bytes();
    let Some(&first) = bytes.first() else {
        return Err("it is empty");
    };
    if bytes.len() > 32 {
        return Err("it is longer than 32 bytes");
    }
    if !(first.is_ascii_lowercase() || first == b'_') {
        return Err("it must start with a lowercase letter or '_'");
    }
    let body = bytes.strip_suffix(b"$").unwrap_or(bytes);
    if !body
        .iter()
        .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err("it may hold only lowercase letters, digits, '_' and '-'");
    }
    Ok(())
}

impl TargetUser {
    /// Looks `spec` up in the system passwd file.
    pub fn lookup(spec: &UserSpec) -> Result<Self, UserError> {
        let text =
            std::fs::read_to_string(PASSWD_PATH).map_err(|e| UserError::Passwd(e.to_string()))?;
        Self::lookup_in(&text, spec)
    }

    /// Looks `spec` up in passwd-format `text`.
    pub fn lookup_in(text: &str, spec: &UserSpec) -> Result<Self, UserError> {
        let shown = match spec {
            UserSpec::Name(n) => n.clone(),
            UserSpec::Uid(u) => format!("#{u}"),
        };
        for line in text.lines() {
            // The name or uid first, without splitting the whole line: a
            // scan past 10,000 other accounts costs no allocation each.
            let mut head = line.splitn(4, ':');
            let (Some(name), Some(_), Some(uid)) = (head.next(), head.next(), head.next()) else {
                continue;
            };
            let named = match spec {
                UserSpec::Name(n) => name == n,
                UserSpec::Uid(u) => uid.parse::<u32>() == Ok(*u),
            };
            if !named {
                continue;
            }
            if let Some((name, uid, gid, fields)) = passwd_fields(line) {
                return Self::from_entry(&shown, name, uid, gid, &fields);
            }
        }
        Err(UserError::Unknown(shown))
    }

    /// Every usable entry of passwd-format `text` (root and entries with a
    /// bad home left out), in file order.
    pub fn all_in(text: &str) -> Vec<Self> {
        text.lines()
            .filter_map(passwd_fields)
            .filter_map(|(name, uid, gid, fields)| {
                Self::from_entry(name, name, uid, gid, &fields).ok()
            })
            .collect()
    }

    /// Every usable entry of the local passwd file.
    pub fn all() -> Result<Vec<Self>, UserError> {
        let text =
            std::fs::read_to_string(PASSWD_PATH).map_err(|e| UserError::Passwd(e.to_string()))?;
        Ok(Self::all_in(&text))
    }

    fn from_entry(
        shown: &str,
        name: &str,
        uid: u32,
        gid: u32,
        fields: &[&str],
    ) -> Result<Self, UserError> {
        if uid == 0 || gid == 0 {
            return Err(UserError::Root(shown.to_owned()));
        }
        let home = PathBuf::from(fields[5]);
        if !home.is_absolute() || home == Path::new("/") {
            return Err(UserError::BadEntry {
                name: name.to_owned(),
                reason: "its home is not an absolute path below /",
            });
        }
        Ok(Self {
            name: name.to_owned(),
            uid,
            gid,
            home,
            shell: PathBuf::from(fields[6]),
        })
    }
}

/// A passwd line's name, uid, gid and seven fields, if it has that shape.
fn passwd_fields(line: &str) -> Option<(&str, u32, u32, Vec<&str>)> {
    let fields: Vec<&str> = line.split(':').collect();
    if fields.len() != 7 {
        return None;
    }
    let (Ok(uid), Ok(gid)) = (fields[2].parse::<u32>(), fields[3].parse::<u32>()) else {
        return None;
    };
    Some((fields[0], uid, gid, fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        alice:x:61001:61001::/home/alice:/bin/sh\n\
        wheel:x:61002:0::/home/wheel:/bin/sh\n\
        rel:x:61003:61003::home/rel:/bin/sh\n";

    #[test]
    fn all_lists_every_usable_entry_and_leaves_out_root_and_bad_homes() {
        let all = TargetUser::all_in(PASSWD);
        let names: Vec<&str> = all.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["alice"]);
        assert_eq!(
            all[0],
            TargetUser::lookup_in(PASSWD, &UserSpec::Name("alice".into())).unwrap()
        );
    }

    #[test]
    fn refuses_dangerous_uid_spellings_before_lookup() {
        for spec in [
            "#-1",
            "#4294967295",
            "#0",
            "#0x10",
            " #5",
            "#",
            "#+5",
            "#05",
            "#99999999999",
        ] {
            assert!(UserSpec::parse(spec).is_err(), "{spec:?} must be refused");
        }
        assert!(matches!(UserSpec::parse("#0"), Err(UserError::Root(_))));
    }

    #[test]
    fn refuses_root_by_name_and_gid_zero() {
        let root = UserSpec::parse("root").unwrap();
        assert!(matches!(
            TargetUser::lookup_in(PASSWD, &root),
            Err(UserError::Root(_))
        ));
        let wheel = UserSpec::parse("wheel").unwrap();
        assert!(matches!(
            TargetUser::lookup_in(PASSWD, &wheel),
            Err(UserError::Root(_))
        ));
    }

    #[test]
    fn finds_by_name_and_uid() {
        let a = TargetUser::lookup_in(PASSWD, &UserSpec::parse("alice").unwrap()).unwrap();
        let b = TargetUser::lookup_in(PASSWD, &UserSpec::parse("#61001").unwrap()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.home, Path::new("/home/alice"));
        assert!(TargetUser::lookup_in(PASSWD, &UserSpec::parse("bob").unwrap()).is_err());
        assert!(TargetUser::lookup_in(PASSWD, &UserSpec::parse("rel").unwrap()).is_err());
    }

    #[test]
    fn refuses_path_like_names() {
        for spec in ["../../bin/cp", "a/b", "", "Alice", "a b", "a\0"] {
            assert!(UserSpec::parse(spec).is_err(), "{spec:?}");
        }
    }
}
