//! The hardened service still does its job: under a real systemd user manager, the units
//! `units install --user` writes (sandboxed as in units/, minus what a user manager cannot do)
//! read the vast.ai key through LoadCredential= from the manager's credential store, reach
//! the network, and keep their state in the state dir. Only the credential carries the key:
//! the environment has none.

use std::time::Duration;

use fleetagent::units;

use super::dead_fleet;
use crate::common::fake_vast::{FakeVast, Route};
use crate::common::systemd::{wait_for, UserManager};

const BIN: &str = env!("CARGO_BIN_EXE_fleetagent");
const KEY: &str = "vkey-credstore-Wq83nZ5tLp";

#[test]
fn the_sandboxed_service_gets_its_key_from_the_credential_store_and_launches() {
    let tmp = tempfile::Builder::new()
        .prefix("sandbox-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let vast = FakeVast::start_real_time();
    vast.set_api_key(Some(KEY));
    vast.add_offers(3, "RTX 4090", 0.40, 0.99);
    // The manager's own credentials stand in for /etc/credstore/.
    let store = tmp.path().join("credstore");
    std::fs::create_dir(&store).unwrap();
    std::fs::write(store.join("fleetagent.vast_api_key"), KEY).unwrap();
    let demand = tmp.path().join("demand.json");
    std::fs::write(&demand, dead_fleet().to_string()).unwrap();
    let config = tmp.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"[run]
deadline_secs = 60
[debounce]
p0_secs = 0
p1_secs = 0
p2_secs = 0
max_wait_secs = 1
[llm]
provider = "rules"
[vast]
base_url = "{}"
image = "ghcr.io/example/curio-psprove:latest"
[vast.offers]
gpu_names = ["RTX 4090"]
[demand]
source = "command"
command = "cat {}"
[policy]
target_proofs_per_hour = 50
proofs_per_hour_per_instance = 50
max_dph_total = 5.0
max_instances = 2
"#,
            vast.url(),
            demand.display()
        ),
    )
    .unwrap();
    let state = tmp.path().join("state");
    let sd = UserManager::start_with(tmp.path(), Some(&store));
    let fa = |args: &[&str]| sd.fleetagent(BIN, &config, &state, args);
    for args in [&["units", "install", "--user"][..], &["init"]] {
        let out = fa(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let unit = std::fs::read_to_string(
        std::path::PathBuf::from(sd.env("XDG_CONFIG_HOME"))
            .join("systemd/user")
            .join(units::SERVICE),
    )
    .unwrap();
    for line in [
        "LoadCredential=vast_api_key:fleetagent.vast_api_key",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
    ] {
        assert!(
            unit.contains(line),
            "{line} missing from the installed unit:\n{unit}"
        );
    }
    sd.systemctl_ok(&["daemon-reload"]);
    sd.systemctl_ok(&["start", units::PATH_UNIT]);
    let out = fa(&["trigger", "-p", "0", "-r", "sandbox test"]);
    assert!(out.status.success());
    let context = || format!("{}\n{}", sd.state(units::SERVICE), sd.journal_tail(40));
    wait_for(
        "the service to launch through vast.ai",
        Duration::from_secs(60),
        || vast.count(Route::Create) >= 1,
        context,
    );
    let creates = vast.requests_to(Route::Create);
    assert_eq!(creates[0].status, 200, "{:?}", creates[0]);
    assert_eq!(
        creates[0].authorization.as_deref(),
        Some(&*format!("Bearer {KEY}"))
    );
    wait_for(
        "the pass to finish",
        Duration::from_secs(60),
        || {
            let out = fa(&["inspect", "--json"]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            v["runs"][0]["status"] == "ok" && v["lock_held"] == false
        },
        context,
    );
    // The ledger is in the state dir, written from inside the sandbox.
    let db = rusqlite::Connection::open(state.join("fleetagent.db")).unwrap();
    let ok: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND outcome = 'ok'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let rented = vast
        .requests_to(Route::Create)
        .iter()
        .filter(|r| r.status == 200)
        .count();
    assert!(
        ok >= 1 && ok as usize == rented,
        "{ok} recorded, {rented} rented"
    );
    assert!(
        !sd.state(units::SERVICE).starts_with("failed"),
        "{}",
        context()
    );
}

/// The units' `ProcSubset=pid` hides /proc/locks. There, `inspect` says the lock's holder is
/// unknown (it never tries the lock), and `doctor` asks the lock itself: a pass going is not
/// called interrupted (both read "free" and "interrupted" while a run held it: a
/// walkthrough), and `poll` judges a pass going the same way before it hands an HA lease on.
#[test]
fn where_proc_locks_is_hidden_a_pass_going_is_not_read_as_ended() {
    use crate::common::fleet::Fleet;
    let f = Fleet::new().env("FLEETAGENT_TEST_PAUSE_AT", "run-after-observe:4000");
    f.cmd(&["trigger", "-p", "0", "-r", "go"]).ok();
    let mut run = f.spawn(&["run"]);
    crate::suite::backbone::wait_for(|| f.inspect()["lock_held"] == true, "the run's lock");
    // A private mount and pid namespace with a /proc of process entries only, as the units'.
    let hidden = |args: &str| {
        let c = f.command(&[]);
        let argv: Vec<String> = c
            .get_args()
            .map(|a| format!("'{}'", a.to_string_lossy()))
            .collect();
        let mut u = std::process::Command::new("unshare");
        u.args(["-m", "-p", "-f", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount -t proc -o subset=pid proc /proc && test ! -e /proc/locks && exec '{BIN}' {} {args}",
                argv.join(" ")
            ))
            ;
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => u.env(k, v),
                None => u.env_remove(k),
            };
        }
        u.output().unwrap()
    };
    let probe = hidden("--version");
    if !probe.status.success() {
        let _ = run.kill();
        let _ = run.wait();
        eprintln!(
            "SKIP: no pid namespace with a subset /proc (needs root): {}",
            String::from_utf8_lossy(&probe.stderr).trim()
        );
        return;
    }
    let inspect = hidden("inspect --json");
    let doctor = hidden("doctor");
    let out = run.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert!(v["lock_held"].is_null(), "{v}");
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert!(!said.contains("interrupted"), "{said}");
}
