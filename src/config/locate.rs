//! The one place that turns a TOML error, a dotted key or an entry of an array into the line
//! it is about, and lays an error out as one line: `line N (key): what is wrong`, or
//! `key: what is wrong` when the text has no line for it. Used for the config and for `sim`
//! scenario files alike, so both read the same.

/// `line N (name): msg`, or `name: msg` without a line.
pub(crate) fn at_line(line: Option<usize>, name: &str, msg: &str) -> String {
    match line {
        Some(line) => format!("line {line} ({name}): {msg}"),
        None => format!("{name}: {msg}"),
    }
}

/// A TOML parse or schema error as one line naming the line and the dotted key.
pub(crate) fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = hide_variant(&hide_string_value(&one_line(e.message())));
    match e.span() {
        // A field missing from a table: the span is the table's, whose first key is not what
        // is wrong ("line 1 (name): missing field `hours`", the sim walkthrough).
        // (A table's is named by its header's key, `line 4 (price): missing field ...`.)
        Some(span)
            if msg.starts_with("missing field")
                && !text
                    .get(span.start..)
                    .unwrap_or_default()
                    .trim_start()
                    .starts_with('[') =>
        {
            format!("{msg} at the top level")
        }
        Some(span) => {
            let line = line_of(text, span.start);
            match key_at(text, span.start) {
                Some(key) => at_line(Some(line), &key, &msg),
                // A duplicate key or table makes the document unparseable for `key_at`;
                // the span then covers the repeated name itself. (Only for duplicates: other
                // syntax errors may point into a value, which is never echoed.)
                None if msg.contains("duplicate") => match text.get(span.clone()).map(str::trim) {
                    Some(name) if !name.is_empty() && name.len() <= 80 && !name.contains('\n') => {
                        format!("line {line}: {msg} {name:?}")
                    }
                    _ => format!("line {line}: {msg}"),
                },
                None => match key_on_line(text, line) {
                    // toml_edit refused the text (an integer past i64): the key from the line.
                    Some(key) => at_line(Some(line), &key, &msg),
                    None => format!("line {line}: {msg}"),
                },
            }
        }
        None => msg,
    }
}

/// A refused string value as an error shows it: quoted when it reads as a word, a path or an
/// address (a typo is seen; an address's query values as `***`, a gateway's key may travel
/// there), else by its length alone (a key pasted into the wrong field goes to the journal
/// otherwise).
pub(crate) fn shown_value(v: &str) -> String {
    let plain = v.chars().count() <= 40
        && v.chars()
            .all(|c| c.is_ascii_alphabetic() || ":/._-".contains(c));
    let addressy = v.contains("://") || v.contains('.') || v.contains('/');
    if plain || (addressy && !v.contains('@') && v.chars().count() <= 200) {
        format!("{:?}", crate::secrets::redact::without_query_values(v))
    } else {
        format!("a string of {} characters (not shown)", v.chars().count())
    }
}

/// serde's `unknown variant `...`, expected ...` with the value shown as [`shown_value`]
/// does.
fn hide_variant(msg: &str) -> String {
    const AT: &str = "unknown variant `";
    let Some(start) = msg.find(AT).map(|i| i + AT.len()) else {
        return msg.to_string();
    };
    let Some(len) = msg[start..].find('`') else {
        return msg.to_string();
    };
    let value = &msg[start..start + len];
    let shown = shown_value(value);
    if shown.starts_with('"') {
        return msg.to_string();
    }
    format!(
        "{}unknown variant: {shown}{}",
        &msg[..start - AT.len()],
        &msg[start + len + 1..]
    )
}

/// serde's `invalid type: string "...", expected u64` without the string: a value put under
/// the wrong key (a key pasted into `llm.timeout_secs`) may be a secret, and the message
/// goes to the journal. Its length is kept, which is enough to see which value it was.
fn hide_string_value(msg: &str) -> String {
    const AT: &str = "invalid type: string \"";
    let Some(start) = msg.find(AT).map(|i| i + AT.len()) else {
        return msg.to_string();
    };
    let mut escaped = false;
    let mut chars = 0;
    for (i, c) in msg[start..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => {
                return format!(
                    "{}invalid type: a string of {chars} characters (not shown){}",
                    &msg[..start - AT.len()],
                    &msg[start + i + 1..]
                )
            }
            _ => {}
        }
        if !escaped {
            chars += 1;
        }
    }
    msg.to_string()
}

/// The dotted key a `key = value` line sets ([`assignments`]); None for any other line.
pub(crate) fn key_on_line(text: &str, line: usize) -> Option<String> {
    assignments(text)
        .find(|(l, _)| *l == line)
        .map(|(_, key)| key)
}

