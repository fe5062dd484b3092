//! Scenarios: what the simulated world does (market demand, hosts, failures, 429 bursts, probe
//! and LLM outages, what the fleet looks like at the start, operator actions and trigger
//! bursts) and what the agent must achieve in it. Built-in ones are TOML files embedded in
//! the binary; operators write their own in the same format (docs/sim.md), parsed strictly.

mod schema;
mod validate;

pub use schema::{
    path_at, repetitions, Action, ActionKind, Bids, Expect, Gpu, Hosts, LlmMode, LlmSpec, Market,
    PricePath, Scenario, Start, Wave, Window,
};
pub use validate::{
    check_hours, MAX_ACTIONS, MAX_ACTION_TEXT, MAX_ARRIVALS, MAX_ENTRIES, MAX_EVENT_COUNT,
    MAX_EVERY_MS, MAX_HOURS, MAX_OFFERS, MAX_RATE, MAX_START, MIN_MINUTES,
};

use crate::config::locate;
use crate::error::UsageError;
use validate::validate;

/// Built-in scenarios: (name, TOML), in `--list` order.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("steady", include_str!("builtin/steady.toml")),
    ("spike", include_str!("builtin/spike.toml")),
    ("incident", include_str!("builtin/incident.toml")),
    (
        "vast-429-storm",
        include_str!("builtin/vast-429-storm.toml"),
    ),
    ("llm-outage", include_str!("builtin/llm-outage.toml")),
    ("trigger-storm", include_str!("builtin/trigger-storm.toml")),
    ("price-drop", include_str!("builtin/price-drop.toml")),
    ("outbid", include_str!("builtin/outbid.toml")),
    ("dead-market", include_str!("builtin/dead-market.toml")),
    ("day-cycle", include_str!("builtin/day-cycle.toml")),
];

