//! Proof that a drop held, checked by the launcher before the program's
//! first instruction (OpenSSH's `permanently_set_uid` and sudo-rs's
//! `irrevocably_drop_privileges` do the same).
//!
//! [`check_drop_held`] passes only if: real, effective and saved uid and gid
//! are the target's; there are no supplementary groups; `CapInh`, `CapPrm`,
//! `CapEff`, `CapBnd` and `CapAmb` in `/proc/self/status` are all zero; `NoNewPrivs`
//! is 1; and `setuid(0)` and `setgid(0)` both fail with `EPERM`.
#![forbid(unsafe_code)]

use std::io::Read;

use nix::errno::Errno;
use nix::unistd::{getgroups, getresgid, getresuid, setgid, setuid, Gid, Uid};

use super::report::{LaunchError, Stage};

fn refuse(code: &str, message: String) -> LaunchError {
    LaunchError::new(Stage::Verify, code, message)
}

/// Checks, by re-reading every id from the kernel, that this process is
/// `uid`/`gid` with no way back to root.
pub fn check_drop_held(uid: u32, gid: u32) -> Result<(), LaunchError> {
    let r = getresuid()
        .map_err(|e| LaunchError::sys(Stage::Verify, "getresuid_failed", "getresuid", e))?;
    let ids = [r.real.as_raw(), r.effective.as_raw(), r.saved.as_raw()];
    if ids != [uid; 3] {
        return Err(refuse(
            "uid_not_dropped",
            format!("uids are {ids:?}, expected {uid} thrice"),
        ));
    }
    let g = getresgid()
        .map_err(|e| LaunchError::sys(Stage::Verify, "getresgid_failed", "getresgid", e))?;
    let gids = [g.real.as_raw(), g.effective.as_raw(), g.saved.as_raw()];
    if gids != [gid; 3] {
        return Err(refuse(
            "gid_not_dropped",
            format!("gids are {gids:?}, expected {gid} thrice"),
        ));
    }
    let groups = getgroups()
        .map_err(|e| LaunchError::sys(Stage::Verify, "getgroups_failed", "getgroups", e))?;
    if !groups.is_empty() {
        return Err(refuse(
            "groups_kept",
            format!(
                "supplementary groups remain: {:?}",
                groups.iter().map(|g| g.as_raw()).collect::<Vec<_>>()
            ),
        ));
    }
    let mut status = [0u8; 4096];
    let len = read_proc_status(&mut status)?;
    check_status_text(&status[..len], uid, gid).map_err(|m| refuse("status_check_failed", m))?;
    match setuid(Uid::from_raw(0)) {
        Err(Errno::EPERM) => {}
        Ok(()) => {
            // We are root again: the drop is not real. Never continue.
            return Err(refuse(
                "root_regained",
                "setuid(0) succeeded after the drop".into(),
            ));
        }
        Err(e) => {
            return Err(refuse(
                "root_regain_unexpected",
                format!("setuid(0) failed with {e}, not EPERM"),
            ))
        }
    }
    match setgid(Gid::from_raw(0)) {
        Err(Errno::EPERM) => Ok(()),
        Ok(()) => Err(refuse(
            "root_group_regained",
            "setgid(0) succeeded after the drop".into(),
        )),
        Err(e) => Err(refuse(
            "root_group_regain_unexpected",
            format!("setgid(0) failed with {e}, not EPERM"),
        )),
    }
}

fn read_proc_status(buf: &mut [u8; 4096]) -> Result<usize, LaunchError> {
    let mut file = std::fs::File::open("/proc/self/status").map_err(|e| {
        refuse(
            "proc_unreadable",
            format!("cannot open /proc/self/status: {e}"),
        )
    })?;
    let mut len = 0;
    loop {
        match file.read(&mut buf[len..]) {
            Ok(0) => return Ok(len),
            Ok(n) => len += n,
            Err(e) => {
                return Err(refuse(
                    "proc_unreadable",
                    format!("cannot read /proc/self/status: {e}"),
                ))
            }
        }
        if len == buf.len() {
            return Ok(len);
        }
    }
}

/// Checks the text of `/proc/self/status`; pure, for unit tests.
pub fn check_status_text(text: &[u8], uid: u32, gid: u32) -> Result<(), String> {
    let text = std::str::from_utf8(text).map_err(|_| "status is not UTF-8".to_string())?;
    let mut seen = 0u16;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Uid" | "Gid" => {
                let want = if key == "Uid" { uid } else { gid };
                let all: Vec<&str> = value.split_whitespace().collect();
                if all.len() != 4 || all.iter().any(|v| v.parse() != Ok(want)) {
                    return Err(format!(
                        "{key}: is {value:?}, expected {want} in all four fields"
                    ));
                }
                seen |= if key == "Uid" { 1 } else { 2 };
            }
            "Groups" => {
                if !value.is_empty() {
                    return Err(format!("Groups: is {value:?}, expected none"));
                }
                seen |= 4;
            }
            "CapInh" | "CapPrm" | "CapEff" | "CapBnd" | "CapAmb" => {
                if u64::from_str_radix(value, 16) != Ok(0) {
                    return Err(format!("{key}: is {value}, expected 0"));
                }
                seen |= match key {
                    "CapInh" => 8,
                    "CapPrm" => 16,
                    "CapEff" => 32,
                    "CapBnd" => 256,
                    _ => 64,
                };
            }
            "NoNewPrivs" => {
                if value != "1" {
                    return Err(format!("NoNewPrivs: is {value}, expected 1"));
                }
                seen |= 128;
            }
            _ => {}
        }
    }
    if seen != 0x1ff {
        return Err(format!(
            "/proc/self/status lacks fields (seen mask {seen:#04x})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_with(uid: &str, groups: &str, eff: &str, bnd: &str, nnp: &str) -> String {
        format!(
            "Name:\tx\nUid:\t{uid}\nGid:\t7\t7\t7\t7\nGroups:\t{groups}\nCapInh:\t0000000000000000\n\
             CapPrm:\t0000000000000000\nCapEff:\t{eff}\nCapBnd:\t{bnd}\n\
             CapAmb:\t0000000000000000\nNoNewPrivs:\t{nnp}\n"
        )
    }

    fn status(uid: &str, groups: &str, eff: &str, nnp: &str) -> String {
        status_with(uid, groups, eff, "0000000000000000", nnp)
    }

    #[test]
    fn accepts_a_clean_drop() {
        let ok = status("5\t5\t5\t5", "", "0000000000000000", "1");
        assert_eq!(check_status_text(ok.as_bytes(), 5, 7), Ok(()));
    }

    #[test]
    fn refuses_each_leftover() {
        let cases = [
            status("5\t5\t0\t5", "", "0000000000000000", "1"),
            status("5\t5\t5\t5", "27", "0000000000000000", "1"),
            status("5\t5\t5\t5", "", "0000000000000400", "1"),
            status("5\t5\t5\t5", "", "0000000000000000", "0"),
            status_with("5\t5\t5\t5", "", "0", "000001ffffffffff", "1"),
        ];
        for text in cases {
            assert!(check_status_text(text.as_bytes(), 5, 7).is_err(), "{text}");
        }
        assert!(
            check_status_text(b"Uid:\t5\t5\t5\t5\n", 5, 7).is_err(),
            "missing fields"
        );
    }
}
