//! The kernel's key retention service, as far as a call needs it: leaving
//! the session keyring the launcher inherited for a new, empty one of its
//! own.
//!
//! Keyrings are not namespaced. A process inherits its parent's session
//! keyring and *possesses* it, whatever its uid: a launcher started by a
//! worker that holds root's session keyring (a `su -` login, a systemd
//! service) would hand that keyring, and root's user keyring linked in it,
//! to every tool. [`join_anonymous_session_keyring`] replaces it.

use nix::errno::Errno;

/// `KEYCTL_JOIN_SESSION_KEYRING` (`linux/keyctl.h`).
const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
/// `KEYCTL_GET_KEYRING_ID` (`linux/keyctl.h`).
const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
/// `KEY_SPEC_SESSION_KEYRING` (`linux/keyctl.h`).
pub const KEY_SPEC_SESSION_KEYRING: i32 = -3;

/// Makes this process join a new anonymous session keyring, owned by its
/// current uid, and drop its reference to the one it had (so nothing of
/// the old one is possessed any longer). Returns the new keyring's serial.
pub fn join_anonymous_session_keyring() -> Result<i32, Errno> {
    // SAFETY: keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL) reads no memory of
    // ours (a null name asks for an anonymous keyring) and returns a
    // serial or -1.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_JOIN_SESSION_KEYRING,
            std::ptr::null::<libc::c_char>(),
        )
    };
    Errno::result(rc).map(|serial| serial as i32)
}

/// The serial of this process's session keyring, without creating one
/// (`KEYCTL_GET_KEYRING_ID` with create 0): what a call's keyring is.
pub fn session_keyring_id() -> Result<i32, Errno> {
    // SAFETY: keyctl(KEYCTL_GET_KEYRING_ID, id, 0) takes two integers and
    // returns a serial or -1; it touches no memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_GET_KEYRING_ID,
            KEY_SPEC_SESSION_KEYRING as libc::c_long,
            0 as libc::c_long,
        )
    };
    Errno::result(rc).map(|serial| serial as i32)
}

/// `KEYCTL_INVALIDATE` (`linux/keyctl.h`).
const KEYCTL_INVALIDATE: libc::c_long = 21;

/// Adds a `user` key `description` holding `payload` to this process's
/// session keyring; returns its serial.
pub fn add_session_key(description: &std::ffi::CStr, payload: &[u8]) -> Result<i32, Errno> {
    // SAFETY: add_key reads the NUL-terminated type and description and
    // `payload.len()` bytes at `payload`, all live for the call; it
    // returns a serial or -1.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_add_key,
            c"user".as_ptr(),
            description.as_ptr(),
            payload.as_ptr(),
            payload.len(),
            KEY_SPEC_SESSION_KEYRING as libc::c_long,
        )
    };
    Errno::result(rc).map(|serial| serial as i32)
}

/// Invalidates key `serial` (it is gone for every keyring at once).
pub fn invalidate_key(serial: i32) -> Result<(), Errno> {
    // SAFETY: keyctl(KEYCTL_INVALIDATE, serial) takes two integers and
    // touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_INVALIDATE, serial as libc::c_long) };
    Errno::result(rc).map(drop)
}
