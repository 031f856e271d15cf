//! Text that came from a record (a tool name, a secret name, any field a
//! caller could choose), made safe to print on the operator's terminal.
//!
//! Guarantees: what [`for_terminal`] and [`json_for_terminal`] return holds
//! no character a terminal acts on or shows as nothing: no C0 control, DEL
//! or C1 control (U+0080–U+009F: a lone CSI is an escape sequence on
//! some terminals), no Unicode format character (bidi embeddings,
//! overrides and isolates U+202A–U+202E, U+2066–U+2069, zero-width
//! U+200B–U+200F, U+2060–U+2064, U+FEFF, the tag characters, the rest of
//! general category Cf) and no line or paragraph separator (U+2028,
//! U+2029). [`for_terminal`] writes each as `\n`, `\r`, `\t`, `\xNN` (the
//! other ASCII ones) or `\u{NNNN}`, and a backslash as `\\`, so an escape
//! in the output always stands for the one character it names, never for
//! text that looked like it. [`json_for_terminal`] writes each inside a
//! JSON string as `\uNNNN` (a surrogate pair above U+FFFF) and turns each
//! outside one (JSON whitespace) into a space, so the line still parses to
//! the same value. Everything else, `é` and `日本` included, passes
//! unchanged.
#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::fmt::Write;

/// Unicode's format characters (general category Cf, Unicode 15.1).
const FORMAT: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Characters a terminal shows as nothing, or as a blank, that are not
/// format characters: Unicode's other default-ignorable code points
/// (combining grapheme joiner, Hangul fillers, Khmer inherent vowels,
/// Mongolian variation selectors, variation selectors, the unassigned
/// ignorables), the blank Braille pattern, and every space separator but
/// ASCII's (no-break, ogham, en/em/thin/hair spaces, narrow no-break,
/// medium mathematical, ideographic), the private-use areas and the
/// noncharacters (shown as a blank, a box or a font's own icon): each can
/// fake a column's width or a word's end.
const BLANK: &[(u32, u32)] = &[
    (0x00A0, 0x00A0),
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x1680, 0x1680),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x2000, 0x200A),
    (0x2065, 0x2065),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x2800, 0x2800),
    (0x3000, 0x3000),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0xE000, 0xF8FF),
    (0xFDD0, 0xFDEF),
    (0xE0000, 0xE0FFF),
    (0xF0000, 0x10FFFF),
];

/// Whether `c` is one that a terminal acts on or shows as nothing: a
/// control (C0, DEL, C1), a format character, or a line or paragraph
/// separator.
pub fn is_unprintable(c: char) -> bool {
    let n = u32::from(c);
    c.is_control()
        || n == 0x2028
        || n == 0x2029
        || FORMAT.iter().any(|&(lo, hi)| (lo..=hi).contains(&n))
        || BLANK.iter().any(|&(lo, hi)| (lo..=hi).contains(&n))
}

/// A name (a tool's, a user's, a secret's) for one column of a table:
/// [`for_terminal`], and an ASCII space as `\x20` too, so a name can never
/// look like the columns after it; cut after [`MAX_WORD_CHARS`].
pub fn word_for_terminal(text: &str) -> Cow<'_, str> {
    // A name longer than a column would need is cut before it is escaped
    // (never inside an escape), and says so; the whole is in `--json`.
    let count = text.chars().count();
    let (kept, cut) = match text.char_indices().nth(MAX_WORD_CHARS) {
        Some((at, _)) => (&text[..at], Some(count - MAX_WORD_CHARS)),
        None => (text, None),
    };
    let shown = match for_terminal(kept) {
        shown if shown.contains(' ') => Cow::Owned(shown.replace(' ', "\\x20")),
        shown => shown,
    };
    match cut {
        Some(n) => Cow::Owned(format!("{shown}…(+{n})")),
        None => shown,
    }
}

/// The most characters [`word_for_terminal`] shows of one name.
pub const MAX_WORD_CHARS: usize = 64;

