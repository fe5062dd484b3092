//! Test modules, one per capability.
mod agent_e2e;
mod backbone;
mod demand;
mod hands;
mod hardening;
mod llm_client;
mod mind;
mod units;
mod vast_client;
