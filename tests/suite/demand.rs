//! The demand probes against real things: `harmonydb` against a throwaway PostgreSQL
//! holding Curio's tables (rows timed relative to the database's `now()`), `http` against a
//! tiny_http server on 127.0.0.1, `command` against real `sh` commands.

use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use fleetagent::demand::{
    CommandProbe, Demand, DemandProbe, HarmonyDbProbe, HttpProbe, RequestLoop, Worker,
};

use crate::common::pg::{self, TestDb};

const TIMEOUT: Duration = Duration::from_secs(10);
const ALIVE_SECS: u64 = 150;

const WAITING_MAX_AGE_MINS: u64 = 60;

fn harmony(db: &TestDb) -> HarmonyDbProbe {
    HarmonyDbProbe::new(
        db.url(),
        "PSProve".into(),
        ALIVE_SECS,
        WAITING_MAX_AGE_MINS,
        TIMEOUT,
    )
}

fn worker(name: &str, host: &str, running: u32, cordoned: bool) -> Worker {
    Worker {
        machine_name: name.into(),
        host_and_port: host.into(),
        running,
        cordoned,
    }
}

/// A Curio machine that last sent a heartbeat `ago_secs` before the database's now(), with
/// the resources Curio registers (NOT NULL in its schema).
pub(crate) fn machine(
    db: &mut TestDb,
    id: i32,
    name: &str,
    ago_secs: u32,
    tasks: &str,
    cordoned: &str,
) {
    db.exec(&format!(
        "INSERT INTO curio.harmony_machines
           (id, host_and_port, last_contact, unschedulable, cpu, ram, gpu)
           VALUES ({id}, '10.0.0.{id}:12300', now() - interval '{ago_secs} seconds', {cordoned},
                   32, 137438953472, 1);
         INSERT INTO curio.harmony_machine_details (machine_id, machine_name, tasks)
           VALUES ({id}, '{name}', '{tasks}');"
    ));
}

/// `n` tasks named `name`, owned by `owner` (or pending with `NULL`), as Curio's adders
/// write them. A PSProve task gets its `proofshare_queue` row pointing at it, as the PSProve
/// adder writes both (see [`orphan_tasks`] for tasks without one).
pub(crate) fn tasks(db: &mut TestDb, n: u32, name: &str, owner: &str) {
    db.exec(&format!(
        "WITH t AS (
           INSERT INTO curio.harmony_task (name, owner_id, posted_time, update_time, added_by)
             SELECT '{name}', {owner}, now() - interval '3 minutes', now(), 1
             FROM generate_series(1, {n})
             RETURNING id, name)
         INSERT INTO curio.proofshare_queue (service_id, obtained_at, request_cid, compute_task_id)
           SELECT id, now() - interval '4 minutes', 'bafy-task-' || id, id
           FROM t WHERE name = 'PSProve';"
    ));
}

/// `n` PSProve tasks with no queue row pointing at them, posted `ago_mins` ago.
pub(crate) fn orphan_tasks(db: &mut TestDb, n: u32, owner: &str, ago_mins: u32) {
    db.exec(&format!(
        "INSERT INTO curio.harmony_task (name, owner_id, posted_time, update_time, added_by)
           SELECT 'PSProve', {owner}, now() - interval '{ago_mins} minutes', now(), 1
           FROM generate_series(1, {n});"
    ));
}

/// `proofshare_meta.enabled`, as the web UI sets it (Curio's migration inserts it false).
pub(crate) fn proofshare_enabled(db: &mut TestDb, on: bool) {
    db.exec(&format!(
        "UPDATE curio.proofshare_meta SET enabled = {on} WHERE singleton"
    ));
}

const PSPROVE_NODE: &str = "PSAutoSettle,PShareSubmit,PSProve,bg:PShareRequest";

