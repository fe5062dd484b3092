//! Worker identity checks, pure, for `doctor` and `inspect`: two of our instances behind one
//! Curio machine, one instance's label on several live Curio machines, and an instance
//! running past a normal boot with no Curio worker. They read the local table as the last
//! pass left it, and the last reading's live workers.

use std::collections::BTreeMap;

use crate::clock::{human_duration, Millis};
use crate::config::Config;
use crate::store::instances::InstanceRow;
use crate::text::quote;

use super::state::{is_running_state, BOOTED};
use super::LABEL_CHARS;

/// One line per problem, naming the instances and what to do. `workers`: the live workers of
/// the last demand reading (empty when there is none).
pub fn problems(
    rows: &[InstanceRow],
    workers: &[crate::demand::Worker],
    taskless: &[crate::demand::Worker],
    config: &Config,
    now: Millis,
) -> Vec<String> {
    let without = taskless_ours(rows, taskless);
    let mut out: Vec<String> = without.iter().map(|(_, line)| line.clone()).collect();
    out.extend(shared_machines(rows));
    out.extend(one_label_many_machines(rows, workers));
    let told: Vec<&str> = without.iter().map(|(label, _)| label.as_str()).collect();
    let rest: Vec<InstanceRow> = rows
        .iter()
        .filter(|r| !told.contains(&r.label.as_str()))
        .cloned()
        .collect();
    out.extend(no_worker(&rest, workers, config, now));
    out
}

/// Our instances that vast.ai runs and that Curio knows as a live machine whose task list
/// lacks PSProve (matched by name, else by address, as workers are): the image starts Curio
/// without the ProofShare layer, so they never take the work, and every instance more of the
/// same image would not either (a drill saw WORKERS DEAD rent 1 -> 5 such instances, `doctor`
/// green for `policy.stuck_loading_mins`). (label, one line naming it and the fix.)
pub fn taskless_ours(
    rows: &[InstanceRow],
    taskless: &[crate::demand::Worker],
) -> Vec<(String, String)> {
    rows.iter()
        .filter(|r| r.gone_at.is_none() && r.state == BOOTED)
        .filter_map(|r| {
            let label = r.label.split('~').next().unwrap_or(&r.label);
            let by_name = taskless.iter().find(|w| w.machine_name.trim() == label);
            // By address only a machine no other instance of ours is named by: instances on
            // one host share its address.
            let another_ours = |name: &str| {
                rows.iter()
                    .any(|o| o.label != r.label && o.label.split('~').next() == Some(name))
            };
            let m = by_name.or_else(|| {
                let ip = r.public_ip.as_deref().map(str::trim).filter(|ip| !ip.is_empty())?;
                taskless.iter().find(|w| {
                    super::workers::host_of(&w.host_and_port) == ip
                        && !another_ours(w.machine_name.trim())
                })
            })?;
            let what = match r.vast_id {
                Some(id) => format!("instance {id} {}", quote(&r.label, LABEL_CHARS)),
                None => quote(&r.label, LABEL_CHARS),
            };
            Some((
                r.label.clone(),
                format!(
                    "{what} runs Curio machine {} ({}) without PSProve in its task list: it cannot prove, and no instance more of this image would; nothing is launched while so: fix the worker image's layers (CURIO_LAYERS, EnableProofShare; docs/worker-image.md), then destroy it",
                    quote(m.machine_name.trim(), LABEL_CHARS),
                    m.host_and_port.trim()
                ),
            ))
        })
        .collect()
}

/// One instance runs one worker, so a label of ours on two live Curio machines means one of
/// them is not that instance (a label copied into another machine's `CURIO_NODE_NAME`, or a
/// second Curio in the container): its proofs count as ours, its heartbeat keeps a dead
/// instance looking alive. A restarted container's old machine row is not live, so it is
/// not counted here.
pub fn one_label_many_machines(
    rows: &[InstanceRow],
    workers: &[crate::demand::Worker],
) -> Vec<String> {
    rows.iter()
        .filter(|r| r.gone_at.is_none())
        .filter_map(|r| {
            let hosts: Vec<&str> = workers
                .iter()
                .filter(|w| w.machine_name.trim() == r.label)
                .map(|w| w.host_and_port.as_str())
                .collect();
            (hosts.len() > 1).then(|| {
                let hosts = hosts.iter().map(|h| quote(h, 120));
                format!(
                    "{} names {} live Curio machines ({}), and one instance runs one worker: the others are not this instance (its label copied into another machine's CURIO_NODE_NAME, or a second Curio in the container), and their proofs count as ours; find them by host_and_port in Curio's machine list",
                    quote(&r.label, LABEL_CHARS),
                    hosts.len(),
                    crate::text::first_and_more(hosts, 3)
                )
            })
        })
        .collect()
}

