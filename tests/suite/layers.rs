//! The layering is a checked contract, not a hope (docs/architecture.md). src/lib.rs declares
//! every top-level module under a `// layer:` line; a module (a "room": a top-level module
//! and its children) may name only rooms of its own layer or of the layers below it, and no
//! two rooms may depend on each other, directly or through others. Every `crate::ROOM` path
//! in code counts (`use` lines and inline paths alike; comments do not).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top to bottom, as src/lib.rs lists them.
const LAYERS: [&str; 5] = ["commands", "drivers", "core", "adapters", "base"];
/// No source file grows past this (split along concerns, not by line count).
const MAX_LINES: usize = 900;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Room name -> layer index (0 = commands, the top) from src/lib.rs.
fn declared_layers(lib: &str) -> Result<BTreeMap<String, usize>, String> {
    let mut layer: Option<usize> = None;
    let mut rooms = BTreeMap::new();
    for (n, line) in lib.lines().enumerate() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("// layer:") {
            let name = rest.split_whitespace().next().unwrap_or("");
            layer = Some(
                LAYERS
                    .iter()
                    .position(|l| *l == name)
                    .ok_or_else(|| format!("src/lib.rs:{}: unknown layer {name:?}", n + 1))?,
            );
        } else if let Some(rest) = line.strip_prefix("pub mod ").or(line.strip_prefix("mod ")) {
            let name = rest.trim_end_matches(';').trim().to_string();
            let l = layer.ok_or_else(|| {
                format!(
                    "src/lib.rs:{}: module {name} is declared before any `// layer:` line",
                    n + 1
                )
            })?;
            rooms.insert(name, l);
        }
    }
    Ok(rooms)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its comments and the text of its string literals.
fn code_only(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let b = src.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            // A string literal (raw strings in this crate hold no `crate::` paths).
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            // A char literal such as '"' would otherwise open a string.
            i += 3;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// Every room this code names: `crate::ROOM` paths, and the rooms inside `use crate::{...}`.
fn rooms_named(code: &str) -> BTreeSet<String> {
    heads_after(code, "crate::")
}

/// The first segment of every path that starts with `prefix` (`crate::`, `crate::sim::`),
/// and of each item inside a group `use PREFIX{...}`.
fn heads_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `fleetagent_crate::`, not ours
        }
        if let Some(group) = rest.strip_prefix('{') {
            // use crate::{a::b, c, d::{e, f}};
            let mut depth = 1;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 1 && c == ',' || depth == 0 {
                    let head: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    named.insert(head);
                    item.clear();
                } else if depth == 1 || !item.contains("::") {
                    item.push(c);
                }
                if depth == 0 {
                    break;
                }
            }
        } else {
            let head: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            named.insert(head);
        }
    }
    named.remove("");
    named
}

/// room -> (room it names -> the first file that names it)
fn dependencies(rooms: &BTreeMap<String, usize>) -> BTreeMap<String, BTreeMap<String, String>> {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut deps: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().to_string();
        if rel == "lib.rs" || rel == "main.rs" {
            continue;
        }
        let room = rel
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_string();
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        for other in rooms_named(&code) {
            if other != room && rooms.contains_key(&other) {
                deps.entry(room.clone())
                    .or_default()
                    .entry(other)
                    .or_insert_with(|| format!("src/{rel}"));
            }
        }
    }
    deps
}

/// Problems with the layering, one line each; empty when it holds.
fn layering_problems(lib: &str) -> Vec<String> {
    let rooms = match declared_layers(lib) {
        Ok(r) => r,
        Err(e) => return vec![e],
    };
    let mut problems = Vec::new();
    let src = root().join("src");
    for entry in std::fs::read_dir(&src).unwrap() {
        let p = entry.unwrap().path();
        let name = p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if name == "lib"
            || name == "main"
            || !(p.is_dir() || name.len() + 3 == p.file_name().unwrap().len())
        {
            continue;
        }
        if !rooms.contains_key(&name) {
            problems.push(format!(
                "src/{name}: a top-level module src/lib.rs does not declare under a layer"
            ));
        }
    }
    let deps = dependencies(&rooms);
    for (room, named) in &deps {
        if !rooms.contains_key(room) {
            continue; // reported above
        }
        for (other, file) in named {
            if rooms[other] < rooms[room] {
                problems.push(format!(
                    "{file}: {room} ({}) reaches up to {other} ({})",
                    LAYERS[rooms[room]], LAYERS[rooms[other]]
                ));
            }
        }
    }
    // Cycles: a room that can reach itself through the rooms it names.
    problems.extend(cycles(&deps).into_iter().map(|c| format!("cycle: {c}")));
    problems.sort();
    problems.dedup();
    problems
}

