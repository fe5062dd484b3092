//! Test modules, one per capability.
mod backbone;
mod demand;
mod hands;
mod llm_client;
mod metrics;
mod mind;
mod sim;
mod units;
mod vast_client;
