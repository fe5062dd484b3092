//! Stops and destroys of ours that vast.ai acknowledged and that did not take, and instances
//! a failed create made whose destroy failed (`fleet::reconcile::Undone`): the instance is
//! still listed, billing. Each pass that finds one says so at error (and to the agent), and
//! sends the same call again: the decision was made and acknowledged, so sending it again is
//! no new decision, whoever made it and whatever the pause says (a panic button's destroy
//! that did not take is the case that matters most). `doctor`'s `vast` check names them
//! (`store::actions::undone_ends`, `open_orphans`).

use anyhow::Result;
use rusqlite::Connection;

use crate::clock::{human_duration, Millis};
use crate::fleet::reconcile::Undone;
use crate::fleet::LABEL_CHARS;
use crate::services::Services;
use crate::store::actions::{self, NewAction};
use crate::store::events;
use crate::text::{clip, quote};

/// The line for one undone call, as the journal, the agent and `doctor` say it.
pub fn line(u: &Undone, now: Millis) -> String {
    let what = if u.orphan {
        "was made {ago} ago by a create vast.ai answered as failed, and its destroy failed: vast.ai lists it"
    } else if u.kind == "destroy" {
        "was destroyed by us {ago} ago and vast.ai acknowledged it, but vast.ai still lists it"
    } else {
        "was stopped by us {ago} ago and vast.ai acknowledged it, but vast.ai still lists it"
    };
    format!(
        "instance {} {} {} {}{}: it bills",
        u.vast_id,
        quote(&u.label, LABEL_CHARS),
        what.replace("{ago}", &human_duration(now - u.at)),
        u.state,
        u.dph
            .map(|d| format!(" at ${}/h", crate::fleet::num(d)))
            .unwrap_or_default()
    )
}

/// Say each undone call (error line, an event of this pass) and send it again, recorded
/// in the action ledger with what vast.ai answered. Database errors are the pass's.
pub fn send_again(
    conn: &Connection,
    services: &Services,
    run_id: i64,
    undone: &[Undone],
    now: Millis,
) -> Result<()> {
    for u in undone {
        let said = line(u, now);
        let Some(vast) = services.vast.as_ref() else {
            continue;
        };
        vast.ask_again();
        let id = u.vast_id as u64;
        let answer = if u.kind == "destroy" {
            vast.destroy_instance(id)
        } else {
            vast.stop_instance(id)
        };
        let (outcome, detail, sent) = match &answer {
            Ok(()) | Err(crate::vast::VastError::NoSuchInstance(_)) => {
                ("ok", "sent again; acknowledged".to_string(), "sent again")
            }
            Err(e) => (
                "failed",
                clip(&e.to_string(), 300),
                "sent again, and it failed",
            ),
        };
        let full = format!("{said}: the {} {sent}", u.kind);
        crate::journal::eprint(crate::journal::ERR, &format!("run {run_id}: {full}"));
        events::insert_claimed(conn, run_id, 1, "lifecycle", &full, now)?;
        actions::insert(
            conn,
            &NewAction {
                run_id: Some(run_id),
                kind: &u.kind,
                outcome,
                actor: "fleetagent",
                instance_id: Some(u.vast_id),
                label: Some(&u.label),
                dph: u.dph,
                reason: Some(&if u.orphan {
                    "made by a create vast.ai answered as failed; its destroy failed".to_string()
                } else {
                    format!(
                        "vast.ai acknowledged the {} {} ago, but still lists the instance {}",
                        u.kind,
                        human_duration(now - u.at),
                        u.state
                    )
                }),
                detail: Some(&detail),
                ..Default::default()
            },
            now,
        )?;
    }
    Ok(())
}
