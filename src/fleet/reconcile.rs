//! Reconciliation, pure: the local instance table against vast.ai's listing, open launch
//! intents and Curio's live workers. The caller (the pass's observe step, `run::observe`)
//! reads the inputs and writes the result.

use std::collections::{HashMap, HashSet};

use crate::clock::{human_duration, Millis};
use crate::demand::{Demand, Worker};
use crate::store::actions::Action;
use crate::store::instances::InstanceRow;
use crate::store::ops::ForeignInstance;
use crate::text::{clip, quote};
use crate::vast::Instance;

use super::state::*;
use super::workers::match_workers;
use super::{LABEL_CHARS, STATUS_CHARS};

/// An open launch intent that has not shown up in a successful listing after this long is
/// settled as failed: a create normally appears in the listing at once, so 10 minutes covers
/// any listing lag while keeping a phantom intent from holding a window slot for long.
pub const INTENT_GRACE_MS: Millis = 10 * 60_000;
/// What [`reconcile`] decided: rows to write, rows to forget, intents to settle, changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reconciled {
    /// Every live row after reconciliation, plus rows that just became gone.
    pub rows: Vec<InstanceRow>,
    /// Labels of launching rows whose launch clearly never happened.
    pub deleted: Vec<String>,
    /// (action id, outcome, instance id, detail)
    pub settle: Vec<(i64, &'static str, Option<i64>, String)>,
    pub changes: Vec<String>,
    /// Of [`Reconciled::changes`], those nobody of ours made and an operator must know of at
    /// once (said at warning): an instance gone from the listing or relabelled there, a
    /// launch that never appeared.
    pub unexplained: Vec<String>,
    pub foreign: Vec<i64>,
    /// Listed instances under our prefix that carry another install's id (never ours).
    pub other_installs: Vec<ForeignInstance>,
    /// Listed instances not ours whose label a Curio worker of this cluster carries as its
    /// machine name (`"label" (instance N)`): another fleetagent (or a tool in its manner) on
    /// this account renting for the same cluster ([`rival_fleet`]).
    pub rival_fleet: Vec<String>,
    /// Instances found outbid this pass that were not before: (vast id, host).
    pub newly_outbid: Vec<(i64, Option<i64>)>,
    /// Stops and destroys of ours that vast.ai acknowledged and that did not take: the
    /// instance is listed billing past [`UNDONE_GRACE_MS`] after (`run::undone` sends them
    /// again).
    pub undone: Vec<Undone>,
    /// Launches listed for the first time at a price well above the one they were rented
    /// at: (vast id, host, the line that says so).
    pub overbilled: Vec<(i64, Option<i64>, String)>,
    /// Ours whose listed $/h moved by more than [`REPRICED_SHARE`] since the last listing
    /// (a bid's price changed, a host's): whether it rose, and one line each, for the journal.
    pub repriced: Vec<(bool, String)>,
    /// Launches listed for the first time above the offer they were rented at by more than
    /// [`REPRICED_SHARE`] (and a cent), short of [`OVERBILLED_SHARE`]: the host is not
    /// blamed, but the caps count what it bills, which the launch's check did not see (a
    /// walkthrough's +20 % broke max_dph_total with nothing said).
    pub above_offer: Vec<String>,
    /// Bids of ours vast.ai paused (outbid) or resumed since the last listing: changes
    /// nobody of ours made, one line each, for the journal.
    pub bid_changes: Vec<String>,
}

/// A stop or destroy of ours that vast.ai acknowledged, while its listing still shows the
/// instance billing.
#[derive(Debug, Clone, PartialEq)]
pub struct Undone {
    pub vast_id: i64,
    pub label: String,
    /// `stop` or `destroy`.
    pub kind: String,
    /// When vast.ai acknowledged it.
    pub at: Millis,
    /// The state the listing shows now, and its $/h.
    pub state: State,
    pub dph: Option<f64>,
    /// Not a stop or destroy of ours that did not take: an instance a create vast.ai
    /// answered as failed made anyway, whose destroy failed ([`ORPHAN_NOTE`]).
    pub orphan: bool,
}

