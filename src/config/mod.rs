//! The configuration: one TOML file parsed and validated once into [`Config`].
//!
//! Every key of DESIGN.md is here with its default (`schema`). Unknown keys, wrong types and
//! values out of range (`validate`) are errors naming the key and its line (`locate`, also
//! used for `sim` scenario files). Secrets never come from this file (see `secrets`); a
//! HarmonyDB URL with a password in it is refused. `load` finds and reads the file.

mod image;
mod load;
pub(crate) mod locate;
mod schema;
mod validate;

pub use load::{load, load_for_brake, parse, resolve_path, ConfigOrigin, LoadedConfig};
pub use schema::{
    Config, CredentialRef, DebounceConfig, DemandConfig, DemandSource, EnvValue, Fallback,
    HaConfig, LlmConfig, MetricsConfig, OfferType, OffersConfig, PolicyConfig, PriceConfig,
    Provider, RunConfig, StopMode, VastConfig, LABEL_ENV, NODE_NAME_ENV,
};

/// Below this a FIL/USD (`price.fil_usd`, or a fetched one) is a unit slip or a glitch of the
/// feed, not a rate: every launch, WORKERS DEAD's included, would be refused as unprofitable
/// on a rate nobody paid.
pub const MIN_FIL_USD: f64 = 0.01;

/// Where the config comes from when neither `--config` nor `$FLEETAGENT_CONFIG` names one.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/fleetagent/config.toml";

