//! The harmonydb probe on Curio's real schema (tests/fixtures/curio_real_schema.sql, from
//! Curio's own migrations), one test per shape of issue 16: the false emergencies (a lone
//! orphan task, a days-old waiting row while ProofShare is off), the real ones beside them
//! (stale heartbeats, the state after Curio's own machine cleanup), Curio's backlog against
//! Curio's query, the ProofShare state, payments, per-worker history and the grants; then
//! `fleetagent run` end to end on the same shapes.

use std::time::Duration;

use fleetagent::demand::{Demand, DemandProbe, HarmonyDbProbe, RequestLoop, HISTORY_WINDOW_SECS};

use super::demand::{machine, orphan_tasks, proofshare_enabled, tasks};
use crate::common::fake_vast::{FakeVast, Route, FAKE_API_KEY};
use crate::common::fleet::Fleet;
use crate::common::pg::{self, TestDb};

const PSPROVE_NODE: &str = "PSAutoSettle,PShareSubmit,PSProve,bg:PShareRequest";

fn probe_as(url: String) -> anyhow::Result<Demand> {
    HarmonyDbProbe::new(url, "PSProve".into(), 150, 60, Duration::from_secs(10)).probe()
}

fn read(db: &TestDb) -> Demand {
    probe_as(db.url()).unwrap()
}

/// An age the database computed from a row stamped `expect` seconds before its now(): the
/// probe runs a moment after the insert, so allow a minute.
fn about(secs: Option<u64>, expect: u64) -> bool {
    secs.is_some_and(|s| (expect..expect + 60).contains(&s))
}

/// Curio's `CleanupMachines` (harmony/resources/resources.go), run by every live node at
/// start and every 5 minutes: machine rows silent for LOOKS_DEAD_TIMEOUT (10 min) are
/// deleted; the foreign keys reset their tasks' owner_id and drop their details.
const CURIO_CLEANUP: &str = "SET search_path = curio;
DELETE FROM harmony_machines WHERE last_contact < CURRENT_TIMESTAMP - INTERVAL '1 MILLISECOND' * 600000;
RESET search_path;";

/// Curio's backlog query (tasks/proofshare/task_request.go), as Curio runs it.
const CURIO_BACKLOG: &str = "SELECT COUNT(*) FROM proofshare_queue q
LEFT JOIN harmony_task t ON t.id = q.compute_task_id
WHERE q.compute_done = FALSE AND (q.compute_task_id IS NULL OR t.owner_id IS NULL)";

#[test]
fn curio_lone_orphan_task_is_no_emergency() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    // A PSProve task whose queue row is gone: it can only fail "no task found".
    orphan_tasks(&mut db, 1, "NULL", 90);
    let d = read(&db);
    assert_eq!((d.pending, d.orphan_tasks), (1, 1));
    assert!(about(d.orphan_oldest_secs, 5400), "{d:?}");
    assert_eq!(d.queued_work(), 0);
    assert_eq!(d.backlog, Some(0));
    assert!(!d.workers_dead(), "{d:?}");
}

#[test]
fn curio_days_old_waiting_row_while_proofshare_is_off_is_no_emergency() {
    let mut db = pg::fresh_db();
    db.exec(
        "INSERT INTO curio.proofshare_queue (service_id, obtained_at, request_cid)
           VALUES (7, now() - interval '3 days', 'bafy-old');",
    );
    let d = read(&db);
    assert_eq!(d.proofshare_enabled, Some(false));
    assert!(d.proofshare_disabled());
    assert_eq!((d.ps_waiting, d.stale_waiting), (Some(0), 1));
    assert!(about(d.stale_oldest_secs, 3 * 86_400), "{d:?}");
    assert_eq!(d.queued_work(), 0);
    assert!(!d.workers_dead(), "{d:?}");

    // Switched on, the row is still past demand.waiting_max_age_mins: not work.
    proofshare_enabled(&mut db, true);
    let d = read(&db);
    assert_eq!((d.ps_waiting, d.stale_waiting), (Some(0), 1));
    assert!(!d.workers_dead(), "{d:?}");

    // A fresh one is.
    db.exec(
        "INSERT INTO curio.proofshare_queue (service_id, obtained_at, request_cid)
           VALUES (8, now() - interval '5 minutes', 'bafy-new');",
    );
    let d = read(&db);
    assert_eq!((d.ps_waiting, d.stale_waiting), (Some(1), 1));
    assert!(d.workers_dead(), "{d:?}");
}

