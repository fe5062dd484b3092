//! The simulated outside services behind the real traits: vast.ai ([`SimVast`], with the
//! HTTP client's retry behaviour on 429s modelled on the simulated clock), Curio
//! ([`SimCurio`], read as the HarmonyDB probe reads it), an LLM that never answers
//! ([`OutageLlm`]) and the real model on simulated time ([`TimedLlm`]). Each advances the
//! world to the clock's time before answering.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::world::World;
use crate::clock::Clock;
use crate::demand::{Demand, DemandProbe};
use crate::llm::{AttemptFailure, ChatRequest, ChatResponse, LlmClient, LlmError};
use crate::vast::{CreateRequest, Instance, Offer, OfferQuery, VastClient, VastError};

/// Attempts per call, the first backoff and the call's budget in exchange timeouts: the HTTP
/// client's own (src/vast/http.rs).
use crate::vast::http::{FIRST_BACKOFF, MAX_ATTEMPTS as ATTEMPTS};
const CREATE_SPACING: Duration = Duration::from_millis(4_500);

pub type SharedWorld = Arc<Mutex<World>>;

pub fn lock(world: &SharedWorld) -> MutexGuard<'_, World> {
    world.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct SimVast {
    pub world: SharedWorld,
    pub clock: Arc<dyn Clock>,
    /// When this client last sent a create: creates are spaced by vast.ai's interval, as
    /// the HTTP client's create gate does.
    pub last_create: Mutex<Option<i64>>,
    /// `vast.timeout_secs`: a call and its retries fit in `vast::http::call_budget_of` of it, as
    /// the HTTP client's do (a retry only when its wait and a whole exchange still fit).
    pub timeout: Duration,
}

impl SimVast {
    pub fn new(world: SharedWorld, clock: Arc<dyn Clock>, timeout: Duration) -> SimVast {
        SimVast {
            world,
            clock,
            last_create: Mutex::new(None),
            timeout,
        }
    }
}

impl SimVast {
    /// One API call with the client's 429 handling: wait what the answer implies (vast.ai's
    /// create penalty included) on the simulated clock and retry, then give up.
    fn call<T>(
        &self,
        create: bool,
        f: impl Fn(&mut World) -> Result<T, VastError>,
    ) -> Result<T, VastError> {
        let mut backoff = FIRST_BACKOFF;
        let mut deadline: Option<i64> = None;
        for attempt in 1..=ATTEMPTS {
            if create {
                let last = *self.last_create.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(prev) = last {
                    let due = prev + CREATE_SPACING.as_millis() as i64;
                    let now = self.clock.now_ms();
                    if now < due {
                        self.clock.sleep(Duration::from_millis((due - now) as u64));
                    }
                }
                *self.last_create.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(self.clock.now_ms());
            }
            let budget = crate::vast::http::call_budget_of(self.timeout, create).as_millis() as i64;
            let deadline = *deadline.get_or_insert_with(|| self.clock.now_ms() + budget);
            let limited = {
                let mut w = lock(&self.world);
                let now = self.clock.now_ms();
                w.advance(now);
                match w.vast.rate_limited(create, now) {
                    None => return f(&mut w),
                    Some(text) => text,
                }
            };
            // The lock is released: the clock's sleep lets the outside world move on.
            let wait = crate::vast::http::wait_after_429(None, &limited, create, backoff);
            let fits = self.clock.now_ms() + (wait + self.timeout).as_millis() as i64 <= deadline;
            if attempt == ATTEMPTS || !fits {
                return Err(VastError::RateLimited(format!(
                    "{limited} (after {attempt} attempt(s))"
                )));
            }
            self.clock.sleep(wait);
            backoff *= 2;
        }
        unreachable!("the loop returns on its last attempt")
    }
}

impl VastClient for SimVast {
    fn search_offers(&self, query: &OfferQuery) -> Result<Vec<Offer>, VastError> {
        self.call(false, |w| Ok(w.vast.search(query)))
    }

    fn create_instance(&self, req: &CreateRequest) -> Result<u64, VastError> {
        // The worker image names its Curio machine after CURIO_NODE_NAME (docs/worker-image.md);
        // the launch sets it to the label unless [vast.env] sets it.
        let name = req
            .env
            .get(crate::config::NODE_NAME_ENV)
            .or_else(|| req.env.get(crate::config::LABEL_ENV))
            .unwrap_or(&req.label)
            .clone();
        let now = self.clock.now_ms();
        self.call(true, |w| {
            w.vast.create_bid(req.offer_id, &name, now, req.bid_price)
        })
    }

    fn list_instances(&self) -> Result<Vec<Instance>, VastError> {
        self.call(false, |w| Ok(w.vast.list()))
    }

    fn show_instance(&self, id: u64) -> Result<Option<Instance>, VastError> {
        self.call(false, |w| Ok(w.vast.show(id)))
    }

    fn stop_instance(&self, id: u64) -> Result<(), VastError> {
        let now = self.clock.now_ms();
        self.call(false, |w| w.stop(id, now))
    }

    /// A stopped or outbid instance boots again (a minute or two, then its worker starts).
    fn start_instance(&self, id: u64) -> Result<(), VastError> {
        let now = self.clock.now_ms();
        self.call(false, |w| w.vast.start(id, now))
    }

    /// A new bid: an outbid instance resumes at it.
    fn change_bid(&self, id: u64, price: f64) -> Result<(), VastError> {
        let now = self.clock.now_ms();
        self.call(false, |w| w.vast.change_bid(id, price, now))
    }

    fn destroy_instance(&self, id: u64) -> Result<(), VastError> {
        let now = self.clock.now_ms();
        self.call(false, |w| w.destroy(id, now))
    }