#[test]
fn no_room_reaches_up_and_no_two_rooms_depend_on_each_other() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let problems = layering_problems(&lib);
    assert!(
        problems.is_empty(),
        "the layering of docs/architecture.md is broken:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_check_catches_an_inverted_layer() {
    // The same crate with the store declared above the prompt it is used by: every use of
    // the store from a core or driver room now reaches up, and the test must say so.
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let inverted = lib
        .replace("pub mod store;\n", "")
        .replace("pub mod cli;\n", "pub mod cli;\npub mod store;\n");
    let problems = layering_problems(&inverted);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("reaches up to store (commands)")),
        "{problems:#?}"
    );
    // And a module declared outside any layer is named.
    let loose = format!("pub mod stray;\n{lib}");
    assert_eq!(
        layering_problems(&loose),
        vec!["src/lib.rs:1: module stray is declared before any `// layer:` line".to_string()]
    );
}

#[test]
fn the_scanner_reads_grouped_uses_and_ignores_comments() {
    let code = code_only(
        "use crate::{clock::{Clock, Millis}, config, store::wakes};\n\
         // crate::sim in a comment\n\
         let s = \"crate::cmd in a string\";\n\
         let x = crate::text::clip(a, 3);\n",
    );
    let named: Vec<String> = rooms_named(&code).into_iter().collect();
    assert_eq!(named, ["clock", "config", "store", "text"]);
}

/// The modules of the simulator (src/sim/: `mod` for its mod.rs) each names, from code
/// outside unit tests: `crate::sim::X` and `super::` paths alike. module -> (module it
/// names -> the first file that names it).
fn sim_dependencies() -> BTreeMap<String, BTreeMap<String, String>> {
    let sim = root().join("src/sim");
    let mut files = Vec::new();
    rust_files(&sim, &mut files);
    let children: BTreeSet<String> = std::fs::read_dir(&sim)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().to_string();
            let name = name.strip_suffix(".rs").map(str::to_string).unwrap_or(name);
            (name != "mod").then_some(name)
        })
        .collect();
    let mut deps: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&sim).unwrap().to_string_lossy().to_string();
        // The module path of the file inside sim: [] for mod.rs, [a] for a.rs or a/mod.rs.
        let mut path: Vec<String> = rel
            .trim_end_matches(".rs")
            .split('/')
            .map(str::to_string)
            .collect();
        if path.last().is_some_and(|l| l == "mod") {
            path.pop();
        }
        let module = path.first().cloned().unwrap_or_else(|| "mod".into());
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        let mut code = code.split("#[cfg(test)]").next().unwrap_or("").to_string();
        // `super::` from a module inside sim, as a `crate::sim::` path (longest first).
        for up in (1..=path.len()).rev() {
            let mut to = String::from("crate::sim::");
            for seg in &path[..path.len() - up] {
                to.push_str(seg);
                to.push_str("::");
            }
            code = code.replace(&"super::".repeat(up), &to);
        }
        let mut heads = heads_after(&code, "crate::sim::");
        if path.is_empty() {
            // mod.rs names its children without a prefix: `report::build`, `use world::World`.
            let ident = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
            for child in &children {
                let at = format!("{child}::");
                if code
                    .match_indices(&at)
                    .any(|(i, _)| !code[..i].chars().next_back().is_some_and(ident))
                {
                    heads.insert(child.clone());
                }
            }
        }
        for head in heads {
            let other = if children.contains(&head) {
                head
            } else {
                "mod".to_string()
            };
            if other != module {
                deps.entry(module.clone())
                    .or_default()
                    .entry(other)
                    .or_insert_with(|| format!("src/sim/{rel}"));
            }
        }
    }
    deps
}

