//! The config most integration tests start from: the rules alone over a fake vast.ai, no
//! debounce, demand read from a JSON file the test writes. Each test lays its own TOML over
//! it instead of repeating the whole file.

use std::path::Path;

/// The rules alone over the fake vast.ai at `vast_url` (the test image, RTX 4090 offers),
/// demand from `demand_file` (`cat` of a JSON file), no debounce (a P2 event waits 2 s at
/// most); then each of `over` in order: TOML whose keys replace or join these, table by
/// table, except `[demand]`, which replaces the whole table (another source needs none of
/// the file's keys).
pub fn rules_config(vast_url: &str, demand_file: &Path, over: &[&str]) -> String {
    let base = format!(
        r#"
[debounce]
p0_secs = 0
p1_secs = 0
p2_secs = 0
max_wait_secs = 2
[llm]
provider = "rules"
[vast]
base_url = "{vast_url}"
image = "ghcr.io/example/curio-psprove:latest"
[vast.offers]
gpu_names = ["RTX 4090"]
[demand]
source = "command"
command = "cat {}"
"#,
        demand_file.display()
    );
    let mut config: toml::Table = base.parse().expect("the base config parses");
    for text in over {
        let layer: toml::Table = text
            .parse()
            .unwrap_or_else(|e| panic!("a test's config layer does not parse: {e}\n{text}"));
        for (key, value) in layer {
            if key == "demand" {
                config.insert(key, value);
            } else {
                merge(&mut config, key, value);
            }
        }
    }
    toml::to_string(&config).expect("the merged config serializes")
}

fn merge(into: &mut toml::Table, key: String, value: toml::Value) {
    match (into.get_mut(&key), value) {
        (Some(toml::Value::Table(old)), toml::Value::Table(new)) => {
            for (k, v) in new {
                merge(old, k, v);
            }
        }
        (_, value) => {
            into.insert(key, value);
        }
    }
}
