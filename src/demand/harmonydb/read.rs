//! The statements of one HarmonyDB reading, all inside one read-only REPEATABLE READ
//! transaction (docs/demand.md "What is read").
//!
//! Grants: the first statement asks the catalog which of the probe's tables exist and which
//! this role may SELECT (`has_table_privilege`: a grant of columns alone is named with the
//! table's GRANT; accepting any column grant failed a whole reading on an optional table
//! granted all but a later column, a re-test), before any of them is touched. A missing
//! required table (`harmony_*`) or grant is an error naming it; a missing optional one
//! (`proofshare_*`) leaves its fields None and adds a note naming the grant. Checking first,
//! rather than trying each optional statement under a SAVEPOINT, costs one statement instead
//! of two more round trips per optional part, and the note can name the grant exactly.

use postgres::{Row, Transaction};

use super::column::get;

use super::super::{Demand, RequestLoop, Worker, WorkerHistory, HISTORY_WINDOW_SECS};

/// The completion windows of [`Demand::completed_1h`] and [`Demand::completed_15m`].
const HOUR_SECS: f64 = 3600.0;
const QUARTER_SECS: f64 = 900.0;

/// The Curio task of ProofShare proving. The ProofShare tables are read only for it: a
/// probe of another task (`demand.task = "PoRep"`) has no queue, switch or payments.
const PSPROVE: &str = "PSProve";

/// The tables read, in the order of [`Access::tables`]: the first four are required.
const TABLES: [&str; 7] = [
    "harmony_task",
    "harmony_machines",
    "harmony_machine_details",
    "harmony_task_history",
    "proofshare_queue",
    "proofshare_meta",
    "proofshare_provider_payments",
];
const REQUIRED: usize = 4;

/// Columns that Curio's migrations added after the tables the probe needs, as
/// (table, column, the migration that added it): a Curio older than the migration lacks the
/// column, and the part of the reading it feeds is left out with a note, the rest read.
const LATER_COLUMNS: [(&str, &str, &str); 2] = [
    (
        "harmony_machines",
        "unschedulable",
        "20250111-machine-maintenance",
    ),
    ("proofshare_queue", "was_pow", "20250620-proofshare-pow"),
];

/// Per table: does it exist in schema `curio`, may this role SELECT it; and per column of
/// [`LATER_COLUMNS`] ($2 tables, $3 columns): does it exist. Read from the catalog, which
/// needs no grant (so it works even without USAGE on the schema).
const ACCESS: &str = "
SELECT
  current_user::text,
  coalesce(has_schema_privilege(n.oid, 'USAGE'), false),
  n.oid IS NOT NULL,
  array_agg(c.oid IS NOT NULL ORDER BY t.ord),
  array_agg(coalesce(has_table_privilege(c.oid, 'SELECT'), false) ORDER BY t.ord),
  (SELECT array_agg(EXISTS (
            SELECT 1 FROM pg_catalog.pg_attribute a
            JOIN pg_catalog.pg_class ac ON ac.oid = a.attrelid
            JOIN pg_catalog.pg_namespace an ON an.oid = ac.relnamespace
            WHERE an.nspname = 'curio' AND ac.relname = l.tbl AND a.attname = l.col
              AND a.attnum > 0 AND NOT a.attisdropped) ORDER BY l.ord)
   FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS l(tbl, col, ord))
FROM unnest($1::text[]) WITH ORDINALITY AS t(name, ord)
LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = 'curio'
LEFT JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.name
GROUP BY n.oid";

