//! JSON read strictly where a duplicated key would be an ambiguity acted on: serde_json keeps
//! the last of two values for one key without a word, so `{"pending": 59, "pending": 0}`
//! from a demand command read as 0 waiting, and a tool call's `{"offer_id": 501,
//! "offer_id": 502}` rented 502. [`parse`] refuses a repeated key, naming it and where.

use serde::de::{Deserialize, Deserializer, Error, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// `text` as a JSON value; an object with a key twice (at any depth) is an error naming the
/// key, with serde_json's line and column. A lone UTF-16 surrogate escape is read as U+FFFD
/// ([`lone_surrogates_replaced`]).
pub fn parse(text: &str) -> serde_json::Result<Value> {
    mended::<Strict>(text).map(|s| s.0)
}

/// `text` as a JSON value (keys repeated: the last wins, as serde_json reads them), a lone
/// UTF-16 surrogate escape read as U+FFFD.
pub fn parse_loose(text: &str) -> serde_json::Result<Value> {
    mended::<Value>(text)
}

/// `text` read as `T`, again with its lone surrogate escapes replaced when that failed and
/// it has any (serde_json's first error otherwise).
fn mended<T: serde::de::DeserializeOwned>(text: &str) -> serde_json::Result<T> {
    serde_json::from_str(text).or_else(|e| match lone_surrogates_replaced(text) {
        Some(mended) => serde_json::from_str(&mended),
        None => Err(e),
    })
}

/// `text` with every `\uXXXX` escape of a lone UTF-16 surrogate (half of a pair, as a
/// truncated emoji or Python's `json.dumps` of a broken string writes it) made `\ufffd`;
/// None when it has none. serde_json refuses the whole document for one (a walkthrough: one
/// vast.ai offer with such a field failed every search, one label on the account the whole
/// listing), though JSON's grammar allows it.
pub fn lone_surrogates_replaced(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let hex = |at: usize| -> Option<u32> {
        let digits = b.get(at..at + 4)?;
        u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    let escape = |at: usize| -> Option<u32> {
        (b.get(at) == Some(&b'\\') && b.get(at + 1) == Some(&b'u'))
            .then(|| hex(at + 2))
            .flatten()
    };
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let (mut i, mut changed) = (0, false);
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let len = match escape(i) {
            Some(0xD800..=0xDBFF) if matches!(escape(i + 6), Some(0xDC00..=0xDFFF)) => 12,
            Some(0xD800..=0xDFFF) => {
                out.extend_from_slice(b"\\ufffd");
                changed = true;
                i += 6;
                continue;
            }
            Some(_) => 6,
            // Any other escape is two bytes (`\\`, `\"`, ...): copied whole, so that the
            // backslash of `\\u` is never read as the start of one.
            None => 2,
        };
        let end = (i + len).min(b.len());
        out.extend_from_slice(&b[i..end]);
        i = end;
    }
    // Only ASCII escapes were replaced by ASCII: the bytes are still UTF-8.
    changed.then(|| String::from_utf8(out).ok()).flatten()
}

/// A value whose objects were read with every key once.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(A::Error::custom(format!(
                    "the key {} appears twice in one object",
                    crate::text::quote(&key, 40)
                )));
            }
            let Strict(v) = map.next_value()?;
            object.insert(key, v);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_twice_is_refused_at_any_depth_and_the_rest_reads_as_serde_json_does() {
        for text in [
            r#"{"a": 1, "b": [1, 2.5, -3, "x", null, true], "c": {"d": {}}}"#,
            r#"[{"a": 1}, {"a": 2}]"#,
            "18446744073709551615",
            r#""é\u00e9""#,
        ] {
            assert_eq!(
                parse(text).unwrap(),
                serde_json::from_str::<Value>(text).unwrap(),
                "{text}"
            );
        }
        for (text, key) in [
            (
                r#"{"pending": 59, "running": 0, "pending": 0}"#,
                "\"pending\"",
            ),
            (r#"{"a": {"offer_id": 1, "offer_id": 2}}"#, "\"offer_id\""),
            (r#"[1, {"x": 1, "x": 1}]"#, "\"x\""),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(&format!("the key {key} appears twice")), "{e}");
            assert!(e.contains("line 1 column"), "{e}");
        }
        // serde_json's own limits hold: 200 levels deep is an error, not a stack overflow.
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(parse(&deep).is_err());
    }

    #[test]
    fn a_lone_surrogate_escape_reads_as_the_replacement_character() {
        let text =
            r#"{"label": "x\ud83d", "cpu": "\udc00y", "ok": "\ud83d\ude00", "lit": "a\\ud83d"}"#;
        assert!(
            serde_json::from_str::<Value>(text).is_err(),
            "serde_json refuses it"
        );
        for v in [parse(text).unwrap(), parse_loose(text).unwrap()] {
            assert_eq!(v["label"], "x\u{fffd}");
            assert_eq!(v["cpu"], "\u{fffd}y");
            // A whole pair and an escaped backslash before `u` are left as they are.
            assert_eq!(v["ok"], "\u{1f600}");
            assert_eq!(v["lit"], "a\\ud83d");
        }
        assert_eq!(
            lone_surrogates_replaced(r#"{"a": "\ud83d\ude00 \\ud800"}"#),
            None
        );
        // A broken document stays broken, with serde_json's own error.
        assert!(parse_loose(r#"{"a": "\ud83d"#).is_err());
    }
}
