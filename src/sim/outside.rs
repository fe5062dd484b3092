//! Everything that happens outside the agent while simulated time passes: operator commands,
//! trigger bursts and `poll`'s change detection, each recorded through the same trigger path
//! as the real commands (an event row committed, then a ring of the doorbell). The
//! [`SimClock`] fires them whenever time moves, including while a run sleeps in its debounce,
//! so a burst that arrives mid-run is seen exactly as systemd and SQLite would show it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::services::{lock, SharedWorld};
use crate::clock::{rfc3339, Clock, ManualClock, Millis};
use crate::doorbell::{Doorbell, MemoryDoorbell};
use crate::store::{events, Store};

pub use crate::store::ops::SIM_INSTALL_ID;

/// `fleetagent-poll.timer`'s period.
pub const POLL_MS: Millis = 60_000;

/// The simulated clock: time moves only by `sleep` or [`SimClock::run_until`], and every
/// outside action due on the way is fired at its own time.
pub struct SimClock {
    inner: Arc<ManualClock>,
    outside: Mutex<Option<Outside>>,
}

impl SimClock {
    pub fn new(inner: Arc<ManualClock>) -> SimClock {
        SimClock {
            inner,
            outside: Mutex::new(None),
        }
    }

    pub fn install(&self, outside: Outside) {
        *self.outside.lock().unwrap_or_else(|p| p.into_inner()) = Some(outside);
    }

    pub fn with_outside<T>(&self, f: impl FnOnce(&mut Outside) -> T) -> Option<T> {
        let mut g = self.outside.lock().unwrap_or_else(|p| p.into_inner());
        g.as_mut().map(f)
    }

    /// Move to `target`, firing what is due on the way.
    pub fn run_until(&self, target: Millis) {
        loop {
            let now = self.inner.now_ms();
            let fired = self.with_outside(|o| match o.next_due() {
                Some(t) if t <= target => {
                    self.inner.set(t.max(now));
                    o.fire(t.max(now));
                    true
                }
                _ => false,
            });
            if fired != Some(true) {
                break;
            }
        }
        if target > self.inner.now_ms() {
            self.inner.set(target);
        }
    }