/// Tasks of the probe's type: pending, claimed by a live machine, claimed by a machine whose
/// heartbeat stopped (or whose row is gone), and of the not-live ones the orphans (no queue
/// row that is not compute_done points at them) with the oldest orphan's age. `{queue}` is
/// [`QUEUED_TASKS`] where the queue is read, else [`NO_QUEUE`] (no task is an orphan then: a
/// probe of another task, or a Curio without ProofShare).
/// The queue is joined once (a hash join), not asked per task: a correlated test per task
/// took 10 s on 20,000 tasks, past `demand.timeout_secs`, when the queue is what grows
/// while every worker is dead.
const TASKS: &str = "
SELECT
  count(*) FILTER (WHERE t.owner_id IS NULL),
  count(*) FILTER (WHERE t.owner_id IS NOT NULL AND live),
  count(*) FILTER (WHERE t.owner_id IS NOT NULL AND NOT live),
  count(*) FILTER (WHERE NOT live AND orphan),
  extract(epoch FROM now() - min(t.posted_time) FILTER (WHERE NOT live AND orphan))::float8
FROM curio.harmony_task t
LEFT JOIN curio.harmony_machines m ON m.id = t.owner_id
LEFT JOIN ({queue}) qt ON qt.id = t.id
CROSS JOIN LATERAL (
  SELECT t.owner_id IS NOT NULL
         AND coalesce(m.last_contact >= now() - make_interval(secs => $2), false) AS live,
         {orphan} AS orphan
) l
WHERE t.name = $1";

/// The tasks a queue row that is not compute_done points at (a task without one is an
/// orphan).
const QUEUED_TASKS: &str = "SELECT DISTINCT compute_task_id AS id FROM curio.proofshare_queue
                            WHERE NOT compute_done AND compute_task_id IS NOT NULL";
const NO_QUEUE: &str = "SELECT NULL::bigint AS id WHERE false";

/// Successful completions per machine inside the history window ($2), with those of the
/// last hour ($3) and quarter ($4), the ages of the first and last, and the seconds spent
/// proving them. The range is found on one of Curio's indexes leading on work_end
/// (`harmony_task_history_work_index`, `harmony_task_history_recent_task_result_idx`), and
/// `work_start` read from the window's rows only (6 hours, however long the table grows).
/// Curio writes `work_end` from the worker's own clock: a row dated more than [`AHEAD`]'s
/// two minutes past the database's now is left out (a worker 3 hours ahead had each of its
/// last 3 hours' proofs counted in the last hour and in the last quarter: 40/h read for 20).
pub const HISTORY: &str = "
SELECT
  completed_by_host_and_port::text,
  count(*),
  count(*) FILTER (WHERE work_end > now() - make_interval(secs => $3)),
  count(*) FILTER (WHERE work_end > now() - make_interval(secs => $4)),
  extract(epoch FROM now() - min(work_end))::float8,
  extract(epoch FROM now() - max(work_end))::float8,
  extract(epoch FROM sum(work_end - work_start))::float8
FROM curio.harmony_task_history
WHERE work_end > now() - make_interval(secs => $2) AND work_end <= now() + interval '2 minutes'
  AND name = $1 AND result
GROUP BY completed_by_host_and_port
ORDER BY completed_by_host_and_port";

/// Completions dated past the database's now by more than two minutes (a worker's clock
/// ahead), how many machines wrote them, and the furthest ahead: left out of [`HISTORY`]
/// and said in a note. A range on the same index, empty on a cluster whose clocks agree.
const AHEAD: &str = "
SELECT count(*), count(DISTINCT completed_by_host_and_port),
       extract(epoch FROM max(work_end) - now())::float8
FROM curio.harmony_task_history
WHERE work_end > now() + interval '2 minutes' AND name = $1 AND result";

/// Live machines whose comma-separated task list holds the task as a whole item (Curio
/// writes it without surrounding commas, so a plain `LIKE '%,name,%'` misses the first and
/// last item), with how many of those tasks each one owns and the GPUs it registered.
/// `{cordoned}` is `coalesce(m.unschedulable, false)`, or `false` on a Curio without the column.
/// The owned tasks are counted once for all machines (Curio has no index on
/// `harmony_task.owner_id`: a count per machine scanned the table once per live machine,
/// 15 s for 1,000 machines and 300,000 tasks, past `demand.timeout_secs`; 0.1 s so).
const WORKERS: &str = "
SELECT
  coalesce(d.machine_name, ''),
  m.host_and_port::text,
  {cordoned},
  coalesce(o.n, 0),
  coalesce(m.gpu, 0)::float8
