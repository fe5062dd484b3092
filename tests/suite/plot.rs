//! `inspect --plot FILE [--hours H]` on a database made by real `run` passes (the fake
//! vast.ai, the `command` demand source rewritten between passes, one pass with a failing
//! probe): the SVG is well-formed XML with every panel's title, and a real renderer
//! (rsvg-convert, Debian's librsvg2-bin) draws every panel. And the arguments are checked
//! before anything is read.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::common::fake_vast::{FakeVast, FAKE_API_KEY};
use crate::common::fleet::{Fleet, FAST_CONFIG};
use fleetagent::inspect::plot::TITLES;

/// No launches (no offers, no target), a price known from the config: 0.01 FIL x $5.
const CONFIG: &str = r#"
[policy]
target_proofs_per_hour = 0
proofs_per_hour_per_instance = 20
[price]
proof_price_fil = 0.01
fil_usd = 5.0
"#;

fn worker(running: u32) -> serde_json::Value {
    json!([{"machine_name": "fleetagent-p1", "host_and_port": "10.0.0.9:12300",
            "running": running, "cordoned": false}])
}

/// Per-machine history: ours (the worker of fleetagent-p1) and an on-prem prover's.
fn history(ours: u32, onprem: u32) -> serde_json::Value {
    let h = |host: &str, n: u32| {
        json!({"host_and_port": host, "proofs": n, "first_end_secs_ago": 3000,
               "last_end_secs_ago": 30, "completed_1h": n})
    };
    json!([h("10.0.0.9:12300", ours), h("10.0.0.1:12300", onprem)])
}

/// The labels of the time axis's ticks (text centred under a panel), first panel only.
fn x_ticks(doc: &roxmltree::Document) -> Vec<String> {
    let frame_bottom = doc
        .descendants()
        .find(|n| n.has_tag_name("rect") && n.attribute("stroke") == Some("#999"))
        .map(|n| {
            let a = |k: &str| n.attribute(k).unwrap().parse::<f64>().unwrap();
            a("y") + a("height")
        })
        .unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("text-anchor") == Some("middle"))
        .filter(|n| {
            let y: f64 = n.attribute("y").unwrap().parse().unwrap();
            y > frame_bottom && y < frame_bottom + 20.0
        })
        .filter_map(|n| n.text().map(String::from))
        .collect()
}

/// Minutes since midnight of a tick label (`HH:MM`, or `MM-DD HH:MM`).
fn minutes(label: &str) -> i64 {
    let hm = label.rsplit(' ').next().unwrap();
    let (h, m) = hm
        .split_once(':')
        .unwrap_or_else(|| panic!("not HH:MM: {label}"));
    h.parse::<i64>().unwrap() * 60 + m.parse::<i64>().unwrap()
}

/// The y axis labels of each panel (right-aligned text left of the frames), in order.
fn y_labels(doc: &roxmltree::Document, panels: usize) -> Vec<Vec<f64>> {
    let frames: Vec<(f64, f64)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("stroke") == Some("#999"))
        .map(|n| {
            let a = |k: &str| n.attribute(k).unwrap().parse::<f64>().unwrap();
            (a("y"), a("y") + a("height"))
        })
        .collect();
    assert_eq!(frames.len(), panels);
    frames
        .iter()
        .map(|(top, bottom)| {
            doc.descendants()
                .filter(|n| n.has_tag_name("text") && n.attribute("text-anchor") == Some("end"))
                .filter(|n| {
                    let y: f64 = n.attribute("y").unwrap().parse().unwrap();
                    y >= top - 1.0 && y <= bottom + 5.0
                })
                .map(|n| n.text().unwrap().parse::<f64>().unwrap())
                .collect()
        })
        .collect()
}

/// A step of 1, 2 or 5 x 10^n.
fn round_step(step: f64) -> bool {
    let mantissa = step / 10f64.powi(step.log10().floor() as i32);
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .any(|m| (mantissa - m).abs() < 1e-6)
}

/// The PNG of this SVG as rsvg-convert draws it: width, height, bytes per pixel, pixels.
type Image = (u32, u32, usize, Vec<u8>);

