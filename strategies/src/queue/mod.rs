//! Chimera-family queue policies: which waiting request an engine admits next. One file per
//! policy, each a [`QueuePolicy`] built from its [`QueuePolicyConfig`] variant by [`build`]. All
//! keep one ordered map per engine keyed by the policy's priority with the submission time and the
//! request id breaking ties, so every order is total and deterministic. The maps hold keys and
//! small handles only; the requests themselves wait in a [`Slab`], stored once.

use expertsim_serving::serving::{QueuePolicy, QueuePolicyConfig, QueuedRequest};
use std::cmp::Ordering;
use std::collections::BTreeMap;

pub mod fcfs;
pub mod ltr;
pub mod mlfq;
pub mod sjf;
pub mod stjf;

use crate::batch::PolicyInfo;

/// The queue policy a scenario's `[queue]` table asks for.
pub fn build(config: &QueuePolicyConfig) -> Box<dyn QueuePolicy> {
    match config {
        QueuePolicyConfig::Fcfs => Box::new(fcfs::Fcfs::default()),
        QueuePolicyConfig::Sjf => Box::new(sjf::Sjf::default()),
        QueuePolicyConfig::Stjf {
            starvation_threshold,
            quantum,
        } => Box::new(stjf::Stjf::new(*starvation_threshold, *quantum)),
        QueuePolicyConfig::Mlfq {
            levels,
            base_quantum_tokens,
        } => Box::new(mlfq::Mlfq::new(*levels, *base_quantum_tokens)),
        QueuePolicyConfig::Ltr { noise } => Box::new(ltr::Ltr::new(*noise)),
    }
}

const fn queue(kind: &'static str, description: &'static str) -> PolicyInfo {
    PolicyInfo {
        family: "queue",
        kind,
        description,
    }
}

/// Every queue policy.
pub fn catalogue() -> Vec<PolicyInfo> {
    vec![
        queue(
            "fcfs",
            "first-come first-served by submission time (vLLM default)",
        ),
        queue(
            "sjf",
            "shortest job first on the request's predicted output tokens",
        ),
        queue(
            "stjf",
            "shortest total job first on the predicted remaining workflow tokens, with aging (Chimera)",
        ),
        queue(
            "mlfq",
            "multi-level feedback queue on the workflow's attained service (Autellix-style)",
        ),
        queue(
            "ltr",
            "learning to rank: SJF on a noisy predicted rank of the output length",
        ),
    ]
}