/// The commented config `init` writes where none exists.
pub const TEMPLATE: &str = include_str!("../../docs/config.example.toml");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_text_is_all_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn template_parses() {
        parse(TEMPLATE).unwrap();
    }

    /// Values that parse but could never work: an image with a space, an empty GPU name
    /// (in the offers' filter or the rates) that matches no offer.
    #[test]
    fn names_that_match_nothing_are_refused_on_their_line() {
        let err = parse("[vast]\nimage = \"has space:tag\"\n").unwrap_err();
        assert!(
            err.starts_with("line 2 (vast.image): an image reference has no spaces"),
            "{err}"
        );
        let err = parse("[vast.offers]\ngpu_names = [\"RTX 4090\", \" \"]\n").unwrap_err();
        assert!(
            err.starts_with("line 2 (vast.offers.gpu_names): an empty name"),
            "{err}"
        );
        let err = parse("[vast.offers]\ngpu_names = [\"RTX 4090 \"]\n").unwrap_err();
        assert!(err.contains("\"RTX 4090 \" has spaces around it"), "{err}");
        let err = parse("[policy.gpu_rates]\n\"RTX 3090 \" = 40\n").unwrap_err();
        assert!(err.contains("has spaces around it"), "{err}");
        let err = parse("[policy.gpu_rates]\n\"\" = 40\n").unwrap_err();
        assert!(err.contains("a GPU name must not be empty"), "{err}");
        parse("[vast]\nimage = \"ghcr.io/x/y:1\"\n[vast.offers]\ngpu_names = [\"RTX 4090\"]\n")
            .unwrap();
        let err = parse("[vast]\nimage = \"MyOrg/curio:Latest\"\n").unwrap_err();
        assert!(
            err.starts_with(
                "line 2 (vast.image): an image's repository is lowercase, got \"MyOrg/curio\""
            ),
            "{err}"
        );
        // The registry's host and the tag may have capitals; a port is not a tag.
        for fine in [
            "Registry.Example.com/org/curio:V1",
            "localhost:5000/org/curio",
            "ghcr.io/org/curio@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "curio:Latest-GPU",
        ] {
            parse(&format!("[vast]\nimage = \"{fine}\"\n")).unwrap();
        }
        let err = parse("[vast]\nimage = \"org/curio@sha256:abc\"\n").unwrap_err();
        assert!(
            err.starts_with("line 2 (vast.image): a digest is sha256: and 64"),
            "{err}"
        );
        let err = parse("[vast]\nimage = \"registry:5000/Org/c\"\n").unwrap_err();
        assert!(err.contains("got \"Org/c\""), "{err}");
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let err = parse("[run]\nmax_passes = 3\nbogus = 1\n").unwrap_err();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("bogus"), "{err}");
    }

    #[test]
    fn wrong_type_names_key_and_line() {
        let err = parse("\n[llm]\ntimeout_secs = \"soon\"\n").unwrap_err();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("llm.timeout_secs"), "{err}");
    }

    #[test]
    fn an_entry_of_a_table_of_names_is_blamed_on_its_own_line() {
        let err = parse("[vast.env]\nA = \"x\"\nFOO = { credential = \"\" }\n").unwrap_err();
        assert!(err.starts_with("line 3 (vast.env.FOO): "), "{err}");
        let err = parse("[vast.env]\n\"1BAD\" = \"x\"\n").unwrap_err();
        assert!(
            err.starts_with("line 2 (vast.env.1BAD): bad variable name"),
            "{err}"
        );
        let err = parse("[policy.gpu_rates]\n\"RTX 4090\" = 40\n\"RTX 3090\" = -1\n").unwrap_err();
        assert!(
            err.starts_with("line 3 (policy.gpu_rates.RTX 3090): "),
            "{err}"
        );
    }

    #[test]
    fn an_integer_past_i64_names_its_key_and_line() {
        let err = parse("# caps\n[run]\ndeadline_secs = 99999999999999999999999\n").unwrap_err();
        assert!(err.starts_with("line 3 (run.deadline_secs): "), "{err}");
    }

    #[test]
    fn range_error_names_key_and_line() {
        // One Curio task name, exactly: "PSProve " read a clean zero (a re-test).
        for task in ["PSProve ", " PSProve", "PSProve,WdPost", "PS\tProve"] {
            let err = parse(&format!("[demand]\ntask = {task:?}\n")).unwrap_err();
            assert!(
                err.contains("demand.task") && err.contains("one Curio task name"),
                "{err}"
            );
        }
        let err = parse("[debounce]\np0_secs = 100\n").unwrap_err();
        assert!(err.contains("line 2 (debounce.p0_secs)"), "{err}");
    }

    #[test]
    fn bad_enum_value() {
        let err = parse("[vast]\nstop_mode = \"pause\"\n").unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("vast.stop_mode"), "{err}");
    }

    #[test]
    fn credential_env_values() {
        let c = parse(
            "[vast.env]\nA = \"x\"\nCURIO_DB_PASSWORD = { credential = \"curio_db_password\" }\n",
        )
        .unwrap();
        assert_eq!(
            c.vast.env["CURIO_DB_PASSWORD"],
            EnvValue::Credential(CredentialRef {
                credential: "curio_db_password".into()
            })
        );
        assert_eq!(c.vast.env["A"], EnvValue::Literal("x".into()));
    }

    #[test]
    fn password_in_harmonydb_url_refused() {
        let err = parse("[demand]\nharmonydb_url = \"postgres://u:secret@h:5433/yugabyte\"\n")
            .unwrap_err();
        assert!(err.contains("demand.harmonydb_url"), "{err}");
        assert!(!err.contains("secret@"), "{err}");
        parse("[demand]\nharmonydb_url = \"postgres://u@h:5433/yugabyte\"\n").unwrap();
    }

    #[test]
    fn password_in_any_spelling_refused() {
        for url in [
            "host=127.0.0.1 user=probe password = SECRETX",
            "host=127.0.0.1 user=probe password\t=SECRETX",
            "postgres://u@h/db?password=SECRETX",
        ] {
            let text = format!("[demand]\nharmonydb_url = {url:?}\n");
            let err = parse(&text).unwrap_err();
            assert!(err.contains("holds a password"), "{url}: {err}");
            assert!(!err.contains("SECRETX"), "{err}");
        }
        let err = parse("[demand]\nsource = \"http\"\nhttp_url = \"http://u:SECRETX@h/d\"\n")
            .unwrap_err();
        assert!(
            err.contains("demand.http_url") && !err.contains("SECRETX"),
            "{err}"
        );
        parse("[demand]\nharmonydb_url = \"host=h user=probe dbname=yugabyte\"\n").unwrap();
    }

    #[test]
    fn absurd_integers_are_errors_not_overflows() {
        for (text, key) in [
            (
                "[run]\ntimer_period_secs = 9223372036854775807\n",
                "run.timer_period_secs",
            ),
            (
                "[run]\ndeadline_secs = 18446744073709551615\n",
                "run.deadline_secs",
            ),
            (
                "[policy]\nlaunch_window_minutes = 9223372036854775807\n",
                "policy.launch_window_minutes",
            ),
            (
                "[demand]\ntimeout_secs = 18446744073709551615\n",
                "demand.timeout_secs",
            ),
            (
                "[llm]\ncontext_budget_tokens = 18446744073709551615\n",
                "llm.context_budget_tokens",
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert!(
                err.contains(&format!("line 2 ({key}): must be between")),
                "{err}"
            );
        }
    }

    /// Numbers with a fraction too (a walkthrough: `bad_host_hours = 1e13` passed `doctor`
    /// and panicked every pass on an overflow; `1e300` dollars passed as a cap).
    #[test]
    fn absurd_numbers_are_errors_not_overflows() {
        for (table, key) in [
            ("vast", "disk_gb"),
            ("vast", "stopped_max_hours"),
            ("vast.offers", "bad_host_hours"),
            ("vast.offers", "max_dph_per_instance"),
            ("vast.offers", "min_gpu_ram_gb"),
            ("policy", "target_proofs_per_hour"),
            ("policy", "proofs_per_hour_per_instance"),
            ("policy", "max_dph_total"),
            ("policy", "daily_spend_max"),
            ("price", "proof_price_fil"),
            ("price", "fil_usd"),
        ] {
            let err = parse(&format!("[{table}]\n{key} = 1e13\n")).unwrap_err();
            assert!(
                err.starts_with(&format!("line 2 ({table}.{key}): must be a number")),
                "{err}"
            );
        }
        parse("[vast.offers]\nbad_host_hours = 8760\n").unwrap();
        // A FIL/USD no market ever quoted would refuse every launch as unprofitable.
        let err = parse("[price]\nfil_usd = 1e-9\n").unwrap_err();
        assert!(
            err.starts_with("line 2 (price.fil_usd): must be at least 0.01"),
            "{err}"
        );
        parse("[price]\nfil_usd = 0.01\n").unwrap();
        let err = parse("[policy.gpu_rates]\n\"RTX 4090\" = 1e13\n").unwrap_err();
        assert!(err.contains("at most 100000"), "{err}");
    }

    /// A huge refused value is quoted cut, not whole (a 100 KB value made a 100 KB line).
    #[test]
    fn a_huge_refused_value_is_quoted_cut() {
        let big = "x".repeat(100_000);
        for (table, key) in [
            ("", "state_dir"),
            ("[llm]\n", "encoding"),
            ("[vast]\n", "label_prefix"),
            ("[vast]\n", "image"),
            ("[metrics]\n", "textfile"),
            ("[ha]\n", "host_id"),
        ] {
            let value = if key == "image" {
                format!("a b{big}")
            } else {
                big.clone()
            };
            let err = parse(&format!("{table}{key} = \"{value}\"\n")).unwrap_err();
            assert!(
                err.contains(key) && err.len() < 600,
                "{key}: {} bytes",
                err.len()
            );
        }
    }

    #[test]
    fn a_rule_between_two_keys_names_the_one_in_the_file() {
        let err = parse("[run]\ndeadline_secs = 30\n").unwrap_err();
        assert!(err.starts_with("line 2 (run.deadline_secs): "), "{err}");
        assert!(err.contains("debounce.max_wait_secs (60)"), "{err}");
        let err = parse("\n\n[policy]\nlaunch_window_max = 10\n").unwrap_err();
        assert!(
            err.starts_with("line 4 (policy.launch_window_max): "),
            "{err}"
        );
    }

    /// The retry budget used to cap a larger timeout silently.
    #[test]
    fn a_timeout_above_the_retry_budget_names_both_keys_and_values() {
        let err = parse("[llm]\ntimeout_secs = 300\n").unwrap_err();
        assert!(
            err.starts_with(
                "line 2 (llm.timeout_secs): llm.timeout_secs (300) must not exceed llm.retry_budget_secs (90)"
            ),
            "{err}"
        );
        // Only the budget in the file: its line is named.
        let err = parse("[llm]\n\nretry_budget_secs = 30\n").unwrap_err();
        assert!(
            err.starts_with(
                "line 3 (llm.retry_budget_secs): llm.timeout_secs (60) must not exceed llm.retry_budget_secs (30)"
            ),
            "{err}"
        );
        let c = parse("[llm]\ntimeout_secs = 300\nretry_budget_secs = 300\n").unwrap();
        assert_eq!((c.llm.timeout_secs, c.llm.retry_budget_secs), (300, 300));
    }

    #[test]
    fn duplicate_key_is_named() {
        let err = parse("[run]\nmax_passes = 3\nmax_passes = 4\n").unwrap_err();
        assert!(
            err.contains("line 3") && err.contains("\"max_passes\""),
            "{err}"
        );
    }

    #[test]
    fn worker_env_is_checked() {
        let err = parse("[vast.env]\nA = { credential = \"x\", extra = 1 }\n").unwrap_err();
        assert!(err.contains("line 2 (vast.env.A)"), "{err}");
        assert!(err.contains("credential"), "{err}");
        assert!(parse("[vast.env]\nA = 5\n")
            .unwrap_err()
            .contains("must be a string"));
        assert!(parse("[vast.env]\n\"A B\" = \"x\"\n").is_err());
        assert!(parse("[vast.env]\n1A = \"x\"\n").is_err());
        let err = parse("[vast.env]\nFLEETAGENT_LABEL = \"x\"\n").unwrap_err();
        assert!(err.contains("set by fleetagent"), "{err}");
    }

    #[test]
    fn a_demand_source_needs_its_address() {
        let err = parse("[demand]\nsource = \"http\"\n").unwrap_err();
        assert!(err.contains("demand.http_url must be set"), "{err}");
        let err = parse("[demand]\nsource = \"command\"\ncommand = \" \"\n").unwrap_err();
        assert!(err.contains("demand.command must be set"), "{err}");
    }

    #[test]
    fn base_url_must_end_in_v1() {
        assert!(parse("[llm]\nbase_url = \"http://127.0.0.1:9/\"\n").is_err());
        parse("[llm]\nbase_url = \"http://127.0.0.1:9/v1\"\n").unwrap();
        // A gateway's key in the query is never shown; the rest of the URL is, to be fixed.
        let err =
            parse("[llm]\nbase_url = \"https://gw.example.com/openai/v1?key=gwKp29fHs7Lq4\"\n")
                .unwrap_err();
        assert!(
            err.contains("got \"https://gw.example.com/openai/v1?key=***\"")
                && !err.contains("gwKp"),
            "{err}"
        );
        for key in ["demand.http_url", "price.fil_usd_url", "vast.base_url"] {
            let (table, name) = key.split_once('.').unwrap();
            let err = parse(&format!(
                "[{table}]\n{name} = \"htps://h/p?token=tkSecret99\"\n"
            ))
            .unwrap_err();
            assert!(
                err.contains("?token=***") && !err.contains("tkSecret"),
                "{err}"
            );
        }
    }

    #[test]
    fn rates_fall_back() {
        let c = parse(
            "[policy]\nproofs_per_hour_per_instance = 10\n[policy.gpu_rates]\n\"RTX 4090\" = 40\n",
        )
        .unwrap();
        assert_eq!(c.policy.rate_for("rtx 4090"), 40.0);
        // vast.ai writes a space as `_`: one name either way, as the launch path matches it.
        assert_eq!(c.policy.rate_for("RTX_4090"), 40.0);
        assert_eq!(c.policy.rate_for("RTX 3090"), 10.0);
    }

    #[test]
    fn launch_keys_reported() {
        let c = Config::default();
        assert_eq!(
            c.policy.missing_launch_keys(&c.vast),
            vec!["vast.image", "policy.max_dph_total", "policy.max_instances"]
        );
    }
}