/// Curio keys machines on `host_and_port`: two containers with one private IP and port share
/// one machine row (the last to start names it), so one of them is never seen as a worker.
/// Found from the worker address each instance was last matched with.
pub fn shared_machines(rows: &[InstanceRow]) -> Vec<String> {
    let mut by_address: BTreeMap<&str, Vec<&InstanceRow>> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.gone_at.is_none() && is_running_state(r.state))
    {
        if let Some(a) = r.worker_address.as_deref().map(str::trim) {
            by_address.entry(a).or_default().push(r);
        }
    }
    by_address
        .into_iter()
        .filter(|(_, rs)| rs.len() > 1)
        .map(|(address, rs)| {
            let labels: Vec<String> = rs.iter().map(|r| quote(&r.label, LABEL_CHARS)).collect();
            format!(
                "instances {} are behind one Curio machine at {} (Curio keys machines on host_and_port): give each container a unique CURIO_LISTEN, see docs/worker-image.md",
                labels.join(" and "),
                quote(address, 120)
            )
        })
        .collect()
}

/// Running on vast.ai (`booted`: no Curio worker matched) longer than
/// `policy.stuck_loading_mins` since its launch: the worker never registered, or registered
/// under another name or behind another instance's address. Not flagged (the container runs
/// and may be a slow start): reported.
pub fn no_worker(
    rows: &[InstanceRow],
    workers: &[crate::demand::Worker],
    config: &Config,
    now: Millis,
) -> Vec<String> {
    let boot_ms = config.policy.stuck_loading_mins as Millis * 60_000;
    rows.iter()
        .filter(|r| r.gone_at.is_none() && r.state == BOOTED && now - r.created_at > boot_ms)
        .map(|r| {
            let what = match r.vast_id {
                Some(id) => format!("instance {id} {}", quote(&r.label, LABEL_CHARS)),
                None => quote(&r.label, LABEL_CHARS),
            };
            // Otherwise (never had one, or a live one is listed at it): the generic line.
            match lost_address(rows, workers, r) {
                // It had one (a soak: the advice about the image's settings misled).
                Some(addr) => format!(
                    "{what}'s Curio worker ({}) stopped heartbeating {} ago and the container runs on: it is flagged silent and replaced after policy.silent_worker_mins, one a pass while no worker of ours is alive, unless the silent breaker holds (its own line says so); check its logs (a crash, out of memory)",
                    quote(addr, 120),
                    human_duration(now - r.state_since)
                ),
                None => format!(
                    "{what} has run for {} with no Curio worker (past policy.stuck_loading_mins): check its logs, CURIO_NODE_NAME and CURIO_LISTEN, see docs/worker-image.md",
                    human_duration(now - r.created_at)
                ),
            }
        })
        .collect()
}

/// The address of the Curio worker `r` had and lost: its last one (kept while unmatched),
/// when Curio lists no worker there (two of ours behind one IP go unmatched, and a live one
/// there is not lost: a re-test) and no other instance of ours holds it ([`address_taken`]).
pub fn lost_address<'a>(
    rows: &[InstanceRow],
    workers: &[crate::demand::Worker],
    r: &'a InstanceRow,
) -> Option<&'a str> {
    let addr = r.worker_address.as_deref()?.trim();
    let listed = workers.iter().any(|w| w.host_and_port.trim() == addr);
    (!listed && !address_taken(rows, r)).then_some(addr)
}

