//! fleetagent: keeps a fleet of rented vast.ai GPU instances sized to a Curio cluster's
//! SNARK proving demand. An LLM decides; this crate makes that safe. See docs/architecture.md.
//!
//! The modules are declared in layers, top to bottom. A module may use modules of its own
//! layer and of the layers below it, never one above, and no two top-level modules may use
//! each other, directly or through others (a module and its children are one room). The
//! `// layer:` lines below are read by the layering test (tests/suite/layers.rs): a new
//! module goes under the layer it belongs to, or that test fails.

// layer: commands (one short handler per subcommand, and what is generated from the CLI)
pub mod cli;
pub mod cmd;
pub mod docs_gen;

// layer: drivers (the run loop and the pass script, the model's tool loop, the tools'
// execution, waking the agent, the reports; the simulator sits beside them)
pub mod agent;
pub mod doctor;
pub mod inspect;
pub mod metrics;
pub mod poll;
pub mod run;
pub mod sim;
pub mod tools;
pub mod trigger;

// layer: core (pure: the fleet as a pass sees it, every decision, every text the model reads)
pub mod fleet;
pub mod policy;
pub mod price;
pub mod prompt;
pub mod wakes;

// layer: adapters (our database, the outside services, the files and the OS)
pub mod demand;
pub mod doorbell;
pub mod fil_usd;
pub mod ha;
pub mod llm;
pub mod lock;
pub mod pg;
pub mod ratelimit;
pub mod services;
pub mod store;
pub mod tokens;
pub mod units;
pub mod vast;

// layer: base (what every layer uses)
pub mod clock;
pub mod config;
pub mod env;
pub mod error;
pub mod faults;
pub mod journal;
pub mod json;
pub mod output;
pub mod paths;
pub mod plot;
pub mod secrets;
pub mod text;
