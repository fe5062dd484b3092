//! The FIL/USD cache of `price.fil_usd_command` / `fil_usd_url` (`agent_state.fil_usd`,
//! `fil_usd_at`, `fil_usd_error`): the last value fetched with its time, and the last
//! fetch's failure (cleared by the next success). A failed fetch keeps the old value, which
//! `price::resolve` stops using once it is older than `price.max_age_mins`.

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::clock::Millis;
use crate::config::Config;
use crate::price::{Fetched, Price};

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

/// Which source the cache came from, by the config: `command` or `url` (`fetched` for a
/// source set by code, the simulator's).
pub fn source_name(config: &Config) -> &'static str {
    if config.price.fil_usd_command.is_some() {
        "command"
    } else if config.price.fil_usd_url.is_some() {
        "url"
    } else {
        "fetched"
    }
}

/// The cached value as `price::resolve` takes it (None before a first success).
pub fn fetched(conn: &Connection, config: &Config) -> Result<Option<Fetched>> {
    let c = cache(conn)?;
    Ok(match (c.fil_usd, c.at) {
        (Some(fil_usd), Some(at)) => Some(Fetched {
            fil_usd,
            at,
            source: source_name(config),
        }),
        _ => None,
    })
}

/// The price as the store knows it, for the readers outside a pass (`inspect`, `doctor`,
/// the metrics file): the last Curio reading's ask price and the FIL/USD cache, resolved at
/// `now`. `Err(why)` (inside `Ok`) is an unknown price, with the last fetch's failure said.
pub fn stored_price(
    conn: &Connection,
    config: &Config,
    now: Millis,
) -> Result<Result<Price, String>> {
    let ask = match crate::store::curio::last_reading(conn)? {
        (Some(json), Some(_)) => serde_json::from_str::<crate::demand::Demand>(&json)
            .ok()
            .and_then(|d| d.ask_price_attofil),
        _ => None,
    };
    resolved(conn, config, ask.as_deref(), now)
}

/// `price::resolve` over the cache, with the last fetch's failure added to an unknown
/// price's reason (a static or fresh rate does not need it).
pub fn resolved(
    conn: &Connection,
    config: &Config,
    ask_attofil: Option<&str>,
    now: Millis,
) -> Result<Result<Price, String>> {
    let fetched = if config.price.fil_usd.is_some() {
        None
    } else {
        fetched(conn, config)?
    };
    Ok(
        crate::price::resolve(&config.price, ask_attofil, fetched, now).map_err(|why| match cache(
            conn,
        )
        .ok()
        .and_then(|c| c.error)
        {
            Some(e) if config.price.fil_usd.is_none() => {
                format!("{why}; the last fetch failed: {e}")
            }
            _ => why,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    #[test]
    fn a_failure_keeps_the_value_until_it_is_stale() {
        let s = Store::open_memory(0).unwrap();
        let mut c = Config::default();
        c.price.proof_price_fil = Some(0.01);
        c.price.fil_usd_url = Some("http://127.0.0.1:1/p".into());
        assert_eq!(cache(&s.conn).unwrap(), FilUsdCache::default());
        let e = stored_price(&s.conn, &c, 0).unwrap().unwrap_err();
        assert!(e.contains("not fetched yet"), "{e}");
        set_fetched(&s.conn, 4.0, 1_000).unwrap();
        set_error(
            &s.conn,
            "price.fil_usd_url: GET http://127.0.0.1:1/p failed",
        )
        .unwrap();
        let p = stored_price(&s.conn, &c, 2_000).unwrap().unwrap();
        assert_eq!(
            (p.fil_usd, p.fil_usd_source, p.fil_usd_at),
            (4.0, "url", 1_000)
        );
        let e = stored_price(&s.conn, &c, 1_000 + 61 * 60_000)
            .unwrap()
            .unwrap_err();
        assert!(
            e.contains("stale") && e.contains("the last fetch failed: price.fil_usd_url"),
            "{e}"
        );
        set_fetched(&s.conn, 5.0, 9_000).unwrap();
        assert_eq!(cache(&s.conn).unwrap().error, None);
    }
}
