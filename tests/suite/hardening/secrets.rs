//! Secrets: with known fake keys in the environment or in `$CREDENTIALS_DIRECTORY`, every
//! command (logging at trace, failing, exiting early, panicking) keeps them out of stdout,
//! stderr, the database and its side files, the doorbell, the prompts, and every request the
//! fakes received except the Authorization header of the service each key belongs to. The
//! state files have DESIGN.md's modes whatever the umask; world-writable state is refused.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::json;

use super::{files_under, Rig};
use crate::common::fake_llm::Reply;
use crate::common::fake_vast::{FakeReply, Route};
use crate::common::fleet::{Fleet, FAST_CONFIG};

/// Fake keys; no two share a 10-character piece (the leak check looks for any).
struct Keys {
    vast: &'static str,
    llm: &'static str,
    pg_password: &'static str,
    worker_password: &'static str,
}

const ENV_KEYS: Keys = Keys {
    vast: "vkey-Qz81mW4pXr7tLc2",
    llm: "sk-llm-Hb52nJ9sKd3vYe",
    pg_password: "pgpw-Tf63uV0aGh8qMn",
    worker_password: "wkpw-Ls47cX2oBe5rZi",
};

const CRED_KEYS: Keys = Keys {
    vast: "vkey-Nc93dK1wFy6hUs4",
    llm: "sk-llm-Pr28gE7mQa4jWo",
    pg_password: "pgpw-Yx15tB6nRk9vCe",
    worker_password: "wkpw-Gd84sM3zJu0iTa",
};

/// Everything a command left where someone could read it.
struct Output {
    what: String,
    text: String,
}

fn setup(keys: &Keys, via_credentials: bool) -> Rig {
    let rig = Rig::new(
        "max_dph_total = 10.0\nmax_instances = 4",
        "fallback = \"rules\"",
    );
    rig.vast.set_api_key(Some(keys.vast));
    rig.llm.require_key(keys.llm);
    let pg_url = format!("postgres://curio:{}@127.0.0.1:9/curio", keys.pg_password);
    let mut text = rig.config_text("max_dph_total = 10.0\nmax_instances = 4", "");
    // The demand from HarmonyDB (a closed port: the probe fails, its error is shown), and a
    // worker env value naming a credential.
    text = text.replace(
        "[demand]\nsource = \"command\"",
        "[demand]\nsource = \"harmonydb\"\ntimeout_secs = 2\n[demand_unused]",
    );
    text = text.replace("[demand_unused]\n", "");
    text = text.replace(
        "[vast.offers]",
        "[vast.env]\nCURIO_DB_PASSWORD = { credential = \"curio_db_password\" }\n[vast.offers]",
    );
    rig.f.write_config(&text);
    let creds = rig.f.path().join("creds");
    std::fs::create_dir(&creds).unwrap();
    std::fs::write(creds.join("curio_db_password"), keys.worker_password).unwrap();
    let mut rig = rig;
    rig.f = std::mem::replace(&mut rig.f, Fleet::with_config(""))
        .env("CREDENTIALS_DIRECTORY", creds.to_str().unwrap());
    if via_credentials {
        std::fs::write(creds.join("vast_api_key"), format!("{}\n", keys.vast)).unwrap();
        std::fs::write(creds.join("llm_api_key"), keys.llm).unwrap();
        std::fs::write(creds.join("harmonydb_url"), &pg_url).unwrap();
        // The Rig's own env keys must not win over the credential files.
        rig.f = std::mem::replace(&mut rig.f, Fleet::with_config(""))
            .env("VAST_API_KEY", "")
            .env("FLEETAGENT_LLM_API_KEY", "");
    } else {
        rig.f = std::mem::replace(&mut rig.f, Fleet::with_config(""))
            .env("VAST_API_KEY", keys.vast)
            .env("FLEETAGENT_LLM_API_KEY", keys.llm)
            .env("FLEETAGENT_HARMONYDB_URL", &pg_url);
    }
    rig
}

