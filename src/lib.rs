//! fleetagent: keeps a fleet of rented vast.ai GPU instances sized to a Curio cluster's
//! SNARK proving demand. An LLM decides; this crate makes that safe. See docs/architecture.md.

pub mod agent;
pub mod app;
pub mod cli;
pub mod clock;
pub mod cmd;
pub mod config;
pub mod context;
pub mod debounce;
pub mod demand;
pub mod docs_gen;
pub mod doctor;
pub mod doorbell;
pub mod error;
pub mod faults;
pub mod fleet;
pub mod guardrails;
pub mod inspect;
pub mod llm;
pub mod lock;
pub mod metrics;
pub mod observation;
pub mod output;
pub mod pass;
pub mod paths;
pub mod policy;
pub mod rules;
pub mod runner;
pub mod secrets;
pub mod services;
pub mod sim;
pub mod store;
pub mod tokens;
pub mod tools;
pub mod units;
pub mod vast;
