//! fleetagent: keeps a fleet of rented vast.ai GPU instances sized to a Curio cluster's
//! SNARK proving demand. An LLM decides; this crate makes that safe. See docs/architecture.md.

pub mod app;
pub mod cli;
pub mod cmd;
pub mod clock;
pub mod config;
pub mod debounce;
pub mod demand;
pub mod doorbell;
pub mod error;
pub mod llm;
pub mod lock;
pub mod paths;
pub mod store;
pub mod units;
pub mod vast;
