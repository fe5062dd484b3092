//! The one integration-test binary: the real `fleetagent` binary and library against real
//! SQLite, with outside services faked on 127.0.0.1 (tests/common).

mod common;
mod suite;
