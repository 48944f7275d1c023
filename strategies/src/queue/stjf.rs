//! stjf: Chimera's Shortest Total Job First with aging (chimera.txt sections 3.4 and 3.7). The
//! priority is the length predictor's total remaining workflow tokens; the queue key is
//! `(starvation level, priority, submission time)`. A waiting request's starvation count is the
//! number of engine iterations since it was enqueued; each time it reaches the threshold S the
//! request is promoted one level (level `-floor(count / S)`), which sorts it ahead of every
//! request of a higher level. A request that has waited S iterations longer than another is
//! therefore always admitted first: waiting is bounded by S plus the drain time of the requests
//! enqueued before it.
//!
//! The paper's quantum Q demotes a promoted request after it has *run* for Q iterations, which
//! matters only where running requests can be preempted. The simulated engines run an admitted
//! request to completion, so Q is kept (and validated) for the scenario's fidelity but does not
//! change any decision here (docs/chimera.md).

use super::{OrderedF64, Slab};
use expertsim_serving::serving::{QueuePolicy, QueuedRequest};
use std::collections::BTreeMap;

type PriorityKey = (OrderedF64, u64, u64);

#[derive(Clone, Debug, Default)]
struct EngineQueue {
    /// Every waiting request by (priority, submission ns, id) -> its handle in `Stjf::requests`.
    by_priority: BTreeMap<PriorityKey, u32>,
    /// The same requests by (enqueued iteration, id) -> their handle.
    by_age: BTreeMap<(u64, u64), u32>,
    /// While some request is promoted: the promoted levels' keys, a `Promoted` for each level
    /// chosen at since the last that ended (`last` decreasing: the most promoted level last).
    promoted: Vec<Promoted>,
    /// The iteration of the last choice, its key and handle, until the queue next changes: a
    /// `pop` after a `peek` at the same iteration takes it without choosing again.
    choice: Option<(u64, PriorityKey, u32)>,
}

/// The keys of the requests enqueued at or before `last`: a promoted level's prefix of
/// `by_age` as it was at the iteration it was last chosen at. As the iterations pass a level's
/// prefix only grows, so the requests that join it are added once each instead of the level
/// being searched at every choice; a level kept below the most promoted one (a larger prefix)
/// is kept up to date by `push` and `pop`, and is extended again once the levels above it
/// have been admitted, instead of built again.
#[derive(Clone, Debug)]
struct Promoted {
    last: u64,
    /// The level's keys -> their handles.
    keys: BTreeMap<PriorityKey, u32>,
}

/// Shortest total job first with Chimera's aging.
#[derive(Debug)]
pub struct Stjf {
    /// S, in engine iterations; 0 disables aging (pure STJF).
    starvation_threshold: u64,
    /// Q, in engine iterations (see the module note).
    quantum: u64,
    queues: Vec<EngineQueue>,
    /// Every engine's waiting requests, stored once; the queues hold their handles.
    requests: Slab,
}

impl Stjf {
    pub fn new(starvation_threshold: u64, quantum: u64) -> Stjf {
        Stjf {
            starvation_threshold,
            quantum,
            queues: Vec::new(),
            requests: Slab::default(),
        }
    }

    /// The paper's quantum Q (inert without preemption).
    pub fn quantum(&self) -> u64 {
        self.quantum
    }

    /// The starvation level magnitude of a request enqueued at `enqueued` at `iteration`.
    fn promotions(&self, enqueued: u64, iteration: u64) -> u64 {
        match self.starvation_threshold {
            0 => 0,
            s => iteration.saturating_sub(enqueued) / s,
        }
    }
}

fn key(request: &QueuedRequest) -> PriorityKey {
    (
        OrderedF64(request.predicted_total_tokens),
        request.submitted.0,
        request.id,
    )
}