/// Fails the test, saying what to install, when the renderer is missing.
fn require_rsvg_convert() {
    if let Err(e) = Command::new("rsvg-convert").arg("--version").output() {
        panic!(
            "rsvg-convert cannot be run ({e}): install librsvg2-bin (apt-get install librsvg2-bin; scripts/test does)"
        );
    }
}

fn render(svg: &Path) -> Image {
    let png = svg.with_extension("png");
    let out = Command::new("rsvg-convert")
        .arg("--background-color=white")
        .arg("-o")
        .arg(&png)
        .arg(svg)
        .output()
        .expect("rsvg-convert");
    assert!(
        out.status.success(),
        "rsvg-convert failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut decoder =
        png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let bpp = match info.color_type {
        png::ColorType::Rgba => 4,
        png::ColorType::Rgb => 3,
        other => panic!("rsvg-convert wrote a {other:?} PNG"),
    };
    buf.truncate(info.buffer_size());
    (info.width, info.height, bpp, buf)
}

/// Pixels of a series colour (clearly not grey: the background, grid and frame are grey) in
/// the rectangle, its bottom edge included (a line at 0 is drawn on the frame).
fn coloured(img: &Image, x: f64, y: f64, w: f64, h: f64) -> usize {
    let (width, height, bpp, px) = img;
    let mut n = 0;
    for row in (y as u32)..((y + h + 2.0) as u32).min(*height) {
        for col in (x as u32 + 1)..((x + w) as u32).min(*width) {
            let i = (row * width + col) as usize * bpp;
            let (r, g, b) = (px[i] as i32, px[i + 1] as i32, px[i + 2] as i32);
            if r.max(g).max(b) - r.min(g).min(b) > 40 {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn real_runs_make_a_plot_a_real_renderer_draws_with_every_panel() {
    require_rsvg_convert();
    let fake = FakeVast::start_real_time();
    fake.add_instance("fleetagent-p1");
    let f = Fleet::new().env("VAST_API_KEY", FAKE_API_KEY);
    let file = f.path().join("demand.json");
    f.write_config(&format!(
        "{FAST_CONFIG}\n[vast]\nbase_url = \"{}\"\nimage = \"ghcr.io/example/curio-psprove:latest\"\n\
         [demand]\nsource = \"command\"\ncommand = \"cat {}\"\n{CONFIG}",
        fake.url(),
        file.display()
    ));
    // Five passes: work arriving and done, then a probe that fails (not JSON), then more.
    let readings = [
        Some(
            json!({"pending": 4, "running": 1, "completed_1h": 10, "completed_15m": 3, "workers": worker(1), "history": history(3, 7)}),
        ),
        Some(
            json!({"pending": 2, "running": 1, "completed_1h": 14, "completed_15m": 4, "workers": worker(1), "history": history(5, 9)}),
        ),
        None,
        Some(
            json!({"pending": 0, "running": 1, "running_stale": 1, "completed_1h": 18, "completed_15m": 5, "workers": worker(1), "history": history(7, 11)}),
        ),
        Some(
            json!({"pending": 1, "running": 0, "completed_1h": 20, "completed_15m": 5, "workers": worker(0), "history": history(8, 12)}),
        ),
    ];
    for r in &readings {
        let text = r.as_ref().map_or("not json".to_string(), |v| v.to_string());
        std::fs::write(&file, text).unwrap();
        f.cmd(&["run"]).ok();
    }
    // One sample per pass; the failed probe's demand is unknown, not zero.
    assert_eq!(f.count("SELECT COUNT(*) FROM samples"), 5);
    assert_eq!(
        f.count("SELECT COUNT(*) FROM samples WHERE demand_ok = 0 AND pending IS NULL AND completed_1h IS NULL"),
        1
    );
    assert_eq!(
        f.count("SELECT COUNT(*) FROM samples WHERE revenue_per_proof BETWEEN 0.0499 AND 0.0501 AND fleet_dph > 0 AND ours_billing = 1"),
        5
    );
    // Our completions apart from the on-prem prover's, for revenue and profit.
    let split: String = f
        .db()
        .query_row(
            "SELECT group_concat(ours_completed_1h || '/' || completed_1h, ' ')
               FROM (SELECT * FROM samples WHERE demand_ok ORDER BY id)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(split, "3/10 5/14 7/18 8/20");
    // The passes ran seconds apart; the timer spaces them minutes apart. Stamp them 20
    // minutes apart, ending now, so the lines span most of the 2 hours drawn.
    f.db()
        .execute(
            "UPDATE samples SET at = at - 1200000 * (SELECT COUNT(*) FROM samples s WHERE s.id > samples.id)",
            [],
        )
        .unwrap();

    let svg_path = f.path().join("history.svg");
    let out = f
        .cmd(&[
            "inspect",
            "--plot",
            svg_path.to_str().unwrap(),
            "--hours",
            "2",
        ])
        .ok();
    assert!(
        out.stderr.contains(
            "5 samples of the last 2 h (1 without a demand reading, 0 with the price unknown)"
        ),
        "{}",
        out.stderr
    );
    assert_eq!(
        out.stdout, "",
        "the plot may go to stdout: nothing else does"
    );
    let svg = std::fs::read_to_string(&svg_path).unwrap();

    // (a) Well-formed XML, with each panel's title and frame.
    let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("not XML: {e}\n{svg}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    for t in TITLES {
        assert!(texts.contains(&t), "no panel titled {t:?} in {texts:?}");
    }
    let frames: Vec<(f64, f64, f64, f64)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("stroke") == Some("#999"))
        .map(|n| {
            let a = |k: &str| n.attribute(k).unwrap().parse::<f64>().unwrap();
            (a("x"), a("y"), a("width"), a("height"))
        })
        .collect();
    assert_eq!(frames.len(), TITLES.len(), "{svg}");
    // The failed probe (third of five) is a gap: "pending" (red; no target is drawn) is two
    // lines, not one drawn through a zero.
    let pending = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke") == Some("#d62728"))
        .count();
    assert_eq!(pending, 2, "{svg}");
    assert!(
        texts.iter().any(|t| t.contains("gaps: no demand reading")),
        "{texts:?}"
    );

    // (b) A real renderer draws it, at the SVG's size, with lines in every panel.
    let size = |k: &str| root.attribute(k).unwrap().parse::<f64>().unwrap() as u32;
    let img = render(&svg_path);
    assert_eq!((img.0, img.1), (size("width"), size("height")));
    for (t, (x, y, w, h)) in TITLES.iter().zip(&frames) {
        let n = coloured(&img, *x, *y, *w, *h);
        assert!(n > 50, "panel {t:?} has {n} coloured pixels: nothing drawn");
    }
    // And the renderer is a real test: an empty panel area has none.
    let blank = coloured(&img, 0.0, 0.0, 60.0, img.1 as f64 - 3.0);
    assert_eq!(blank, 0, "the left margin should have no coloured pixels");

    // (c) Round y ticks (1, 2 or 5 x 10^n; whole numbers for the queue and the fleet).
    for (i, labels) in y_labels(&doc, TITLES.len()).iter().enumerate() {
        assert!(labels.len() >= 2, "panel {i}: {labels:?}");
        let steps: Vec<f64> = labels.windows(2).map(|w| (w[0] - w[1]).abs()).collect();
        assert!(
            steps
                .iter()
                .all(|d| round_step(*d) && (d - steps[0]).abs() < 1e-9),
            "panel {i} ticks {labels:?}"
        );
        if i < 2 {
            assert!(
                labels.iter().all(|v| v.fract() == 0.0),
                "panel {i}: {labels:?}"
            );
        }
    }
    // (d) The asked window in UTC clock time: 2 hours every 15 minutes on the clock,
    // 24 hours every 3 hours; the samples (a minute apart) span neither.
    let ticks = x_ticks(&doc);
    let gaps = |t: &[String]| -> Vec<i64> {
        t.windows(2)
            .map(|w| (minutes(&w[1]) - minutes(&w[0])).rem_euclid(1440))
            .collect()
    };
    assert!((7..=9).contains(&ticks.len()), "{ticks:?}");
    assert!(gaps(&ticks).iter().all(|g| *g == 15), "{ticks:?}");
    assert!(ticks.iter().all(|t| minutes(t) % 15 == 0), "{ticks:?}");
    let day = f.path().join("day.svg");
    f.cmd(&["inspect", "--plot", day.to_str().unwrap(), "--hours", "24"])
        .ok();
    let day = std::fs::read_to_string(&day).unwrap();
    let day_ticks = x_ticks(&roxmltree::Document::parse(&day).unwrap());
    assert!((7..=9).contains(&day_ticks.len()), "{day_ticks:?}");
    assert!(gaps(&day_ticks).iter().all(|g| *g == 180), "{day_ticks:?}");
    // A day always crosses a midnight: that tick carries its date.
    assert!(
        day_ticks.iter().filter(|t| t.contains('-')).count() >= 1,
        "{day_ticks:?}"
    );
}

#[test]
fn bad_arguments_are_usage_errors_before_anything_is_read_and_no_samples_says_so() {
    // No state dir at all: each error must be the argument's, not the missing database's.
    let f = Fleet::with_config(FAST_CONFIG);
    let svg = f.path().join("p.svg");
    let svg = svg.to_str().unwrap();
    for (args, want) in [
        (
            vec!["--plot", svg, "--hours", "0"],
            "--hours must be more than 0",
        ),
        (vec!["--plot", svg, "--hours", "-3"], "got -3"),
        (vec!["--plot", svg, "--hours", "NaN"], "got NaN"),
        (vec!["--plot", svg, "--hours", "8785"], "at most 8784"),
        (vec!["--hours", "5"], "--hours needs --plot FILE"),
        (
            vec!["--plot", svg, "--json"],
            "--plot and --json do not go together",
        ),
        (
            vec!["--plot", "/nonexistent-dir/p.svg"],
            "--plot /nonexistent-dir/p.svg: cannot write it",
        ),
    ] {
        let mut a = vec!["inspect"];
        a.extend(args);
        let out = f.cmd(&a).code(2);
        assert!(out.stderr.contains(want), "{a:?}: {}", out.stderr);
        assert_eq!(
            out.stderr.trim().lines().count(),
            1,
            "{a:?}: {}",
            out.stderr
        );
    }
    assert!(
        !Path::new(svg).exists(),
        "no file left by a refused command"
    );
    // A missing database is the usual runtime error, and the file it opened is removed.
    let out = f.cmd(&["inspect", "--plot", svg]).code(1);
    assert!(out.stderr.contains("state dir"), "{}", out.stderr);
    assert!(!Path::new(svg).exists());

    // A database with no samples: a plot that says so, and a note; exit 0.
    f.cmd(&["init"]).ok();
    let out = f.cmd(&["inspect", "--plot", svg, "--hours", "6"]).ok();
    assert!(
        out.stderr.contains("no samples in the last 6 h"),
        "{}",
        out.stderr
    );
    let text = std::fs::read_to_string(svg).unwrap();
    roxmltree::Document::parse(&text).unwrap();
    assert!(text.contains(">no samples in the last 6 h<"), "{text}");
}

#[test]
fn every_pass_of_the_real_pipeline_stores_one_sample_in_the_simulator_too() {
    // `sim --state-dir` runs the real `run` pipeline on a real database (stamped with the
    // simulated time, so `inspect --plot`'s window, which ends now, does not reach it).
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let mut sim = Command::new(crate::common::fleet::BIN);
    crate::common::fleet::clean_env(&mut sim);
    let out = sim
        .arg("--state-dir")
        .arg(&state)
        .args(["sim", "--scenario", "steady", "--hours", "4"])
        .output()
        .unwrap();
    // The scenario's checks are set for its week: a few hours may miss one (exit 1, "FAIL"
    // in the report; on 4 h the start's sizing leaves $/proof at 1.31x the oracle's, past its
    // 1.3). What is tested here is the samples, so a run that went through is enough.
    assert!(
        matches!(out.status.code(), Some(0 | 1)) && state.join("fleetagent.db").exists(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let db = rusqlite::Connection::open(state.join("fleetagent.db")).unwrap();
    let q = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    let runs = q("SELECT COUNT(*) FROM runs");
    assert!(runs > 10, "{runs} passes");
    assert_eq!(q("SELECT COUNT(*) FROM samples"), runs);
    assert_eq!(
        q("SELECT COUNT(DISTINCT s.run_id) FROM samples s JOIN runs r ON r.id = s.run_id"),
        runs
    );
    // The simulator's demand always reads, its base config targets 300/h, and its fleet bills.
    assert_eq!(q("SELECT COUNT(*) FROM samples WHERE demand_ok = 1 AND pending IS NOT NULL AND target_pph = 300"), runs);
    assert!(q("SELECT COUNT(*) FROM samples WHERE fleet_dph > 0 AND ours_billing > 0") > 0);
    // `instances list` reads the simulation's table as of its last pass, as `inspect` does
    // (at the wall clock every age read months).
    let mut list = Command::new(crate::common::fleet::BIN);
    crate::common::fleet::clean_env(&mut list);
    let out = list
        .arg("--state-dir")
        .arg(&state)
        .args(["instances", "list", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let ages: Vec<i64> = v["instances"]
        .as_array()
        .map(|a| a.iter().filter_map(|i| i["age_secs"].as_i64()).collect())
        .unwrap_or_default();
    assert!(!ages.is_empty(), "{v}");
    assert!(ages.iter().all(|a| *a < 12 * 3600), "{ages:?}");
}

#[test]
fn the_sim_plot_of_a_priced_scenario_has_the_price_and_profit_panels_with_round_ticks() {
    require_rsvg_convert();
    let tmp = tempfile::tempdir().unwrap();
    let svg_path = tmp.path().join("price-drop.svg");
    let mut sim = Command::new(crate::common::fleet::BIN);
    crate::common::fleet::clean_env(&mut sim);
    let out = sim
        .args([
            "sim",
            "--scenario",
            "price-drop",
            "--hours",
            "2",
            "--json",
            "--plot",
        ])
        .arg(&svg_path)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(report["money"]["profit"].is_number(), "{report:#}");
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    for t in fleetagent::sim::plot::TITLES {
        assert!(texts.contains(&t), "no panel titled {t:?} in {texts:?}");
    }
    for legend in ["revenue", "profit"] {
        assert!(texts.contains(&legend), "no {legend:?} line in {texts:?}");
    }
    assert!(
        !svg.contains("no price modelled"),
        "price-drop models a price"
    );
    // Every panel drawn by a real renderer, the money panels included.
    let frames: Vec<(f64, f64, f64, f64)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("stroke") == Some("#999"))
        .map(|n| {
            let a = |k: &str| n.attribute(k).unwrap().parse::<f64>().unwrap();
            (a("x"), a("y"), a("width"), a("height"))
        })
        .collect();
    let img = render(&svg_path);
    for (t, (x, y, w, h)) in fleetagent::sim::plot::TITLES.iter().zip(&frames) {
        let n = coloured(&img, *x, *y, *w, *h);
        assert!(n > 50, "panel {t:?} has {n} coloured pixels: nothing drawn");
    }
    // Round ticks: y by 1, 2 or 5 x 10^n (whole for the queue and the fleet), x by 15 minutes.
    for (i, labels) in y_labels(&doc, frames.len()).iter().enumerate() {
        let steps: Vec<f64> = labels.windows(2).map(|w| (w[0] - w[1]).abs()).collect();
        assert!(
            !steps.is_empty() && steps.iter().all(|d| round_step(*d)),
            "panel {i}: {labels:?}"
        );
        if i < 2 {
            assert!(
                labels.iter().all(|v| v.fract() == 0.0),
                "panel {i}: {labels:?}"
            );
        }
    }
    assert_eq!(
        x_ticks(&doc),
        ["0h", "15m", "30m", "45m", "1h", "1h15m", "1h30m", "1h45m", "2h"]
    );
}
