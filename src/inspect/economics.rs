//! The fleet's economics as the database holds them after the last pass, for `inspect`'s
//! `price` object and the metrics file: the stored price, the last pass's demand reading and
//! our instances that are not gone, over `price::fleet_economics` (what the observation
//! states). Reads only; nothing is fetched.

use anyhow::Result;
use rusqlite::Connection;

use crate::clock::Millis;
use crate::config::Config;
use crate::demand::Demand;
use crate::fleet::rates::completions_1h;
use crate::price::{fleet_economics, FleetEconomics, Price};
use crate::store::{instances, session};

/// The price and the fleet's economics at it.
pub struct Stored {
    pub price: Result<Price, String>,
    /// The last FIL/USD fetch's failure, if any (none with a static `price.fil_usd`: its
    /// cache, from an earlier config, says nothing).
    pub fetch_error: Option<String>,
    pub economics: FleetEconomics,
}

pub fn stored(conn: &Connection, config: &Config, now: Millis) -> Result<Stored> {
    let (price, cache) = crate::run::observe::stored_price(conn, config, now)?;
    let rows = instances::live(conn)?;
    let demand = last_pass_demand(conn)?;
    let split = demand.as_ref().map(|d| completions_1h(&rows, d));
    let economics = fleet_economics(
        price.as_ref().ok(),
        // As the caps and the pass count it (one listed without a price at the most it may
        // cost): inspect's profit said $0.46/h of a fleet it showed at $2.30/h.
        crate::fleet::money::caps_dph(
            &rows,
            crate::fleet::money::unpriced_dph(config).unwrap_or(0.0),
        ),
        split.and_then(|c| c.ours),
        split.and_then(|c| c.others()),
        demand.as_ref().and_then(Demand::paid_share),
    );
    Ok(Stored {
        price,
        fetch_error: cache.error.filter(|_| config.price.fil_usd.is_none()),
        economics,
    })
}

/// The demand reading of the last pass (None before any, and when its probe failed: the
/// figures over it are unknown then, as the pass's own were).
fn last_pass_demand(conn: &Connection) -> Result<Option<Demand>> {
    let Some(text) = session::state(conn)?.last_demand else {
        return Ok(None);
    };
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(_) => return Ok(None),
    };
    Ok(serde_json::from_value(value["demand"].clone()).ok())
}

/// What our instances have cost since 00:00 UTC as the table holds them, as the daily cap
/// counts it: `inspect`, the metric (`metrics` re-exports it), and `doctor`'s daily cap check (a pass counts its own
/// reconciliation's rows too, `run::observe`).
pub fn spend_today(conn: &Connection, config: &crate::config::Config, now: Millis) -> Result<f64> {
    let day_start = now - now.rem_euclid(crate::fleet::day::DAY_MS);
    let alive = instances::alive_since(conn, day_start)?;
    let unpriced = crate::fleet::money::unpriced_dph(config).unwrap_or(0.0);
    Ok(crate::fleet::spend_since(&alive, day_start, now, unpriced))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::WorkerHistory;
    use crate::fleet::PROVING;
    use crate::store::Store;

    #[test]
    fn a_rented_instance_that_proves_nothing_beside_an_on_prem_prover_loses_its_cost() {
        let s = Store::open_memory(0).unwrap();
        let mut c = Config::default();
        c.price.proof_price_fil = Some(0.01);
        c.price.fil_usd = Some(4.0);
        let mut row = crate::fleet::fixtures::row("fleetagent-a", Some(1), PROVING, 0.5);
        row.worker_address = Some("172.17.0.2:12300".into());
        instances::upsert(&s.conn, &row).unwrap();
        let demand = Demand {
            completed_1h: 30,
            history: vec![WorkerHistory {
                host_and_port: "10.0.0.1:12300".into(),
                proofs: 30,
                first_end_secs_ago: 3000,
                last_end_secs_ago: 20,
                busy_secs: None,
                completed_1h: Some(30),
            }],
            ..Default::default()
        };
        let pass = serde_json::json!({"demand": demand, "error": null}).to_string();
        s.conn
            .execute("UPDATE agent_state SET last_demand = ?1", [&pass])
            .unwrap();
        let e = stored(&s.conn, &c, 1_000).unwrap().economics;
        assert_eq!(
            (e.ours_completed_1h, e.others_completed_1h),
            (Some(0), Some(30))
        );
        assert_eq!((e.cost_per_proof, e.profit_per_hour), (None, Some(-0.5)));
        // The last probe failed: nothing over the completions is known.
        s.conn
            .execute(
                "UPDATE agent_state SET last_demand = '{\"demand\":null,\"error\":\"x\"}'",
                [],
            )
            .unwrap();
        let e = stored(&s.conn, &c, 1_000).unwrap().economics;
        assert_eq!((e.ours_completed_1h, e.profit_per_hour), (None, None));
    }
}
