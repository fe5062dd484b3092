//! doctor's `vast` check and the key: refused on a write while the listing works.

use super::*;

/// A key that may list but not write (scoped without `instance_write`): the listing works,
/// the launch fails on the key, and `vast` names it (it was green, `actions` red only until a
/// pass asked for nothing); a call of ours that goes through clears it.
#[test]
fn a_key_refused_on_write_while_the_listing_works_is_named() {
    let (dir, s) = test_store(NOW);
    let config = Config::default();
    crate::store::ops::record_listing(&s.conn, Ok(()), NOW - 60_000).unwrap();
    let vast = |dir: &Path| check(&run_checks(dir, &config), "vast").problems.clone();
    assert!(vast(dir.path()).is_empty());
    let act = |outcome: &str, detail: &str| {
        crate::store::actions::insert(
            &s.conn,
            &crate::store::actions::NewAction {
                kind: "launch",
                outcome,
                actor: "rules",
                detail: Some(detail),
                ..Default::default()
            },
            NOW - 120_000,
        )
        .unwrap();
    };
    act(
        "failed",
        "vast.ai refused the API key: HTTP 401: auth_error",
    );
    let said = vast(dir.path());
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0]
            .detail
            .starts_with("vast.ai refused the API key on a launch 2m ago, while the listing works"),
        "{}",
        said[0].detail
    );
    act("ok", "ok");
    assert!(vast(dir.path()).is_empty());
}

/// An instance a failed create made, whose destroy failed: `vast` names it while its launch
/// is open (each pass that lists it destroys it again).
#[test]
fn an_orphan_of_a_failed_create_is_named_while_open() {
    let (dir, s) = test_store(NOW);
    let config = Config::default();
    crate::store::ops::record_listing(&s.conn, Ok(()), NOW - 60_000).unwrap();
    crate::store::actions::insert(
        &s.conn,
        &crate::store::actions::NewAction {
            kind: "launch",
            outcome: "intent",
            actor: "rules",
            label: Some("fleetagent-qwerty-r3-0badf00d"),
            detail: Some("orphan instance 9: create failed (insufficient bid), vast.ai made the instance anyway, and its destroy failed (HTTP 500): the next pass that lists it destroys it"),
            ..Default::default()
        },
        NOW - 300_000,
    )
    .unwrap();
    let said = check(&run_checks(dir.path(), &config), "vast")
        .problems
        .clone();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0]
            .detail
            .starts_with("a launch 5m ago: orphan instance 9: create failed"),
        "{}",
        said[0].detail
    );
}

/// This host's clock more than a minute off vast.ai's (the last listing that worked measured
/// it): named by the `vast` check, with the fix; within a minute, or unmeasured, nothing.
#[test]
fn a_host_clock_off_vast_ais_is_named() {
    let (dir, s) = test_store(NOW);
    let config = Config::default();
    crate::store::ops::record_listing(&s.conn, Ok(()), NOW - 60_000).unwrap();
    let vast = |dir: &Path| check(&run_checks(dir, &config), "vast").problems.clone();
    for skew in [None, Some(-2_000), Some(59_000)] {
        crate::store::ops::record_clock_skew(&s.conn, skew).unwrap();
        assert!(vast(dir.path()).is_empty(), "{skew:?}");
    }
    crate::store::ops::record_clock_skew(&s.conn, Some(-7_200_000)).unwrap();
    let said = vast(dir.path());
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0]
            .line()
            .starts_with("this host's clock is 2h00m behind vast.ai's"),
        "{}",
        said[0].line()
    );
    assert!(said[0].line().contains("fix: `timedatectl`"));
}