/// How the note of an intent whose create failed while vast.ai made an instance anyway, and
/// whose destroy of it failed too, begins (then the instance id): every reconciliation that
/// lists that instance destroys it again ([`Undone::orphan`]), the launch left open until
/// the instance is gone, never adopted as launched (`policy::launch::after_orphan` writes it).
pub const ORPHAN_NOTE: &str = "orphan instance ";

/// The instance id of an [`ORPHAN_NOTE`] note.
pub fn orphan_of(note: &str) -> Option<i64> {
    let rest = note.strip_prefix(ORPHAN_NOTE)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The listing says the instance is being destroyed (`destroyed` or `terminated` in its
/// actual, intended or next state).
pub fn being_destroyed(i: &Instance) -> bool {
    [&i.actual_status, &i.intended_status, &i.next_state]
        .iter()
        .any(|s| {
            s.as_deref().is_some_and(|s| {
                let s = s.trim();
                s.eq_ignore_ascii_case("destroyed") || s.eq_ignore_ascii_case("terminated")
            })
        })
}

/// How long after an acknowledged stop or destroy a listing may still show the instance
/// running (vast.ai's listing lags its own answers by seconds) before it counts as undone.
pub const UNDONE_GRACE_MS: Millis = 120_000;

/// A first listing above the rented price by more than this share (and a cent) is not the
/// offer's price: the host is left out of searches, or every relaunch would meet it again.
const OVERBILLED_SHARE: f64 = 0.25;

/// A running instance's listed $/h moving by more than this share is said.
const REPRICED_SHARE: f64 = 0.10;

pub struct ReconcileInput<'a> {
    /// Live rows of the local table (plus gone rows the listing still shows).
    pub local: Vec<InstanceRow>,
    /// Labels already used by a gone row of another instance (a new one gets a suffix).
    pub taken_labels: HashSet<String>,
    pub intents: Vec<Action>,
    /// None when the listing failed.
    pub listing: Option<&'a [Instance]>,
    pub demand: Option<&'a Demand>,
    pub prefix: &'a str,
    /// This install's id (`agent_state.install_id`): labels under our prefix with another
    /// id are another install's ([`owner`]).
    pub install_id: &'a str,
    pub now: Millis,
    /// When the listing was asked for (before the request went out). A stop or destroy of
    /// ours acknowledged after it (an operator's, made while the pass listed) is newer than
    /// anything the listing says of that instance.
    pub listed_at: Millis,
    /// Instances (vast id) whose last stop or start in the action ledger is a stop of ours
    /// that went through: stopped by us, so never outbid.
    pub our_stops: HashSet<i64>,
    /// The latest stop or destroy of ours on each instance that vast.ai acknowledged (kind,
    /// when): `store::actions::acknowledged_ends`.
    pub our_ends: HashMap<i64, (String, Millis)>,
}

/// The listed instances under `prefix` that carry another install's id (`fleet::owner`).
pub fn other_installs(
    listing: &[Instance],
    prefix: &str,
    install_id: &str,
) -> Vec<ForeignInstance> {
    listing
        .iter()
        .filter_map(|i| match owner(i.label.as_deref(), prefix, install_id) {
            Owner::OtherInstall(id) => Some(ForeignInstance {
                install_id: id.to_string(),
                label: clip(i.label.as_deref().unwrap_or("").trim(), 200),
                vast_id: i.id as i64,
            }),
            _ => None,
        })
        .collect()
}

/// The listed instances that carry this install's id under another prefix than `prefix`
/// (`<old prefix>-<install id>-r<run>-<suffix>`): rented before `vast.label_prefix` was
/// changed, and not in the table (a restored backup): never adopted, counted or stopped, so
/// stored beside the other installs' for `doctor` to name (a walkthrough saw one bill
/// unnamed while the panic button said "destroyed 0 of 0").
pub fn ours_elsewhere(
    listing: &[Instance],
    prefix: &str,
    install_id: &str,
    tracked: &[i64],
) -> Vec<ForeignInstance> {
    listing
        .iter()
        .filter_map(|i| {
            let label = i.label.as_deref()?.trim();
            let old = prefix_with_id(label, install_id)?;
            // One the table holds stays ours whatever its prefix (`Recorded`): managed, not
            // named (a re-test saw a plain prefix change called unmanaged billing).
            let held = tracked.contains(&(i.id as i64));
            (old != prefix && !held).then(|| ForeignInstance {
                install_id: install_id.to_string(),
                label: clip(label, 200),
                vast_id: i.id as i64,
            })
        })
        .collect()
}

/// What a listing shows of instances under our prefix but another install's id, then of
/// ours under another prefix the table does not hold (`tracked`: their vast ids): what
/// `agent_state.foreign_installs` keeps for `doctor`.
pub fn seen_elsewhere(
    listing: &[Instance],
    prefix: &str,
    install_id: &str,
    tracked: &[i64],
) -> Vec<ForeignInstance> {
    let mut out = other_installs(listing, prefix, install_id);
    for o in ours_elsewhere(listing, prefix, install_id, tracked) {
        if !out.iter().any(|x| x.vast_id == o.vast_id) {
            out.push(o);
        }
    }
    out
}

/// The instances our table recorded, by vast.ai id, with the label each was recorded under;
/// and the labels of launches it recorded that no listing has shown yet (no id).
pub struct Recorded<'a> {
    by_id: HashMap<i64, &'a str>,
    unlisted: HashSet<&'a str>,
}