/// Another live instance of ours is matched to the Curio machine at `r`'s last address (two
/// containers with one CURIO_LISTEN: Curio keeps one machine row): `r` lost its worker to it,
/// which [`problems`] names; it did not die.
pub fn address_taken(rows: &[InstanceRow], r: &InstanceRow) -> bool {
    rows.iter().any(|o| {
        o.label != r.label
            && o.gone_at.is_none()
            && o.worker_address.is_some()
            && o.worker_address == r.worker_address
            && matches!(o.state, super::REGISTERED | super::PROVING)
    })
}

/// Instances of the listing created with another image than `vast.image`, by id.
pub fn other_image(
    listing: Option<&[crate::vast::Instance]>,
    config: &crate::config::Config,
) -> Vec<i64> {
    let image = config.vast.image.as_deref().unwrap_or_default();
    listing
        .unwrap_or_default()
        .iter()
        .filter(|i| i.image_uuid.as_deref().is_some_and(|u| u != image))
        .filter_map(|i| i64::try_from(i.id).ok())
        .collect()
}

/// A new database's pass that finds another install's instances under its prefix: a second
/// install on purpose, or this install's fleet under a lost or moved state dir (the whole
/// dir gone, so no `run.lock` told `run` so; a state dir on a disk that did not mount).
/// Nothing here can tell them apart, and the new install rents for itself under its own
/// caps: the line says how to tell, loud, on the first pass and on every pass after while
/// this database holds no instance of its own (`own_none`: a walkthrough's run 1 could not
/// list vast.ai, and runs 2 and 3 rented beside the old fleet without a word).
pub fn new_beside_another(
    config: &crate::config::Config,
    others: &[crate::store::ops::ForeignInstance],
    run_id: i64,
    own_none: bool,
) -> Option<String> {
    if !(run_id == 1 || own_none) || others.is_empty() {
        return None;
    }
    let ids = crate::store::ops::install_ids_of(others);
    let new = if run_id == 1 {
        "this database is new (run 1)".to_string()
    } else {
        format!("this database is new (run {run_id}, no instance of its own yet)")
    };
    Some(format!(
        "{new}, and vast.ai lists {} instance(s) under vast.label_prefix {:?} of install {}: if they are this install's (a state dir lost, moved, or on a disk that did not mount), stop fleetagent now (this install rents a fleet of its own, under its own caps) and restore the state dir, or start afresh under the old id with `fleetagent init --install-id ID` on an empty one; if this is a second install on purpose, give it its own vast.label_prefix",
        others.len(),
        config.vast.label_prefix,
        ids.join(", ")
    ))
}

