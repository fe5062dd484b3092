//! The shared database of several management hosts (issue 24; docs/ha.md): the leader lease
//! with its epoch (the fencing token) and the `hosts` table, in the schema `fleetagent` of a
//! PostgreSQL or YugabyteDB (YSQL) database. Time is the database's (`now()`,
//! `clock_timestamp()`), never a host's clock. It never decides who should lead and is not
//! yet used by `run`: this is the first building block.
//!
//! [`SharedDb`] is one connection with bounded retries of SQLSTATE 40001/40P01; [`schema`]
//! creates the tables (idempotent, safe from three hosts at once); [`lease`] holds the
//! operations (acquire or join, renew, release, fence); [`hosts`] records who was seen.

mod db;
pub mod hosts;
pub mod lease;
pub mod schema;

pub use db::{Retry, SharedDb};
pub use hosts::HostSeen;
pub use lease::{Fenced, Role};