impl QueuePolicy for Stjf {
    fn name(&self) -> &'static str {
        "stjf"
    }
    fn reset(&mut self, n_engines: usize) {
        self.queues = vec![EngineQueue::default(); n_engines];
        self.requests.clear();
    }
    fn push(&mut self, engine: usize, request: QueuedRequest) {
        let q = &mut self.queues[engine];
        q.choice = None;
        let k = key(&request);
        let joins = |p: &&mut Promoted| request.enqueued_iteration <= p.last;
        let handle = self.requests.insert(request);
        for p in q.promoted.iter_mut().take_while(joins) {
            p.keys.insert(k, handle);
        }
        q.by_age
            .insert((request.enqueued_iteration, request.id), handle);
        q.by_priority.insert(k, handle);
    }
    fn pop(&mut self, engine: usize, iteration: u64) -> Option<QueuedRequest> {
        let (chosen, handle) = self.chosen(engine, iteration)?;
        let q = &mut self.queues[engine];
        q.choice = None;
        q.by_priority.remove(&chosen);
        let request = self.requests.take(handle);
        q.by_age.remove(&(request.enqueued_iteration, request.id));
        let held = |p: &&mut Promoted| request.enqueued_iteration <= p.last;
        for p in q.promoted.iter_mut().take_while(held) {
            p.keys.remove(&chosen);
        }
        Some(request)
    }
    fn peek(&mut self, engine: usize, iteration: u64) -> Option<QueuedRequest> {
        let (_, handle) = self.chosen(engine, iteration)?;
        Some(*self.requests.get(handle))
    }
    fn len(&self, engine: usize) -> usize {
        self.queues[engine].by_priority.len()
    }
}

impl Stjf {
    /// `choose`'s answer, kept until the queue changes: only `push` and `pop` change a queue,
    /// so a key chosen at the same iteration since is the one `choose` would return again.
    fn chosen(&mut self, engine: usize, iteration: u64) -> Option<(PriorityKey, u32)> {
        match self.queues[engine].choice {
            Some((at, chosen, handle)) if at == iteration => Some((chosen, handle)),
            _ => {
                let (chosen, handle) = self.choose(engine, iteration)?;
                self.queues[engine].choice = Some((iteration, chosen, handle));
                Some((chosen, handle))
            }
        }
    }

