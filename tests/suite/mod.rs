//! Test modules, one per capability.
mod units;
