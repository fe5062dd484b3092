//! The Curio line of the observation: what the reading says beyond the queue (DESIGN.md
//! "Reading Curio"): Curio's own backlog, ProofShare's state and request loop, the ask price,
//! paid beside computed, what is not work (orphan tasks, stale waiting rows) and the
//! reading's notes. One line, outside text quoted and clipped. Pure.

use crate::clock::human_duration;
use crate::demand::{Demand, RequestLoop};
use crate::text::quote;

/// At most this many notes are shown; the rest are counted.
const MAX_NOTES: usize = 3;
/// Each note is clipped to this many characters.
const NOTE_CHARS: usize = 120;

/// `Curio: backlog 3 (its own figure). Paid 7 of 9 completed in the last hour, 1 proof of
/// work. ...`; None when the reading carries nothing beyond the queue (an older source).
pub fn curio_line(d: &Demand) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    if d.proofshare_disabled() {
        parts.push("ProofShare disabled: no work will come (nothing is launched for it).".into());
    }
    if let Some(b) = d.backlog {
        parts.push(format!("backlog {b} (Curio's own figure)."));
    }
    match d.request_loop {
        Some(RequestLoop::Stalled) => parts.push(
            "request loop STALLED: its task has no live owner, Curio asks the market for no work."
                .into(),
        ),
        Some(RequestLoop::None) if !d.proofshare_disabled() => {
            parts.push("request loop: none (no request task).".into())
        }
        _ => {}
    }
    if let Some(price) = d.ask_price_attofil.as_deref() {
        let fil = fil_of(price)
            .map(|f| format!(" ({f} FIL)"))
            .unwrap_or_default();
        parts.push(format!("ask price {} attoFIL{fil}.", quote(price, 40)));
    }
    if let Some(paid) = d.paid_1h {
        let pow = match d.pow_1h {
            Some(1) => ", 1 proof of work".to_string(),
            Some(n) => format!(", {n} proofs of work"),
            None => String::new(),
        };
        parts.push(format!(
            "paid {paid} of {} completed in the last hour{pow}.",
            d.completed_1h
        ));
    }
    let mut not_work = Vec::new();
    if d.orphan_tasks > 0 {
        not_work.push(format!(
            "{} orphan PSProve task(s) with no queue row{}",
            d.orphan_tasks,
            oldest(d.orphan_oldest_secs)
        ));
    }
    if d.stale_waiting > 0 {
        not_work.push(format!(
            "{} stale waiting row(s){}",
            d.stale_waiting,
            oldest(d.stale_oldest_secs)
        ));
    }
    if !not_work.is_empty() {
        parts.push(format!("Not work, no emergency: {}.", not_work.join(", ")));
    }
    if !d.notes.is_empty() {
        let mut notes: Vec<String> = d
            .notes
            .iter()
            .take(MAX_NOTES)
            .map(|n| quote(n, NOTE_CHARS))
            .collect();
        if d.notes.len() > MAX_NOTES {
            notes.push(format!("+{} more", d.notes.len() - MAX_NOTES));
        }
        parts.push(format!("Reading notes: {}.", notes.join("; ")));
    }
    (!parts.is_empty()).then(|| format!("Curio: {}", parts.join(" ")))
}

fn oldest(secs: Option<u64>) -> String {
    secs.map(|s| format!(" (oldest {})", human_duration(s as i64 * 1000)))
        .unwrap_or_default()
}

/// attoFIL as decimal text -> FIL, at most 6 decimals, trailing zeros trimmed; None when the
/// text is not a whole non-negative number.
pub fn fil_of(attofil: &str) -> Option<String> {
    let t = attofil.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: u128 = t.parse().ok()?;
    let whole = v / 1_000_000_000_000_000_000;
    // Rounded to 6 decimals.
    let micro = (v % 1_000_000_000_000_000_000 + 500_000_000_000) / 1_000_000_000_000;
    let (whole, micro) = if micro >= 1_000_000 {
        (whole + 1, micro - 1_000_000)
    } else {
        (whole, micro)
    };
    let frac = format!("{micro:06}");
    let frac = frac.trim_end_matches('0');
    Some(if frac.is_empty() {
        whole.to_string()
    } else {
        format!("{whole}.{frac}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_source_adds_nothing() {
        assert_eq!(curio_line(&Demand::default()), None);
    }

    #[test]
    fn the_whole_reading_in_one_line() {
        let d = Demand {
            completed_1h: 9,
            backlog: Some(3),
            orphan_tasks: 2,
            orphan_oldest_secs: Some(3 * 86_400 + 7200),
            stale_waiting: 4,
            stale_oldest_secs: Some(2 * 3600),
            proofshare_enabled: Some(true),
            request_loop: Some(RequestLoop::Stalled),
            ask_price_attofil: Some("5000000000000000".into()),
            paid_1h: Some(7),
            pow_1h: Some(1),
            notes: vec!["proofshare_provider_payments: permission denied\nfor table".into()],
            ..Default::default()
        };
        assert_eq!(
            curio_line(&d).unwrap(),
            "Curio: backlog 3 (Curio's own figure). request loop STALLED: its task has no live owner, \
             Curio asks the market for no work. ask price \"5000000000000000\" attoFIL (0.005 FIL). \
             paid 7 of 9 completed in the last hour, 1 proof of work. Not work, no emergency: \
             2 orphan PSProve task(s) with no queue row (oldest 3d02h), 4 stale waiting row(s) \
             (oldest 2h00m). Reading notes: \"proofshare_provider_payments: permission denied for table\"."
        );
    }

    #[test]
    fn proofshare_disabled_is_said_first() {
        let d = Demand {
            proofshare_enabled: Some(false),
            request_loop: Some(RequestLoop::None),
            ..Default::default()
        };
        assert_eq!(
            curio_line(&d).unwrap(),
            "Curio: ProofShare disabled: no work will come (nothing is launched for it)."
        );
        let none = Demand {
            request_loop: Some(RequestLoop::None),
            ..Default::default()
        };
        assert!(curio_line(&none).unwrap().contains("request loop: none"));
    }

    #[test]
    fn attofil_in_fil() {
        assert_eq!(fil_of("5000000000000000").as_deref(), Some("0.005"));
        assert_eq!(fil_of("1000000000000000000").as_deref(), Some("1"));
        assert_eq!(fil_of("1234567890123456789").as_deref(), Some("1.234568"));
        assert_eq!(fil_of("0").as_deref(), Some("0"));
        assert_eq!(fil_of("-1"), None);
        assert_eq!(fil_of("1e18"), None);
    }
}