#[test]
fn harmonydb_live_workers_proving() {
    let mut db = pg::fresh_db();
    machine(&mut db, 1, "vast-a", 20, PSPROVE_NODE, "false");
    machine(&mut db, 2, "vast-b", 70, "PSProve", "false");
    // The task list starts with / ends with PSProve: no surrounding commas.
    machine(&mut db, 3, "vast-c", 5, "PSProve,PShareSubmit", "false");
    machine(&mut db, 4, "vast-d", 100, "PShareSubmit,PSProve", "false");
    // Live, but cannot run PSProve: a sealer, and names that only look alike.
    machine(&mut db, 5, "sealer", 10, "PoRep,WdPost,TreeRC", "false");
    machine(
        &mut db,
        6,
        "lookalike",
        10,
        "PSProveOld,xPSProve,PSProve2",
        "false",
    );
    tasks(&mut db, 2, "PSProve", "1");
    tasks(&mut db, 1, "PSProve", "2");
    tasks(&mut db, 3, "PSProve", "NULL");
    tasks(&mut db, 1, "PoRep", "5");
    tasks(&mut db, 4, "PoRep", "NULL");

    let d = harmony(&db).probe().unwrap();
    assert_eq!((d.pending, d.running, d.running_stale), (3, 3, 0));
    assert_eq!(
        d.workers,
        vec![
            worker("vast-a", "10.0.0.1:12300", 2, false),
            worker("vast-b", "10.0.0.2:12300", 1, false),
            worker("vast-c", "10.0.0.3:12300", 0, false),
            worker("vast-d", "10.0.0.4:12300", 0, false),
        ]
    );
    assert_eq!((d.live_workers(), d.idle_workers()), (4, 2));
    assert!(!d.workers_dead());
    // The live machines without PSProve are read apart (an instance of ours among them runs
    // an image without the ProofShare layer: `fleet::identity::taskless_ours`).
    assert_eq!(
        d.taskless,
        vec![
            worker("lookalike", "10.0.0.6:12300", 0, false),
            worker("sealer", "10.0.0.5:12300", 0, false),
        ]
    );
}

#[test]
fn harmonydb_task_name_comes_from_the_config() {
    let mut db = pg::fresh_db();
    machine(&mut db, 5, "sealer", 10, "PoRep,WdPost", "false");
    tasks(&mut db, 1, "PoRep", "5");
    tasks(&mut db, 4, "PoRep", "NULL");
    tasks(&mut db, 7, "PSProve", "NULL");
    let probe = HarmonyDbProbe::new(
        db.url(),
        "PoRep".into(),
        ALIVE_SECS,
        WAITING_MAX_AGE_MINS,
        TIMEOUT,
    );
    let d = probe.probe().unwrap();
    assert_eq!((d.pending, d.running), (4, 1));
    assert_eq!(
        d.workers,
        vec![worker("sealer", "10.0.0.5:12300", 1, false)]
    );
}

#[test]
fn harmonydb_stale_owners_are_not_live() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    machine(&mut db, 1, "vast-live", 30, PSPROVE_NODE, "false");
    // Stopped sending heartbeats 10 minutes ago; Curio still shows its tasks as running.
    machine(&mut db, 2, "vast-gone", 600, PSPROVE_NODE, "false");
    tasks(&mut db, 1, "PSProve", "1");
    tasks(&mut db, 2, "PSProve", "2");
    tasks(&mut db, 1, "PSProve", "NULL");

    let d = harmony(&db).probe().unwrap();
    assert_eq!((d.pending, d.running, d.running_stale), (1, 1, 2));
    assert_eq!(
        d.workers,
        vec![worker("vast-live", "10.0.0.1:12300", 1, false)]
    );
    assert!(!d.workers_dead());

    // The live one goes quiet too: nothing can take the work any more.
    db.exec("UPDATE curio.harmony_machines SET last_contact = now() - interval '400 seconds' WHERE id = 1");
    let d = harmony(&db).probe().unwrap();
    assert_eq!((d.pending, d.running, d.running_stale), (1, 0, 3));
    assert!(d.workers.is_empty());
    assert!(d.workers_dead());
}