FROM curio.harmony_machines m
JOIN curio.harmony_machine_details d ON d.machine_id = m.id
LEFT JOIN (SELECT owner_id, count(*) AS n FROM curio.harmony_task
           WHERE name = $1 AND owner_id IS NOT NULL GROUP BY owner_id) o ON o.owner_id = m.id
WHERE m.last_contact >= now() - make_interval(secs => $2)
  AND $1 = ANY (SELECT btrim(item) FROM unnest(string_to_array(d.tasks, ',')) AS item)
ORDER BY 1, 2";

/// Live machines whose task list lacks the task (a cluster's other nodes; or an instance of
/// ours whose image runs Curio without it, which could never take the work).
const TASKLESS: &str = "
SELECT coalesce(d.machine_name, ''), m.host_and_port::text
FROM curio.harmony_machines m
JOIN curio.harmony_machine_details d ON d.machine_id = m.id
WHERE m.last_contact >= now() - make_interval(secs => $2)
  AND NOT ($1 = ANY (SELECT btrim(item)
                       FROM unnest(string_to_array(coalesce(d.tasks, ''), ',')) AS item))
ORDER BY 1, 2
LIMIT 500";

/// The ProofShare switch, the ask price, and the request loop: its task, and whether a
/// machine with a live heartbeat owns it.
const META: &str = "
SELECT
  p.enabled,
  p.pprice,
  p.request_task_id IS NOT NULL,
  coalesce(m.last_contact >= now() - make_interval(secs => $1), false)
FROM curio.proofshare_meta p
LEFT JOIN curio.harmony_task t ON t.id = p.request_task_id
LEFT JOIN curio.harmony_machines m ON m.id = t.owner_id
WHERE p.singleton";

/// The queue: waiting rows that count as work ($2: ProofShare enabled or unknown; younger
/// than $1 minutes) and the others with the oldest one's age, rows with a task, Curio's own
/// backlog (exactly its query: not compute_done and the task missing or unowned), and
/// proofs of work obtained in the last hour (`{pow}`: [`POW_1H`], or NULL on a Curio
/// without `was_pow`).
const QUEUE: &str = "
SELECT
  count(*) FILTER (WHERE waiting AND fresh),
  count(*) FILTER (WHERE waiting AND NOT fresh),
  extract(epoch FROM now() - min(q.obtained_at) FILTER (WHERE waiting AND NOT fresh))::float8,
  count(*) FILTER (WHERE NOT q.compute_done AND q.compute_task_id IS NOT NULL),
  count(*) FILTER (WHERE q.compute_done = FALSE
                   AND (q.compute_task_id IS NULL OR t.owner_id IS NULL)),
  {pow}
FROM curio.proofshare_queue q
LEFT JOIN curio.harmony_task t ON t.id = q.compute_task_id
CROSS JOIN LATERAL (
  SELECT NOT q.compute_done AND q.compute_task_id IS NULL AS waiting,
         $2 AND q.obtained_at >= now() - make_interval(mins => $1) AS fresh
) w";

const POW_1H: &str =
    "count(*) FILTER (WHERE q.was_pow AND q.obtained_at >= now() - interval '1 hour')";

const PAYMENTS: &str = "
SELECT count(*) FROM curio.proofshare_provider_payments
WHERE created_at >= now() - interval '1 hour'";

/// What the probe reads, from the configuration.
pub(super) struct Params<'a> {
    /// The server's address without the password, for errors.
    pub shown: &'a str,
    pub task: &'a str,
    pub alive_secs: f64,
    pub waiting_max_age_mins: i32,
}

