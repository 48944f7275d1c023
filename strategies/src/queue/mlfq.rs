//! mlfq: a multi-level feedback queue on the workflow's attained service, the "MLFQ" baseline of
//! Chimera (after Autellix's program-level least-attained-service scheduling): a workflow starts in
//! the top level and is demoted as its earlier stages generate tokens; level `k >= 1` holds
//! workflows that have generated at least `base_quantum_tokens * 2^(k-1)` tokens (quanta double
//! per level), up to `levels - 1`. Within a level, first-come first-served. Demotion is applied at
//! stage boundaries: the simulated engines do not preempt a running stage.

use super::KeyedQueues;
use expertsim_serving::serving::{QueuePolicy, QueuedRequest};

/// Multi-level feedback queue on attained service.
#[derive(Debug)]
pub struct Mlfq {
    levels: u32,
    base_quantum_tokens: u64,
    queues: KeyedQueues<u32>,
}

impl Mlfq {
    pub fn new(levels: u32, base_quantum_tokens: u64) -> Mlfq {
        Mlfq {
            levels: levels.max(1),
            base_quantum_tokens: base_quantum_tokens.max(1),
            queues: KeyedQueues::default(),
        }
    }

    /// The level of a workflow that has generated `attained` tokens.
    pub fn level(&self, attained: u64) -> u32 {
        let mut level = 0;
        let mut bound = self.base_quantum_tokens;
        while level + 1 < self.levels && attained >= bound {
            level += 1;
            bound = bound.saturating_mul(2);
        }
        level
    }
}

impl QueuePolicy for Mlfq {
    fn name(&self) -> &'static str {
        "mlfq"
    }
    fn reset(&mut self, n_engines: usize) {
        self.queues.reset(n_engines);
    }
    fn push(&mut self, engine: usize, request: QueuedRequest) {
        let level = self.level(request.attained_service);
        self.queues.push(engine, level, request);
    }
    fn pop(&mut self, engine: usize, _iteration: u64) -> Option<QueuedRequest> {
        self.queues.pop(engine)
    }
    fn peek(&mut self, engine: usize, _iteration: u64) -> Option<QueuedRequest> {
        self.queues.peek(engine)
    }
    fn len(&self, engine: usize) -> usize {
        self.queues.len(engine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::testutil::request;

    #[test]
    fn levels_double_and_saturate() {
        let q = Mlfq::new(4, 100);
        let levels: Vec<u32> = [0, 99, 100, 199, 200, 399, 400, 1_000_000]
            .iter()
            .map(|&a| q.level(a))
            .collect();
        assert_eq!(levels, vec![0, 0, 1, 1, 2, 2, 3, 3]);
    }

    #[test]
    fn less_attained_service_goes_first_then_fcfs() {
        let mut q = Mlfq::new(4, 100);
        q.reset(1);
        for (id, submitted, attained) in [(0, 0, 500), (1, 1, 0), (2, 2, 150), (3, 3, 0)] {
            let mut r = request(id, submitted, 1.0, 1.0);
            r.attained_service = attained;
            q.push(0, r);
        }
        let order: Vec<u64> = std::iter::from_fn(|| q.pop(0, 0)).map(|r| r.id).collect();
        assert_eq!(order, vec![1, 3, 2, 0]);
    }
}
