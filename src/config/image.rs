//! `vast.image` against docker's reference grammar (distribution/reference's grammar.go:
//! `[host[:port]/]path[:tag][@digest]`), so that a reference docker cannot pull is refused
//! at load instead of renting instances that stay loading, paid for, until
//! `policy.stuck_loading_mins`. The uppercase repository and the digest have messages of
//! their own (`validate::vast`); this names whatever else is wrong.

use std::sync::LazyLock;

use regex::Regex;

/// A path component: lowercase alphanumerics joined by `.`, `_`, `__` or dashes.
const PATH: &str =
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*";
/// A registry host: DNS labels (any case), an IPv4 address, or an IPv6 one in brackets; a port.
const HOST: &str = r"(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?";
/// A tag: a word character, then up to 127 of words, dots and dashes.
const TAG: &str = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}";

static PATH_RE: LazyLock<Regex> = LazyLock::new(|| Regex::new(&format!("^{PATH}$")).unwrap());
static HOST_RE: LazyLock<Regex> = LazyLock::new(|| Regex::new(&format!("^{HOST}$")).unwrap());
static TAG_RE: LazyLock<Regex> = LazyLock::new(|| Regex::new(&format!("^{TAG}$")).unwrap());

/// docker's limit on a reference's name (host and path).
const NAME_MAX: usize = 255;

/// What is wrong with `image` by docker's grammar, in words, or None when it parses. The
/// digest after `@` is checked by the caller.
pub fn problem(image: &str) -> Option<String> {
    if let Some((scheme, _)) = image.split_once("://") {
        return Some(format!(
            "an image reference has no scheme ({scheme}://): write it as docker pull takes it, host/path:tag"
        ));
    }
    let name = image.split('@').next().unwrap_or(image);
    let (name, tag) = match name.rfind(':') {
        Some(colon) if !name[colon..].contains('/') => (&name[..colon], Some(&name[colon + 1..])),
        _ => (name, None),
    };
    if let Some(tag) = tag {
        if !TAG_RE.is_match(tag) {
            return Some(format!(
                "the tag {tag:?} is not one docker takes (a letter, digit or _, then up to 127 of those, . and -)"
            ));
        }
    }
    if name.len() > NAME_MAX {
        return Some(format!(
            "the name is {} characters, past docker's {NAME_MAX}",
            name.len()
        ));
    }
    let (host, path) = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':', '[']) || first == "localhost" => {
            (Some(first), rest)
        }
        _ => (None, name),
    };
    if let Some(host) = host {
        if !HOST_RE.is_match(host) {
            return Some(format!(
                "the registry host {host:?} is not a host name[:port]"
            ));
        }
    }
    (!PATH_RE.is_match(path)).then(|| {
        format!(
            "the repository {path:?} is not one docker takes (lowercase letters and digits, parts joined by . _ __ or -, separated by /, none empty)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_docker_pulls_passes_and_what_it_refuses_is_named() {
        for good in [
            "ubuntu",
            "ubuntu:22.04",
            "vastai/pytorch:2.1.0-cuda12.1-cudnn8-devel",
            "ghcr.io/example/curio-psprove:latest",
            "registry.example.com:5000/team/sub/img_name__x:v1_2",
            "localhost:5000/img",
            "localhost/img:tag",
            "[::1]:5000/img:tag",
            "10.0.0.5:5000/a.b/c---d:TAG.x-1",
            "Registry.Example.COM/org/img",
            "docker.io/library/ubuntu@sha256:0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            assert_eq!(problem(good), None, "{good}");
        }
        for (bad, want) in [
            ("https://ghcr.io/org/img:tag", "no scheme (https://)"),
            ("org/img:v1.2+build5", "the tag \"v1.2+build5\""),
            ("org/img:", "the tag \"\""),
            ("org/img::latest", "the repository \"org/img:\""),
            ("org//img", "the repository \"org//img\""),
            ("org/imagé", "the repository \"org/imagé\""),
            ("org/img-", "the repository \"org/img-\""),
            ("-host.io/img", "the registry host \"-host.io\""),
            ("bad_host.io/img", "the registry host \"bad_host.io\""),
            ("host.io:port/img", "the registry host \"host.io:port\""),
            ("/img", "the repository \"/img\""),
        ] {
            let got = problem(bad).unwrap_or_default();
            assert!(got.contains(want), "{bad}: {got}");
        }
        let long = format!("org/{}", "a".repeat(300));
        assert!(problem(&long).unwrap().contains("past docker's 255"));
        let tag = format!("org/img:{}", "t".repeat(129));
        assert!(problem(&tag).unwrap().contains("the tag"));
    }
}
