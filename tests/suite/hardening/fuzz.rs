//! Fuzzing on stable: every cargo-fuzz target (fuzz/targets.rs) runs over its seed corpus,
//! every saved regression input, and seeded mutations of them (bit flips, byte runs, splices,
//! JSON and TOML tokens). Any panic is a bug: the input is saved under fuzz/regressions/ and
//! the test fails. `FLEETAGENT_FUZZ_EXECS` (per target) or `FLEETAGENT_FUZZ_SECS` scale it up
//! (scripts/fuzz); with nightly and cargo-fuzz, scripts/fuzz runs libFuzzer instead.

use crate::common::rng::Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[path = "../../../fuzz/targets.rs"]
mod targets;

const DEFAULT_EXECS: u64 = 2_000;

const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    "null",
    "true",
    "-1",
    "0",
    "1e999",
    "-0.0",
    "1.5",
    "18446744073709551616",
    "9223372036854775807",
    "\"\"",
    "\\u0000",
    "\\ud800",
    "é",
    "\n",
    "=",
    "[[",
    "]]",
    "\"\"\"",
    "'''",
    "#",
    ".",
    "inf",
    "nan",
    "{\"id\":",
    "\"choices\":",
    "\"tool_calls\":",
    "\"message\":",
    "\"function\":",
    "\"arguments\":",
    "\"offers\":",
    "\"instances\":",
    "\"workers\":",
    "\"pending\":",
    "\"dph_total\":",
    "threshold=",
    "[llm]",
    "[vast.env]",
    "[policy.gpu_rates]",
    "provider = ",
    "{ credential = \"x\" }",
];

fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.index(4) {
        let at = rng.index(v.len() + 1);
        match rng.index(8) {
            0 if !v.is_empty() => {
                let i = rng.index(v.len());
                v[i] ^= 1 << rng.index(8);
            }
            1 if !v.is_empty() => {
                let i = rng.index(v.len());
                v[i] = rng.next() as u8;
            }
            2 => {
                let t = TOKENS[rng.index(TOKENS.len())].as_bytes();
                v.splice(at..at, t.iter().copied());
            }
            3 if !v.is_empty() => {
                let end = (at + 1 + rng.index(16)).min(v.len());
                let start = at.min(end);
                v.drain(start..end);
            }
            4 if !v.is_empty() => {
                let start = rng.index(v.len());
                let end = (start + 1 + rng.index(64)).min(v.len());
                let chunk: Vec<u8> = v[start..end].to_vec();
                let times = 1 + rng.index(8);
                for _ in 0..times {
                    v.splice(at.min(v.len())..at.min(v.len()), chunk.iter().copied());
                }
            }
            5 if !other.is_empty() => {
                let start = rng.index(other.len());
                let end = (start + 1 + rng.index(200)).min(other.len());
                v.splice(at..at, other[start..end].iter().copied());
            }
            6 => {
                let n = 1 + rng.index(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                v.splice(at..at, bytes);
            }
            _ => {
                let t = TOKENS[rng.index(TOKENS.len())].as_bytes();
                let end = (at + t.len()).min(v.len());
                v.splice(at..end, t.iter().copied());
            }
        }
    }
    v.truncate(64 * 1024);
    v
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn fuzz_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// Run one input; on a panic, save it as a regression input and return its path.
fn exec(target: &str, data: &[u8]) -> Option<PathBuf> {
    if catch_unwind(AssertUnwindSafe(|| targets::run(target, data))).is_ok() {
        return None;
    }
    let hash = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    let dir = fuzz_root().join("regressions").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("crash-{hash:016x}"));
    std::fs::write(&path, data).unwrap();
    Some(path)
}

#[test]
fn every_parser_survives_fuzzed_input() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let secs = env("FLEETAGENT_FUZZ_SECS");
    let execs = env("FLEETAGENT_FUZZ_EXECS").unwrap_or(DEFAULT_EXECS);
    let mut crashes = Vec::new();
    for (n, target) in targets::TARGETS.iter().enumerate() {
        let seeds: Vec<Vec<u8>> = files(&fuzz_root().join("corpus").join(target))
            .iter()
            .map(|p| std::fs::read(p).unwrap())
            .collect();
        assert!(!seeds.is_empty(), "no seed corpus for {target}");
        let regressions = files(&fuzz_root().join("regressions").join(target));
        let mut count = 0u64;
        for input in seeds
            .iter()
            .cloned()
            .chain(regressions.iter().map(|p| std::fs::read(p).unwrap()))
        {
            count += 1;
            crashes.extend(exec(target, &input));
        }
        let mut rng = Rng(0x5eed_0000 + n as u64);
        let started = Instant::now();
        let mut i = 0u64;
        loop {
            match secs {
                Some(s) if started.elapsed() >= Duration::from_secs(s) => break,
                None if i >= execs => break,
                _ => {}
            }
            let a = &seeds[rng.index(seeds.len())];
            let b = &seeds[rng.index(seeds.len())];
            let input = mutate(&mut rng, a, b);
            crashes.extend(exec(target, &input));
            i += 1;
            count += 1;
        }
        println!(
            "fuzz {target}: {count} executions ({} seeds, {} regressions, {i} mutations), {} crash(es)",
            seeds.len(),
            regressions.len(),
            crashes.len()
        );
    }
    assert!(crashes.is_empty(), "inputs that panic (saved): {crashes:?}");
}