    fn label_instance(&self, id: u64, label: &str) -> Result<(), VastError> {
        self.call(false, |w| w.vast.label(id, label))
    }

    fn instance_logs(&self, id: u64, tail: u32) -> Result<String, VastError> {
        self.call(false, |w| w.vast.logs(id, tail))
    }
}

/// FIL/USD from the scenario's price path at the clock's time (`price.fil_usd_command` stands
/// for it in the sim's config).
pub struct SimFilUsd {
    pub world: SharedWorld,
    pub clock: Arc<dyn Clock>,
}

impl crate::price::FilUsdSource for SimFilUsd {
    fn fil_usd(&self) -> anyhow::Result<f64> {
        let w = lock(&self.world);
        w.fil_usd(self.clock.now_ms())
            .ok_or_else(|| anyhow::anyhow!("the scenario models no price ([price] unset)"))
    }
}

pub struct SimCurio {
    pub world: SharedWorld,
    pub clock: Arc<dyn Clock>,
    /// `demand.worker_alive_secs` in ms: heartbeats older than this are not live.
    pub alive_ms: i64,
}

impl DemandProbe for SimCurio {
    fn probe(&self) -> anyhow::Result<Demand> {
        let mut w = lock(&self.world);
        let now = self.clock.now_ms();
        w.advance(now);
        if w.curio.probe_down(now) {
            anyhow::bail!("HarmonyDB 10.0.0.5:5433: connection refused (simulated outage)");
        }
        Ok(w.curio.demand(now, self.alive_ms))
    }
}

/// An LLM that never answers: each turn takes the whole retry budget and gives up, as the
/// HTTP client does against a dead endpoint.
pub struct OutageLlm {
    pub clock: Arc<dyn Clock>,
    pub budget: Duration,
}

impl LlmClient for OutageLlm {
    fn chat(&self, _req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.clock.sleep(self.budget);
        Err(LlmError::GaveUp {
            attempts: 4,
            elapsed_secs: self.budget.as_secs(),
            last: AttemptFailure::Status {
                status: 503,
                message: "upstream connect error (simulated outage)".into(),
            },
        })
    }
}

/// The real model (`sim --llm`) on simulated time: each call takes as long on the simulated
/// clock as it took for real (its wall time, retries included), or `fixed` (`--llm-latency`),
/// so the run's deadline, the turn budget and the reaction checks meet the model's speed.
/// The outside world moves on meanwhile (the clock's sleep fires what falls due).
pub struct TimedLlm {
    pub inner: Arc<dyn LlmClient>,
    pub clock: Arc<dyn Clock>,
    pub fixed: Option<Duration>,
}

impl LlmClient for TimedLlm {
    fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        timed(self.clock.as_ref(), self.fixed, || self.inner.chat(req))
    }
}

/// Run `f`, then sleep on `clock` for `fixed`, or for as long as `f` took for real.
fn timed<T>(clock: &dyn Clock, fixed: Option<Duration>, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    clock.sleep(fixed.unwrap_or_else(|| started.elapsed()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::sim::outside::SimClock;

    #[test]
    fn a_model_call_takes_its_real_latency_or_the_fixed_one_in_simulated_time() {
        let clock = SimClock::new(Arc::new(ManualClock::new(1_000_000)));
        // The real clock's sleep: the call's wall time is what is measured.
        let answer = timed(&clock, None, || {
            crate::clock::SystemClock.sleep(Duration::from_millis(30));
            "answer"
        });
        assert_eq!(answer, "answer");
        let took = clock.now_ms() - 1_000_000;
        assert!((30..5_000).contains(&took), "{took} ms");
        let before = clock.now_ms();
        timed(&clock, Some(Duration::from_secs(90)), || {
            crate::clock::SystemClock.sleep(Duration::from_millis(5))
        });
        assert_eq!(clock.now_ms() - before, 90_000);
    }

    /// In a storm that refuses every call, a create is tried as often as the HTTP client
    /// tries one: while the wait and a whole exchange fit the call's budget (3 x
    /// `vast.timeout_secs`), at most 4 times. At 20 s: at 0, 16.5 and 33 s (4.5 s and the
    /// 12 s penalty apart); a fourth, at 49.5 s, would end past 60.
    #[test]
    fn a_create_in_a_storm_is_tried_as_the_http_client_tries_it() {
        let text = "name = \"t\"\ndescription = \"t\"\nhours = 2\n[market]\nrate = [[0, 120]]\n[[vast_429]]\nat_hours = 0\nhours = 2\nshare = 1\n";
        let scenario = crate::sim::scenario::parse(text).unwrap();
        let attempts = |timeout_secs: u64| {
            let world = Arc::new(Mutex::new(World::new(&scenario, 1, 0, "fleetagent")));
            let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
            let vast = SimVast::new(world, clock, Duration::from_secs(timeout_secs));
            let req = CreateRequest {
                offer_id: 1,
                image: "i".into(),
                disk_gb: 10.0,
                label: "fleetagent-r1-aa".into(),
                env: Default::default(),
                onstart: None,
                bid_price: None,
                image_login: None,
            };
            match vast.create_instance(&req) {
                Err(VastError::RateLimited(m)) => m,
                other => panic!("{other:?}"),
            }
        };
        assert!(
            attempts(20).ends_with("(after 3 attempt(s))"),
            "{}",
            attempts(20)
        );
        assert!(
            attempts(120).ends_with("(after 4 attempt(s))"),
            "{}",
            attempts(120)
        );
        // A short vast.timeout_secs still leaves room for one retry after the 429 (it gave
        // up after the first: three 5 s exchanges are less than the 16.5 s wait).
        assert!(
            attempts(5).ends_with("(after 2 attempt(s))"),
            "{}",
            attempts(5)
        );
    }
}
