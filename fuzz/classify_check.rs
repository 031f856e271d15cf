//! The classifier fuzz target's body, shared by the libFuzzer target
//! (`fuzz/fuzz_targets/classify.rs`, `cargo fuzz run classify`) and the
//! seeded corpus run on stable (`tests/classify_fuzz_corpus.rs`), each of
//! which includes this file with `#[path]`, so the two cannot drift.
//!
//! [`check`] feeds raw bytes to the classifier. It must never panic, and
//! every `Stay` must also pass [`reference_stay`], a slower check written
//! separately from the classifier: its own duplicate-key walk, std's
//! `IpAddr` predicates instead of our range table, and plain string rules
//! for names. And the call parser, which reads the top level without a
//! map, must agree with [`via_value`]: the strict parser's whole `Value`,
//! then the same field rules — same call, or the same refusal code.

use std::collections::HashSet;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::de::{self, Deserializer as _, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use tono_seal::classify::call::parse_strict_json;
use tono_seal::classify::{classify_raw, parse_call, Policy, ToolCall, VerdictKind};

/// One input through the classifier and both references; panics on a
/// disagreement. Returns the verdict, and whether the call parser read a
/// call, for a caller that counts them.
pub fn check(data: &[u8]) -> (VerdictKind, bool) {
    let direct = parse_call(data).map_err(|v| v.code());
    let reread = via_value(data);
    assert_eq!(direct, reread, "parse_call and the Value reading disagree");
    let policy = Policy::default();
    let (_, verdict) = classify_raw(data, &policy);
    let kind = verdict.kind();
    if kind == VerdictKind::Stay {
        if let Err(why) = reference_stay(data) {
            panic!("Stay, but the reference check says: {why}");
        }
    }
    (kind, direct.is_ok())
}

/// The call as read from the strict parser's whole `Value`.
fn via_value(data: &[u8]) -> Result<ToolCall, &'static str> {
    if data.len() > tono_seal::classify::MAX_CALL_BYTES {
        return Err("call_too_large");
    }
    let Value::Object(mut top) = parse_strict_json(data).map_err(|v| v.code())? else {
        return Err("call_not_object");
    };
    let tool = match top.remove("tool") {
        Some(Value::String(s)) => s,
        Some(_) => return Err("tool_not_string"),
        None => return Err("tool_missing"),
    };
    let args = match top.remove("args") {
        Some(Value::Object(m)) => m,
        Some(_) => return Err("args_not_object"),
        None => return Err("args_missing"),
    };
    if !top.is_empty() {
        return Err("call_unknown_field");
    }
    Ok(ToolCall { tool, args })
}

/// The slow reference: may these bytes stay under the default policy?
fn reference_stay(data: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(data).map_err(|_| "not UTF-8")?;
    let mut de = serde_json::Deserializer::from_str(text);
    let depth = de
        .deserialize_any(NoDuplicates)
        .map_err(|e| format!("duplicate or bad JSON: {e}"))?;
    if depth > 32 {
        return Err(format!("nesting {depth}"));
    }
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let top = v.as_object().ok_or("not an object")?;
    if top.len() != 2 {
        return Err("top level is not exactly tool and args".into());
    }
    if !matches!(
        top.get("tool").and_then(Value::as_str),
        Some("http_get" | "http_head")
    ) {
        return Err("not a read tool".into());
    }
    let args = top.get("args").and_then(Value::as_object).ok_or("args")?;
    if args.keys().any(|k| k != "url" && k != "headers") {
        return Err("extra argument".into());
    }
    if let Some(headers) = args.get("headers") {
        for (name, value) in headers.as_object().ok_or("headers not an object")? {
            let name = name.to_ascii_lowercase();
            if ["host", "forwarded", "authorization", "cookie", "via"].contains(&name.as_str())
                || name.starts_with("x-forwarded-")
                || name.starts_with("proxy-")
            {
                return Err(format!("header {name}"));
            }
            let value = value.as_str().ok_or("header not a string")?;
            if value.contains(['\r', '\n', '\0']) {
                return Err("header with a line break".into());
            }
        }
    }
    let raw = args.get("url").and_then(Value::as_str).ok_or("url")?;
    let url = url::Url::parse(raw).map_err(|e| e.to_string())?;
    match (url.scheme(), url.port_or_known_default()) {
        ("http", Some(80)) | ("https", Some(443)) => {}
        other => return Err(format!("scheme/port {other:?}")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("userinfo".into());
    }
    match url.host().ok_or("no host")? {
        url::Host::Ipv4(a) => public_v4(a),
        url::Host::Ipv6(a) => public_v6(a),
        url::Host::Domain(d) => public_name(d),
    }
}

fn public_v4(a: Ipv4Addr) -> Result<(), String> {
    let [x, y, ..] = a.octets();
    let bad = a.is_private()
        || a.is_loopback()
        || a.is_link_local()
        || a.is_broadcast()
        || a.is_documentation()
        || a.is_unspecified()
        || a.is_multicast()
        || x == 0
        || x >= 240
        || (x == 100 && (64..128).contains(&y))
        || (x == 198 && (y == 18 || y == 19))
        || (x == 192 && y == 0 && a.octets()[2] == 0);
    if bad {
        Err(format!("{a} is not public"))
    } else {
        Ok(())
    }
}

fn public_v6(a: Ipv6Addr) -> Result<(), String> {
    if let Some(v4) = a.to_ipv4_mapped() {
        return public_v4(v4);
    }
    let s = a.segments();
    if s[0] == 0x64 && s[1] == 0xff9b {
        return public_v4(Ipv4Addr::from(u128::from(a) as u32));
    }
    if s[0] & 0xe000 != 0x2000 || s[0] == 0x2002 || (s[0] == 0x2001 && s[1] == 0xdb8) {
        return Err(format!("{a} is not public"));
    }
    Ok(())
}

fn public_name(d: &str) -> Result<(), String> {
    let name = d.strip_suffix('.').unwrap_or(d);
    if !name.contains('.') {
        return Err(format!("{d} has one label"));
    }
    for suffix in ["localhost", "local", "internal"] {
        if name == suffix || name.ends_with(&format!(".{suffix}")) {
            return Err(format!("{d} is internal"));
        }
    }
    if name.parse::<Ipv4Addr>().is_ok()
        || name
            .rsplit('.')
            .next()
            .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(format!("{d} looks numeric"));
    }
    Ok(())
}

/// Walks any JSON value, failing on a repeated key in an object; yields the
/// depth.
struct NoDuplicates;

impl<'de> de::DeserializeSeed<'de> for NoDuplicates {
    type Value = usize;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NoDuplicates {
    type Value = usize;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_i64<E>(self, _: i64) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_u64<E>(self, _: u64) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_f64<E>(self, _: f64) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_str<E>(self, _: &str) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_unit<E>(self) -> Result<usize, E> {
        Ok(0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut deepest = 0;
        while let Some(d) = seq.next_element_seed(NoDuplicates)? {
            deepest = deepest.max(d);
        }
        Ok(deepest + 1)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let mut seen = HashSet::new();
        let mut deepest = 0;
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("key {key:?} twice")));
            }
            deepest = deepest.max(map.next_value_seed(NoDuplicates)?);
        }
        Ok(deepest + 1)
    }
}