fn run_everything(rig: &Rig, keys: &Keys) -> Vec<Output> {
    let f = &rig.f;
    let mut outs = Vec::new();
    let mut record = |what: &str, c: &mut std::process::Command| {
        let o = c.output().unwrap();
        outs.push(Output {
            what: what.to_string(),
            text: format!(
                "{}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        });
        o.status.code()
    };
    rig.vast.add_offers(3, "RTX 4090", 0.40, 0.99);
    let ours = rig.vast.add_instance("fleetagent-old");
    rig.vast.set_actual_status(ours, Some("exited"));
    rig.vast.set_log_text(ours, "worker exited\n");
    // A run at trace level: the model launches, reads a log and destroys an exited instance.
    rig.llm.push(Reply::tool_calls(&[
        ("launch_instance", r#"{"reason": "capacity"}"#),
        ("list_instances", "{}"),
        ("instance_logs", &json!({"instance_id": ours}).to_string()),
        (
            "stop_instance",
            &json!({"instance_id": ours, "reason": "exited"}).to_string(),
        ),
    ]));
    rig.llm
        .push(Reply::text("Launched one, destroyed the exited one."));
    f.cmd(&["trigger", "-p", "1", "-r", "check"]).ok();
    // This pass reads Curio through the rig's command (a launch on unknown demand is
    // refused); every later one through the failing HarmonyDB probe.
    let harmony = std::fs::read_to_string(&f.config).unwrap();
    let read = harmony.replace("source = \"harmonydb\"", "source = \"command\"");
    assert_ne!(read, harmony);
    std::fs::write(&f.config, read).unwrap();
    // Someone else's busy worker, nothing queued: no rule of the floor's wants anything.
    crate::suite::agent_e2e::write_demand(
        f.path(),
        json!({"pending": 0, "running": 1, "completed_1h": 20, "completed_15m": 5,
               "workers": [{"machine_name": "other-box", "host_and_port": "10.0.0.9:12300",
                            "running": 1, "cordoned": false}]}),
    );
    let code = record(
        "run -vv RUST_LOG=trace",
        f.command(&["-vv", "run"]).env("RUST_LOG", "trace"),
    );
    std::fs::write(&f.config, harmony).unwrap();
    assert_eq!(code, Some(0), "{}", outs.last().unwrap().text);
    assert!(
        rig.vast.count(Route::Create) == 1,
        "the launch reached vast.ai: {}",
        outs.last().unwrap().text
    );
    for args in [
        &["inspect"][..],
        &["inspect", "--json"],
        &["doctor"],
        &["history"],
        &["history", "--json"],
        &["instances", "list"],
        &["wakes", "list"],
        &["poll"],
    ] {
        record(&args.join(" "), &mut f.command(args));
    }
    // Servers that echo the key back in their errors.
    rig.llm.push(Reply::openai_error(
        401,
        &format!(
            "Incorrect API key provided: {}. You can find your API key at ...",
            keys.llm
        ),
        "invalid_request_error",
        Some("invalid_api_key"),
    ));
    rig.vast.fail_next(
        Route::ListV1,
        3,
        FakeReply::json(500, json!({"success": false, "error": "server_error", "msg": format!("bad key {}", keys.vast)})),
    );
    f.cmd(&["trigger", "-p", "0", "-r", "failing"]).ok();
    record(
        "run with both servers failing, at trace",
        f.command(&["-vv", "run"]).env("RUST_LOG", "trace"),
    );
    // A failing run without fallback (exit 1).
    let text = std::fs::read_to_string(&f.config).unwrap();
    std::fs::write(
        &f.config,
        text.replace("[llm]\n", "[llm]\nfallback = \"none\"\n"),
    )
    .unwrap();
    rig.llm.push(Reply::openai_error(
        403,
        &format!("key {} is not allowed", keys.llm),
        "invalid_request_error",
        None,
    ));
    f.cmd(&["trigger", "-p", "0", "-r", "failing without fallback"])
        .ok();
    let code = record(
        "run failing without fallback",
        f.command(&["-vv", "run"]).env("RUST_LOG", "trace"),
    );
    assert_eq!(code, Some(1), "{}", outs.last().unwrap().text);
    std::fs::write(&f.config, &text).unwrap();
    // A panic in the middle of a pass, with a backtrace.
    f.cmd(&["trigger", "-p", "0", "-r", "panic"]).ok();
    let code = record(
        "run panicking",
        f.command(&["-vv", "run"])
            .env("FLEETAGENT_TEST_PANIC_AT", "run-after-observe")
            .env("RUST_BACKTRACE", "1")
            .env("RUST_LOG", "trace"),
    );
    assert_eq!(code, Some(101), "{}", outs.last().unwrap().text);
    // Early exits: the key pasted into the config by mistake (an unknown key), and a password
    // in the HarmonyDB URL of the config.
    std::fs::write(
        &f.config,
        format!("{text}\n[secrets]\nvast_api_key = \"{}\"\n", keys.vast),
    )
    .unwrap();
    let code = record("run with the key in the config", &mut f.command(&["run"]));
    assert_eq!(code, Some(2), "{}", outs.last().unwrap().text);
    record(
        "doctor with the key in the config",
        &mut f.command(&["doctor"]),
    );
    std::fs::write(
        &f.config,
        text.replace(
            "source = \"harmonydb\"",
            &format!(
                "source = \"harmonydb\"\nharmonydb_url = \"postgres://curio:{}@db:5433/c\"",
                keys.pg_password
            ),
        ),
    )
    .unwrap();
    let code = record(
        "run with a password in the config",
        &mut f.command(&["run"]),
    );
    assert_eq!(code, Some(2), "{}", outs.last().unwrap().text);
    std::fs::write(&f.config, &text).unwrap();
    record("final run", &mut f.command(&["-vv", "run"]));
    outs
}

/// Any 10-byte piece of the secret: a key cut over two lines of a hex dump, or half of one
/// left behind by a cut, is a leak too.
fn contains(hay: &[u8], secret: &str) -> bool {
    secret
        .as_bytes()
        .windows(10)
        .any(|piece| hay.windows(piece.len()).any(|w| w == piece))
}

#[track_caller]
fn assert_no_secret(keys: &Keys, rig: &Rig, outs: &[Output]) -> usize {
    let all = [keys.vast, keys.llm, keys.pg_password, keys.worker_password];
    let mut places = 0;
    for o in outs {
        places += 1;
        for s in all {
            assert!(
                !contains(o.text.as_bytes(), s),
                "{}: printed (part of) a secret:\n{}",
                o.what,
                o.text
            );
        }
    }
    // Every file in the state dir: the database, -wal, -shm, the doorbell, the lock.
    for p in files_under(&rig.f.state) {
        places += 1;
        let bytes = std::fs::read(&p).unwrap();
        for s in all {
            assert!(!contains(&bytes, s), "{} holds a secret", p.display());
        }
    }
    // Every request to the LLM: its own key only as its bearer token, nothing else.
    for r in rig.llm.recorded() {
        places += 1;
        let auth = r.authorization.clone().unwrap_or_default();
        assert!(
            auth.is_empty() || auth == format!("Bearer {}", keys.llm),
            "{auth}"
        );
        let text = format!("{} {}", r.path, r.body);
        for s in all {
            assert!(
                !contains(text.as_bytes(), s),
                "an LLM request carried a secret: {text}"
            );
        }
    }
    // Every request to vast.ai: its key only as its bearer token; the worker's credential
    // only in the create request's env (its purpose: the worker needs it).
    for r in rig.vast.requests() {
        places += 1;
        let auth = r.authorization.clone().unwrap_or_default();
        assert!(
            auth.is_empty() || auth == format!("Bearer {}", keys.vast),
            "{auth}"
        );
        let text = format!("{} {} {}", r.path, r.query, r.body);
        for s in [keys.vast, keys.llm, keys.pg_password] {
            assert!(
                !contains(text.as_bytes(), s),
                "a vast.ai request carried a secret: {text}"
            );
        }
        if r.route != Route::Create {
            assert!(!contains(text.as_bytes(), keys.worker_password), "{text}");
        } else {
            assert_eq!(
                r.json()["env"]["CURIO_DB_PASSWORD"],
                keys.worker_password,
                "the worker gets its credential"
            );
        }
    }
    assert!(
        rig.llm
            .recorded()
            .iter()
            .any(|r| r.authorization.as_deref() == Some(&format!("Bearer {}", keys.llm))),
        "the LLM key was used"
    );
    places
}

#[test]
fn keys_from_the_environment_never_leak() {
    let rig = setup(&ENV_KEYS, false);
    let outs = run_everything(&rig, &ENV_KEYS);
    let places = assert_no_secret(&ENV_KEYS, &rig, &outs);
    println!("secrets (environment): {} commands, {places} outputs, files and requests searched, 0 leaks", outs.len());
}

#[test]
fn keys_from_credentials_never_leak() {
    let rig = setup(&CRED_KEYS, true);
    let outs = run_everything(&rig, &CRED_KEYS);
    let places = assert_no_secret(&CRED_KEYS, &rig, &outs);
    println!("secrets ($CREDENTIALS_DIRECTORY): {} commands, {places} outputs, files and requests searched, 0 leaks", outs.len());
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// The state dir and every file in it (the database with its -wal and -shm, the doorbell, the
/// lock) get their modes explicitly, whatever the caller's umask.
#[test]
fn state_files_have_the_designed_modes_under_any_umask() {
    for umask in ["000", "022", "077"] {
        let f = Fleet::with_config(FAST_CONFIG);
        let sh = |args: &str| {
            let mut c = f.command(&[]);
            let prog = c.get_program().to_owned();
            let fixed: Vec<String> = c
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let line = format!(
                "umask {umask}; exec {} {} {args}",
                prog.to_string_lossy(),
                fixed.join(" ")
            );
            let out = c_sh(&mut c, &line);
            assert!(
                out.status.success(),
                "umask {umask}: {args}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        sh("init");
        sh("trigger -p 0 -r x");
        // The run holds the database open while it pauses: -wal and -shm exist then.
        let c = f.command(&[]);
        let prog = c.get_program().to_string_lossy().into_owned();
        let fixed: Vec<String> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "umask {umask}; exec {prog} {} run",
                fixed.join(" ")
            ))
            .envs(
                c.get_envs()
                    .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))),
            )
            .env("FLEETAGENT_TEST_PAUSE_AT", "run-after-observe:1500")
            .spawn()
            .unwrap();
        let db = f.state.join("fleetagent.db");
        let side = |s: &str| std::path::PathBuf::from(format!("{}{s}", db.display()));
        let t = std::time::Instant::now();
        // The claim deletes the doorbell; the pass then pauses with the database open.
        while f.doorbell().exists() || !(side("-wal").exists() && side("-shm").exists()) {
            assert!(t.elapsed().as_secs() < 10, "the run did not claim");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let modes: Vec<(String, u32)> = std::fs::read_dir(&f.state)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    mode(&p),
                )
            })
            .collect();
        assert!(child.wait().unwrap().success());
        sh("trigger -p 0 -r y");
        assert!(f.doorbell().exists());
        assert_eq!(mode(&f.state), 0o2770, "umask {umask}: the state dir");
        for (name, m) in &modes {
            assert_eq!(
                *m, 0o660,
                "umask {umask}: {name} while the run held it open"
            );
        }
        for name in [
            "fleetagent.db",
            "run.lock",
            "fleetagent.db-wal",
            "fleetagent.db-shm",
        ] {
            let names: Vec<&str> = modes.iter().map(|(n, _)| n.as_str()).collect();
            assert!(
                names.contains(&name),
                "umask {umask}: {name} missing from {names:?}"
            );
        }
        for p in files_under(&f.state) {
            assert_eq!(mode(&p), 0o660, "umask {umask}: {}", p.display());
        }
    }
}

