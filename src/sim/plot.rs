//! `--plot FILE`: queue, fleet size, throughput against target, spend, revenue and profit
//! over time as one SVG (five panels sharing the time axis, in hours from the start, drawn by
//! the shared `crate::plot`): the panels `inspect --plot` draws, from the simulated world.

use crate::plot::{self, Chart, Panel, Series};

use super::world::Sample;

/// The panels' titles, top to bottom (tests look for them).
pub const TITLES: [&str; 5] = [
    "PSProve queue",
    "Fleet (our instances)",
    "Throughput (proofs/h, last 15 min)",
    "Spend, revenue and profit ($/h)",
    "Spend and profit (dollars, cumulative)",
];

/// The SVG document for these samples.
pub fn svg(title: &str, samples: &[Sample], target: f64) -> String {
    let t0 = samples.first().map(|s| s.t).unwrap_or(0);
    let hours: Vec<f64> = samples
        .iter()
        .map(|s| (s.t - t0) as f64 / 3_600_000.0)
        .collect();
    let col = |f: fn(&Sample) -> f64| samples.iter().map(f).collect::<Vec<f64>>();
    let opt = |f: fn(&Sample) -> Option<f64>| samples.iter().map(f).collect::<Vec<_>>();
    let series = |name: &str, color: &'static str, values: Vec<Option<f64>>| Series {
        name: name.to_string(),
        color,
        dashed: false,
        values,
    };
    let panel = |title: &str, integer: bool, series: Vec<Series>| Panel {
        title: title.to_string(),
        series,
        note: None,
        integer,
    };
    let priced = samples.iter().any(|s| s.revenue.is_some());
    let money_note = |text: &str| {
        Some(if priced {
            text.to_string()
        } else {
            "no price modelled (no [price] in the scenario): revenue and profit unknown".into()
        })
    };
    let x_hi = hours.last().copied().unwrap_or(1.0);
    let panels = vec![
        panel(
            TITLES[0],
            true,
            vec![
                Series::full("pending", "#d62728", false, col(|s| s.pending as f64)),
                Series::full("running", "#1f77b4", false, col(|s| s.running as f64)),
                Series::full("stale owner", "#7f7f7f", true, col(|s| s.stale as f64)),
            ],
        ),
        panel(
            TITLES[1],
            true,
            vec![
                Series::full("live workers", "#2ca02c", false, col(|s| s.live as f64)),
                Series::full("loading", "#ff7f0e", false, col(|s| s.loading as f64)),
            ],
        ),
        panel(
            TITLES[2],
            false,
            vec![
                Series::full("throughput", "#1f77b4", false, col(|s| s.throughput)),
                Series::full("market", "#9467bd", false, col(|s| s.market_rate)),
                Series::full("target", "#d62728", true, vec![target; samples.len()]),
            ],
        ),
        Panel {
            note: money_note(
                "revenue = the last hour's completions (every simulated worker is ours) x the price of a proof then",
            ),
            ..panel(
                TITLES[3],
                false,
                vec![
                    Series::full("spend", "#8c564b", false, col(|s| s.spend_dph)),
                    series("revenue", "#2ca02c", opt(|s| s.revenue_dph)),
                    series(
                        "profit",
                        "#1f77b4",
                        opt(|s| Some(s.revenue_dph? - s.spend_dph)),
                    ),
                ],
            )
        },
        Panel {
            note: money_note("profit = the revenue of every completion so far less the spend"),
            ..panel(
                TITLES[4],
                false,
                vec![
                    Series::full("spend", "#8c564b", false, col(|s| s.spend)),
                    series("profit", "#1f77b4", opt(|s| Some(s.revenue? - s.spend))),
                ],
            )
        },
    ];
    plot::svg(&Chart {
        title: title.to_string(),
        x_lo: 0.0,
        ticks: plot::hour_ticks(0.0, x_hi),
        x_hi,
        x: hours,
        message: None,
        panels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(price: bool) -> Vec<Sample> {
        (0..10)
            .map(|k| Sample {
                t: k * 300_000,
                pending: k as u32,
                running: 2,
                stale: 0,
                loading: 1,
                live: 3,
                throughput: 100.0,
                market_rate: 120.0,
                spend: k as f64,
                spend_dph: 12.0,
                revenue_dph: price.then_some(20.0),
                revenue: price.then_some(k as f64 * 1.5),
            })
            .collect()
    }

    #[test]
    fn svg_has_every_panel_with_price_and_profit_and_escapes_text() {
        let s = svg("a <b> & c", &samples(true), 150.0);
        assert!(s.starts_with("<svg"));
        for t in TITLES {
            assert!(s.contains(t), "{t}");
        }
        // 3 + 2 + 3 + 3 (spend, revenue, profit) + 2 (spend, profit) lines.
        assert_eq!(s.matches("<polyline").count(), 13);
        assert!(s.contains("a &lt;b&gt; &amp; c"));
        assert!(s.trim_end().ends_with("</svg>"));
        // 45 minutes: ticks every 10 minutes from the start.
        for tick in [">0h<", ">10m<", ">40m<"] {
            assert!(s.contains(tick), "{tick}");
        }
    }

    #[test]
    fn without_a_price_revenue_and_profit_are_gaps_and_the_panel_says_why() {
        let s = svg("t", &samples(false), 150.0);
        assert_eq!(s.matches("<polyline").count(), 3 + 2 + 3 + 1 + 1);
        assert!(s.contains("no price modelled"), "{s}");
    }
}