/// The line for another fleet on this account proving for this cluster, if any: said at
/// warning each pass it is seen, and to the model (`prompt::observation`).
pub fn rival_line(rivals: &[String]) -> Option<String> {
    (!rivals.is_empty()).then(|| {
        format!(
            "another fleet on this vast.ai account proves for this Curio cluster: {} instance(s) not ours whose labels its workers carry ({}); each agent rents for the whole demand it sees (an emergency is answered twice): run one install per cluster (several hosts: [ha])",
            rivals.len(),
            crate::text::first_and_more(rivals.iter().cloned(), 3)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::fixtures::*;
    use crate::fleet::{DEAD, PROVING, REGISTERED};

    #[test]
    fn two_of_ours_on_one_address_and_a_worker_that_never_came_are_reported() {
        let at = |label: &str, id: i64, state, address: Option<&str>| {
            let mut r = row(label, Some(id), state, 0.4);
            r.worker_address = address.map(String::from);
            r.created_at = NOW - 40 * MIN;
            r
        };
        let rows = vec![
            at("fleetagent-a", 1, PROVING, Some("172.17.0.2:12300")),
            // Its machine row was taken over by a: no worker matched any more.
            at("fleetagent-b", 2, BOOTED, Some("172.17.0.2:12300")),
            at("fleetagent-c", 3, REGISTERED, Some("172.17.0.3:12300")),
            // Dead: its old address says nothing now.
            at("fleetagent-d", 4, DEAD, Some("172.17.0.3:12300")),
        ];
        let c = config();
        let lines = problems(&rows, &[], &[], &c, NOW);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("instances \"fleetagent-a\" and \"fleetagent-b\" are behind one Curio machine at \"172.17.0.2:12300\""),
            "{lines:?}"
        );
        assert!(lines[0].contains("docs/worker-image.md"));
        assert!(
            lines[1]
                .starts_with("instance 2 \"fleetagent-b\" has run for 40m with no Curio worker"),
            "{lines:?}"
        );
        // Within a normal boot: nothing to say yet.
        assert!(no_worker(&rows, &[], &c, NOW - 20 * MIN).is_empty());
        // One whose own worker died (its address nobody else's): said so, not the image's
        // settings (a soak).
        let mut e = at("fleetagent-e", 5, BOOTED, Some("172.17.0.5:12300"));
        e.state_since = NOW - 7 * MIN;
        let said = no_worker(&[e], &[], &c, NOW);
        assert!(
            said[0].starts_with("instance 5 \"fleetagent-e\"'s Curio worker (\"172.17.0.5:12300\") stopped heartbeating 7m ago"),
            "{said:?}"
        );
    }

    /// Curio runs ours without PSProve (a drill: the image's layers lacked ProofShare): named
    /// at once, by name or by address, and not as "no Curio worker" (its fix was wrong).
    #[test]
    fn ours_running_in_curio_without_psprove_are_named() {
        let machine = |name: &str, host: &str| crate::demand::Worker {
            machine_name: name.into(),
            host_and_port: host.into(),
            ..Default::default()
        };
        let mut by_ip = row("fleetagent-b", Some(2), BOOTED, 0.4);
        by_ip.public_ip = Some("203.0.113.9".into());
        by_ip.created_at = NOW - 40 * MIN;
        let rows = vec![
            row("fleetagent-a", Some(1), BOOTED, 0.4),
            by_ip,
            // Proving: Curio lists it as a worker, whatever another machine of that name says.
            row("fleetagent-c", Some(3), PROVING, 0.4),
        ];
        let taskless = vec![
            machine("fleetagent-a", "10.0.0.1:12300"),
            machine("sealer-1", "203.0.113.9:12300"),
            machine("fleetagent-c", "10.0.0.3:12300"),
            machine("sealer-2", "10.0.0.4:12300"),
        ];
        let named = taskless_ours(&rows, &taskless);
        let labels: Vec<&str> = named.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["fleetagent-a", "fleetagent-b"]);
        assert!(named[0].1.starts_with("instance 1 \"fleetagent-a\" runs Curio machine \"fleetagent-a\" (10.0.0.1:12300) without PSProve"), "{named:?}");
        let lines = problems(&rows, &[], &taskless, &config(), NOW);
        assert_eq!(
            lines.len(),
            2,
            "b's no-worker line is not said again: {lines:?}"
        );
        assert!(lines[1].contains("CURIO_LAYERS"), "{lines:?}");
        assert!(taskless_ours(&rows, &[]).is_empty());
        // Two of ours on one host (one address): the other's machine is not this one's.
        let mut booting = row("fleetagent-d", Some(4), BOOTED, 0.4);
        booting.public_ip = Some("10.0.0.1".into());
        let rows = vec![row("fleetagent-a", Some(1), BOOTED, 0.4), booting];
        let named = taskless_ours(&rows, &[machine("fleetagent-a", "10.0.0.1:12300")]);
        assert_eq!(named.len(), 1, "{named:?}");
    }

    #[test]
    fn one_label_on_two_live_machines_is_reported() {
        let worker = |name: &str, host: &str| crate::demand::Worker {
            machine_name: name.into(),
            host_and_port: host.into(),
            running: 0,
            cordoned: false,
        };
        let rows = vec![row("fleetagent-a", Some(1), PROVING, 0.4)];
        let one = [worker("fleetagent-a", "172.17.0.2:12300")];
        assert!(one_label_many_machines(&rows, &one).is_empty());
        let two = [
            worker("fleetagent-a", "172.17.0.2:12300"),
            worker("other", "10.0.0.5:12300"),
            worker("fleetagent-a", "172.17.0.9:12300"),
        ];
        let lines = problems(&rows, &two, &[], &config(), NOW);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("\"fleetagent-a\" names 2 live Curio machines (\"172.17.0.2:12300\", \"172.17.0.9:12300\")"),
            "{lines:?}"
        );
    }
}