/// What this role may read.
struct Access {
    role: String,
    /// USAGE on schema curio (true when there is no such schema: the tables are missing).
    schema_usage: bool,
    present: Vec<bool>,
    readable: Vec<bool>,
    /// Per column of [`LATER_COLUMNS`]: present.
    columns: Vec<bool>,
}

impl Access {
    /// Whether `table.column` of [`LATER_COLUMNS`] exists: `Err` with the note that names
    /// what is lost and the migration, when it does not.
    fn column(&self, table: &str, column: &str, lost: &str) -> Result<(), String> {
        let i = LATER_COLUMNS
            .iter()
            .position(|(t, c, _)| *t == table && *c == column);
        match i {
            Some(i) if !(i < self.columns.len() && self.columns[i]) => Err(format!(
                "curio.{table}.{column} does not exist (a Curio before its migration {}): {lost} unknown",
                LATER_COLUMNS[i].2
            )),
            _ => Ok(()),
        }
    }

    fn exists(&self, table: &str) -> bool {
        TABLES
            .iter()
            .position(|t| *t == table)
            .is_some_and(|i| self.present[i])
    }

    fn can(&self, table: &str) -> bool {
        TABLES
            .iter()
            .position(|t| *t == table)
            .is_some_and(|i| self.readable[i])
    }

    /// Why an optional table is not read, naming what is lost and the grant.
    fn note(&self, table: &str, lost: &str) -> Option<String> {
        let i = TABLES.iter().position(|t| *t == table)?;
        if !self.present[i] {
            Some(format!(
                "curio.{table} does not exist (a Curio without ProofShare?): {lost} unknown"
            ))
        } else if !self.readable[i] {
            Some(format!(
                "no SELECT on curio.{table}: {lost} unknown (GRANT SELECT ON curio.{table} TO {})",
                self.role
            ))
        } else {
            None
        }
    }
}

