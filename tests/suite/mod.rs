//! Test modules, one per capability.
mod agent_e2e;
mod backbone;
mod calibration;
mod demand;
mod docs;
mod floor;
mod hands;
mod hardening;
mod layers;
mod llm_client;
mod llm_client_fixtures;
mod metrics;
mod mind;
mod sim;
mod sim_llm;
mod units;
mod vast_client;
