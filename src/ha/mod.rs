//! The shared database of several management hosts (issue 24; docs/ha.md): the leader lease
//! with its epoch (the fencing token) and the `hosts` table, in the schema `fleetagent` of a
//! PostgreSQL or YugabyteDB (YSQL) database. Time is the database's (`now()`,
//! `clock_timestamp()`), never a host's clock. It never picks a leader: leadership moves on
//! failure, on `ha release`, and when the leader has been blind to vast.ai while another
//! host reached it (`handover`: the leader releases; whoever polls next takes it).
//!
//! [`SharedDb`] is one connection with bounded retries of SQLSTATE 40001/40P01; [`schema`]
//! creates the tables (idempotent, safe from three hosts at once); [`lease`] holds the
//! operations (acquire or join, renew, release, fence); [`hosts`] records who was seen;
//! [`mirror`] keeps the leader's SQLite a write-through copy of the shared state; [`node`]
//! is this host in it (settings, the start of `run` and `poll`, the keeper); [`handover`]
//! moves the lease from a leader that cannot reach vast.ai to a host that can.

pub mod check;
mod db;
pub mod handover;
pub mod hosts;
pub mod lease;
pub mod mirror;
pub mod node;
pub mod schema;
pub mod status;

pub use db::{Retry, SharedDb};
pub use hosts::HostSeen;
pub use lease::{Fenced, Role};
