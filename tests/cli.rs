//! The one integration-test binary: the real `fleetagent` binary and library against real
//! SQLite, with outside services faked on 127.0.0.1 (tests/common).

// Tests drive real processes in real time; the Clock seam is for the code under test.
#![allow(clippy::disallowed_methods)]
// Tests print their measured figures (`-- --nocapture`).
#![allow(clippy::disallowed_macros)]

mod common;
mod suite;