/// An `f64` ordered by `total_cmp`, for map keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OrderedF64(pub f64);
impl Eq for OrderedF64 {}
impl PartialOrd for OrderedF64 {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrderedF64 {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Waiting requests stored once, each at a small handle that stays put while it waits, so the
/// ordered maps move keys and handles instead of 96-byte requests. Freed handles are reused.
#[derive(Clone, Debug, Default)]
pub struct Slab {
    slots: Vec<QueuedRequest>,
    free: Vec<u32>,
}

impl Slab {
    /// Stores `request` and returns its handle.
    pub fn insert(&mut self, request: QueuedRequest) -> u32 {
        match self.free.pop() {
            Some(handle) => {
                self.slots[handle as usize] = request;
                handle
            }
            None => {
                self.slots.push(request);
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 waiting requests")
            }
        }
    }
    /// The request at `handle` (a handle `insert` returned and `take` has not freed).
    pub fn get(&self, handle: u32) -> &QueuedRequest {
        &self.slots[handle as usize]
    }
    /// The request at `handle`, whose handle is freed.
    pub fn take(&mut self, handle: u32) -> QueuedRequest {
        self.free.push(handle);
        self.slots[handle as usize]
    }
    /// Forgets every request.
    pub fn clear(&mut self) {
        self.slots.clear();
        self.free.clear();
    }
}

/// One ordered map of waiting requests per engine, keyed `(K, submission time, id)` with the
/// requests in one [`Slab`]: the shared machinery of the static-priority policies.
#[derive(Clone, Debug)]
pub struct KeyedQueues<K: Ord> {
    queues: Vec<BTreeMap<(K, u64, u64), u32>>,
    requests: Slab,
}

impl<K: Ord> Default for KeyedQueues<K> {
    fn default() -> Self {
        KeyedQueues {
            queues: Vec::new(),
            requests: Slab::default(),
        }
    }
}

impl<K: Ord> KeyedQueues<K> {
    pub fn reset(&mut self, n_engines: usize) {
        self.queues = (0..n_engines).map(|_| BTreeMap::new()).collect();
        self.requests.clear();
    }
    pub fn push(&mut self, engine: usize, key: K, request: QueuedRequest) {
        let key = (key, request.submitted.0, request.id);
        let handle = self.requests.insert(request);
        self.queues[engine].insert(key, handle);
    }
    pub fn pop(&mut self, engine: usize) -> Option<QueuedRequest> {
        let (_, handle) = self.queues[engine].pop_first()?;
        Some(self.requests.take(handle))
    }
    /// The request `pop` would return, left queued.
    pub fn peek(&self, engine: usize) -> Option<QueuedRequest> {
        let (_, &handle) = self.queues[engine].first_key_value()?;
        Some(*self.requests.get(handle))
    }
    pub fn len(&self, engine: usize) -> usize {
        self.queues[engine].len()
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use expertsim_serving::SimTime;
    use expertsim_serving::serving::QueuedRequest;

    /// A request with the given id, submission time (ns), predicted totals and stage tokens.
    pub fn request(id: u64, submitted: u64, stage_tokens: f64, total_tokens: f64) -> QueuedRequest {
        QueuedRequest {
            id,
            workflow: id,
            stage: 0,
            submitted: SimTime(submitted),
            workflow_arrival: SimTime(submitted),
            enqueued_iteration: 0,
            prompt_tokens: 100,
            predicted_stage_tokens: stage_tokens,
            predicted_total_tokens: total_tokens,
            attained_service: 0,
            rank_noise: 0.0,
            topic: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_kinds_deserialize_build_and_round_trip() {
        let infos = catalogue();
        assert_eq!(infos.len(), 5);
        for info in infos {
            let config: QueuePolicyConfig =
                serde_json::from_value(serde_json::json!({ "kind": info.kind }))
                    .unwrap_or_else(|e| panic!("{}: {e}", info.kind));
            assert_eq!(config.kind(), info.kind);
            let mut policy = build(&config);
            assert_eq!(policy.name(), info.kind);
            policy.reset(2);
            assert!(policy.is_empty(0) && policy.pop(1, 0).is_none());
            let back: QueuePolicyConfig =
                serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
            assert_eq!(back, config);
        }
        assert!(
            serde_json::from_value::<QueuePolicyConfig>(serde_json::json!({"kind": "lifo"}))
                .is_err()
        );
    }

    /// A long random run of pushes (ties in the key, pops pushed back), pops and peeks on two
    /// engines against a plain list searched for its least `(key, submission time, id)`: the
    /// same request every time, and freed handles are reused without mixing requests up.
    #[test]
    fn keyed_queues_pop_and_peek_what_a_search_of_a_list_does() {
        use rand::RngExt;
        let mut rng = expertsim_serving::rng::stream(7, "keyed-queues");
        let mut queues = KeyedQueues::<u32>::default();
        queues.reset(2);
        let mut lists: [Vec<(u32, QueuedRequest)>; 2] = [Vec::new(), Vec::new()];
        let least = |list: &Vec<(u32, QueuedRequest)>| {
            (0..list.len()).min_by_key(|&i| (list[i].0, list[i].1.submitted.0, list[i].1.id))
        };
        let (mut pops, mut pushed_back) = (0, 0);
        for id in 0..20_000u64 {
            let engine = rng.random_range(0..2usize);
            let key = rng.random_range(0..8u32);
            let r = testutil::request(id, rng.random_range(0..500), 1.0, id as f64);
            queues.push(engine, key, r);
            lists[engine].push((key, r));
            for _ in 0..rng.random_range(0..3) {
                let engine = rng.random_range(0..2usize);
                let expected = least(&lists[engine]).map(|i| lists[engine][i].1);
                assert_eq!(queues.peek(engine), expected);
                let popped = queues.pop(engine);
                assert_eq!(popped, expected, "request {id}");
                let Some(i) = least(&lists[engine]) else {
                    continue;
                };
                pops += 1;
                let (key, r) = lists[engine].swap_remove(i);
                if rng.random_bool(0.2) {
                    pushed_back += 1;
                    queues.push(engine, key, r);
                    lists[engine].push((key, r));
                }
            }
            for (engine, list) in lists.iter().enumerate() {
                assert_eq!(queues.len(engine), list.len());
            }
        }
        assert!(pops > 15_000 && pushed_back > 2_000, "{pops} pops");
        assert!(lists.iter().all(|list| list.len() > 100));
    }

    /// Every policy hands back each pushed request exactly once, per engine.
    #[test]
    fn every_policy_conserves_requests() {
        for info in catalogue() {
            let config: QueuePolicyConfig =
                serde_json::from_value(serde_json::json!({ "kind": info.kind })).unwrap();
            let mut policy = build(&config);
            policy.reset(2);
            for id in 0..50u64 {
                let mut r = testutil::request(id, id * 7 % 13, (id * 31 % 17) as f64 + 1.0, 5.0);
                r.attained_service = id * 97 % 1000;
                r.rank_noise = ((id * 13 % 7) as f64 - 3.0) / 3.0;
                policy.push((id % 2) as usize, r);
            }
            assert_eq!(policy.len(0) + policy.len(1), 50);
            let mut seen = vec![];
            for engine in 0..2 {
                while let Some(r) = policy.pop(engine, 10) {
                    assert_eq!(r.id % 2, engine as u64, "{}", info.kind);
                    seen.push(r.id);
                }
            }
            seen.sort_unstable();
            assert_eq!(seen, (0..50).collect::<Vec<_>>(), "{}", info.kind);
        }
    }
}
