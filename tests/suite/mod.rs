//! Test modules, one per capability.
