//! The environment variables fleetagent reads, captured once in `main` and passed down (so
//! tests and `sim` give their own).

use std::collections::BTreeMap;

/// The environment variables fleetagent reads, captured once in `main`.
#[derive(Debug, Clone, Default)]
pub struct Env {
    vars: BTreeMap<String, String>,
}

impl Env {
    pub fn from_process() -> Env {
        Env {
            vars: std::env::vars().collect(),
        }
    }

    pub fn from_pairs<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Env {
        Env {
            vars: pairs.into_iter().collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }
}
