//! Which runs made the fleet that vast.ai lists: run ids that go on past the labels of a fleet
//! this database is older than, and the instances a copy of this database rented
//! (`fleet::copies`, pure). `observe` asks each pass; `doctor` asks for the copies.

use anyhow::Result;

use crate::clock::Millis;
use crate::config::Config;
use crate::store::{actions, instances, ops};
use crate::vast::Instance;

/// Run ids never go back below a run that labels on vast.ai carry: a database restored from
/// a backup is older than the fleet, and the runs after the backup are not in it. The next
/// run id moves past the highest run of our listed labels (this pass's id was given before
/// the listing was read: its launches take labels no instance carries, `policy::launch`).
/// The line that says so, when a label showed it, with its priority: an error when that
/// instance was rented after this database's last listing that worked (another copy of the
/// state dir running further on; from then on both copies give the same run ids, and
/// `fleet::copies` names each rental of the other's, `doctor` for a day).
pub fn continue_run_ids(
    conn: &rusqlite::Connection,
    config: &Config,
    listing: &[Instance],
    run_id: i64,
    now: Millis,
) -> Result<Option<(u8, String)>> {
    let install_id = ops::install_id(conn)?;
    let prefix = &config.vast.label_prefix;
    let Some((last, label, rented)) = listing
        .iter()
        .filter_map(|i| {
            let label = i.label.as_deref()?;
            Some((
                crate::fleet::state::label_run(label, prefix, &install_id)?,
                label,
                i.start_date.map(|s| (s * 1000.0) as Millis),
            ))
        })
        .max_by_key(|(run, _, _)| *run)
    else {
        return Ok(None);
    };
    // This pass has launched nothing yet (one observation per pass): a label of its own run
    // or later is from runs this database never saw.
    if last < run_id {
        return Ok(None);
    }
    if crate::lock::next_past(last, run_id).is_none() {
        // No run of ours could have named it (a label given by hand or by another tool in our
        // shape): going past it would spend the id space.
        log::warn!(
            "vast.ai lists {} of run {last}, far past this pass (run {run_id}): no run of this install gave it; run ids are left as they are",
            crate::text::quote(label, crate::fleet::LABEL_CHARS)
        );
        return Ok(None);
    }
    crate::store::runs::continue_past(conn, last)?;
    let label = crate::text::quote(label, crate::fleet::LABEL_CHARS);
    // Rented after this database's last listing that worked: not a fleet this database is
    // older than (it listed since the backup or the init), but another copy of the state dir
    // that has run further (a walkthrough: a copy left running on the old host after a move,
    // read here as a restore, doctor green). Under [ha] the lease and its fences decide who
    // acts, and a takeover sees the last leader's newest labels.
    let listed = ops::vast_health(conn)?.ok_at;
    if let (Some(listed), Some(rented), false) = (listed, rented, config.ha.enabled) {
        if rented > listed {
            let line = format!(
                "vast.ai lists {label} of run {last}, rented {} ago, after this database's last listing ({} ago), and this pass is run {run_id}: another copy of this state dir is running further on (copied to another host and not stopped there), or this database was restored without its run.lock; run ids go on from {}",
                crate::clock::human_duration((now - rented).max(0)),
                crate::clock::human_duration((now - listed).max(0)),
                last + 1
            );
            return Ok(Some((crate::journal::ERR, line)));
        }
    }
    Ok(Some((
        crate::journal::WARNING,
        format!(
            "vast.ai lists {label} of run {last}, and this pass is run {run_id}: the database is older than the fleet (restored from a backup, or made afresh with `init --install-id`); run ids go on from {}",
            last + 1
        ),
    )))
}

/// Adopted instances rented since `since` that a copy of this database launched
/// (`fleet::copies`), live ones only or (`with_gone`) also those gone since: the pass that
/// adopts one says so (`current`: its run), `doctor` names them for a day, gone or not (a
/// walkthrough: the copy destroyed the instance it rented, as copies stop each other's
/// surplus, and the check went green within minutes with both copies running). An instance rented before this database was made is none of its runs'
/// (a fresh `init --install-id` adopting the fleet its lost database launched: a walkthrough
/// saw that recovery called another copy running, for a day); a copy shares the database's
/// birth, and rents after it.
pub fn launched_by_a_copy(
    conn: &rusqlite::Connection,
    prefix: &str,
    install_id: &str,
    since: Millis,
    current: Option<i64>,
    with_gone: bool,
) -> Result<Vec<crate::fleet::copies::Copied>> {
    let mut out = Vec::new();
    let since = since.max(crate::store::ops::born_at(conn)?.unwrap_or(0));
    for (label, vast_id, rented_at) in instances::adopted_live(conn, since, with_gone)? {
        let Some((base, run)) = crate::fleet::copies::our_run(&label, prefix, install_id) else {
            continue;
        };
        let launches = actions::launches_of_label(conn, run, &base, current)?;
        if crate::fleet::copies::is_copy(&launches, vast_id) {
            out.push(crate::fleet::copies::Copied {
                label,
                vast_id,
                run,
                rented_at,
            });
        }
    }
    Ok(out)
}
