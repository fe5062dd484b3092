//! Tests that keep the docs honest: every subcommand and config key is in the README, the
//! changelog is well formed, and `inspect --json`'s documented fields exist.

use clap::CommandFactory;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

/// The commented config `init` writes.
fn template() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/config.example.toml"
    ))
    .unwrap()
}

#[test]
fn every_subcommand_is_in_the_readme() {
    let readme = readme();
    for sub in fleetagent::cli::Cli::command().get_subcommands() {
        let name = sub.get_name();
        assert!(
            readme.contains(&format!("| `{name}")),
            "README's command table lacks `{name}`"
        );
    }
}

#[test]
fn every_config_key_is_in_the_readme() {
    let readme = readme();
    let template = template();
    let mut table = String::new();
    for line in template.lines() {
        let line = line.trim();
        if let Some(t) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = t.to_string();
            continue;
        }
        let Some(rest) = line.strip_prefix("# ") else {
            continue;
        };
        let Some((key, _)) = rest.split_once(" = ") else {
            continue;
        };
        if key.contains(' ') || key.starts_with('"') || key.chars().any(|c| c.is_uppercase()) {
            continue;
        }
        let dotted = if table.is_empty() {
            key.to_string()
        } else {
            format!("{table}.{key}")
        };
        let short = dotted.rsplit('.').next().unwrap();
        assert!(
            readme.contains(&format!("`{dotted}`")) || readme.contains(&format!("`{short}`")),
            "README's configuration table lacks {dotted}"
        );
    }
}

#[test]
fn changelog_is_keep_a_changelog() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/CHANGELOG.md")).unwrap();
    assert!(text.starts_with("# Changelog"));
    assert!(text.contains("## [Unreleased]"));
    for line in text.lines().filter(|l| l.starts_with("### ")) {
        let kind = &line[4..];
        assert!(
            [
                "Added",
                "Changed",
                "Deprecated",
                "Removed",
                "Fixed",
                "Security"
            ]
            .contains(&kind),
            "unknown changelog section {kind}"
        );
    }
}

#[test]
fn documented_inspect_fields_exist() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/inspect.md")).unwrap();
    let f = crate::common::fleet::Fleet::new();
    f.cmd(&["trigger", "-p", "0", "-r", "x"]).ok();
    f.cmd(&["run"]).ok();
    let v = f.inspect();
    let (top, runs) = doc
        .split_once("Each entry of `runs`")
        .expect("docs/inspect.md has a runs table");
    let names = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("| `"))
            .flat_map(|l| {
                l.split('|')
                    .nth(1)
                    .unwrap()
                    .split(',')
                    .map(|n| n.trim().trim_matches('`').to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let (runs, demand) = runs
        .split_once("The `demand` object")
        .expect("docs/inspect.md has a demand table");
    let (demand, price) = demand
        .split_once("The `price` object")
        .expect("docs/inspect.md has a price table");
    let top_names = names(top);
    let run_names = names(runs);
    let demand_names = names(demand);
    let price_names = names(price);
    // No price is configured: every figure null, `unknown` says why. Documented both ways.
    let p = v["price"].as_object().expect("price is an object");
    let mut got: Vec<&String> = p.keys().collect();
    let mut want: Vec<&String> = price_names.iter().collect();
    got.sort();
    want.sort();
    assert_eq!(
        got, want,
        "docs/inspect.md's price table against inspect --json"
    );
    assert!(v["price"]["unknown"].as_str().is_some(), "{}", v["price"]);
    assert!(top_names.len() > 30 && run_names.len() > 10 && demand_names.len() > 10);
    // No demand source is configured: the object carries the probe's error, every figure null.
    let d = v["demand"].as_object().expect("demand after a pass");
    for name in &demand_names {
        assert!(
            d.contains_key(name),
            "docs/inspect.md documents demand.{name}; inspect lacks it"
        );
    }
    assert_eq!(
        d.len(),
        demand_names.len(),
        "demand has undocumented fields: {d:?}"
    );
    for name in top_names {
        assert!(
            v.get(&name).is_some(),
            "docs/inspect.md documents `{name}`; inspect lacks it"
        );
    }
    for name in run_names {
        assert!(
            v["runs"][0].get(&name).is_some(),
            "docs/inspect.md documents runs[].{name}; inspect lacks it"
        );
    }
}

/// The other way: every key of README's configuration table is in the template `init` writes
/// (as a commented `key = ...` under its table, or a `[table]` of its own). An audit found
/// `run.retention_days` documented and accepted but missing from the template.
#[test]
fn every_readme_config_key_is_in_the_template() {
    let readme = readme();
    let template = template();
    let start = readme
        .find("## Configuration")
        .expect("a Configuration section");
    let section = &readme[start..];
    let section = &section[..section[5..].find("\n## ").map_or(section.len(), |i| i + 5)];
    let mut have = std::collections::BTreeSet::new();
    let mut table = String::new();
    for line in template.lines() {
        let line = line.trim().trim_start_matches('#').trim();
        if let Some(t) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = t.to_string();
            have.insert(table.clone());
            continue;
        }
        let Some((key, _)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            have.insert(match table.as_str() {
                "" => key.to_string(),
                t => format!("{t}.{key}"),
            });
        }
    }
    let mut rows = 0;
    for line in section.lines() {
        // The first cell: one key, or several (`demand.http_url`, `demand.command`).
        let Some(cell) = line.strip_prefix("| `").and_then(|r| r.split(" |").next()) else {
            continue;
        };
        rows += 1;
        // A short key after the first is in the first one's table (`p1_secs` after
        // `debounce.p0_secs`).
        let mut keys = cell
            .split('`')
            .step_by(2)
            .map(|k| k.trim_matches([',', ' ']));
        let first = keys.next().unwrap_or_default();
        let table = first.rsplit_once('.').map_or("", |(t, _)| t);
        for key in std::iter::once(first.to_string()).chain(keys.filter(|k| !k.is_empty()).map(
            |k| match (k.contains('.'), table) {
                (false, t) if !t.is_empty() => format!("{t}.{k}"),
                _ => k.to_string(),
            },
        )) {
            assert!(
                have.contains(&key),
                "README documents {key}, the template init writes lacks it"
            );
        }
    }
    assert!(
        rows > 50,
        "{rows} rows read from README's configuration table"
    );
}
