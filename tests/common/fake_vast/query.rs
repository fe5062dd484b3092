//! Filter operators, sort order and query-string decoding, shared by the search and the list.

use std::collections::HashMap;

use serde_json::Value;

pub(super) const OPS: &[&str] = &["eq", "neq", "gt", "gte", "lt", "lte", "in", "notin"];

pub(super) fn loose_eq(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

pub(super) fn compare(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

pub(super) fn op_matches(v: &Value, op: &str, arg: &Value) -> bool {
    use std::cmp::Ordering::*;
    let list = || arg.as_array().map(Vec::as_slice).unwrap_or(&[]);
    match op {
        "eq" => loose_eq(v, arg),
        "neq" => !loose_eq(v, arg),
        "gt" => compare(v, arg) == Some(Greater),
        "gte" => matches!(compare(v, arg), Some(Greater | Equal)),
        "lt" => compare(v, arg) == Some(Less),
        "lte" => matches!(compare(v, arg), Some(Less | Equal)),
        "in" => list().iter().any(|x| loose_eq(v, x)),
        "notin" => !list().iter().any(|x| loose_eq(v, x)),
        _ => false,
    }
}

/// Sort order of two field values; missing or null values go last either way.
pub(super) fn order_values(a: Option<&Value>, b: Option<&Value>, desc: bool) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    let a = a.filter(|v| !v.is_null());
    let b = b.filter(|v| !v.is_null());
    match (a, b) {
        (None, None) => Equal,
        (None, Some(_)) => Greater,
        (Some(_), None) => Less,
        (Some(x), Some(y)) => {
            let o = compare(x, y).unwrap_or(Equal);
            if desc {
                o.reverse()
            } else {
                o
            }
        }
    }
}

/// Decoded `application/x-www-form-urlencoded` pairs (`+` is a space).
pub(super) fn parse_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (form_decode(k), form_decode(v))
        })
        .collect()
}

pub(super) fn form_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