/// doctor at a shell without the keys that the service has (a user manager's
/// `EnvironmentFile=` drop-in): the secrets the service's passes used since their last
/// failure are not named missing; one they have not used (no listing yet), or that failed
/// since, is. Before, "no vast.ai API key" pointed a silent agent's operator at the wrong
/// cause.
#[test]
fn a_key_the_services_passes_use_is_not_missing_at_a_shell_without_it() {
    let (dir, s) = test_store(NOW);
    let config = crate::config::parse("[demand]\nsource = \"harmonydb\"").unwrap();
    let bare = crate::env::Env::from_pairs(std::iter::empty::<(String, String)>());
    let secrets = |dir: &Path| {
        let all = checks(&Inputs {
            config_path: Path::new("/etc/fleetagent/config.toml"),
            config_found: true,
            config: &config,
            env: &bare,
            state_dir: dir,
            now: NOW,
            units: None,
        })
        .0;
        check(&all, "secrets")
            .problems
            .iter()
            .map(|p| p.detail.clone())
            .collect::<Vec<_>>()
    };
    let named = |said: &[String], what: &str| said.iter().any(|d| d.starts_with(what));
    let said = secrets(dir.path());
    assert!(named(&said, "no vast.ai API key"), "{said:?}");
    assert!(named(&said, "no LLM API key"), "{said:?}");
    assert!(named(&said, "no HarmonyDB URL"), "{said:?}");
    crate::store::ops::record_listing(&s.conn, Ok(()), NOW - 60_000).unwrap();
    crate::store::session::record_llm_outcome(&s.conn, None, NOW - 60_000).unwrap();
    let said = secrets(dir.path());
    assert!(!named(&said, "no vast.ai API key"), "{said:?}");
    assert!(!named(&said, "no LLM API key"), "{said:?}");
    assert!(named(&said, "no HarmonyDB URL"), "no reading yet: {said:?}");
    crate::store::session::set_last_observed(&s.conn, Some(r#"{"pending":1}"#), "[]").unwrap();
    crate::store::curio::set_last_reading(&s.conn, "{}", NOW - 60_000).unwrap();
    assert!(!named(&secrets(dir.path()), "no HarmonyDB URL"));
    // The service lost the key since: named again.
    crate::store::ops::record_listing(&s.conn, Err("not_configured: no vast.ai API key"), NOW)
        .unwrap();
    assert!(named(&secrets(dir.path()), "no vast.ai API key"));
    // A listing that worked two hours ago vouches for nothing now (an HA follower's copy, a
    // stopped timer): named.
    crate::store::ops::record_listing(&s.conn, Ok(()), NOW - 7_200_000).unwrap();
    assert!(named(&secrets(dir.path()), "no vast.ai API key"));
}

/// The `curio` check names what the reading could not read (a missing grant), not the
/// GPU-less node it rightly left out: every ProofShare cluster has one (its request loop's
/// node), and doctor was red on every such cluster for ever (the soak walkthrough: 31 of 71
/// rounds red for this note alone).
#[test]
fn a_gpu_less_proofshare_node_is_no_curio_problem() {
    let note = |text: &str| crate::demand::Demand {
        notes: vec![text.to_string()],
        ..Default::default()
    };
    let gpu_less = format!(
        "{} 6h, so not workers (they list PSProve but cannot take it): main (10.0.0.1:12300)",
        crate::demand::harmonydb::NO_GPU_NOTE
    );
    assert!(outside::curio_problems(&note(&gpu_less), &[], 60_000).is_empty());
    let grant = "proofshare_meta: permission denied for table (proofshare_enabled unknown)";
    let p = outside::curio_problems(&note(grant), &[], 60_000);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].detail.contains("permission denied"), "{}", p[0].detail);
}

/// A `policy.gpu_rates` key no vast.ai offer is named is said (the walkthrough's "RTX4090"
/// and "NVIDIA GeForce RTX 4090" were read as 20/h and every launch refused unprofitable);
/// vast.ai's spelling in any case, with `_` for a space, and a GPU nobody asks for are not.
#[test]
fn a_gpu_rate_no_offer_is_named_is_said() {
    let (dir, _s) = test_store(NOW);
    let mut config = Config::default();
    config.vast.offers.gpu_names = vec!["RTX 4090".into(), "A100 SXM4".into()];
    let said = |config: &Config| -> Vec<String> {
        check(&run_checks(dir.path(), config), "config")
            .problems
            .iter()
            .filter(|p| p.detail.starts_with("policy.gpu_rates"))
            .map(|p| p.detail.clone())
            .collect()
    };
    for good in ["RTX 4090", "rtx_4090", "A100 SXM4", "H100 SXM"] {
        config.policy.gpu_rates = [(good.to_string(), 60.0)].into();
        assert_eq!(said(&config), Vec::<String>::new(), "{good}");
    }
    config.policy.gpu_rates = [("RTX4090".to_string(), 60.0)].into();
    let got = said(&config);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("policy.gpu_rates pins \"RTX4090\", which no offer fleetagent rents is named (vast.offers.gpu_names asks for \"RTX 4090\": is that the GPU meant?)"),
        "{}",
        got[0]
    );
    for near in ["NVIDIA GeForce RTX 4090", "4090", "T4", "GH200"] {
        config.vast.offers.gpu_names =
            vec!["RTX 4090".into(), "Tesla T4".into(), "GH200 SXM".into()];
        config.policy.gpu_rates = [(near.to_string(), 60.0)].into();
        assert_eq!(said(&config).len(), 1, "{near}");
    }
    // Names vast.ai gives GPUs gpu_names does not hold are not taken for misspellings.
    config.vast.offers.gpu_names = vec!["RTX 4090".into(), "A40".into()];
    for other in ["RTX 3090 Ti", "H100 SXM5", "L4"] {
        config.policy.gpu_rates = [(other.to_string(), 60.0)].into();
        assert_eq!(said(&config), Vec::<String>::new(), "{other}");
    }
    config.vast.offers.gpu_names = vec!["RTX 4090".into()];
    config.policy.gpu_rates = [("NVIDIA GeForce RTX 4090".to_string(), 60.0)].into();
    // Without gpu_names: the vendor's words alone tell it.
    config.vast.offers.gpu_names.clear();
    let got = said(&config);
    assert!(got[0].contains("without the vendor's words"), "{got:?}");
    config.policy.gpu_rates = [("RTX4090".to_string(), 60.0)].into();
    assert_eq!(said(&config), Vec::<String>::new());
}
