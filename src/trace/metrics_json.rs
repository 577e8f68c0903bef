//! The `iterations.test_metrics` column: a flat JSON object of numbers,
//! `{"auc":0.93}`, or null when there are no metrics.
//!
//! Written and parsed here rather than with `serde_json`, whose default float
//! parsing may be one ulp off: a value must read back bit for bit. Numbers are
//! written in Rust's shortest round-trip form; a non-finite value (which JSON
//! cannot hold) is written as `null` and reads back as NaN. The parser takes
//! any JSON object whose values are numbers or `null`, with any whitespace, so
//! files written by other tools (`json.dumps` in Python) read too.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The column value of `metrics`: `None` (null) when there are none.
pub(crate) fn encode(metrics: &BTreeMap<String, f64>) -> Option<String> {
    if metrics.is_empty() {
        return None;
    }
    let mut out = String::from("{");
    for (i, (name, value)) in metrics.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_string(&mut out, name);
        out.push(':');
        if value.is_finite() {
            // `{:?}` is the shortest form that parses back to the same f64, and
            // always a valid JSON number ("1.0", "0.93", "1e-7", "-0.0").
            let _ = write!(out, "{value:?}");
        } else {
            out.push_str("null");
        }
    }
    out.push('}');
    Some(out)
}

/// A JSON string literal of `s`.
fn push_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Parses a column value; the error says what is wrong and where (byte offset).
pub(crate) fn decode(text: &str) -> Result<BTreeMap<String, f64>, String> {
    let mut p = Parser { text, pos: 0 };
    let mut metrics = BTreeMap::new();
    p.skip_ws();
    p.expect(b'{', "a JSON object")?;
    p.skip_ws();
    if !p.eat(b'}') {
        loop {
            p.skip_ws();
            let name = p.string()?;
            p.skip_ws();
            p.expect(b':', "':'")?;
            p.skip_ws();
            let at = p.pos;
            let value = p.number_or_null()?;
            if metrics.insert(name, value).is_some() {
                return Err(format!("duplicate metric name before byte {at}"));
            }
            p.skip_ws();
            if p.eat(b'}') {
                break;
            }
            p.expect(b',', "',' or '}'")?;
        }
    }
    p.skip_ws();
    if p.pos < text.len() {
        return Err(format!("trailing characters at byte {}", p.pos));
    }
    Ok(metrics)
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        if found {
            self.pos += 1;
        }
        found
    }

    fn expect(&mut self, byte: u8, what: &str) -> Result<(), String> {
        if self.eat(byte) {
            Ok(())
        } else {
            Err(self.unexpected(what))
        }
    }

    fn unexpected(&self, what: &str) -> String {
        match self.text[self.pos..].chars().next() {
            Some(c) => format!("expected {what} at byte {}, found {c:?}", self.pos),
            None => format!("expected {what} at byte {}, found the end", self.pos),
        }
    }

    /// A string literal, unescaped (by `serde_json`, which checks escapes).
    fn string(&mut self) -> Result<String, String> {
        let start = self.pos;
        self.expect(b'"', "a metric name (a JSON string)")?;
        let bytes = self.text.as_bytes();
        loop {
            match bytes.get(self.pos) {
                None => return Err(format!("unterminated string at byte {start}")),
                Some(b'\\') => self.pos += 2,
                Some(b'"') => break,
                Some(_) => self.pos += 1,
            }
        }
        self.pos += 1;
        let literal = self.text.get(start..self.pos).unwrap_or_default();
        serde_json::from_str(literal).map_err(|e| format!("bad string at byte {start}: {e}"))
    }

    /// A JSON number (parsed exactly) or `null` (NaN).
    fn number_or_null(&mut self) -> Result<f64, String> {
        if self.text[self.pos..].starts_with("null") {
            self.pos += 4;
            return Ok(f64::NAN);
        }
        let start = self.pos;
        let bytes = self.text.as_bytes();
        let digits = |pos: &mut usize| {
            let from = *pos;
            while bytes.get(*pos).is_some_and(u8::is_ascii_digit) {
                *pos += 1;
            }
            *pos > from
        };
        let mut pos = self.pos;
        if bytes.get(pos) == Some(&b'-') {
            pos += 1;
        }
        let int_start = pos;
        let mut ok = digits(&mut pos) && !(bytes[int_start] == b'0' && pos - int_start > 1);
        if ok && bytes.get(pos) == Some(&b'.') {
            pos += 1;
            ok = digits(&mut pos);
        }
        if ok && matches!(bytes.get(pos), Some(b'e' | b'E')) {
            pos += 1;
            if matches!(bytes.get(pos), Some(b'+' | b'-')) {
                pos += 1;
            }
            ok = digits(&mut pos);
        }
        if !ok {
            return Err(self.unexpected("a number or null"));
        }
        self.pos = pos;
        let literal = &self.text[start..pos];
        match literal.parse::<f64>() {
            Ok(value) if value.is_finite() => Ok(value),
            _ => Err(format!("number {literal} at byte {start} is out of range")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn empty_is_null_and_values_read_back_bit_for_bit() {
        assert_eq!(encode(&BTreeMap::new()), None);
        let m = map(&[("auc", 0.93), ("f1", 1.0), ("tiny", 1e-300), ("neg", -0.0)]);
        let text = encode(&m).expect("not empty");
        assert_eq!(text, r#"{"auc":0.93,"f1":1.0,"neg":-0.0,"tiny":1e-300}"#);
        let back = decode(&text).expect("parses");
        assert_eq!(back, m);
        assert!(back["neg"].is_sign_negative());

        // Values serde_json's default parser may round wrongly.
        let mut x = 0.123_456_789_012_345_67_f64;
        for _ in 0..2000 {
            x = (x * 7.919 + 0.311).fract();
            let m = map(&[("v", x), ("w", x * 1e-200), ("z", x * 1e200)]);
            let back = decode(&encode(&m).expect("not empty")).expect("parses");
            for (k, v) in &m {
                assert_eq!(back[k].to_bits(), v.to_bits(), "{k} = {v:?}");
            }
        }
    }

    #[test]
    fn non_finite_values_are_null_and_read_back_as_nan() {
        let m = map(&[("a", f64::NAN), ("b", f64::INFINITY)]);
        let text = encode(&m).expect("not empty");
        assert_eq!(text, r#"{"a":null,"b":null}"#);
        let back = decode(&text).expect("parses");
        assert!(back["a"].is_nan() && back["b"].is_nan());
    }

    #[test]
    fn names_are_escaped_and_unescaped() {
        let m = map(&[("quote\"back\\slash\nnl\u{1}é", 2.5)]);
        let text = encode(&m).expect("not empty");
        assert_eq!(text, "{\"quote\\\"back\\\\slash\\nnl\\u0001é\":2.5}");
        let parsed: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(parsed["quote\"back\\slash\nnl\u{1}é"], 2.5);
        assert_eq!(decode(&text).expect("parses"), m);
    }

    #[test]
    fn other_writers_json_reads() {
        // What Python's json.dumps writes, and the empty object.
        let m = decode(r#" { "auc": 0.93, "loss" : 1E+2 , "x":-3, "n": null } "#).expect("parses");
        assert_eq!(m["auc"], 0.93);
        assert_eq!(m["loss"], 100.0);
        assert_eq!(m["x"], -3.0);
        assert!(m["n"].is_nan());
        assert_eq!(decode("{}").expect("parses"), BTreeMap::new());
        assert_eq!(decode(" {\n} ").expect("parses"), BTreeMap::new());
    }

    #[test]
    fn malformed_text_is_rejected_with_a_reason() {
        let cases = [
            ("", "expected a JSON object at byte 0, found the end"),
            ("[1]", "expected a JSON object at byte 0, found '['"),
            (
                "{auc: 1}",
                "expected a metric name (a JSON string) at byte 1, found 'a'",
            ),
            (
                r#"{"auc":"x"}"#,
                "expected a number or null at byte 7, found '\"'",
            ),
            (
                r#"{"auc":{}}"#,
                "expected a number or null at byte 7, found '{'",
            ),
            (
                r#"{"auc":NaN}"#,
                "expected a number or null at byte 7, found 'N'",
            ),
            (
                r#"{"auc":.5}"#,
                "expected a number or null at byte 7, found '.'",
            ),
            (
                r#"{"auc":01}"#,
                "expected a number or null at byte 7, found '0'",
            ),
            (
                r#"{"auc":1.}"#,
                "expected a number or null at byte 7, found '1'",
            ),
            (r#"{"auc":1e999}"#, "number 1e999 at byte 7 is out of range"),
            (
                r#"{"auc":1,}"#,
                "expected a metric name (a JSON string) at byte 9, found '}'",
            ),
            (
                r#"{"auc":1"#,
                "expected ',' or '}' at byte 8, found the end",
            ),
            (
                r#"{"auc":1 "f1":2}"#,
                "expected ',' or '}' at byte 9, found '\"'",
            ),
            (r#"{"auc":1}x"#, "trailing characters at byte 9"),
            (r#"{"a":1,"a":2}"#, "duplicate metric name before byte 11"),
            (r#"{"a\q":1}"#, "bad string at byte 1"),
            (r#"{"auc"#, "unterminated string at byte 1"),
        ];
        for (text, reason) in cases {
            let err = decode(text).expect_err(text);
            assert!(err.starts_with(reason), "{text}: {err}");
        }
    }
}
