//! Instances a copy of this database launched: one state dir copied to another host (a move
//! whose old host was not stopped, a restore tried beside the running install) gives the same
//! install id and the same run ids on both. Each copy adopts the other's instances (ours by
//! label), so the caps hold over both, but two passes that decide at once both rent, and each
//! stops what the other launched. Nothing else tells the operator: this is the one trace the
//! other copy leaves, an instance adopted under a label of a run this database gave, which
//! this database never launched.

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::clock::Millis;

/// One instance of ours that a copy of this database launched, by the evidence above.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub label: String,
    pub vast_id: Option<i64>,
    /// The run its label names: a run of this database too.
    pub run: i64,
    /// When it was rented (vast.ai's start date, as the adoption recorded it).
    pub rented_at: Millis,
}

/// Live adopted instances rented since `since` whose label carries our install id and a run this
/// database gave, while no launch of ours under that label went through as that instance
/// (both copies give the same label in the same run: the second instance is adopted beside
/// ours). A database restored without its `run.lock` over a fleet still listed can show the
/// same (it gave the run again): the lines say so.
pub fn launched_by_a_copy(
    conn: &Connection,
    prefix: &str,
    install_id: &str,
    since: Millis,
) -> Result<Vec<Copied>> {
    let mut stmt = conn.prepare_cached(
        "SELECT label, vast_id, created_at FROM instances
          WHERE adopted = 1 AND gone_at IS NULL AND created_at >= ?1
          ORDER BY created_at, label",
    )?;
    let adopted = stmt
        .query_map(params![since], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Option<i64>>(1)?,
                r.get(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<(String, Option<i64>, Millis)>>>()?;
    let with_id = format!("{prefix}-{install_id}-r");
    let mut out = Vec::new();
    for (label, vast_id, rented_at) in adopted {
        let base = label.split('~').next().unwrap_or(&label);
        if !base.trim().starts_with(&with_id) {
            continue;
        }
        let Some(run) = crate::fleet::state::label_run(base, prefix, install_id) else {
            continue;
        };
        let copied: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)
                AND NOT EXISTS (SELECT 1 FROM actions WHERE label = ?2 AND instance_id IS ?3)",
            params![run, base.trim(), vast_id],
            |r| r.get(0),
        )?;
        if copied {
            out.push(Copied {
                label,
                vast_id,
                run,
                rented_at,
            });
        }
    }
    Ok(out)
}

/// The line that names them (the journal's and `doctor`'s).
pub fn line(copied: &[Copied], install_id: &str) -> String {
    let named: Vec<String> = copied
        .iter()
        .take(5)
        .map(|c| {
            format!(
                "{} (instance {}, run {})",
                crate::text::quote(&c.label, crate::fleet::LABEL_CHARS),
                c.vast_id.map_or("?".to_string(), |id| id.to_string()),
                c.run
            )
        })
        .collect();
    let more = if copied.len() > named.len() {
        format!(" and {} more", copied.len() - named.len())
    } else {
        String::new()
    };
    format!(
        "{} instance(s) under this install's id ({install_id}) were launched by runs this database gave but not by this database: {}{more}; another copy of this state dir is running (copied to another host, or a restore beside the running install), and each copy rents for the same need; a restore without its run.lock gives the same sign once",
        copied.len(),
        named.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn adopt(s: &Store, label: &str, vast_id: i64, at: Millis) {
        s.conn
            .execute(
                "INSERT INTO instances (label, vast_id, state, created_at, state_since, adopted)
                 VALUES (?1, ?2, 'proving', ?3, ?3, 1)",
                params![label, vast_id, at],
            )
            .unwrap();
    }

    #[test]
    fn only_instances_of_our_runs_that_we_never_launched() {
        let s = Store::open_memory(1).unwrap();
        let run =
            crate::store::runs::create(&s.conn, 1, 1, 1, crate::store::runs::StartedBy::Tick, 1)
                .unwrap();
        // Ours: launched by run 1 as instance 10; the copy's twin under the same label (11),
        // and another of its launches in run 1 (12).
        s.conn
            .execute(
                "INSERT INTO actions (run_id, kind, outcome, actor, instance_id, label, created_at)
                 VALUES (?1, 'launch', 'ok', 'rules', 10, 'fa-abc-r1-0000aaaa', 1)",
                params![run],
            )
            .unwrap();
        adopt(&s, "fa-abc-r1-0000aaaa~11", 11, 5);
        adopt(&s, "fa-abc-r1-0000bbbb", 12, 5);
        // Not a copy's: a run this database never gave (restored over newer runs), another
        // install's id, a label made before install ids, one given by hand, one seen earlier.
        adopt(&s, "fa-abc-r7-0000cccc", 13, 5);
        adopt(&s, "fa-xyz-r1-0000dddd", 14, 5);
        adopt(&s, "fa-r1-0000eeee", 15, 5);
        adopt(&s, "fa-spare", 16, 5);
        adopt(&s, "fa-abc-r1-0000ffff", 17, 1);
        let found = launched_by_a_copy(&s.conn, "fa", "abc", 2).unwrap();
        let ids: Vec<Option<i64>> = found.iter().map(|c| c.vast_id).collect();
        assert_eq!(ids, vec![Some(11), Some(12)], "{found:?}");
        assert_eq!(found[0].run, 1);
        let line = line(&found, "abc");
        assert!(
            line.starts_with("2 instance(s) under this install's id (abc) were launched by runs this database gave but not by this database: \"fa-abc-r1-0000aaaa~11\" (instance 11, run 1)"),
            "{line}"
        );
    }
}
