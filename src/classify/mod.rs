//! The tool-call classifier: whether a call may run inside the root worker
//! (`Stay`), must run as its user (`Drop`), or must not run (`Refuse`).
//!
//! Guarantees: pure (no I/O); fails closed — a call that does not parse
//! strictly is refused, an unknown tool or any side-effecting kind drops,
//! and only a registered read tool whose every argument passes can stay.
//! A stay needs every check of [`stay::judge_read`] and [`egress`].
#![forbid(unsafe_code)]

pub mod call;
pub mod egress;
pub mod policy;
pub mod stay;
pub mod verdict;

pub use call::{parse_call, ToolCall, MAX_CALL_BYTES, MAX_DEPTH};
pub use policy::{Policy, PolicyError, ToolKind};
pub use verdict::{Verdict, VerdictKind};

/// Classifies a parsed call under `policy`.
pub fn classify(call: &ToolCall, policy: &Policy) -> Verdict {
    match policy.kind_of(&call.tool) {
        None => Verdict::drop(
            "unknown_tool",
            "the tool is not registered; unknown tools run as the user",
        ),
        Some(kind) if kind.has_side_effects() => Verdict::drop(
            "side_effect",
            "the tool has side effects; it runs as the user",
        ),
        Some(kind) if !policy.may_stay(kind) => Verdict::drop(
            "stay_disabled",
            "the policy does not let this read stay; it runs as the user",
        ),
        Some(_) => stay::judge_read(call, policy),
    }
}

/// Parses raw bytes and classifies them: the entry point for untrusted input.
pub fn classify_raw(raw: &[u8], policy: &Policy) -> (Option<ToolCall>, Verdict) {
    match parse_call(raw) {
        Ok(call) => {
            let verdict = classify(&call, policy);
            (Some(call), verdict)
        }
        Err(refusal) => (None, refusal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_effects_and_unknown_drop_and_a_public_read_stays() {
        let policy = Policy::default();
        for (raw, want) in [
            (
                r#"{"tool":"shell","args":{"command":"id"}}"#,
                VerdictKind::Drop,
            ),
            (
                r#"{"tool":"http_get","args":{"url":"https://example.com/"}}"#,
                VerdictKind::Stay,
            ),
            (
                r#"{"tool":"http_get","args":{"url":"http://127.0.0.1/"}}"#,
                VerdictKind::Drop,
            ),
            (
                r#"{"tool":"Http_Get","args":{"url":"https://example.com/"}}"#,
                VerdictKind::Drop,
            ),
            (r#"{"tool":"made_up","args":{}}"#, VerdictKind::Drop),
        ] {
            let (_, v) = classify_raw(raw.as_bytes(), &policy);
            assert_eq!(v.kind(), want, "{raw}: {v:?}");
        }
    }
}
