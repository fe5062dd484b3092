//! Keeping secrets out of probe errors: a URL or connection string shown without its
//! password, and any stray copy of that password masked. It hides nothing else. (The
//! demand probes mask their errors with it; the config asks it whether a URL carries a
//! password.)

const MASK: &str = "***";

/// `url` fit to print: the password of `scheme://user:password@host` dropped (the user
/// stays), and the value of any `password=` parameter (URL query or `key=value` string)
/// replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let without_userinfo_password = match split_userinfo(url) {
        Some((scheme, userinfo, after)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}://{user}@{after}")
        }
        None => url.to_string(),
    };
    mask_password_params(&without_userinfo_password)
}

/// `scheme://userinfo@rest` as `(scheme, userinfo, rest)`, or None without a userinfo. A
/// `postgres://` or `postgresql://` URL is read as its driver reads it (tokio-postgres'
/// `UrlParser`): the userinfo runs to the first `@` after the scheme, so a password with an
/// unencoded `/`, `?` or `#` (`openssl rand -base64` makes such) is still the password.
/// Other schemes end the authority at the first `/`, `?` or `#` and take its last `@`.
fn split_userinfo(url: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    if ["postgres", "postgresql"].contains(&scheme) {
        // To the last '@', not the driver's first: a password holding '@' (the driver reads
        // it as ending there, and fails to connect) was printed from its '@' on as the host
        // (the re-test). A '@' in the query hides the host too, never a secret.
        let (userinfo, after) = rest.rsplit_once('@')?;
        return Some((scheme, userinfo, after));
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (userinfo, _) = rest[..authority_end].rsplit_once('@')?;
    Some((scheme, userinfo, &rest[userinfo.len() + 1..]))
}

/// The passwords `url` carries, as written and percent-decoded, for [`mask`].
pub fn secrets_of(url: &str) -> Vec<String> {
    let mut raw = Vec::new();
    if let Some((_, userinfo, _)) = split_userinfo(url) {
        if let Some((_, password)) = userinfo.split_once(':') {
            raw.push(password.to_string());
            // The password as the driver reads it (to the first '@'), which its errors may
            // quote.
            if let Some((first, _)) = password.split_once('@') {
                raw.push(first.to_string());
            }
        }
    }
    for (start, end) in password_param_values(url) {
        raw.push(url[start..end].trim_matches('\'').to_string());
    }
    let mut all = Vec::new();
    for secret in raw {
        let decoded = percent_decode(&secret);
        all.push(secret);
        all.push(decoded);
    }
    all.retain(|s| !s.is_empty());
    all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    all.dedup();
    all
}

/// Every query value of `url`, as written and percent-decoded (a token may travel there, and
/// a server may echo it either way). Values shorter than 4 characters are left out: too
/// short to be a token, and short enough to occur by chance.
pub fn query_values(url: &str) -> Vec<String> {
    let Some((_, query)) = url.split_once('?') else {
        return Vec::new();
    };
    let query = query.split('#').next().unwrap_or("");
    let mut out = Vec::new();
    for pair in query.split('&') {
        let value = pair.split_once('=').map_or("", |(_, v)| v);
        for v in [value.to_string(), percent_decode(&value.replace('+', " "))] {
            if v.chars().count() >= 4 && !out.contains(&v) {
                out.push(v);
            }
        }
    }
    out
}

/// `url` with every query value shown as `***` (the names stay, to tell the URL apart).
pub fn without_query_values(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_string();
    };
    let (query, fragment) = match query.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (query, None),
    };
    let masked: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) => format!("{k}=***"),
            None => pair.to_string(),
        })
        .collect();
    let mut out = format!("{base}?{}", masked.join("&"));
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

/// `text` with every occurrence of each secret replaced by `***`.
pub fn mask(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(text.to_string(), |acc, s| acc.replace(s.as_str(), MASK))
}

/// Whitespace (newlines from DETAIL/HINT lines included) collapsed to single spaces.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The error and its sources, `a: b: c`, skipping a source already in the text.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

fn mask_password_params(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (start, end) in password_param_values(text) {
        out.push_str(&text[last..start]);
        out.push_str(MASK);
        last = end;
    }
    out.push_str(&text[last..]);
    out
}

