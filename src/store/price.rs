//! The FIL/USD cache of `price.fil_usd_command` / `fil_usd_url` (`agent_state.fil_usd`,
//! `fil_usd_at`, `fil_usd_error`): the last value fetched with its time, and the last
//! fetch's failure (cleared by the next success). A failed fetch keeps the old value, which
//! `price::resolve_cached` stops using once it is older than `price.max_age_mins`.

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::clock::Millis;

/// What the cache holds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FilUsdCache {
    pub fil_usd: Option<f64>,
    pub at: Option<Millis>,
    pub error: Option<String>,
}

pub fn cache(conn: &Connection) -> Result<FilUsdCache> {
    Ok(conn.query_row(
        "SELECT fil_usd, fil_usd_at, fil_usd_error FROM agent_state WHERE id = 1",
        [],
        |r| {
            Ok(FilUsdCache {
                fil_usd: r.get(0)?,
                at: r.get(1)?,
                error: r.get(2)?,
            })
        },
    )?)
}

/// A fetch succeeded: the value and its time replace the old ones; the error is cleared.
pub fn set_fetched(conn: &Connection, fil_usd: f64, at: Millis) -> Result<()> {
    conn.execute(
        "UPDATE agent_state SET fil_usd = ?1, fil_usd_at = ?2, fil_usd_error = NULL WHERE id = 1",
        params![fil_usd, at],
    )?;
    Ok(())
}

/// A fetch failed: the error is kept, the old value stays (and ages).
pub fn set_error(conn: &Connection, error: &str) -> Result<()> {
    conn.execute(
        "UPDATE agent_state SET fil_usd_error = ?1 WHERE id = 1",
        params![crate::text::clip(error, 300)],
    )?;
    Ok(())
}

/// The ask price of the last successful Curio reading (`agent_state.last_reading`), for the
/// readers outside a pass (`inspect`, `doctor`, the metrics file).
pub fn last_ask_price(conn: &Connection) -> Result<Option<String>> {
    Ok(match crate::store::curio::last_reading(conn)? {
        (Some(json), Some(_)) => serde_json::from_str::<crate::demand::Demand>(&json)
            .ok()
            .and_then(|d| d.ask_price_attofil),
        _ => None,
    })
}

impl FilUsdCache {
    /// The cached value and when it was fetched (None before a first success).
    pub fn value(&self) -> Option<(f64, Millis)> {
        self.fil_usd.zip(self.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    #[test]
    fn a_failure_keeps_the_value_and_a_success_clears_the_error() {
        let s = Store::open_memory(0).unwrap();
        assert_eq!(cache(&s.conn).unwrap(), FilUsdCache::default());
        assert_eq!(cache(&s.conn).unwrap().value(), None);
        set_fetched(&s.conn, 4.0, 1_000).unwrap();
        set_error(
            &s.conn,
            "price.fil_usd_url: GET http://127.0.0.1:1/p failed",
        )
        .unwrap();
        let c = cache(&s.conn).unwrap();
        assert_eq!(c.value(), Some((4.0, 1_000)));
        assert!(c.error.unwrap().starts_with("price.fil_usd_url"));
        set_fetched(&s.conn, 5.0, 9_000).unwrap();
        let c = cache(&s.conn).unwrap();
        assert_eq!((c.value(), c.error), (Some((5.0, 9_000)), None));
        assert_eq!(last_ask_price(&s.conn).unwrap(), None);
    }
}