#[test]
fn curio_real_task_beside_an_orphan_is_still_workers_dead() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    orphan_tasks(&mut db, 1, "NULL", 300);
    tasks(&mut db, 1, "PSProve", "NULL");
    let d = read(&db);
    assert_eq!((d.pending, d.orphan_tasks, d.queued_work()), (2, 1, 1));
    assert_eq!(d.backlog, Some(1));
    assert!(d.workers_dead(), "{d:?}");
}

#[test]
fn curio_stale_heartbeats_with_queued_work_are_workers_dead() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    // Heartbeats stopped 8 minutes ago: Curio's cleanup has not run yet.
    machine(&mut db, 1, "fleetagent-a", 480, PSPROVE_NODE, "false");
    machine(&mut db, 2, "fleetagent-b", 480, PSPROVE_NODE, "false");
    tasks(&mut db, 2, "PSProve", "1");
    tasks(&mut db, 1, "PSProve", "2");
    tasks(&mut db, 4, "PSProve", "NULL");
    let d = read(&db);
    assert_eq!((d.pending, d.running, d.running_stale), (4, 0, 3));
    assert_eq!((d.orphan_tasks, d.queued_work()), (0, 7));
    assert!(d.workers.is_empty());
    assert!(d.workers_dead(), "{d:?}");
    // Curio's backlog counts only the unowned ones: the stale owners still hold theirs.
    assert_eq!(d.backlog, Some(4));
}

/// `EnableProofShare` lists PSProve on every node that enables it, the one without a GPU
/// that runs the request loop too, while PSProve costs a GPU (Curio's `task_prove.go`): that
/// node never takes the work. Counted as a live worker it hid WORKERS DEAD while every GPU
/// worker was dead. It counts once it owns a PSProve task or proved one (cuzk proves with no
/// GPU cost).
#[test]
fn curio_a_node_without_a_gpu_listing_psprove_is_no_worker() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    machine(&mut db, 1, "main", 10, PSPROVE_NODE, "false");
    db.exec("UPDATE curio.harmony_machines SET gpu = 0 WHERE id = 1");
    // The GPU workers' heartbeats stopped; their work waits.
    machine(&mut db, 2, "fleetagent-a", 480, "PSProve", "false");
    tasks(&mut db, 3, "PSProve", "NULL");
    let d = read(&db);
    assert!(d.workers.is_empty(), "{:?}", d.workers);
    assert!(d.workers_dead(), "{d:?}");
    let note = d.notes.iter().find(|n| {
        n.starts_with(
            "no GPU, no PSProve in 6h, so not workers (they list PSProve but cannot take it): main (10.0.0.1:12300)",
        )
    });
    assert!(note.is_some(), "{:?}", d.notes);

    // A live GPU worker counts, the node still does not.
    machine(&mut db, 3, "fleetagent-b", 10, "PSProve", "false");
    let d = read(&db);
    let names: Vec<&str> = d.workers.iter().map(|w| w.machine_name.as_str()).collect();
    assert_eq!(names, ["fleetagent-b"]);
    assert!(!d.workers_dead());

    // Owning a PSProve task, or having proved one in the window, it can prove (cuzk).
    db.exec("DELETE FROM curio.harmony_machines WHERE id = 3");
    tasks(&mut db, 1, "PSProve", "1");
    let d = read(&db);
    assert_eq!(d.workers.len(), 1, "{:?}", d.workers);
    assert!(
        d.notes.iter().all(|n| !n.starts_with("no GPU")),
        "{:?}",
        d.notes
    );
    db.exec("UPDATE curio.harmony_task SET owner_id = NULL WHERE owner_id = 1");
    completions(&mut db, "10.0.0.1:12300", 1);
    assert_eq!(read(&db).workers.len(), 1);

    // Another task than PSProve: the GPU is none of the probe's business.
    let porep = HarmonyDbProbe::new(
        db.url(),
        "bg:PShareRequest".into(),
        150,
        60,
        Duration::from_secs(10),
    );
    db.exec("DELETE FROM curio.harmony_task_history");
    assert_eq!(porep.probe().unwrap().workers.len(), 1);
}