    /// The key and handle of the request `engine` admits next at `iteration`, if any waits.
    fn choose(&mut self, engine: usize, iteration: u64) -> Option<(PriorityKey, u32)> {
        let (&(oldest, _), _) = self.queues[engine].by_age.first_key_value()?;
        let top_level = self.promotions(oldest, iteration);
        let q = &mut self.queues[engine];
        if top_level == 0 {
            q.promoted.clear();
            return q.by_priority.first_key_value().map(|(k, h)| (*k, *h));
        }
        // The most promoted requests are the oldest ones: a prefix of `by_age`, those enqueued
        // at or before `last`. The kept level with the longest prefix not past `last` is
        // extended by the requests enqueued since its own `last` (the levels kept above it are
        // shorter prefixes of it: dropped); with none, the level's oldest requests were just
        // promoted once more, and its prefix is read whole.
        let last = iteration - top_level * self.starvation_threshold;
        let by_age = &q.by_age;
        let requests = &self.requests;
        let key_of = |(_, &handle): (_, &u32)| (key(requests.get(handle)), handle);
        match q.promoted.iter().position(|p| p.last <= last) {
            Some(j) => {
                q.promoted.truncate(j + 1);
                let p = &mut q.promoted[j];
                if p.last < last {
                    let joined = by_age.range((p.last + 1, 0)..=(last, u64::MAX));
                    p.keys.extend(joined.map(key_of));
                    p.last = last;
                }
            }
            None => {
                let keys = by_age.range(..=(last, u64::MAX)).map(key_of).collect();
                q.promoted.push(Promoted { last, keys });
            }
        }
        let p = q.promoted.last().expect("kept above");
        let (&chosen, &handle) = p
            .keys
            .first_key_value()
            .expect("the oldest request is at the top level");
        Some((chosen, handle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::testutil::request;
    use rand::RngExt;

    /// With an oracle predictor (priority = true remaining total) and no aging, STJF admits in
    /// exactly the order of the true remaining totals.
    #[test]
    fn oracle_stjf_orders_exactly_by_true_remaining_total() {
        let mut rng = expertsim_serving::rng::stream(1, "test");
        let mut q = Stjf::new(0, 64);
        q.reset(1);
        let mut truths = vec![];
        for id in 0..500u64 {
            let truth = rng.random_range(1..5_000u64) as f64;
            truths.push(truth);
            let mut r = request(id, rng.random_range(0..1_000), 1.0, truth);
            r.enqueued_iteration = rng.random_range(0..100);
            q.push(0, r);
        }
        let popped: Vec<f64> = std::iter::from_fn(|| q.pop(0, 1_000_000))
            .map(|r| r.predicted_total_tokens)
            .collect();
        truths.sort_by(f64::total_cmp);
        assert_eq!(popped, truths);
    }

    /// One engine admitting one request per iteration while a short request arrives every
    /// iteration and a long one waits: without aging the long request starves as long as the
    /// stream lasts; with threshold S it is admitted within S + 1 iterations, and no request of
    /// the stream waits longer than that either.
    #[test]
    fn aging_bounds_waiting_while_others_keep_arriving() {
        let threshold = 20;
        let run = |s: u64| -> (u64, u64) {
            let mut q = Stjf::new(s, 4);
            q.reset(1);
            let mut long = request(0, 0, 1.0, 10_000.0);
            long.enqueued_iteration = 0;
            q.push(0, long);
            let mut long_wait = None;
            let mut max_wait = 0;
            for iteration in 0..2_000u64 {
                // Two short arrivals every other iteration keep one request waiting besides the
                // long one.
                if iteration % 2 == 0 {
                    for k in 0..2 {
                        let mut r = request(1 + iteration * 2 + k, iteration, 1.0, 10.0);
                        r.enqueued_iteration = iteration;
                        q.push(0, r);
                    }
                }
                let admitted = q.pop(0, iteration).unwrap();
                let wait = iteration - admitted.enqueued_iteration;
                if admitted.id == 0 {
                    long_wait = Some(wait);
                } else {
                    max_wait = max_wait.max(wait);
                }
            }
            (long_wait.unwrap_or(u64::MAX), max_wait)
        };
        let (starved, _) = run(0);
        assert_eq!(starved, u64::MAX, "without aging the long request starves");
        let (long_wait, max_short_wait) = run(threshold);
        assert!(
            long_wait <= threshold + 1,
            "long request waited {long_wait}"
        );
        assert!(max_short_wait <= threshold + 1, "{max_short_wait}");
    }

    /// Against a search of every waiting request (the most promoted level, then the least
    /// priority key: the pop's definition): random pushes, pops pushed back (as a replica does
    /// with a request it cannot admit) and pops at random iterations, some enqueued out of
    /// order, give the same request every time, and `peek` gives it too. S = 200: the top level
    /// is 0, 1 and 2 in turn, so the kept level is dropped, extended, built again, and pushed
    /// back requests join it.
    #[test]
    fn the_kept_level_pops_what_a_search_of_the_queue_does() {
        let threshold = 200;
        let mut rng = expertsim_serving::rng::stream(5, "stjf-blocks");
        let mut q = Stjf::new(threshold, 4);
        q.reset(2);
        let mut waiting: Vec<QueuedRequest> = Vec::new();
        let (mut iteration, mut promoted, mut twice) = (0u64, 0, 0);
        for id in 0..6_000u64 {
            iteration += rng.random_range(0..3);
            let mut r = request(id, id * 7, 1.0, rng.random_range(1..400u64) as f64);
            r.enqueued_iteration = iteration.saturating_sub(rng.random_range(0..3));
            q.push(0, r);
            waiting.push(r);
            for _ in 0..rng.random_range(0..3) {
                let level = |r: &QueuedRequest| {
                    (iteration.saturating_sub(r.enqueued_iteration)) / threshold
                };
                let top = waiting.iter().map(level).max();
                let expected = waiting
                    .iter()
                    .filter(|r| Some(level(r)) == top)
                    .min_by_key(|r| key(r))
                    .map(|r| r.id);
                promoted += usize::from(top > Some(0));
                twice += usize::from(top > Some(1));
                assert_eq!(q.peek(0, iteration).map(|r| r.id), expected);
                let popped = q.pop(0, iteration);
                assert_eq!(popped.map(|r| r.id), expected, "iteration {iteration}");
                let Some(popped) = popped else { break };
                if rng.random_bool(0.3) {
                    q.push(0, popped);
                } else {
                    waiting.retain(|r| r.id != popped.id);
                }
            }
            assert_eq!(q.len(0), waiting.len());
        }
        assert!(
            promoted > 1_000 && twice > 10 && waiting.len() > 50,
            "{promoted} promoted pops, {twice} twice"
        );
    }

    /// A push between a peek and a pop at the same iteration: the pop returns the pushed
    /// request when it is better, not the one peeked.
    #[test]
    fn a_push_after_a_peek_is_seen_by_the_pop() {
        let mut q = Stjf::new(10, 4);
        q.reset(1);
        q.push(0, request(0, 0, 1.0, 50.0));
        assert_eq!(q.peek(0, 3).unwrap().id, 0);
        q.push(0, request(1, 1, 1.0, 5.0));
        assert_eq!(q.pop(0, 3).unwrap().id, 1);
        assert_eq!(q.pop(0, 3).unwrap().id, 0);
        assert!(q.pop(0, 3).is_none());
    }

    /// Request 0, long and enqueued at iteration 0, and request 1, short and enqueued at 5.
    fn old_long_and_new_short() -> (QueuedRequest, QueuedRequest) {
        let mut old_long = request(0, 0, 1.0, 1e9);
        old_long.enqueued_iteration = 0;
        let mut new_short = request(1, 5, 1.0, 1.0);
        new_short.enqueued_iteration = 5;
        (old_long, new_short)
    }

    /// A peek on one engine is not taken by a pop on another, nor by a pop on the same engine
    /// at a later iteration, when a promotion has changed the choice.
    #[test]
    fn a_peek_is_reused_only_by_its_engine_at_its_iteration() {
        let mut q = Stjf::new(10, 4);
        q.reset(2);
        let (old_long, new_short) = old_long_and_new_short();
        q.push(0, old_long);
        q.push(0, new_short);
        q.push(1, request(2, 0, 1.0, 7.0));
        assert_eq!(q.peek(0, 9).unwrap().id, 1);
        assert_eq!(q.pop(1, 9).unwrap().id, 2);
        assert!(q.pop(1, 9).is_none());
        // At iteration 12 the old request is promoted: the peek at 9 no longer holds.
        assert_eq!(q.pop(0, 12).unwrap().id, 0);
        assert_eq!(q.peek(0, 12).unwrap().id, 1);
        assert_eq!(q.pop(0, 12).unwrap().id, 1);
    }

    #[test]
    fn older_by_a_threshold_beats_any_priority() {
        let mut q = Stjf::new(10, 4);
        q.reset(1);
        let (old_long, new_short) = old_long_and_new_short();
        q.push(0, old_long);
        q.push(0, new_short);
        // At iteration 9 nobody is promoted: priority wins.
        assert_eq!(q.pop(0, 9).unwrap().id, 1);
        q.push(0, new_short);
        // At iteration 12 the old one is promoted (12 / 10 = 1), the new one not (7 / 10 = 0).
        assert_eq!(q.pop(0, 12).unwrap().id, 0);
        assert_eq!(q.len(0), 1);
    }
}