impl<'a> Recorded<'a> {
    pub fn new(rows: impl IntoIterator<Item = &'a InstanceRow>) -> Recorded<'a> {
        let mut by_id = HashMap::new();
        let mut unlisted = HashSet::new();
        for r in rows {
            let label = r.label.split('~').next().unwrap_or(&r.label);
            match r.vast_id {
                Some(id) => {
                    by_id.insert(id, label);
                }
                None => {
                    unlisted.insert(label);
                }
            }
        }
        Recorded { by_id, unlisted }
    }

    /// Whether the table recorded this vast.ai id at all.
    pub fn knows(&self, id: i64) -> bool {
        self.by_id.contains_key(&id)
    }

    /// Whether a listed instance is ours by our table rather than by its label's prefix:
    /// - listed without a label (a listing that leaves the field out, or a label vast.ai
    ///   lost): still ours by its id; it bills, and the caps count it;
    /// - listed under the very label our table recorded for its id, whatever the prefix
    ///   says now: a changed `vast.label_prefix` names the next launches; it does not give
    ///   away the fleet already rented (which would bill on, uncounted and unstopped);
    /// - listed for the first time under the label of a launch our table recorded before
    ///   its create was answered (a create that timed out, then the prefix changed): that
    ///   launch's instance, whatever the prefix says now (a walkthrough saw it let go,
    ///   billing, and a replacement rented once the launch's wait ran out).
    pub fn holds(&self, i: &Instance) -> bool {
        let label = i.label.as_deref().map(str::trim);
        match self.by_id.get(&(i.id as i64)) {
            Some(recorded) => unlabelled(i) || label == Some(*recorded),
            None => label.is_some_and(|l| self.unlisted.contains(l)),
        }
    }
}

/// Of `not_ours` (listed instances that are not ours), those labelled in the shape another
/// fleetagent gives, with another install id than ours (`install_id`: ours under an old
/// prefix are this install's, named apart by doctor), whose label is the machine name of one
/// of Curio's workers: fleetagent names each worker after its instance's label
/// (`CURIO_NODE_NAME`), so these are another agent's fleet proving for this cluster on this
/// account, under its own prefix or ours (a walkthrough saw two installs rent 5 each for one
/// WORKERS DEAD, each sized to the whole demand, and nothing said it). A worker named after
/// its instance by hand (`manual-prover`) is no agent's (a re-test).
pub fn rival_fleet<'a>(
    not_ours: impl Iterator<Item = &'a Instance>,
    workers: &[Worker],
    install_id: &str,
) -> Vec<String> {
    let names: HashSet<&str> = workers.iter().map(|w| w.machine_name.trim()).collect();
    not_ours
        .filter_map(|i| {
            let label = i.label.as_deref()?.trim();
            let agents = super::state::fleetagent_install_id(label)
                .is_some_and(|id| !id.eq_ignore_ascii_case(install_id));
            (agents && names.contains(label))
                .then(|| format!("{} (instance {})", quote(label, LABEL_CHARS), i.id))
        })
        .collect()
}

