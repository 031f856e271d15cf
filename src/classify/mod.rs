//! The tool-call classifier: whether a call may run inside the root worker
//! (`Stay`), must run as its user (`Drop`), or must not run (`Refuse`).
//!
//! Guarantees: pure (no I/O); fails closed — a call that does not parse
//! strictly is refused, an unknown tool or any side-effecting kind drops,
//! and only a registered read tool whose every argument passes can stay.
//! Until the egress rules of the read tool land, no call stays: read tools
//! drop too, which is the safe side of the seam.
#![forbid(unsafe_code)]

pub mod call;
pub mod policy;
pub mod verdict;

pub use call::{parse_call, ToolCall, MAX_CALL_BYTES, MAX_DEPTH};
pub use policy::{Policy, ToolKind};
pub use verdict::{Verdict, VerdictKind};

/// Classifies a parsed call under `policy`.
pub fn classify(call: &ToolCall, policy: &Policy) -> Verdict {
    match policy.kind_of(&call.tool) {
        None => Verdict::drop("unknown_tool", "the tool is not registered; unknown tools run as the user"),
        Some(kind) if kind.has_side_effects() => Verdict::drop("side_effect", "the tool has side effects; it runs as the user"),
        Some(_) => Verdict::drop(
            "read_not_verified",
            "read tools stay only after the egress check, which this build does not make; it runs as the user",
        ),
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
    fn nothing_stays_and_unknown_drops() {
        let policy = Policy::default();
        for raw in [
            r#"{"tool":"shell","args":{"command":"id"}}"#,
            r#"{"tool":"http_get","args":{"url":"https://example.com/"}}"#,
            r#"{"tool":"Http_Get","args":{}}"#,
            r#"{"tool":"made_up","args":{}}"#,
        ] {
            let (_, v) = classify_raw(raw.as_bytes(), &policy);
            assert_eq!(v.kind(), VerdictKind::Drop, "{raw}");
        }
    }
}
