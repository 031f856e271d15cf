//! The record of what a call's broker did: one [`BrokerUse`] per request it
//! intercepted or refused, for the call's `Outcome` and receipt.
//!
//! Guarantees: a record names secrets, never holds a value or a
//! placeholder: its path is the request's path without its query,
//! decoded, with every placeholder in it replaced by `{secret_name}`, and
//! so is its host ([`host_for_record`])
//! ([`path_for_record`]). The log is bounded ([`MAX_USES`] records, then
//! one summary per secrets, host and refusal, [`MAX_SUMMARIES`] of them,
//! then a count), so ten thousand requests do not grow it without end,
//! and no use is ever silently forgotten: a use past every bound is
//! counted in [`UseLog::uncounted`].
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

use super::substitute::BoundSecret;

/// What the broker did with one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerUse {
    /// The secrets whose values were put in (names; empty for a refusal
    /// or a request that carried none).
    pub secrets: Vec<String>,
    /// The host the request was for.
    pub host: String,
    /// The request's method (`*` in a summary).
    pub method: String,
    /// The request's path without its query (`*` in a summary).
    pub path: String,
    /// The status the tool got.
    pub status: u16,
    /// Body bytes sent to the host.
    pub bytes_up: u64,
    /// Body bytes sent to the tool.
    pub bytes_down: u64,
    /// The refusal's code (`placeholder_not_bound`, …), or `None`.
    pub refused: Option<String>,
}

/// Records kept one per request.
pub const MAX_USES: usize = 1024;
/// Summaries kept past [`MAX_USES`].
pub const MAX_SUMMARIES: usize = 256;

/// The broker's records of one call.
#[derive(Debug, Default)]
pub struct UseLog {
    uses: Vec<BrokerUse>,
    summaries: Vec<BrokerUse>,
    /// Uses past both bounds, counted only.
    pub uncounted: u64,
}

impl UseLog {
    /// Adds one use.
    pub fn record(&mut self, u: BrokerUse) {
        if self.uses.len() < MAX_USES {
            self.uses.push(u);
            return;
        }
        if let Some(s) = self
            .summaries
            .iter_mut()
            .find(|s| s.secrets == u.secrets && s.host == u.host && s.refused == u.refused)
        {
            s.bytes_up = s.bytes_up.saturating_add(u.bytes_up);
            s.bytes_down = s.bytes_down.saturating_add(u.bytes_down);
            s.status = u.status;
        } else if self.summaries.len() < MAX_SUMMARIES {
            self.summaries.push(BrokerUse {
                method: "*".into(),
                path: "*".into(),
                ..u
            });
        } else {
            self.uncounted += 1;
        }
    }

    /// Every record: the uses, then the summaries.
    pub fn all(&self) -> Vec<BrokerUse> {
        self.uses.iter().chain(&self.summaries).cloned().collect()
    }
}

/// A request target's path for the record: no query, no fragment,
/// percent-decoded, and every placeholder in it replaced by `{name}`
/// (decoded first, so a placeholder however partly encoded is found).
pub fn path_for_record(target: &str, secrets: &[BoundSecret]) -> String {
    let path = target.split(['?', '#']).next().unwrap_or_default();
    let mut path = percent_encoding::percent_decode_str(path)
        .decode_utf8_lossy()
        .into_owned();
    for s in secrets {
        path = path.replace(&s.placeholder, &format!("{{{}}}", s.name));
    }
    path
}

/// A host for the record: a placeholder in it (a tool may make one a
/// label of a name, in any case) replaced by `{name}`.
pub fn host_for_record(host: &str, secrets: &[BoundSecret]) -> String {
    let mut host = host.to_ascii_lowercase();
    for s in secrets {
        let ph = s.placeholder.to_ascii_lowercase();
        host = host.replace(&ph, &format!("{{{}}}", s.name));
    }
    host
}

#[cfg(test)]
mod tests {
    use zeroize::Zeroizing;

    use super::*;
    use crate::env::Binding;

    fn use_(path: &str) -> BrokerUse {
        BrokerUse {
            secrets: vec!["t".into()],
            host: "h.example".into(),
            method: "GET".into(),
            path: path.into(),
            status: 200,
            bytes_up: 1,
            bytes_down: 2,
            refused: None,
        }
    }

    #[test]
    fn the_log_keeps_each_use_then_summaries_then_a_count() {
        let mut log = UseLog::default();
        for i in 0..MAX_USES + 10 {
            log.record(use_(&format!("/{i}")));
        }
        let all = log.all();
        assert_eq!(all.len(), MAX_USES + 1);
        assert_eq!(all[MAX_USES].path, "*");
        assert_eq!(
            all[MAX_USES].bytes_down, 20,
            "the ten past the bound summed"
        );
        for i in 0..MAX_SUMMARIES + 3 {
            let mut u = use_("/x");
            u.host = format!("h{i}.example");
            log.record(u);
        }
        assert_eq!(log.all().len(), MAX_USES + MAX_SUMMARIES);
        assert_eq!(log.uncounted, 4);
    }

    #[test]
    fn a_path_on_the_record_holds_no_placeholder_and_no_query() {
        let s = [BoundSecret {
            name: "github_token".into(),
            placeholder: "ghp_PLACEHOLDER+placeholder0123456789".into(),
            value: Zeroizing::new(b"ghp_REALVALUEsec+retvalue9876543210xy".to_vec()),
            binding: Binding {
                hosts: vec!["api.github.com".to_string()].try_into().unwrap(),
                body: false,
            },
        }];
        assert_eq!(
            path_for_record(
                "/a/ghp_PLACEHOLDER+placeholder0123456789/b?q=ghp_PLACEHOLDER",
                &s
            ),
            "/a/{github_token}/b"
        );
        assert_eq!(
            path_for_record("/a/ghp_PLACEHOLDER%2bplaceholder0123456789", &s),
            "/a/{github_token}"
        );
        assert_eq!(
            host_for_record("GHP_placeholder+PLACEHOLDER0123456789.evil.example", &s),
            "{github_token}.evil.example"
        );
    }
}
