//! Time-series panels as one SVG, written by hand (no plotting dependency): the drawing shared
//! by `sim --plot` (the simulated world) and `inspect --plot` (the database's samples). A
//! [`Chart`] is panels stacked over one time axis; each panel has its own y axis (from 0, or
//! below 0 when a series goes negative) and a legend on the right. A `None` value is a gap:
//! the line stops there and starts again at the next known value, so an unknown is never
//! drawn as a zero.

use std::fmt::Write as _;

const WIDTH: f64 = 960.0;
const PANEL: f64 = 170.0;
const GAP: f64 = 46.0;
/// Added to the gap between panels when a panel has a note (its line sits in the gap).
const NOTE_GAP: f64 = 16.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;

/// One line of a panel. `values[i]` belongs to `Chart::x[i]`; None is a gap.
pub struct Series {
    pub name: String,
    pub color: &'static str,
    pub dashed: bool,
    pub values: Vec<Option<f64>>,
}

impl Series {
    /// A series with every value known.
    pub fn full(name: &str, color: &'static str, dashed: bool, values: Vec<f64>) -> Series {
        Series {
            name: name.to_string(),
            color,
            dashed,
            values: values.into_iter().map(Some).collect(),
        }
    }
}

pub struct Panel {
    pub title: String,
    pub series: Vec<Series>,
    /// A line of small print under the panel's time axis (what its gaps mean, say).
    pub note: Option<String>,
}

/// Panels over one time axis running from `x_lo` to `x_hi` (any unit: `tick` names a value).
pub struct Chart<'a> {
    pub title: String,
    pub x: Vec<f64>,
    pub x_lo: f64,
    pub x_hi: f64,
    /// The label of a tick at this x value (9 ticks, evenly spaced).
    pub tick: &'a dyn Fn(f64) -> String,
    pub panels: Vec<Panel>,
    /// Drawn across the first panel when set (a chart with nothing to show says why).
    pub message: Option<String>,
}

impl Chart<'_> {
    /// The space between two panels.
    fn gap(&self) -> f64 {
        if self.panels.iter().any(|p| p.note.is_some()) {
            GAP + NOTE_GAP
        } else {
            GAP
        }
    }

    /// The whole image, `(width, height)` in pixels.
    pub fn size(&self) -> (f64, f64) {
        (WIDTH, TOP + self.panels.len() as f64 * (PANEL + self.gap()))
    }
}

pub fn escape(s: &str) -> String {
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

/// The y axis of these series: `(lo, hi, steps)`. From 0 to a round maximum in 4 steps
/// when nothing is negative; else round steps covering both signs, 0 on a grid line.
fn y_range(series: &[Series]) -> (f64, f64, u32) {
    let known = || {
        series
            .iter()
            .flat_map(|s| s.values.iter().flatten().copied())
    };
    let max = known().fold(0.0, f64::max);
    let min = known().fold(0.0, f64::min);
    if min >= 0.0 {
        return (0.0, nice_max(max), 4);
    }
    let step = nice_max((max - min) / 4.0);
    let lo = (min / step).floor() * step;
    let hi = ((max / step).ceil() * step).max(lo + step);
    let steps = ((hi - lo) / step).round().max(1.0) as u32;
    (lo, hi, steps)
}

/// The runs of consecutive known values, each as (x, value) points.
fn segments<'a>(x: &'a [f64], values: &'a [Option<f64>]) -> Vec<Vec<(f64, f64)>> {
    let mut out = Vec::new();
    let mut run = Vec::new();
    for (h, v) in x.iter().zip(values) {
        match v {
            Some(v) => run.push((*h, *v)),
            None if !run.is_empty() => out.push(std::mem::take(&mut run)),
            None => {}
        }
    }
    if !run.is_empty() {
        out.push(run);
    }
    out
}