/// A Curio older than a migration that added a column the probe reads for one part only
/// (`proofshare_queue.was_pow` came in 20250620, five months after ProofShare): that part is
/// left out with a note naming the migration, and the rest is read (it was a failed reading,
/// the fleet held, WORKERS DEAD included).
#[test]
fn curio_without_a_later_column_reads_the_rest() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    machine(&mut db, 1, "fleetagent-a", 480, PSPROVE_NODE, "false");
    tasks(&mut db, 2, "PSProve", "NULL");
    db.exec(
        "ALTER TABLE curio.proofshare_queue DROP COLUMN was_pow;
         DROP INDEX IF EXISTS curio.idx_harmony_machines_unschedulable;
         ALTER TABLE curio.harmony_machines DROP COLUMN unschedulable;",
    );
    let d = read(&db);
    assert!(d.workers_dead(), "{d:?}");
    assert_eq!((d.pending, d.backlog, d.pow_1h), (2, Some(2), None));
    for (column, migration) in [
        ("proofshare_queue.was_pow", "20250620-proofshare-pow"),
        (
            "harmony_machines.unschedulable",
            "20250111-machine-maintenance",
        ),
    ] {
        let note =
            format!("curio.{column} does not exist (a Curio before its migration {migration})");
        assert!(
            d.notes.iter().any(|n| n.starts_with(&note)),
            "{note}: {:?}",
            d.notes
        );
    }
}

#[test]
fn curio_after_its_own_machine_cleanup_is_workers_dead() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    machine(&mut db, 1, "fleetagent-a", 900, PSPROVE_NODE, "false");
    machine(&mut db, 2, "sealer", 30, "PoRep,WdPost", "false");
    tasks(&mut db, 3, "PSProve", "1");
    tasks(&mut db, 2, "PSProve", "NULL");
    db.exec(CURIO_CLEANUP);
    // What the cleanup left: the dead machine and its details gone, its tasks unowned.
    assert_eq!(
        db.query_i64("SELECT count(*) FROM curio.harmony_machines"),
        1
    );
    assert_eq!(
        db.query_i64("SELECT count(*) FROM curio.harmony_machine_details"),
        1
    );
    assert_eq!(
        db.query_i64("SELECT count(*) FROM curio.harmony_task WHERE owner_id IS NULL"),
        5
    );
    let d = read(&db);
    assert_eq!((d.pending, d.running, d.running_stale), (5, 0, 0));
    assert_eq!((d.orphan_tasks, d.backlog), (0, Some(5)));
    assert!(d.workers.is_empty());
    assert!(d.workers_dead(), "{d:?}");
}

#[test]
fn curio_backlog_is_curios_own_query() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    machine(&mut db, 1, "fleetagent-a", 20, PSPROVE_NODE, "false");
    machine(&mut db, 2, "fleetagent-gone", 700, PSPROVE_NODE, "false");
    tasks(&mut db, 3, "PSProve", "1"); // claimed by a live machine: not backlog
    tasks(&mut db, 2, "PSProve", "2"); // claimed by a stale one: not backlog for Curio
    tasks(&mut db, 4, "PSProve", "NULL"); // unclaimed: backlog
    db.exec(
        "INSERT INTO curio.proofshare_queue
           (service_id, obtained_at, request_cid, compute_task_id, compute_done, submit_done)
         VALUES
           (100, now() - interval '2 minutes', 'w1', NULL, false, false),   -- waiting
           (101, now() - interval '2 days', 'w2', NULL, false, false),      -- waiting, stale
           (102, now() - interval '9 minutes', 'gone', 99999, false, false), -- task missing
           (103, now() - interval '9 minutes', 'd1', NULL, true, false),    -- proved
           (104, now() - interval '9 minutes', 'd2', NULL, true, true);     -- submitted",
    );
    let d = read(&db);
    db.exec("SET search_path = curio");
    let curio = db.query_i64(CURIO_BACKLOG);
    assert_eq!(curio, 7);
    assert_eq!(d.backlog, Some(curio as u32));
    assert_eq!((d.ps_waiting, d.stale_waiting), (Some(1), 1));
    assert_eq!(d.ps_computing, Some(10));
}

