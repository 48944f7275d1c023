//! sjf: shortest job first on the predicted output tokens of the request itself (its own stage),
//! without workflow awareness: the "SJF" of Chimera's queueing study (Figure 3).

use super::{KeyedQueues, OrderedF64};
use expertsim_serving::serving::{QueuePolicy, QueuedRequest};

/// Admits the request with the fewest predicted stage output tokens (ties: earlier, lower id).
#[derive(Debug, Default)]
pub struct Sjf {
    queues: KeyedQueues<OrderedF64>,
}

impl QueuePolicy for Sjf {
    fn name(&self) -> &'static str {
        "sjf"
    }
    fn reset(&mut self, n_engines: usize) {
        self.queues.reset(n_engines);
    }
    fn push(&mut self, engine: usize, request: QueuedRequest) {
        self.queues
            .push(engine, OrderedF64(request.predicted_stage_tokens), request);
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
    fn admits_the_shortest_stage_first_ignoring_the_workflow_total() {
        let mut q = Sjf::default();
        q.reset(1);
        q.push(0, request(0, 0, 50.0, 10.0));
        q.push(0, request(1, 1, 20.0, 900.0));
        q.push(0, request(2, 2, 20.0, 30.0));
        q.push(0, request(3, 3, 5.0, 800.0));
        let order: Vec<u64> = std::iter::from_fn(|| q.pop(0, 0)).map(|r| r.id).collect();
        assert_eq!(order, vec![3, 1, 2, 0]);
    }
}