/// Reads every part of [`Demand`]. `Err` is one line naming what failed: a statement, or a
/// column of an unexpected type or NULL (`proofshare_meta.pprice is numeric, expected text`).
pub(super) fn read(tx: &mut Transaction<'_>, p: &Params<'_>) -> Result<Demand, String> {
    let failed = |what: &str, e: postgres::Error| {
        format!(
            "reading {what} from {}: {}",
            p.shown,
            crate::secrets::redact::error_chain(&e)
        )
    };
    let typed = |what: &str, e: String| format!("reading {what} from {}: {e}", p.shown);
    let access = {
        let what = "the catalog (table privileges)";
        let names: Vec<&str> = TABLES.to_vec();
        let tables: Vec<&str> = LATER_COLUMNS.iter().map(|c| c.0).collect();
        let columns: Vec<&str> = LATER_COLUMNS.iter().map(|c| c.1).collect();
        let row = tx
            .query_one(ACCESS, &[&names, &tables, &columns])
            .map_err(|e| failed(what, e))?;
        access(&row).map_err(|e| typed(what, e))?
    };
    required(&access).map_err(|e| format!("{e} (on {})", p.shown))?;
    let proofshare = p.task == PSPROVE;
    if proofshare {
        queue_readable(&access).map_err(|e| format!("{e} (on {})", p.shown))?;
    }
    let mut d = Demand::default();

    let with_queue = proofshare && access.can("proofshare_queue");
    let tasks = if with_queue {
        TASKS
            .replace("{queue}", QUEUED_TASKS)
            .replace("{orphan}", "qt.id IS NULL")
    } else {
        TASKS
            .replace("{queue}", NO_QUEUE)
            .replace("{orphan}", "false")
    };
    // Every table the statement reads is named: a lock held on any of them times it out.
    let what = if with_queue {
        "task counts (curio.harmony_task, harmony_machines, proofshare_queue)"
    } else {
        "task counts (curio.harmony_task, harmony_machines)"
    };
    let row = tx
        .query_one(&tasks, &[&p.task, &p.alive_secs])
        .map_err(|e| failed(what, e))?;
    task_counts(&row, &mut d).map_err(|e| typed(what, e))?;

    let window = HISTORY_WINDOW_SECS as f64;
    let what = "completions (curio.harmony_task_history)";
    let rows = tx
        .query(HISTORY, &[&p.task, &window, &HOUR_SECS, &QUARTER_SECS])
        .map_err(|e| failed(what, e))?;
    for r in &rows {
        let (h, quarter) = history(r).map_err(|e| typed(what, e))?;
        d.completed_1h = d.completed_1h.saturating_add(h.completed_1h.unwrap_or(0));
        d.completed_15m = d.completed_15m.saturating_add(quarter);
        d.history.push(h);
    }
    let what = "completions dated ahead (curio.harmony_task_history)";
    let row = tx
        .query_one(AHEAD, &[&p.task])
        .map_err(|e| failed(what, e))?;
    d.notes
        .extend(ahead_note(&row).map_err(|e| typed(what, e))?);

    let what = "workers (curio.harmony_machines)";
    let cordoned = match access.column("harmony_machines", "unschedulable", "cordoned machines") {
        Ok(()) => "coalesce(m.unschedulable, false)",
        Err(note) => {
            d.notes.push(note);
            "false"
        }
    };
    let workers: Vec<(Worker, f64)> = tx
        .query(
            &WORKERS.replace("{cordoned}", cordoned),
            &[&p.task, &p.alive_secs],
        )
        .map_err(|e| failed(what, e))?
        .iter()
        .map(worker)
        .collect::<Result<_, _>>()
        .map_err(|e| typed(what, e))?;
    if workers.is_empty() && d.history.is_empty() && d.pending + d.running + d.running_stale == 0 {
        misspelt(tx, p).map_err(|e| format!("{e} (on {})", p.shown))?;
    }
    let (workers, no_gpu) = able_to_prove(workers, &d.history, proofshare);
    d.workers = workers;
    d.notes.extend(no_gpu_note(&no_gpu));
    let what = "machines without the task (curio.harmony_machines)";
    for r in tx
        .query(TASKLESS, &[&p.task, &p.alive_secs])
        .map_err(|e| failed(what, e))?
    {
        d.taskless.push(Worker {
            machine_name: get(&r, 0, "harmony_machine_details.machine_name")
                .map_err(|e| typed(what, e))?,
            host_and_port: get(&r, 1, "harmony_machines.host_and_port")
                .map_err(|e| typed(what, e))?,
            ..Default::default()
        });
    }

    if !proofshare {
        return Ok(d);
    }
    if access.can("proofshare_meta") {
        let what = "curio.proofshare_meta";
        let rows = tx
            .query(META, &[&p.alive_secs])
            .map_err(|e| failed(what, e))?;
        match rows.first() {
            Some(r) => meta(r, &mut d).map_err(|e| typed(what, e))?,
            None => d.notes.push(
                "curio.proofshare_meta has no row: proofshare_enabled, request_loop and \
                 ask_price_attofil unknown"
                    .into(),
            ),
        }
    }
    d.notes.extend(access.note(
        "proofshare_meta",
        "proofshare_enabled, request_loop and ask_price_attofil",
    ));

    if with_queue {
        let what = "curio.proofshare_queue";
        let enabled = d.proofshare_enabled.unwrap_or(true);
        let pow = match access.column("proofshare_queue", "was_pow", "pow_1h") {
            Ok(()) => POW_1H,
            Err(note) => {
                d.notes.push(note);
                "NULL::bigint"
            }
        };
        let row = tx
            .query_one(
                &QUEUE.replace("{pow}", pow),
                &[&p.waiting_max_age_mins, &enabled],
            )
            .map_err(|e| failed(what, e))?;
        queue(&row, &mut d).map_err(|e| typed(what, e))?;
    }
    d.notes.extend(access.note(
        "proofshare_queue",
        "ps_waiting, ps_computing, backlog, orphan_tasks, stale_waiting and pow_1h",
    ));

    if access.can("proofshare_provider_payments") {
        let what = "curio.proofshare_provider_payments";
        let row = tx.query_one(PAYMENTS, &[]).map_err(|e| failed(what, e))?;
        d.paid_1h = Some(count(get(
            &row,
            0,
            "count of proofshare_provider_payments",
        )?));
    }
    d.notes
        .extend(access.note("proofshare_provider_payments", "paid_1h"));
    Ok(d)
}