#[test]
fn curio_request_loop_ok_stalled_and_none() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    db.exec("UPDATE curio.proofshare_meta SET pprice = '120000000000000000' WHERE singleton");
    assert_eq!(read(&db).request_loop, Some(RequestLoop::None));

    machine(&mut db, 1, "fleetagent-a", 20, PSPROVE_NODE, "false");
    machine(&mut db, 2, "fleetagent-gone", 700, PSPROVE_NODE, "false");
    db.exec(
        "INSERT INTO curio.harmony_task (id, name, owner_id, posted_time, added_by)
           VALUES (500, 'bg:PShareRequest', 1, now(), 1),
                  (501, 'bg:PShareRequest', 2, now(), 2),
                  (502, 'bg:PShareRequest', NULL, now(), 1);
         UPDATE curio.proofshare_meta SET request_task_id = 500;",
    );
    let d = read(&db);
    assert_eq!(d.request_loop, Some(RequestLoop::Ok));
    assert_eq!(d.ask_price_attofil.as_deref(), Some("120000000000000000"));
    assert_eq!(d.proofshare_enabled, Some(true));

    for stalled in ["501", "502", "77777"] {
        db.exec(&format!(
            "UPDATE curio.proofshare_meta SET request_task_id = {stalled}"
        ));
        assert_eq!(
            read(&db).request_loop,
            Some(RequestLoop::Stalled),
            "request task {stalled}"
        );
    }
}

#[test]
fn curio_paid_and_pow_in_the_last_hour() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    db.exec(
        "INSERT INTO curio.proofshare_provider_payments
           (provider_id, request_cid, payment_nonce, payment_cumulative_amount,
            payment_signature, created_at)
         SELECT 1, 'paid-' || g, g, (g * 1000)::text, '\\x00',
                now() - make_interval(mins => g * 10)
         FROM generate_series(1, 8) AS g;  -- 10..80 minutes ago: 5 inside the hour
         INSERT INTO curio.proofshare_queue
           (service_id, obtained_at, request_cid, compute_done, submit_done, was_pow)
         VALUES
           (1, now() - interval '20 minutes', 'pow1', true, true, true),
           (2, now() - interval '40 minutes', 'pow2', true, true, true),
           (3, now() - interval '3 hours', 'pow3', true, true, true),
           (4, now() - interval '10 minutes', 'paid', true, true, false);",
    );
    let d = read(&db);
    assert_eq!((d.paid_1h, d.pow_1h), (Some(5), Some(2)));
    assert!(d.notes.is_empty(), "{:?}", d.notes);
}

#[test]
fn curio_history_per_worker() {
    let mut db = pg::fresh_db();
    let mut rows = |host: &str, name: &str, ok: bool, mins: &[u32]| {
        for (i, m) in mins.iter().enumerate() {
            db.exec(&format!(
                "INSERT INTO curio.harmony_task_history
                   (task_id, name, posted, work_start, work_end, result, err,
                    completed_by_host_and_port)
                 VALUES ({i}, '{name}', now() - interval '{m} minutes' - interval '9 minutes',
                         now() - interval '{m} minutes' - interval '6 minutes',
                         now() - interval '{m} minutes', {ok},
                         CASE WHEN {ok} THEN NULL ELSE 'error: no task found' END, '{host}')"
            ));
        }
    };
    let window_mins = (HISTORY_WINDOW_SECS / 60) as u32;
    rows("10.0.0.1:12300", "PSProve", true, &[5, 30, 200]);
    rows("10.0.0.2:12300", "PSProve", true, &[10]);
    // Outside the window, failures and other task types do not count.
    rows("10.0.0.1:12300", "PSProve", true, &[window_mins + 5]);
    rows("10.0.0.2:12300", "PSProve", false, &[3, 4]);
    rows("10.0.0.3:12300", "PShareSubmit", true, &[3]);
    let d = read(&db);
    assert_eq!(d.history.len(), 2, "{:?}", d.history);
    let (a, b) = (&d.history[0], &d.history[1]);
    assert_eq!((a.host_and_port.as_str(), a.proofs), ("10.0.0.1:12300", 3));
    assert!(about(Some(a.first_end_secs_ago), 200 * 60), "{a:?}");
    assert!(about(Some(a.last_end_secs_ago), 5 * 60), "{a:?}");
    assert_eq!((b.host_and_port.as_str(), b.proofs), ("10.0.0.2:12300", 1));
    assert_eq!(b.first_end_secs_ago, b.last_end_secs_ago);
    assert_eq!((d.completed_1h, d.completed_15m), (3, 2));
}

