//! A sign-in's link and code, read only from the sign-in's own output
//! pipes and judged before anyone is shown them.
//!
//! Guarantees: reading is bounded in bytes ([`DEFAULT_MAX_BYTES`] unless
//! the caller asks for less); a link counts only once its line is complete
//! (a newline or the end of the output), so a link written in two pieces is
//! judged whole; terminal escapes are stripped first; the first link
//! printed is judged, and a [`SignInPrompt`] is returned only when it is
//! `https`, has no userinfo and no explicit port, and its host is exactly
//! one of the provider's sign-in hosts (no punycode look-alike, no suffix
//! or prefix match); any other link is its own [`SignInError`].
#![forbid(unsafe_code)]

use serde::Serialize;

use super::signin_error::SignInError;
use crate::drop::spawn::Stream;
use crate::env::ProviderSpec;

/// Default cap on what is read while looking for the link.
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024;
/// The longest token taken for a user code.
const MAX_CODE_LEN: usize = 40;

/// What the person is shown: a checked link and the code to enter there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignInPrompt {
    /// The verification link, as parsed and checked.
    pub url: String,
    /// The user code, when the provider prints one.
    pub code: Option<String>,
}

/// Judges one link against the provider's sign-in hosts.
pub fn check_link(text: &str, hosts: &[String]) -> Result<String, SignInError> {
    let url =
        url::Url::parse(text).map_err(|e| SignInError::LinkUnparsable(format!("{text:?}: {e}")))?;
    match url.scheme() {
        "https" => {}
        "http" => return Err(SignInError::LinkNotHttps(url.to_string())),
        other => return Err(SignInError::LinkScheme(other.to_owned())),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(SignInError::LinkUserinfo(url.to_string()));
    }
    // `url` drops a default port (`:443`); one left is another port.
    if url.port().is_some() {
        return Err(SignInError::LinkPort(url.to_string()));
    }
    let host = match url.host() {
        Some(url::Host::Domain(d)) => d.to_owned(),
        Some(other) => other.to_string(),
        None => return Err(SignInError::LinkUnparsable(format!("{text:?} has no host"))),
    };
    if hosts.contains(&host) {
        return Ok(url.to_string());
    }
    if host.split('.').any(|label| label.starts_with("xn--")) {
        return Err(SignInError::LinkIdna(host));
    }
    if let Some(allowed) = hosts.iter().find(|h| {
        host.strip_prefix(h.as_str())
            .is_some_and(|rest| rest.len() > 1 && rest.starts_with('.'))
    }) {
        return Err(SignInError::LinkHostPrefix {
            host,
            allowed: allowed.clone(),
        });
    }
    let after_host = &url[url::Position::AfterPort..];
    let where_ = match hosts.iter().find(|h| after_host.contains(h.as_str())) {
        Some(h) => format!(" ({h} appears only in the path or query)"),
        None => String::new(),
    };
    Err(SignInError::LinkHost {
        host,
        allowed: hosts.to_vec(),
        where_,
    })
}

/// Removes terminal escape sequences (CSI, OSC, two-byte) and control
/// characters other than tab.
fn strip_escapes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            match chars.next() {
                Some('[') => {
                    // CSI: parameters, then one final byte in @..~.
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    // OSC: up to BEL or ESC '\'.
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' {
                            break;
                        }
                        if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                            chars.next();
                            break;
                        }
                    }
                }
                _ => {}
            }
        } else if c == '\t' || !c.is_control() {
            out.push(c);
        }
    }
    out
}

fn is_link(token: &str) -> bool {
    let lower = token.to_ascii_lowercase();
    lower.contains("://")
        || [
            "http:",
            "https:",
            "javascript:",
            "data:",
            "vbscript:",
            "file:",
            "ftp:",
        ]
        .iter()
        .any(|s| lower.starts_with(s))
}

fn is_code(token: &str) -> bool {
    let groups: Vec<&str> = token.split('-').collect();
    token.len() <= MAX_CODE_LEN
        && groups.len() >= 2
        && groups.iter().all(|g| {
            (3..=12).contains(&g.len())
                && g.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        })
}

/// Finds the link and code in a sign-in's output, one complete line at a
/// time, per stream.
#[derive(Debug)]
pub struct LinkScanner {
    hosts: Vec<String>,
    needs_code: bool,
    max_bytes: usize,
    seen: usize,
    pending: [Vec<u8>; 2],
    link: Option<String>,
    code: Option<String>,
}

impl LinkScanner {
    /// A scanner for `spec`'s sign-in, reading at most `max_bytes`.
    pub fn new(spec: &ProviderSpec, max_bytes: usize) -> Self {
        Self {
            hosts: spec.sign_in_hosts.clone(),
            needs_code: spec.sign_in_code,
            max_bytes,
            seen: 0,
            pending: [Vec::new(), Vec::new()],
            link: None,
            code: None,
        }
    }

