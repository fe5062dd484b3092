//! `--plot FILE`: queue, fleet size, throughput against target and spend over time as one
//! SVG, written by hand (four panels sharing the time axis; no plotting dependency).

use std::fmt::Write as _;

use super::world::Sample;

const WIDTH: f64 = 960.0;
const PANEL: f64 = 170.0;
const GAP: f64 = 46.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;

struct Series<'a> {
    name: &'a str,
    color: &'a str,
    dashed: bool,
    values: Vec<f64>,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A round axis maximum at or above `v`.
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * mag >= v {
            return m * mag;
        }
    }
    10.0 * mag
}

fn panel(out: &mut String, index: usize, title: &str, hours: &[f64], series: &[Series<'_>]) {
    let y0 = TOP + index as f64 * (PANEL + GAP);
    let plot_w = WIDTH - LEFT - RIGHT;
    let x_max = hours.last().copied().unwrap_or(1.0).max(1e-9);
    let y_max = nice_max(
        series
            .iter()
            .flat_map(|s| s.values.iter().copied())
            .fold(0.0, f64::max),
    );
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="{:.1}" font-weight="bold">{}</text>"##,
        y0 - 8.0,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{y0:.1}" width="{plot_w:.1}" height="{PANEL}" fill="none" stroke="#999"/>"##
    );
    for k in 0..=4 {
        let v = y_max * k as f64 / 4.0;
        let y = y0 + PANEL - PANEL * k as f64 / 4.0;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            y + 4.0,
            trim(v)
        );
    }
    let ticks = 8;
    for k in 0..=ticks {
        let h = x_max * k as f64 / ticks as f64;
        let x = LEFT + plot_w * k as f64 / ticks as f64;
        let _ = writeln!(
            out,
            r##"<text x="{x:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}h</text>"##,
            y0 + PANEL + 14.0,
            trim(h)
        );
    }
    for (si, s) in series.iter().enumerate() {
        let mut pts = String::new();
        for (h, v) in hours.iter().zip(&s.values) {
            let x = LEFT + plot_w * h / x_max;
            let y = y0 + PANEL - PANEL * (v / y_max).clamp(0.0, 1.0);
            let _ = write!(pts, "{x:.1},{y:.1} ");
        }
        let dash = if s.dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = writeln!(
            out,
            r##"<polyline fill="none" stroke="{}" stroke-width="1.5"{dash} points="{}"/>"##,
            s.color,
            pts.trim_end()
        );
        let ly = y0 + 14.0 + 16.0 * si as f64;
        let lx = LEFT + plot_w + 12.0;
        let _ = writeln!(
            out,
            r##"<line x1="{lx:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="{}" stroke-width="2"{dash}/><text x="{:.1}" y="{ly:.1}" font-size="12">{}</text>"##,
            lx + 18.0,
            ly - 4.0,
            ly - 4.0,
            s.color,
            lx + 24.0,
            escape(s.name)
        );
    }
}

fn trim(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{}", v as i64)
    } else {
        format!("{v:.1}")
    }
}

/// The SVG document for these samples.
pub fn svg(title: &str, samples: &[Sample], target: f64) -> String {
    let t0 = samples.first().map(|s| s.t).unwrap_or(0);
    let hours: Vec<f64> = samples
        .iter()
        .map(|s| (s.t - t0) as f64 / 3_600_000.0)
        .collect();
    let col = |f: fn(&Sample) -> f64| samples.iter().map(f).collect::<Vec<f64>>();
    let height = TOP + 4.0 * (PANEL + GAP);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="13">"##
    );
    let _ = writeln!(out, r##"<rect width="100%" height="100%" fill="white"/>"##);
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="20" font-size="15" font-weight="bold">{}</text>"##,
        escape(title)
    );
    panel(
        &mut out,
        0,
        "PSProve queue",
        &hours,
        &[
            Series {
                name: "pending",
                color: "#d62728",
                dashed: false,
                values: col(|s| s.pending as f64),
            },
            Series {
                name: "running",
                color: "#1f77b4",
                dashed: false,
                values: col(|s| s.running as f64),
            },
            Series {
                name: "stale owner",
                color: "#7f7f7f",
                dashed: true,
                values: col(|s| s.stale as f64),
            },
        ],
    );
    panel(
        &mut out,
        1,
        "Fleet (our instances)",
        &hours,
        &[
            Series {
                name: "live workers",
                color: "#2ca02c",
                dashed: false,
                values: col(|s| s.live as f64),
            },
            Series {
                name: "loading",
                color: "#ff7f0e",
                dashed: false,
                values: col(|s| s.loading as f64),
            },
        ],
    );
    panel(
        &mut out,
        2,
        "Throughput (proofs/h, last 15 min)",
        &hours,
        &[
            Series {
                name: "throughput",
                color: "#1f77b4",
                dashed: false,
                values: col(|s| s.throughput),
            },
            Series {
                name: "market",
                color: "#9467bd",
                dashed: false,
                values: col(|s| s.market_rate),
            },
            Series {
                name: "target",
                color: "#d62728",
                dashed: true,
                values: vec![target; samples.len()],
            },
        ],
    );
    panel(
        &mut out,
        3,
        "Spend (dollars, cumulative)",
        &hours,
        &[Series {
            name: "spend",
            color: "#8c564b",
            dashed: false,
            values: col(|s| s.spend),
        }],
    );
    out.push_str("</svg>\n");
    out
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
        assert_eq!(nice_max(7.0), 10.0);
        assert_eq!(nice_max(130.0), 200.0);
    }
}
