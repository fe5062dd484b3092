//! Rentals that never boot a Curio worker: the flag of one that runs without ever having had
//! one, vast.ai's own word on why in every boot flag, and the boot breaker that rents one at a
//! time after several in a row.
//!
//! A drill (every host's image pull failing: vast.ai listed each instance `created` with
//! "pull access denied", or `exited` with "manifest unknown") saw fleetagent rent, wait
//! `policy.stuck_loading_mins`, destroy, leave the host out for a day and rent the next, 12
//! rentals with none booting and `doctor` green for two hours; once every matching host was
//! left out, the fix `doctor` gave rented more of the same. Another saw an instance that vast.ai
//! ran and whose worker never appeared bill for over an hour, counted as capacity.

use std::collections::BTreeMap;

use crate::clock::Millis;
use crate::config::Config;
use crate::store::instances::InstanceRow;

use super::state::{BOOTED, LAUNCHING, LOADING};
use super::{Snapshot, STATUS_CHARS};

/// The boot breaker: after this many rentals of ours in a row ended flagged before any
/// Curio worker of theirs ran (stuck loading, exited, or running without one: `actions.flag`
/// `loading` and `unbooted`), within [`BOOT_WINDOW_MS`], launches go one at a time (none
/// while one of ours has not yet had a worker): the cause may be the worker image or its
/// settings rather than the hosts, and then every rental more fails alike. Each host that
/// failed is still left out (a re-test: with the bans held, the cheapest bad host was rented
/// again and again while good ones were offered). A rental of ours whose boot began after
/// the row's first failure and that has a worker ends the row.
pub const BOOT_FAILURES_MAX: usize = 3;
pub const BOOT_WINDOW_MS: Millis = 6 * 3_600_000;
/// How far back fleetagent's `start` of a spare times its boot ([`boot_began`]).
pub const STARTED_AGAIN_MS: Millis = 2 * 86_400_000;

pub use crate::store::actions::BootFailure;

/// Of the boot failures since the window's start (newest first), those after the newest
/// boot of ours that gave a Curio worker (`booted_at`: when that boot began, [`boot_began`];
/// None: none did): the row. At most [`BOOT_FAILURES_MAX`].
pub fn in_a_row(failures: Vec<BootFailure>, booted_at: Option<Millis>) -> Vec<BootFailure> {
    failures
        .into_iter()
        .filter(|f| booted_at.is_none_or(|b| f.at > b))
        .take(BOOT_FAILURES_MAX)
        .collect()
}

/// When the newest boot among `rows` that gave a Curio worker (its address kept) began
/// (`started`: [`Snapshot::started_again`]).
pub fn newest_booted(rows: &[InstanceRow], started: &BTreeMap<i64, Millis>) -> Option<Millis> {
    rows.iter()
        .filter(|r| r.worker_address.is_some())
        .map(|r| boot_began(r, started))
        .max()
}

/// When an instance's present boot began: its rental, or when fleetagent started it again (a
/// stopped spare, `stop_mode = "stop"`: its `start` action, `started`). A re-test saw a spare
/// started again flagged `unbooted 2h00m` in its first running pass, timed from its first
/// rental, and the boot breaker outlive the mended image while the boots that worked were
/// such spares. Not from the paused spans: a price change writes spans too, and timing from
/// them held off every boot flag of an instance listed at a moving price (a second re-test).
pub fn boot_began(r: &InstanceRow, started: &BTreeMap<i64, Millis>) -> Millis {
    r.vast_id
        .and_then(|id| started.get(&id).copied())
        .map_or(r.created_at, |at| at.max(r.created_at))
}

/// When the boot that the `loading` and `unbooted` flags time began: [`boot_began`], or for an
/// instance whose boot began again without fleetagent's start (one the operator started in
/// vast.ai's console after a stop, a bid paused and resumed between two passes: it was paused,
/// or it had a worker), when it entered its present state. A third re-test saw both
/// destroyed at first sight as `loading 2h00m`, timed from the rental, and their hosts left
/// out. A price change moves neither.
pub fn boot_clock(r: &InstanceRow, started: &BTreeMap<i64, Millis>) -> Millis {
    let began = boot_began(r, started);
    let again = !r.paused_spans.is_empty() || r.worker_address.is_some();
    if again {
        began.max(r.state_since)
    } else {
        began
    }
}

