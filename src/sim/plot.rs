//! `--plot FILE`: queue, fleet size, throughput against target and spend over time as one
//! SVG (four panels sharing the time axis, drawn by the shared `crate::plot`).

use crate::plot::{self, Chart, Panel, Series};

use super::world::Sample;

/// The SVG document for these samples.
pub fn svg(title: &str, samples: &[Sample], target: f64) -> String {
    let t0 = samples.first().map(|s| s.t).unwrap_or(0);
    let hours: Vec<f64> = samples
        .iter()
        .map(|s| (s.t - t0) as f64 / 3_600_000.0)
        .collect();
    let col = |f: fn(&Sample) -> f64| samples.iter().map(f).collect::<Vec<f64>>();
    let panel = |title: &str, series: Vec<Series>| Panel {
        title: title.to_string(),
        series,
        note: None,
    };
    let tick = |h: f64| format!("{}h", plot::trim(h));
    plot::svg(&Chart {
        title: title.to_string(),
        x_lo: 0.0,
        x_hi: hours.last().copied().unwrap_or(1.0),
        x: hours,
        tick: &tick,
        message: None,
        panels: vec![
            panel(
                "PSProve queue",
                vec![
                    Series::full("pending", "#d62728", false, col(|s| s.pending as f64)),
                    Series::full("running", "#1f77b4", false, col(|s| s.running as f64)),
                    Series::full("stale owner", "#7f7f7f", true, col(|s| s.stale as f64)),
                ],
            ),
            panel(
                "Fleet (our instances)",
                vec![
                    Series::full("live workers", "#2ca02c", false, col(|s| s.live as f64)),
                    Series::full("loading", "#ff7f0e", false, col(|s| s.loading as f64)),
                ],
            ),
            panel(
                "Throughput (proofs/h, last 15 min)",
                vec![
                    Series::full("throughput", "#1f77b4", false, col(|s| s.throughput)),
                    Series::full("market", "#9467bd", false, col(|s| s.market_rate)),
                    Series::full("target", "#d62728", true, vec![target; samples.len()]),
                ],
            ),
            panel(
                "Spend (dollars, cumulative)",
                vec![Series::full("spend", "#8c564b", false, col(|s| s.spend))],
            ),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_four_panels_and_escapes_text() {
        let samples: Vec<Sample> = (0..10)
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
            })
            .collect();
        let s = svg("a <b> & c", &samples, 150.0);
        assert!(s.starts_with("<svg"));
        assert_eq!(s.matches("<polyline").count(), 9);
        assert!(s.contains("a &lt;b&gt; &amp; c"));
        assert!(s.trim_end().ends_with("</svg>"));
    }
}