/// Byte ranges of the values of `password=` parameters: in a URL query (ended by `&` or
/// `#`) or a libpq `key=value` string (ended by whitespace, or a single-quoted value).
fn password_param_values(text: &str) -> Vec<(usize, usize)> {
    const KEY: &str = "password";
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find(KEY) {
        let key_start = from + found;
        from = key_start + KEY.len();
        let before = &text[..key_start];
        let starts_param = before.is_empty()
            || before.ends_with(['?', '&'])
            || before.ends_with(char::is_whitespace);
        let rest = &text[from..];
        let Some(after_eq) = rest.trim_start().strip_prefix('=') else {
            continue;
        };
        if !starts_param {
            continue;
        }
        let value = after_eq.trim_start();
        let value_start = text.len() - value.len();
        let value_len = if let Some(quoted) = value.strip_prefix('\'') {
            let mut escaped = false;
            let close = quoted.char_indices().find(|&(_, c)| {
                let closes = c == '\'' && !escaped;
                escaped = c == '\\' && !escaped;
                closes
            });
            close.map_or(value.len(), |(i, _)| i + 2)
        } else {
            value
                .find(|c: char| c == '&' || c == '#' || c.is_whitespace())
                .unwrap_or(value.len())
        };
        ranges.push((value_start, value_start + value_len));
        from = value_start + value_len;
    }
    ranges
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((high * 16 + low) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_userinfo_password_is_dropped_user_kept() {
        assert_eq!(
            redact_url("postgresql://yugabyte:s3cr%40t@db.internal:5433/yugabyte?sslmode=disable"),
            "postgresql://yugabyte@db.internal:5433/yugabyte?sslmode=disable"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("http://h:8080/demand"), "http://h:8080/demand");
    }

    /// The postgres driver takes the userinfo up to the first '@' after the scheme: a
    /// password with an unencoded '/', '?' or '#' is still all password, and the role, host
    /// and database stay shown.
    #[test]
    fn a_postgres_password_with_slash_query_or_hash_is_dropped_whole() {
        for pw in ["pa/ss-Kq7Zp3", "pa?ss-Kq7Zp3", "pa#ss-Kq7Zp3", "hdb/Kq:7Z"] {
            for scheme in ["postgres", "postgresql"] {
                let url = format!("{scheme}://probe:{pw}@127.0.0.1:5433/curio?sslmode=disable");
                let cfg: postgres::Config = url.parse().unwrap();
                assert_eq!(cfg.get_password(), Some(pw.as_bytes()), "{url}");
                assert_eq!(
                    redact_url(&url),
                    format!("{scheme}://probe@127.0.0.1:5433/curio?sslmode=disable")
                );
                assert_eq!(secrets_of(&url), vec![pw.to_string()]);
            }
        }
        // A password holding '@': all of it is the secret, and the driver's reading of it
        // (to the first '@') too.
        let url = "postgresql://u:Xq7@kQ9zLm3pR2wV@h/db";
        assert_eq!(redact_url(url), "postgresql://u@h/db");
        assert_eq!(
            secrets_of(url),
            vec!["Xq7@kQ9zLm3pR2wV".to_string(), "Xq7".to_string()]
        );
        // Other schemes keep the authority rule (a '/' ends it).
        assert_eq!(redact_url("http://h/p@x"), "http://h/p@x");
    }

    #[test]
    fn password_parameters_are_masked() {
        assert_eq!(
            redact_url("postgres://h/db?user=u&password=hunter2&sslmode=disable"),
            "postgres://h/db?user=u&password=***&sslmode=disable"
        );
        assert_eq!(
            redact_url("host=h user=u password='a b\\' c' dbname=y"),
            "host=h user=u password=*** dbname=y"
        );
        assert_eq!(
            redact_url("host=h password = pw port=1"),
            "host=h password = *** port=1"
        );
        // A key that only ends in "password" is not the password parameter.
        assert_eq!(redact_url("host=h oldpassword=x"), "host=h oldpassword=x");
    }

    #[test]
    fn secrets_are_found_raw_and_decoded_and_masked() {
        let secrets = secrets_of("postgresql://u:p%40ss@h/db");
        assert!(secrets.contains(&"p%40ss".to_string()), "{secrets:?}");
        assert!(secrets.contains(&"p@ss".to_string()), "{secrets:?}");
        assert_eq!(mask("auth p@ss and p%40ss", &secrets), "auth *** and ***");
        assert!(secrets_of("postgres://u@h/db").is_empty());
        assert_eq!(secrets_of("host=h password=pw"), vec!["pw".to_string()]);
    }

    #[test]
    fn query_values_as_written_and_decoded() {
        assert_eq!(
            query_values("http://h/d?token=tok%2Bsecret%2Fvalue%3D123&x=1&mode=ok#frag"),
            vec!["tok%2Bsecret%2Fvalue%3D123", "tok+secret/value=123"]
        );
        assert!(query_values("http://h/d").is_empty());
    }

    #[test]
    fn one_line_collapses_newlines() {
        assert_eq!(one_line("ERROR: x\nDETAIL:  y\n"), "ERROR: x DETAIL: y");
    }
}