#[test]
fn harmonydb_dead_fleet_with_queued_work_is_workers_dead() {
    // The incident: 59 proofs queued, every GPU worker gone (their machine rows cleaned up,
    // so their tasks went back to pending), only a sealer still alive.
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    machine(&mut db, 5, "sealer", 15, "PoRep,WdPost", "false");
    tasks(&mut db, 58, "PSProve", "NULL");
    // One task whose queue row is gone, and one queue row still without a task.
    orphan_tasks(&mut db, 1, "NULL", 40);
    db.exec(
        "INSERT INTO curio.proofshare_queue (service_id, obtained_at, request_cid)
           VALUES (1000, now() - interval '40 minutes', 'bafy-waiting');",
    );

    let d = harmony(&db).probe().unwrap();
    assert_eq!((d.pending, d.running, d.running_stale), (59, 0, 0));
    assert_eq!((d.ps_waiting, d.ps_computing), (Some(1), Some(58)));
    assert_eq!((d.orphan_tasks, d.backlog), (1, Some(59)));
    assert_eq!(d.queued_work(), 59);
    assert!(d.workers.is_empty());
    assert_eq!(d.live_workers(), 0);
    assert!(d.workers_dead());
}

#[test]
fn harmonydb_empty_queue() {
    let mut db = pg::fresh_db();
    let d = harmony(&db).probe().unwrap();
    // Curio's state after its migrations: ProofShare off, its price "0", no request loop.
    assert_eq!(
        d,
        Demand {
            ps_waiting: Some(0),
            ps_computing: Some(0),
            backlog: Some(0),
            proofshare_enabled: Some(false),
            request_loop: Some(RequestLoop::None),
            ask_price_attofil: Some("0".into()),
            paid_1h: Some(0),
            pow_1h: Some(0),
            ..Demand::default()
        }
    );
    assert!(!d.workers_dead());

    machine(&mut db, 1, "vast-a", 30, PSPROVE_NODE, "false");
    machine(&mut db, 2, "vast-b", 30, PSPROVE_NODE, "false");
    let d = harmony(&db).probe().unwrap();
    assert_eq!((d.pending, d.running), (0, 0));
    assert_eq!((d.live_workers(), d.idle_workers()), (2, 2));
    assert!(!d.workers_dead());
}

#[test]
fn harmonydb_cordoned_machines_are_listed_but_not_live_workers() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    machine(&mut db, 1, "vast-cordoned", 30, PSPROVE_NODE, "true");
    // unschedulable is nullable in Curio: NULL means schedulable.
    machine(&mut db, 2, "vast-null-flag", 30, PSPROVE_NODE, "NULL");
    tasks(&mut db, 1, "PSProve", "1");
    tasks(&mut db, 2, "PSProve", "NULL");

    let d = harmony(&db).probe().unwrap();
    assert_eq!((d.pending, d.running), (2, 1));
    assert_eq!(
        d.workers,
        vec![
            worker("vast-cordoned", "10.0.0.1:12300", 1, true),
            worker("vast-null-flag", "10.0.0.2:12300", 0, false),
        ]
    );
    assert_eq!((d.live_workers(), d.idle_workers()), (1, 1));
    assert!(!d.workers_dead());

    db.exec("UPDATE curio.harmony_machines SET unschedulable = true WHERE id = 2");
    let d = harmony(&db).probe().unwrap();
    assert_eq!(d.workers.len(), 2);
    assert_eq!(d.live_workers(), 0);
    assert!(
        d.workers_dead(),
        "queued work and only cordoned machines: {d:?}"
    );
}

#[test]
fn harmonydb_completions_count_successes_inside_each_window() {
    let mut db = pg::fresh_db();
    let history = |ago_mins: u32, name: &str, ok: bool, n: u32| {
        format!(
            "INSERT INTO curio.harmony_task_history
               (task_id, name, posted, work_start, work_end, result, err, completed_by_host_and_port)
             SELECT g, '{name}', now() - interval '{ago_mins} minutes' - interval '5 minutes',
                    now() - interval '{ago_mins} minutes' - interval '2 minutes',
                    now() - interval '{ago_mins} minutes', {ok},
                    CASE WHEN {ok} THEN NULL ELSE 'error: no task found' END, '10.0.0.1:12300'
             FROM generate_series(1, {n}) AS g;"
        )
    };
    db.exec(&history(2, "PSProve", true, 3));
    db.exec(&history(14, "PSProve", true, 1));
    db.exec(&history(20, "PSProve", true, 2));
    db.exec(&history(59, "PSProve", true, 1));
    // Outside the hour, failures, and other task types do not count.
    db.exec(&history(61, "PSProve", true, 4));
    db.exec(&history(180, "PSProve", true, 2));
    db.exec(&history(5, "PSProve", false, 2));
    db.exec(&history(5, "PShareSubmit", true, 6));

    let d = harmony(&db).probe().unwrap();
    assert_eq!((d.completed_1h, d.completed_15m), (7, 4));
}