/// A login role named after the test's database (roles are cluster-wide), and its URL.
fn role(db: &mut TestDb, grants: &str) -> (String, String) {
    let name = format!("probe_{}", db.name);
    let password = "role-Pw-1";
    db.exec(&format!(
        "CREATE ROLE {name} LOGIN PASSWORD '{password}';
         {}",
        grants.replace("<role>", &name)
    ));
    let url = format!(
        "postgresql://{name}:{password}@127.0.0.1:{}/{}?sslmode=disable",
        db.port, db.name
    );
    (name, url)
}

const REQUIRED_GRANTS: &str = "GRANT USAGE ON SCHEMA curio TO <role>;
GRANT SELECT ON curio.harmony_task, curio.harmony_task_history, curio.harmony_machines,
                curio.harmony_machine_details TO <role>;";

#[test]
fn curio_missing_optional_grants_degrade_with_notes() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    tasks(&mut db, 2, "PSProve", "NULL");
    let (name, url) = role(
        &mut db,
        &format!("{REQUIRED_GRANTS}\nGRANT SELECT ON curio.proofshare_queue TO <role>;"),
    );
    let d = probe_as(url).unwrap();
    assert_eq!(
        d.notes,
        vec![
            format!(
                "no SELECT on curio.proofshare_meta: proofshare_enabled, request_loop and \
                 ask_price_attofil unknown (GRANT SELECT ON curio.proofshare_meta TO {name})"
            ),
            format!(
                "no SELECT on curio.proofshare_provider_payments: paid_1h unknown \
                 (GRANT SELECT ON curio.proofshare_provider_payments TO {name})"
            ),
        ]
    );
    assert_eq!(
        (
            d.proofshare_enabled,
            d.request_loop,
            d.ask_price_attofil.clone()
        ),
        (None, None, None)
    );
    assert_eq!(d.paid_1h, None);
    // The rest stands: the tasks, the queue, Curio's backlog.
    assert_eq!(
        (d.pending, d.ps_computing, d.backlog),
        (2, Some(2), Some(2))
    );
    assert!(d.workers_dead());
}

#[test]
fn curio_missing_select_on_harmony_task_is_an_error_naming_it() {
    let mut db = pg::fresh_db();
    let (name, url) = role(
        &mut db,
        "GRANT USAGE ON SCHEMA curio TO <role>;
         GRANT SELECT ON ALL TABLES IN SCHEMA curio TO <role>;
         REVOKE SELECT ON curio.harmony_task FROM <role>;",
    );
    let err = format!("{:#}", probe_as(url).unwrap_err());
    assert!(!err.contains('\n'), "{err}");
    assert!(
        err.contains(&format!(
            "no SELECT on curio.harmony_task, which the probe needs (GRANT SELECT ON curio.harmony_task TO {name})"
        )),
        "{err}"
    );

    // Without USAGE on the schema nothing can be read, and the error says which grant.
    let (name, url) = {
        let name = format!("nousage_{}", db.name);
        db.exec(&format!(
            "CREATE ROLE {name} LOGIN PASSWORD 'x-Pw-2'; GRANT SELECT ON ALL TABLES IN SCHEMA curio TO {name};"
        ));
        let url = format!(
            "postgresql://{name}:x-Pw-2@127.0.0.1:{}/{}?sslmode=disable",
            db.port, db.name
        );
        (name, url)
    };
    let err = format!("{:#}", probe_as(url).unwrap_err());
    assert!(
        err.contains(&format!("GRANT USAGE ON SCHEMA curio TO {name}")),
        "{err}"
    );
}

/// The GRANT statements of docs/demand.md's grants block, as written there.
fn documented_grants() -> String {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/demand.md")).unwrap();
    let start = doc
        .find("```sql\nGRANT USAGE ON SCHEMA curio")
        .expect("docs/demand.md has a ```sql block starting with GRANT USAGE ON SCHEMA curio");
    let block = &doc[start + "```sql\n".len()..];
    block[..block.find("```").unwrap()].to_string()
}

#[test]
fn curio_documented_grants_are_enough_for_a_full_reading() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    tasks(&mut db, 1, "PSProve", "NULL");
    let grants = documented_grants();
    assert!(grants.contains("fleetagent_probe"), "{grants}");
    db.exec(&format!(
        "CREATE ROLE fleetagent_probe LOGIN PASSWORD 'doc-Pw-3';\n{grants}"
    ));
    let url = format!(
        "postgresql://fleetagent_probe:doc-Pw-3@127.0.0.1:{}/{}?sslmode=disable",
        db.port, db.name
    );
    let d = probe_as(url).unwrap();
    assert!(d.notes.is_empty(), "{:?}", d.notes);
    assert!(d.proofshare_enabled.is_some() && d.request_loop.is_some());
    assert!(d.paid_1h.is_some() && d.pow_1h.is_some() && d.backlog.is_some());
    assert_eq!(d, read(&db));
}