/// A task name Curio has in another case than `demand.task` ("psprove" for `PSProve`): Curio's
/// names are case-sensitive, so the reading would be a clean zero, no worker and no work,
/// and the rules would seed a fleet for a cluster whose queue they cannot see (a
/// walkthrough). Asked only when nothing of the task was found: the machines' task lists
/// and the tasks.
const MISSPELT: &str = "
SELECT name FROM (
  SELECT btrim(item) AS name
  FROM curio.harmony_machine_details d, unnest(string_to_array(coalesce(d.tasks, ''), ',')) AS item
  UNION ALL
  SELECT name FROM curio.harmony_task
) n
WHERE lower(name) = lower($1) AND name <> $1
LIMIT 1";

fn misspelt(tx: &mut Transaction<'_>, p: &Params<'_>) -> Result<(), String> {
    let rows = tx.query(MISSPELT, &[&p.task]).map_err(|e| {
        format!(
            "reading the task names (curio.harmony_machine_details, harmony_task): {}",
            crate::secrets::redact::error_chain(&e)
        )
    })?;
    match rows.first() {
        Some(r) => {
            let name: String = get(r, 0, "a task name")?;
            Err(format!(
                "demand.task = {:?} names no Curio task, but Curio has {name:?} (task names are case-sensitive): set demand.task = {name:?}",
                p.task
            ))
        }
        None => Ok(()),
    }
}

// One function per statement's row: every column read with its name (`column::get`).

fn ahead_note(row: &Row) -> Result<Option<String>, String> {
    let n = count(get(row, 0, "count of completions dated ahead")?);
    let machines = count(get(row, 1, "count of machines dating completions ahead")?);
    let furthest: Option<f64> = get(row, 2, "harmony_task_history.work_end (the furthest ahead)")?;
    Ok((n > 0).then(|| {
        format!(
            "{n} completion(s) of {machines} machine(s) dated up to {} min past the database's clock (a worker's clock runs ahead?): not counted until then",
            (furthest.unwrap_or(0.0) / 60.0).ceil() as u64
        )
    }))
}

fn task_counts(row: &Row, d: &mut Demand) -> Result<(), String> {
    d.pending = count(get(row, 0, "count of pending harmony_task rows")?);
    d.running = count(get(row, 1, "count of running harmony_task rows")?);
    d.running_stale = count(get(row, 2, "count of stale-owned harmony_task rows")?);
    d.orphan_tasks = count(get(row, 3, "count of orphan harmony_task rows")?);
    d.orphan_oldest_secs =
        get::<Option<f64>>(row, 4, "harmony_task.posted_time (the oldest orphan's age)")?.map(secs);
    Ok(())
}

/// One machine's history, and its completions of the last quarter hour.
fn history(r: &Row) -> Result<(WorkerHistory, u32), String> {
    let h = WorkerHistory {
        host_and_port: get(r, 0, "harmony_task_history.completed_by_host_and_port")?,
        proofs: count(get(r, 1, "count of harmony_task_history rows")?),
        first_end_secs_ago: secs(get(
            r,
            4,
            "harmony_task_history.work_end (the first's age)",
        )?),
        last_end_secs_ago: secs(get(r, 5, "harmony_task_history.work_end (the last's age)")?),
        busy_secs: get::<Option<f64>>(r, 6, "harmony_task_history.work_start (time proving)")?
            .map(secs),
        completed_1h: Some(count(get(
            r,
            2,
            "count of harmony_task_history rows (hour)",
        )?)),
    };
    let quarter = count(get(r, 3, "count of harmony_task_history rows (quarter)")?);
    Ok((h, quarter))
}