#[test]
fn harmonydb_proofshare_waiting_and_computing() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    db.exec(
        "INSERT INTO curio.proofshare_queue
           (service_id, obtained_at, request_cid, compute_task_id, compute_done, submit_done)
         VALUES
           (1, now() - interval '1 minute', 'w1', NULL, false, false),
           (2, now() - interval '1 minute', 'w2', NULL, false, false),
           (3, now() - interval '1 minute', 'w3', NULL, false, false),
           (4, now() - interval '2 minutes', 'c1', 101, false, false),
           (5, now() - interval '2 minutes', 'c2', 102, false, false),
           (6, now() - interval '9 minutes', 'd1', NULL, true, false),
           (7, now() - interval '9 minutes', 'd2', NULL, true, true),
           (8, now() - interval '9 minutes', 'd3', NULL, true, true),
           (9, now() - interval '9 minutes', 'd4', NULL, true, true);",
    );
    let d = harmony(&db).probe().unwrap();
    assert_eq!((d.ps_waiting, d.ps_computing), (Some(3), Some(2)));
}

#[test]
fn harmonydb_without_proofshare_tables_leaves_them_unread() {
    let mut db = pg::fresh_db();
    machine(&mut db, 1, "vast-a", 30, PSPROVE_NODE, "false");
    tasks(&mut db, 2, "PSProve", "NULL");
    db.exec("DROP TABLE curio.proofshare_queue");
    let d = harmony(&db).probe().unwrap();
    assert_eq!(
        (d.ps_waiting, d.ps_computing, d.backlog),
        (None, None, None)
    );
    assert_eq!(d.pending, 2);
    assert_eq!(
        d.orphan_tasks, 0,
        "orphans are counted only where the queue is read"
    );
    assert_eq!(d.live_workers(), 1);
    assert_eq!(
        d.notes,
        vec![
            "curio.proofshare_queue does not exist (a Curio without ProofShare?): ps_waiting, \
              ps_computing, backlog, orphan_tasks, stale_waiting and pow_1h unknown"
                .to_string()
        ]
    );
}

/// A one-line error that names what failed and never holds `secret`.
fn assert_clean_error(err: &anyhow::Error, secret: &str, expect: &[&str]) -> String {
    let text = format!("{err:#}");
    let debug = format!("{err:?}");
    assert!(
        !text.contains(secret) && !debug.contains(secret),
        "password leaked: {debug}"
    );
    assert!(!text.contains('\n'), "not one line: {text}");
    assert!(text.starts_with("harmonydb: "), "{text}");
    for part in expect {
        assert!(text.contains(part), "expected {part:?} in: {text}");
    }
    text
}

#[test]
fn harmonydb_unreachable_database_errors_without_the_password() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let secret = "Sup3r-Secret-pw";
    let url = format!("postgresql://yugabyte:{secret}@127.0.0.1:{port}/yugabyte?sslmode=disable");
    let err = HarmonyDbProbe::new(
        url,
        "PSProve".into(),
        ALIVE_SECS,
        WAITING_MAX_AGE_MINS,
        TIMEOUT,
    )
    .probe()
    .unwrap_err();
    assert_clean_error(
        &err,
        secret,
        &[
            "cannot connect to",
            &format!("postgresql://yugabyte@127.0.0.1:{port}/yugabyte"),
            "refused",
        ],
    );
}

#[test]
fn harmonydb_wrong_password_errors_without_it() {
    let db = pg::fresh_db();
    let secret = "wrong-Pass%21word";
    let url = db.url().replace(pg::PASSWORD, secret);
    let err = HarmonyDbProbe::new(
        url,
        "PSProve".into(),
        ALIVE_SECS,
        WAITING_MAX_AGE_MINS,
        TIMEOUT,
    )
    .probe()
    .unwrap_err();
    assert_clean_error(&err, secret, &["password authentication failed"]);
    // The decoded form would leak just the same.
    assert!(!format!("{err:#}").contains("wrong-Pass!word"));
}

