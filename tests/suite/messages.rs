//! Messages that point the operator the right way (issue 22, item 8), through the real
//! binary: a config error named first (and no wait at a terminal), a read-only file system
//! named and still readable by `inspect`, `history` and `doctor`, a full disk named with its
//! free space, operator hints that name commands, and `history --run N` of a run that does
//! not exist.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::fake_vast::{FakeVast, FAKE_API_KEY};
use crate::common::fleet::{clean_env, Fleet, Run, BIN, FAST_CONFIG};

/// Without a terminal, as under systemd: the error (one `fleetagent:` line saying `first`),
/// then why it waits (`why`), and it waits, so that systemd cannot restart it in a loop.
fn waits_after_the_error(f: &Fleet, state_dir: Option<&std::path::Path>, first: &str, why: &str) {
    let mut c = Command::new(BIN);
    c.arg("--config").arg(&f.config).arg("run");
    if let Some(dir) = state_dir {
        c.arg("--state-dir").arg(dir);
    }
    clean_env(&mut c);
    waits(c, first, why)
}

fn waits(mut c: Command, first: &str, why: &str) {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let waiting = line.contains("waiting 30s before exiting");
        seen.push(line);
        if waiting {
            break;
        }
    }
    let errors: Vec<&String> = seen
        .iter()
        .filter(|l| l.starts_with("fleetagent: "))
        .collect();
    assert!(errors.len() == 1 && errors[0].contains(first), "{seen:#?}");
    let last = seen.last().unwrap();
    assert!(
        last.contains(&format!("waiting 30s before exiting: {why}")),
        "{seen:#?}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "it waits before exiting"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_config_error_is_named_first_and_waits_only_without_a_terminal() {
    let f = Fleet::with_config("[run]\nnope = 1\n");
    // Neither --state-dir nor $STATE_DIRECTORY (clean_env): the state dir is unknown.
    waits_after_the_error(&f, None, "unknown field `nope`", "the state dir is unknown");
    // The state dir known but its doorbell impossible to delete (here a directory in its
    // place; under systemd also a dir the service's user cannot write, or a read-only file
    // system): it waits as well, or systemd would restart it at once until the path unit's
    // trigger limit failed it.
    let state = f.path().join("state");
    std::fs::create_dir_all(state.join("trigger")).unwrap();
    waits_after_the_error(
        &f,
        Some(&state),
        "unknown field `nope`",
        "its doorbell could not be deleted",
    );
    // The state dir named by the refused config itself (`state_dir`, read with the refused
    // key left out): the doorbell is deleted and the run exits at once (it waited 30 s).
    let named = f.path().join("named");
    std::fs::create_dir_all(&named).unwrap();
    std::fs::write(named.join("trigger"), "ring\n").unwrap();
    std::fs::write(
        &f.config,
        format!(
            "state_dir = {:?}\n[run]\nnope = 1\n",
            named.display().to_string()
        ),
    )
    .unwrap();
    let mut c = Command::new(BIN);
    c.arg("--config").arg(&f.config).arg("run");
    clean_env(&mut c);
    let t = Instant::now();
    let out = Run::from(c.stdin(Stdio::null()).output().unwrap()).code(2);
    assert!(t.elapsed() < Duration::from_secs(15), "{out:?}");
    assert!(out.stderr.contains("unknown field `nope`"), "{out:?}");
    assert!(!named.join("trigger").exists(), "{out:?}");
    // A config that cannot be read at all names no state dir; $STATE_DIRECTORY is then a
    // guess (the config may name another dir): a doorbell there goes at once, none found
    // means the real one may be elsewhere, and the run waits (it exited at once, and systemd
    // restarted it at full speed while the other dir's doorbell stood).
    std::fs::write(
        &f.config,
        format!("state_dir = {:?}\n[run\n", named.display().to_string()),
    )
    .unwrap();
    let guessed = f.path().join("guessed");
    std::fs::create_dir_all(&guessed).unwrap();
    let under_systemd = || {
        let mut c = Command::new(BIN);
        c.arg("--config").arg(&f.config).arg("run");
        clean_env(&mut c);
        c.env("STATE_DIRECTORY", &guessed);
        c
    };
    waits(under_systemd(), "unclosed table", "$STATE_DIRECTORY (");
    std::fs::write(guessed.join("trigger"), "ring\n").unwrap();
    let t = Instant::now();
    let out = Run::from(under_systemd().stdin(Stdio::null()).output().unwrap()).code(2);
    assert!(t.elapsed() < Duration::from_secs(15), "{out:?}");
    assert!(!guessed.join("trigger").exists(), "{out:?}");
    // A config refused for a key but read (it names no state dir): $STATE_DIRECTORY is
    // certain, not a guess, and no doorbell there means none waits: at once (the re-test saw
    // it wait 30 s).
    std::fs::write(&f.config, "[run]\nnope = 1\n").unwrap();
    let t = Instant::now();
    let out = Run::from(under_systemd().stdin(Stdio::null()).output().unwrap()).code(2);
    assert!(t.elapsed() < Duration::from_secs(15), "{out:?}");
    assert!(!out.stderr.contains("waiting"), "{out:?}");
    // With a good config, the run fails to claim (it deletes the doorbell in the claim's
    // transaction): the same wait.
    let good = Fleet::new();
    good.cmd(&["trigger", "-p", "1", "-r", "x"]).ok();
    std::fs::remove_file(good.doorbell()).unwrap();
    std::fs::create_dir(good.doorbell()).unwrap();
    waits_after_the_error(
        &good,
        Some(&good.state),
        "doorbell",
        "its doorbell could not be deleted",
    );

    // At a terminal (script(1) gives the command a pty): the error alone, at once, exit 2.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIP the terminal half: script(1) (util-linux) is not installed");
        return;
    }
    let line = format!("{BIN} --config '{}' run", f.config.display());
    let mut c = Command::new("script");
    c.args(["-qec", &line, "/dev/null"]);
    clean_env(&mut c);
    let t = Instant::now();
    let out = Run::from(c.stdin(Stdio::null()).output().unwrap()).code(2);
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "no wait at a terminal"
    );
    assert!(out.stdout.contains("unknown field `nope`"), "{out:?}");
    assert!(!out.stdout.contains("waiting"), "{out:?}");
}