/// What follows a boot flag's figure when vast.ai said why (`status_msg`): ` (vast.ai:
/// "...")`, quoted and cut; empty otherwise.
pub fn vast_said(r: &InstanceRow) -> String {
    match r
        .status_msg
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty())
    {
        Some(m) => format!(" (vast.ai: {})", crate::text::quote(m, STATUS_CHARS)),
        None => String::new(),
    }
}

impl Snapshot {
    /// How long an instance of ours has run on vast.ai (`booted`) without ever having had a
    /// Curio worker (none matched since its boot began: no `worker_address`), once past a
    /// boot and a worker's start (`policy.stuck_loading_mins` + `policy.silent_worker_mins`
    /// from [`boot_clock`]), with demand read (an unread Curio lists nobody). Flagged
    /// `unbooted`: it bills and proves nothing (a drill saw one bill for over an hour,
    /// counted as capacity). Not while Curio lists a live worker at its public IP that no
    /// other instance of ours holds: it may be this one's, unmatched because two of ours
    /// share the IP (a re-test saw two proving instances on one host destroyed so). None:
    /// not so.
    pub fn unbooted_for(&self, r: &InstanceRow, config: &Config) -> Option<Millis> {
        let d = self.demand.as_ref()?;
        let p = &config.policy;
        let limit = (p.stuck_loading_mins + p.silent_worker_mins) as Millis * 60_000;
        let ms = self.now - boot_clock(r, &self.started_again);
        if r.state != BOOTED || r.worker_address.is_some() || ms <= limit {
            return None;
        }
        let ip = r
            .public_ip
            .as_deref()
            .map(str::trim)
            .filter(|ip| !ip.is_empty());
        let held = |addr: &str| {
            self.instances.iter().any(|o| {
                o.label != r.label && o.worker_address.as_deref().map(str::trim) == Some(addr)
            })
        };
        let maybe_ours = ip.is_some_and(|ip| {
            d.workers.iter().any(|w| {
                let addr = w.host_and_port.trim();
                super::workers::host_of(addr) == ip && !held(addr)
            })
        });
        (!maybe_ours).then_some(ms)
    }

    /// The boot breaker holds: [`BOOT_FAILURES_MAX`] rentals in a row never booted a worker.
    pub fn boot_breaker(&self) -> bool {
        self.boot_failures.len() >= BOOT_FAILURES_MAX
    }

    /// Ours that have not yet had a Curio worker ([`is_unproven`]).
    pub fn unproven(&self) -> impl Iterator<Item = &InstanceRow> {
        self.instances.iter().filter(|r| is_unproven(r))
    }

    /// While the boot breaker holds, why a launch must wait (None: it need not): one of ours
    /// has not yet had a worker, and the row of rentals that never did.
    pub fn boot_wait(&self) -> Option<String> {
        if !self.boot_breaker() {
            return None;
        }
        let waiting = self.unproven().next()?;
        Some(boot_message(&self.boot_failures, Some(waiting), self.now))
    }
}

/// An instance that has not yet had a Curio worker: launching, loading, or running without
/// one. While the boot breaker holds, none more is rented.
pub fn is_unproven(r: &InstanceRow) -> bool {
    matches!(r.state, LAUNCHING | LOADING | BOOTED) && r.worker_address.is_none()
}