fn panel(out: &mut String, index: usize, chart: &Chart<'_>, p: &Panel) {
    let y0 = TOP + index as f64 * (PANEL + chart.gap());
    let plot_w = WIDTH - LEFT - RIGHT;
    let (x_lo, x_hi) = (chart.x_lo, chart.x_hi.max(chart.x_lo + 1e-9));
    let (y_lo, y_hi, steps) = y_range(&p.series);
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="{:.1}" font-weight="bold">{}</text>"##,
        y0 - 8.0,
        escape(&p.title)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{y0:.1}" width="{plot_w:.1}" height="{PANEL}" fill="none" stroke="#999"/>"##
    );
    for k in 0..=steps {
        let v = y_lo + (y_hi - y_lo) * k as f64 / steps as f64;
        let y = y0 + PANEL - PANEL * k as f64 / steps as f64;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            y + 4.0,
            label(v)
        );
    }
    let ticks = 8;
    for k in 0..=ticks {
        let h = x_lo + (x_hi - x_lo) * k as f64 / ticks as f64;
        let x = LEFT + plot_w * k as f64 / ticks as f64;
        let _ = writeln!(
            out,
            r##"<text x="{x:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"##,
            y0 + PANEL + 14.0,
            escape(&(chart.tick)(h))
        );
    }
    if let Some(note) = &p.note {
        let _ = writeln!(
            out,
            r##"<text x="{LEFT}" y="{:.1}" font-size="11" fill="#555">{}</text>"##,
            y0 + PANEL + 30.0,
            escape(note)
        );
    }
    for (si, s) in p.series.iter().enumerate() {
        let dash = if s.dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let point = |h: f64, v: f64| {
            let x = LEFT + plot_w * (h - x_lo) / (x_hi - x_lo);
            let y = y0 + PANEL - PANEL * ((v - y_lo) / (y_hi - y_lo)).clamp(0.0, 1.0);
            (x, y)
        };
        let runs = segments(&chart.x, &s.values);
        if runs.is_empty() && s.values.is_empty() {
            // (No samples at all: an empty line, as the simulator's plot always wrote.)
            let _ = writeln!(
                out,
                r##"<polyline fill="none" stroke="{}" stroke-width="1.5"{dash} points=""/>"##,
                s.color
            );
        }
        for run in runs {
            if let [(h, v)] = run[..] {
                // A lone known value between gaps: a dot, as a one-point line draws nothing.
                let (x, y) = point(h, v);
                let _ = writeln!(
                    out,
                    r##"<circle cx="{x:.1}" cy="{y:.1}" r="2" fill="{}"/>"##,
                    s.color
                );
                continue;
            }
            let mut pts = String::new();
            for (h, v) in run {
                let (x, y) = point(h, v);
                let _ = write!(pts, "{x:.1},{y:.1} ");
            }
            let _ = writeln!(
                out,
                r##"<polyline fill="none" stroke="{}" stroke-width="1.5"{dash} points="{}"/>"##,
                s.color,
                pts.trim_end()
            );
        }
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
            escape(&s.name)
        );
    }
}

/// A number as an axis label: whole numbers bare, others with one decimal.
pub fn trim(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{}", v as i64)
    } else {
        format!("{v:.1}")
    }
}

/// A y axis label: as [`trim`] where one decimal is exact, else with the decimals it needs
/// (up to 8: $0.0125, 1.25 proofs), so small values keep their scale.
fn label(v: f64) -> String {
    let exact = |d: i32| {
        let m = v * 10f64.powi(d);
        (m - m.round()).abs() < 1e-6 * m.abs().max(1.0)
    };
    if exact(1) {
        return trim(v);
    }
    let d = (2..=8).find(|d| exact(*d)).unwrap_or(8) as usize;
    format!("{v:.d$}")
}

/// The SVG document of this chart.
pub fn svg(chart: &Chart<'_>) -> String {
    let height = chart.size().1;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="13">"##
    );
    let _ = writeln!(out, r##"<rect width="100%" height="100%" fill="white"/>"##);
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="20" font-size="15" font-weight="bold">{}</text>"##,
        escape(&chart.title)
    );
    for (i, p) in chart.panels.iter().enumerate() {
        panel(&mut out, i, chart, p);
    }
    if let Some(m) = &chart.message {
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="16" fill="#d62728">{}</text>"##,
            LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
            TOP + PANEL / 2.0,
            escape(m)
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(panels: Vec<Panel>, x: Vec<f64>) -> String {
        let tick = |h: f64| format!("{}h", trim(h));
        svg(&Chart {
            title: "t".into(),
            x_lo: 0.0,
            x_hi: *x.last().unwrap_or(&1.0),
            x,
            tick: &tick,
            panels,
            message: None,
        })
    }

    #[test]
    fn a_gap_splits_the_line_and_a_lone_value_is_a_dot() {
        let s = Series {
            name: "a".into(),
            color: "#000",
            dashed: false,
            values: vec![
                Some(1.0),
                Some(2.0),
                None,
                Some(3.0),
                None,
                Some(1.0),
                Some(0.0),
            ],
        };
        let out = chart(
            vec![Panel {
                title: "p".into(),
                series: vec![s],
                note: Some("gaps: <unknown>".into()),
            }],
            (0..7).map(f64::from).collect(),
        );
        assert_eq!(out.matches("<polyline").count(), 2, "{out}");
        assert_eq!(out.matches("<circle").count(), 1, "{out}");
        assert!(out.contains("gaps: &lt;unknown&gt;"), "{out}");
    }

    #[test]
    fn negative_values_get_an_axis_below_zero_with_zero_on_a_line() {
        let (lo, hi, steps) = y_range(&[Series::full("p", "#000", false, vec![-3.0, 7.0])]);
        assert_eq!((lo, hi, steps), (-5.0, 7.5, 5));
        let (lo, hi, steps) = y_range(&[Series::full("p", "#000", false, vec![-0.4, -0.1])]);
        assert!(lo <= -0.4 && hi >= 0.0 && steps >= 1, "{lo} {hi} {steps}");
        assert_eq!(
            y_range(&[Series::full("p", "#000", false, vec![0.0, 130.0])]),
            (0.0, 200.0, 4)
        );
        assert_eq!(nice_max(7.0), 10.0);
        assert_eq!(
            [1.25, 7.5, 0.0005, 375.0, -2.5].map(label),
            ["1.25", "7.5", "0.0005", "375", "-2.5"]
        );
    }

    #[test]
    fn unknown_values_do_not_stretch_the_axis() {
        let s = Series {
            name: "a".into(),
            color: "#000",
            dashed: false,
            values: vec![None, None],
        };
        assert_eq!(y_range(&[s]), (0.0, 1.0, 4));
    }
}
