//! Test modules, one per capability.
mod backbone;
mod demand;
mod hands;
mod llm_client;
mod vast_client;