// ---- end to end: `fleetagent run` with the rules, the harmonydb source, a fake vast.ai ----

/// One `fleetagent run` (the rules) against `db`; the creates that reached vast.ai, and
/// whether the pass's observation said WORKERS DEAD. No `target_proofs_per_hour`: with a
/// target the rules also seed one instance whenever ProofShare is on and no worker lives
/// (docs/guardrails.md), a launch that is no emergency; this isolates the emergency.
fn run_once(db: &TestDb) -> (usize, bool) {
    let fake = FakeVast::start_real_time();
    fake.add_offers(5, "RTX 4090", 0.40, 0.99);
    let f = Fleet::new()
        .env("VAST_API_KEY", FAKE_API_KEY)
        .env("FLEETAGENT_HARMONYDB_URL", &db.url());
    f.write_config(&format!(
        "{}\n[vast]\nbase_url = \"{}\"\nimage = \"ghcr.io/example/curio-psprove:latest\"\n\
         [vast.offers]\ngpu_names = [\"RTX 4090\"]\n\
         [policy]\nproofs_per_hour_per_instance = 100\nmax_dph_total = 10.0\nmax_instances = 5\n",
        crate::common::fleet::FAST_CONFIG,
        fake.url()
    ));
    f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    f.cmd(&["run"]).ok();
    let history = f.cmd(&["history"]).ok().stdout;
    (
        fake.requests_to(Route::Create).len(),
        history.contains("WORKERS DEAD"),
    )
}

#[test]
fn curio_run_launches_nothing_for_the_false_emergencies_and_launches_for_stale_heartbeats() {
    // (a) a lone orphan task on a live ProofShare cluster.
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    orphan_tasks(&mut db, 1, "NULL", 120);
    assert_eq!(run_once(&db), (0, false), "a lone orphan");

    // (b) a days-old waiting row while ProofShare is off.
    let mut db = pg::fresh_db();
    db.exec(
        "INSERT INTO curio.proofshare_queue (service_id, obtained_at, request_cid)
           VALUES (7, now() - interval '3 days', 'bafy-old');",
    );
    assert_eq!(run_once(&db), (0, false), "a stale row with ProofShare off");

    // Stale heartbeats with queued work: WORKERS DEAD, and a launch.
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    machine(&mut db, 1, "fleetagent-a", 600, PSPROVE_NODE, "false");
    tasks(&mut db, 2, "PSProve", "1");
    tasks(&mut db, 5, "PSProve", "NULL");
    let (creates, dead) = run_once(&db);
    assert!(dead, "stale heartbeats are WORKERS DEAD");
    assert!(creates >= 1, "stale heartbeats launched nothing");
}

/// `n` successful PSProve completions by `host`, ending within the last hour.
fn completions(db: &mut TestDb, host: &str, n: u32) {
    db.exec(&format!(
        "INSERT INTO curio.harmony_task_history
           (task_id, name, posted, work_start, work_end, result, completed_by_host_and_port)
         SELECT i, 'PSProve', now() - interval '50 minutes', now() - interval '1 minute' * (2 * i + 3),
                now() - interval '1 minute' * (2 * i + 1), true, '{host}'
         FROM generate_series(1, {n}) AS i"
    ));
}