#[test]
fn history_of_a_missing_run_is_an_error_and_operator_hints_name_commands() {
    let fake = FakeVast::start_real_time();
    let other = fake.add_instance("not-ours");
    let f = Fleet::new().env("VAST_API_KEY", FAKE_API_KEY);
    f.write_config(&format!(
        "{FAST_CONFIG}\n[vast]\nbase_url = \"{}\"\n[demand]\nsource = \"command\"\ncommand = \"echo '{{\\\"pending\\\":0,\\\"running\\\":0,\\\"completed_1h\\\":0,\\\"completed_15m\\\":0}}'\"\n",
        fake.url()
    ));
    let r = f.cmd(&["history", "--run", "999"]).code(1);
    assert_eq!(
        r.stderr.trim(),
        "fleetagent: run 999 does not exist: no run has been recorded yet"
    );
    f.cmd(&["run"]).ok();
    for args in [
        &["history", "--run", "999"][..],
        &["history", "--run", "999", "--json"],
    ] {
        let r = f.cmd(args).code(1);
        assert_eq!(
            r.stderr.trim(),
            "fleetagent: run 999 does not exist: the highest run id is 1 (`fleetagent inspect` lists the recent runs)"
        );
        assert_eq!(r.stdout, "");
    }
    let r = f.cmd(&["history", "--run", "1"]).ok();
    assert!(r.stdout.starts_with("--- run 1 "), "{}", r.stdout);

    // The operator reads commands, never the model's tools.
    let tools = [
        "list_instances",
        "stop_instance",
        "launch_instance",
        "search_offers",
    ];
    let r = f.cmd(&["instances", "stop", "12345"]).code(1);
    assert!(
        r.stderr
            .contains("(`fleetagent instances list` shows ours)"),
        "{}",
        r.stderr
    );
    let r2 = f.cmd(&["instances", "stop", &other.to_string()]).code(1);
    assert!(
        r2.stderr.contains(&format!(
            "only the operator can stop it, with `fleetagent instances stop {other} --force`"
        )),
        "{}",
        r2.stderr
    );
    for line in [&r.stderr, &r2.stderr] {
        assert!(!tools.iter().any(|t| line.contains(t)), "{line}");
        assert_eq!(line.trim().lines().count(), 1, "{line}");
    }
}

