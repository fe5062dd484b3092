//! Test modules, one per capability.
mod backbone;
mod vast_client;
mod llm_client;
mod demand;
