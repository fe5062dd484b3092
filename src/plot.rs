//! Time-series panels as one SVG, written by hand (no plotting dependency): the drawing shared
//! by `sim --plot` (the simulated world) and `inspect --plot` (the database's samples). A
//! [`Chart`] is panels stacked over one time axis; each panel has its own y axis (from 0, or
//! below 0 when a series goes negative) and a legend on the right. A `None` value is a gap:
//! the line stops there and starts again at the next known value, so an unknown is never
//! drawn as a zero. Ticks are round: the y axis steps by 1, 2 or 5 x 10^n (whole steps for
//! counts), the time axis by round spans of clock time ([`time_ticks`], [`hour_ticks`]).

use std::fmt::Write as _;

use crate::clock::{to_datetime, Millis};

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
    /// Its values are counts: the y axis steps by whole numbers.
    pub integer: bool,
}

/// Panels over one time axis running from `x_lo` to `x_hi` (any unit: the ticks name it).
pub struct Chart {
    pub title: String,
    pub x: Vec<f64>,
    pub x_lo: f64,
    pub x_hi: f64,
    /// The time axis's ticks inside `[x_lo, x_hi]`: position and label.
    pub ticks: Vec<(f64, String)>,
    pub panels: Vec<Panel>,
    /// Drawn across the first panel when set (a chart with nothing to show says why).
    pub message: Option<String>,
}

impl Chart {
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

/// The smallest step of 1, 2 or 5 x 10^n at or above `raw` (1 for anything not positive).
pub fn round_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powi(raw.log10().floor() as i32);
    for m in [1.0, 2.0, 5.0, 10.0] {
        // The tolerance keeps 0.3/3 = 0.09999... from stepping up to 0.2.
        if m * mag >= raw * (1.0 - 1e-9) {
            return m * mag;
        }
    }
    10.0 * mag
}

/// A y axis: from `lo` up by `steps` steps of `step`, each a round number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct YAxis {
    pub lo: f64,
    pub step: f64,
    pub steps: u32,
}

impl YAxis {
    pub fn hi(&self) -> f64 {
        self.value(self.steps)
    }

    /// The value of grid line `k` (from the bottom), computed from whole multiples of the
    /// step so labels carry no float noise.
    pub fn value(&self, k: u32) -> f64 {
        ((self.lo / self.step).round() + f64::from(k)) * self.step + 0.0
    }

    /// Decimals a label needs at this step: 0 for 1, 2, 5, 10...; 2 for 0.05.
    fn decimals(&self) -> usize {
        (-self.step.log10().floor()).max(0.0) as usize
    }

    pub fn label(&self, k: u32) -> String {
        let d = self.decimals();
        format!("{:.d$}", self.value(k))
    }
}

/// At most this many steps on a y axis (about 5: enough to read, few enough to label).
const Y_STEPS: f64 = 5.0;

/// The y axis of these series: round steps (1, 2 or 5 x 10^n; at least 1 for counts) from 0,
/// or from below 0 when a value is negative, with 0 on a grid line.
pub fn y_axis(series: &[Series], integer: bool) -> YAxis {
    let known = || {
        series
            .iter()
            .flat_map(|s| s.values.iter().flatten().copied())
            .filter(|v| v.is_finite())
    };
    let max = known().fold(0.0, f64::max);
    let min = known().fold(0.0, f64::min);
    let span = max - min;
    let mut step = if span > 0.0 {
        round_step(span / Y_STEPS)
    } else {
        1.0
    };
    if integer {
        step = step.max(1.0);
    }
    let lo = (min / step).floor() * step;
    let steps = (((max - lo) / step) - 1e-9).ceil().max(1.0) as u32;
    YAxis { lo, step, steps }
}

/// Round spans of clock time a time axis may step by, in seconds.
const TIME_STEPS: [i64; 24] = [
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
    172_800, 604_800, 1_209_600, 2_592_000, 5_184_000, 7_776_000,
];

/// At most this many ticks on a time axis.
const MAX_TICKS: i64 = 9;

