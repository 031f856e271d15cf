//! Strict parsing of a raw tool call: `{"tool": NAME, "args": {...}}`.
//!
//! Refused: over [`MAX_CALL_BYTES`], invalid UTF-8, invalid JSON, a
//! duplicate key at any level (serde_json would silently keep the last one,
//! which is how a second `url` is smuggled), nesting deeper than
//! [`MAX_DEPTH`], a `tool` that is not a string, `args` that is not an
//! object, and any other top-level field.
#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::Verdict;

/// The largest call accepted, in bytes.
pub const MAX_CALL_BYTES: usize = 1024 * 1024;
/// The deepest nesting of arrays and objects accepted.
pub const MAX_DEPTH: usize = 32;

/// A strictly parsed tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The tool's name, exactly as sent.
    pub tool: String,
    /// Its arguments.
    pub args: Map<String, Value>,
}

/// Parses `raw` or returns the `Refuse` verdict that says why not.
pub fn parse_call(raw: &[u8]) -> Result<ToolCall, Verdict> {
    if raw.len() > MAX_CALL_BYTES {
        return Err(Verdict::refuse(
            "call_too_large",
            format!("the call is over {MAX_CALL_BYTES} bytes"),
        ));
    }
    let text = checked_text(raw)?;
    let mut de = serde_json::Deserializer::from_str(text);
    let top = TopLevel
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(json_refusal)?;
    let Top::Object {
        tool,
        args,
        first_unknown,
    } = top
    else {
        return Err(Verdict::refuse(
            "call_not_object",
            "the call must be a JSON object",
        ));
    };
    let tool = match tool {
        Some(Value::String(s)) => s,
        Some(_) => {
            return Err(Verdict::refuse(
                "tool_not_string",
                "`tool` must be a string",
            ))
        }
        None => return Err(Verdict::refuse("tool_missing", "the call has no `tool`")),
    };
    let args = match args {
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(Verdict::refuse(
                "args_not_object",
                "`args` must be an object",
            ))
        }
        None => {
            return Err(Verdict::refuse(
                "args_missing",
                "the call has no `args` object",
            ))
        }
    };
    if let Some(extra) = first_unknown {
        return Err(Verdict::refuse(
            "call_unknown_field",
            format!(
                "unknown top-level field {:?}",
                extra.escape_debug().to_string()
            ),
        ));
    }
    Ok(ToolCall { tool, args })
}

/// Parses JSON text refusing invalid UTF-8, duplicate keys at any level and
/// nesting deeper than [`MAX_DEPTH`]; the error is a `Refuse` verdict.
pub fn parse_strict_json(raw: &[u8]) -> Result<Value, Verdict> {
    let text = checked_text(raw)?;
    let mut de = serde_json::Deserializer::from_str(text);
    StrictValue { depth: 0 }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(json_refusal)
}

/// The checks before any value is built: UTF-8, and nesting depth.
fn checked_text(raw: &[u8]) -> Result<&str, Verdict> {
    let text = std::str::from_utf8(raw)
        .map_err(|_| Verdict::refuse("call_not_utf8", "the call is not valid UTF-8"))?;
    // Counting brackets is a vectorised pass; only a call with more
    // brackets than the limit needs the exact scan.
    if raw.iter().filter(|&&b| b == b'[' || b == b'{').count() > MAX_DEPTH
        && nesting_depth(raw) > MAX_DEPTH
    {
        return Err(Verdict::refuse(
            "call_too_deep",
            format!("{TOO_DEEP} {MAX_DEPTH}"),
        ));
    }
    Ok(text)
}

/// The `Refuse` verdict for an error of the strict parser.
fn json_refusal(e: serde_json::Error) -> Verdict {
    let msg = e.to_string();
    if msg.contains(DUPLICATE) {
        Verdict::refuse("call_duplicate_key", msg)
    } else if msg.contains(TOO_DEEP) {
        Verdict::refuse("call_too_deep", msg)
    } else {
        Verdict::refuse("call_not_json", msg)
    }
}

