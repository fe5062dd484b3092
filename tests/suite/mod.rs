//! Test modules, one per capability.
mod backbone;
