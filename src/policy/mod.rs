//! Every decision of fleetagent's own, as pure functions over the fleet snapshot, the config
//! and `now`, the way the rules work: the guardrails (money, slots, protections), the rules
//! policy and its streaks, the launch and stop plans the tools execute, how long a model turn
//! may take, and the pass's own choices (skip, fallback, verdict). Nothing here does I/O: the
//! drivers (`run`, `agent`, `tools`) read the world, call these, and carry out the result.

pub mod action_lines;
pub mod floor;
pub mod guardrails;
pub mod launch;
pub mod offers;
pub mod pass;
pub mod peer;
pub mod result;
pub mod rules;
pub mod stop;
pub mod streaks;
pub mod turns;

#[cfg(test)]
mod caps_tests;