/// The words for the boot breaker: the row, the newest's reason, and what holds the next
/// launch (`waiting`: the rental not yet booted, if any).
pub fn boot_message(row: &[BootFailure], waiting: Option<&InstanceRow>, now: Millis) -> String {
    let newest = row.first().map_or(String::new(), |f| {
        format!(
            ", the newest {} ago: {}",
            crate::clock::human_duration(now - f.at),
            crate::text::clip(&f.detail, 300)
        )
    });
    let held = match waiting {
        Some(w) => format!(
            "; no launch until {} has a Curio worker",
            match w.vast_id {
                Some(id) => format!("instance {id}"),
                None => crate::text::quote(&w.label, super::LABEL_CHARS),
            }
        ),
        None => String::new(),
    };
    format!(
        "the last {} rentals of ours never booted a Curio worker{newest}: the cause may be the worker image or its settings (vast.image, its registry, [vast.env], onstart) rather than the hosts (each is left out), so launches go one at a time until one boots{held}",
        row.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::Demand;
    use crate::fleet::fixtures::{config, flags, row, MIN, NOW};
    use crate::fleet::{FlagKind, DEAD};

    fn snapshot(rows: Vec<InstanceRow>) -> Snapshot {
        Snapshot {
            now: NOW,
            demand: Some(Demand::default()),
            instances: rows,
            ..Default::default()
        }
    }

    #[test]
    fn a_rental_that_never_had_a_worker_is_flagged() {
        // stuck_loading_mins 30 + silent_worker_mins 20: past 50 minutes from its launch.
        let c = config();
        let mut r = row("fleetagent-u", Some(7), BOOTED, 0.4);
        r.actual_status = Some("running".into());
        r.created_at = NOW - 55 * MIN;
        let s = snapshot(vec![r.clone()]);
        assert_eq!(
            flags(&s, &c),
            vec![(
                7,
                "unbooted 55m: vast.ai runs it and no Curio worker appeared".into()
            )]
        );
        // Not before, not with a worker it had (the lost worker's rule), not with demand
        // unread (an unread Curio lists nobody).
        let mut young = r.clone();
        young.created_at = NOW - 45 * MIN;
        assert!(flags(&snapshot(vec![young]), &c).is_empty());
        let mut had = r.clone();
        had.worker_address = Some("10.0.0.1:12300".into());
        let mut s = snapshot(vec![had]);
        assert!(s.flagged(&c).iter().all(|f| f.kind != FlagKind::Unbooted));
        s.instances[0].worker_address = None;
        s.demand = None;
        assert!(flags(&s, &c).is_empty());

        // Exited before any worker: a boot failure; after one: exited. (vast.ai's reason goes
        // in the destroy's detail: `policy::stop`.)
        let mut exited = row("fleetagent-e", Some(8), DEAD, 0.4);
        exited.actual_status = Some("exited".into());
        exited.status_msg = Some("Error response from daemon: manifest unknown".into());
        let mut loading = row("fleetagent-l", Some(9), LOADING, 0.4);
        loading.created_at = NOW - 40 * MIN;
        loading.status_msg = Some("pull access denied for img".into());
        let s = snapshot(vec![exited.clone(), loading]);
        assert_eq!(
            flags(&s, &c),
            vec![
                (8, "unbooted: exited before its Curio worker started".into()),
                (9, "loading 40m".into()),
            ]
        );
        exited.worker_address = Some("10.0.0.1:12300".into());
        assert_eq!(
            flags(&snapshot(vec![exited]), &c),
            vec![(8, "exited".into())]
        );
    }

    /// Re-tests: a spare started again was flagged `unbooted 2h00m` (from its first rental) in
    /// its first running pass; two proving instances on one host, matched by neither name nor
    /// address, were destroyed as never booted.
    #[test]
    fn a_boot_is_timed_from_its_start_and_a_worker_at_its_ip_may_be_its_own() {
        let c = config();
        let mut spare = row("fleetagent-s", Some(5), BOOTED, 0.4);
        spare.created_at = NOW - 120 * MIN;
        spare.state_since = NOW - 110 * MIN;
        // A span's end (hours at an old price, written each time it is repriced) does not
        // restart the clock: a start does, or entering its state after a pause.
        spare.paused_spans = vec![(NOW - 100 * MIN, NOW - 5 * MIN, 0.01)];
        let started = |at: Millis| [(5, at)].into_iter().collect::<BTreeMap<i64, Millis>>();
        let with = |r: &InstanceRow, at: Millis| Snapshot {
            started_again: started(at),
            ..snapshot(vec![r.clone()])
        };
        assert_eq!(boot_began(&spare, &BTreeMap::new()), NOW - 120 * MIN);
        assert_eq!(flags(&snapshot(vec![spare.clone()]), &c).len(), 1);
        assert_eq!(boot_began(&spare, &started(NOW - 5 * MIN)), NOW - 5 * MIN);
        assert!(flags(&with(&spare, NOW - 5 * MIN), &c).is_empty());
        spare.state = LOADING;
        assert!(flags(&with(&spare, NOW - 5 * MIN), &c).is_empty());
        assert_eq!(
            flags(&with(&spare, NOW - 60 * MIN), &c),
            vec![(5, "loading 1h00m".into())]
        );
        // Started again by hand (it was paused: no `start` of ours), or a bid resumed between
        // two passes (it had a worker): from when it entered its present state.
        spare.state_since = NOW - 5 * MIN;
        assert!(flags(&snapshot(vec![spare.clone()]), &c).is_empty());
        let mut resumed = row("fleetagent-r", Some(8), LOADING, 0.4);
        resumed.created_at = NOW - 75 * MIN;
        resumed.state_since = NOW - 4 * MIN;
        resumed.worker_address = Some("10.0.0.2:12300".into());
        assert!(flags(&snapshot(vec![resumed.clone()]), &c).is_empty());
        resumed.worker_address = None;
        assert_eq!(
            flags(&snapshot(vec![resumed]), &c),
            vec![(8, "loading 1h15m".into())]
        );
        // The boot breaker's row ends at a boot that began after its first failure.
        spare.worker_address = Some("10.0.0.1:12300".into());
        assert_eq!(
            newest_booted(&[spare], &started(NOW - 60 * MIN)),
            Some(NOW - 60 * MIN)
        );

        let mut shared = row("fleetagent-a", Some(6), BOOTED, 0.4);
        shared.created_at = NOW - 55 * MIN;
        shared.public_ip = Some("198.51.100.7".into());
        let mut s = snapshot(vec![shared]);
        s.demand = Some(Demand {
            workers: vec![crate::fleet::fixtures::worker(
                "curio-x",
                "198.51.100.7:12301",
                1,
            )],
            ..Default::default()
        });
        assert!(
            flags(&s, &c).is_empty(),
            "a live worker at its IP may be its own"
        );
        let mut other = row("fleetagent-b", Some(7), crate::fleet::PROVING, 0.4);
        other.worker_address = Some("198.51.100.7:12301".into());
        s.instances.push(other);
        assert_eq!(flags(&s, &c)[0].0, 6, "that worker is another of ours");
    }

    #[test]
    fn the_boot_breaker_holds_a_launch_while_one_of_ours_waits_for_its_first_worker() {
        let mut loading = row("fleetagent-l", Some(9), LOADING, 0.4);
        loading.created_at = NOW - 5 * MIN;
        let mut s = snapshot(vec![loading]);
        s.boot_failures = vec![failure(NOW - MIN), failure(NOW - 20 * MIN)];
        assert_eq!(s.boot_wait(), None, "two in a row: not yet");
        s.boot_failures.push(failure(NOW - 40 * MIN));
        let why = s.boot_wait().unwrap();
        assert!(why.starts_with("the last 3 rentals of ours never booted a Curio worker, the newest 1m ago: flagged (loading 30m)"), "{why}");
        assert!(
            why.ends_with("no launch until instance 9 has a Curio worker"),
            "{why}"
        );
        // It has one: the next may go.
        s.instances[0].state = crate::fleet::REGISTERED;
        s.instances[0].worker_address = Some("10.0.0.1:12300".into());
        assert_eq!(s.boot_wait(), None);
    }

    fn failure(at: Millis) -> BootFailure {
        BootFailure {
            at,
            detail: format!("flagged (loading 30m) at {at}"),
        }
    }

    #[test]
    fn a_rental_that_had_a_worker_ends_the_row() {
        let all = vec![failure(50), failure(40), failure(30), failure(20)];
        assert_eq!(in_a_row(all.clone(), None).len(), BOOT_FAILURES_MAX);
        let row = in_a_row(all.clone(), Some(35));
        assert_eq!(row.iter().map(|f| f.at).collect::<Vec<_>>(), vec![50, 40]);
        assert!(in_a_row(all, Some(60)).is_empty());
    }
}