    /// When the next outside action is due.
    pub fn next_due(&self) -> Option<Millis> {
        self.with_outside(|o| o.next_due()).flatten()
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> Millis {
        self.inner.now_ms()
    }

    fn sleep(&self, d: Duration) {
        let target = self.inner.now_ms() + d.as_millis() as Millis;
        self.run_until(target);
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Fire {
    Trigger { priority: u8, reason: String },
    Reset,
    Message(String),
}

/// What the outside did, for the report.
#[derive(Debug, Clone, Default)]
pub struct OutsideTally {
    pub triggers: u64,
    pub polls_rung: u64,
    pub messages: u64,
    /// (time, event id) of every reset-session.
    pub resets: Vec<(Millis, i64)>,
    pub trigger_errors: u64,
}

pub struct Outside {
    pub store: Store,
    pub doorbell: Arc<MemoryDoorbell>,
    world: SharedWorld,
    /// (time, action), sorted; `cursor` is the next one.
    schedule: Vec<(Millis, Fire)>,
    cursor: usize,
    next_poll: Millis,
    last_poll: Option<crate::poll::PollState>,
    prefix: String,
    alive_ms: i64,
    pub tally: OutsideTally,
}

impl Outside {
    pub fn new(
        store: Store,
        doorbell: Arc<MemoryDoorbell>,
        world: SharedWorld,
        mut schedule: Vec<(Millis, Fire)>,
        start: Millis,
        alive_ms: i64,
        prefix: &str,
    ) -> Outside {
        // Writers never wait: the agent holds no transaction while time passes.
        let _ = store.conn.busy_timeout(Duration::ZERO);
        schedule.sort_by_key(|(t, _)| *t);
        Outside {
            store,
            doorbell,
            world,
            schedule,
            cursor: 0,
            next_poll: start + POLL_MS,
            last_poll: None,
            prefix: prefix.to_string(),
            alive_ms,
            tally: OutsideTally::default(),
        }
    }

    pub fn next_due(&self) -> Option<Millis> {
        let action = self.schedule.get(self.cursor).map(|(t, _)| *t);
        Some(action.map_or(self.next_poll, |a| a.min(self.next_poll)))
    }

    fn fire(&mut self, now: Millis) {
        if self.next_poll <= now {
            self.next_poll += POLL_MS;
            self.poll(now);
            return;
        }
        let Some((_, what)) = self.schedule.get(self.cursor).cloned() else {
            return;
        };
        match self.act(&what, now) {
            Ok(()) => self.cursor += 1,
            Err(e) => {
                // SQLITE_BUSY would mean the agent held a write transaction across a sleep;
                // count it and try again a moment later, as a retrying caller would.
                log::warn!("sim: {what:?} at {}: {e:#}", rfc3339(now));
                self.tally.trigger_errors += 1;
                self.schedule[self.cursor].0 = now + 100;
            }
        }
    }

    fn act(&mut self, what: &Fire, now: Millis) -> anyhow::Result<()> {
        match what {
            Fire::Trigger { priority, reason } => {
                self.ring_event(*priority, "trigger", reason, None, now)?;
                self.tally.triggers += 1;
            }
            Fire::Message(text) => {
                let reason = format!(
                    "operator message: {}",
                    text.chars().take(60).collect::<String>()
                );
                self.ring_event(0, "message", &reason, Some(text), now)?;
                self.tally.messages += 1;
            }
            Fire::Reset => {
                let done = crate::trigger::reset_session(
                    &mut self.store,
                    self.doorbell.as_ref(),
                    false,
                    now,
                )?;
                self.tally.resets.push((now, done.event_id));
            }
        }
        Ok(())
    }

    /// `trigger`'s path: commit the event, then ring.
    fn ring_event(
        &mut self,
        priority: u8,
        kind: &str,
        reason: &str,
        body: Option<&str>,
        now: Millis,
    ) -> anyhow::Result<i64> {
        let id = events::insert(&self.store.conn, priority, kind, reason, body, now)?;
        self.doorbell
            .ring(&format!("{} P{priority} event={id} {reason}", rfc3339(now)))?;
        Ok(id)
    }

    /// `poll`: list our instances and read the demand, compare with the last poll using
    /// the real command's rules (`crate::poll`), and on a lifecycle change or a new WORKERS
    /// DEAD record a P1 event and ring. A failed probe leaves the Curio side unknown.
    fn poll(&mut self, now: Millis) {
        use crate::poll::{compare, instance_states, PollState};
        let cur = {
            let mut w = lock(&self.world);
            w.advance(now);
            let listing = w.vast.list();
            let demand = (!w.curio.probe_down(now)).then(|| w.curio.demand(now, self.alive_ms));
            PollState {
                instances: demand.as_ref().map(|d| {
                    let none = crate::fleet::Recorded::new([]);
                    instance_states(&listing, &d.workers, (&self.prefix, SIM_INSTALL_ID), &none)
                }),
                workers_dead: demand.as_ref().map(|d| d.workers_dead()),
                queued: demand.as_ref().map(|d| d.queued_work()),
            }
        };
        let prev = self.last_poll.clone().unwrap_or_default();
        let (lines, merged) = compare(&prev, &cur);
        self.last_poll = Some(merged);
        if lines.is_empty() {
            return;
        }
        let reason = crate::text::clip(&format!("poll: {}", lines.join("; ")), 400);
        match self.ring_event(1, "poll", &reason, None, now) {
            Ok(_) => self.tally.polls_rung += 1,
            Err(e) => {
                log::warn!("sim: poll event at {}: {e:#}", rfc3339(now));
                self.tally.trigger_errors += 1;
                // Seen again next minute.
                self.last_poll = Some(prev);
            }
        }
    }
}