/// A built-in name or a TOML file.
pub fn load(name_or_file: &str) -> Result<Scenario, UsageError> {
    if let Some((_, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_file) {
        return parse(text)
            .map_err(|e| UsageError(format!("built-in scenario {name_or_file}: {e}")));
    }
    let path = std::path::Path::new(name_or_file);
    if !path.exists() {
        let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
        return Err(UsageError(format!(
            "no scenario {name_or_file:?}: not a built-in ({}) and no such file",
            names.join(", ")
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("cannot read scenario {}: {e}", path.display())))?;
    parse(&text).map_err(|e| UsageError(format!("scenario {}: {e}", path.display())))
}

/// Parse and check a scenario. The error is one line naming the line and the key, like the
/// config's (the config's own locator lays both out); keys under `[config]` are checked
/// against the config's own schema. An entry of an array of tables is named with its number
/// (`event #3 repeat_mins`) and the line of its key, else of its `[[event]]` header.
pub fn parse(text: &str) -> Result<Scenario, String> {
    let s: Scenario = toml::from_str(text).map_err(|e| locate::toml_error(text, &e))?;
    if let Some(table) = &s.config {
        // The config's own strict parser, on the [config] table alone; a key error is mapped
        // back to its line in the scenario.
        let sub = toml::to_string(table).map_err(|e| format!("[config]: {e}"))?;
        crate::config::parse(&sub).map_err(|e| locate::in_table(text, "config", &e))?;
    }
    validate(&s).map_err(|e| e.in_text(text))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_ins_parse() {
        for (name, text) in BUILT_IN {
            let s = parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&s.name, name);
        }
    }

    /// A pair is two numbers: a third was dropped without a word (`rate = [[0, 10, 5]]`).
    #[test]
    fn a_pair_with_another_value_names_key_and_line() {
        let head = "name = \"x\"\ndescription = \"d\"\nhours = 1\n";
        for (table, expected) in [
            (
                "[market]\nrate = [[0, 10, 5]]\n",
                "line 5 (market.rate): expected a pair of two numbers, got 3 value(s)",
            ),
            (
                "[hosts]\nboot_mins = [5, 12, 99]\n",
                "line 5 (hosts.boot_mins): expected a pair of two numbers, got 3 value(s)",
            ),
            (
                "[price]\nfil_usd = [[0, 4.0, 99]]\nask_fil = [[0, 0.01]]\n",
                "line 5 (price.fil_usd): expected a pair of two numbers, got 3 value(s)",
            ),
        ] {
            let err = parse(&format!("{head}{table}")).unwrap_err();
            assert!(err.starts_with(expected), "{err}");
        }
        parse(&format!("{head}[market]\nrate = [[0, 10], [2, 20]]\n")).unwrap();
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let err = parse(
            "name = \"x\"\ndescription = \"d\"\nhours = 1\n[market]\nrate = [[0, 10]]\nbogus = 2\n",
        )
        .unwrap_err();
        assert!(err.contains("line 6"), "{err}");
        assert!(err.contains("bogus"), "{err}");
    }

    #[test]
    fn unknown_config_key_is_mapped_to_its_line() {
        let err = parse("name = \"x\"\ndescription = \"d\"\nhours = 1\n\n[config.policy]\ntarget_proofs_per_hour = 5\nnope = 1\n")
            .unwrap_err();
        assert!(err.contains("nope"), "{err}");
        assert!(err.contains("line 7"), "{err}");
    }

    const TOP: &str = "name = \"x\"\ndescription = \"d\"\nhours = 2\n";

    /// The error for TOP + `rest`, which must name `key` at `line` and show `value`.
    fn refused(rest: &str, line: usize, key: &str, value: &str) {
        let text = format!("{TOP}{rest}");
        let err = parse(&text).expect_err(&text);
        assert!(
            err.starts_with(&format!("line {line} ({key}): ")),
            "wanted line {line} ({key}) for\n{text}\ngot: {err}"
        );
        assert!(err.contains(value), "wanted {value:?} in: {err}");
        assert!(!err.contains('\n'), "{err}");
    }

    /// Values that read but could not mean what they say: an hour given twice (its first pair
    /// was ignored), shares of the same boots over all of them (cut down without a word).
    #[test]
    fn a_repeated_hour_and_boot_shares_over_one_are_refused() {
        refused(
            "[market]\nrate = [[0, 150], [0, 300]]\n",
            5,
            "market.rate #2",
            "hours rising",
        );
        // A missing field is not blamed on the first key of its table.
        let err =
            parse("name = \"x\"\ndescription = \"d\"\n[market]\nrate = [[0, 1]]\n").unwrap_err();
        assert_eq!(err, "missing field `hours` at the top level");
        let text = "name = \"x\\nFAKE: all checks PASSED\"\ndescription = \"d\"\nhours = 24\n[market]\nrate = [[0, 1]]\n";
        let err = parse(text).unwrap_err();
        assert!(err.contains("(name): must be one line"), "{err}");
        refused(
            "[hosts]\nboot_fail = 0.6\nstuck = 0.6\n",
            5,
            "hosts.boot_fail",
            "together at most 1",
        );
    }

    #[test]
    fn nan_and_infinity_are_refused_everywhere() {
        // `x <= 0.0` is false for NaN: every float is checked as finite first.
        refused(
            "[market]\nrate = [[nan, 100]]\n",
            5,
            "market.rate #1",
            "NaN",
        );
        refused("[market]\nrate = [[0, nan]]\n", 5, "market.rate #1", "NaN");
        refused("[market]\nrate = [[0, inf]]\n", 5, "market.rate #1", "inf");
        refused(
            "[market]\nexpire_mins = nan\n",
            5,
            "market.expire_mins",
            "NaN",
        );
        refused(
            "[hosts]\nboot_mins = [5, nan]\n",
            5,
            "hosts.boot_mins",
            "NaN",
        );
        refused("[hosts]\nboot_fail = nan\n", 5, "hosts.boot_fail", "NaN");
        refused(
            "[hosts]\ncrash_per_day = nan\n",
            5,
            "hosts.crash_per_day",
            "NaN",
        );
        refused(
            "[hosts]\noffline_per_day = inf\n",
            5,
            "hosts.offline_per_day",
            "inf",
        );
        refused(
            "[hosts]\ncurio_start_secs = [nan, 10]\n",
            5,
            "hosts.curio_start_secs",
            "NaN",
        );
        refused(
            "[hosts]\nreliability = [0.9, nan]\n",
            5,
            "hosts.reliability",
            "NaN",
        );
        refused(
            "[[vast_429]]\nat_hours = 1\nhours = 1\nshare = nan\n",
            7,
            "vast_429 #1 share",
            "NaN",
        );
        refused(
            "[[probe_outage]]\nat_hours = inf\nhours = 1\n",
            5,
            "probe_outage #1 at_hours",
            "inf",
        );
        refused(
            "[[event]]\nat_mins = 1\nkind = \"reset-session\"\nrepeat_mins = nan\n",
            7,
            "event #1 repeat_mins",
            "NaN",
        );
        refused(
            "[[event]]\nat_mins = nan\nkind = \"reset-session\"\n",
            5,
            "event #1 at_mins",
            "NaN",
        );
        refused(
            "[expect]\nmin_served_share = nan\n",
            5,
            "expect.min_served_share",
            "NaN",
        );
        refused(
            "[expect]\nmax_silence_mins = -1\n",
            5,
            "expect.max_silence_mins",
            "-1",
        );
        let err = parse("name = \"x\"\ndescription = \"d\"\nhours = nan\n").unwrap_err();
        assert!(
            err.starts_with("line 3 (hours): ") && err.contains("NaN"),
            "{err}"
        );
    }

    #[test]
    fn every_number_has_an_upper_bound() {
        refused(
            "[[event]]\nat_mins = 1\nkind = \"reset-session\"\nrepeat_mins = 0.00000001\n",
            7,
            "event #1 repeat_mins",
            "got 1e-8",
        );
        refused(
            "[market]\nrate = [[0, 1e12]]\n",
            5,
            "market.rate #1",
            "1000000000000]",
        );
        refused(
            "[market]\nrate = [[0, 10], [1, 100001]]\n",
            5,
            "market.rate #2",
            "100001",
        );
        refused(
            "[market]\nrate = [[2, 10], [1, 100]]\n",
            5,
            "market.rate #2",
            "[1, 100]",
        );
        refused(
            "[market]\nexpire_mins = 10081\n",
            5,
            "market.expire_mins",
            "10081",
        );
        refused(
            "[hosts]\noffers = 4000000000\n",
            5,
            "hosts.offers",
            "4000000000",
        );
        refused("[hosts]\noffers = 0\n", 5, "hosts.offers", "got 0");
        refused(
            "[hosts]\nboot_mins = [5, 1441]\n",
            5,
            "hosts.boot_mins",
            "1441",
        );
        refused(
            "[hosts]\nboot_mins = [0, 1]\n",
            5,
            "hosts.boot_mins",
            "[0, 1]",
        );
        refused(
            "[hosts]\ncurio_start_secs = [100, 50]\n",
            5,
            "hosts.curio_start_secs",
            "[100, 50]",
        );
        refused(
            "[hosts]\ncurio_start_secs = [0, 3601]\n",
            5,
            "hosts.curio_start_secs",
            "3601",
        );
        refused(
            "[hosts]\ncrash_per_day = 1001\n",
            5,
            "hosts.crash_per_day",
            "1001",
        );
        refused(
            "[start]\npending = 4000000000\n",
            5,
            "start.pending",
            "4000000000",
        );
        refused("[start]\nwakes = 100001\n", 5, "start.wakes", "100001");
        // The fleet at the start rents offers, one of them held by the foreign instance.
        refused(
            "[hosts]\noffers = 10\n[start]\nlive = 2\nloading = 8\n",
            8,
            "start.loading",
            "at most 9",
        );
        refused(
            "[[event]]\nat_mins = 1\nkind = \"triggers\"\ncount = 4000000000\nevery_ms = 1\n",
            7,
            "event #1 count",
            "4000000000",
        );
        refused(
            "[[event]]\nat_mins = 1\nkind = \"triggers\"\nevery_ms = 3600001\n",
            7,
            "event #1 every_ms",
            "3600001",
        );
        refused(
            "[[event]]\nat_mins = 1\nkind = \"triggers\"\npriority = 3\n",
            7,
            "event #1 priority",
            "got 3",
        );
        let long = "a".repeat(8001);
        refused(
            &format!("[[event]]\nat_mins = 1\nkind = \"message\"\ntext = \"{long}\"\n"),
            7,
            "event #1 text",
            "8001 characters",
        );
        refused(
            "[hosts]\ngpus = [{ name = \"A\", rate = 40, dph = [0.5, 0.3], share = 1 }]\n",
            5,
            "hosts.gpus #1 dph",
            "[0.5, 0.3]",
        );
        assert!(parse(&format!(
            "{TOP}[[event]]\nat_mins = 1\nkind = \"message\"\ntext = \"{}\"\n",
            "a".repeat(8000)
        ))
        .is_ok());
    }

    #[test]
    fn price_and_bids_are_bounded_and_price_checks_need_a_price() {
        refused(
            "[price]\nfil_usd = [[1, 4.0]]\nask_fil = [[0, 0.01]]\n",
            5,
            "price.fil_usd #1",
            "starting at hour 0",
        );
        refused(
            "[price]\nfil_usd = [[0, 4.0], [2, 0]]\nask_fil = [[0, 0.01]]\n",
            5,
            "price.fil_usd #2",
            "[2, 0]",
        );
        refused(
            "[price]\nfil_usd = [[0, 4.0]]\nask_fil = [[0, nan]]\n",
            6,
            "price.ask_fil #1",
            "NaN",
        );
        refused(
            "[price]\nfil_usd = [[0, 4.0]]\nask_fil = []\n",
            6,
            "price.ask_fil",
            "got 0",
        );
        refused("[price]\nfil_usd = [[0, 4.0]]\n", 4, "price", "ask_fil");
        refused(
            "[bids]\nresume_share = 1.5\n",
            5,
            "bids.resume_share",
            "1.5",
        );
        refused(
            "[bids]\nresume_mins = [30, 10]\n",
            5,
            "bids.resume_mins",
            "[30, 10]",
        );
        refused(
            "[bids]\n\n[[bids.wave]]\nat_hours = 1\ncount = 0\n",
            8,
            "bids.wave #1 count",
            "got 0",
        );
        refused(
            "[expect]\nmin_profit_share_of_oracle = 0.9\n",
            5,
            "expect.min_profit_share_of_oracle",
            "needs a [price]",
        );
        let ok = parse(&format!(
            "{TOP}[price]\nfil_usd = [[0, 4.0], [6, 2.0]]\nask_fil = [[0, 0.007]]\n\
             [expect]\nmax_unprofitable_launches = 0\n"
        ))
        .unwrap();
        let p = ok.price.unwrap();
        assert!((p.revenue_per_proof(5.9) - 0.028).abs() < 1e-12);
        assert!((p.revenue_per_proof(6.0) - 0.014).abs() < 1e-12);
    }

    #[test]
    fn the_bad_entry_of_an_array_is_named_with_its_number_and_line() {
        // A bad [[probe_outage]] after a good [[vast_429]]: probe_outage, at its own line.
        refused(
            "\n[[vast_429]]\nat_hours = 1\nhours = 2\n\n[[probe_outage]]\nat_hours = 5\nhours = -1\n",
            11,
            "probe_outage #1 hours",
            "-1",
        );
        // The third [[event]]: its field's line.
        let events = "[[event]]\nat_mins = 1\nkind = \"reset-session\"\n\n\
                      [[event]]\nat_mins = 2\nkind = \"triggers\"\n\n\
                      [[event]]\nat_mins = 3\nkind = \"triggers\"\nrepeat_mins = 0.5\n";
        refused(events, 15, "event #3 repeat_mins", "0.5");
        // A field left out: the entry's own [[event]] header.
        let events = "[[event]]\nat_mins = 1\nkind = \"reset-session\"\n\n\
                      [[event]]\nat_mins = 2\nkind = \"message\"\n";
        refused(events, 8, "event #2 text", "needs text");
        // A GPU of an inline array, at its own line.
        refused(
            "[hosts]\ngpus = [\n  { name = \"A\", rate = 40, dph = [0.3, 0.5], share = 1 },\n  \
             { name = \"B\", rate = inf, dph = [0.3, 0.5], share = 1 },\n]\n",
            7,
            "hosts.gpus #2 rate",
            "inf",
        );
        // An integer past i64 (toml_edit refuses the text): the N-th header, found by hand.
        refused(
            "[[event]]\nat_mins = 1\nkind = \"reset-session\"\n\n\
             [[event]]\nat_mins = 2\nkind = \"triggers\"\nevery_ms = 9223372036854775808\n",
            8,
            "event #2 every_ms",
            "9223372036854775808",
        );
    }

    #[test]
    fn the_work_of_the_hours_is_bounded() {
        // 100000 proofs/h for 201 h: 20.1 million arrivals.
        let text =
            "name = \"x\"\ndescription = \"d\"\nhours = 201\n[market]\nrate = [[0, 100000]]\n";
        let err = parse(text).unwrap_err();
        assert!(
            err.starts_with("line 5 (market.rate): ") && err.contains("20100000"),
            "{err}"
        );
        let ok = parse(&text.replace("201", "199")).unwrap();
        // --hours longer than the file's is checked where it is known.
        assert!(ok.check_work(199.0).is_ok());
        let err = ok.check_work(201.0).unwrap_err();
        assert!(err.starts_with("market.rate: "), "{err}");
        // Rates after the horizon cost nothing.
        let late = parse(&format!("{TOP}[market]\nrate = [[0, 10], [100, 100000]]\n")).unwrap();
        assert_eq!(late.expected_arrivals(2.0), 20.0);
        assert_eq!(late.expected_arrivals(101.0), 1000.0 + 100_000.0);

        // 100000 triggers every 3 minutes for 2 h: 40 bursts, 4 million triggers. The event
        // that adds the most is named.
        let burst = "[[event]]\nat_mins = 0\nkind = \"reset-session\"\n\n\
                     [[event]]\nat_mins = 0\nkind = \"triggers\"\ncount = 100000\nrepeat_mins = 3\n";
        refused(burst, 8, "event #2", "4000000 actions");
        // Once an hour for 2 h: 2 bursts.
        assert!(parse(&format!("{TOP}{}", burst.replace("= 3", "= 60"))).is_ok());
        // Messages of 8000 characters every minute for a week: 80 million characters.
        let text = format!(
            "name = \"x\"\ndescription = \"d\"\nhours = 168\n[[event]]\nat_mins = 0\nkind = \"message\"\ntext = \"{}\"\nrepeat_mins = 1\n",
            "a".repeat(8000)
        );
        assert!(parse(&text).is_ok());
        let err = parse(&text.replace("168", "240")).unwrap_err();
        assert!(
            err.starts_with("line 4 (event #1): ") && err.contains("characters"),
            "{err}"
        );
    }

    #[test]
    fn hours_are_one_timer_period_to_a_year() {
        assert!(check_hours(5.0 / 60.0).is_ok());
        assert!(check_hours(8784.0).is_ok());
        for h in [0.0, 1e-300, 0.08, -1.0, 8784.5, f64::NAN, f64::INFINITY] {
            let err = check_hours(h).unwrap_err();
            assert!(err.contains("5 minutes"), "{h}: {err}");
        }
        assert!(check_hours(1e-300).unwrap_err().ends_with("got 1e-300"));
        let err = parse("name = \"x\"\ndescription = \"d\"\nhours = 0.01\n").unwrap_err();
        assert!(
            err.starts_with("line 3 (hours): ") && err.contains("0.01"),
            "{err}"
        );
    }

    #[test]
    fn repetitions_count_what_the_schedule_fires() {
        let a = |at_mins: f64, repeat_mins: f64| Action {
            at_mins,
            kind: ActionKind::ResetSession,
            count: 1,
            every_ms: 0,
            priority: 1,
            text: None,
            repeat_mins,
        };
        assert_eq!(repetitions(&a(45.0, 0.0), 0.5), 0);
        assert_eq!(repetitions(&a(45.0, 0.0), 1.0), 1);
        assert_eq!(repetitions(&a(1.0, 20.0), 1.0), 3); // 1, 21, 41
        assert_eq!(repetitions(&a(0.0, 20.0), 1.0), 3); // 0, 20, 40 (60 is the end)
        assert_eq!(repetitions(&a(0.0, 1.0), 8784.0), 527_040);
    }

    #[test]
    fn rate_schedule() {
        let m = Market {
            rate: vec![(0.0, 100.0), (2.0, 300.0), (5.0, 100.0)],
            expire_mins: 30.0,
        };
        assert_eq!(m.rate_at(-1.0), 0.0);
        assert_eq!(m.rate_at(0.0), 100.0);
        assert_eq!(m.rate_at(2.0), 300.0);
        assert_eq!(m.rate_at(2.5), 300.0);
        assert_eq!(m.rate_at(9.0), 100.0);
        assert_eq!(m.changes(24.0), 2);
        assert_eq!(m.changes(3.0), 1);
        // Two pairs at one hour: the later one holds, as a walk from the start gives.
        let m = Market {
            rate: vec![(0.0, 100.0), (2.0, 300.0), (2.0, 50.0)],
            expire_mins: 30.0,
        };
        assert_eq!(m.rate_at(1.9), 100.0);
        assert_eq!(m.rate_at(2.0), 50.0);
    }
}