    /// Takes one chunk of `stream`; a prompt once link and code are whole.
    pub fn feed(
        &mut self,
        stream: Stream,
        chunk: &[u8],
    ) -> Result<Option<SignInPrompt>, SignInError> {
        self.seen = self.seen.saturating_add(chunk.len());
        if self.seen > self.max_bytes {
            return Err(SignInError::TooMuchOutput(self.max_bytes));
        }
        let slot = match stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        };
        self.pending[slot].extend_from_slice(chunk);
        while let Some(end) = self.pending[slot].iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending[slot].drain(..=end).collect();
            self.line(&line)?;
        }
        Ok(self.prompt())
    }

    /// The output has ended: what is left is a last, complete line.
    pub fn finish(&mut self) -> Result<Option<SignInPrompt>, SignInError> {
        for slot in 0..2 {
            let rest = std::mem::take(&mut self.pending[slot]);
            self.line(&rest)?;
        }
        Ok(self.prompt())
    }

    fn line(&mut self, bytes: &[u8]) -> Result<(), SignInError> {
        let text = strip_escapes(&String::from_utf8_lossy(bytes));
        for raw in text.split_whitespace() {
            let token = raw
                .trim_start_matches(['<', '(', '[', '{', '"', '\''])
                .trim_end_matches(['>', ')', ']', '}', '"', '\'', '.', ',', ';', ':', '!', '?']);
            if self.link.is_none() && is_link(token) {
                self.link = Some(check_link(token, &self.hosts)?);
            } else if self.needs_code && self.code.is_none() && is_code(token) {
                self.code = Some(token.to_owned());
            }
        }
        Ok(())
    }

    fn prompt(&self) -> Option<SignInPrompt> {
        let url = self.link.clone()?;
        if self.needs_code && self.code.is_none() {
            return None;
        }
        Some(SignInPrompt {
            url,
            code: self.code.clone(),
        })
    }

    /// The error of a sign-in that ended (`how`) before a prompt: no code
    /// when a link was seen, else no link.
    pub(super) fn missing(&self, how: String) -> SignInError {
        if self.link.is_some() {
            SignInError::NoCode(how)
        } else {
            SignInError::NoLink(how)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::Provider;

    fn openai() -> ProviderSpec {
        ProviderSpec::builtin(Provider::Openai)
    }

    fn scan(chunks: &[&str]) -> Result<Option<SignInPrompt>, SignInError> {
        let mut s = LinkScanner::new(&openai(), DEFAULT_MAX_BYTES);
        for c in chunks {
            if let Some(p) = s.feed(Stream::Stdout, c.as_bytes())? {
                return Ok(Some(p));
            }
        }
        s.finish()
    }

    #[test]
    fn links_are_judged_whole_and_exactly() {
        let good = "Open https://auth.openai.com/codex/device\nEnter code ABCD-12345\n";
        let p = scan(&[good]).unwrap().unwrap();
        assert_eq!(p.url, "https://auth.openai.com/codex/device");
        assert_eq!(p.code.as_deref(), Some("ABCD-12345"));
        let cases: &[(&str, &str)] = &[
            (
                "https://auth.openai.com.evil.example/x ABCD-12345\n",
                "link_host_prefix",
            ),
            (
                "https://evil.example/auth.openai.com ABCD-12345\n",
                "link_host",
            ),
            (
                "https://auth.openai.com@evil.example/ ABCD-12345\n",
                "link_userinfo",
            ),
            (
                "http://auth.openai.com/codex/device ABCD-12345\n",
                "link_not_https",
            ),
            ("https://xn--uth-8cd.openai.com/ ABCD-12345\n", "link_idna"),
            ("https://аuth.openai.com/ ABCD-12345\n", "link_idna"),
            ("javascript:alert(1) ABCD-12345\n", "link_scheme"),
            ("https://auth.openai.com:8443/x ABCD-12345\n", "link_port"),
            ("https://AUTH.OPENAI.COM./x ABCD-12345\n", "link_host"),
            ("https://[::1]/x ABCD-12345\n", "link_host"),
        ];
        for (text, code) in cases {
            assert_eq!(scan(&[text]).unwrap_err().code(), *code, "{text}");
        }
        // Uppercase and the default port normalise to the allowed host.
        let p = scan(&["https://AUTH.openai.com:443/d ABCD-12345\n"])
            .unwrap()
            .unwrap();
        assert_eq!(p.url, "https://auth.openai.com/d");
    }

    #[test]
    fn a_link_in_two_writes_is_judged_once_its_line_ends() {
        let split = [
            "Open https://auth.openai.com",
            ".evil.example/device\nABCD-12345\n",
        ];
        assert_eq!(scan(&split).unwrap_err().code(), "link_host_prefix");
        let benign = [
            "Open https://auth.openai.com/codex/dev",
            "ice\nABCD-12345\n",
        ];
        let p = scan(&benign).unwrap().unwrap();
        assert_eq!(p.url, "https://auth.openai.com/codex/device");
    }

    #[test]
    fn escapes_are_stripped_and_output_is_bounded() {
        let coloured = "\u{1b}[94mhttps://auth.openai.com/codex/device\u{1b}[0m\n\u{1b}]8;;x\u{7}ABCD-12345\u{1b}]8;;\u{1b}\\\n";
        let p = scan(&[coloured]).unwrap().unwrap();
        assert_eq!(p.url, "https://auth.openai.com/codex/device");
        assert_eq!(p.code.as_deref(), Some("ABCD-12345"));
        let mut s = LinkScanner::new(&openai(), 1000);
        let noise = "x".repeat(600);
        assert!(s.feed(Stream::Stdout, noise.as_bytes()).unwrap().is_none());
        assert_eq!(
            s.feed(Stream::Stderr, noise.as_bytes()).unwrap_err().code(),
            "too_much_output"
        );
    }

    #[test]
    fn a_link_without_a_code_is_not_a_prompt() {
        let mut s = LinkScanner::new(&openai(), DEFAULT_MAX_BYTES);
        assert!(s
            .feed(Stream::Stdout, b"https://auth.openai.com/d\n")
            .unwrap()
            .is_none());
        assert!(s.finish().unwrap().is_none());
        assert_eq!(s.missing("x".into()).code(), "no_code");
        // Anthropic prints no code: the link alone is the prompt.
        let mut a = LinkScanner::new(&ProviderSpec::builtin(Provider::Anthropic), 4096);
        let p = a
            .feed(
                Stream::Stderr,
                b"Visit https://claude.ai/oauth/authorize?x=1\n",
            )
            .unwrap()
            .unwrap();
        assert_eq!(p.code, None);
    }
}