/// Every plain `key = value` line of the text, read line by line (for text toml_edit cannot
/// parse: an integer past i64), as its line number and its dotted key under the last
/// `[table]` header above it. A quoted or unusual key is left out.
fn assignments(text: &str) -> impl Iterator<Item = (usize, String)> + '_ {
    let mut table = String::new();
    text.lines().enumerate().filter_map(move |(i, l)| {
        let t = l.trim();
        if let Some(header) = t.strip_prefix('[') {
            table = header
                .split(']')
                .next()
                .unwrap_or_default()
                .trim_matches(|c| c == '[' || c == ' ')
                .to_string();
            return None;
        }
        let (key, _) = t.split_once('=')?;
        let key = key.trim().trim_matches('"');
        let plain = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        plain.then(|| {
            let dotted = if table.is_empty() {
                key.to_string()
            } else {
                format!("{table}.{key}")
            };
            (i + 1, dotted)
        })
    })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The dotted key whose key or value covers `offset`.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let doc = toml_edit::Document::parse(text.to_owned()).ok()?;
    let mut best: Option<(usize, String)> = None;
    walk(doc.as_table(), "", &mut |path, key_span, item_span| {
        let covers = |s: &Option<std::ops::Range<usize>>| {
            s.as_ref()
                .is_some_and(|r| r.start <= offset && offset <= r.end)
        };
        if covers(&key_span) || covers(&item_span) {
            let width = item_span.map(|r| r.end - r.start).unwrap_or(usize::MAX);
            if best.as_ref().is_none_or(|(w, _)| width <= *w) {
                best = Some((width, path.to_string()));
            }
        }
    });
    best.map(|(_, p)| p)
}

/// The line of a dotted key, if the text sets it.
pub(crate) fn key_line(text: &str, dotted: &str) -> Option<usize> {
    let Ok(doc) = toml_edit::Document::parse(text.to_owned()) else {
        // toml_edit refuses some text that serde's parser took (an integer past i64).
        return assignments(text)
            .find(|(_, key)| key == dotted)
            .map(|(line, _)| line);
    };
    let mut found = None;
    walk(doc.as_table(), "", &mut |path, key_span, _| {
        if path == dotted && found.is_none() {
            found = key_span.map(|r| line_of(text, r.start));
        }
    });
    found
}

type SpanVisitor<'a> =
    dyn FnMut(&str, Option<std::ops::Range<usize>>, Option<std::ops::Range<usize>>) + 'a;

fn walk(table: &toml_edit::Table, prefix: &str, f: &mut SpanVisitor<'_>) {
    for (key, item) in table.iter() {
        let path = if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}.{key}")
        };
        let key_span = table.key(key).and_then(|k| k.span());
        f(&path, key_span, item.span());
        match item {
            toml_edit::Item::Table(t) => walk(t, &path, f),
            toml_edit::Item::Value(toml_edit::Value::InlineTable(t)) => {
                for (k, v) in t.iter() {
                    let p = format!("{path}.{k}");
                    f(&p, t.key(k).and_then(|x| x.span()), v.span());
                }
            }
            _ => {}
        }
    }
}

/// The line of entry `index` (from 0) of the array `key`: its `field`'s line, else the
/// entry's own (the N-th `[[key]]` header, or the N-th value of an inline array).
pub(crate) fn entry_line(
    text: &str,
    key: &str,
    index: usize,
    field: Option<&str>,
) -> Option<usize> {
    if let Ok(doc) = toml_edit::Document::parse(text.to_owned()) {
        let mut item = doc.as_item();
        for part in key.split('.') {
            item = item.get(part)?;
        }
        let span = match item {
            toml_edit::Item::ArrayOfTables(a) => {
                let t = a.get(index)?;
                field
                    .and_then(|f| t.key(f))
                    .and_then(|k| k.span())
                    .or_else(|| t.span())
            }
            toml_edit::Item::Value(toml_edit::Value::Array(a)) => {
                let v = a.get(index)?;
                match (v, field) {
                    (toml_edit::Value::InlineTable(t), Some(f)) => {
                        t.key(f).and_then(|k| k.span()).or_else(|| v.span())
                    }
                    _ => v.span(),
                }
            }
            _ => None,
        };
        if let Some(span) = span {
            return Some(line_of(text, span.start));
        }
    }
    // toml_edit refuses some text serde's parser took (an integer past i64): the N-th
    // `[[key]]` header, line by line.
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim_start();
            t.strip_prefix("[[")
                .and_then(|r| r.split_once("]]"))
                .is_some_and(|(name, _)| name.trim().trim_matches('"') == key)
        })
        .nth(index)
        .map(|(i, _)| i + 1)
        .or_else(|| key_line(text, key))
}

/// An error of the config parsed from `[table]` of `text` alone (a scenario's `[config]`),
/// laid out at the key's line in `text`: `line N (table.key): what is wrong`.
pub(crate) fn in_table(text: &str, table: &str, err: &str) -> String {
    let key = err
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(k, _)| format!("{table}.{k}"));
    let what = err.split_once("): ").map(|(_, m)| m).unwrap_or(err);
    match key {
        Some(key) => at_line(key_line(text, &key), &key, what),
        None => format!("[{table}]: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_in_the_wrong_place_is_not_echoed() {
        assert_eq!(
            hide_string_value(r#"invalid type: string "sk-proj-ABC\"DEF", expected u64"#),
            "invalid type: a string of 15 characters (not shown), expected u64"
        );
        let other = "invalid type: integer `5`, expected a string";
        assert_eq!(hide_string_value(other), other);
        // A typo'd word is shown; a key pasted there is not.
        let typo = "unknown variant `rule`, expected `rules` or `none`";
        assert_eq!(hide_variant(typo), typo);
        assert_eq!(
            hide_variant(
                "unknown variant `sk-proj-PASTEDKEY0123456789abcdef`, expected `rules` or `none`"
            ),
            "unknown variant: a string of 33 characters (not shown), expected `rules` or `none`"
        );
        assert_eq!(shown_value("htps://vast.ai"), "\"htps://vast.ai\"");
        assert_eq!(
            shown_value("sk-proj-PASTEDKEY0123456789abcdef"),
            "a string of 33 characters (not shown)"
        );
    }
}