/// `text` for a column of a table on a terminal: every unprintable
/// character and every backslash escaped (see the module's guarantees).
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c == '\\' || is_unprintable(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii() && is_unprintable(c) => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if is_unprintable(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// One line of JSON for a terminal: every unprintable character inside a
/// string as a `\uNNNN` escape, every one outside a string (only JSON's
/// whitespace can be there in valid JSON) as a space; the value it parses
/// to is unchanged.
pub fn json_for_terminal(line: &str) -> Cow<'_, str> {
    if !line.chars().any(is_unprintable) {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len() + 16);
    let (mut in_string, mut escaped) = (false, false);
    for c in line.chars() {
        if is_unprintable(c) {
            if in_string {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            } else {
                out.push(' ');
            }
            // An escape's next character is printable ASCII in valid JSON.
            escaped = false;
            continue;
        }
        out.push(c);
        if escaped {
            escaped = false;
        } else if in_string && c == '\\' {
            escaped = true;
        } else if c == '"' {
            in_string = !in_string;
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_and_utf8_pass_unchanged() {
        for text in ["shell", "tok", "é", "日本", "naïve café ✓ 🙂", "a b-c_d.e"] {
            assert!(matches!(for_terminal(text), Cow::Borrowed(_)), "{text}");
            let line = format!("{{\"tool\":\"{text}\"}}");
            assert_eq!(json_for_terminal(&line), line);
        }
    }

    #[test]
    fn c0_controls_del_and_a_backslash_are_escaped_in_a_column() {
        assert_eq!(
            for_terminal("x\n\x1b[31mROOT\x07\r\t\0\x7f\\y"),
            "x\\n\\x1b[31mROOT\\x07\\r\\t\\x00\\x7f\\\\y"
        );
        // Every C0 control and DEL.
        for n in (0u8..0x20).chain([0x7f]) {
            let shown = for_terminal(std::str::from_utf8(&[n]).unwrap()).into_owned();
            assert!(
                shown.starts_with('\\') && shown.is_ascii(),
                "{n:#x}: {shown}"
            );
            assert!(!shown.bytes().any(|b| b < 0x20 || b == 0x7f), "{n:#x}");
        }
    }

    #[test]
    fn c1_controls_are_escaped_in_a_column() {
        for n in 0x80u32..=0x9f {
            let c = char::from_u32(n).unwrap();
            assert_eq!(for_terminal(&c.to_string()), format!("\\u{{{n:x}}}"));
        }
    }

    #[test]
    fn bidi_zero_width_and_other_format_characters_are_escaped_in_a_column() {
        for (c, shown) in [
            ('\u{202e}', "\\u{202e}"),
            ('\u{202a}', "\\u{202a}"),
            ('\u{2066}', "\\u{2066}"),
            ('\u{2067}', "\\u{2067}"),
            ('\u{2068}', "\\u{2068}"),
            ('\u{2069}', "\\u{2069}"),
            ('\u{200b}', "\\u{200b}"),
            ('\u{200c}', "\\u{200c}"),
            ('\u{200d}', "\\u{200d}"),
            ('\u{200e}', "\\u{200e}"),
            ('\u{200f}', "\\u{200f}"),
            ('\u{2060}', "\\u{2060}"),
            ('\u{feff}', "\\u{feff}"),
            ('\u{ad}', "\\u{ad}"),
            ('\u{2028}', "\\u{2028}"),
            ('\u{2029}', "\\u{2029}"),
            ('\u{e0041}', "\\u{e0041}"),
        ] {
            assert_eq!(for_terminal(&format!("a{c}b")), format!("a{shown}b"));
        }
    }

    #[test]
    fn an_escape_in_a_column_is_unambiguous() {
        // The text `\x1b` and the character ESC are shown differently.
        assert_eq!(for_terminal("\\x1b"), "\\\\x1b");
        assert_eq!(for_terminal("\x1b"), "\\x1b");
        assert_ne!(for_terminal("\\u{202e}"), for_terminal("\u{202e}"));
    }

    #[test]
    fn json_escapes_what_serde_leaves_raw_and_still_parses_to_the_same_value() {
        let tool =
            "x\u{7f}\u{85}\u{9b}\u{202e}\u{2066}\u{200b}\u{feff}\u{2028}\u{e0041}é日本\\\"\n\x1b";
        let line = serde_json::json!({ "tool": tool, "secrets": [tool] }).to_string();
        // serde escapes C0 but leaves DEL, C1 and the format characters raw.
        assert!(line.contains('\u{202e}') && line.contains('\u{7f}'));
        let shown = json_for_terminal(&line);
        assert!(!shown.chars().any(is_unprintable), "{shown}");
        for escape in [
            "\\u007f", "\\u0085", "\\u009b", "\\u202e", "\\u2066", "\\u200b",
        ] {
            assert!(shown.contains(escape), "{escape}: {shown}");
        }
        assert!(
            shown.contains("\\udb40\\udc41"),
            "a surrogate pair: {shown}"
        );
        assert!(shown.contains("é日本"), "{shown}");
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(&line).unwrap()
        );
    }

    #[test]
    fn json_whitespace_outside_strings_becomes_a_space() {
        let line = "{\"a\":\r\"b\u{202e}\",\t\"c\":1}";
        let shown = json_for_terminal(line);
        assert_eq!(shown, "{\"a\": \"b\\u202e\", \"c\":1}");
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, serde_json::json!({"a": "b\u{202e}", "c": 1}));
    }

    #[test]
    fn blank_rendering_characters_and_spaces_in_a_name_cannot_fake_a_column() {
        for c in [
            '\u{3164}', '\u{115f}', '\u{ffa0}', '\u{2800}', '\u{34f}', '\u{fe0f}', '\u{a0}',
            '\u{3000}',
        ] {
            let shown = for_terminal(&format!("a{c}b")).into_owned();
            assert_eq!(shown, format!("a\\u{{{:x}}}b", u32::from(c)), "{c:?}");
        }
        let forged = "http_get       allow   stay_public_read\u{3164}\u{3164}";
        let shown = word_for_terminal(forged);
        assert!(!shown.contains(' '), "{shown}");
        assert_eq!(
            shown,
            "http_get\\x20\\x20\\x20\\x20\\x20\\x20\\x20allow\\x20\\x20\\x20stay_public_read\\u{3164}\\u{3164}"
        );
        // The control: a plain name, accents and all, is unchanged.
        assert_eq!(word_for_terminal("shell"), "shell");
        assert_eq!(word_for_terminal("café_日本"), "café_日本");
    }

    #[test]
    fn private_use_an_unassigned_format_slot_and_a_huge_name_are_shown_safely() {
        for c in ['\u{2065}', '\u{e000}', '\u{f0000}', '\u{fdd0}'] {
            assert!(is_unprintable(c), "{c:?}");
        }
        let huge = "x".repeat(1_000_000);
        let shown = word_for_terminal(&huge);
        assert_eq!(shown, format!("{}…(+{})", "x".repeat(64), 1_000_000 - 64));
    }
}