#[test]
fn harmonydb_missing_curio_schema_names_the_table() {
    let mut db = pg::fresh_db();
    db.exec("DROP SCHEMA curio CASCADE");
    let err = harmony(&db).probe().unwrap_err();
    assert_clean_error(
        &err,
        pg::PASSWORD,
        &["curio.harmony_task", "does not exist"],
    );
}

#[test]
fn harmonydb_url_demanding_tls_is_refused_clearly() {
    let db = pg::fresh_db();
    let url = db.url().replace("sslmode=disable", "sslmode=require");
    let err = HarmonyDbProbe::new(
        url,
        "PSProve".into(),
        ALIVE_SECS,
        WAITING_MAX_AGE_MINS,
        TIMEOUT,
    )
    .probe()
    .unwrap_err();
    assert_clean_error(
        &err,
        pg::PASSWORD,
        &["TLS", "sslmode=require", "sslmode=disable"],
    );
}

#[test]
fn harmonydb_statement_timeout_bounds_a_blocked_query() {
    let db = pg::fresh_db();
    // Another session holds the task table; the probe's query waits on the lock.
    let mut holder = db.connect();
    let mut tx = holder.transaction().unwrap();
    tx.batch_execute("LOCK TABLE curio.harmony_task IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let probe = HarmonyDbProbe::new(
        db.url(),
        "PSProve".into(),
        ALIVE_SECS,
        WAITING_MAX_AGE_MINS,
        Duration::from_secs(1),
    );
    let err = probe.probe().unwrap_err();
    assert_clean_error(
        &err,
        pg::PASSWORD,
        &["statement timeout", "curio.harmony_task"],
    );
    tx.rollback().unwrap();
}

#[test]
fn harmonydb_server_that_never_answers_times_out() {
    // The kernel accepts the TCP connection; nothing ever speaks Postgres on it.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let url = format!("postgresql://yugabyte:hush-pw@127.0.0.1:{port}/yugabyte");
    let err = HarmonyDbProbe::new(
        url,
        "PSProve".into(),
        ALIVE_SECS,
        WAITING_MAX_AGE_MINS,
        Duration::from_secs(1),
    )
    .probe()
    .unwrap_err();
    assert_clean_error(&err, "hush-pw", &["no answer from", "within 3s"]);
    drop(silent);
}

// ---- http ----

const GOOD_DOC: &str = r#"{"pending": 6, "running": 4, "running_stale": 1,
  "completed_1h": 120, "completed_15m": 31,
  "workers": [{"machine_name": "vast-a", "host_and_port": "10.0.0.1:12300", "running": 4, "cordoned": false}],
  "ps_waiting": 2, "ps_computing": 4, "schema_version": 3}"#;

fn good_demand() -> Demand {
    Demand {
        pending: 6,
        running: 4,
        running_stale: 1,
        completed_1h: 120,
        completed_15m: 31,
        workers: vec![worker("vast-a", "10.0.0.1:12300", 4, false)],
        ps_waiting: Some(2),
        ps_computing: Some(4),
        ..Demand::default()
    }
}

/// Serves one request with `status` and `body`; returns the base URL and what was asked.
fn serve_once(status: u16, body: &'static str) -> (String, thread::JoinHandle<(String, String)>) {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    let handle = thread::spawn(move || {
        let request = server
            .recv_timeout(Duration::from_secs(20))
            .unwrap()
            .expect("the probe never called");
        let asked = (request.method().to_string(), request.url().to_string());
        request
            .respond(tiny_http::Response::from_string(body).with_status_code(status))
            .unwrap();
        asked
    });
    (format!("http://127.0.0.1:{port}"), handle)
}