/// Issue 22, must-show 6: an on-prem worker completes proofs, one rented instance of ours
/// (its worker registered, idle) proves nothing. Our profit per hour is its cost, negative;
/// our cost per proof unknown; the on-prem completions are the cluster's, shown apart. In
/// the observation, `inspect --json` and the metrics textfile.
#[test]
fn curio_on_prem_proofs_are_not_ours_a_rented_instance_proving_nothing_loses_its_cost() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    machine(&mut db, 1, "onprem-1", 10, PSPROVE_NODE, "false");
    machine(&mut db, 2, "fleetagent-r1", 10, PSPROVE_NODE, "false");
    completions(&mut db, "10.0.0.1:12300", 12);
    let fake = FakeVast::start_real_time();
    fake.add_instance("fleetagent-r1");
    let f = Fleet::new()
        .env("VAST_API_KEY", FAKE_API_KEY)
        .env("FLEETAGENT_HARMONYDB_URL", &db.url());
    let prom = f.path().join("fleetagent.prom");
    f.write_config(&format!(
        "{}\n[vast]\nbase_url = \"{}\"\nimage = \"ghcr.io/example/curio-psprove:latest\"\n\
         [policy]\ntarget_proofs_per_hour = 0\nproofs_per_hour_per_instance = 20\n\
         [price]\nproof_price_fil = 0.01\nfil_usd = 5.0\n[metrics]\ntextfile = \"{}\"\n",
        crate::common::fleet::FAST_CONFIG,
        fake.url(),
        prom.display()
    ));
    f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    f.cmd(&["run"]).ok();

    // inspect --json: our instance bills $0.40/h and proved nothing.
    let v = f.inspect();
    let p = &v["price"];
    assert_eq!(v["fleet_dph"], 0.4, "{v:#}");
    assert_eq!(p["ours_completed_1h"], 0, "{p:#}");
    assert_eq!(p["others_completed_1h"], 12, "{p:#}");
    assert_eq!(p["cost_per_proof"], serde_json::Value::Null, "{p:#}");
    assert_eq!(p["revenue_per_hour"], 0.0, "{p:#}");
    assert_eq!(p["paid_share"], 0.0, "{p:#}");
    assert_eq!(p["profit_per_hour"], -0.4, "{p:#}");
    let text = f.cmd(&["inspect"]).ok().stdout;
    assert!(
        // Curio recorded no payment for the cluster's 12: the share is said.
        text.contains("\nprofit      -$0.40/h: revenue $0.00/h (at the cluster's paid share of 0 %) against the fleet's $0.40/h, no completion of ours in the last hour (cost per proof unknown); the cluster's other machines completed 12\n"),
        "{text}"
    );

    // The observation the pass wrote.
    let observation = v["last_observation"].as_str().unwrap_or_default();
    assert!(
        observation.contains(
            "Fleet cost $0.40/h with no completion of ours in the last hour, so no cost per \
             proof; the cluster's other machines completed 12."
        ) && observation
            .contains("Profit -$0.40/h (revenue $0.00/h, at the cluster's paid share of 0 %)."),
        "{observation}"
    );

    // The metrics textfile: the same figures, the unknown one without a sample.
    let metrics = std::fs::read_to_string(&prom).unwrap();
    for want in [
        "\nfleetagent_profit_dollars_per_hour -0.4\n",
        "\nfleetagent_revenue_dollars_per_hour 0\n",
        "\nfleetagent_proofs_completed_last_hour{whose=\"ours\"} 0\n",
        "\nfleetagent_proofs_completed_last_hour{whose=\"others\"} 12\n",
    ] {
        assert!(metrics.contains(want), "{want:?} missing:\n{metrics}");
    }
    assert!(
        !metrics.contains("\nfleetagent_fleet_cost_per_proof_dollars "),
        "{metrics}"
    );
}

/// Issue 22, must-show 7: Curio's `proofshare_meta.pprice` drifted to numeric. The probe
/// says so in one line naming the column and the type found, never a panic; the pass
/// holds as for any failed probe and `inspect`'s demand error names it.
#[test]
fn curio_a_column_of_another_type_is_one_line_naming_it_never_a_panic() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    db.exec(
        "ALTER TABLE curio.proofshare_meta ALTER COLUMN pprice DROP DEFAULT;
         ALTER TABLE curio.proofshare_meta ALTER COLUMN pprice TYPE numeric USING pprice::numeric;
         UPDATE curio.proofshare_meta SET pprice = 5000000000000000;",
    );
    let err = format!("{:#}", probe_as(db.url()).unwrap_err());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("proofshare_meta.pprice is numeric, expected text"),
        "{err}"
    );
    assert!(
        !err.contains("panicked") && !err.contains(pg::PASSWORD),
        "{err}"
    );

    // A run: the pass holds as for a failed probe (the same exit as against a HarmonyDB
    // that is down), and says why.
    let run = |url: &str| {
        let f = Fleet::new().env("FLEETAGENT_HARMONYDB_URL", url);
        f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
        (f.cmd(&["run"]), f)
    };
    let (down, _) = run("postgresql://u:p@127.0.0.1:1/none?sslmode=disable");
    let (drifted, f) = run(&db.url());
    assert!(!drifted.stderr.contains("panicked"), "{}", drifted.stderr);
    assert_eq!(drifted.code, down.code, "{}", drifted.stderr);
    let v = f.inspect();
    let demand_error = v["demand"]["error"].as_str().unwrap_or_default();
    assert!(
        demand_error.contains("proofshare_meta.pprice is numeric, expected text"),
        "{v:#}"
    );
    assert_eq!(v["demand"]["read_at"], serde_json::Value::Null, "{v:#}");
    // A NULL where Curio's schema has none is named the same way.
    db.exec(
        "ALTER TABLE curio.proofshare_meta ALTER COLUMN pprice TYPE text USING pprice::text;
         ALTER TABLE curio.proofshare_meta ALTER COLUMN pprice DROP NOT NULL;
         UPDATE curio.proofshare_meta SET pprice = NULL;",
    );
    let err = format!("{:#}", probe_as(db.url()).unwrap_err());
    assert!(
        err.contains("proofshare_meta.pprice is NULL, expected text"),
        "{err}"
    );
}

