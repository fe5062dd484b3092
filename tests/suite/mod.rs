//! Test modules, one per capability.
mod llm_client;