/// Runs `script` with `sh` in a private mount namespace (`unshare -m`), so mounts made there
/// (a read-only bind, a tiny tmpfs) vanish with it; `$B` is the binary and `$OUT` a dir for
/// what each command wrote ([`fa`], [`result`]). False, with the reason on stderr, where no
/// such namespace can be made (not root, no unshare): the caller skips.
fn in_private_mounts(f: &Fleet, script: &str) -> bool {
    let probe = Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            eprintln!(
                "SKIP: no private mount namespace (needs root): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return false;
        }
        Err(e) => {
            eprintln!("SKIP: unshare(1) not available: {e}");
            return false;
        }
    }
    let out = f.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let mut c = Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-euc", script]);
    clean_env(&mut c);
    // A `run` that cannot delete its doorbell (a read-only dir) waits 30 s before it exits, so
    // that systemd does not spin; the tests read what it printed, not the wait.
    c.env("FLEETAGENT_TEST_EXIT_DELAY_MS", "0");
    let o = c.env("B", BIN).env("OUT", &out).output().unwrap();
    assert!(
        o.status.success(),
        "the namespace script failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    true
}

/// One fleetagent command in an [`in_private_mounts`] script, its output kept as `name`.
fn fa(f: &Fleet, name: &str, args: &str) -> String {
    format!(
        "\"$B\" --config '{}' --state-dir '{}' {args} >\"$OUT/{name}.out\" 2>\"$OUT/{name}.err\" </dev/null && echo 0 >\"$OUT/{name}.rc\" || echo $? >\"$OUT/{name}.rc\"\n",
        f.config.display(),
        f.state.display()
    )
}

fn result(f: &Fleet, name: &str) -> Run {
    let read = |ext: &str| {
        std::fs::read_to_string(f.path().join("out").join(format!("{name}.{ext}"))).unwrap()
    };
    Run {
        code: read("rc").trim().parse().unwrap(),
        stdout: read("out"),
        stderr: read("err"),
    }
}

#[test]
fn a_read_only_state_dir_is_named_and_still_read() {
    let f = Fleet::new();
    f.cmd(&["run"]).ok();
    // Committed after the run's checkpoint, so it is in the WAL only.
    f.cmd(&["message", "still in the WAL"]).ok();
    assert!(
        std::fs::metadata(f.state.join("fleetagent.db-wal"))
            .unwrap()
            .len()
            > 0
    );
    let s = f.state.display();
    let mut script = format!("mount --bind '{s}' '{s}'\nmount -o remount,bind,ro '{s}'\n");
    for (name, args) in [
        ("inspect", "inspect --json"),
        ("history", "history"),
        ("missing", "history --run 999"),
        ("doctor", "doctor"),
        ("instances", "instances list --offline --json"),
        ("wakes", "wakes list --all --json"),
        ("trigger", "trigger -p 0 -r x"),
        ("run", "run"),
    ] {
        script.push_str(&fa(&f, name, args));
    }
    if !in_private_mounts(&f, &script) {
        return;
    }
    let named = "is on a read-only file system (the kernel remounts one read-only after a disk error: see `journalctl -k`)";
    let inspect = result(&f, "inspect").ok().json();
    assert_eq!(
        inspect["unconsumed_events"], 1,
        "the message still in the WAL is seen"
    );
    let history = result(&f, "history").ok();
    assert!(history.stdout.contains("--- run 1 "), "{}", history.stdout);
    let listed = result(&f, "instances").ok().json();
    assert!(listed["install_id"].is_string(), "{listed}");
    assert!(listed["instances"].is_array(), "{listed}");
    let wakes = result(&f, "wakes").ok().json();
    assert!(wakes.is_array(), "{wakes}");
    let missing = result(&f, "missing").code(1);
    assert!(
        missing.stderr.contains("the highest run id is 1"),
        "{missing:?}"
    );
    // doctor: the read-only file system is a problem, and the database's checks still ran
    // (the price is read from it).
    let doctor = result(&f, "doctor").code(1);
    let first = doctor.stdout.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("state dir {s} {named}")),
        "{first}"
    );
    assert!(
        doctor.stdout.contains("\nprice unknown: "),
        "{}",
        doctor.stdout
    );
    assert!(!doctor.stdout.contains("database:"), "{}", doctor.stdout);
    assert!(
        !doctor.stdout.contains("not writable by uid"),
        "{}",
        doctor.stdout
    );
    for name in ["trigger", "run"] {
        let r = result(&f, name).code(1);
        assert!(r.stderr.contains(named), "{name}: {}", r.stderr);
        assert!(!r.stderr.contains("owner/group"), "{name}: {}", r.stderr);
    }
    // Nothing was written meanwhile: the message waits for the next pass.
    assert_eq!(f.inspect()["unconsumed_events"], 1);
}

