//! Test modules, one per capability.
mod demand;
