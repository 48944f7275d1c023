//! ltr: Learning to Rank (Fu et al., NeurIPS 2024), the "LTR" baseline of Chimera: a small model
//! predicts the relative order of the requests' output lengths and each engine runs SJF on the
//! predicted rank. Simulated as SJF on `ln(predicted stage tokens) + noise * z` with `z` the
//! request's own standard normal draw: the ranking carries the length predictor's error plus the
//! ranker's extra `noise`.

use super::{KeyedQueues, OrderedF64};
use expertsim_serving::serving::{QueuePolicy, QueuedRequest};

/// Rank-based shortest job first.
#[derive(Debug)]
pub struct Ltr {
    noise: f64,
    queues: KeyedQueues<OrderedF64>,
}

impl Ltr {
    pub fn new(noise: f64) -> Ltr {
        Ltr {
            noise,
            queues: KeyedQueues::default(),
        }
    }

    /// The predicted rank score (lower runs first).
    pub fn score(&self, request: &QueuedRequest) -> f64 {
        request.predicted_stage_tokens.max(1e-9).ln() + self.noise * request.rank_noise
    }
}

impl QueuePolicy for Ltr {
    fn name(&self) -> &'static str {
        "ltr"
    }
    fn reset(&mut self, n_engines: usize) {
        self.queues.reset(n_engines);
    }
    fn push(&mut self, engine: usize, request: QueuedRequest) {
        let score = OrderedF64(self.score(&request));
        self.queues.push(engine, score, request);
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
    fn without_ranking_noise_it_is_sjf_and_noise_reorders() {
        let mut exact = Ltr::new(0.0);
        let mut noisy = Ltr::new(5.0);
        exact.reset(1);
        noisy.reset(1);
        for (id, tokens, z) in [(0, 400.0, -1.0), (1, 100.0, 1.0), (2, 200.0, 0.0)] {
            let mut r = request(id, id, tokens, 1.0);
            r.rank_noise = z;
            exact.push(0, r);
            noisy.push(0, r);
        }
        let order = |q: &mut Ltr| -> Vec<u64> {
            std::iter::from_fn(|| q.pop(0, 0)).map(|r| r.id).collect()
        };
        assert_eq!(order(&mut exact), vec![1, 2, 0]);
        assert_eq!(order(&mut noisy), vec![0, 2, 1]);
    }
}