fn c_sh(c: &mut std::process::Command, line: &str) -> std::process::Output {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(line)
        .envs(
            c.get_envs()
                .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))),
        )
        .output()
        .unwrap()
}

/// A world-writable state dir (exit 1), config, or config dir without a sticky bit (exit 2) is
/// refused by every command, with one line that says what to do, and nothing is written but
/// the events of `trigger` and `message` under a refused config (the state dir is known from
/// `--state-dir`: other programs ring, and do not retry an exit 2).
#[test]
fn world_writable_state_is_refused_by_every_command() {
    let f = Fleet::new();
    f.cmd(&["trigger", "-p", "0", "-r", "x"]).ok();
    let before = std::fs::read(f.state.join("fleetagent.db")).unwrap();
    let commands: [&[&str]; 7] = [
        &["run"],
        &["trigger", "-p", "1", "-r", "x"],
        &["message", "hi"],
        &["reset-session"],
        &["wakes", "add", "--in", "1h", "--reason", "x"],
        &["inspect"],
        &["doctor"],
    ];
    std::fs::set_permissions(&f.state, std::fs::Permissions::from_mode(0o2777)).unwrap();
    for args in commands {
        let out = f.cmd(args);
        let doctor = args[0] == "doctor";
        let text = if doctor { &out.stdout } else { &out.stderr };
        assert_eq!(out.code, 1, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            text.contains("world-writable") && text.contains("chmod o-w"),
            "{args:?}: {text}"
        );
        if !doctor {
            let errors = out
                .stderr
                .lines()
                .filter(|l| l.starts_with("fleetagent:"))
                .count();
            assert_eq!(errors, 1, "{args:?}: {}", out.stderr);
        }
    }
    std::fs::set_permissions(&f.state, std::fs::Permissions::from_mode(0o2770)).unwrap();
    let db = f.state.join("fleetagent.db");
    assert_eq!(std::fs::read(&db).unwrap(), before, "nothing written");
    let counts = |f: &Fleet| {
        ["runs", "sessions", "wakes", "messages", "actions"]
            .map(|t| f.count(&format!("SELECT COUNT(*) FROM {t}")))
    };
    let (rows, events) = (counts(&f), f.count("SELECT COUNT(*) FROM events"));
    std::fs::set_permissions(&f.config, std::fs::Permissions::from_mode(0o666)).unwrap();
    for args in commands {
        let out = f.cmd(args);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr.contains("world-writable") && out.stderr.contains("chmod o-w"),
            "{args:?}: {}",
            out.stderr
        );
    }
    std::fs::set_permissions(&f.config, std::fs::Permissions::from_mode(0o640)).unwrap();
    // A config in a dir that anyone may write (and no sticky bit): anyone could rename
    // another file over it. Sticky, as /tmp is, passes.
    let dir = f.config.parent().unwrap().to_path_buf();
    let dir_mode = mode(&dir);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    for args in commands {
        let out = f.cmd(args);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr
                .contains("which every user may write (mode 777, no sticky bit)"),
            "{args:?}: {}",
            out.stderr
        );
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    f.cmd(&["inspect"]).ok();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(dir_mode)).unwrap();
    assert_eq!(counts(&f), rows, "nothing written but events");
    // Whether [ha] is on is unknown while the config is refused: the outbox.
    assert_eq!(f.count("SELECT COUNT(*) FROM events"), events);
    assert_eq!(f.count("SELECT COUNT(*) FROM outbox"), 4);
}

