//! fcfs: first-come first-served by submission time, vLLM's default scheduling policy.

use super::KeyedQueues;
use expertsim_serving::serving::{QueuePolicy, QueuedRequest};

/// Admits the earliest-submitted request (ties: lower id).
#[derive(Debug, Default)]
pub struct Fcfs {
    queues: KeyedQueues<()>,
}

impl QueuePolicy for Fcfs {
    fn name(&self) -> &'static str {
        "fcfs"
    }
    fn reset(&mut self, n_engines: usize) {
        self.queues.reset(n_engines);
    }
    fn push(&mut self, engine: usize, request: QueuedRequest) {
        self.queues.push(engine, (), request);
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
    fn admits_in_submission_order() {
        let mut q = Fcfs::default();
        q.reset(1);
        for (id, t) in [(0, 30), (1, 10), (2, 20), (3, 10)] {
            q.push(0, request(id, t, 100.0 - id as f64, 1.0));
        }
        let order: Vec<u64> = std::iter::from_fn(|| q.pop(0, 0)).map(|r| r.id).collect();
        assert_eq!(order, vec![1, 3, 2, 0]);
    }
}
