//! `bench probe`: the harmonydb probe against a throwaway PostgreSQL holding Curio's real
//! schema (tests/fixtures/curio_real_schema.sql), with two million `harmony_task_history`
//! rows against none, the same live cluster in both; then the plan of the history
//! statement, whose range Curio's index `harmony_task_history_work_index` finds (it reads
//! `work_start` from the 6 hours' rows only).

use std::time::{Duration, Instant};

use fleetagent::demand::harmonydb::HISTORY_STATEMENT;
use fleetagent::demand::{DemandProbe, HarmonyDbProbe, HISTORY_WINDOW_SECS};

use crate::pg::{self, TestDb};
use crate::{median, ms};

const HISTORY_ROWS: u32 = 2_000_000;
/// Spread over 60 days (about 1 400 rows an hour), so the 6 h window holds about 8 300.
const HISTORY_DAYS: u32 = 60;
const ROUNDS: usize = 15;

/// The same live cluster in both databases: 20 machines (16 PSProve workers), tasks, queue.
fn seed(db: &mut TestDb) {
    db.exec(
        "UPDATE curio.proofshare_meta SET enabled = true, pprice = '120000000000000000';
         INSERT INTO curio.harmony_machines (id, host_and_port, last_contact, cpu, ram, gpu)
           SELECT g, '10.0.0.' || g || ':12300', now() - interval '20 seconds', 32, 137438953472, 1
           FROM generate_series(1, 20) AS g;
         INSERT INTO curio.harmony_machine_details (machine_id, machine_name, tasks)
           SELECT g, 'fleetagent-' || g,
                  CASE WHEN g <= 16 THEN 'PSAutoSettle,PShareSubmit,PSProve,bg:PShareRequest'
                       ELSE 'PoRep,WdPost' END
           FROM generate_series(1, 20) AS g;
         WITH t AS (
           INSERT INTO curio.harmony_task (name, owner_id, posted_time, update_time, added_by)
             SELECT 'PSProve', CASE WHEN g <= 16 THEN g END, now() - interval '2 minutes', now(), 1
             FROM generate_series(1, 24) AS g
             RETURNING id)
         INSERT INTO curio.proofshare_queue (service_id, obtained_at, request_cid, compute_task_id)
           SELECT id, now() - interval '3 minutes', 'bafy-' || id, id FROM t;",
    );
}

/// Two million attempts over 60 days by 40 machines: mostly PSProve successes, some
/// failures, and other task types.
fn load_history(db: &mut TestDb) {
    db.exec(&format!(
        "INSERT INTO curio.harmony_task_history
           (task_id, name, posted, work_start, work_end, result, err, completed_by_host_and_port)
         SELECT g,
                CASE WHEN g % 10 < 8 THEN 'PSProve' WHEN g % 10 = 8 THEN 'PShareSubmit' ELSE 'PoRep' END,
                e - interval '7 minutes', e - interval '5 minutes', e,
                g % 17 <> 0,
                CASE WHEN g % 17 = 0 THEN 'error: no task found' END,
                '10.0.' || (g % 40) || '.1:12300'
         FROM generate_series(1, {HISTORY_ROWS}) AS g,
              LATERAL (SELECT now() - make_interval(secs => (g::float8 / {HISTORY_ROWS})
                                                        * {HISTORY_DAYS} * 86400) AS e) AS w;"
    ));
    // VACUUM sets the visibility map, without which an index-only scan still visits the heap.
    db.exec("VACUUM ANALYZE curio.harmony_task_history");
    db.exec("VACUUM ANALYZE");
}

fn probe(db: &TestDb) -> HarmonyDbProbe {
    HarmonyDbProbe::new(db.url(), "PSProve".into(), 150, 60, Duration::from_secs(30))
}

pub fn bench_probe() {
    let mut empty = pg::fresh_db();
    let mut big = pg::fresh_db();
    seed(&mut empty);
    seed(&mut big);
    empty.exec("VACUUM ANALYZE");
    let t = Instant::now();
    load_history(&mut big);
    println!(
        "probe: loaded {HISTORY_ROWS} harmony_task_history rows over {HISTORY_DAYS} days in {:.1} s (VACUUM ANALYZE done)",
        t.elapsed().as_secs_f64()
    );

    let (p_empty, p_big) = (probe(&empty), probe(&big));
    let a = p_big.probe().unwrap();
    let b = p_empty.probe().unwrap();
    assert_eq!((a.pending, a.running), (b.pending, b.running));
    let (mut te, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let t = Instant::now();
        p_empty.probe().unwrap();
        te.push(t.elapsed());
        let t = Instant::now();
        p_big.probe().unwrap();
        tb.push(t.elapsed());
    }
    let (me, mb) = (median(te), median(tb));
    println!(
        "probe: one reading (connect, 9 statements, close), median of {ROUNDS}: empty history {:.2} ms, {HISTORY_ROWS} rows {:.2} ms -> {:.2}x ({} machines in the window's history, {} completions in 1 h)",
        ms(me),
        ms(mb),
        mb.as_secs_f64() / me.as_secs_f64(),
        a.history.len(),
        a.completed_1h
    );

    let sql = HISTORY_STATEMENT
        .replace("$1", "'PSProve'")
        .replace("$2", &format!("{}", HISTORY_WINDOW_SECS))
        .replace("$3", "3600")
        .replace("$4", "900");
    let mut client = big.connect();
    let row = client
        .query_one(
            "SELECT relpages, relallvisible FROM pg_class WHERE oid = 'curio.harmony_task_history'::regclass",
            &[],
        )
        .unwrap();
    println!(
        "probe: harmony_task_history: {} pages, {} all-visible",
        row.get::<_, i32>(0),
        row.get::<_, i32>(1)
    );
    let plan: Vec<String> = client
        .query(&format!("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    println!("probe: EXPLAIN ANALYZE of the history statement on {HISTORY_ROWS} rows:");
    for line in &plan {
        println!("    {line}");
    }
    // Curio has two indexes leading on work_end (harmony_task_history_work_index and
    // harmony_task_history_recent_task_result_idx): either bounds the scan to the window.
    let index = plan.iter().find_map(|l| {
        let at = l.find("Scan using harmony_task_history_")? + "Scan using ".len();
        l[at..].split_whitespace().next().map(str::to_string)
    });
    match index {
        Some(i) => {
            println!("probe: history statement finds the window's rows on Curio's index {i}")
        }
        None => println!(
            "probe: history statement does NOT use an index of Curio's (a sequential scan)"
        ),
    }
}
