//! Test modules, one per capability.
mod vast_client;