/// A worker and the GPUs its machine registered (`harmony_machines.gpu`).
fn worker(r: &Row) -> Result<(Worker, f64), String> {
    let w = Worker {
        machine_name: get(r, 0, "harmony_machine_details.machine_name")?,
        host_and_port: get(r, 1, "harmony_machines.host_and_port")?,
        cordoned: get(r, 2, "harmony_machines.unschedulable")?,
        running: count(get(r, 3, "count of the machine's harmony_task rows")?),
    };
    Ok((w, get(r, 4, "harmony_machines.gpu")?))
}

/// The machines that can take PSProve work, and those that list it but cannot. Curio lists
/// every task of an enabled subsystem on every node (`EnableProofShare` puts PSProve beside
/// the request loop on a node without a GPU), while PSProve costs a GPU (`task_prove.go`):
/// such a node never takes the work, and counting it as a live worker hid WORKERS DEAD
/// while every GPU worker was dead. A machine with no GPU registered still counts while it
/// owns a PSProve task or proved one inside the history window (Curio's cuzk proves with no
/// GPU cost; a devnet too). Another task than PSProve: every machine counts.
fn able_to_prove(
    workers: Vec<(Worker, f64)>,
    history: &[WorkerHistory],
    proofshare: bool,
) -> (Vec<Worker>, Vec<Worker>) {
    let proved = |w: &Worker| {
        history
            .iter()
            .any(|h| h.host_and_port == w.host_and_port && h.proofs > 0)
    };
    let (able, unable): (Vec<_>, Vec<_>) = workers
        .into_iter()
        .partition(|(w, gpu)| !proofshare || *gpu > 0.0 || w.running > 0 || proved(w));
    (
        able.into_iter().map(|(w, _)| w).collect(),
        unable.into_iter().map(|(w, _)| w).collect(),
    )
}

/// How the note on machines that list PSProve with no GPU begins: every node with ProofShare
/// enabled has one (the request loop's), so it is what the reading did, not a fault; `doctor`
/// leaves it out of its `curio` check (it was red on every ProofShare cluster).
pub const NO_GPU_NOTE: &str = "no GPU, no PSProve in";

/// The note naming the live machines that list PSProve with no GPU and are not counted.
fn no_gpu_note(machines: &[Worker]) -> Option<String> {
    if machines.is_empty() {
        return None;
    }
    let names = machines.iter().map(|w| {
        let name = if w.machine_name.is_empty() {
            "(no name)"
        } else {
            w.machine_name.as_str()
        };
        format!("{name} ({})", w.host_and_port)
    });
    // The reason first: the observation keeps a note's first 120 characters.
    Some(format!(
        "{NO_GPU_NOTE} {}h, so not workers (they list PSProve but cannot take it): {}",
        HISTORY_WINDOW_SECS / 3600,
        crate::text::first_and_more(names, 3)
    ))
}

fn meta(r: &Row, d: &mut Demand) -> Result<(), String> {
    d.proofshare_enabled = Some(get(r, 0, "proofshare_meta.enabled")?);
    d.ask_price_attofil = Some(get(r, 1, "proofshare_meta.pprice")?);
    let has_task: bool = get(r, 2, "proofshare_meta.request_task_id")?;
    let owned: bool = get(
        r,
        3,
        "harmony_machines.last_contact (the request task's owner)",
    )?;
    d.request_loop = Some(match (has_task, owned) {
        (false, _) => RequestLoop::None,
        (true, true) => RequestLoop::Ok,
        (true, false) => RequestLoop::Stalled,
    });
    Ok(())
}

