//! The pass streaks the rules read (passes in a row of low demand, of a backlog): how one
//! demand reading advances them. Pure; the observe step stores them once per run.

use crate::demand::Demand;
use crate::store::session::Streaks;

use super::rules::{BACKLOG_MIN, LOW_PENDING_MAX};

/// The streaks after a reading; a failed probe (`None`) leaves them as they were.
pub fn next_streaks(prev: Streaks, demand: Option<&Demand>) -> Streaks {
    let Some(d) = demand else {
        return prev;
    };
    let low = !d.workers_dead() && d.backlog_signal() <= LOW_PENDING_MAX && d.idle_workers() > 0;
    let backlog = backlog(d);
    Streaks {
        low_demand_passes: if low { prev.low_demand_passes + 1 } else { 0 },
        backlog_passes: if backlog { prev.backlog_passes + 1 } else { 0 },
    }
}

/// A pass of the backlog streak: at least [`BACKLOG_MIN`] proofs waiting while every live
/// worker is busy (the market offers more than the fleet takes).
pub fn backlog(d: &Demand) -> bool {
    d.backlog_signal() >= BACKLOG_MIN && d.live_workers() > 0 && d.idle_workers() == 0
}
