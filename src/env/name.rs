//! The rule every environment variable name of a launched program obeys:
//! non-empty, no `=`, no NUL. The worker checks it when it builds an
//! environment or binds a secret; the launcher checks it again, after the
//! drop, on every name of its plan.
#![forbid(unsafe_code)]

/// Environment variable names: non-empty, no `=`, no NUL.
pub fn valid_env_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return Err(format!(
            "{:?} is not a valid environment variable name",
            name.escape_debug().to_string()
        ));
    }
    Ok(())
}