/// Ticks of a wall-clock axis from `lo` to `hi` (ms since the epoch): at whole multiples of a
/// round span (UTC midnight for days), labelled `HH:MM` in UTC (`HH:MM:SS` under a minute's
/// step). When the window spans more than one date, the first tick and each tick on a new
/// date carry the date too: `03-02 00:00`.
pub fn time_ticks(lo: Millis, hi: Millis) -> Vec<(f64, String)> {
    let span_s = ((hi - lo).max(1) + 999) / 1000;
    let step = TIME_STEPS
        .iter()
        .copied()
        .find(|s| span_s / s < MAX_TICKS)
        .unwrap_or(7_776_000);
    let step_ms = step * 1000;
    let first = lo.div_euclid(step_ms) * step_ms
        + if lo.rem_euclid(step_ms) == 0 {
            0
        } else {
            step_ms
        };
    let spans_days = to_datetime(lo).date_naive() != to_datetime(hi).date_naive();
    let mut out = Vec::new();
    let mut prev_date = None;
    let mut t = first;
    while t <= hi {
        let dt = to_datetime(t);
        let date = dt.date_naive();
        let time = if step < 60 {
            dt.format("%H:%M:%S").to_string()
        } else {
            dt.format("%H:%M").to_string()
        };
        let label = if spans_days && prev_date != Some(date) {
            format!("{} {time}", dt.format("%m-%d"))
        } else {
            time
        };
        prev_date = Some(date);
        out.push((t as f64, label));
        t += step_ms;
    }
    out
}

/// Round spans of hours an hours axis may step by.
const HOUR_STEPS: [f64; 15] = [
    1.0 / 60.0,
    2.0 / 60.0,
    5.0 / 60.0,
    10.0 / 60.0,
    0.25,
    0.5,
    1.0,
    2.0,
    3.0,
    6.0,
    12.0,
    24.0,
    48.0,
    168.0,
    336.0,
];