/// Without SELECT on `proofshare_queue` (the table there) no PSProve task can be told from an
/// orphan: the reading fails naming the grant, and the fleet is held. Read as optional, a
/// lone orphan of 5 hours with no worker alive was WORKERS DEAD and rented 5 instances;
/// guessed by age, then by age and failures, a real outage was hidden (two walkthroughs).
#[test]
fn curio_without_the_queue_grant_the_reading_fails_naming_it() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    orphan_tasks(&mut db, 1, "NULL", 300);
    let (name, url) = role(
        &mut db,
        "GRANT USAGE ON SCHEMA curio TO <role>;
         GRANT SELECT ON curio.harmony_task, curio.harmony_machines,
                         curio.harmony_machine_details, curio.proofshare_meta,
                         curio.proofshare_provider_payments, curio.harmony_task_history
           TO <role>;",
    );
    let err = format!("{:#}", probe_as(url).unwrap_err());
    assert!(!err.contains('\n'), "{err}");
    assert!(
        err.contains(&format!(
            "no SELECT on curio.proofshare_queue, which the probe needs to tell ProofShare work from orphan tasks (GRANT SELECT ON curio.proofshare_queue TO {name})"
        )),
        "{err}"
    );
}

#[test]
fn curio_a_task_name_in_another_case_fails_naming_curios_and_completions_ahead_are_left_out() {
    let mut db = pg::fresh_db();
    proofshare_enabled(&mut db, true);
    machine(&mut db, 1, "vast-a", 20, PSPROVE_NODE, "false");
    tasks(&mut db, 3, "PSProve", "NULL");
    // 5 completions a worker dated 3 hours ahead (Curio writes work_end from the worker's
    // own clock) beside 4 of a worker whose clock agrees: both windows counted all 9.
    completions(&mut db, "10.0.0.1:12300", 4);
    db.exec(
        "INSERT INTO curio.harmony_task_history
           (task_id, name, posted, work_start, work_end, result, completed_by_host_and_port)
         SELECT 100 + i, 'PSProve', now(), now() + interval '3 hours' - interval '1 minute' * (2 * i + 2),
                now() + interval '3 hours' - interval '1 minute' * (2 * i), true, '10.0.0.2:12300'
         FROM generate_series(1, 5) AS i",
    );
    let probe = |task: &str| {
        HarmonyDbProbe::new(db.url(), task.into(), 150, 60, Duration::from_secs(10)).probe()
    };
    // Curio's names are case-sensitive: "psprove" read a clean zero, no worker, no work.
    let err = format!("{:#}", probe("psprove").unwrap_err());
    assert!(
        err.contains(r#"demand.task = "psprove" names no Curio task, but Curio has "PSProve" (task names are case-sensitive): set demand.task = "PSProve""#),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
    // A task Curio has in no case reads as nothing of it, as before.
    let d = probe("NoSuchTask").unwrap();
    assert_eq!((d.pending, d.live_workers()), (0, 0));
    let d = probe("PSProve").unwrap();
    assert_eq!(
        (d.pending, d.completed_1h, d.completed_15m),
        (3, 4, 4),
        "{d:?}"
    );
    assert_eq!(
        d.notes,
        vec!["5 completion(s) of 1 machine(s) dated up to 178 min past the database's clock (a worker's clock runs ahead?): not counted until then".to_string()]
    );
}