#[test]
fn a_full_disk_is_named_with_the_free_space() {
    let f = Fleet::with_config(FAST_CONFIG);
    let s = f.state.display();
    // The state dir on a 1 MiB tmpfs. After a run the WAL is empty (checkpointed), so the
    // side files can go: the next opening must make a -shm, which a full disk refuses
    // (SQLITE_IOERR_SHMSIZE, 4874). Once an `inspect` has made it, a write fails instead
    // (SQLITE_FULL, 13).
    let fill_up = format!("dd if=/dev/zero of='{s}/fill' bs=64k 2>/dev/null || true\n");
    let mut script = format!("mkdir -p '{s}'\nmount -t tmpfs -o size=1m,mode=2770 tmpfs '{s}'\n");
    script.push_str(&fa(&f, "init", "init"));
    script.push_str(&fa(&f, "run", "run"));
    script.push_str(&format!(
        "test ! -s '{s}/fleetagent.db-wal'\nrm '{s}/fleetagent.db-wal' '{s}/fleetagent.db-shm'\n"
    ));
    script.push_str(&fill_up);
    script.push_str(&fa(&f, "shm", "trigger -p 0 -r x"));
    script.push_str(&format!("rm '{s}/fill'\n"));
    script.push_str(&fa(&f, "inspect", "inspect --json"));
    script.push_str(&fill_up);
    script.push_str(&fa(&f, "full", "trigger -p 0 -r x"));
    if !in_private_mounts(&f, &script) {
        return;
    }
    for name in ["init", "run", "inspect"] {
        result(&f, name).ok();
    }
    let named = format!("fleetagent: no space left on device ({s}: ");
    let shm = result(&f, "shm").code(1);
    assert!(shm.stderr.starts_with(&named), "{}", shm.stderr);
    assert!(
        shm.stderr
            .trim_end()
            .ends_with("disk I/O error (SQLite code 4874)"),
        "{}",
        shm.stderr
    );
    let full = result(&f, "full").code(1);
    assert!(full.stderr.starts_with(&named), "{}", full.stderr);
    assert!(
        full.stderr
            .contains("database or disk is full (SQLite code 13)"),
        "{}",
        full.stderr
    );
    for r in [&shm, &full] {
        assert!(
            r.stderr
                .contains(" bytes free; nothing can be recorded until some is freed"),
            "{}",
            r.stderr
        );
        assert!(!r.stderr.contains("Error code"), "{}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    }
}

#[test]
fn a_locked_database_is_named_with_its_file() {
    // Another program holds a write transaction on fleetagent.db past the busy timeout
    // (shortened from 30 s by the test switch).
    let f = Fleet::new().env("FLEETAGENT_TEST_BUSY_TIMEOUT_MS", "300");
    let holder = f.db();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let db = f.state.join("fleetagent.db");
    let named = format!(
        "fleetagent: database {} was locked by another process past the busy timeout (0.3s): \
         most likely another program holding a long write transaction on it (`fuser -v {}` \
         lists the processes that have it open); ",
        db.display(),
        db.display()
    );
    let started = Instant::now();
    let trigger = f.cmd(&["trigger", "-p", "0", "-r", "locked"]).code(1);
    let run = f.cmd(&["run"]).code(1);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    for out in [&trigger, &run] {
        assert!(out.stderr.starts_with(&named), "{}", out.stderr);
        assert!(
            out.stderr.contains("runs wait for each other on run.lock"),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr
                .trim_end()
                .ends_with("database is locked (SQLite code 5)"),
            "{}",
            out.stderr
        );
    }
    assert!(
        trigger
            .stderr
            .contains("cannot record the event: database is locked"),
        "{}",
        trigger.stderr
    );
    holder.execute_batch("ROLLBACK").unwrap();
    f.cmd(&["trigger", "-p", "0", "-r", "locked"]).ok();
}

/// Outside text (a trigger's reason, an operator message, a wake's reason) never reaches the
/// terminal as control characters: an escape sequence in it is printed escaped by every
/// command that shows it.
#[test]
fn outside_text_cannot_drive_the_terminal() {
    let f = Fleet::new();
    let evil = "hi\u{1b}]0;pwned\u{7} \u{1b}[2J";
    f.cmd(&["message", evil]).ok();
    let added = f
        .cmd(&["wakes", "add", "--in", "5m", "--reason", evil])
        .ok();
    let listed = f.cmd(&["wakes", "list"]).ok();
    f.cmd(&["run"]).ok();
    let history = f.cmd(&["history", "--all"]).ok();
    let inspect = f.cmd(&["inspect"]).ok();
    for (what, out) in [
        ("wakes add", &added.stdout),
        ("wakes list", &listed.stdout),
        ("history", &history.stdout),
        ("inspect", &inspect.stdout),
    ] {
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{7}'),
            "{what}: {out:?}"
        );
    }
    assert!(
        added.stdout.contains("hi\\u{1b}]0;pwned"),
        "{}",
        added.stdout
    );
}

/// DEL and the C1 controls (U+009B opens an escape sequence on xterm) too, which JSON leaves
/// raw: a walkthrough saw them written `\u{9b}` inside `inspect --json` and `doctor --json`,
/// which no longer parsed, and raw in the log lines of a `run` at a terminal.
#[test]
fn c1_controls_leave_json_valid_and_the_terminal_alone() {
    let f = Fleet::new();
    let evil = "x\u{9b}2J\u{7f}\u{202e}y";
    f.cmd(&["init"]).ok();
    f.cmd(&["pause", "--reason", evil]).ok();
    for args in [&["inspect", "--json"][..], &["doctor", "--json"]] {
        let out = f.command(args).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            !text.contains('\u{9b}') && !text.contains('\u{7f}'),
            "{args:?}"
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        if args[0] == "inspect" {
            assert!(text.contains("x\\u009b2J\\u007f\\u202ey"), "{text}");
            assert_eq!(v["paused"]["reason"], evil, "the value whole");
        }
    }
    f.cmd(&["resume"]).ok();
    let script = f.path().join("demand.sh");
    std::fs::write(&script, format!("printf '{evil}' >&2\nexit 3\n")).unwrap();
    let cfg = format!(
        "{}\n[demand]\nsource = \"command\"\ncommand = \"sh {}\"\n",
        crate::common::fleet::FAST_CONFIG,
        script.display()
    );
    f.write_config(&cfg);
    let run = f
        .command(&["run"])
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("x\\u009b2J"), "{stderr}");
    assert!(
        !stderr.contains('\u{9b}') && !stderr.contains('\u{202e}'),
        "{stderr:?}"
    );
}