/// Every cycle in a dependency graph, once each (from its smallest node).
fn cycles(deps: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<String> {
    let mut found = Vec::new();
    for start in deps.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in deps
                .get(&at)
                .map(|d| d.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
            {
                if &next == start {
                    let mut cycle = path.clone();
                    cycle.push(next);
                    if cycle.iter().min() == Some(start) {
                        let files: Vec<&str> = cycle
                            .windows(2)
                            .map(|w| deps[&w[0]][&w[1]].as_str())
                            .collect();
                        found.push(format!("{} ({})", cycle.join(" -> "), files.join(", ")));
                    }
                } else if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next, p));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn the_simulators_modules_name_each_other_in_one_direction() {
    let deps = sim_dependencies();
    // The scanner sees the simulator: the driver names the report, the report the world.
    assert!(
        deps.get("mod").is_some_and(|d| d.contains_key("report")),
        "{deps:#?}"
    );
    assert!(
        deps.get("report").is_some_and(|d| d.contains_key("world")),
        "{deps:#?}"
    );
    let found = cycles(&deps);
    // And it finds a cycle where there is one, naming the files.
    let edge = |a: &str, b: &str| {
        (
            a.to_string(),
            BTreeMap::from([(b.to_string(), format!("{a}.rs"))]),
        )
    };
    let circle = BTreeMap::from([edge("oracle", "report"), edge("report", "oracle")]);
    assert_eq!(
        cycles(&circle),
        ["oracle -> report -> oracle (oracle.rs, report.rs)"]
    );
    assert!(
        found.is_empty(),
        "modules of src/sim/ in a cycle (docs/architecture.md, the simulator):\n  {}",
        found.join("\n  ")
    );
}

/// What the pure core must never name: our database, the network, files, processes, threads,
/// or the clock (time comes in as a value).
const IMPURE: [&str; 9] = [
    "rusqlite",
    "ureq",
    "postgres",
    "std::fs",
    "std::net",
    "std::process",
    "std::thread",
    "now_ms()",
    "Store",
];

/// `word` appears in `code` as a whole name (`Store`, not `Stored`).
fn names(code: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(word).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let after = code[i + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

#[test]
fn the_core_does_no_io() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let rooms = declared_layers(&lib).unwrap();
    let core = LAYERS.iter().position(|l| *l == "core").unwrap();
    let mut found = Vec::new();
    for (room, _) in rooms.iter().filter(|(_, l)| **l == core) {
        let mut files = Vec::new();
        let dir = root().join("src").join(room);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        } else {
            files.push(root().join("src").join(format!("{room}.rs")));
        }
        for f in files {
            let code = code_only(&std::fs::read_to_string(&f).unwrap());
            // Unit tests may build what they need.
            let code = code.split("#[cfg(test)]").next().unwrap_or("");
            for word in IMPURE {
                if names(code, word) {
                    found.push(format!(
                        "{} names {word}",
                        f.strip_prefix(root()).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(found.is_empty(), "the core must be pure: {found:#?}");
}

#[test]
fn no_source_file_is_over_900_lines() {
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches", "examples"] {
        rust_files(&root().join(dir), &mut files);
    }
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            (n > MAX_LINES)
                .then(|| format!("{} ({n} lines)", f.strip_prefix(root()).unwrap().display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:?}");
}

/// Issue 25's shape for the rules: `policy::rules` (src/policy/rules.rs and its submodules,
/// tests aside) reads top to bottom, rules.rs in under 400 lines and no function over 60.
/// A function's length runs from its `fn` line to the `}` at its own indentation.
#[test]
fn the_rules_keep_their_shape() {
    const MAX_FN_LINES: usize = 60;
    let rules = root().join("src/policy/rules.rs");
    let n = std::fs::read_to_string(&rules).unwrap().lines().count();
    assert!(n < 400, "src/policy/rules.rs has {n} lines");
    let mut files = vec![rules];
    rust_files(&root().join("src/policy/rules"), &mut files);
    let mut long = Vec::new();
    for f in files
        .iter()
        .filter(|f| !f.to_string_lossy().contains("test"))
    {
        let text = std::fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = line.trim_start();
            let indent = &line[..line.len() - code.len()];
            let is_fn = ["fn ", "pub fn ", "pub(super) fn ", "pub(crate) fn "]
                .iter()
                .any(|p| code.starts_with(p));
            if !is_fn || code.ends_with(';') || code.ends_with('}') {
                continue;
            }
            let close = format!("{indent}}}");
            let end = lines[i..].iter().position(|l| *l == close);
            let len = end.map_or(usize::MAX, |e| e + 1);
            if len > MAX_FN_LINES {
                let after_fn = code.split_once("fn ").map_or(code, |(_, rest)| rest);
                let name = after_fn.split(['(', '<']).next().unwrap_or(after_fn);
                long.push(format!(
                    "{}:{} fn {name} ({len} lines)",
                    f.strip_prefix(root()).unwrap().display(),
                    i + 1
                ));
            }
        }
    }
    assert!(long.is_empty(), "over {MAX_FN_LINES} lines: {long:?}");
}