/// The deepest nesting of `[` and `{` outside strings, found by one scan
/// before any value is built: a deep call is refused without building (and
/// then dropping) 32 levels of maps. Exact for valid JSON; for invalid JSON
/// the parser refuses anyway. [`StrictValue`] checks depth again.
fn nesting_depth(raw: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in raw {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

const DUPLICATE: &str = "duplicate key";
const TOO_DEEP: &str = "nesting deeper than";

/// Deserializes a JSON value, refusing duplicate keys and deep nesting.
struct StrictValue {
    depth: usize,
}

impl StrictValue {
    fn nested<E: de::Error>(&self) -> Result<StrictValue, E> {
        if self.depth >= MAX_DEPTH {
            return Err(E::custom(format!("{TOO_DEEP} {MAX_DEPTH}")));
        }
        Ok(StrictValue {
            depth: self.depth + 1,
        })
    }
}

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let inner = self.nested()?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(StrictValue { depth: inner.depth })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let inner = self.nested()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match out.entry(key) {
                serde_json::map::Entry::Occupied(seen) => {
                    return Err(duplicate(seen.key()));
                }
                serde_json::map::Entry::Vacant(slot) => {
                    slot.insert(map.next_value_seed(StrictValue { depth: inner.depth })?);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

/// The call's top level, parsed without building a map for it: the two
/// known fields and the first unknown one. Every value is still parsed by
/// [`StrictValue`], so whatever the strict parser refuses anywhere
/// (duplicate keys, depth, syntax) is refused first, exactly as by
/// [`parse_strict_json`].
enum Top {
    Object {
        tool: Option<Value>,
        args: Option<Value>,
        first_unknown: Option<String>,
    },
    NotObject,
}

struct TopLevel;

impl<'de> DeserializeSeed<'de> for TopLevel {
    type Value = Top;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Top, D::Error> {
        d.deserialize_any(self)
    }
}

fn duplicate<E: de::Error>(key: &str) -> E {
    E::custom(format!("{DUPLICATE} {:?}", key.escape_debug().to_string()))
}

impl<'de> Visitor<'de> for TopLevel {
    type Value = Top;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Top, E> {
        Ok(Top::NotObject)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Top, E> {
        Ok(Top::NotObject)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Top, E> {
        Ok(Top::NotObject)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Top, E> {
        Ok(Top::NotObject)
    }
    fn visit_str<E>(self, _: &str) -> Result<Top, E> {
        Ok(Top::NotObject)
    }
    fn visit_unit<E>(self) -> Result<Top, E> {
        Ok(Top::NotObject)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Top, A::Error> {
        // Parsed in full: a duplicate key inside is still reported as one.
        StrictValue { depth: 0 }
            .visit_seq(seq)
            .map(|_| Top::NotObject)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        let inner = StrictValue { depth: 0 }.nested()?;
        let (mut tool, mut args) = (None, None);
        // Unknown keys are kept only to find a duplicate among them (which
        // is refused as one, like anywhere else); a set, so a 1 MiB call of
        // distinct keys costs O(n log n), not O(n²).
        let mut first_unknown = None;
        let mut unknown: BTreeSet<Cow<'de, str>> = BTreeSet::new();
        // Keys arrive unescaped: `"\u0074ool"` is `tool`.
        while let Some(key) = map.next_key_seed(Key)? {
            let slot = match key.as_ref() {
                "tool" => &mut tool,
                "args" => &mut args,
                _ => {
                    if unknown.contains(&key) {
                        return Err(duplicate(&key));
                    }
                    first_unknown.get_or_insert_with(|| key.clone().into_owned());
                    unknown.insert(key);
                    map.next_value_seed(StrictValue { depth: inner.depth })?;
                    continue;
                }
            };
            if slot.is_some() {
                return Err(duplicate(&key));
            }
            *slot = Some(map.next_value_seed(StrictValue { depth: inner.depth })?);
        }
        Ok(Top::Object {
            tool,
            args,
            first_unknown,
        })
    }
}

/// A map key, borrowed from the input when it holds no escape.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::VerdictKind;

    fn refused(raw: &[u8]) -> &'static str {
        let v = parse_call(raw).unwrap_err();
        assert_eq!(v.kind(), VerdictKind::Refuse);
        v.code()
    }

    #[test]
    fn parses_a_call() {
        let c = parse_call(br#"{"tool":"shell","args":{"command":"id"}}"#).unwrap();
        assert_eq!(c.tool, "shell");
        assert_eq!(c.args["command"], "id");
    }

    #[test]
    fn refuses_duplicates_at_any_level() {
        assert_eq!(
            refused(br#"{"tool":"a","tool":"b","args":{}}"#),
            "call_duplicate_key"
        );
        assert_eq!(
            refused(br#"{"tool":"a","args":{"url":"x","url":"y"}}"#),
            "call_duplicate_key"
        );
        assert_eq!(
            refused(br#"{"tool":"a","args":{"h":[{"k":1,"k":2}]}}"#),
            "call_duplicate_key"
        );
        // An escaped spelling of the same key is the same key.
        assert_eq!(
            refused(br#"{"tool":"a","args":{"url":"x","\u0075rl":"y"}}"#),
            "call_duplicate_key"
        );
    }

    #[test]
    fn the_top_level_is_read_by_meaning_and_refused_as_the_whole_value_would_be() {
        // An escaped key is the key it spells, for use and for duplicates.
        let c = parse_call(br#"{"\u0074ool":"shell","\u0061rgs":{}}"#).unwrap();
        assert_eq!(c.tool, "shell");
        let cases: [(&[u8], &str); 12] = [
            (
                br#"{"tool":"a","\u0074ool":"b","args":{}}"#,
                "call_duplicate_key",
            ),
            (br#"{"args":{},"args":{},"tool":"a"}"#, "call_duplicate_key"),
            (
                br#"{"tool":"a","args":{},"x":1,"x":2}"#,
                "call_duplicate_key",
            ),
            // A value refused anywhere is refused before the shape is judged.
            (
                br#"{"x":1,"tool":"a","args":{},"y":{"k":1,"k":2}}"#,
                "call_duplicate_key",
            ),
            (br#"[{"k":1,"k":2}]"#, "call_duplicate_key"),
            (br#"{"tool":7,"x":{"k":1,"k":2}}"#, "call_duplicate_key"),
            (br#"{"tool":"a","x":1}"#, "args_missing"),
            (br#"{"args":{}}"#, "tool_missing"),
            (br#""{\"tool\":\"a\"}""#, "call_not_object"),
            (b"null", "call_not_object"),
            (br#"{"tool":"a","args":{}"#, "call_not_json"),
            (br#"{"tool":"a","args":{}}{}"#, "call_not_json"),
        ];
        for (raw, code) in cases {
            assert_eq!(refused(raw), code, "{}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn a_call_of_a_hundred_thousand_distinct_unknown_keys_is_refused() {
        // Once O(n²) (12 s in release); the classify bench times it.
        let raw = many_unknown_keys();
        assert_eq!(refused(raw.as_bytes()), "call_unknown_field");
        let dup = raw.replacen("\"k1\":", "\"k0\":", 1);
        assert_eq!(refused(dup.as_bytes()), "call_duplicate_key");
    }

    /// A call just under [`MAX_CALL_BYTES`] of distinct unknown top-level
    /// keys before `tool` and `args`.
    fn many_unknown_keys() -> String {
        let mut s = String::from("{");
        let mut i = 0;
        while s.len() < MAX_CALL_BYTES - 32 {
            s.push_str(&format!("\"k{i}\":0,"));
            i += 1;
        }
        s + "\"tool\":\"a\",\"args\":{}}"
    }

    #[test]
    fn refuses_depth_size_and_shapes() {
        let deep = format!(
            "{{\"tool\":\"a\",\"args\":{{\"x\":{}{}}}}}",
            "[".repeat(40),
            "]".repeat(40)
        );
        assert_eq!(refused(deep.as_bytes()), "call_too_deep");
        // Exactly MAX_DEPTH levels parse; brackets inside strings (escaped
        // quotes included) do not count.
        let at_limit = format!(
            "{{\"tool\":\"a\",\"args\":{{\"x\":\"\\\"[[[[\",\"y\":{}{}}}}}",
            "[".repeat(MAX_DEPTH - 2),
            "]".repeat(MAX_DEPTH - 2)
        );
        assert!(parse_call(at_limit.as_bytes()).is_ok(), "{at_limit}");
        assert_eq!(nesting_depth(at_limit.as_bytes()), MAX_DEPTH);
        let big = format!(
            "{{\"tool\":\"a\",\"args\":{{\"x\":\"{}\"}}}}",
            "a".repeat(MAX_CALL_BYTES)
        );
        assert_eq!(refused(big.as_bytes()), "call_too_large");
        assert_eq!(refused(b"\xff"), "call_not_utf8");
        assert_eq!(refused(b"{"), "call_not_json");
        assert_eq!(refused(b"[]"), "call_not_object");
        assert_eq!(refused(br#"{"tool":1,"args":{}}"#), "tool_not_string");
        assert_eq!(refused(br#"{"tool":"a","args":[]}"#), "args_not_object");
        assert_eq!(
            refused(br#"{"tool":"a","args":{},"x":1}"#),
            "call_unknown_field"
        );
        assert_eq!(
            refused(br#"{"tool":"a","args":{}} trailing"#),
            "call_not_json"
        );
    }
}