/// A trigger's reason is whatever the calling program passed (100 KB here): `inspect` and
/// `wakes list` show it cut to one short line, `inspect --json` whole.
#[test]
fn a_huge_reason_is_shown_cut_and_kept_whole() {
    let f = Fleet::new();
    let huge = format!("disk full\n{}", "x".repeat(100_000));
    f.cmd(&["trigger", "-p", "2", "-r", &huge]).ok();
    f.cmd(&["wakes", "add", "--in", "5m", "--reason", &huge])
        .ok();
    let text = f.cmd(&["inspect"]).ok().stdout;
    let longest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(longest < 400, "a line of {longest} characters");
    assert!(text.contains("\"disk full xxx"), "{text}");
    let wakes = f.cmd(&["wakes", "list"]).ok().stdout;
    let longest = wakes.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(longest < 400, "wakes list: a line of {longest} characters");
    let json: serde_json::Value =
        serde_json::from_str(&f.cmd(&["inspect", "--json"]).ok().stdout).unwrap();
    let kept = json["waiting_events"][0]["reason"].as_str().unwrap_or("");
    assert_eq!(kept.len(), huge.len());
    assert_eq!(
        json["wakes"][0]["reason"].as_str().map(str::len),
        Some(huge.len())
    );
}

/// With the rules deciding, an operator message gets no answer, and inspect says why rather
/// than "(no answer yet)" for ever.
#[test]
fn a_message_to_the_rules_is_shown_as_never_answered() {
    let f = Fleet::new(); // FAST_CONFIG: llm.provider = "rules"
    f.cmd(&["message", "keep two running"]).ok();
    f.cmd(&["run"]).ok();
    let text = f.cmd(&["inspect"]).ok().stdout;
    let line = text
        .lines()
        .find(|l| l.starts_with("operator "))
        .unwrap_or_else(|| panic!("no operator line:\n{text}"));
    assert!(
        line.contains("keep two running\"")
            && line.contains("the rules do not answer messages")
            && !line.contains("no answer yet"),
        "{line}"
    );
}