/// Reconcile the local table with the listing, open intents and Curio's live workers.
/// Pure: the caller writes the result.
pub fn reconcile(input: &ReconcileInput<'_>, grace_ms: Millis) -> Reconciled {
    let now = input.now;
    let mut out = Reconciled::default();
    // A row in our table whose label carries another install's id (adopted by an older
    // build before install ids, while the other install already ran a newer one) leaves
    // our fleet: it is that install's to count and stop.
    let (theirs, mine): (Vec<&InstanceRow>, Vec<&InstanceRow>) =
        input.local.iter().partition(|r| {
            let label = r.label.split('~').next().unwrap_or(&r.label);
            matches!(
                owner(Some(label), input.prefix, input.install_id),
                Owner::OtherInstall(_)
            )
        });
    for r in theirs {
        let label = r.label.split('~').next().unwrap_or(&r.label);
        if let Owner::OtherInstall(id) = owner(Some(label), input.prefix, input.install_id) {
            out.changes.push(format!(
                "{} carries install {id}'s id, not ours ({}): left out of our fleet, never counted nor stopped",
                describe(r),
                input.install_id
            ));
        }
        out.deleted.push(r.label.clone());
    }
    let Some(listing) = input.listing else {
        // The local table as is; intents stay open until a listing can answer for them.
        out.rows = mine.into_iter().cloned().collect();
        return out;
    };
    fn whose<'a>(i: &'a Instance, input: &ReconcileInput<'_>) -> Owner<'a> {
        owner(i.label.as_deref(), input.prefix, input.install_id)
    }
    let recorded = Recorded::new(mine.iter().copied());
    // A destroy of ours whose instance the listing shows as being destroyed: gone, as the
    // destroy left it (vast.ai's listing lags its answers), never revived into the fleet.
    let destroying = |i: &Instance| {
        being_destroyed(i)
            && input
                .our_ends
                .get(&(i.id as i64))
                .is_some_and(|(kind, _)| kind == "destroy")
    };
    // A stop or destroy of ours acknowledged after this listing was asked for (and not
    // after now: another host's clock ahead counts for nothing): the listing is older than
    // what we know of the instance, so its row is kept as the end left it, for this pass
    // only. The next listing, asked after the end, says whether it took.
    let outdated: HashSet<i64> = input
        .our_ends
        .iter()
        .filter(|(_, (_, at))| *at > input.listed_at && *at <= now)
        .map(|(id, _)| *id)
        .collect();
    let ours: Vec<&Instance> = listing
        .iter()
        .filter(|i| whose(i, input) == Owner::Ours || recorded.holds(i))
        .filter(|i| !destroying(i) && !outdated.contains(&(i.id as i64)))
        .collect();
    out.foreign = listing
        .iter()
        .filter(|i| whose(i, input) == Owner::NotOurs && !recorded.holds(i))
        .map(|i| i.id as i64)
        .collect();
    out.other_installs = other_installs(listing, input.prefix, input.install_id);
    let workers: &[Worker] = input.demand.map(|d| d.workers.as_slice()).unwrap_or(&[]);
    out.rival_fleet = rival_fleet(
        listing
            .iter()
            .filter(|i| whose(i, input) != Owner::Ours && !recorded.holds(i)),
        workers,
        input.install_id,
    );
    let matched = match_workers(&ours, workers);
    let intents_by_label: HashMap<&str, &Action> = input
        .intents
        .iter()
        .filter_map(|a| a.label.as_deref().map(|l| (l, a)))
        .collect();

    let mut local: Vec<Option<InstanceRow>> = mine.into_iter().cloned().map(Some).collect();
    let mut used_labels: HashSet<String> = input.local.iter().map(|r| r.label.clone()).collect();
    used_labels.extend(input.taken_labels.iter().cloned());
    let mut settled: HashSet<i64> = HashSet::new();

    for inst in &ours {
        let label = inst.label.as_deref().unwrap_or("").trim().to_string();
        let by_id = local.iter().position(|r| {
            r.as_ref()
                .is_some_and(|r| r.vast_id == Some(inst.id as i64))
        });
        let by_label = || {
            local.iter().position(|r| {
                r.as_ref()
                    .is_some_and(|r| r.vast_id.is_none() && r.label == label)
            })
        };
        let slot = by_id.or_else(by_label);
        let worker = matched.get(&inst.id).map(|&i| &workers[i]);
        let mut state = classify(inst.actual_status.as_deref(), worker);
        let intent = intents_by_label.get(label.as_str()).copied();
        // Without a demand reading Curio's side is unknown, not empty: a running instance
        // that was registered or proving stays so (no false "worker lost" events).
        let kept_curio = match slot.and_then(|i| local[i].as_ref()) {
            Some(prev)
                if input.demand.is_none()
                    && state == BOOTED
                    && matches!(prev.state, REGISTERED | PROVING) =>
            {
                state = if prev.state == PROVING {
                    PROVING
                } else {
                    REGISTERED
                };
                Some(prev.machine_name.clone())
            }
            _ => None,
        };

        let mut created_here = false;
        let mut row = match slot.and_then(|i| local[i].take()) {
            Some(row) => row,
            None => {
                created_here = true;
                let key = if used_labels.contains(&label) {
                    // Two instances with one label: keep both visible, never merge them.
                    format!("{label}~{}", inst.id)
                } else {
                    label.clone()
                };
                used_labels.insert(key.clone());
                let created_at = intent.map(|a| a.created_at).unwrap_or_else(|| {
                    inst.start_date
                        .map(|s| (s * 1000.0) as Millis)
                        .filter(|t| *t > 0 && *t <= now)
                        .unwrap_or(now)
                });
                InstanceRow {
                    label: key,
                    vast_id: None,
                    state: LAUNCHING,
                    actual_status: None,
                    status_msg: None,
                    gpu_name: None,
                    dph: intent.and_then(|a| a.dph),
                    offer_id: intent.and_then(|a| a.offer_id),
                    public_ip: None,
                    machine_name: None,
                    worker_address: None,
                    launched_run: intent.and_then(|a| a.run_id),
                    adopted: intent.is_none(),
                    created_at,
                    state_since: now,
                    last_seen_at: None,
                    gone_at: None,
                    machine_id: None,
                    is_bid: false,
                    storage_dph: None,
                    paused_spans: Vec::new(),
                }
            }
        };
        let was_new = row.vast_id.is_none();
        let was_gone = row.gone_at.is_some();
        let before = row.state;
        row.is_bid = inst.is_bid.unwrap_or(row.is_bid);
        row.machine_id = inst.machine_id.map(|m| m as i64).or(row.machine_id);
        row.storage_dph = inst.storage_dph.or(row.storage_dph);
        let stopped = |s: &Option<String>| {
            s.as_deref()
                .is_some_and(|s| s.trim().eq_ignore_ascii_case("stopped"))
        };
        // vast.ai's two shapes of a paused bid: `actual_status` stopped (intended_status
        // left running), or cur_state, intended_status and next_state all stopped. And a
        // container that exited because the instance was meant to stop (intended_status
        // stopped: by us, or by vast.ai when the account's credit ran out) is a stop, not a
        // crash: a walkthrough's credit-stopped instance was destroyed as dead and its sound
        // host left out of searches for a day.
        let exited = inst
            .actual_status
            .as_deref()
            .is_some_and(|s| s.trim().eq_ignore_ascii_case("exited"));
        let bid_paused = stopped(&inst.actual_status)
            || (stopped(&inst.cur_state)
                && stopped(&inst.intended_status)
                && stopped(&inst.next_state));
        // Not an outbid (vast.ai lists those `stopped`): a bid stopped with the account's
        // credit is stopped like any other, its host not struck.
        let meant_to_stop = exited && stopped(&inst.intended_status);
        if bid_paused || meant_to_stop {
            state = if row.is_bid && bid_paused && !input.our_stops.contains(&(inst.id as i64)) {
                OUTBID
            } else {
                STOPPED
            };
        }
        if state == OUTBID {
            // Counted at its full price while it can resume: a paused listing's lower figure
            // does not lower it.
            row.dph = match (row.dph, inst.dph_total) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            if before != OUTBID && !was_new {
                out.newly_outbid.push((inst.id as i64, row.machine_id));
            }
        }
        row.vast_id = Some(inst.id as i64);
        row.actual_status = inst.actual_status.clone();
        row.status_msg = inst.status_msg.as_deref().map(|m| clip(m, 300));
        row.gpu_name = inst.gpu_name.clone().or(row.gpu_name);
        if state != OUTBID {
            // The price it was rented at: the intent's for a create that was not answered,
            // else the offer's that the launch's row holds until its first listing (a re-test:
            // only the unanswered creates were ever checked, so an answered one listed at 2x
            // its offer was said nowhere and its host never left out).
            let rented = match intent {
                Some(a) => a.dph,
                None if row.last_seen_at.is_none() && !row.adopted => row.dph,
                None => None,
            };
            if let (Some(rented), Some(listed)) = (rented, inst.dph_total) {
                let first_listing = was_new || row.last_seen_at.is_none();
                let overbilled = listed > rented * (1.0 + OVERBILLED_SHARE) + 0.01;
                if first_listing && !overbilled && listed > rented * (1.0 + REPRICED_SHARE) + 0.01 {
                    out.above_offer.push(format!(
                        "instance {} is billed ${listed:.3}/h, {:.0} % above the ${rented:.3}/h offer it was rented at: the caps count what it bills, above what its launch was checked at",
                        inst.id,
                        (listed / rented.max(1e-9) - 1.0) * 100.0,
                    ));
                }
                if overbilled {
                    out.overbilled.push((
                        inst.id as i64,
                        row.machine_id,
                        format!(
                            "instance {} is billed ${}/h, {:.1}x the ${}/h offer it was rented at: the caps count what it bills, and its host{} is left out of offer searches",
                            inst.id,
                            crate::fleet::num(listed),
                            listed / rented.max(1e-9),
                            crate::fleet::num(rented),
                            row.machine_id.map(|m| format!(" {m}")).unwrap_or_default()
                        ),
                    ));
                }
            }
            let was = row.dph;
            row.dph = inst.dph_total.or(row.dph);
            if let (Some(a), Some(b)) = (was, row.dph) {
                // Said where the operator reads (a 5x rise went unsaid): today's spend counts
                // each price for its own hours (`store::instances::paused_spans_after`). Not
                // a launch's first listing against its offer (a bid, or the overbilled line).
                let listed_before = !was_new && row.last_seen_at.is_some();
                if listed_before && (b - a).abs() > a * REPRICED_SHARE {
                    out.repriced.push((
                        b > a,
                        format!(
                            "instance {} is billed ${b:.3}/h now, was ${a:.3}/h",
                            inst.id
                        ),
                    ));
                }
            }
        }
        row.public_ip = inst.public_ip.clone();
        row.machine_name = match kept_curio {
            Some(name) => name,
            None => worker.map(|w| w.machine_name.clone()),
        };
        // Kept while unmatched: an instance whose Curio machine another of ours took over
        // (one host_and_port, one machine row) still names the address it had.
        if let Some(w) = worker.filter(|w| !w.host_and_port.trim().is_empty()) {
            row.worker_address = Some(clip(w.host_and_port.trim(), 120));
        }
        row.last_seen_at = Some(now);
        row.gone_at = None;
        if row.state != state {
            if matches!(row.state, STOPPED | OUTBID) && worker.is_none() {
                // Started again: its next worker is a new one, booting, not one it lost (a
                // re-test saw a restarted spare read as lost and a rental made beside it).
                row.worker_address = None;
            }
            row.state = state;
            row.state_since = now;
        }
        let name = describe(&row);
        let orphan =
            intent.filter(|a| a.detail.as_deref().and_then(orphan_of) == Some(inst.id as i64));
        // An orphan is sent its destroy below, once a pass, whatever ends the ledger holds.
        let ended = input
            .our_ends
            .get(&(inst.id as i64))
            .filter(|_| orphan.is_none());
        if let Some((kind, at)) = ended {
            // A destroyed instance listed at all bills (a stopped one its disk); one listed
            // as being destroyed never gets here (`destroying`).
            let undone = match kind.as_str() {
                "destroy" => true,
                _ => is_billing_state(state),
            };
            if undone && now - at >= UNDONE_GRACE_MS {
                out.undone.push(Undone {
                    vast_id: inst.id as i64,
                    label: row.label.clone(),
                    kind: kind.clone(),
                    at: *at,
                    state,
                    dph: row.dph,
                    orphan: false,
                });
            }
        }
        if let Some(a) = orphan {
            // The create failed and its destroy too: not a launch; destroyed, never adopted.
            // The intent stays open while the instance is listed, so that every pass sends
            // the destroy again until one takes (a destroy that failed again was left for
            // good); once it is gone the intent is settled `failed` as any unlisted one is.
            settled.insert(a.id);
            out.undone.push(Undone {
                vast_id: inst.id as i64,
                label: row.label.clone(),
                kind: "destroy".into(),
                at: a.created_at,
                state,
                dph: row.dph,
                orphan: true,
            });
        } else if let Some(a) = intent {
            if settled.insert(a.id) {
                out.settle.push((
                    a.id,
                    "ok",
                    Some(inst.id as i64),
                    format!("seen in the listing as instance {}", inst.id),
                ));
            }
        }
        if was_gone {
            out.changes.push(format!(
                "{name} is listed again after it was marked gone: {state}"
            ));
        } else if was_new && intent.is_some() {
            out.changes.push(format!(
                "{name} found in the listing for an open launch intent (the create went through; now recorded): {state}"
            ));
        } else if created_here {
            let dup = if row.label != label {
                " (its label is already used by another instance)"
            } else {
                ""
            };
            out.changes.push(format!(
                "{name} adopted: ours by label but not in fleetagent's table (a create that was not recorded){dup}: {state}"
            ));
        } else if significant(before, state) {
            let line = format!("{name}: {before} -> {state}{}", status_note(&row));
            // vast.ai pausing a bid of ours, or resuming it, is a change nobody of ours made:
            // capacity lost, or a full price billing again (a bids walkthrough found neither
            // in the journal).
            if (before == OUTBID) != (state == OUTBID) {
                out.bid_changes.push(line.clone());
            }
            out.changes.push(line);
        }
        out.rows.push(row);
    }

    for row in local.into_iter().flatten() {
        let mut row = row;
        if row.gone_at.is_some() {
            continue;
        }
        match row.vast_id {
            Some(id) if outdated.contains(&id) => out.rows.push(row),
            Some(id) => {
                let name = describe(&row);
                // Still listed, under a label that is not ours (renamed in the console):
                // the operator took it out of the fleet; it is left alone and not counted.
                let relabelled = listing
                    .iter()
                    .find(|i| i.id as i64 == id)
                    .map(|i| quote(i.label.as_deref().unwrap_or(""), LABEL_CHARS));
                let line = match relabelled {
                    Some(label) => format!(
                        "{name} is listed under another label, {label}: no longer ours (left alone, not counted against the caps; it still bills on the account)"
                    ),
                    None => format!(
                        "{name} is gone from the vast.ai listing (was {})",
                        row.state
                    ),
                };
                out.unexplained.push(line.clone());
                out.changes.push(line);
                row.state = GONE;
                row.state_since = now;
                row.gone_at = Some(now);
                out.rows.push(row);
            }
            None => {
                let intent = intents_by_label.get(row.label.as_str()).copied();
                match intent {
                    Some(a) if now - a.created_at >= grace_ms => {
                        // Instances listed without a label, unknown to our table, started
                        // since this launch: one may be it (a listing that dropped labels).
                        // Never ours to touch, but named so that nothing bills unseen.
                        let since_secs = (a.created_at / 1000 - 60) as f64;
                        let maybe: Vec<String> = listing
                            .iter()
                            .filter(|i| {
                                unlabelled(i)
                                    && !recorded.knows(i.id as i64)
                                    && i.start_date.is_some_and(|t| t >= since_secs)
                            })
                            .map(|i| i.id.to_string())
                            .collect();
                        let note = if maybe.is_empty() {
                            String::new()
                        } else {
                            format!(
                                "; instance(s) {} listed without a label, started since, may be this launch: check vast.ai's console (fleetagent never touches an instance without its label)",
                                maybe.join(", ")
                            )
                        };
                        if settled.insert(a.id) {
                            out.settle.push((
                                a.id,
                                "failed",
                                None,
                                format!(
                                    "never appeared in the vast.ai listing within {}{note}",
                                    human_duration(grace_ms)
                                ),
                            ));
                        }
                        let line = format!(
                            "launch {} never appeared in the vast.ai listing within {}: recorded as failed{note}",
                            quote(&row.label, LABEL_CHARS),
                            human_duration(grace_ms)
                        );
                        out.unexplained.push(line.clone());
                        out.changes.push(line);
                        out.deleted.push(row.label.clone());
                    }
                    // Still within the grace period: it may yet appear.
                    Some(_) => out.rows.push(row),
                    // No open intent behind a row that never got an id: the launch was
                    // settled (refused or failed) without its row being removed.
                    None => out.deleted.push(row.label.clone()),
                }
            }
        }
    }

    // Intents with no row at all (written by an older build, or a row lost): settle those
    // past the grace period; show younger ones as launching so they count.
    let labels: HashSet<&str> = out.rows.iter().map(|r| r.label.as_str()).collect();
    let mut extra = Vec::new();
    for a in &input.intents {
        let Some(label) = a.label.as_deref() else {
            continue;
        };
        if settled.contains(&a.id)
            || labels.contains(label)
            || out.deleted.iter().any(|d| d == label)
        {
            continue;
        }
        if now - a.created_at >= grace_ms {
            settled.insert(a.id);
            out.settle.push((
                a.id,
                "failed",
                None,
                format!(
                    "never appeared in the vast.ai listing within {}",
                    human_duration(grace_ms)
                ),
            ));
            let line = format!(
                "launch {} never appeared in the vast.ai listing within {}: recorded as failed",
                quote(label, LABEL_CHARS),
                human_duration(grace_ms)
            );
            out.unexplained.push(line.clone());
            out.changes.push(line);
        } else {
            extra.push(InstanceRow {
                label: label.to_string(),
                vast_id: None,
                state: LAUNCHING,
                actual_status: None,
                status_msg: None,
                gpu_name: None,
                dph: a.dph,
                offer_id: a.offer_id,
                public_ip: None,
                machine_name: None,
                worker_address: None,
                launched_run: a.run_id,
                adopted: false,
                created_at: a.created_at,
                state_since: a.created_at,
                last_seen_at: None,
                gone_at: None,
                machine_id: None,
                is_bid: false,
                storage_dph: None,
                paused_spans: Vec::new(),
            });
        }
    }
    out.rows.extend(extra);
    out
}

/// Transitions worth an event. registered <-> proving flips with every proof: the table
/// follows it, the event stream does not.
/// Listed without a label (the field left out, or blank).
fn unlabelled(i: &Instance) -> bool {
    i.label.as_deref().is_none_or(|l| l.trim().is_empty())
}

fn significant(before: State, after: State) -> bool {
    before != after
        && !matches!(
            (before, after),
            (REGISTERED, PROVING) | (PROVING, REGISTERED)
        )
}

/// `instance 123 "label"` (or `launch "label"` before it has an id).
pub fn describe(row: &InstanceRow) -> String {
    match row.vast_id {
        Some(id) => format!("instance {id} {}", quote(&row.label, LABEL_CHARS)),
        None => format!("launch {}", quote(&row.label, LABEL_CHARS)),
    }
}

fn status_note(row: &InstanceRow) -> String {
    if row.state == OUTBID {
        return " (a bid vast.ai paused without our asking: it may resume at any moment, so it \
                counts against the caps until destroyed)"
            .into();
    }
    match (row.state, row.status_msg.as_deref()) {
        (DEAD | STOPPED, Some(msg)) if !msg.trim().is_empty() => {
            format!(" ({})", quote(msg, STATUS_CHARS))
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests;
