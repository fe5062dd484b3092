//! Test modules, one per capability.
mod backbone;
mod demand;
mod llm_client;
mod mind;
mod vast_client;
