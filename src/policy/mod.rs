//! The policy room: pure decisions. Each takes what its caller knows (the snapshot, the
//! config, the time, the arguments, the answers of calls already made) and returns what to
//! do next (the calls to make, the ledger rows to write, the result to give back); the tools
//! only execute it. Nothing here does I/O or reads the clock. Guardrails and rules move in
//! here later.

pub mod launch;
pub mod stop;
