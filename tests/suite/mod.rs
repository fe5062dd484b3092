//! Test modules, one per capability.
mod backbone;
mod demand;
mod hands;
mod llm_client;
mod mind;
mod units;
mod vast_client;
mod agent_e2e;