/// Outside text with line breaks and a direction override (a label vast.ai lists, reasons
/// other programs pass) stays on its line: no forged row in `inspect`'s fleet, no forged line
/// after `pause` or `wakes add`, nothing reordered on the terminal.
#[test]
fn outside_text_stays_on_its_line() {
    let vast = FakeVast::start_real_time();
    let f = Fleet::with_config("").env("VAST_API_KEY", FAKE_API_KEY);
    f.write_config(&format!(
        "{FAST_CONFIG}[vast]\nbase_url = \"{}\"\n[demand]\nsource = \"command\"\ncommand = \"echo '{{\\\"pending\\\": 0, \\\"running\\\": 0, \\\"completed_1h\\\": 0, \\\"completed_15m\\\": 0, \\\"workers\\\": []}}'\"\n",
        vast.url()
    ));
    let evil =
        "fleetagent-x\nfleetagent-forged id=1 proving (vast running) RTX 4090 $0.100/h\u{202e}";
    vast.add_instance(evil);
    f.cmd(&["init"]).ok();
    f.cmd(&["run"]).ok();
    let inspect = f.cmd(&["inspect"]).ok().stdout;
    assert!(
        !inspect.lines().any(|l| l.starts_with("fleetagent-forged")),
        "{inspect}"
    );
    assert!(!inspect.contains('\u{202e}'), "{inspect}");
    assert!(
        inspect.contains("\"fleetagent-x fleetagent-forged"),
        "{inspect}"
    );
    let reason = "maintenance\n<0>fleetagent_paused 0";
    let paused = f.cmd(&["pause", "--for", "1h", "--reason", reason]).ok();
    let waked = f
        .cmd(&["wakes", "add", "--in", "5m", "--reason", reason])
        .ok();
    let empty = f.cmd(&["message", "\u{1b}\u{7}\u{202e}\u{200b}"]).code(2);
    assert!(
        empty
            .stderr
            .contains("the message has no visible character"),
        "{}",
        empty.stderr
    );
    for out in [&paused.stdout, &waked.stdout] {
        assert!(!out.lines().any(|l| l.starts_with("<0>")), "{out}");
    }
}