fn queue(row: &Row, d: &mut Demand) -> Result<(), String> {
    let n = |i: usize, what: &str| -> Result<u32, String> {
        Ok(count(get(
            row,
            i,
            &format!("count of proofshare_queue rows ({what})"),
        )?))
    };
    d.ps_waiting = Some(n(0, "waiting")?);
    d.stale_waiting = n(1, "stale")?;
    d.stale_oldest_secs = get::<Option<f64>>(
        row,
        2,
        "proofshare_queue.obtained_at (the oldest stale row's age)",
    )?
    .map(secs);
    d.ps_computing = Some(n(3, "computing")?);
    d.backlog = Some(n(4, "backlog")?);
    d.pow_1h =
        get::<Option<i64>>(row, 5, "count of proofshare_queue rows (proofs of work)")?.map(count);
    Ok(())
}

fn access(row: &Row) -> Result<Access, String> {
    let schema_usage: bool = get(row, 1, "has_schema_privilege(curio)")?;
    let schema_present: bool = get(row, 2, "pg_namespace (schema curio)")?;
    let mut readable: Vec<bool> = get(row, 4, "has_table_privilege")?;
    if !schema_usage {
        // Without USAGE on the schema no table of it can be read, whatever its grants.
        readable.iter_mut().for_each(|r| *r = false);
    }
    let role: String = get(row, 0, "current_user")?;
    let columns: Option<Vec<bool>> = get(row, 5, "pg_attribute (columns of schema curio)")?;
    Ok(Access {
        columns: columns.unwrap_or_default(),
        role: quote_role(&role),
        schema_usage: schema_usage || !schema_present,
        present: get(row, 3, "pg_class (tables of schema curio)")?,
        readable,
    })
}

/// The required tables, each present and readable; else one line naming the first missing.
fn required(a: &Access) -> Result<(), String> {
    let role = &a.role;
    if !a.schema_usage {
        return Err(format!(
            "no USAGE on schema curio, so no table of it can be read \
             (GRANT USAGE ON SCHEMA curio TO {role})"
        ));
    }
    for (i, table) in TABLES.iter().enumerate().take(REQUIRED) {
        if !a.present[i] {
            return Err(format!(
                "curio.{table} does not exist (is this Curio's HarmonyDB, with schema curio?)"
            ));
        }
        if !a.readable[i] {
            return Err(format!(
                "no SELECT on curio.{table}, which the probe needs \
                 (GRANT SELECT ON curio.{table} TO {role})"
            ));
        }
    }
    Ok(())
}

/// For PSProve, the queue where it exists: ProofShare work is a task with a queue row
/// (DESIGN, "Reading Curio"), so without it no task can be told from an orphan. Read as
/// optional, a lone orphan of 5 hours with no worker alive was WORKERS DEAD and rented 5
/// instances; guessed by age and failures, a real outage was hidden (two walkthroughs): the
/// reading fails naming the grant, and the fleet is held. A Curio without the table (no
/// ProofShare) reads on, with a note.
fn queue_readable(a: &Access) -> Result<(), String> {
    if a.exists("proofshare_queue") && !a.can("proofshare_queue") {
        return Err(format!(
            "no SELECT on curio.proofshare_queue, which the probe needs to tell ProofShare work from orphan tasks (GRANT SELECT ON curio.proofshare_queue TO {})",
            a.role
        ));
    }
    Ok(())
}

/// A role name as a GRANT statement would take it.
fn quote_role(role: &str) -> String {
    if !role.is_empty()
        && role
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !role.starts_with(|c: char| c.is_ascii_digit())
    {
        role.to_string()
    } else {
        format!("\"{}\"", role.replace('"', "\"\""))
    }
}

pub(super) fn count(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// An age in whole seconds; a negative one (a worker clock ahead of the database's) is 0.
fn secs(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        s.round() as u64
    } else {
        0
    }
}