#[test]
fn http_probe_reads_the_document() {
    let (base, server) = serve_once(200, GOOD_DOC);
    let d = HttpProbe::new(format!("{base}/demand?task=PSProve"), TIMEOUT)
        .probe()
        .unwrap();
    assert_eq!(d, good_demand());
    assert_eq!(
        server.join().unwrap(),
        ("GET".to_string(), "/demand?task=PSProve".to_string())
    );
}

#[test]
fn http_probe_non_200_is_an_error_with_the_status() {
    let (base, server) = serve_once(503, "curio gui restarting");
    let err = HttpProbe::new(format!("{base}/demand"), TIMEOUT)
        .probe()
        .unwrap_err()
        .to_string();
    server.join().unwrap();
    assert!(err.contains("HTTP 503"), "{err}");
    assert!(err.contains("curio gui restarting"), "{err}");
    assert!(err.contains(&format!("{base}/demand")), "{err}");

    let (base, server) = serve_once(404, "");
    let err = HttpProbe::new(format!("{base}/nope"), TIMEOUT)
        .probe()
        .unwrap_err()
        .to_string();
    server.join().unwrap();
    assert!(err.ends_with("answered HTTP 404"), "{err}");
}

#[test]
fn http_probe_bad_bodies_are_errors() {
    let (base, server) = serve_once(200, "<html>502 Bad Gateway</html>");
    let err = HttpProbe::new(base, TIMEOUT)
        .probe()
        .unwrap_err()
        .to_string();
    server.join().unwrap();
    assert!(err.contains("not valid JSON"), "{err}");
    assert!(err.contains("<html>502 Bad Gateway</html>"), "{err}");

    let (base, server) = serve_once(200, r#"{"pending": 1, "running": 0, "completed_1h": 3}"#);
    let err = HttpProbe::new(base, TIMEOUT)
        .probe()
        .unwrap_err()
        .to_string();
    server.join().unwrap();
    assert!(
        err.contains("required field `completed_15m` is missing"),
        "{err}"
    );
}

#[test]
fn http_probe_unreachable_is_an_error_without_userinfo() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = HttpProbe::new(
        format!("http://probe:Http-Secret@127.0.0.1:{port}/demand"),
        TIMEOUT,
    )
    .probe()
    .unwrap_err();
    let text = format!("{err:?}");
    assert!(!text.contains("Http-Secret"), "{text}");
    assert!(
        text.contains(&format!("http://probe@127.0.0.1:{port}/demand")),
        "{text}"
    );
}

// ---- command ----

fn run_command(command: &str, timeout: Duration) -> anyhow::Result<Demand> {
    CommandProbe::new(command.to_string(), timeout).probe()
}

#[test]
fn command_probe_reads_stdout() {
    let command = format!("cat <<'EOF'\n{GOOD_DOC}\nEOF\necho 'log lines go to stderr' >&2");
    assert_eq!(run_command(&command, TIMEOUT).unwrap(), good_demand());
}

#[test]
fn command_probe_partial_document_names_the_missing_field() {
    let err = run_command(
        r#"echo '{"pending": 3, "completed_1h": 0, "completed_15m": 0}'"#,
        TIMEOUT,
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "demand command: demand JSON: required field `running` is missing"
    );
}

#[test]
fn command_probe_garbage_is_quoted() {
    let err = run_command("echo 'psql: could not connect'; echo more", TIMEOUT)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("demand command: demand JSON: not valid JSON"),
        "{err}"
    );
    assert!(err.contains("psql: could not connect more"), "{err}");

    let err = run_command("true", TIMEOUT).unwrap_err().to_string();
    assert_eq!(err, "demand command: demand JSON: the document is empty");
}

#[test]
fn command_probe_non_zero_exit_shows_the_end_of_stderr() {
    let err = run_command(
        "echo '{\"pending\":0}'; echo 'connecting to yb:5433' >&2; echo 'FATAL: no route' >&2; exit 3",
        TIMEOUT,
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "demand command exited with status 3: connecting to yb:5433 | FATAL: no route"
    );

    let err = run_command("kill -9 $$", TIMEOUT).unwrap_err().to_string();
    assert_eq!(err, "demand command was killed by signal 9 (no stderr)");
}