/// `trigger` with a config key its checks refuse records the event and rings all the same,
/// then exits 2 naming the key (its callers are other programs, which do not retry a usage
/// error); every run refuses the config meanwhile. A long reason is kept whole in the event
/// and clipped in the doorbell's line, which is for a human.
#[test]
fn a_refused_config_key_keeps_the_event() {
    let f = Fleet::new();
    f.cmd(&["init"]).ok();
    f.write_config("[run]\nmax_passes = 2\nbogus_key = 1\n");
    let out = f.cmd(&["trigger", "-p", "1", "-r", "x"]).code(2);
    assert!(
        out.stderr.contains("line 3")
            && out.stderr.contains("bogus_key")
            && out
                .stderr
                .contains("event 1 was recorded and the doorbell rung all the same"),
        "{}",
        out.stderr
    );
    assert_eq!(f.count("SELECT COUNT(*) FROM events"), 1);
    assert!(f.doorbell().exists());
    f.cmd(&["run"]).code(2);
    // A line TOML cannot read is left out the same way (it dropped the event).
    f.write_config("[run]\nmax_passes = 2 2\n");
    let out = f.cmd(&["trigger", "-p", "1", "-r", "x"]).code(2);
    assert!(
        out.stderr.contains("line 2 (run.max_passes)")
            && out
                .stderr
                .contains("was recorded and the doorbell rung all the same"),
        "{}",
        out.stderr
    );
    assert_eq!(f.count("SELECT COUNT(*) FROM events"), 2);
    // A misspelled state_dir or a broken table header is never left out, and a missing or
    // world-writable config is not read at all; the event goes where the state dir is known
    // without the config (`--state-dir` here, as `$STATE_DIRECTORY` under systemd), and only
    // there (the walkthrough saw each of them lost).
    let cases: [(&str, Option<u32>, &str); 4] = [
        ("state_dirx = \"/nowhere\"\n", None, "state_dirx"),
        ("[run\nmax_passes = 2\n", None, "line 1"),
        (FAST_CONFIG, Some(0o666), "world-writable"),
        ("", None, "cannot read config"),
    ];
    for (i, (text, mode, said)) in cases.into_iter().enumerate() {
        f.write_config(text);
        if let Some(mode) = mode {
            std::fs::set_permissions(&f.config, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        if text.is_empty() {
            std::fs::remove_file(&f.config).unwrap();
        }
        let out = f.cmd(&["trigger", "-p", "0", "-r", "node died"]).code(2);
        assert!(
            out.stderr.contains(said) && out.stderr.contains("all the same"),
            "{}",
            out.stderr
        );
        // Whether [ha] is on is unknown: the outbox, which the next run takes.
        assert_eq!(f.count("SELECT COUNT(*) FROM outbox"), 1 + i as i64);
    }
    f.write_config(FAST_CONFIG);
    assert_eq!(f.count("SELECT COUNT(*) FROM events"), 2);
    // A pass's observation 40 days old, the pass in no prompt: with run.retention_days =
    // 30 the run prunes it, and the old claimed events with it (0, the default, keeps all).
    f.write_config(&FAST_CONFIG.replace("[run]\n", "[run]\nretention_days = 30\n"));
    assert!(std::fs::read_to_string(&f.config)
        .unwrap()
        .contains("retention_days"));
    let db = f.db();
    db.execute_batch(
        "INSERT INTO runs (session_id, pid, pass, started_by, status, started_at)
           SELECT session_id, 1, 1, 'tick', 'ok', 0 FROM agent_state;
         INSERT INTO messages (session_id, run_id, role, kind, content, tokens, created_at)
           SELECT session_id, last_insert_rowid(), 'user', 'observation', 'old', 1, 0 FROM agent_state;
         UPDATE events SET created_at = 0, claimed_by = (SELECT MAX(id) FROM runs)
           WHERE reason = 'x';",
    )
    .unwrap();
    f.cmd(&["run"]).ok();
    assert_eq!(
        f.count("SELECT COUNT(*) FROM messages WHERE content = 'old'"),
        0
    );
    assert_eq!(f.count("SELECT COUNT(*) FROM events WHERE reason = 'x'"), 0);
    let old = f
        .count("SELECT id FROM runs WHERE started_at = 0")
        .to_string();
    let out = f.cmd(&["history", "--run", &old]).ok();
    assert!(out.stdout.contains("or they were pruned"), "{}", out.stdout);
    assert_eq!(
        f.count(
            "SELECT COUNT(*) FROM events WHERE reason = 'node died' AND claimed_by IS NOT NULL"
        ),
        4
    );
    assert_eq!(
        f.count("SELECT COUNT(*) FROM outbox WHERE forwarded_at IS NULL"),
        0
    );
    let long = "x".repeat(100_000);
    f.cmd(&["trigger", "-p", "1", "-r", &long]).ok();
    assert!(std::fs::metadata(f.doorbell()).unwrap().len() < 2_000);
    assert_eq!(f.count("SELECT MAX(length(reason)) FROM events"), 100_000);
}