/// Ticks of an axis in hours (the simulator's, from its start) from `lo` to `hi`: whole
/// multiples of a round span, labelled `6h`, `1h30m` or `30m`.
pub fn hour_ticks(lo: f64, hi: f64) -> Vec<(f64, String)> {
    let span = (hi - lo).max(1e-9);
    let step = HOUR_STEPS
        .iter()
        .copied()
        .find(|s| span / s < MAX_TICKS as f64)
        .unwrap_or(720.0);
    let mut out = Vec::new();
    let mut k = (lo / step - 1e-9).ceil() as i64;
    loop {
        let h = k as f64 * step;
        if h > hi + 1e-9 {
            break;
        }
        let mins = (h * 60.0).round() as i64;
        let label = match (mins / 60, mins % 60) {
            (0, m) if m != 0 => format!("{m}m"),
            (hours, 0) => format!("{hours}h"),
            (hours, m) => format!("{hours}h{m:02}m"),
        };
        out.push((h + 0.0, label));
        k += 1;
    }
    out
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

fn panel(out: &mut String, index: usize, chart: &Chart, p: &Panel) {
    let y0 = TOP + index as f64 * (PANEL + chart.gap());
    let plot_w = WIDTH - LEFT - RIGHT;
    let (x_lo, x_hi) = (chart.x_lo, chart.x_hi.max(chart.x_lo + 1e-9));
    let axis = y_axis(&p.series, p.integer);
    let (y_lo, y_hi, steps) = (axis.lo, axis.hi(), axis.steps);
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
        let y = y0 + PANEL - PANEL * k as f64 / steps as f64;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            y + 4.0,
            axis.label(k)
        );
    }
    for (h, text) in chart
        .ticks
        .iter()
        .filter(|(h, _)| (x_lo..=x_hi).contains(h))
    {
        let x = LEFT + plot_w * (h - x_lo) / (x_hi - x_lo);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="#999"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"##,
            y0 + PANEL,
            y0 + PANEL + 4.0,
            y0 + PANEL + 15.0,
            escape(text)
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

/// The SVG document of this chart.
pub fn svg(chart: &Chart) -> String {
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
        svg(&Chart {
            title: "t".into(),
            x_lo: 0.0,
            x_hi: *x.last().unwrap_or(&1.0),
            ticks: hour_ticks(0.0, *x.last().unwrap_or(&1.0)),
            x,
            panels,
            message: None,
        })
    }

    fn axis_labels(values: Vec<f64>, integer: bool) -> Vec<String> {
        let a = y_axis(&[Series::full("p", "#000", false, values)], integer);
        (0..=a.steps).map(|k| a.label(k)).collect()
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
                integer: false,
            }],
            (0..7).map(f64::from).collect(),
        );
        assert_eq!(out.matches("<polyline").count(), 2, "{out}");
        assert_eq!(out.matches("<circle").count(), 1, "{out}");
        assert!(out.contains("gaps: &lt;unknown&gt;"), "{out}");
    }

    #[test]
    fn y_ticks_step_by_one_two_or_five_and_counts_by_whole_numbers() {
        // The issue's 6.25 tasks (max 25 over 4 steps) and 0.75 instances (max 3 or 1).
        assert_eq!(
            axis_labels(vec![0.0, 25.0], true),
            ["0", "5", "10", "15", "20", "25"]
        );
        assert_eq!(axis_labels(vec![0.0, 3.0], true), ["0", "1", "2", "3"]);
        assert_eq!(axis_labels(vec![1.0, 1.0], true), ["0", "1"]);
        assert_eq!(axis_labels(vec![0.0, 7.0], true), ["0", "2", "4", "6", "8"]);
        assert_eq!(
            axis_labels(vec![0.0, 130.0], false),
            ["0", "50", "100", "150"]
        );
        assert_eq!(
            axis_labels(vec![0.0, 0.04], false),
            ["0.00", "0.01", "0.02", "0.03", "0.04"]
        );
        assert_eq!(
            axis_labels(vec![0.0, 0.7], false),
            ["0.0", "0.2", "0.4", "0.6", "0.8"]
        );
        // Every step of every axis is 1, 2 or 5 x 10^n, and whole for counts.
        for max in [
            0.3, 0.9, 1.0, 1.1, 2.5, 6.25, 12.0, 33.0, 99.0, 101.0, 1234.5,
        ] {
            for integer in [false, true] {
                let a = y_axis(&[Series::full("p", "#000", false, vec![0.0, max])], integer);
                let mantissa = a.step / 10f64.powi(a.step.log10().floor() as i32);
                assert!(
                    [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-9),
                    "{max}: step {}",
                    a.step
                );
                assert!(a.hi() >= max && a.steps <= 6, "{max}: {a:?}");
                assert!(!integer || a.step.fract() == 0.0, "{max}: {a:?}");
            }
        }
    }

    #[test]
    fn negative_values_get_an_axis_below_zero_with_zero_on_a_line() {
        assert_eq!(
            axis_labels(vec![-3.0, 7.0], false),
            ["-4", "-2", "0", "2", "4", "6", "8"]
        );
        let a = y_axis(&[Series::full("p", "#000", false, vec![-0.4, -0.1])], false);
        assert_eq!((a.lo, a.hi(), a.step), (-0.4, 0.0, 0.1));
        assert_eq!(round_step(0.3 / 3.0), 0.1);
        assert_eq!(round_step(0.0), 1.0);
    }

    #[test]
    fn unknown_values_do_not_stretch_the_axis() {
        let s = Series {
            name: "a".into(),
            color: "#000",
            dashed: false,
            values: vec![None, None],
        };
        let a = y_axis(&[s], false);
        assert_eq!((a.lo, a.hi(), a.steps), (0.0, 1.0, 1));
    }

    const T: Millis = 1_772_409_600_000; // 2026-03-02T00:00:00Z

    fn labels(ticks: &[(f64, String)]) -> Vec<&str> {
        ticks.iter().map(|(_, l)| l.as_str()).collect()
    }

    #[test]
    fn time_ticks_are_round_utc_clock_times_with_the_date_across_days() {
        // An hour to 10:07: every 10 minutes, on the minute.
        let hi = T + 10 * 3_600_000 + 7 * 60_000;
        let ticks = time_ticks(hi - 3_600_000, hi);
        assert_eq!(
            labels(&ticks),
            ["09:10", "09:20", "09:30", "09:40", "09:50", "10:00"]
        );
        assert!(ticks.iter().all(|(t, _)| (*t as Millis) % 600_000 == 0));
        // A day to 10:07: every 3 hours, the date where it changes.
        let ticks = time_ticks(hi - 86_400_000, hi);
        assert_eq!(
            labels(&ticks),
            [
                "03-01 12:00",
                "15:00",
                "18:00",
                "21:00",
                "03-02 00:00",
                "03:00",
                "06:00",
                "09:00"
            ]
        );
        // Seconds for a window of seconds.
        assert_eq!(
            labels(&time_ticks(T + 5_000, T + 40_000)),
            [
                "00:00:05", "00:00:10", "00:00:15", "00:00:20", "00:00:25", "00:00:30", "00:00:35",
                "00:00:40"
            ]
        );
        // A year: at most 9 ticks, whatever the span.
        let year = time_ticks(hi - 8784 * 3_600_000, hi);
        assert!(!year.is_empty() && year.len() <= 9, "{year:?}");
    }

    #[test]
    fn hour_ticks_are_round_spans_from_the_start() {
        assert_eq!(
            labels(&hour_ticks(0.0, 24.0)),
            ["0h", "3h", "6h", "9h", "12h", "15h", "18h", "21h", "24h"]
        );
        assert_eq!(
            labels(&hour_ticks(0.0, 1.0)),
            ["0h", "10m", "20m", "30m", "40m", "50m", "1h"]
        );
        assert_eq!(
            labels(&hour_ticks(0.0, 3.0))[..4],
            ["0h", "30m", "1h", "1h30m"]
        );
    }
}
