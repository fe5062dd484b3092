//! Test support: a builder that runs the real binary in a temp state dir, and fakes of the
//! outside services on 127.0.0.1.
#![allow(dead_code)]
pub mod config;
pub mod fake_llm;
pub mod fake_vast;
pub mod fleet;
pub mod pg;
pub mod proxy;
pub mod rng;
pub mod systemd;