/// `init` under umask 000 creates the config's missing parent dirs and the state dir's 0755
/// (not world-writable, as `create_dir_all` made them: anyone could have replaced the config),
/// the config 0640 and the state dir 2770.
#[test]
fn init_creates_missing_parents_0755_under_umask_000() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("etc/fleetagent/config.toml");
    let state = tmp.path().join("var/lib/fleetagent");
    let mut c = std::process::Command::new("sh");
    c.arg("-c")
        .arg(r#"umask 000; exec "$0" --config "$1" --state-dir "$2" init"#)
        .arg(crate::common::fleet::BIN)
        .arg(&config)
        .arg(&state);
    crate::common::fleet::clean_env(&mut c);
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "init under umask 000: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for dir in ["etc", "etc/fleetagent", "var", "var/lib"] {
        assert_eq!(mode(&tmp.path().join(dir)), 0o755, "{dir}");
    }
    assert_eq!(mode(&config), 0o640, "the config");
    assert_eq!(mode(&state), 0o2770, "the state dir");
}

/// An operator's probe command (`demand.command`, `price.fil_usd_command`) that logs its
/// environment, or echoes a secret it read elsewhere (a worker credential, the HarmonyDB
/// password percent-decoded), when it fails or in a document's notes: fleetagent's own keys
/// are not in its environment, and what it says is redacted before the journal, the
/// database, the prompt, `inspect` or `doctor` quote it.
#[test]
fn a_probe_command_cannot_leak_a_key() {
    let vast_key = "vastkey-SECRET-0123456789abcdef";
    let llm_key = "llmkey-SECRET-abcdef0123456789";
    let worker_pw = "CurioDbPassw0rd-SeCrEt-99";
    let pg_url = "postgresql://probe:Tr0ub4dor%26horse%40battery@127.0.0.1:1/curio";
    let creds = tempfile::tempdir().unwrap();
    std::fs::write(creds.path().join("curio_db_password"), worker_pw).unwrap();
    let f = Fleet::with_config("")
        .env("VAST_API_KEY", vast_key)
        .env("FLEETAGENT_LLM_API_KEY", llm_key)
        .env("FLEETAGENT_HARMONYDB_URL", pg_url)
        .env("CREDENTIALS_DIRECTORY", creds.path().to_str().unwrap());
    let probe = f.path().join("probe.sh");
    let script = |body: &str| {
        std::fs::write(&probe, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    script(&format!(
        "env | grep -i key >&2\necho \"auth Bearer {vast_key} failed\" >&2\ncat \"$CREDENTIALS_DIRECTORY/curio_db_password\" >&2\necho ' pw Tr0ub4dor&horse@battery' >&2\nexit 1"
    ));
    f.write_config(&format!(
        "{FAST_CONFIG}\n[vast.env]\nCURIO_DB_PASSWORD = {{ credential = \"curio_db_password\" }}\n[demand]\nsource = \"command\"\ncommand = \"{p}\"\n[price]\nproof_price_fil = 0.001\nfil_usd_command = \"{p}\"\n",
        p = probe.display()
    ));
    f.cmd(&["init"]).ok();
    let failed = f.cmd(&["run"]);
    let failed_inspect = f.cmd(&["inspect"]);
    // A probe that works and says the URL in its notes.
    script(
        "echo '{\"pending\": 0, \"running\": 0, \"completed_1h\": 0, \"completed_15m\": 0, \"workers\": [], \"notes\": [\"connected to '\"$FLEETAGENT_HARMONYDB_URL\"'\"]}'",
    );
    let ok = f.cmd(&["run"]);
    let inspect = f.cmd(&["inspect"]);
    let doctor = f.cmd(&["doctor"]);
    let said = [&failed, &failed_inspect, &ok, &inspect, &doctor]
        .iter()
        .map(|o| format!("{}{}", o.stdout, o.stderr))
        .collect::<String>();
    assert!(said.contains("[redacted]"), "{said}");
    let db = std::fs::read(f.state.join("fleetagent.db")).unwrap();
    let wal = std::fs::read(f.state.join("fleetagent.db-wal")).unwrap_or_default();
    for key in [
        vast_key,
        llm_key,
        "SECRET-0123456789",
        "SECRET-abcdef012",
        worker_pw,
        "Tr0ub4dor&horse@battery",
        "Tr0ub4dor%26horse%40battery",
    ] {
        assert!(!said.contains(key), "{key} leaked: {said}");
        assert!(
            !contains(&db, key) && !contains(&wal, key),
            "{key} in the database"
        );
    }
}

/// A host's words carry secrets too: a container log from a start script under `set -x` (the
/// worker credential, the registry login, the LLM key) and a status message quoting the
/// worker credential. The vast.ai client redacts them where they enter, so neither the
/// model's requests, the database, `history` nor `inspect` has them.
#[test]
fn secrets_in_a_hosts_log_and_status_message_are_redacted_where_they_enter() {
    let keys = &ENV_KEYS;
    let login = "-u bob -p imgTok-Mn83cVx0Lq ghcr.io";
    let mut rig = setup(keys, false);
    rig.f = std::mem::replace(&mut rig.f, Fleet::with_config("")).env("VAST_IMAGE_LOGIN", login);
    let id = rig.vast.add_instance("fleetagent-p1");
    rig.vast.set_status_msg(
        id,
        Some(&format!(
            "container failed: CURIO_DB_PASSWORD={}",
            keys.worker_password
        )),
    );
    rig.vast.set_log_text(
        id,
        &format!(
            "+ export CURIO_DB_PASSWORD={}\n+ docker login {login}\n+ LLM_KEY={}\nworker up\n",
            keys.worker_password, keys.llm
        ),
    );
    rig.llm.push(Reply::tool_call(
        "instance_logs",
        &json!({ "instance_id": id }).to_string(),
    ));
    rig.llm.push(Reply::text("Looked."));
    rig.f.cmd(&["trigger", "-p", "0", "-r", "look"]).ok();
    let run = rig.f.cmd(&["run"]);
    let history = rig.f.cmd(&["history", "--all"]);
    let inspect = rig.f.cmd(&["inspect"]);
    let prompts = serde_json::to_string(&rig.llm.requests()).unwrap();
    assert!(prompts.contains("worker up"), "the log reached the model");
    assert!(prompts.contains("[redacted]"), "{prompts}");
    let db = std::fs::read(rig.f.state.join("fleetagent.db")).unwrap();
    let wal = std::fs::read(rig.f.state.join("fleetagent.db-wal")).unwrap_or_default();
    let said = [&run, &history, &inspect]
        .iter()
        .map(|o| format!("{}{}", o.stdout, o.stderr))
        .collect::<String>();
    for s in [keys.worker_password, keys.llm, "imgTok-Mn83cVx0Lq"] {
        assert!(!contains(prompts.as_bytes(), s), "{s} sent to the model");
        assert!(!contains(said.as_bytes(), s), "{s} printed: {said}");
        assert!(
            !contains(&db, s) && !contains(&wal, s),
            "{s} in the database"
        );
    }
}

/// A database password with an unencoded '/', '?' or '#' (the postgres driver takes the
/// userinfo up to the first '@'): the connection errors of `ha status`, `doctor` and `run`
/// name the role, host and database, never the password.
#[test]
fn a_database_password_with_a_slash_is_never_printed() {
    let (hdb, ha) = ("hdb/Kq7Zp3Wn9?Rt2", "haa/Jm5Yc8Lb#Gs4");
    let f = Fleet::with_config(&format!(
        "{FAST_CONFIG}[demand]\nsource = \"harmonydb\"\ntimeout_secs = 2\n[ha]\nenabled = true\nhost_id = \"h1\"\n"
    ))
    .env("FLEETAGENT_HARMONYDB_URL", &format!("postgresql://probe:{hdb}@127.0.0.1:9/curio"))
    .env("FLEETAGENT_HA_DB_URL", &format!("postgres://fa:{ha}@127.0.0.1:9/fa"));
    f.cmd(&["init"]);
    let said = [["ha", "status"].as_slice(), &["doctor"], &["run"]]
        .iter()
        .map(|args| {
            let o = f.cmd(args);
            format!("{}{}", o.stdout, o.stderr)
        })
        .collect::<String>();
    assert!(said.contains("postgres://fa@127.0.0.1:9/fa"), "{said}");
    for s in [hdb, ha, "Kq7Zp3Wn9", "Jm5Yc8Lb"] {
        assert!(!said.contains(s), "{s} printed: {said}");
    }
}

/// `RUST_LOG=trace` is safe for a URL's query too: ureq's own debug records show the path
/// and query as `/******` (its trace level, which prints them, stays off whatever
/// `RUST_LOG` says).
#[test]
fn rust_log_trace_never_prints_a_url_token() {
    let token = "dtPw93kLx7Qe2Rz5Mv";
    let f = Fleet::with_config(&format!(
        "{FAST_CONFIG}[demand]\nsource = \"http\"\ntimeout_secs = 2\nhttp_url = \"http://127.0.0.1:9/demand?token={token}\"\n"
    ));
    f.cmd(&["init"]).ok();
    let o = f
        .command(&["poll"])
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.contains("ureq::run"), "ureq logged at debug: {said}");
    assert!(said.contains("127.0.0.1:9/******"), "{said}");
    assert!(!said.contains(token), "{said}");
}

/// A registry login saved as UTF-16 cannot be read and refuses every launch: `doctor` names
/// it as a problem (exit 1), never its value, not as a note.
#[test]
fn doctor_names_an_unreadable_registry_login_as_a_problem() {
    let creds = tempfile::tempdir().unwrap();
    let utf16: Vec<u8> = "-u bob -p imTf63uV0aGh8qMnGh ghcr.io"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    std::fs::write(
        creds.path().join("vast_image_login"),
        [&[0xff, 0xfe][..], &utf16].concat(),
    )
    .unwrap();
    let f = Fleet::with_config(FAST_CONFIG)
        .env("CREDENTIALS_DIRECTORY", creds.path().to_str().unwrap());
    f.cmd(&["init"]).ok();
    let o = f.cmd(&["doctor"]).code(1);
    assert!(
        o.stdout
            .contains("registry login (vast_image_login): cannot read credential")
            && o.stdout.contains("every launch is refused"),
        "{}",
        o.stdout
    );
    assert!(!o.stderr.contains("note: vast_image_login"), "{}", o.stderr);
}

/// A gateway key in `llm.base_url`'s query: the config error that refuses the URL shows it
/// with the query value as `***`, in every command's stderr.
#[test]
fn a_config_error_never_prints_a_urls_query_value() {
    let f = Fleet::with_config(
        "[llm]\nbase_url = \"https://gw.example.com/openai/v1?key=gwKp29fHs7Lq4Xc8Zt\"\n",
    );
    for cmd in ["run", "doctor", "inspect"] {
        let o = f.cmd(&[cmd]).code(2);
        assert!(
            o.stderr.contains("openai/v1?key=***"),
            "{cmd}: {}",
            o.stderr
        );
        assert!(!o.stderr.contains("gwKp29fHs7"), "{cmd}: {}", o.stderr);
    }
}

/// An LLM key credential with a comment on a second line: every call fails before it is sent,
/// with one line naming the key's sources (never the key), and doctor's `llm` check says it.
#[test]
fn a_two_line_llm_key_is_named_not_sent() {
    let key = "sk-Hb52nJ9sKd3vYeCd";
    let mut rig = Rig::new("max_dph_total = 10.0\nmax_instances = 4", "");
    let creds = rig.f.path().join("creds");
    std::fs::create_dir(&creds).unwrap();
    std::fs::write(
        creds.join("llm_api_key"),
        format!("{key}\n# rotated 2026-12-01\n"),
    )
    .unwrap();
    rig.f = std::mem::replace(&mut rig.f, Fleet::with_config(""))
        .env("FLEETAGENT_LLM_API_KEY", "")
        .env("CREDENTIALS_DIRECTORY", creds.to_str().unwrap());
    rig.demand(
        json!({"pending": 0, "running": 0, "completed_1h": 0, "completed_15m": 0, "workers": []}),
    );
    rig.f.cmd(&["trigger", "-p", "0", "-r", "go"]).ok();
    let run = rig.f.cmd(&["run"]);
    assert!(
        run.stderr
            .contains("the LLM API key holds spaces, line breaks")
            && run.stderr.contains("llm_api_key credential"),
        "{}",
        run.stderr
    );
    assert_eq!(rig.llm.requests().len(), 0, "nothing sent");
    let doctor = rig.f.cmd(&["doctor"]);
    assert!(
        doctor.stdout.contains("the LLM API key holds spaces")
            && doctor.stdout.contains("no comment, no second line"),
        "{}",
        doctor.stdout
    );
    assert!(!format!("{}{}{}", run.stderr, doctor.stdout, doctor.stderr).contains("Hb52nJ9sKd"));
}