/// True once `pid` is gone or a zombie (dead, waiting for its parent to reap it).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state is the field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn command_probe_timeout_kills_the_command_and_what_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let command = format!(
        "echo $$ > {p}; sleep 30 & echo $! >> {p}; wait",
        p = pids.display()
    );
    let err = run_command(&command, Duration::from_secs(1))
        .unwrap_err()
        .to_string();
    assert_eq!(err, "demand command: no answer within 1s; killed it");

    let pids: Vec<u32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    // The shell was ours to reap: gone, not a zombie.
    assert!(
        !std::path::Path::new(&format!("/proc/{}", pids[0])).exists(),
        "the shell was not reaped"
    );
    // Its background `sleep` got SIGKILL too (its reaping is init's business).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dead(pids[1]) {
        assert!(
            Instant::now() < deadline,
            "sleep {} survived the timeout",
            pids[1]
        );
        thread::yield_now();
    }
}

#[test]
fn command_probe_background_child_holding_stdout_is_killed() {
    // The shell prints and exits at once, but `sleep` keeps stdout open.
    let command = format!("sleep 30 & cat <<'EOF'\n{GOOD_DOC}\nEOF");
    let err = run_command(&command, Duration::from_secs(1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("kept its output open past 1s"), "{err}");
}

#[test]
fn harmonydb_a_hung_first_host_hands_over_to_the_next_one() {
    let mut db = pg::fresh_db();
    machine(&mut db, 1, "vast-a", 30, PSPROVE_NODE, "false");
    tasks(&mut db, 2, "PSProve", "1");
    // A host that accepts and never answers (a hung node of a cluster), listed first.
    let hung = TcpListener::bind("127.0.0.1:0").unwrap();
    let hung_port = hung.local_addr().unwrap().port();
    thread::spawn(move || {
        let mut held = Vec::new();
        for s in hung.incoming().flatten() {
            held.push(s);
        }
    });
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let probe = |ports: String| {
        let url = format!(
            "host=127.0.0.1,127.0.0.1 port={ports} user={} password={} dbname={} sslmode=disable",
            pg::USER,
            pg::PASSWORD,
            db.name
        );
        let timeout = Duration::from_secs(2);
        HarmonyDbProbe::new(url, "PSProve".into(), ALIVE_SECS, 60, timeout).probe()
    };
    // The driver bounded the TCP connect alone: the hung host held the whole probe and the
    // healthy one was never tried (a walkthrough).
    let d = probe(format!("{hung_port},{}", db.port)).unwrap();
    assert_eq!((d.running, d.live_workers()), (2, 1));
    // Neither answering: one line naming each host and why, no password.
    let err = probe(format!("{hung_port},{closed}")).unwrap_err();
    let text = assert_clean_error(
        &err,
        pg::PASSWORD,
        &[
            // The host that answered first: its reason is the fault (a long list was
            // clipped before it).
            &format!("none of its 2 hosts answered (host 127.0.0.1:{closed}: "),
            &format!("; no answer within 2s from host 127.0.0.1:{hung_port})"),
        ],
    );
    assert!(text.contains("refused"), "{text}");
}

/// A re-test: one byte that is not UTF-8 (in a machine name, a note) failed the whole
/// reading over HTTP ("stream did not contain valid UTF-8"): demand unknown and the fleet held
/// with work queued. It reads as U+FFFD, as a `command` source's output does.
#[test]
fn http_probe_reads_a_byte_that_is_not_utf8_as_a_replacement_character() {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    let body = GOOD_DOC
        .replacen("vast-a", "vast-\u{1}a", 1)
        .replace('\u{1}', "\u{0}");
    let mut bytes = body.into_bytes();
    let at = bytes.iter().position(|&b| b == 0).unwrap();
    bytes[at] = 0xff;
    let handle = thread::spawn(move || {
        let request = server
            .recv_timeout(Duration::from_secs(20))
            .unwrap()
            .unwrap();
        request
            .respond(tiny_http::Response::from_data(bytes))
            .unwrap();
    });
    let d = HttpProbe::new(format!("http://127.0.0.1:{port}/demand"), TIMEOUT)
        .probe()
        .unwrap();
    handle.join().unwrap();
    assert_eq!(d.workers[0].machine_name, "vast-\u{fffd}a");
}
